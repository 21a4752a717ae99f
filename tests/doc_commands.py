"""The `litebert <verb> ...` command lines the documentation quotes, found and parsed by the verbs' own parsers.

A renamed or removed flag leaves a reader with a command that fails; this finds every quoted command (README,
docs/, the paper's reports, the verbs' --help epilogs, module docstrings) and parses it with the parser the verb
itself builds (`litebert.cli.verb_parser_of`), without running it. How the text is read:

* Markdown: every line of a shell fence (```bash, ```sh, ```shell, ```console or no language), the lines of an
  indented code block that begin with a command, and every inline code span outside fences. Other fences
  (```text output, ```python) are not commands; an inline span is a mention, so a trailing flag without its
  value (`litebert pretrain --config`) names the flag only.
* Plain text (docstrings, epilogs, a shell script's comments): inline code spans, and lines that begin with a
  command. A shell script's own lines are read as a fence's.
* Script commands (`python bench/x.py ...`, any runner) are found the same way; script_commands.py parses them.
* Shell: `\\` continues a line, `#` starts a comment, `;`, `&&`, `|`, `(`, redirections end a command;
  `time`, `do`, `VAR=value` in front of one are skipped; `VAR=value` assignments earlier in a fence are
  substituted (word-split, as the shell does).
* Placeholders (`$VAR`, `${VAR}`, `<name>`, ALL_CAPS words such as DIR) stand for a value the reader chooses:
  where the flag is typed (a number, a choice) a valid value stands in; `...` and `[optional prose]` are
  dropped, while `[--flag value]` is checked as if given.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from litebert.cli import VERBS, verb_parser_of
from litebert.errors import ConfigError
from litebert.finetune import FinetuneConfig
from litebert.runconfig import BUNDLED_CONFIGS
from litebert.training import sweep
from litebert.training.train_config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = ("", "bash", "sh", "shell", "console")
PLACEHOLDER = "@PLACEHOLDER@"  # what `<name>` becomes: shlex splits on "<" and ">"
RUNNERS = ("python", "python3", "$PY", "torchrun")  # what runs `-m litebert.cli VERB`
PREFIXES = ("time", "do", "then", "else", "exec", "env", "!", "{")
SCRIPT = r"(?:\./)?(?:bench|scripts)/[\w.-]+\.(?:py|sh)"  # a script of this repository, as the docs name one
# a script run by an interpreter (`OMP_NUM_THREADS=1 .venv/bin/python -W ignore bench/x.py`, `$PY ...`, `bash ...`)
SCRIPT_RUN = rf"(?:\w+=\S* )*(?:\S*python[\d.]*|\$\{{?PY\w*\}}?|bash|sh)(?: -[A-Za-z]+(?: [\w:.=-]+)?)*? {SCRIPT}"


@dataclass(frozen=True)
class Quoted:
    """One quoted command line (continuations joined): where it is, and whether it is a mention in prose."""
    source: str
    line: int
    text: str
    mention: bool = False
    variables: tuple[tuple[str, str], ...] = ()


def relative(path: Path) -> str:
    """A path as the failures name it: relative to the repository."""
    return str(path.resolve().relative_to(ROOT))


def markdown_quotes(path: Path) -> list[Quoted]:
    """Shell fences line by line (with the fence's assignments so far), and inline spans outside fences."""
    source, quotes, fence, variables, prose = relative(path), [], None, {}, []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        start, opening = i + 1, re.match(r"\s*```\s*(\S*)", lines[i])
        if opening:
            fence, variables = (opening.group(1) if fence is None else None), {}
            i += 1
            continue
        text = lines[i]
        while text.endswith("\\") and i + 1 < len(lines):  # a continued shell line
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        i += 1
        if fence is None and re.match(r" {4}", text) and _begins_with_command(text.strip(), prose=True):
            quotes.append(Quoted(source, start, text.strip()))  # a command in an indented code block
        elif fence is None:
            prose.append((start, text))
        elif fence in SHELL_FENCES:
            quotes.append(Quoted(source, start, text, variables=tuple(variables.items())))
            variables.update(_assignments(text))
    return quotes + _inline_spans(source, prose)


def text_quotes(text: str, source: str, first_line: int = 1) -> list[Quoted]:
    """Docstrings and epilogs: inline spans, and the lines that begin with a command."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].strip()
        i += 1
        if _begins_with_command(line.strip(), prose=True):
            found.append(Quoted(source, first_line + start, line.strip()))
    spans = [(first_line + n, line) for n, line in enumerate(lines)
             if not _begins_with_command(line.strip(), prose=True)]
    return found + _inline_spans(source, spans)


def docstring_quotes(path: Path) -> list[Quoted]:
    """A module docstring's quoted commands, at their line in the file."""
    module = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(module, clean=False)
    return text_quotes(doc, relative(path), module.body[0].lineno) if doc else []


def comment_quotes(path: Path) -> list[Quoted]:
    """A TOML recipe's or a shell script's comments (a recipe's header says how to make the data it trains on, a
    script's its usage), at their lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return text_quotes("\n".join(line.strip()[1:] if line.strip().startswith("#") else "" for line in lines),
                       relative(path))


def help_quotes(verb: str) -> list[Quoted]:
    """The examples in a verb's --help: its epilog, and its description where that is not the module docstring
    (which docstring_quotes reads at its line in the file)."""
    parser = parser_of(verb)
    module = sys.modules[VERBS[verb][0].split(":")[0]]
    texts = [parser.epilog or ""] + [parser.description or ""] * (parser.description != module.__doc__)
    return [q for text in texts for q in text_quotes(text, f"litebert {verb} --help")]


def shell_quotes(path: Path) -> list[Quoted]:
    """A shell script's lines, read as a fence's (with its variables so far; a heredoc's body is not shell), and
    the commands its comments quote (its usage)."""
    source, lines = relative(path), path.read_text(encoding="utf-8").splitlines()
    quotes, variables, heredoc, i = [], {}, None, 0
    while i < len(lines):
        start, text = i + 1, lines[i]
        i += 1
        if heredoc or text.lstrip().startswith("#"):
            heredoc = None if text.strip() == heredoc else heredoc
            continue
        while text.endswith("\\") and i < len(lines):
            text, i = text[:-1] + " " + lines[i].strip(), i + 1
        heredoc = opened.group(1) if (opened := re.search(r"<<-?\s*'?(\w+)'?", text)) else None
        quotes.append(Quoted(source, start, text, variables=tuple(variables.items())))
        variables.update(_assignments(text))
    return quotes + comment_quotes(path)


MARKDOWN = sorted({*ROOT.glob("*.md"), *ROOT.glob("bench/*.md"), *ROOT.glob("docs/**/*.md"),
                   *ROOT.glob("litebert/**/*.md")})
MODULES = {folder: sorted(ROOT.glob(f"{folder}/**/*.py")) for folder in ("litebert", "scripts", "bench")}
RECIPES = sorted({*ROOT.glob("litebert/configs/*.toml"), *ROOT.glob("docs/**/*.toml")})
SHELL = sorted(ROOT.glob("bench/*.sh"))
SOURCES = ([relative(p) for p in MARKDOWN + RECIPES + SHELL] + list(MODULES)
           + [f"litebert {verb} --help" for verb in VERBS])


def quotes_of(source: str) -> list[Quoted]:
    """The quoted commands of one of SOURCES: a file, a folder's module docstrings, or a verb's --help."""
    if source in MODULES:
        return [q for path in MODULES[source] for q in docstring_quotes(path)]
    if source.startswith("litebert "):
        return help_quotes(source.split()[1])
    reader = {".toml": comment_quotes, ".sh": shell_quotes}.get(Path(source).suffix, markdown_quotes)
    return reader(ROOT / source)


def _begins_with_command(text: str, prose: bool = False) -> bool:
    """Whether `text` starts with a command; in `prose` (a docstring's line) `litebert` must be followed by a verb
    or an option, since a sentence may begin with the library's name."""
    if re.match(rf"(?:\$ )?{SCRIPT_RUN}", text) or (not prose and re.match(rf"{SCRIPT} \S", text)):
        return True  # `python bench/x.py ...`; a span may leave the runner out (`bench/x.py --quick`)
    first = re.match(r"(?:\$ )?(litebert(?: (\S+)|$)|torchrun |python3? -m litebert)", text)
    return bool(first) and not (prose and first.group(2) and first.group(2) not in VERBS
                                and not first.group(2).startswith("-"))


def _inline_spans(source: str, lines: list[tuple[int, str]]) -> list[Quoted]:
    """Code spans that hold a command; a span may run over a line break (joined by a space)."""
    found, open_at, parts = [], None, []
    for number, line in lines:
        pieces = line.split("`")
        for k, piece in enumerate(pieces):
            if open_at is not None:
                parts.append(piece)
            if k < len(pieces) - 1:  # a backtick follows this piece
                if open_at is None:
                    open_at, parts = number, []
                else:
                    span = " ".join(p.strip() for p in parts)
                    if _begins_with_command(span):
                        found.append(Quoted(source, open_at, span, mention=True))
                    open_at = None
        if not line.strip():
            open_at = None  # a blank line ends a paragraph, and any span left open by a stray backtick
    return found


def _assignments(text: str) -> dict[str, str]:
    """`NAME=value` words that stand alone as a shell command (a fence's variables, a shell function's `local`
    ones); `$(...)` values are unknown."""
    found = {}
    for segment in segments(text):
        words = segment[1:] if segment[0] in ("local", "export", "readonly") else segment
        if "$(" in text or (len(words) == len(segment) and len(segment) != 1):
            continue  # an unknown value, or a command that only begins with an assignment (`A=1 cmd`)
        if words and all(re.fullmatch(r"[A-Za-z_]\w*=.*", word) for word in words):
            found.update(word.partition("=")[::2] for word in words)
    return found


def segments(text: str) -> list[list[str]]:
    """The simple commands of a shell line, as words: split at operators, comments and redirections gone."""
    text = re.sub(r"<([\w .:/-]+)>", PLACEHOLDER, _strip_comment(text))
    text = re.sub(r"(?<=\s)\d+(?=>)", "", text)  # the fd of `2>&1`
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        words = list(lexer)
    except ValueError as e:  # an unbalanced quote: the quote is broken, say so rather than guess
        return [["litebert", f"@UNPARSABLE@ {e}"]] if "litebert" in text else []
    segments, current = [], []
    for word in words:
        if re.fullmatch(r"[();<>|&]+", word):
            segments.append(current)
            current = []
        else:
            current.append(word)
    return [s for s in segments + [current] if s]


def _strip_comment(text: str) -> str:
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def commands(quoted: Quoted) -> list[list[str]]:
    """The litebert argv (verb first) of each command in a quoted line; other commands (make, pip) are not ours."""
    variables = dict(quoted.variables)
    found = []
    for words in map(command_words, segments(quoted.text)):
        if not words:
            continue
        if words[0] == "litebert":
            argv = words[1:]
        elif (words[0] in RUNNERS or words[0].endswith("/python")) and "-m" in words:
            module_at = words.index("-m") + 1
            if module_at >= len(words) or words[module_at].split(".")[0] != "litebert":
                continue
            argv = [f"-m {words[module_at]}"] + words[module_at + 1:]
        else:
            continue
        found.append(substitute(argv, variables))
    return found


def command_words(words: list[str]) -> list[str]:
    """A simple command's words from the command on: `time`, `do`, `VAR=value`, a `$ ` prompt skipped."""
    while words and (words[0] in PREFIXES or re.fullmatch(r"[A-Za-z_]\w*=.*", words[0])):
        words = words[1:]
    return words[1:] if words[:1] == ["$"] else words


def substitute(argv: list[str], variables: dict[str, str]) -> list[str]:
    """Known variables replaced (word-split when a word is the variable alone); `...` dropped unless it follows a
    flag (`--task ...`: fill_placeholders decides whether it is the flag's value); `[--flag value]` kept as if given
    and `[prose]` dropped."""
    words: list[str] = []
    for word in argv:
        whole = re.fullmatch(r"\$\{?(\w+)\}?", word)
        if whole and whole.group(1) in variables:
            words += shlex.split(variables[whole.group(1)])
        else:
            words.append(re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), word))
    out, group = [], None
    for word in words:
        opens, closes = group is None and word.startswith("["), group is not None or word.startswith("[")
        closes = closes and word.endswith("]")
        if opens:
            group = []
        bare = word.removeprefix("[") if opens else word
        bare = bare.removesuffix("]") if closes else bare
        kept = out if group is None else group
        if bare and (not bare.endswith("...") or (bare == "..." and kept[-1:] and kept[-1].startswith("-"))):
            kept.append(bare)
        if closes:
            out += group if group and group[0].startswith("-") else []
            group = None
    return out + (group or [])


def check(quoted: Quoted, argv: list[str]) -> str | None:
    """None if `argv` parses as `litebert` would parse it, else what is wrong, in argparse's words."""
    if argv and argv[0].startswith("-m "):
        module, argv = argv[0][3:], argv[1:]
        if module != "litebert.cli" and not (ROOT / module.replace(".", "/") / "__main__.py").is_file():
            return f"python -m {module} runs no CLI (there is no {module}/__main__.py): use -m litebert.cli"
    if not argv or argv[0] in ("-h", "--help", "-V", "--version"):
        return None
    verb = argv[0]
    if is_placeholder(verb.rstrip(":")):
        return None  # `litebert VERB: error: ...`, `litebert <verb> --help`: any verb
    if verb not in VERBS:
        return f"unknown verb {verb!r}"
    parser = parser_of(verb)
    args = fill_placeholders(parser, argv[1:], quoted.mention)
    try:
        runs = _single_runs(verb, args, quoted.mention)
    except ConfigError as e:
        return f"litebert {verb}: error: {e}"
    refused = [error for run in runs if (error := refusal(parser, run))]
    return refused[0] if refused else check_abbreviations(parser, args) or _check_config(args)


def refusal(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """argparse's own last line when `parser` refuses `argv` (what a reader of the docs would see), else None."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as e:
        if e.code:
            return stderr.getvalue().strip().splitlines()[-1]
    return None


def check_abbreviations(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """argparse takes `--vocab 8000` for --vocab-size, until a flag `--vocabulary` comes along: the documented
    command then fails without any doc changing, so the docs spell flags in full."""
    for word in args:
        flag = word.split("=")[0]
        full = [o for o in parser._option_string_actions if o.startswith(flag)] if flag.startswith("--") else []
        if full and flag not in full:
            return f"{flag} abbreviates {' or '.join(full)}: spell the flag in full"
    return None


def _single_runs(verb: str, args: list[str], mention: bool) -> list[list[str]]:
    """The command lines argparse sees: a finetune grid (--seeds, a flag with several values) is split first, as
    `litebert finetune` splits it, into its base and one line per swept value (each parsed as its run's flag)."""
    if verb != "finetune":
        return [args]
    if mention and args[-1:] == ["--seeds"]:
        args = args + ["1"]
    grid = sweep.split_argv(args, sweep.sweepable_fields(FinetuneConfig, TrainConfig))
    if grid is None:
        return [args]
    swept = [(name, value) for name, values in grid.axes.items() for value in values]
    return [grid.base] + [grid.base + [f"--{name.replace('_', '-')}", value]
                          for name, value in swept + [("seed", s) for s in grid.seeds]]


@functools.cache
def parser_of(verb: str) -> argparse.ArgumentParser:
    return verb_parser_of(verb)


def is_placeholder(word: str) -> bool:
    return word == "..." or PLACEHOLDER in word or "$" in word or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", word))


def fill_placeholders(parser: argparse.ArgumentParser, args: list[str], mention: bool) -> list[str]:
    """Each placeholder replaced by a value its option accepts (a choice, a number) where it is typed (`...` after a
    flag that wants a value is one; after any other flag it stands for more flags and goes); a mention's trailing
    flag given a value, since the prose names the flag and not a value for it."""
    options = parser._option_string_actions  # argparse has no public lookup of a flag's action
    positionals = [a for a in parser._actions if not a.option_strings]
    out, action, taken = [], None, 0
    for word in args:
        if word.startswith("-") and word.split("=")[0] in options:
            action, taken = options[word.split("=")[0]], 0
            out.append(word)
            continue
        if word == "..." and (action is None or action.nargs in (0, "?", "*") or taken):
            continue
        if action is None or action.nargs == 0 or (action.nargs is None and taken):
            action, taken = (positionals[0] if positionals else None), 0
        taken += 1
        out.append(_stand_in(action, word) if is_placeholder(word) else word)
    if mention and out and out[-1] in options and options[out[-1]].nargs != 0:
        out.append(_stand_in(options[out[-1]], PLACEHOLDER))
    return out


def _stand_in(action: argparse.Action | None, word: str) -> str:
    if action is None:
        return word
    if action.choices:
        return str(next(iter(action.choices)))
    try:
        action.type(word) if action.type else None
        return word
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return "1"


def _check_config(args: list[str]) -> str | None:
    """A `--config NAME` without a path must be a bundled recipe; a path into the repository must exist."""
    for i, word in enumerate(args):
        value = word.partition("=")[2] if word.startswith("--config=") else (
            args[i + 1] if word == "--config" and i + 1 < len(args) else None)
        if value is None or is_placeholder(value):
            continue
        if "/" not in value and "." not in value and not (BUNDLED_CONFIGS / f"{value}.toml").is_file():
            bundled = ", ".join(sorted(p.stem for p in BUNDLED_CONFIGS.glob("*.toml")))
            return f"--config {value}: no bundled recipe of that name (there are: {bundled})"
        if value.split("/")[0] in ("docs", "litebert", "tests", "bench", "scripts") and not (ROOT / value).exists():
            return f"--config {value}: no such file in the repository"
    return None
