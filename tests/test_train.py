"""The training loop on a toy model that follows the model contract; configs; DDP == single process.

`ToyModel` and `toy_batches` are also used by test_checkpoint.py and by the DDP worker script below.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from fixtures.runs import free_ports
from torch import nn

from litebert.errors import ConfigError
from litebert.runconfig import add_config_args, dump_toml, load_toml, resolve_config
from litebert.training import metrics_log
from litebert.training.data import shuffled_batches
from litebert.training.loop import NonFiniteLossError, train
from litebert.training.metrics_log import read_metrics
from litebert.training.train_config import TrainConfig

torch.set_num_threads(1)

VOCAB, DIM, SEQ = 13, 16, 6


class ToyOutput(NamedTuple):
    loss: torch.Tensor
    logits: torch.Tensor


class ToyModel(nn.Module):
    """Embedding -> MLP with dropout -> decoder tied to the embedding (+ bias): the contract in miniature."""

    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.config = {"vocab": VOCAB, "dim": DIM, "dropout": dropout}
        self.embed = nn.Embedding(VOCAB, DIM)
        self.dense = nn.Linear(DIM, DIM)
        self.LayerNorm = nn.LayerNorm(DIM)
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(DIM, VOCAB)
        self.decoder.weight = self.embed.weight  # tied, as ALBERT's MLM decoder

    def forward(self, input_ids, labels, poison=None):
        h = self.dropout(F.gelu(self.LayerNorm(self.dense(self.embed(input_ids)))))
        logits = self.decoder(h)  # (B, T, V)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))
        if poison is not None:
            loss = loss * poison.float().mean()  # a batch with poison = nan makes the loss nan
        return ToyOutput(loss, logits)

    def save_pretrained(self, directory):
        from safetensors.torch import save_file
        os.makedirs(directory, exist_ok=True)
        Path(directory, "config.json").write_text(json.dumps(self.config))
        state = {k: v.contiguous() for k, v in self.state_dict().items() if k != "decoder.weight"}
        save_file(state, os.path.join(directory, "model.safetensors"))

    @classmethod
    def from_pretrained(cls, directory):
        from litebert.training.checkpoint import load_model_weights
        model = cls(json.loads(Path(directory, "config.json").read_text())["dropout"])
        load_model_weights(model, directory)
        return model


def toy_example(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Example `index` of an infinite deterministic dataset; the label is a fixed function of the input."""
    g = torch.Generator().manual_seed(1000 + index)
    ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
    return ids, (ids * 5 + 3) % VOCAB


def toy_batches(batch_size: int, micro_batch_size: int, poison_step: int | None = None):
    """batch_fn: step s holds examples s*B .. s*B+B-1, micro-batch slot = micro * world_size + rank."""
    def batch_fn(step, micro, rank, world_size):
        start = step * batch_size + (micro * world_size + rank) * micro_batch_size
        ids, labels = zip(*(toy_example(i) for i in range(start, start + micro_batch_size)))
        batch = {"input_ids": torch.stack(ids), "labels": torch.stack(labels)}
        if poison_step is not None:
            batch["poison"] = torch.full((1,), float("nan") if step == poison_step else 1.0)
        return batch
    return batch_fn


def toy_config(tmp_path, **kw) -> TrainConfig:
    base = dict(lr=0.02, batch_size=8, max_steps=12, out_dir=str(tmp_path / "run"), progress=False,
                log_every=1, seed=3, device="cpu")  # bit-exactness is a CPU promise
    merged = {**base, **kw}
    merged.setdefault("warmup_steps", min(2, merged["max_steps"]))  # a warmup longer than the run is refused
    return TrainConfig(**merged)


def make_toy(dropout=0.1) -> ToyModel:
    torch.manual_seed(0)
    return ToyModel(dropout)


def test_overfits_one_batch(tmp_path):
    fixed = toy_batches(8, 8)(0, 0, 0, 1)
    cfg = toy_config(tmp_path, lr=0.05, max_steps=150, warmup_steps=10, log_every=50)
    result = train(make_toy(0.0), lambda *_: fixed, cfg)
    assert result.losses[1] > 2.0 and result.losses[150] < 0.05


def test_nothing_of_a_finished_run_waits_for_the_garbage_collector(tmp_path):
    """Under torchrun a Run kept alive by a reference cycle held DDP, hence gloo's threads, into interpreter
    shutdown, where the rank aborted after finishing ("terminate called without an active exception") and
    torchrun restarted a finished run (CI, 1 run in about 30). Nothing of a run may outlive `train`."""
    import gc

    from litebert.training.loop import Run
    gc.collect()
    gc.disable()  # only what reference counting frees, or train frees itself, is gone
    try:
        train(make_toy(0.1), toy_batches(8, 4), toy_config(tmp_path, max_steps=2))
        left = [type(o).__name__ for o in gc.get_objects() if isinstance(o, Run)]
    finally:
        gc.enable()
    assert left == []


def test_a_resume_with_more_steps_takes_its_first_lr_from_the_new_schedule(tmp_path):
    """The old run ended at lr 0; resumed with --max-steps 8, step 5 is the new schedule's (1 - 4/8) x lr, not
    the 0 its optimizer state held."""
    from litebert.training.optim import lr_factor
    train(make_toy(0.0), toy_batches(8, 8), toy_config(tmp_path, max_steps=4))
    train(make_toy(0.0), toy_batches(8, 8), toy_config(tmp_path, max_steps=8, resume=True))
    lrs = {r["step"]: r["lr"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "lr" in r}
    assert lrs[5] == pytest.approx(0.02 * lr_factor(4, 2, 8)) and lrs[5] > 0


def test_the_first_record_after_a_resume_averages_its_whole_interval(tmp_path):
    """Logging every 4 steps, saved at 6, killed at 7: resumed, step 8's record averages steps 5-8 as the
    uninterrupted run's does (the steps not yet recorded travel in the checkpoint), not 7-8 alone."""
    def records(run_dir):
        return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r}

    whole = tmp_path / "whole"
    train(make_toy(0.0), toy_batches(8, 8), toy_config(whole, max_steps=8, log_every=4, save_every=2))
    killed = tmp_path / "killed"
    with pytest.raises(NonFiniteLossError):
        train(make_toy(0.0), toy_batches(8, 8, poison_step=6), toy_config(killed, max_steps=8, log_every=4,
                                                                          save_every=2))
    train(make_toy(0.0), toy_batches(8, 8), toy_config(killed, max_steps=8, log_every=4, save_every=2, resume=True))
    assert records(killed / "run") == records(whole / "run") and set(records(whole / "run")) == {4, 8}


def test_the_progress_bar_shows_on_a_terminal_only(tmp_path, capsys, monkeypatch):
    """progress=True draws tqdm's bar on a terminal; into a log file or a pipe (CI) it writes nothing."""
    cfg = toy_config(tmp_path, max_steps=3, progress=True)
    train(make_toy(), toy_batches(8, 8), cfg)
    assert "train:" not in capsys.readouterr().err  # pytest's capture is no terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=3, progress=True, out_dir=str(tmp_path / "t")))
    assert "train: 100%" in capsys.readouterr().err


def test_metrics_png_is_drawn_at_evaluations_the_end_and_saves_at_most_every_30_s(tmp_path, monkeypatch):
    """A drawing costs ~0.4 s: a run that saves every step redraws on its first save, on each evaluation and at
    the last step, and on a save only once PLOT_INTERVAL_S has passed since the last drawing."""
    drawn, clock = [], [100.0]
    monkeypatch.setattr(metrics_log, "plot_metrics", lambda *_: drawn.append(int(clock[0])))
    monkeypatch.setattr(metrics_log.time, "monotonic", lambda: clock[0])

    def batches(step, *args):
        clock[0] += 10.0  # each step "takes" 10 s
        return toy_batches(8, 8)(step, *args)

    train(make_toy(), batches, toy_config(tmp_path, max_steps=9, save_every=1, eval_every=7, keep_last=1),
          lambda model: {"acc": 0.5})
    assert drawn == [110, 140, 170, 190]  # saves at steps 1 and 4 (30 s later), the evaluation at 7, the last step


@pytest.mark.parametrize("ahead_s, slept", [(0, True), (3600, False)])
def test_a_new_tensorboard_file_waits_a_second_at_most_for_a_later_name(tmp_path, monkeypatch, caplog, ahead_s, slept):
    """An event file of this second: the new one waits for the next second. One dated an hour ahead (written by a
    clock ahead of this one): no hour's sleep at the resume, a warning instead."""
    naps = []
    monkeypatch.setattr(metrics_log.time, "sleep", naps.append)
    now = int(metrics_log.time.time())
    (tmp_path / f"events.out.tfevents.{now + ahead_s}.otherhost.123.0").write_bytes(b"")
    with caplog.at_level("WARNING", logger="litebert"):
        metrics_log.wait_for_a_later_event_file_name(tmp_path)
    assert bool(naps) == slept and all(0 < nap <= 2 for nap in naps)
    assert any("ahead of this clock" in r.getMessage() for r in caplog.records) == (not slept)


def test_same_seed_same_losses_and_run_files(tmp_path):
    evals = []

    def evaluate(model):
        evals.append(model.training)
        torch.rand(3)  # evaluation may use the RNG without disturbing training
        return {"acc": 0.5}

    a = train(make_toy(), toy_batches(8, 4), toy_config(tmp_path / "a", micro_batch_size=4, eval_every=5), evaluate)
    b = train(make_toy(), toy_batches(8, 4), toy_config(tmp_path / "b", micro_batch_size=4))
    assert a.losses == b.losses and len(a.losses) == 12
    assert evals == [False, False, False]  # steps 5, 10 and the end, in eval mode
    run = tmp_path / "a" / "run"
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 13))
    assert [r["step"] for r in records if "eval_acc" in r] == [5, 10, 12]
    assert all(r["tokens_per_s"] > 0 and r["lr"] >= 0 for r in records if "loss" in r)
    assert records[0]["lr"] == 0.0 and records[1]["lr"] == pytest.approx(0.01)  # warmup 0, 1/2 of peak
    assert (run / "metrics.png").stat().st_size > 1000
    saved = resolve_config(TrainConfig, load_toml(run / "train_config.toml", ("train",))["train"])
    assert saved == toy_config(tmp_path / "a", micro_batch_size=4, eval_every=5)
    assert sorted(p.name for p in run.glob("step_*")) == ["step_12"]


def test_accumulation_equals_full_batch(tmp_path):
    full, accumulated = make_toy(0.0), make_toy(0.0)
    ra = train(full, toy_batches(8, 8), toy_config(tmp_path / "a", max_steps=5))
    rb = train(accumulated, toy_batches(8, 2), toy_config(tmp_path / "b", max_steps=5, micro_batch_size=2))
    for k in ra.losses:
        assert ra.losses[k] == pytest.approx(rb.losses[k], rel=1e-5)
    for pa, pb in zip(full.parameters(), accumulated.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_bf16_autocast_trains(tmp_path):
    fixed = toy_batches(8, 8)(0, 0, 0, 1)
    result = train(make_toy(0.0), lambda *_: fixed, toy_config(tmp_path, precision="bf16", lr=0.05, max_steps=40))
    assert result.losses[40] < 0.5 * result.losses[1]


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path):
    from litebert.training.checkpoint import latest_checkpoint, load_model_weights, load_train_state
    cfg = toy_config(tmp_path, save_every=4)
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss at step 7 .*step_4") as info:
        train(make_toy(), toy_batches(8, 8, poison_step=6), cfg)
    assert "\n" not in str(info.value)
    last = latest_checkpoint(cfg.out_dir)
    assert last.name == "step_4" and load_train_state(last)["step"] == 4
    model = ToyModel()
    load_model_weights(model, last)
    assert all(torch.isfinite(p).all() for p in model.parameters())


# A GPU this machine lacks: plain "cuda" on a CPU-only build, else one past the last device.
MISSING_GPU = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "mps", MISSING_GPU])
def test_bad_device_is_a_one_line_error_before_anything_is_written(tmp_path, device):
    """Refused by the config itself, so a verb fails before it reads data or writes a file."""
    with pytest.raises(ValueError, match=f"^device {device!r}") as info:
        toy_config(tmp_path, device=device)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "run").exists() and toy_config(tmp_path, device="cpu").device == "cpu"


def test_config_precedence_defaults_toml_cli(tmp_path):
    import argparse
    toml = tmp_path / "recipe.toml"
    toml.write_text('[train]\nlr = 3\nbatch_size = 64\noptimizer = "adamw"\n')
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_config_args(parser, TrainConfig)
    args = parser.parse_args(["--config", str(toml), "--batch-size", "16", "--micro-batch-size", "4", "--no-progress"])
    cfg = resolve_config(TrainConfig, load_toml(args.config, ("train",))["train"], args)
    assert (cfg.lr, cfg.batch_size, cfg.micro_batch_size, cfg.optimizer, cfg.progress) == (3.0, 16, 4, "adamw", False)
    assert cfg.warmup_steps == TrainConfig().warmup_steps
    assert "global batch size" in parser.format_help()
    with pytest.raises(ValueError, match="unknown key 'lrr'"):
        resolve_config(TrainConfig, {"lrr": 1.0})
    with pytest.raises(ValueError, match="batch_size must be int"):
        resolve_config(TrainConfig, {"batch_size": "8"})
    with pytest.raises(ValueError, match="precision"):
        resolve_config(TrainConfig, {"precision": "fp8"})
    with pytest.raises(ValueError, match="unknown section"):
        toml.write_text("[trian]\nlr = 1\n")
        load_toml(toml, ("train",))
    with pytest.raises(SystemExit):
        parser.parse_args(["--optimizer", "sgd"])
    # the written TOML reads back to the same config (None fields are commented out)
    assert resolve_config(TrainConfig, load_toml_text(dump_toml({"train": cfg}), tmp_path)["train"]) == cfg
    with pytest.raises(ValueError, match="not a multiple"):
        TrainConfig(batch_size=10, micro_batch_size=4).accumulation(1)
    assert TrainConfig(batch_size=32, micro_batch_size=4).accumulation(2) == (4, 4)


def load_toml_text(text, tmp_path):
    path = tmp_path / "x.toml"
    path.write_text(text)
    return load_toml(path)


def test_shuffled_batches_cover_epochs_independently_of_world_size():
    data = torch.arange(10)
    collate = lambda idx, position: {"x": data[idx]}  # noqa: E731
    one = shuffled_batches(10, 4, 2, seed=0, collate=collate)
    seen_one = [one(s, m, 0, 1)["x"] for s in range(5) for m in range(2)]
    two = shuffled_batches(10, 4, 2, seed=0, collate=collate)
    seen_two = [two(s, 0, r, 2)["x"] for s in range(5) for r in range(2)]
    assert torch.equal(torch.cat(seen_one), torch.cat(seen_two))
    flat = torch.cat(seen_one)
    assert sorted(flat[:10].tolist()) == list(range(10)) and sorted(flat[10:20].tolist()) == list(range(10))
    assert not torch.equal(flat[:10], flat[10:20])  # a new permutation each epoch


def test_shuffled_data_is_shuffled_batches_sized_by_the_loop(tmp_path):
    """The data argument verbs pass: the loop builds the batch_fn they used to build themselves."""
    from litebert.training.data import ShuffledData
    examples = [toy_example(i) for i in range(20)]

    def collate(indices, position):
        ids, labels = zip(*(examples[i] for i in indices))
        return {"input_ids": torch.stack(ids), "labels": torch.stack(labels)}

    a = train(make_toy(), ShuffledData(20, collate), toy_config(tmp_path / "a", micro_batch_size=4, max_steps=5))
    b = train(make_toy(), shuffled_batches(20, 8, 4, 3, collate),
              toy_config(tmp_path / "b", micro_batch_size=4, max_steps=5))
    assert a.losses == b.losses and len(a.losses) == 5
    with pytest.raises(ConfigError, match="no examples"):
        ShuffledData(0, collate)
    with pytest.raises(TypeError, match="ShuffledData or a batch_fn"):
        train(make_toy(), [1, 2, 3], toy_config(tmp_path / "c"))


def test_rank_and_world_size_come_from_one_place(monkeypatch):
    """Before the process group exists (a verb sizing its data) the numbers are torchrun's; setup agrees."""
    from litebert.training import distributed
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    assert (distributed.world_size(), distributed.is_main_process()) == (4, False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    env = distributed.setup_distributed("cpu")  # alone: no group is made, rank 0 whatever RANK says
    assert (env.rank, env.world_size, env.owns_group) == (0, 1, False)
    assert distributed.rank_and_size() == (0, 1) and distributed.is_main_process()


DDP_WORKER = textwrap.dedent("""
    import gc, os, sys, weakref, torch
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from litebert.training.loop import train
    from test_train import make_toy, toy_batches, toy_config
    model, batches, group = make_toy(0.0), toy_batches(8, 2), []

    def batch_fn(*args):
        group.append(weakref.ref(torch.distributed.group.WORLD))
        return batches(*args)

    train(model, batch_fn, toy_config(Path({tmp!r}), micro_batch_size=2, max_steps=6, log_every=2))
    gc.collect()
    # freed, its gloo threads joined: alive at interpreter shutdown, they aborted about 1 run in 30
    assert group[0]() is None, "the process group outlived train"
    if os.environ["RANK"] == "0":
        torch.save(model.state_dict(), {tmp!r} + "/params.pt")
""")


def test_two_process_ddp_equals_single_process(tmp_path):
    single = make_toy(0.0)
    ref = train(single, toy_batches(8, 2), toy_config(tmp_path / "single", micro_batch_size=2, max_steps=6,
                                                        log_every=2))
    script = tmp_path / "worker.py"
    script.write_text(DDP_WORKER.format(tests=str(Path(__file__).parent), tmp=str(tmp_path / "ddp")))
    port = free_ports(1)[0]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    ddp_state = torch.load(tmp_path / "ddp" / "params.pt", weights_only=True)
    for key, value in single.state_dict().items():
        torch.testing.assert_close(ddp_state[key], value, rtol=1e-5, atol=1e-6)
    ddp_losses = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "ddp" / "run" / "metrics.jsonl") if "loss" in r}
    single_losses = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "single" / "run" / "metrics.jsonl")
                     if "loss" in r}
    assert ddp_losses == pytest.approx(single_losses, rel=1e-5)
    assert len(ref.losses) == 6
    from litebert.training.checkpoint import load_train_state
    assert load_train_state(tmp_path / "ddp" / "run" / "step_6")["world_size"] == 2


@pytest.mark.slow
def test_compiled_model_trains_like_eager(tmp_path):
    """The whole toy model compiled (it has no transformer blocks for the default scope; compile_layers is tested
    in test_compile.py and, under inductor, in test_gpu.py)."""
    pytest.importorskip("torch._inductor")
    eager, compiled = make_toy(0.0), make_toy(0.0)
    ra = train(eager, toy_batches(8, 4), toy_config(tmp_path / "a", micro_batch_size=4, max_steps=4))
    rb = train(compiled, toy_batches(8, 4), toy_config(tmp_path / "b", micro_batch_size=4, max_steps=4, compile=True,
                                                       compile_scope="model"))
    assert ra.losses == pytest.approx(rb.losses, rel=1e-4)
    assert (tmp_path / "b" / "run" / "step_4" / "model.safetensors").is_file()


def test_a_run_puts_the_process_tf32_switches_back(tmp_path, monkeypatch):
    """On CUDA a run turns TF32 on (its default); a later fp32 matmul of the same process (a test, a notebook
    cell) must not inherit it: on the H100 an in-process fine-tuning left TF32 on and two later fp32 comparisons
    failed by TF32's error. Faked here on the CPU: configure_device sets the switches as it does on CUDA."""
    def as_on_cuda(device, tf32):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        return {"device": "cuda", "tf32": tf32}

    monkeypatch.setattr("litebert.training.loop.configure_device", as_on_cuda)
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=2, tf32=True))
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_cuda_graphs_where_they_cannot_run_is_a_one_line_error_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match=r"--cuda-graphs captures .* CUDA GPU.*\(this run: cpu, 1 process"):
        train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=2, cuda_graphs=True))
    with pytest.raises(ConfigError, match=r"--compile only of the blocks .* compile model\)"):  # capture, not dynamo
        train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=2, cuda_graphs=True, compile=True,
                                                        compile_scope="model"))
    assert not (tmp_path / "run").exists()


# -- batches asked ahead (data.prefetched: on by default on a GPU) ----------------------------------------------

def test_batches_built_ahead_by_workers_train_exactly_as_built_in_step(tmp_path):
    """Worker processes build the micro-batches that follow (accumulation 2 here), in the loop's order; a kill and
    a resume start them again at the resumed step. Losses and weights are bit-equal to the synchronous run's."""
    inline, ahead = make_toy(), make_toy()
    a = train(inline, toy_batches(8, 4), toy_config(tmp_path / "a", micro_batch_size=4, save_every=5))
    b = train(ahead, toy_batches(8, 4), toy_config(tmp_path / "b", micro_batch_size=4, save_every=5,
                                                   data_workers=2))
    assert a.losses == b.losses
    for pa, pb in zip(inline.parameters(), ahead.parameters()):
        assert torch.equal(pa, pb)

    def killed_at_step_7(model):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # after step 7, whose batches the workers had built beyond
        train(make_toy(), toy_batches(8, 4), toy_config(tmp_path / "c", micro_batch_size=4, save_every=5,
                                                        eval_every=7, data_workers=2), killed_at_step_7)
    resumed = train(make_toy(), toy_batches(8, 4), toy_config(tmp_path / "c", micro_batch_size=4, save_every=5,
                                                              resume=True, data_workers=1))
    assert resumed.losses == {k: v for k, v in a.losses.items() if k > 5}


def test_a_batch_a_worker_cannot_build_is_its_own_one_line_error(tmp_path):
    from litebert.errors import DataError
    from litebert.training.data import PrefetchedBatches, prefetched

    def batch_fn(step, micro, rank, world_size):
        if step == 3:
            raise DataError(f"shard_00001.npy: example {step * 8} is damaged")
        return toy_batches(8, 8)(step, micro, rank, world_size)

    with pytest.raises(DataError, match=r"^shard_00001.npy: example 24 is damaged$"):
        train(make_toy(), batch_fn, toy_config(tmp_path, data_workers=2))
    assert sorted(p.name for p in (tmp_path / "run").glob("step_*")) == []  # nothing saved past the damage

    class Stateful:
        def __call__(self, *args):
            return {}

        def state_dict(self):
            return {}

    assert prefetched(Stateful(), 2, 1, 10, False).__class__ is Stateful  # asking ahead would move its state
    assert isinstance(prefetched(batch_fn, 2, 1, 10, False), PrefetchedBatches)
    assert prefetched(batch_fn, 0, 1, 10, False) is batch_fn


def test_a_worker_error_that_ends_train_leaves_no_worker_running(tmp_path):
    """A bug in a batch function (not a LitebertError) comes through the loader's iterator, which the error's
    traceback holds: dropping the iterator at train's end did not stop its workers, which ran on while the caller
    held the error, and after it until a garbage collection."""
    import multiprocessing

    def batch_fn(step, micro, rank, world_size):
        if step == 3:
            raise RuntimeError("a bug in the batch function")
        return toy_batches(8, 8)(step, micro, rank, world_size)

    before = set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match="a bug in the batch function") as caught:
        train(make_toy(), batch_fn, toy_config(tmp_path, data_workers=2))
    assert set(multiprocessing.active_children()) == before, caught.value  # the error still held here


def test_cuda_graphs_say_once_when_new_batch_shapes_go_uncaptured(monkeypatch, caplog):
    """Past MAX_GRAPHS captured shapes every new shape ran eagerly, silently: a run with widths varying by batch
    lost the graphs' speed on most steps with no word of it."""
    from litebert.training import graphs
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 2)
    monkeypatch.setattr(graphs.GraphedMicroStep, "_on_side_stream", lambda self, batch, scale, no_padding:
                        torch.zeros(()))
    class Replayed:
        def replay(self):
            pass

    monkeypatch.setattr(graphs.GraphedMicroStep, "_capture", lambda self, key, batch, scale, no_padding: self.graphs.__setitem__(
        key, (Replayed(), {k: v.clone() for k, v in batch.items()}, torch.zeros(()))))
    step = graphs.GraphedMicroStep(forward=None, autocast=None)
    with caplog.at_level("WARNING", logger="litebert"):
        for width in (4, 5, 6, 7):
            for _ in range(graphs.WARMUP_CALLS + 2):
                step({"input_ids": torch.zeros(2, width, dtype=torch.long)}, 1.0)
    warnings = [r.getMessage() for r in caplog.records if "cuda-graphs" in r.getMessage()]
    assert len(warnings) == 1 and "input_ids (2, 6)" in warnings[0] and "2 batch shapes" in warnings[0]
    assert len(step.graphs) == 2


def test_every_litebert_error_crosses_a_process_boundary_as_itself():
    """A worker's error reaches the loop pickled (data.prefetched); one whose constructor takes other arguments
    than its message (InputError) did not unpickle, and the loader raised its own error instead."""
    import pickle

    from litebert import errors
    samples = {errors.InputError: (3, "too long")}
    for cls in [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.LitebertError)]:
        error = cls(*samples.get(cls, ("a message",)))
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is cls and str(again) == str(error)


def test_training_turns_off_a_configs_output_flags_and_says_so(tmp_path, caplog):
    """A config with output_attentions on (from_pretrained(path, output_attentions=True), or a transformers
    config.json that set it) made every training step compute each layer's attention explicitly, without SDPA or
    the padding-free path, and drop it. Training reads neither output: it turns them off, in one logged line."""
    from litebert.config import AlbertConfig
    from litebert.model import AlbertForMaskedLM

    torch.manual_seed(0)
    model = AlbertForMaskedLM(AlbertConfig(
        vocab_size=VOCAB, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=SEQ, output_attentions=True, output_hidden_states=True))
    attentions = []
    model.albert.register_forward_hook(lambda module, args, kwargs, out: attentions.append(out.attentions),
                                       with_kwargs=True)
    with caplog.at_level("WARNING", logger="litebert"):
        train(model, toy_batches(8, 8), toy_config(tmp_path, max_steps=2))
    assert "the model's config had output_attentions and output_hidden_states on" in caplog.text
    assert attentions == [None, None] and not model.config.output_attentions
