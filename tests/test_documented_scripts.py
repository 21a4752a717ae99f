"""Every `python bench/X.py ...` / `python scripts/X.py ...` command the documentation quotes parses with the
script's own parser, and every script a doc names exists.

A renamed bench script or flag otherwise leaves the reader (or a GPU session's `bench/gpu_check.sh`, whose own
commands are checked too) a command that fails after minutes of setup. Sources are test_documented_commands'
(Markdown, recipes, module docstrings, --help, bench/*.sh); how a script's parser is taken without running the
script: tests/script_commands.py.
"""

import re

import doc_commands as D
import pytest
import script_commands as S


def _failures(quotes: list[D.Quoted]) -> list[str]:
    return [f"{q.source}:{q.line}: {error}\n    {q.text.strip()}" for q in quotes
            for script, argv, runner in S.script_commands(q) if (error := S.check_script(q, script, argv, runner))]


@pytest.mark.parametrize("source", D.SOURCES)
def test_documented_script_commands_parse(source):
    failures = _failures(D.quotes_of(source))
    assert not failures, "documented script commands their scripts would refuse:\n" + "\n".join(failures)


def _named(source: str) -> list[tuple[str, int, str]]:
    """The scripts a source names anywhere: a module's comments and strings too, a verb's whole --help."""
    if source in D.MODULES:
        return [n for path in D.MODULES[source] for n in S.named_scripts(path.read_text("utf-8"), D.relative(path))]
    if source.startswith("litebert "):
        return S.named_scripts(D.parser_of(source.split()[1]).format_help(), source)
    return S.named_scripts((D.ROOT / source).read_text("utf-8"), source)


@pytest.mark.parametrize("source", D.SOURCES)
def test_every_script_a_doc_names_exists(source):
    missing = [f"{where}:{line}: {error}" for where, line, script in _named(source)
               if (error := S.missing_script(script))]
    assert not missing, "scripts named that do not exist:\n" + "\n".join(missing)



def test_the_bench_readme_table_names_scripts_that_exist_with_smoke_flags_they_take():
    """bench/README.md's table names each script bare (`gemm.py`) and its smoke run's flags in the last column:
    neither is a command the extractor sees, and a renamed script or smoke flag would rot there unnoticed."""
    rows = [(n, row.group(1), row.group(2)) for n, line in enumerate(
        (D.ROOT / "bench/README.md").read_text("utf-8").splitlines(), 1)
        if (row := re.fullmatch(r"\| `([\w.]+\.py)` \|.*\| ([^|]*) \|", line))]
    assert len(rows) >= 12, rows
    failures = [f"bench/README.md:{n}: {error}" for n, name, smoke in rows
                for flags in re.findall(r"`(-[^`]*)`", smoke) or [""]
                for quoted in [D.Quoted("bench/README.md", n, f"bench/{name} {flags}".strip(), mention=True)]
                if (error := S.missing_script(f"bench/{name}")
                    or S.check_script(quoted, f"bench/{name}", flags.split(), runner=False))]
    assert not failures, "\n".join(failures)

def test_script_commands_found_per_source():
    """Where the script commands are: a count that falls to zero means the extractor lost them."""
    counts = {source: sum(len(S.script_commands(q)) for q in D.quotes_of(source)) for source in D.SOURCES}
    assert sum(counts.values()) >= 100, counts
    for source in ("bench", "scripts", "bench/gpu_check.sh", "docs/gpu.md", "docs/benchmarks.md", "docs/sentence.md"):
        assert counts[source], (source, counts)


def test_every_script_hands_over_its_parser_without_running(capsys):
    """Each script of bench/ and scripts/ (bench/common.py is a library) builds its parser before any work."""
    scripts = sorted(p for p in [*D.ROOT.glob("bench/*.py"), *D.ROOT.glob("scripts/*.py")] if p.stem != "common")
    for path in scripts:
        assert S.script_parser(D.relative(path)).prog == path.name, path  # the parser main() built
    assert capsys.readouterr() == ("", "")  # no help printed, no work done


@pytest.mark.parametrize("text, error", [
    ("python bench/train_step.py --shapes 8x128 --no-such-flag", "unrecognized arguments: --no-such-flag"),
    (".venv/bin/python bench/train_step.py --attn flash", "argument --attn: invalid choice: 'flash'"),
    ("OMP_NUM_THREADS=1 python scripts/sentence_distill.py --steps many", "unrecognized arguments: --steps many"),
    ("python -W ignore scripts/korean_morphemes.py --speed-only nltk", "argument --speed-only: invalid choice"),
    ("python bench/int8_accuracy.py --model DIR", "the following arguments are required: --data"),
    ("python bench/train_step.py --shape 8x128", "--shape abbreviates --shapes"),
    ("python bench/train_step_v2.py --quick", "bench/train_step_v2.py: no such script (did you mean"),
    ("bash bench/gpu_check.sh benchmarks", "no mode 'benchmarks'"),
    ("bash bench/gpu_check.sh paper sharing dropuot", "unexpected dropuot"),
    ("bash bench/gpu_check.sh tests extra", "bench/gpu_check.sh tests: unexpected extra"),
])
def test_a_stale_script_command_fails_naming_what_argparse_says(text, error):
    quoted = D.Quoted("doc.md", 7, text)
    (command,) = S.script_commands(quoted)
    assert error in (S.check_script(quoted, *command) or ""), S.check_script(quoted, *command)
    assert _failures([quoted])[0].startswith("doc.md:7: ")


@pytest.mark.parametrize("text", [
    "OMP_NUM_THREADS=1 .venv/bin/python scripts/korean_morphemes.py --out out/korean [--steps 400]",
    "$PY bench/finetune_padding.py --device cuda --task ... --tokenizer TOK --precision <precision>",
    "python -W ignore scripts/korean_morphemes.py --compare kiwi mecab",
    "BUDGET=540 bash bench/gpu_check.sh next",
    "bash bench/gpu_check.sh paper [EXPERIMENT ...]",
    "run train_step_tiny 60 $PY bench/train_step.py --device cuda --preset tiny",
])
def test_script_placeholders_and_shell_syntax_parse(text):
    quoted = D.Quoted("doc.md", 1, text)
    commands = S.script_commands(quoted)
    assert commands and all(S.check_script(quoted, *c) is None for c in commands), commands


def test_a_reference_without_runner_may_leave_out_required_flags():
    reference = D.Quoted("doc.md", 1, "bench/finetune_padding.py --cuda-graphs", mention=True)
    assert S.check_script(reference, *S.script_commands(reference)[0]) is None
    command = D.Quoted("doc.md", 1, "python bench/finetune_padding.py --cuda-graphs")
    assert "required: --task, --tokenizer" in S.check_script(command, *S.script_commands(command)[0])
    assert not S.script_commands(D.Quoted("doc.md", 1, "cat bench/train_step.py"))  # not a run of it


def test_a_script_that_works_before_parsing_is_refused_unrun(tmp_path, monkeypatch):
    """The guard that makes calling main() safe: a script doing work before parse_args is named, never run."""
    monkeypatch.setattr(D, "ROOT", tmp_path)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts/eager.py").write_text(
        "import argparse, pathlib\n\ndef main():\n    pathlib.Path('made').touch()\n"
        "    argparse.ArgumentParser().parse_args()\n\nif __name__ == '__main__':\n    main()\n")
    (tmp_path / "scripts/loud.py").write_text("print('hello')\n\ndef main():\n    pass\n\n"
                                              "if __name__ == '__main__':\n    main()\n")
    quoted = D.Quoted("doc.md", 1, "python scripts/eager.py")
    assert "scripts/eager.py:4: main() runs `pathlib.Path('made').touch()` before it parses" in S.check_script(
        quoted, "scripts/eager.py", [])
    assert "runs `print('hello')` at import time" in S.check_script(quoted, "scripts/loud.py", [])
    assert not (tmp_path / "made").exists()


def test_gpu_check_modes_are_its_case_labels():
    assert set(S.shell_modes("bench/gpu_check.sh")) == {"tests", "bench", "compile", "paper", "suite", "all", "next"}
