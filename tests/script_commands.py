"""The `python bench/X.py ...` and `python scripts/X.py ...` commands the documentation quotes, parsed by each
script's own parser without doing the script's work.

The scripts build their parser inside `main()` (the bench scripts through bench/common.py's `base_parser`), so
there is no parser to take without calling main. This imports a script by path (its folder on sys.path, as when
it runs) and calls what its `if __name__ == "__main__":` block calls, with `ArgumentParser.parse_args` patched to
hand the parser over before it reads anything: nothing after the parse runs. That is only safe for a script
that builds its parser first, so the script's source is read beforehand: a statement at import time or in main
before the parse that is not building the parser is refused by name rather than run.

Commands are found by doc_commands (the same fences, spans, continuations and placeholders as `litebert`'s);
any runner counts (`python`, `.venv/bin/python -W ignore`, `$PY`, `OMP_NUM_THREADS=1 ...`), and a span may leave
it out (`bench/x.py --quick`, as the benchmark tables do). `bash bench/gpu_check.sh MODE` has no parser: its
modes are the labels of its `case`. Every script a doc names must exist, with or without a command.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import functools
import importlib.util
import re
import sys
from pathlib import Path
from unittest import mock

import doc_commands as D

from litebert.paper.experiments import EXPERIMENTS

NAMED = re.compile(rf"(?<![\w./-]){D.SCRIPT}(?![\w/])")  # a script named anywhere in a text
# A shell script's modes that take further words, and what those words must be: `gpu_check.sh paper sharing`
# passes them to `litebert reproduce` as experiments. Any other mode takes none.
MODE_ARGUMENTS = {("bench/gpu_check.sh", "paper"): EXPERIMENTS}
IMPORT_TIME_CALLS = ("sys.path.insert", "matplotlib.use")  # what a script may do at import: cheap, no output
BUILDING = re.compile(r"ArgumentParser|\w*parser|add_\w+|set_defaults")  # calls that build a parser


class ScriptError(Exception):
    """A script whose parser cannot be handed over without running it (or that has none to hand over)."""


class _Handover(Exception):
    """Raised by the patched parse_args with the parser, before it reads argv: main() stops there."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def script_commands(quoted: D.Quoted) -> list[tuple[str, list[str], bool]]:
    """(script, argv, whether a runner is given) of each script command in a quoted line, variables substituted
    (`$step --compile`). Without a runner (`bench/x.py --quick` in a table) the command is a reference to the
    flags that matter, and may leave out what the script requires."""
    variables, found = dict(quoted.variables), []
    for words in map(D.command_words, D.segments(quoted.text)):
        words = D.substitute(words, variables)
        at = next((i for i, word in enumerate(words) if re.fullmatch(D.SCRIPT, word)), None)
        if at is None or (at == 0 and len(words) == 1) or _is_placeholder(words[at]):
            continue  # no script, a script named without a command (existence is checked apart), `bench/SCRIPT.py`
        runner = at - 1
        while runner >= 0 and (words[runner].startswith("-") or (runner and words[runner - 1] in ("-W", "-X"))):
            runner -= 1  # the interpreter's own options: `python -W ignore scripts/x.py`
        if at == 0 or (runner >= 0 and _is_runner(words[runner])):
            found.append((words[at].removeprefix("./"), words[at + 1:], at > 0))
    return found


def _is_runner(word: str) -> bool:
    return bool(re.fullmatch(r"\S*python[\d.]*|\$\{?PY\w*.*|bash|sh", word))


def named_scripts(text: str, source: str, first_line: int = 1) -> list[tuple[str, int, str]]:
    """(source, line, script) for each script a text names (`bench/SCRIPT.py`, a placeholder, is none)."""
    return [(source, first_line + n, match.group(0).removeprefix("./"))
            for n, line in enumerate(text.splitlines()) for match in NAMED.finditer(line)
            if not _is_placeholder(match.group(0))]


def _is_placeholder(script: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", Path(script).stem))


def check_script(quoted: D.Quoted, script: str, argv: list[str], runner: bool = True) -> str | None:
    """None if `script` exists and its parser takes `argv` (placeholders standing in as for `litebert`, and
    without a `runner` the required flags too), else what is wrong, in argparse's words where it refuses."""
    missing = missing_script(script)
    if missing or script.endswith(".sh"):
        return missing or _check_modes(script, argv)
    try:
        parser = script_parser(script)
    except ScriptError as e:
        return str(e)
    args = D.fill_placeholders(parser, argv, quoted.mention)
    if not runner:
        given = {word.split("=")[0] for word in args}
        args += [word for action in parser._actions if action.required and action.option_strings
                 and given.isdisjoint(action.option_strings)
                 for word in D.fill_placeholders(parser, [action.option_strings[0], D.PLACEHOLDER], False)]
    return D.refusal(parser, args) or D.check_abbreviations(parser, args)


def missing_script(script: str) -> str | None:
    """None if the script exists; else its name, and the nearest scripts that do (a renamed one, likely)."""
    if (D.ROOT / script).is_file():
        return None
    folder = D.ROOT / Path(script).parent
    near = difflib.get_close_matches(script, [D.relative(p) for p in folder.glob(f"*{Path(script).suffix}")])
    return f"{script}: no such script" + (f" (did you mean {' or '.join(near)}?)" if near else "")


def _check_modes(script: str, argv: list[str]) -> str | None:
    """A shell script's first word is one of its `case` labels; only MODE_ARGUMENTS's modes take more words."""
    if not argv or D.is_placeholder(argv[0]):
        return None
    modes = shell_modes(script)
    if argv[0] not in modes:
        return f"{script}: no mode {argv[0]!r} (its modes: {', '.join(modes)})"
    allowed = MODE_ARGUMENTS.get((script, argv[0]), ())
    wrong = [word for word in argv[1:] if word not in allowed and not D.is_placeholder(word)]
    return f"{script} {argv[0]}: unexpected {' '.join(wrong)}" + (
        f" (one of: {', '.join(allowed)})" if allowed else "") if wrong else None


@functools.cache
def shell_modes(script: str) -> tuple[str, ...]:
    """The labels of the script's `case "${1...}" in` (its modes), `*` left out."""
    text = (D.ROOT / script).read_text(encoding="utf-8")
    body = re.search(r'^case "\$\{?1[^\n]*\n(.*?)^esac', text, re.M | re.S)
    labels = re.findall(r"^\s*([\w|-]+)\)", body.group(1), re.M) if body else []
    return tuple(mode for label in labels for mode in label.split("|"))


@functools.cache
def script_parser(script: str) -> argparse.ArgumentParser:
    """The parser the script's main() builds, taken as main() calls parse_args; ScriptError where it cannot be."""
    path = D.ROOT / script
    tree = ast.parse(path.read_text(encoding="utf-8"))
    entry = _entry_point(tree, script)
    _refuse_work_before_parsing(tree, entry, script)

    def hand_over(parser: argparse.ArgumentParser, *args, **kwargs):
        raise _Handover(parser)

    with _as_when_run(path), mock.patch.object(argparse.ArgumentParser, "parse_args", hand_over), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", hand_over):
        try:
            getattr(_load(path), entry)()
        except _Handover as handed:
            return handed.parser
    raise ScriptError(f"{script}: {entry}() returned without parsing its arguments")


def _entry_point(tree: ast.Module, script: str) -> str:
    """The module function the `if __name__ == "__main__":` block calls (main, usually)."""
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions:
                    return call.func.id
    raise ScriptError(f"{script}: no `if __name__ == \"__main__\":` block that calls a function of the script")


def _refuse_work_before_parsing(tree: ast.Module, entry: str, script: str) -> None:
    """What runs before the parser is handed over must only define, import and build the parser: a statement
    that does anything else at import time, or in `entry` before its parse_args, is named in a ScriptError."""
    for node in tree.body[1 if ast.get_docstring(tree) else 0:]:
        harmless = isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                                     ast.ClassDef, ast.Assign, ast.AnnAssign)) or (
            isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) in IMPORT_TIME_CALLS)
        if not harmless:
            raise ScriptError(f"{script}:{node.lineno}: runs `{_short(node)}` at import time; the parser "
                              "check imports the script, so move it into a function")
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)
    for statement in main.body:
        if any(isinstance(n, ast.Attribute) and n.attr in ("parse_args", "parse_known_args")
               for n in ast.walk(statement)):
            return
        value = statement.value if isinstance(statement, (ast.Assign, ast.Expr)) else None
        if not (isinstance(value, ast.Call) and BUILDING.fullmatch(ast.unparse(value.func).split(".")[-1])):
            raise ScriptError(f"{script}:{statement.lineno}: {entry}() runs `{_short(statement)}` before it "
                              "parses its arguments; parse first, so that a wrong flag costs nothing")
    raise ScriptError(f"{script}: {entry}() never calls parse_args: give the script an argparse parser, so that "
                      "--help and a mistyped flag are answered rather than run")


def _short(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0]
    return text if len(text) <= 60 else text[:57] + "..."


def _load(path: Path):
    """The script imported as a module by path (under _as_when_run)."""
    name = f"_documented_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the script is executed
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise ScriptError(f"{D.relative(path)}: cannot be imported here ({e})") from e
    return module


@contextlib.contextmanager
def _as_when_run(path: Path):
    """The script's folder first on sys.path and the script as sys.argv[0] (its parser's prog), as when Python
    runs it; afterwards sys.path is as it was and the modules imported from that folder (the script,
    bench/common.py, a sibling script) are forgotten, so that `common` or `inference` is no module of the tests."""
    folder, before, path_before = str(path.parent), set(sys.modules), list(sys.path)
    sys.path.insert(0, folder)
    try:
        with mock.patch.object(sys, "argv", [D.relative(path)]):
            yield
    finally:
        sys.path[:] = path_before  # the folder, and what the script added (bench/common.py puts the checkout)
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(folder + "/"):
                del sys.modules[name]
