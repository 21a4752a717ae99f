"""Edge cases of the training loop and fine-tuning that used to lose work or end in a traceback: a resumed run
forgetting its best score, an evaluation failing before the final save, bad batch sizes and decay powers, a
tokenizer larger than the model, and a model given as a Hub id. All tiny and offline."""

import os
import socket
import subprocess
import sys

import pytest
import torch
from paths import SHARED_DATA
from test_finetune import tiny_model_dir
from test_train import make_toy, toy_batches, toy_config

import litebert.finetune as F
import litebert.tokenizer
import litebert.training.checkpoint as ckpt
import litebert.weights
from litebert.config import AlbertConfig
from litebert.model import AlbertForPreTraining
from litebert.pretrain import PretrainConfig
from litebert.tasks.families import FAMILIES
from litebert.training.loop import train
from litebert.training.optim import make_schedule
from litebert.training.train_config import TrainConfig

HUB_ID = "someone/tiny-albert"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("edge"))


def ft_config(model: str, **kw) -> F.FinetuneConfig:
    return F.FinetuneConfig(model=model, task="novel_authorship", data_dir=str(SHARED_DATA / "tasks" / "novel_authorship"),
                            max_length=32, max_train_examples=16, max_eval_examples=8, eval_batch_size=8, **kw)


def ft_train_config(tmp_path, **kw) -> TrainConfig:
    base = dict(optimizer="adamw", lr=1e-3, batch_size=4, max_steps=2, eval_every=2, save_every=2, keep_last=0,
                out_dir=str(tmp_path / "run"), progress=False, device="cpu")
    return TrainConfig(**{**base, **kw})


def scripted_accuracy(monkeypatch, values):
    """Make each evaluation report the next of `values` as its accuracy, whatever the model predicts."""
    family = FAMILIES["classification"]
    values, real = iter(values), family.score

    def score(*args, **kwargs):
        scored = real(*args, **kwargs)
        return scored._replace(metrics={**scored.metrics, "accuracy": next(values)})

    monkeypatch.setattr(family, "score", score)


def test_resume_keeps_the_best_model_unless_beaten(model_dir, tmp_path, monkeypatch):
    scripted_accuracy(monkeypatch, [0.9, 0.5])
    cfg = ft_config(str(model_dir))
    F.finetune(cfg, ft_train_config(tmp_path))
    weights = tmp_path / "run" / "best" / "model.safetensors"
    before = weights.read_bytes()
    summary = F.finetune(cfg, ft_train_config(tmp_path, max_steps=4, resume=True))
    assert summary["steps"] == 4 and summary["best"]["accuracy"] == 0.9
    assert weights.read_bytes() == before


def test_a_failed_write_of_best_keeps_the_previous_one(model_dir, tmp_path, monkeypatch):
    scripted_accuracy(monkeypatch, [0.5, 0.9])
    cfg = ft_config(str(model_dir))
    F.finetune(cfg, ft_train_config(tmp_path))
    best = tmp_path / "run" / "best"
    before = {p.name: p.read_bytes() for p in best.iterdir()}

    def disk_full(self, directory):
        raise OSError("No space left on device")

    monkeypatch.setattr(litebert.tokenizer.Tokenizer, "save_pretrained", disk_full)
    with pytest.raises(OSError, match="No space"):
        F.finetune(cfg, ft_train_config(tmp_path, max_steps=4, resume=True))
    assert {p.name: p.read_bytes() for p in best.iterdir()} == before
    assert not (tmp_path / "run" / ".tmp-best").exists()


def test_a_kill_between_the_renames_gets_the_old_directory_back(tmp_path):
    ckpt.write_dir_atomically(tmp_path / "best", lambda d: (d / "w").write_text("old"))
    (tmp_path / "best").rename(tmp_path / ".trash-best")  # as if killed right after the first rename
    ckpt.remove_partial(tmp_path)
    assert (tmp_path / "best" / "w").read_text() == "old"


def test_resuming_clears_file_stages_of_killed_writers(tmp_path):
    """A run killed while drawing its last plot is resumed with nothing left to do, so no next writer of
    metrics.png would clear the stage: the resume does, and leaves a live writer's stage alone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stage = f".tmp-metrics.png.{socket.gethostname()}."
    (tmp_path / f"{stage}{dead.pid}").write_bytes(b"half a png")
    (tmp_path / f"{stage}{os.getppid()}").write_bytes(b"being written")
    (tmp_path / f".tmp-notes.{dead.pid}").write_text("not a stage of this host's form: kept")
    removed = ckpt.remove_partial(tmp_path)
    assert [p.name for p in removed] == [f"{stage}{dead.pid}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{stage}{os.getppid()}", f".tmp-notes.{dead.pid}"])


def test_the_last_step_is_saved_before_its_evaluation_can_fail(tmp_path):
    def evaluate(model):
        raise RuntimeError("evaluation broke")

    model = make_toy()
    with pytest.raises(RuntimeError, match="evaluation broke"):
        train(model, toy_batches(8, 8), toy_config(tmp_path, max_steps=3), evaluate)
    assert ckpt.latest_checkpoint(tmp_path / "run").name == "step_3"
    assert model.training  # not left in eval mode for a caller that goes on with it


@pytest.mark.parametrize("make", [lambda: F.FinetuneConfig(eval_batch_size=0),
                                  lambda: PretrainConfig(eval_batch_size=0)], ids=["finetune", "pretrain"])
def test_eval_batch_size_must_be_positive(make):
    with pytest.raises(ValueError, match="eval_batch_size must be >= 1, got 0"):
        make()


def test_negative_decay_power_is_refused_up_front():
    with pytest.raises(ValueError, match="lr-decay-power"):
        TrainConfig(lr_decay_power=-1.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="power=-1.0"):
        make_schedule(optimizer, 0, 10, -1.0)


def test_a_tokenizer_larger_than_the_model_is_a_one_line_error(model_dir, tmp_path):
    small = tmp_path / "small"
    AlbertForPreTraining(AlbertConfig(vocab_size=200, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=64)).save_pretrained(small)
    cfg = ft_config(str(small), tokenizer=str(model_dir))
    with pytest.raises(ValueError, match=r"has 300 pieces but model .* has vocab_size 200"):
        F.finetune(cfg, ft_train_config(tmp_path))
    with pytest.raises(ValueError, match=r"has 300 pieces but model .* has vocab_size 200"):
        F.evaluate_checkpoint(str(small), cfg, "dev")
    assert not (tmp_path / "run").exists()


def test_finetuning_a_hub_id_copies_the_downloaded_tokenizer(model_dir, tmp_path, monkeypatch):
    """The Hub is faked by its local snapshot: checkpoints need that directory, not the id, to copy spiece.model."""
    resolve = litebert.weights.resolve_model_dir
    monkeypatch.setattr(litebert.weights, "resolve_model_dir",
                        lambda name, *args: str(model_dir) if name == HUB_ID else resolve(name, *args))
    monkeypatch.setattr(F, "resolve_model_dir", litebert.weights.resolve_model_dir)  # finetune's own binding
    monkeypatch.setattr(litebert.tokenizer, "download_tokenizer", lambda repo_id: str(model_dir / "spiece.model"))
    summary = F.finetune(ft_config(HUB_ID), ft_train_config(tmp_path))
    assert summary["steps"] == 2 and summary["model"] == HUB_ID
    assert (tmp_path / "run" / "step_2" / "spiece.model").is_file()
