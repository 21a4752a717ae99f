"""Every `litebert <verb> ...` command the documentation quotes parses with the verb's own parser.

A renamed or removed flag would otherwise leave a newcomer a command that fails. Sources: README.md, bench/ and
docs/ Markdown (the paper's reports' "Made by" commands included), the verbs' --help, the module docstrings
of litebert/, scripts/ and bench/, and the comments of the TOML recipes (bundled and docs/). How commands are found
and what placeholders stand for: tests/doc_commands.py. Nothing runs: each command is parsed as `litebert` would
parse it, and a `--config NAME` must be a bundled recipe.
"""

from pathlib import Path

import doc_commands as D
import pytest

from litebert.cli import VERBS, verb_parser_of

# Commands known not to parse, (source, line) -> why they stay. The paper's reports (docs/paper/*/report.md) record
# the command that made each grid, and `litebert reproduce` rewrites a report whenever its grid runs, so a report
# whose flag was renamed is fixed in its text (the rerun would write the new spelling); only a command that records
# something the CLI can no longer express would be listed here, with the reason. None is needed today.
KNOWN_STALE: dict[tuple[str, int], str] = {}


def _failures(quotes: list[D.Quoted]) -> list[str]:
    found = []
    for quoted in quotes:
        for argv in D.commands(quoted):
            error = D.check(quoted, argv)
            if error and (quoted.source, quoted.line) not in KNOWN_STALE:
                found.append(f"{quoted.source}:{quoted.line}: {error}\n    {quoted.text.strip()}")
    return found


@pytest.mark.parametrize("source", D.SOURCES)
def test_documented_commands_parse(source):
    failures = _failures(D.quotes_of(source))
    assert not failures, "documented commands that `litebert` would refuse:\n" + "\n".join(failures)


def test_known_stale_commands_are_still_stale():
    """An entry of KNOWN_STALE whose command parses again (or is gone) is taken out, so the list cannot rot."""
    for (source, line), why in KNOWN_STALE.items():
        quotes = [q for q in D.quotes_of(source) if q.line == line]
        assert any(D.check(q, argv) for q in quotes for argv in D.commands(q)), (source, line, why)


def test_the_readme_commands_are_found_as_a_shell_would_split_them():
    """The extraction itself: continuation lines, comments, torchrun, `...` and prose mentions (lines found by
    their text, so that the README can grow)."""
    lines = (D.ROOT / "README.md").read_text(encoding="utf-8").splitlines()

    def line_of(start: str, after: int = 0) -> int:
        return next(i for i, text in enumerate(lines, 1) if i > after and text.startswith(start))

    found = [(q.line, argv) for q in D.markdown_quotes(D.ROOT / "README.md") for argv in D.commands(q)]
    pretrain = ["pretrain", "--config", "paper_base", "--data", "out/data"]
    one = line_of("litebert pretrain --config paper_base")
    assert (one, pretrain) in found  # `# one process` is a comment
    assert (line_of("torchrun --nproc-per-node 8", one), ["-m litebert.cli", *pretrain]) in found
    assert (line_of("torchrun --nnodes 4", one), ["-m litebert.cli", *pretrain]) in found  # a `\` continuation
    assert (line_of("litebert pretrain ... --resume", one), ["pretrain", "--resume"]) in found  # `...`: the flags above
    quick = next(i for i, text in enumerate(lines, 1) if "`litebert demo --quick`" in text)
    assert (quick, ["demo", "--quick"]) in found  # an inline code span
    verbs = line_of("```text", line_of("The command line does the rest"))
    assert not [line for line, _ in found if verbs < line < line_of("```", verbs)]  # the ```text list is prose


@pytest.mark.parametrize("text, error", [
    ("litebert pretrain --config demo --data out/data --no-such-flag", "unrecognized arguments: --no-such-flag"),
    ("litebert finetune --model M --max-steps many", "argument --max-steps: invalid int value: 'many'"),
    ("litebert finetune --task T --seeds 1 2 --lr 1e-5 soon", "argument --lr: invalid float value: 'soon'"),
    ("litebert export --model DIR --format pdf", "argument --format: invalid choice: 'pdf'"),
    ("litebert tokenizer corpus.txt --out out/tok --vocab 8000", "--vocab abbreviates --vocab-size"),
    ("litebert pretrain --config paper_small", "--config paper_small: no bundled recipe"),
    ("litebert pretrain --config docs/figure1/missing.toml", "no such file in the repository"),
    ("litebert pretrian --help", "unknown verb 'pretrian'"),
    ("python -m litebert pretrain --help", "runs no CLI"),
])
def test_a_stale_command_fails_naming_what_argparse_says(text, error):
    quoted = D.Quoted("doc.md", 7, text)
    (argv,) = D.commands(quoted)
    assert error in (D.check(quoted, argv) or ""), D.check(quoted, argv)
    assert _failures([quoted])[0].startswith("doc.md:7: ")


@pytest.mark.parametrize("text", [
    "MODEL=out/m; litebert finetune --model $MODEL --task $TASK --max-length ${LEN} --precision <precision>",
    "litebert reproduce EXPERIMENT --out out/paper/x --seeds N   # any experiment",
    "litebert embed --model DIR --input sentences.txt --out emb.npy [--pooling mean] [training flags]",
    "time (for x in b c; do OMP_NUM_THREADS=1 litebert params --json & done; wait) 2>&1 | tee log.txt",
    "litebert finetune --seeds 1 2 3 --lr 1e-5 2e-5 --score-test",
])
def test_placeholders_and_shell_syntax_parse(text):
    quoted = D.Quoted("doc.md", 1, text)
    commands = D.commands(quoted)
    assert commands and all(D.check(quoted, argv) is None for argv in commands), commands


def test_mentions_in_prose_name_flags_without_values():
    mention = D.Quoted("doc.md", 1, "litebert pretrain --config", mention=True)
    assert D.check(mention, D.commands(mention)[0]) is None
    assert "expected one argument" in D.check(D.Quoted("doc.md", 1, "litebert pretrain --config"),
                                              ["pretrain", "--config"])


def test_commands_found_per_source():
    """Where the commands are: a source whose count falls to zero lost its commands to the extractor."""
    counts = {source: sum(len(D.commands(q)) for q in D.quotes_of(source)) for source in D.SOURCES}
    assert sum(counts.values()) >= 200, counts
    for source in ("README.md", "docs/sentence.md", "docs/paper/README.md", "litebert", "litebert export --help"):
        assert counts[source], source
    assert all(counts[D.relative(p)] for p in Path(D.ROOT / "docs/paper").glob("*/report.md"))


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_hands_over_its_parser_without_running(verb, capsys):
    assert verb_parser_of(verb).prog == f"litebert {verb}"  # built afresh, not the cached parser
    assert capsys.readouterr() == ("", "")  # neither its help printed nor any work done


def test_pretrain_help_names_every_bundled_recipe():
    """--config NAME takes any of litebert/configs/*.toml: a recipe added there is listed where users look."""
    epilog = D.parser_of("pretrain").epilog
    assert not [p.stem for p in D.BUNDLED_CONFIGS.glob("*.toml") if f"{p.stem} (" not in epilog], epilog
