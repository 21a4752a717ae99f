"""The `litebert` front door: a verb driven end to end through `main`, and how output to a closed pipe ends."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from litebert.cli import main as litebert_main

ROOT = Path(__file__).resolve().parents[1]


def test_version_prints_the_package_version(capsys):
    from importlib.metadata import version

    from litebert import __version__

    for flag in ("--version", "-V"):
        assert litebert_main([flag]) == 0
        assert capsys.readouterr().out == f"litebert {__version__}\n"
    assert __version__ == version("litebert")  # the installed distribution's, from pyproject.toml


def test_params_prints_the_paper_comparison_as_a_table_and_as_json(capsys):
    assert litebert_main(["params", "--json"]) == 0
    rows = {r["model"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    base = rows["albert-base-v2"]  # Table 1: ALBERT-base has 12M parameters
    assert base["paper_millions"] == 12 and round(base["counts"]["as built"] / 1e6) == 12
    assert base["verdict"] == "matches (as built)"
    assert rows["bert-base"]["paper_millions"] == 108 and rows["bert-base"]["verdict"].startswith("matches")

    assert litebert_main(["params"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if " albert-base-v2 " in line)
    assert line.split()[:3] == ["Table", "1", "albert-base-v2"]
    assert "11.68M" in line and " 12M " in line and line.endswith("matches (as built)")


@pytest.mark.parametrize("argv", [["params", "--json"], ["--help"]])
def test_a_reader_that_goes_away_ends_the_output_quietly(argv):
    """`litebert params --json | head -1`: once head exits, writing fails with EPIPE. That is not an error to
    report: no "Broken pipe" message, no "Exception ignored" at exit, exit code 1 as Python's docs advise."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # a pipe nobody reads: every write fails, as after `head` has exited, with no race
    try:
        proc = subprocess.run([sys.executable, "-m", "litebert.cli", *argv], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (1, "")


# -- one CLI style: every verb's flags come from its config dataclass, and --config FILE.toml sets them too ------

from litebert.cli import VERBS  # noqa: E402

# verb -> (its TOML table, a line of that table, flags the run needs besides, the error that shows the line was
# used). Most lines name SENTINEL, a path that does not exist, so the run stops at its first use; params sets json
# (checked on its output) and serve an out-of-range port (refused before a model is loaded).
SENTINEL = "no-such-thing-sentinel"
TOML_RUNS = {
    "demo": ("demo", f'out = "{SENTINEL}"', [], "is a file, not a directory"),
    "ensemble": ("ensemble", f'models = ["{SENTINEL}"]', ["--task", "novel_authorship", "--data-dir", ".", "--out", "ens"], "no config file at"),
    "tokenizer": ("tokenizer", f'inputs = ["{SENTINEL}"]', [], "no input files match"),
    "prepare": ("prepare", f'inputs = ["{SENTINEL}"]', ["--no-progress"], "no input files match"),
    "pretrain": ("pretrain", f'data = "{SENTINEL}"', [], "has no meta.json"),
    "finetune": ("finetune", f'model = "{SENTINEL}"', ["--data-dir", "."], "no such directory"),
    "evaluate": ("finetune", f'model = "{SENTINEL}"', [], "no such directory"),
    "predict": ("finetune", f'model = "{SENTINEL}"', ["--out", "predictions.jsonl"], "no such directory"),
    "embed": ("embed", f'model = "{SENTINEL}"', ["--input", "sentences.txt", "--out", "e.npy"], "no such directory"),
    "convert": ("convert", f'from_hf = "{SENTINEL}"', ["--out", "converted"], "no such directory"),
    "export": ("export", f'model = "{SENTINEL}"', ["--out", "exported"], "no such directory"),
    "analyze": ("analyze", f'models = ["{SENTINEL}"]', [], "no such directory"),
    "extend-vocab": ("extend-vocab", f'model = "{SENTINEL}"', ["--out", "extended", "--corpus", "c.txt"],
                     "no such directory"),
    "params": ("params", "json = true", [], None),
    "reproduce": ("reproduce", f'corpus = "{SENTINEL}"', ["objective", "--out", "grid", "--scale", "tiny"],
                  "no input files match"),
    "serve": ("serve", "port = 99999", ["--model", SENTINEL], "[serve]: port must be in [0, 65535], got 99999"),
}
NOT_YET: dict[str, str] = {}  # verb -> why it cannot take --config yet (strict xfail: fails once it can)


def _verbs_with(table):
    return [pytest.param(verb, marks=pytest.mark.xfail(reason=NOT_YET[verb], strict=True)) if verb in NOT_YET
            else verb for verb in table]


def test_every_verb_has_a_toml_run():
    assert sorted(TOML_RUNS) == sorted(VERBS)


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_explains_itself_and_shows_each_default_once(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        litebert_main([verb, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: litebert {verb} ")
    description = out.split("\n\n")[1]  # after the usage: what the verb does, from its module docstring
    assert len(description.split()) >= 8, description
    help_text = " ".join(out.split())  # argparse wraps lines
    options = help_text.split(" --")[1:]
    assert options and all(option.count("(default:") <= 1 for option in options), \
        [option for option in options if option.count("(default:") > 1]
    assert "(default: )" not in help_text and "(default: None)" not in help_text and "(default: [])" not in help_text


def _run(argv, capsys) -> tuple[int, str, str]:
    code = litebert_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("verb", _verbs_with(TOML_RUNS))
def test_every_verb_takes_its_options_from_a_toml_table(verb, tmp_path, monkeypatch, capsys):
    """A TOML that sets one option is honoured; an unknown key, or an unknown table, is refused with one line
    naming it, before any work."""
    monkeypatch.chdir(tmp_path)  # whatever a verb would write by default lands here
    (tmp_path / SENTINEL).write_text("")  # demo: --out names a file; the other verbs look for a directory
    if verb != "demo":
        (tmp_path / SENTINEL).unlink()
    section, line, extra, expected = TOML_RUNS[verb]
    (tmp_path / "sentences.txt").write_text("A sentence.\n")  # embed reads its --input before the model
    toml = tmp_path / "run.toml"
    toml.write_text(f"[{section}]\n{line}\n")
    code, out, err = _run([verb, "--config", str(toml), *extra], capsys)
    if expected is None:  # params: json = true
        assert code == 0 and json.loads(out.splitlines()[0])["table"] == "Table 1"
    else:
        assert code == 2 and err.count("\n") == 1 and expected in err, err
        assert SENTINEL in err or SENTINEL not in line

    toml.write_text(f"[{section}]\nno_such_option = 1\n")
    code, out, err = _run([verb, "--config", str(toml), *extra], capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown key 'no_such_option'" in err, err
    assert err.startswith(f"litebert {verb}: error: {toml}")

    toml.write_text("[no_such_table]\nseed = 1\n")
    code, out, err = _run([verb, "--config", str(toml), *extra], capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown section(s) ['no_such_table']" in err, err


def test_flags_override_the_toml_and_positional_lists_too(tmp_path, capsys):
    toml = tmp_path / "run.toml"
    toml.write_text("[params]\njson = true\n")
    code, out, _ = _run(["params", "--config", str(toml), "--no-json"], capsys)
    assert code == 0 and out.split()[:2] == ["model", "as"]  # the table, not JSON lines
    toml.write_text('[tokenizer]\ninputs = ["from-the-toml.txt"]\nvocab_size = 50\n')
    code, _, err = _run(["tokenizer", str(tmp_path / "from-the-command-line.txt"), "--config", str(toml)], capsys)
    assert code == 2 and "from-the-command-line.txt" in err and "from-the-toml" not in err


def test_toml_values_are_checked_like_flags(tmp_path, capsys):
    toml = tmp_path / "run.toml"
    for body, message in [('[prepare]\nmax_seq_length = "long"\n', "max_seq_length must be int, got 'long'"),
                          ("[prepare]\ninputs = [3]\n", "inputs[0] must be str, got 3"),
                          ("seed = 3\n", "['seed'] outside any section; put them under one of [prepare]")]:
        toml.write_text(body)
        code, _, err = _run(["prepare", "--config", str(toml)], capsys)
        assert code == 2 and err.count("\n") == 1 and message in err, err


def test_a_required_option_may_come_from_the_toml(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        litebert_main(["export", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "the following arguments are required: --model" in capsys.readouterr().err
    toml = tmp_path / "run.toml"
    toml.write_text(f'[export]\nmodel = "{tmp_path / "nothing"}"\n')
    code, _, err = _run(["export", "--config", str(toml), "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and f"no such directory: {tmp_path / 'nothing'}" in err


def test_a_toml_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'[params]\njson = "\xff"\n')
    assert litebert_main(["params", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"litebert params: error: {bad}: not UTF-8 text (invalid start byte at byte 17)", err


def test_a_mistyped_recipe_name_lists_the_bundled_ones(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert litebert_main(["pretrain", "--config", "demo_small"]) == 2
    err = capsys.readouterr().err
    assert "demo_small: No such file or directory (nor a bundled recipe: cpu_long, demo, paper_base)" in err, err
    assert err.count("\n") == 1
