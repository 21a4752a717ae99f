"""The README's Python blocks run as written, and its verb list matches the CLI's."""

import os
import re
from pathlib import Path

from litebert.cli import VERBS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_python_blocks_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert os.path.isfile(tmp_path / "out" / "tour" / "model.safetensors")


def test_every_verb_is_in_the_readme():
    for verb in VERBS:
        assert f"litebert {verb}" in README, verb
