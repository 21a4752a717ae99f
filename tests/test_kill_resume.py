"""kill -9 at moments spread over a training verb's run, then --resume, several times: the run ends with the same
weights as an uninterrupted one, bit for bit, and every saved step's evaluation is recorded exactly once.
Pretraining has its own loop in test_pretrain.py; these are fine-tuning and S-ALBERT training."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from paths import SHARED_DATA
from safetensors.torch import load_file
from test_finetune import tiny_model_dir

pytestmark = pytest.mark.slow

NOVELS = Path(__file__).resolve().parents[1] / "litebert" / "data" / "novel_authorship"
PARAPHRASE = SHARED_DATA / "tasks" / "bible_paraphrase"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def finetune_cmd(model: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "litebert.cli", "finetune", "--model", str(model), "--task", "novel_authorship",
            "--data-dir", str(NOVELS), "--max-train-examples", "96", "--max-eval-examples", "16", "--max-length",
            "32", "--optimizer", "adamw", "--lr", "1e-3", "--batch-size", "8", "--max-steps", "24",
            "--save-every", "1", "--eval-every", "4", "--keep-last", "2", "--out-dir", str(out), "--no-progress"]


def embed_cmd(model: Path, pairs: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "litebert.cli", "embed", "--model", str(model), "--train", str(pairs),
            "--max-length", "32", "--optimizer", "adamw", "--lr", "1e-3", "--batch-size", "8", "--max-steps", "24",
            "--save-every", "1", "--keep-last", "2", "--out-dir", str(out), "--no-progress"]


def killed_and_resumed(cmd: list[str], straight_seconds: float) -> int:
    """Run `cmd` and SIGKILL it at 40%, 60% and 80% of an uninterrupted run's wall time (start-up included),
    resuming each time; then let it finish. Returns how many kills landed before the run ended."""
    kills = 0
    for fraction in (0.4, 0.6, 0.8):
        proc = subprocess.Popen(cmd + (["--resume"] if kills else []), env=ENV, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(fraction * straight_seconds)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    final = subprocess.run(cmd + ["--resume"], env=ENV, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-3000:]
    return kills


def straight_run(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return time.perf_counter() - start


def assert_same_weights(a: Path, b: Path) -> None:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert x.keys() == y.keys()
    for key in x:
        assert torch.equal(x[key], y[key]), key


def evaluated_steps(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if any(k.startswith("eval_") for k in r)]


def test_finetune_killed_repeatedly_ends_as_an_uninterrupted_run(tmp_path):
    model = tiny_model_dir(tmp_path)
    seconds = straight_run(finetune_cmd(model, tmp_path / "straight"))
    kills = killed_and_resumed(finetune_cmd(model, tmp_path / "killed"), seconds)
    assert kills >= 1
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert_same_weights(straight / "step_24", killed / "step_24")
    assert_same_weights(straight / "best", killed / "best")
    assert json.loads((straight / "best" / "best_score.json").read_text()) == \
        json.loads((killed / "best" / "best_score.json").read_text())
    steps = evaluated_steps(killed)
    assert steps == sorted(set(steps)) and set(steps) >= {4, 8, 12, 16, 20, 24}, steps  # each once, in order
    assert not [p for p in os.listdir(killed) if p.startswith((".tmp", ".trash"))]


def test_salbert_training_killed_repeatedly_ends_as_an_uninterrupted_run(tmp_path):
    if not PARAPHRASE.is_dir():
        pytest.skip("shared data not available")
    rows = [json.loads(line) for line in open(PARAPHRASE / "train.jsonl", encoding="utf-8")][:64]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tiny_model_dir(tmp_path)
    seconds = straight_run(embed_cmd(model, pairs, tmp_path / "straight"))
    kills = killed_and_resumed(embed_cmd(model, pairs, tmp_path / "killed"), seconds)
    assert kills >= 1
    assert_same_weights(tmp_path / "straight" / "step_24", tmp_path / "killed" / "step_24")
