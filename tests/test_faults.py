"""Faults and bad input across the data-side verbs: nothing lost, nothing silent, one line a user can act on.

Each test holds one row of docs/faults.md. The classes of the issue, in order:
  work lost            a write that fails (a full disk, made on purpose) or a kill leaves the old result intact;
                       a verb refuses to replace what it did not make unless told (--overwrite)
  wrong without a word NaN weights/outputs are errors; skipped input is counted and reported; a metric over a
                       subset says so; a tokenizer that is not the model's is refused
  tracebacks           damaged files of every kind the verbs read are one-line errors naming the file
  messages             decode errors name the file and line; a mistyped local path never goes to the Hub;
                       sentencepiece's internals become words
  the CLI switch       LitebertError and OSError print one line; any other exception keeps its traceback
Property-based tests (hypothesis) feed the task readers arbitrary files: they return examples or raise a
DataError, nothing else.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.tokenizers import train_tiny_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litebert import files
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError, DataError, LitebertError, NonFiniteError
from litebert.model import AlbertForPreTraining

REPO = Path(__file__).resolve().parent.parent
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def one_line_error(argv, capsys) -> str:
    """Run a verb that must fail with one line; return that line."""
    code = litebert_main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err.strip()


def tree(directory: Path) -> dict[str, bytes]:
    """Every file below `directory` (hidden ones too) with its bytes: what "left intact" compares."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def debris(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((".tmp-", ".trash-", ".prepare-")))


# -- shared small things --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The module's directory, with text.txt (6 KB of the bundled corpus) and tok/, a tokenizer trained on it."""
    directory = tmp_path_factory.mktemp("faults")
    train_tiny_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def tok_dir(root) -> Path:
    return root / "tok"


@pytest.fixture(scope="module")
def model_dir(root, tok_dir) -> Path:
    """A tiny 'pretrained' model directory with its tokenizer, as `litebert pretrain` leaves one."""
    from litebert.tokenizer import Tokenizer
    tok = Tokenizer.from_pretrained(str(tok_dir))
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32,
                                              num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                              max_position_embeddings=64))
    model.save_pretrained(root / "model")
    tok.save_pretrained(str(root / "model"))
    return root / "model"


WORDS = {"a": "the sea was calm and the ship sailed on", "b": "she wrote a letter to her sister in town"}


def table_task(directory: Path, dev_unknown: int = 2) -> Path:
    """A two-label table task: 16 training rows, 8 dev rows of which `dev_unknown` carry a label ("c") that
    training never has."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": str(i), "text": f"{WORDS['ab'[i % 2]]} {i}", "label": "ab"[i % 2]} for i in range(24)]
    for i in range(dev_unknown):
        rows[16 + i]["label"] = "c"
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:16]))
    (directory / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[16:]))
    return directory


def finetune_configs(model_dir: Path, data_dir: Path, out: Path, **train):
    from litebert.finetune import FinetuneConfig
    from litebert.training.train_config import TrainConfig
    cfg = FinetuneConfig(model=str(model_dir), task="table", data_dir=str(data_dir), text_columns=["text"],
                         max_length=32, eval_batch_size=8)
    train_cfg = TrainConfig(**{"out_dir": str(out), "max_steps": 4, "batch_size": 4, "eval_every": 2,
                               "save_every": 2, "log_every": 1, "progress": False, "optimizer": "adamw",
                               "lr": 1e-3, "device": "cpu", **train})
    return cfg, train_cfg


def eval_steps(out: Path) -> list[int]:
    """The steps metrics.jsonl records an evaluation of."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in records if any(k.startswith("eval_") for k in r)]


# ================================================================================================ work lost

def test_tokenizer_rerun_on_a_full_disk_keeps_the_tokenizer_that_was_there(root, monkeypatch, capsys):
    """`litebert tokenizer` writes beside --out and swaps: a full disk in the middle of a rerun is one line
    naming the directory, and the first tokenizer is there byte for byte, with no debris."""
    out = root / "tok_rerun"
    text = str(root / "text.txt")
    assert litebert_main(["tokenizer", text, "--out", str(out), "--vocab-size", "200"]) == 0
    capsys.readouterr()
    before = tree(out)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full_disk)  # the first file write that renames into place fails
    line = one_line_error(["tokenizer", text, "--out", str(out), "--vocab-size", "250"], capsys)
    monkeypatch.undo()
    assert "No space left on device" in line and str(out) in line, line
    assert tree(out) == before and debris(root) == []


def test_a_kill_between_the_renames_of_a_swap_is_put_back(root, tok_dir):
    """The one moment a directory swap has the old result aside (`.trash-<name>`, the new one not yet in
    place): the next write, or restore_replaced, puts the old one back before anything else."""
    out = root / "swap"
    files.write_dir_atomically(out, lambda d: (d / "spiece.model").write_bytes(b"old"))
    os.rename(out, root / ".trash-swap")  # what a kill after the first rename leaves
    assert files.restore_replaced(out) and (out / "spiece.model").read_bytes() == b"old"
    os.rename(out, root / ".trash-swap")
    with pytest.raises(OSError):  # a write that then fails still leaves the old one in place
        files.write_dir_atomically(out, lambda d: (_ for _ in ()).throw(ENOSPC))
    assert (out / "spiece.model").read_bytes() == b"old" and debris(root) == []


def test_tokenizer_refuses_to_replace_a_tokenizer_it_did_not_make(root, model_dir, capsys):
    """A model directory's spiece.model (its weights would no longer match), or a tokenizer without
    `litebert tokenizer`'s summary, is replaced only with --overwrite."""
    text = str(root / "text.txt")
    before = tree(model_dir)
    line = one_line_error(["tokenizer", text, "--out", str(model_dir), "--vocab-size", "200"], capsys)
    assert "holds a model" in line and "--overwrite" in line
    assert tree(model_dir) == before
    foreign = root / "downloaded_tok"
    shutil.copytree(root / "tok", foreign)
    (foreign / "tokenizer_summary.json").unlink()
    line = one_line_error(["tokenizer", text, "--out", str(foreign), "--vocab-size", "200"], capsys)
    assert "did not make" in line
    assert litebert_main(["tokenizer", text, "--out", str(foreign), "--vocab-size", "200", "--overwrite"]) == 0


@pytest.fixture(scope="module")
def dataset(root, tok_dir) -> Path:
    from litebert.corpus.shards import prepare
    out = root / "data"
    prepare([str(root / "text.txt")], str(out), str(tok_dir), max_seq_length=32, num_workers=1, progress=False,
            shard_size=20)
    return out


def test_prepare_swaps_the_new_dataset_in_only_when_complete(root, tok_dir, dataset, monkeypatch):
    """A failure while the new dataset is written (a full disk at the last shard) leaves the old one; a kill
    in the middle of the swap itself is undone by the next prepare (or finished, once meta.json is in)."""
    from litebert.corpus import shards
    from litebert.corpus.dataset import OUTGOING, STAGING, PretrainDataset
    out = root / "data_swap"
    shutil.copytree(dataset, out)
    before = tree(out)
    real_save = np.save

    def save_then_full(path, arr, *a, **k):
        if "meta" in str(path) or "vocab_" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(path, arr, *a, **k)

    monkeypatch.setattr(np, "save", save_then_full)
    with pytest.raises(OSError):
        shards.prepare([str(root / "text.txt")], str(out), str(tok_dir), max_seq_length=24, num_workers=1,
                      progress=False, shard_size=20)
    monkeypatch.undo()
    assert tree(out) == before

    # A kill in the middle of the swap: old files moved aside, some new ones in, no meta.json.
    real_replace, moved_in = os.replace, []

    def killed_midway(src, dst):
        if STAGING in str(src):
            if len(moved_in) == 2:
                raise KeyboardInterrupt  # stands for the kill: nothing after this point runs
            moved_in.append(dst)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        shards.prepare([str(root / "text.txt")], str(out), str(tok_dir), max_seq_length=24, num_workers=1,
                      progress=False, shard_size=20)
    monkeypatch.undo()
    assert not (out / "meta.json").exists() and (out / OUTGOING).is_dir()
    with pytest.raises(DataError, match="interrupted while replacing"):
        PretrainDataset(str(out))
    assert shards.recover_dataset(str(out)) == "restored the previous dataset"
    assert tree(out) == before
    assert len(PretrainDataset(str(out), str(tok_dir))) > 0


def test_prepare_refuses_files_it_did_not_write_unless_told(root, tok_dir, capsys):
    out = root / "not_a_dataset"
    out.mkdir()
    (out / "meta.json").write_text('{"what": "somebody else\'s"}')
    text = str(root / "text.txt")
    args = ["prepare", text, "--out", str(out), "--tokenizer", str(tok_dir), "--num-workers", "1", "--no-progress",
            "--max-seq-length", "32"]
    line = one_line_error(args, capsys)
    assert "did not write" in line and "--overwrite" in line
    assert litebert_main(args + ["--overwrite"]) == 0


def _killed_at_random(argv: list[str], seconds: float) -> bool:
    """Run `litebert ARGV` in a subprocess and SIGKILL it after `seconds`; whether the kill came first."""
    proc = subprocess.Popen([sys.executable, "-m", "litebert.cli", *argv], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def _dataset_state(directory: Path) -> dict:
    """A dataset's files, with meta.json's timing left out (the only thing two identical runs differ in)."""
    state = tree(directory)
    if "meta.json" in state:
        meta = json.loads(state["meta.json"])
        meta.pop("seconds")
        state["meta.json"] = meta
    return state


def test_prepare_killed_at_random_moments_leaves_the_old_dataset_or_the_new_one(root, tok_dir, tmp_path):
    """kill -9 during `litebert prepare` over an earlier dataset, at random moments: after the recovery the next
    prepare runs first, the directory holds the earlier dataset or the new one, whole; a last uninterrupted
    run equals a run that was never interrupted."""
    import random

    from litebert.corpus.shards import recover_dataset
    common = ["--tokenizer", str(tok_dir), "--num-workers", "1", "--no-progress", "--shard-size", "500",
              "--dupe-factor", "3"]
    old_args, new_args = ["--max-seq-length", "64"], ["--max-seq-length", "48"]
    reference = tmp_path / "reference"
    start = time.perf_counter()  # the uninterrupted run, timed in a process of its own as the killed ones are
    assert not _killed_at_random(["prepare", "--out", str(reference), *common, *new_args], 600)
    duration = time.perf_counter() - start
    out = tmp_path / "data"
    assert litebert_main(["prepare", "--out", str(out), *common, *old_args]) == 0
    old, new = _dataset_state(out), _dataset_state(reference)
    rng, kills = random.Random(0), 0
    for _ in range(5):
        moment = rng.uniform(0.3, 1.0) * duration
        kills += _killed_at_random(["prepare", "--out", str(out), *common, *new_args], moment)
        recover_dataset(str(out))
        assert _dataset_state(out) in (old, new)
        if _dataset_state(out) == new:  # it finished: start again from the old dataset
            assert litebert_main(["prepare", "--out", str(out), *common, *old_args]) == 0
    assert kills > 0
    assert litebert_main(["prepare", "--out", str(out), *common, *new_args]) == 0
    assert _dataset_state(out) == new


def test_tokenizer_killed_at_random_moments_leaves_a_whole_tokenizer(root, tmp_path):
    """kill -9 during `litebert tokenizer` over an earlier tokenizer, at random moments: --out always holds a
    whole tokenizer (the earlier one byte for byte, or a new one that loads, with its summary)."""
    import random

    from litebert.tokenizer import Tokenizer
    out = tmp_path / "tok"
    start = time.perf_counter()
    assert not _killed_at_random(["tokenizer", "--out", str(tmp_path / "timed"), "--vocab-size", "1200"], 600)
    duration = time.perf_counter() - start
    assert litebert_main(["tokenizer", "--out", str(out), "--vocab-size", "1000"]) == 0
    old = tree(out)
    rng, kills = random.Random(0), 0
    for _ in range(5):
        moment = rng.uniform(0.3, 1.0) * duration
        kills += _killed_at_random(["tokenizer", "--out", str(out), "--vocab-size", "1200"], moment)
        files.restore_replaced(out)  # what the next write does first
        if tree(out) != old:
            assert Tokenizer.from_pretrained(str(out)).vocab_size == 1200
            assert json.loads((out / "tokenizer_summary.json").read_text())["vocab_size"] == 1200
    assert kills > 0


@pytest.fixture(scope="module")
def finished_run(root, model_dir) -> tuple[Path, Path, dict]:
    """A finished fine-tuning run (4 steps, evaluated at 2 and 4) on the table task with 2 unknown-label dev rows."""
    from litebert.finetune import finetune
    data = table_task(root / "task")
    out = root / "ft"
    summary = finetune(*finetune_configs(model_dir, data, out))
    return data, out, summary


def test_finetune_counts_dev_rows_it_cannot_score_and_says_what_the_metric_is_over(finished_run, model_dir,
                                                                                   capsys):
    """Dev rows whose label training never had are left out of the score: the summary counts them by reason
    and says, beside the metrics, over which rows they are; `litebert evaluate` says it too."""
    data, out, summary = finished_run
    assert summary["examples"]["skipped_dev"] == 2
    assert summary["examples"]["skipped_by_reason"]["dev"] == {"unknown_label": 2}
    assert summary["scored_on"] == "6 of 8 dev rows (left out: 2 unknown label)"
    assert json.loads((out / "summary.json").read_text())["scored_on"] == summary["scored_on"]
    code = litebert_main(["evaluate", "--model", str(out / "best"), "--task", "table", "--data-dir", str(data),
                          "--text-columns", "text", "--max-length", "32"])
    metrics = json.loads(capsys.readouterr().out)
    assert code == 0 and metrics["scored_on"].startswith("6 of 8 dev rows")


def test_finetune_resume_of_a_finished_run_keeps_its_final_scores_and_its_best(finished_run, model_dir):
    """--resume of a finished run trains nothing and rewrites summary.json with what it said: final scores
    and all. If a kill had come between the two renames that replace best/, it is put back first, so the old
    best is neither lost nor replaced by a worse model."""
    from litebert.finetune import finetune
    data, out, summary = finished_run
    best = tree(out / "best")
    os.rename(out / "best", out / ".trash-best")  # a kill between the renames of a best/ update
    again = finetune(*finetune_configs(model_dir, data, out, resume=True))
    assert again["final"] == summary["final"] != {}
    assert again["best"] == summary["best"] and again["steps"] == 4
    assert tree(out / "best") == best and not (out / ".trash-best").exists()
    assert json.loads((out / "summary.json").read_text())["final"] == summary["final"]


def test_finetune_without_resume_refuses_a_directory_holding_an_earlier_best(finished_run, model_dir, tmp_path):
    from litebert.finetune import finetune
    data, out, _ = finished_run
    only_best = tmp_path / "only_best"
    only_best.mkdir()
    shutil.copytree(out / "best", only_best / "best")
    before = tree(only_best)
    with pytest.raises(ConfigError, match=r"holds an earlier run's best.*--resume.*--overwrite"):
        finetune(*finetune_configs(model_dir, data, only_best))
    assert tree(only_best) == before
    cfg, train_cfg = finetune_configs(model_dir, data, only_best, max_steps=2, eval_every=0, save_every=0)
    cfg.overwrite = True
    # --overwrite replaces the earlier run before the new one starts: kept until the new run's first evaluation,
    # its best/ and score would pass as the new run's to a --resume of it killed before then
    from litebert.finetune import check_out_dir
    check_out_dir(cfg, train_cfg)
    assert not (only_best / "best").exists()
    assert finetune(cfg, train_cfg)["steps"] == 2

    # a whole earlier run (its checkpoints too): --overwrite removed best/ and summary.json, then the loop refused
    # the checkpoints, leaving a run without its best; now refused before anything is removed
    whole = tmp_path / "whole"
    shutil.copytree(out, whole)
    before = tree(whole)
    cfg, train_cfg = finetune_configs(model_dir, data, whole)
    cfg.overwrite = True
    with pytest.raises(ConfigError, match=r"also holds the earlier run's checkpoints .*--resume"):
        finetune(cfg, train_cfg)
    assert tree(whole) == before


def test_a_finetune_resume_refuses_training_data_that_changed(model_dir, tmp_path):
    """Fine-tuning's resume compared its settings but not its data: a training file cut from 16 rows to 12
    resumed silently, its shuffle over another N, a run that is neither's."""
    from litebert.finetune import finetune
    data = table_task(tmp_path / "task", dev_unknown=0)
    finetune(*finetune_configs(model_dir, data, tmp_path / "ft", max_steps=2))
    rows = (data / "train.jsonl").read_text().splitlines(keepends=True)
    (data / "train.jsonl").write_text("".join(rows[:12]))
    with pytest.raises(CheckpointError, match="data differs"):
        finetune(*finetune_configs(model_dir, data, tmp_path / "ft", max_steps=4, resume=True))


def test_a_checkpoint_without_calibration_is_never_tuned_on_test(model_dir, tmp_path, monkeypatch, caplog):
    """A step_N checkpoint (or an averaged or converted one) has no calibration.json: scoring it on test tuned the
    multi-label thresholds on test itself, against evaluate's promise. Dev is still calibrated, as fine-tuning."""
    import litebert.tasks.metrics as M
    from litebert.tasks.families import FAMILIES
    from litebert.tasks.loading import TaskConfig, evaluate_checkpoint
    from litebert.tokenizer import Tokenizer
    data = tmp_path / "task"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.jsonl").write_text("".join(
            json.dumps({"id": str(i), "text": f"{WORDS['ab'[i % 2]]} {i}", "labels": ["ab"[i % 2]]}) + "\n"
            for i in range(8)))
    family = FAMILIES["multi_label"]
    checkpoint = tmp_path / "step_4"
    family.head.from_pretrained(model_dir, **family.config_overrides(["a", "b"])).save_pretrained(checkpoint)
    Tokenizer.from_pretrained(str(model_dir)).save_pretrained(str(checkpoint))
    cfg = TaskConfig(model=str(checkpoint), task="table", data_dir=str(data), text_columns=["text"],
                     label_column="labels", multi_label=True, max_length=32)
    tuned = []
    real = M.tune_thresholds
    monkeypatch.setattr(M, "tune_thresholds", lambda probs, gold: tuned.append(len(gold)) or real(probs, gold))
    scored, _, _ = evaluate_checkpoint(str(checkpoint), cfg, "test")
    assert tuned == [] and scored.calibration == {} and "scored without tuning on it" in caplog.text
    assert scored.metrics["micro_f1"] == scored.metrics["micro_f1@0.5"]  # the untuned thresholds
    evaluate_checkpoint(str(checkpoint), cfg, "dev")
    assert tuned == [8]


def test_a_run_whose_every_evaluation_is_nan_names_no_best_dir(model_dir, tmp_path, monkeypatch, caplog):
    """A regression model predicting one value scores a NaN correlation, never better than -inf: best/ was never
    written, and the summary named it all the same."""
    from litebert.finetune import finetune
    from litebert.tasks.families import SequenceClassification
    real = SequenceClassification.score

    def nan_accuracy(self, *args, **kwargs):
        scored = real(self, *args, **kwargs)
        return scored._replace(metrics={**scored.metrics, "accuracy": float("nan")})

    monkeypatch.setattr(SequenceClassification, "score", nan_accuracy)
    summary = finetune(*finetune_configs(model_dir, table_task(tmp_path / "task", dev_unknown=0), tmp_path / "ft",
                                         max_steps=2))
    assert summary["best_dir"] is None and not (tmp_path / "ft" / "best").exists()
    assert "no evaluation gave a finite dev accuracy" in caplog.text


def test_finetune_refuses_to_select_on_an_unlabelled_split(model_dir, tmp_path):
    """--eval-split test on a test file without labels trained to the end, never found a best/, and wrote a
    summary naming a best_dir that did not exist."""
    from litebert.finetune import finetune
    data = table_task(tmp_path / "task", dev_unknown=0)
    (data / "test.jsonl").write_text("".join(json.dumps({"id": str(i), "text": f"text {i}"}) + "\n" for i in range(4)))
    cfg, train_cfg = finetune_configs(model_dir, data, tmp_path / "ft")
    cfg.eval_split = "test"
    with pytest.raises(DataError, match="4 of 4 test examples of task table have no label: --eval-split needs"):
        finetune(cfg, train_cfg)
    assert not (tmp_path / "ft").exists()


def test_a_full_disk_while_best_is_written_leaves_the_previous_best(finished_run, model_dir, tmp_path,
                                                                    monkeypatch):
    """best/ is staged and swapped: a disk that fills up while a better model is written leaves the old best/
    as it was, and the error names where."""
    from litebert import finetune as ft
    data, out, _ = finished_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    (run / "best" / ft.BEST_SCORE_NAME).write_text(json.dumps({"primary_metric": "accuracy",
                                                                 "metrics": {"accuracy": -1.0}}))
    for step in run.glob("step_*"):  # train from scratch into the directory, as a resumed run would
        shutil.rmtree(step)
    before = tree(run / "best")
    real_write_json = ft.write_json

    def full_disk_at_the_score(path, obj, *args, **kwargs):
        if str(path).endswith(ft.BEST_SCORE_NAME):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write_json(path, obj, *args, **kwargs)

    monkeypatch.setattr(ft, "write_json", full_disk_at_the_score)
    with pytest.raises(OSError) as error:
        ft.finetune(*finetune_configs(model_dir, data, run, resume=True))  # the settings best/ was made with
    assert error.value.errno == errno.ENOSPC and error.value.filename.endswith("best")
    assert tree(run / "best") == before and debris(run) == []


KILL_AT_BEST = """
import os, sys
sys.path.insert(0, {tests!r})
import test_faults as t
from litebert import finetune as ft
real = ft.write_json
def killed(path, obj, *a, **k):
    if str(path).endswith(ft.BEST_SCORE_NAME):
        os._exit(137)  # SIGKILL's exit: no cleanup, .tmp-best stays half-written
    return real(path, obj, *a, **k)
ft.write_json = killed
from pathlib import Path
ft.finetune(*t.finetune_configs(Path({model!r}), Path({data!r}), Path({out!r})))
"""


@pytest.mark.skipif(not hasattr(__import__("litebert.training.checkpoint", fromlist=["x"]), "read_evaluation"),
                    reason="needs the training loop's record of each checkpoint's evaluation (evaluation.json)")
def test_finetune_resume_after_a_kill_while_best_is_written_evaluates_that_step_once(finished_run, model_dir,
                                                                                    tmp_path):
    """Killed (os._exit, no cleanup) while best/ is written after step 2's evaluation: step 2 is saved but
    was never evaluated. --resume evaluates it first, once, so best/ is not lost, then trains on."""
    from litebert.finetune import finetune
    data, _, _ = finished_run
    out = tmp_path / "killed"
    script = KILL_AT_BEST.format(tests=str(REPO / "tests"), model=str(model_dir), data=str(data), out=str(out))
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 137, proc.stderr[-2000:]
    assert (out / "step_2").is_dir() and not (out / "best").exists() and eval_steps(out) == []
    summary = finetune(*finetune_configs(model_dir, data, out, resume=True))
    assert eval_steps(out) == [2, 4]  # step 2 evaluated on resume, exactly once
    assert (out / "best" / "model.safetensors").is_file() and summary["best"] and summary["final"]
    assert debris(out) == []


# ===================================================================================== wrong without a word

def test_tokenizer_counts_and_reports_what_it_could_not_use(root, capsys):
    """Non-UTF-8 lines, unreadable JSONL records and sentences over sentencepiece's length limit (which its
    trainer drops silently) are counted, printed, and kept in tokenizer_summary.json."""
    corpus = root / "mixed"
    corpus.mkdir()
    text = (root / "text.txt").read_text()
    (corpus / "a.txt").write_bytes(text.encode() + b"\nlatin-1 caf\xe9 line\n" + b"x" * 5000 + b"\n")
    (corpus / "b.jsonl").write_text('{"text": "a good record."}\n{"text": 3}\nnot json\n')
    out = root / "tok_counted"
    assert litebert_main(["tokenizer", str(corpus), "--out", str(out), "--vocab-size", "200"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "tokenizer_summary.json").read_text())
    assert summary["skipped"] == {"bad_json_lines": 2, "non_utf8_lines": 1, "too_long_sentences": 1}
    assert "1 lines not in UTF-8" in printed and "2 unreadable JSONL records" in printed
    assert "tokenizer_summary.json" in printed


def test_finetune_refuses_a_tokenizer_that_is_not_the_models(root, model_dir, finished_run):
    """Another spiece.model than the model directory's is refused by name, even with the same vocabulary size;
    where the directory has none, a different vocabulary size is."""
    from litebert import finetune as ft
    from litebert.corpus.tokenizer_training import train_tokenizer
    data = finished_run[0]
    other = root / "other_tok"
    train_tokenizer([str(root / "text.txt")], str(other), vocab_size=300, do_lower_case=False)
    cfg, _ = finetune_configs(model_dir, data, root / "unused")
    cfg.tokenizer = str(other)
    with pytest.raises(ConfigError, match=r"is not the tokenizer of .*spiece.model differs"):
        ft.prepare(cfg)
    cfg.tokenizer = str(model_dir)  # its own tokenizer, named: fine
    assert ft.prepare(cfg).tokenizer.vocab_size == 300
    bare = root / "bare_model"  # a model directory without tokenizer files
    shutil.copytree(model_dir, bare)
    for name in ("spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (bare / name).unlink(missing_ok=True)
    smaller = root / "smaller_tok"
    train_tokenizer([str(root / "text.txt")], str(smaller), vocab_size=250)
    cfg.model, cfg.tokenizer = str(bare), str(smaller)
    with pytest.raises(ConfigError, match="250 pieces but .* vocabulary of 300"):
        ft.prepare(cfg)


def nan_model(src: Path, dst: Path, key: str = "albert.embeddings.word_embeddings.weight") -> Path:
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    state = load_file(dst / "model.safetensors")
    state[key][3, 1] = float("nan")
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_nan_weights_are_an_error_at_evaluate_and_embed(finished_run, model_dir, tmp_path, capsys):
    data, out, _ = finished_run
    best = nan_model(out / "best", tmp_path / "nan_best")
    line = one_line_error(["evaluate", "--model", str(best), "--task", "table", "--data-dir", str(data),
                           "--text-columns", "text", "--max-length", "32"], capsys)
    assert "NaN or infinite" in line and "model.safetensors" in line and "word_embeddings" in line
    sentences = tmp_path / "s.txt"
    sentences.write_text("one sentence.\nanother one.\n")
    encoder = nan_model(model_dir, tmp_path / "nan_encoder")
    line = one_line_error(["embed", "--model", str(encoder), "--input", str(sentences), "--out",
                           str(tmp_path / "e.npy")], capsys)
    assert "NaN or infinite" in line and not (tmp_path / "e.npy").exists()


def test_nan_outputs_of_finite_weights_are_an_error_too(model_dir):
    """Weights can be finite and still overflow: embeddings and scores that are NaN/inf stop the verb."""
    from litebert.embed import embed
    from litebert.finetune import check_finite_scores
    from litebert.sentence import SentenceEncoder
    from litebert.tokenizer import Tokenizer
    model = SentenceEncoder.from_pretrained(str(model_dir))
    with torch.no_grad():
        model.albert.embeddings.word_embeddings.weight.fill_(3e38)
    with pytest.raises(NonFiniteError, match="embeddings are NaN or infinite for 2 of 2 sentences"):
        embed(model, Tokenizer.from_pretrained(str(model_dir)), ["one.", "two."])
    with pytest.raises(NonFiniteError, match="for 1 of 2 inputs"):
        check_finite_scores([np.ones(3), np.array([0.5, np.nan, 0.5])], "dev")


# ============================================================================================== tracebacks

SQUAD_WITH_STRINGS = {"data": ["an article that is a string",
                               {"title": "t", "paragraphs": [
                                   "a paragraph that is a string",
                                   {"context": "the cat sat", "qas": [
                                       "a question that is a string",
                                       {"id": "q1", "question": ["not", "a", "string"], "answers": []},
                                       {"id": "q2", "question": "who sat?",
                                        "answers": [{"text": "the cat", "answer_start": 0}]}]}]}]}


def test_squad_articles_paragraphs_and_questions_that_are_strings(tmp_path):
    from litebert.tasks.squad import read_squad
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(SQUAD_WITH_STRINGS))
    with pytest.raises(DataError, match=r"dev.json: data\[0\]: an article should be"):
        read_squad(path)
    examples = read_squad(path, errors="skip")
    assert [e.id for e in examples] == ["q2"] and len(examples.skipped) == 4
    assert any("paragraphs[0]: a paragraph should be" in s for s in examples.skipped)
    path.write_text(json.dumps({"data": "not a list"}))
    with pytest.raises(DataError, match='"data" should be a list'):
        read_squad(path)


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[: min(64, len(data))] = b"\x00\xff" * (min(64, len(data)) // 2)
    path.write_bytes(bytes(data))


# (what, file in the copied model dir, how it is damaged, the error's class, its words)
MODEL_FILE_DAMAGE = [
    ("truncated config.json", "config.json", _truncate, ConfigError, "not valid JSON, damaged or truncated"),
    ("truncated model.safetensors", "model.safetensors", _truncate, CheckpointError, "corrupt or truncated"),
    ("garbled model.safetensors", "model.safetensors", _garble, CheckpointError, "corrupt or truncated"),
    ("truncated spiece.model", "spiece.model", _truncate, CheckpointError, "not a valid SentencePiece model"),
    ("empty spiece.model", "spiece.model", lambda p: p.write_bytes(b""), CheckpointError, "the file is empty"),
    ("truncated tokenizer_config.json", "tokenizer_config.json", _truncate, CheckpointError, "not valid JSON"),
    ("truncated best_score.json", "best_score.json", _truncate, CheckpointError, "not valid JSON"),
]


@pytest.mark.parametrize("what,name,damage,error,words", MODEL_FILE_DAMAGE, ids=[c[0] for c in MODEL_FILE_DAMAGE])
def test_damaged_model_files_are_one_line_naming_the_file(finished_run, tmp_path, capsys, what, name, damage,
                                                         error, words):
    """Through `litebert evaluate` (which reads every file of a fine-tuned directory) and the library."""
    from litebert.finetune import FinetuneConfig, evaluate_checkpoint, previous_best
    data, out, _ = finished_run
    best = tmp_path / "best"
    shutil.copytree(out / "best", best)
    damage(best / name)
    cfg = FinetuneConfig(model=str(best), task="table", data_dir=str(data), text_columns=["text"], max_length=32)
    with pytest.raises(error, match=words):
        if name == "best_score.json":  # read by --resume
            previous_best(str(best), "accuracy", resume=True)
        else:
            evaluate_checkpoint(str(best), cfg, "dev")
    if name != "best_score.json":
        line = one_line_error(["evaluate", "--model", str(best), "--task", "table", "--data-dir", str(data),
                               "--text-columns", "text", "--max-length", "32"], capsys)
        assert words in line and name in line, line


# (what, damage to the copied dataset, the error's words; every message names the file)
DATASET_DAMAGE = [
    ("truncated meta.json", lambda d: _truncate(d / "meta.json"), "meta.json: not valid JSON"),
    ("meta.json without shards", lambda d: _edit_meta(d, lambda m: m.pop("shards")), "meta.json: damaged"),
    ("truncated shard (mmap length)", lambda d: _truncate(d / "shard_00000.input_ids.npy", 0.7),
     "shard_00000.input_ids.npy: truncated"),
    ("garbled shard header", lambda d: _garble(d / "shard_00000.offsets.npy"),
     "shard_00000.offsets.npy: not a .npy file"),
    ("missing shard file", lambda d: (d / "shard_00001.label.npy").unlink(), "shard_00001.label.npy is missing"),
    ("truncated vocab table", lambda d: _truncate(d / "vocab_special.npy", 0.3), "vocab_special.npy: damaged"),
    ("out-of-range id in meta", lambda d: _edit_meta(d, lambda m: m["shards"][0].update(max_id=70000)),
     "shard_00000 holds id 70000, outside the vocabulary of 300"),
]


def _edit_meta(directory: Path, change) -> None:
    meta = json.loads((directory / "meta.json").read_text())
    change(meta)
    (directory / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("what,damage,words", DATASET_DAMAGE, ids=[c[0] for c in DATASET_DAMAGE])
def test_damaged_datasets_are_refused_when_opened_naming_the_file(dataset, tmp_path, what, damage, words):
    from litebert.corpus.dataset import PretrainDataset
    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    damage(data)
    with pytest.raises(DataError, match=words):
        PretrainDataset(str(data))


def test_a_shard_holding_out_of_range_ids_is_refused_when_first_read(dataset, tmp_path):
    """A shard whose data (not its record in meta.json) holds an id beyond the vocabulary: refused naming the
    file when the shard is first mapped, not an IndexError inside a batch."""
    from litebert.corpus.dataset import PretrainDataset
    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    ids = np.load(data / "shard_00001.input_ids.npy")
    ids[5] = 299 + 1000
    np.save(data / "shard_00001.input_ids.npy", ids)
    ds = PretrainDataset(str(data))
    assert ds[0]["input_ids"][0] == 2  # shard 0 is fine
    with pytest.raises(DataError, match=r"shard_00001.input_ids.npy holds id 1299, outside the vocabulary of 300"):
        ds[20]


def test_a_truncated_task_file_is_a_data_error_naming_the_line_or_a_counted_skip(finished_run, tmp_path):
    """Read strictly (evaluate, predict, a registered task's labels) it is an error naming file:line; fine-tuning
    reads leniently and counts the record in its summary's skips."""
    from litebert.tasks.readers import read_table
    path = tmp_path / "train.jsonl"
    shutil.copy(finished_run[0] / "train.jsonl", path)
    _truncate(path, 0.5)
    with pytest.raises(DataError, match=r"train.jsonl:\d+: invalid JSON"):
        read_table(path, ["text"], "label")
    examples = read_table(path, ["text"], "label", errors="skip")
    assert examples.skip_counts == {"unreadable": 1} and examples.records == len(examples) + 1


TASK_FILE_DAMAGE = [
    ("truncated .gz", "train.jsonl.gz", lambda p: _truncate(p, 0.5), "cannot read as gzip"),
    ("not UTF-8", "train.jsonl", lambda p: p.write_bytes(p.read_bytes().replace(b"sea", b"s\xe9a", 1)),
     r"train.jsonl:1: not UTF-8 text"),
]


@pytest.mark.parametrize("what,name,damage,words", TASK_FILE_DAMAGE, ids=[c[0] for c in TASK_FILE_DAMAGE])
def test_damaged_task_files_are_one_line_naming_file_and_line(finished_run, model_dir, tmp_path, capsys, what,
                                                             name, damage, words):
    data = tmp_path / "task"
    shutil.copytree(finished_run[0], data)
    if name.endswith(".gz"):
        with open(data / "train.jsonl", "rb") as src, gzip.open(data / name, "wb") as dst:
            dst.write(src.read() * 50)
        (data / "train.jsonl").unlink()
    damage(data / name)
    import re
    line = one_line_error(["finetune", "--model", str(model_dir), "--task", "table", "--data-dir", str(data),
                           "--text-columns", "text", "--max-length", "32", "--out-dir", str(tmp_path / "out"),
                           "--max-steps", "1", "--batch-size", "4", "--device", "cpu", "--no-progress"], capsys)
    assert re.search(words, line), line
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_truncated_corpus_is_one_line_at_tokenizer_and_prepare(root, tok_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write((root / "text.txt").read_text() * 20)
    _truncate(corpus, 0.5)
    line = one_line_error(["tokenizer", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "200"], capsys)
    assert f"cannot read {corpus}" in line
    line = one_line_error(["prepare", str(corpus), "--out", str(tmp_path / "data"), "--tokenizer", str(tok_dir),
                           "--num-workers", "1", "--no-progress"], capsys)
    assert f"cannot read {corpus}" in line
    assert not (tmp_path / "tok").exists() and not list((tmp_path / "data").glob("*.npy"))


# ================================================================================================ messages

def test_a_mistyped_local_path_never_goes_to_the_hub(tmp_path, monkeypatch):
    """./x, ../x, /x, ~/x, a/b/c: 'no such directory', at once."""
    from litebert import hub
    from litebert.tokenizer import Tokenizer
    from litebert.weights import resolve_model_dir
    monkeypatch.chdir(tmp_path)

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was tried")

    monkeypatch.setattr(hub, "fetch_from_hub", no_hub)
    for name in ["./model", "../model", "/no/such/model", "~/model", "a/b/c", "out\\x"]:
        assert not hub.looks_like_hub_id(name), name
        with pytest.raises(FileNotFoundError, match="no such directory"):
            resolve_model_dir(name)
        with pytest.raises(FileNotFoundError, match="no such directory"):
            Tokenizer.from_pretrained(name)
    assert hub.looks_like_hub_id("albert/albert-base-v2") and hub.looks_like_hub_id("albert-base-v2")


def test_a_hub_id_whose_namespace_is_a_directory_here_is_still_asked_and_a_typo_says_so(tmp_path, monkeypatch):
    """albert/albert-base-v2 (the Hub's own name) was refused as a mistyped path wherever ./albert existed, as
    beside a clone of google-research/albert. Now it is asked for; out/rnu, when the Hub has no such model,
    fails in one line that names out/ as the likelier typo."""
    pytest.importorskip("huggingface_hub")
    from litebert import hub
    from litebert.weights import resolve_model_dir
    monkeypatch.chdir(tmp_path)
    (tmp_path / "albert").mkdir()
    (tmp_path / "out").mkdir()
    asked = []

    def lookup(module, repo_id, asked_with):
        asked.append(repo_id)
        return "the Hub has no model of that name either"

    monkeypatch.setattr(hub, "_hub_lookup", lookup)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert hub.looks_like_hub_id("albert/albert-base-v2") and hub.looks_like_hub_id("out/rnu")
    with pytest.raises(FileNotFoundError) as error:
        resolve_model_dir("out/rnu")
    assert asked == ["out/rnu"]
    assert str(error.value) == ("no such directory: out/rnu (the Hub has no model of that name either; out/ is a "
                                "directory here: a typo in a path below it?)")
    with pytest.raises(FileNotFoundError, match="the Hub has no model"):
        resolve_model_dir("albert/albert-base-v2")
    assert asked[-1] == "albert/albert-base-v2"


def test_sentencepiece_internals_become_words(root, capsys):
    line = one_line_error(["tokenizer", str(root / "text.txt"), "--out", str(root / "tok_small"),
                           "--vocab-size", "12"], capsys)
    assert "too small for this corpus" in line and "--vocab-size" in line
    assert ".cc(" not in line and "INTERNAL" not in line and "character_coverage" not in line
    from litebert.corpus.tokenizer_training import spm_message
    assert spm_message(RuntimeError("INTERNAL: src/trainer_interface.cc(783) [a <= (b)] Something went wrong.")) \
        == "Something went wrong."


def test_a_dev_file_with_no_usable_rows_is_refused_before_the_model_is_loaded(model_dir, tmp_path, monkeypatch):
    from litebert import finetune as ft
    data = table_task(tmp_path / "task", dev_unknown=8)  # every dev label is one training never had
    monkeypatch.setattr(ft, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(DataError, match=r"no usable dev examples .*8 skipped.*is not one of"):
        ft.finetune(*finetune_configs(model_dir, data, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# ============================================================================================ the CLI switch

def _verbs(monkeypatch, **functions) -> None:
    """Register fake verbs: name -> function(argv)."""
    from litebert import cli
    module = types.ModuleType("litebert_fault_verbs")
    for name, function in functions.items():
        setattr(module, name, function)
        monkeypatch.setitem(cli.VERBS, name, (f"litebert_fault_verbs:{name}", "test"))
    monkeypatch.setitem(sys.modules, "litebert_fault_verbs", module)


def _raise(error):
    def verb(argv):
        raise error
    return verb


def test_the_cli_prints_one_line_for_user_errors_and_os_errors_naming_the_file(monkeypatch, capsys):
    _verbs(monkeypatch, user=_raise(DataError("x.jsonl:3: invalid JSON")),
           full=_raise(OSError(errno.ENOSPC, "No space left on device", "out/tok")),
           denied=_raise(PermissionError(errno.EACCES, "Permission denied", "out/run", None)),
           moved=_raise(OSError(errno.EXDEV, "Invalid cross-device link", "a", None, "b")))
    assert one_line_error(["user"], capsys) == "litebert user: error: x.jsonl:3: invalid JSON"
    assert one_line_error(["full"], capsys) == "litebert full: error: out/tok: No space left on device"
    assert one_line_error(["denied"], capsys) == "litebert denied: error: out/run: Permission denied"
    assert one_line_error(["moved"], capsys) == "litebert moved: error: a -> b: Invalid cross-device link"


def test_the_cli_lets_any_other_exception_keep_its_traceback(monkeypatch):
    """A plain ValueError, a KeyError, a RuntimeError are bugs: they propagate (the interpreter prints the
    traceback), they are not dressed as a user's error."""
    _verbs(monkeypatch, value=_raise(ValueError("a bug")), key=_raise(KeyError("k")),
           runtime=_raise(RuntimeError("boom")))
    for verb, error in (("value", ValueError), ("key", KeyError), ("runtime", RuntimeError)):
        with pytest.raises(error):
            litebert_main([verb])


def test_no_user_fixable_value_error_is_left_in_the_files_converted():
    """The package's user errors are LitebertErrors; a bare `raise ValueError` left in these files is an
    internal check (a programming error), listed here so that a new one is a decision."""
    import re
    converted = ["litebert/corpus/tokenizer_training.py", "litebert/corpus/pairs.py", "litebert/corpus/shards.py",
                 "litebert/corpus/dataset.py", "litebert/corpus/documents.py",
                 "litebert/corpus/batches.py",
                 "litebert/tasks/readers.py", "litebert/tasks/squad.py", "litebert/tasks/registry.py",
                 "litebert/tasks/records.py", "litebert/tokenizer.py", "litebert/weights.py", "litebert/config.py",
                 "litebert/vocab.py", "litebert/interop/convert.py", "litebert/finetune.py", "litebert/embed.py",
                 "litebert/hub.py", "litebert/files.py"]
    internal = {  # file -> messages of the ValueErrors kept on purpose (callers' mistakes, not users')
        "litebert/tasks/records.py": ["errors must be 'raise' or 'skip'"],
        "litebert/tasks/squad.py": ["max_query_length", "doc_stride must be positive", "features but"],
        "litebert/tasks/registry.py": ["examples but"],
    }
    for name in converted:
        for message in re.findall(r'raise ValueError\((?:f?"([^"]*))', (REPO / name).read_text()):
            assert any(m in message for m in internal.get(name, [])), f"{name}: raise ValueError({message!r})"


# ==================================================================================== property-based readers

# derandomize: the same 150 examples on every run, so CI passes or fails on the code alone. A random draw found the
# unlabelled-question case above once in many runs (2026-11-28), and CI would have failed on the test, not the code;
# to explore, run with derandomize=False and a larger max_examples locally.
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["id", "text", "label", "question", "options", "context", "answers",
                                                "answer_start", "data", "paragraphs", "qas", "title", "x"]),
                               inner, max_size=5),
                           max_leaves=20)
lines = st.lists(st.one_of(json_values.map(lambda v: json.dumps(v)), st.text(max_size=30)), max_size=8)


def _read_file(suffix: str, content: bytes, read):
    """read(path) on a file holding `content`: it returns Examples, or raises DataError; nothing else."""
    from litebert.tasks.records import Examples
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"split{suffix}"
        path.write_bytes(content)
        try:
            result = read(path)
        except DataError:
            return None
        assert isinstance(result, Examples)
        assert all(isinstance(s, str) and s.startswith(str(path)) for s in result.skipped)
        return result


@SETTINGS
@given(rows=lines, suffix=st.sampled_from([".jsonl", ".tsv", ".csv"]), skip=st.booleans(),
       regression=st.booleans())
def test_read_table_returns_examples_or_a_data_error(rows, suffix, skip, regression):
    from litebert.tasks.readers import read_table
    header = "" if suffix == ".jsonl" else ("text\tlabel\n" if suffix == ".tsv" else "text,label\n")
    content = (header + "\n".join(rows)).encode("utf-8", "surrogatepass")
    result = _read_file(suffix, content, lambda p: read_table(p, ["text"], "label", regression=regression,
                                                              errors="skip" if skip else "raise"))
    if result is not None:
        assert all(isinstance(e.text_a, str) for e in result)


@SETTINGS
@given(rows=lines, skip=st.booleans(), raw=st.binary(max_size=40))
def test_read_choice_jsonl_returns_examples_or_a_data_error(rows, skip, raw):
    from litebert.tasks.readers import read_choice_jsonl
    errors = "skip" if skip else "raise"
    for content in ("\n".join(rows).encode("utf-8", "surrogatepass"), raw):
        result = _read_file(".jsonl", content, lambda p: read_choice_jsonl(p, errors=errors))
        if result is not None:
            assert all(0 <= e.label < len(e.options) for e in result)


squad_json = st.fixed_dictionaries({"data": st.one_of(json_values, st.lists(st.one_of(
    json_values, st.fixed_dictionaries({"title": json_values, "paragraphs": st.one_of(json_values, st.lists(
        st.one_of(json_values, st.fixed_dictionaries({
            "context": st.one_of(st.just("the cat sat on the mat"), json_values),
            "qas": st.one_of(json_values, st.lists(st.one_of(json_values, st.fixed_dictionaries({
                "id": json_values, "question": json_values,
                "answers": st.one_of(json_values, st.lists(st.fixed_dictionaries({
                    "text": st.sampled_from(["the cat", "mat", "dog"]) | json_values,
                    "answer_start": st.integers(-2, 30) | json_values})))})), max_size=3))})), max_size=3))})),
    max_size=3))})


@SETTINGS
@given(doc=squad_json, skip=st.booleans(), cut=st.integers(0, 400))
def test_read_squad_returns_examples_or_a_data_error(doc, skip, cut):
    """Nested SQuAD JSON of any shape (strings where objects belong, and so on), whole or truncated."""
    from litebert.tasks.squad import read_squad
    text = json.dumps(doc)
    errors = "skip" if skip else "raise"
    for content in (text, text[:cut]):
        result = _read_file(".json", content.encode(), lambda p: read_squad(p, errors=errors))
        if result is not None:
            # answers None: an unlabelled question (a test file may have none), which has no spans to check
            assert all(e.context[a.start:a.start + len(a.text)] == a.text for e in result for a in e.answers or [])


@SETTINGS
@given(rows=lines, skip=st.booleans())
def test_read_squad_jsonl_returns_examples_or_a_data_error(rows, skip):
    from litebert.tasks.squad import read_squad
    result = _read_file(".jsonl", "\n".join(rows).encode("utf-8", "surrogatepass"),
                        lambda p: read_squad(p, errors="skip" if skip else "raise"))
    if result is not None:
        assert len({e.id for e in result}) == len(result)


def test_litebert_errors_are_value_errors_for_callers_that_caught_those():
    assert issubclass(LitebertError, ValueError) and issubclass(NonFiniteError, CheckpointError)


def test_convert_and_extend_vocab_refuse_to_replace_a_model_unless_told(model_dir, tmp_path, capsys):
    """convert writes beside --out and moves its files in; a model already there that would change is refused
    before anything is touched (an identical rerun goes through). extend-vocab refuses a non-empty --out.
    Both replace with --overwrite."""
    out = tmp_path / "converted"
    assert litebert_main(["convert", "--from-hf", str(model_dir), "--out", str(out)]) == 0
    assert litebert_main(["convert", "--from-hf", str(model_dir), "--out", str(out)]) == 0  # the same files
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    capsys.readouterr()
    before = tree(out)
    line = one_line_error(["convert", "--from-hf", str(other), "--out", str(out)], capsys)
    assert "already holds README.md, config.json" in line and "--overwrite" in line and tree(out) == before
    assert debris(tmp_path) == []
    assert litebert_main(["convert", "--from-hf", str(other), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["hidden_act"] == "relu"

    words = tmp_path / "words.txt"
    words.write_text("zeitgeist\n")
    capsys.readouterr()
    before = tree(out)
    line = one_line_error(["extend-vocab", "--model", str(model_dir), "--out", str(out), "--words", str(words)],
                          capsys)
    assert "not empty" in line and tree(out) == before
    assert litebert_main(["extend-vocab", "--model", str(model_dir), "--out", str(out), "--words", str(words),
                          "--overwrite"]) == 0
    assert AlbertConfig.load(out).vocab_size == 301 and debris(tmp_path) == []


def test_a_result_file_is_replaced_whole_or_not_at_all(tmp_path):
    """predict/evaluate/embed/ensemble outputs and GLUE submissions go through files.atomic_open: a failure while
    writing (here an exception; a full disk or a kill alike) leaves the previous file as it was, and no litter."""
    from litebert.tasks.records import TextExample
    from litebert.tasks.registry import TASKS, write_glue_predictions
    path = tmp_path / "predictions.jsonl"
    path.write_text("the previous result\n")
    with pytest.raises(RuntimeError, match="mid-write"):
        with files.atomic_open(path) as f:
            f.write('{"id": 1}\n')
            raise RuntimeError("mid-write")
    assert path.read_text() == "the previous result\n" and os.listdir(tmp_path) == ["predictions.jsonl"]
    submission = tmp_path / "SST-2.tsv"
    submission.write_text("index\tprediction\n0\t1\n")
    examples = [TextExample("0", "a", None, "1"), TextExample("1", "b", None, "0")]
    with pytest.raises(ConfigError):  # the second prediction is not a label: found after the first row was written
        write_glue_predictions(submission, TASKS["SST-2"], examples, ["0", 7])
    assert submission.read_text() == "index\tprediction\n0\t1\n"
    with files.atomic_open(tmp_path / "vectors.npy", "wb") as f:
        np.save(f, np.ones((2, 3), np.float32))
    assert np.load(tmp_path / "vectors.npy").shape == (2, 3)
    with files.atomic_open(os.devnull) as f:  # a device (--out /dev/stdout) is written in place
        f.write("nothing to stage\n")
    # a killed writer's stage (no handler ran) is removed by the next writer; a running writer's is not touched
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stage = f".tmp-predictions.jsonl.{socket.gethostname()}."
    (tmp_path / f"{stage}{dead.pid}").write_text("half")
    (tmp_path / f"{stage}{os.getppid()}").write_text("being written")
    elsewhere = tmp_path / f"{stage}{dead.pid + 100000}"  # no such process here, but its writer holds the lock:
    elsewhere.write_text("a container with this host name, writing")  # another PID namespace on this filesystem
    with open(elsewhere, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        files.write_text_atomically(path, "the next result\n")
    assert sorted(debris(tmp_path)) == sorted([f"{stage}{os.getppid()}", elsewhere.name])
    assert path.read_text() == "the next result\n"


def test_a_named_output_file_the_verb_did_not_write_is_refused_unless_told(finished_run, model_dir, tmp_path,
                                                                            capsys):
    """--out naming an input (or anything else that is not an earlier result of the same verb) is refused before
    any work, naming --overwrite; an earlier result of the verb is replaced; --overwrite replaces anything."""
    data, out, _ = finished_run
    task = ["--task", "table", "--data-dir", str(data), "--text-columns", "text", "--max-length", "32"]
    sentences = tmp_path / "s.txt"
    sentences.write_text("one sentence.\nanother one.\n")
    labels = tmp_path / "labels.npy"  # an array, but not of embeddings
    np.save(labels, np.arange(4))
    cases = {  # verb: (argv without --out, the file it must not replace); results are named as the victim is
        "predict": (["predict", "--model", str(out / "best"), "--input", str(sentences)], sentences),
        "predict-split": (["predict", "--model", str(out / "best"), *task, "--split", "dev"], data / "train.jsonl"),
        "evaluate": (["evaluate", "--model", str(out / "best"), *task], out / "best" / "config.json"),
        "embed": (["embed", "--model", str(model_dir), "--input", str(sentences)], labels),
        "analyze": (["analyze", str(model_dir), "--text", str(sentences)], tmp_path / "notes.png"),
    }
    (tmp_path / "notes.png").write_text("a text file with an image's name\n")
    for name, (argv, victim) in cases.items():
        before = victim.read_bytes()
        line = one_line_error([*argv, "--out", str(victim)], capsys)
        assert str(victim) in line and "--overwrite" in line and victim.read_bytes() == before, (name, line)
        mine = tmp_path / f"{name}.out{victim.suffix}"
        assert litebert_main([*argv, "--out", str(mine)]) == 0, name
        first = mine.read_bytes()
        assert litebert_main([*argv, "--out", str(mine)]) == 0, name  # its own earlier result: replaced
        assert mine.read_bytes() == first, name
        copy = tmp_path / f"{name}.copy{victim.suffix}"
        copy.write_bytes(before)
        assert litebert_main([*argv, "--out", str(copy), "--overwrite"]) == 0, name
        assert copy.read_bytes() == first, name
        capsys.readouterr()
    from litebert.evaluate import _is_metrics  # a tagging task's metrics hold entity F1 per type
    tagging = tmp_path / "tagging_metrics.json"
    tagging.write_text(json.dumps({"f1": 0.5, "precision": 0.4, "recall": 0.6, "per_type": {"PER": {"f1": 0.5}},
                                   "scored_on": "dev: 8 of 8"}))
    assert _is_metrics(tagging) and not _is_metrics(out / "best" / "config.json")


def test_a_tag_set_that_is_not_bio_is_refused_before_training(model_dir, tmp_path, capsys):
    """Entity F1 reads BIO tags; a BILOU file used to train until its first evaluation, then stop on a
    ValueError from the scorer. The tag set is checked when it is read."""
    data = tmp_path / "conll"
    data.mkdir()
    rows = "EU NNP B-NP U-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n\n" * 4
    for name in ("train.txt", "valid.txt"):
        (data / name).write_text(rows)
    line = one_line_error(["finetune", "--model", str(model_dir), "--task", "conll2003", "--data-dir", str(data),
                           "--max-steps", "2", "--out-dir", str(tmp_path / "run"), "--no-progress"], capsys)
    assert "'U-ORG'" in line and "in the tag set of conll2003" in line and "BIO" in line
    assert not (tmp_path / "run" / "step_2").exists()


def test_ensemble_refuses_an_out_directory_that_is_not_an_ensembles(finished_run, capsys):
    """--out naming a model directory would have its calibration.json replaced by the ensemble's."""
    data, out, _ = finished_run
    before = tree(out / "best")
    line = one_line_error(["ensemble", "--task", "table", "--data-dir", str(data), "--text-columns", "text",
                           "--max-length", "32", "--models", str(out / "best"), "--split", "none",
                           "--out", str(out / "best")], capsys)
    assert "no ensemble.json" in line and "--overwrite" in line and tree(out / "best") == before


@SETTINGS
@given(payload=json_values | st.dictionaries(st.sampled_from(["inputs", "input", "options"]), json_values, max_size=2),
       family=st.sampled_from(["classification", "multiple_choice", "qa", "tagging", "fill_mask"]))
def test_the_request_parser_returns_inputs_or_a_one_line_4xx(payload, family):
    """Whatever JSON a request body holds, serve's parser answers with the inputs the family accepts or a
    RequestError (a 4xx and one line), never another exception (which would be a 500)."""
    from litebert.serving.server import RequestError, parse_inputs
    from litebert.tasks.families import FAMILIES
    from litebert.tasks.untrained import MaskedLanguageModel
    validate = MaskedLanguageModel().example if family == "fill_mask" else \
        {"classification": FAMILIES["classification"], "multiple_choice": FAMILIES["multiple_choice"],
         "qa": FAMILIES["qa"], "tagging": FAMILIES["tagging"]}[family].example
    try:
        inputs, single = parse_inputs(payload, lambda raw: validate(raw, 0), max_inputs=4, max_text_chars=50)
    except RequestError as e:
        assert 400 <= e.status < 500 and "\n" not in str(e) and str(e)
        return
    assert isinstance(inputs, list) and inputs and (len(inputs) == 1 or not single)
    assert isinstance(payload, dict) and set(payload) == {"inputs"}
