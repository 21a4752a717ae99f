"""The `litebert` front door: a verb driven end to end through `main`, and how output to a closed pipe ends."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from litebert.cli import main as litebert_main

ROOT = Path(__file__).resolve().parents[1]


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
