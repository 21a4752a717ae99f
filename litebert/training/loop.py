"""TrainConfig and the one training loop, for pretraining and every fine-tuning task.

The loop knows three things about the outside world, all passed in:
  model(**batch).loss             a scalar; the model also has save_pretrained(dir) (checkpoints are HF dirs)
  batch_fn(step, micro, rank, world_size) -> dict of tensors
                                  a pure function of its arguments, so a resumed run sees the same data
                                  and each rank reads its own part (see `shuffled_batches`)
  evaluate(model) -> dict[str, float]   every eval_every steps and at the end, on rank 0

Global batch = micro_batch_size * accumulation_steps * world_size. Each micro-batch loss is divided by the
number of accumulation steps and DDP averages over ranks, so the gradient is the mean of the micro-batch
means: the same for 1 process x 4 micro-batches and 2 processes x 2 (up to float summation order).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from litebert.training import checkpoint as ckpt
from litebert.training.optim import clip_grad_norm, make_optimizer, make_schedule
from litebert.errors import LitebertError
from litebert.runconfig import dump_toml

log = logging.getLogger("litebert")

BatchFn = Callable[[int, int, int, int], Mapping[str, torch.Tensor]]
METRICS_NAME, PLOT_NAME, CONFIG_NAME = "metrics.jsonl", "metrics.png", "train_config.toml"
REFERENCES_NAME = "references.json"  # {metric: {label: value}}: baselines drawn as dashed lines on the plot


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass
class TrainConfig:
    """One run of the training loop. Defaults suit fine-tuning; pretraining recipes set lamb and its lr."""

    lr: float = field(default=1e-4, metadata=_help("peak learning rate (ALBERT pretraining: 0.00176 at batch 4096)"))
    batch_size: int = field(default=32, metadata=_help("global batch size: examples per optimizer step, all ranks"))
    micro_batch_size: int | None = field(default=None, metadata=_help(
        "examples per forward pass and rank; batch_size / (micro_batch_size * world_size) micro-batches are "
        "accumulated per step (default: batch_size / world_size, no accumulation)"))
    max_steps: int = field(default=1000, metadata=_help("optimizer steps; the lr decays to 0 at this step"))
    warmup_steps: int = field(default=0, metadata=_help("linear warmup steps (ALBERT: 3125)"))
    lr_decay_power: float = field(default=1.0, metadata=_help("power of the polynomial decay (1 = linear)"))
    optimizer: str = field(default="lamb", metadata=_help("optimizer", choices=("lamb", "adamw")))
    weight_decay: float = field(default=0.01, metadata=_help("decoupled weight decay (not on LayerNorm or biases)"))
    beta1: float = field(default=0.9, metadata=_help("first-moment decay"))
    beta2: float = field(default=0.999, metadata=_help("second-moment decay"))
    eps: float = field(default=1e-6, metadata=_help("optimizer epsilon"))
    clip_norm: float = field(default=1.0, metadata=_help("clip gradients to this global norm; 0 disables"))
    precision: str = field(default="fp32", metadata=_help(
        "fp32, or bf16 autocast (weights, gradients and optimizer state stay fp32)", choices=("fp32", "bf16")))
    compile: bool = field(default=False, metadata=_help("torch.compile the model"))
    find_unused_parameters: bool = field(default=False, metadata=_help(
        "DDP only: allow parameters without gradient (e.g. the SOP head when pretraining with MLM alone)"))
    device: str = field(default="auto", metadata=_help("auto (cuda:LOCAL_RANK if available, else cpu), cpu or cuda"))
    seed: int = field(default=12345, metadata=_help("seed for python/numpy/torch RNGs (dropout), offset by rank"))
    log_every: int = field(default=10, metadata=_help("write loss, lr and tokens/s to metrics.jsonl every N steps"))
    eval_every: int = field(default=0, metadata=_help("evaluate every N steps (0: only at the end)"))
    save_every: int = field(default=0, metadata=_help("checkpoint every N steps (0: only at the end)"))
    keep_last: int = field(default=3, metadata=_help("keep the newest N checkpoints (0: keep all)"))
    out_dir: str = field(default="out/run", metadata=_help("run directory: checkpoints, metrics, plot, config"))
    resume: bool = field(default=False, metadata=_help("continue from the latest complete checkpoint in out_dir"))
    progress: bool = field(default=True, metadata=_help("show a progress bar (rank 0)"))

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"invalid TrainConfig: {msg}")

        for f in dataclasses.fields(self):
            if "choices" in f.metadata:
                need(getattr(self, f.name) in f.metadata["choices"],
                     f"{f.name} must be one of {f.metadata['choices']}, got {getattr(self, f.name)!r}")
        need(self.batch_size > 0 and self.max_steps > 0 and self.log_every > 0, "batch_size, max_steps and "
             "log_every must be positive")
        need(self.micro_batch_size is None or self.micro_batch_size > 0, "micro_batch_size must be positive")
        need(self.warmup_steps >= 0 and self.eval_every >= 0 and self.save_every >= 0 and self.keep_last >= 0,
             "warmup_steps, eval_every, save_every and keep_last must be >= 0")
        need(self.lr >= 0 and self.clip_norm >= 0 and self.weight_decay >= 0, "lr, clip_norm and weight_decay "
             "must be >= 0")
        need(math.isfinite(self.lr_decay_power) and self.lr_decay_power >= 0,  # < 0: 0 ** power at the last step
             f"lr_decay_power must be a finite number >= 0, got {self.lr_decay_power}")
        resolve_device(self.device)  # a bad --device is refused here, before a run reads or writes anything

    def accumulation(self, world_size: int) -> tuple[int, int]:
        """(micro_batch_size, accumulation steps) for this world size."""
        micro = self.micro_batch_size or self.batch_size // world_size
        if micro == 0 or self.batch_size % (micro * world_size):
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of micro_batch_size {micro} x "
                             f"world_size {world_size}")
        return micro, self.batch_size // (micro * world_size)


# -- distributed, precision, seeding ---------------------------------------------------------------------------

@dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # we initialised the process group, so we tear it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str = "auto") -> Dist:
    """Join the process group that torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), or use
    one the caller already initialised; single process otherwise. NCCL on GPU, gloo on CPU."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    initialised = dist.is_available() and dist.is_initialized()
    if not initialised and world_size() > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    if dist.is_available() and dist.is_initialized():
        return Dist(dist.get_rank(), dist.get_world_size(), local_rank, dev, owns_group=not initialised)
    return Dist(0, 1, 0, dev, owns_group=False)


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """TrainConfig.device as a torch.device ("cuda" means this rank's GPU). A name torch does not parse, a device
    type other than cpu/cuda, or a GPU this machine lacks, is a one-line ValueError here; otherwise torch fails
    later, inside set_device or the first .to(), with a traceback (an AttributeError on CPU-only builds)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(f"cuda:{local_rank}" if device == "cuda" else device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} is not one litebert trains on (use auto, cpu, cuda or cuda:N)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA GPU is available to this torch "
                             f"({torch.__version__}); use cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there is no {dev} ({torch.cuda.device_count()} CUDA devices)")
    return dev


def world_size() -> int:
    """Processes in the run, from torchrun's environment (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 (or no torchrun): the process that writes summaries and prints."""
    return int(os.environ.get("RANK", "0")) == 0


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def autocast(precision: str, device: torch.device):
    return torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()


@contextmanager
def preserved_rng():
    """Run a block (evaluation) without moving the training RNG streams, so evaluating never changes training."""
    state = ckpt.rng_state()
    try:
        yield
    finally:
        ckpt.set_rng_state(state)


# -- data helpers ----------------------------------------------------------------------------------------------

def shuffled_batches(num_examples: int, batch_size: int, micro_batch_size: int, seed: int,
                     collate: Callable[[list[int], int], Mapping[str, torch.Tensor]]) -> BatchFn:
    """A batch_fn over a finite dataset: each epoch a fresh permutation (seeded by seed and epoch), examples
    taken in order, `batch_size` (global) per step. Micro-batch `micro` of rank `rank` is slot
    micro * world_size + rank of its step, so a step covers the same examples whatever the world size and
    accumulation. `collate(indices, position)` builds the tensors; `position` (the run-wide index of the
    micro-batch's first example) is unique and world-size independent, a seed for batch-time randomness such
    as dynamic masking."""
    cache: dict[int, np.ndarray] = {}

    def permutation(epoch: int) -> np.ndarray:
        if epoch not in cache:
            if len(cache) >= 2:  # epochs are visited in order; a step may straddle two
                del cache[min(cache)]
            cache[epoch] = np.random.default_rng([seed, epoch]).permutation(num_examples)
        return cache[epoch]

    def batch_fn(step: int, micro: int, rank: int, world_size: int) -> Mapping[str, torch.Tensor]:
        start = step * batch_size + (micro * world_size + rank) * micro_batch_size
        return collate([int(permutation(pos // num_examples)[pos % num_examples])
                        for pos in range(start, start + micro_batch_size)], start)

    return batch_fn


def count_tokens(batch: Mapping[str, torch.Tensor]) -> int:
    """Tokens processed (padding included: it costs compute); examples for batches without input_ids."""
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return len(next(iter(batch.values())))


# -- metrics and plot --------------------------------------------------------------------------------------------

def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of metrics.jsonl; a line torn by a kill mid-append is dropped, not fatal to a resume."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def plot_metrics(metrics_path: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Loss, lr and every eval metric against step, one panel each, as a PNG (Agg canvas: no display, no
    pyplot global state). Baselines in references.json beside the metrics are drawn as labelled dashed lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_metrics(metrics_path)
    references_path = Path(metrics_path).with_name(REFERENCES_NAME)
    try:
        references = json.loads(references_path.read_text()) if references_path.is_file() else {}
    except json.JSONDecodeError:  # torn by a kill mid-write: the plot goes without its baselines
        references = {}
    keys = ["loss", "lr"] + sorted({k for r in records for k in r if k.startswith("eval_")})
    series = {k: [(r["step"], r[k]) for r in records if isinstance(r.get(k), (int, float))] for k in keys}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return
    cols = min(3, len(series))
    rows = math.ceil(len(series) / cols)
    fig = Figure(figsize=(4.5 * cols, 3.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (key, points) in enumerate(series.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if key.startswith("eval_") else None, markersize=3)
        for j, (label, value) in enumerate(references.get(key, {}).items()):
            ax.axhline(value, linestyle="--", linewidth=1, color=f"C{j + 1}", label=label)
        if references.get(key):
            ax.legend(fontsize=7)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    tmp = Path(png_path).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    os.replace(tmp, png_path)


# -- the loop ------------------------------------------------------------------------------------------------------

class NonFiniteLossError(LitebertError):
    """The loss or gradient norm became NaN/inf. Raised before the update, so no checkpoint is affected."""


@dataclass
class TrainResult:
    step: int  # the last completed step
    losses: dict[int, float]  # step -> mean loss over the global batch, for the steps this call ran
    eval: dict[str, float]  # the last evaluation
    checkpoint: Path | None  # the last checkpoint written (or resumed from)


def train(model: nn.Module, batch_fn: BatchFn, cfg: TrainConfig,
          evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None, *,
          tokenizer: str | os.PathLike | None = None, configs: Mapping[str, Any] | None = None) -> TrainResult:
    """Train `model` for cfg.max_steps optimizer steps (see the module docstring for the contracts).

    tokenizer: a tokenizer dir or file copied into every checkpoint, so each one is a complete model dir.
    configs:   other sections (e.g. {"model": ..., "data": ...}) saved beside [train] in train_config.toml.
    Under torchrun each process calls this with the same arguments; the process group is set up here.
    """
    env = setup_distributed(cfg.device)
    try:
        return _train(model, batch_fn, cfg, evaluate, tokenizer, configs, env)
    finally:
        if env.owns_group:
            dist.destroy_process_group()


def _train(model, batch_fn, cfg, evaluate, tokenizer, configs, env: Dist) -> TrainResult:
    from tqdm.auto import tqdm

    out = Path(cfg.out_dir)
    micro_batch, accum = cfg.accumulation(env.world_size)
    metrics_path = out / METRICS_NAME
    set_seed(cfg.seed + env.rank)  # dropout differs across ranks, as it would across a bigger batch
    raw = model.to(env.device)
    optimizer = make_optimizer(raw, cfg.optimizer, cfg.lr, cfg.weight_decay, (cfg.beta1, cfg.beta2), cfg.eps)
    schedule = make_schedule(optimizer, cfg.warmup_steps, cfg.max_steps, cfg.lr_decay_power)

    step, last_ckpt = 0, None
    if env.is_main:
        ckpt.remove_partial(out)
    _barrier(env)
    if cfg.resume:
        last_ckpt = ckpt.latest_checkpoint(out)
    elif ckpt.latest_checkpoint(out) is not None:
        raise ValueError(f"{out} already holds checkpoints; pass --resume to continue, or choose another out_dir")
    if last_ckpt is not None:
        step = _restore(last_ckpt, raw, optimizer, schedule, batch_fn, env, micro_batch, accum)
        log.info("resumed from %s at step %d", last_ckpt, step)
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG_NAME).write_text(dump_toml({"train": cfg, **(configs or {})}))
        records = [r for r in read_metrics(metrics_path) if r["step"] <= step]  # drop what a crash left after it
        metrics_path.write_text("".join(json.dumps(r) + "\n" for r in records))

    net = raw
    if env.world_size > 1:
        net = nn.parallel.DistributedDataParallel(raw, device_ids=[env.device.index] if env.device.type == "cuda"
                                                  else None, find_unused_parameters=cfg.find_unused_parameters)
    forward = torch.compile(net) if cfg.compile else net
    amp = autocast(cfg.precision, env.device)

    def log_record(record: dict[str, Any]) -> None:
        if env.is_main:
            with open(metrics_path, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def run_eval() -> dict[str, float]:
        if not env.is_main:
            return {}
        raw.eval()
        with preserved_rng(), torch.no_grad(), autocast(cfg.precision, env.device):
            result = {k: float(v) for k, v in evaluate(raw).items()}
        raw.train()
        log_record({"step": step, **{k if k.startswith("eval_") else f"eval_{k}": v for k, v in result.items()}})
        return result

    def save() -> Path | None:
        rngs = [ckpt.rng_state()]
        if env.world_size > 1:
            rngs = [None] * env.world_size
            dist.all_gather_object(rngs, ckpt.rng_state())
        path = None
        if env.is_main:
            state = {"step": step, "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                     "rng": rngs, "world_size": env.world_size, "accumulation_steps": accum,
                     "data": {"step": step, "state": batch_fn.state_dict() if hasattr(batch_fn, "state_dict")
                              else None},
                     "config": dataclasses.asdict(cfg)}
            path = ckpt.save_checkpoint(out, step, raw, state, tokenizer=tokenizer, keep_last=cfg.keep_last)
        _barrier(env)
        return path

    raw.train()
    losses: dict[int, float] = {}
    last_eval: dict[str, float] = {}
    window = {"loss": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (env.is_main and cfg.progress), dynamic_ncols=True,
               desc="train")
    try:
        while step < cfg.max_steps:
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), device=env.device)
            tokens = 0
            for micro in range(accum):
                batch = {k: v.to(env.device, non_blocking=True) for k, v in batch_fn(step, micro, env.rank,
                                                                                     env.world_size).items()}
                # Gradients are all-reduced only on the last micro-batch of a step.
                sync = net.no_sync() if env.world_size > 1 and micro < accum - 1 else nullcontext()
                with sync:
                    with amp:
                        loss = forward(**batch).loss
                    (loss / accum).backward()
                loss_sum += loss.detach().float()
                tokens += count_tokens(batch)
            stats = torch.stack([loss_sum / accum, torch.tensor(float(tokens), device=env.device)])
            if env.world_size > 1:
                dist.all_reduce(stats)
                stats[0] /= env.world_size
            grad_norm = clip_grad_norm(raw.parameters(), cfg.clip_norm)
            # The one host sync of a step: the NaN check needs the values before the update.
            loss_value, tokens_all, norm_value = torch.cat([stats, grad_norm.view(1).to(stats)]).tolist()
            if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
                raise NonFiniteLossError(
                    f"non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'} at step {step + 1} "
                    f"(loss {loss_value}, grad norm {norm_value}); stopped before the update; last good "
                    f"checkpoint: {ckpt.latest_checkpoint(out) or 'none'}")
            lr = schedule.get_last_lr()[0]
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            losses[step] = loss_value
            window["loss"] += loss_value
            window["steps"] += 1
            window["tokens"] += tokens_all
            window["seconds"] += time.perf_counter() - t0
            bar.update(1)

            last = step == cfg.max_steps
            if step % cfg.log_every == 0 or last:
                tokens_per_s = window["tokens"] / max(window["seconds"], 1e-9)
                log_record({"step": step, "loss": window["loss"] / window["steps"], "lr": lr,
                            "grad_norm": norm_value, "tokens_per_s": tokens_per_s})
                bar.set_postfix(loss=f"{window['loss'] / window['steps']:.4f}", tok_s=f"{tokens_per_s:,.0f}")
                window = {"loss": 0.0, "steps": 0, "tokens": 0, "seconds": 0.0}
            # Save before evaluating: an evaluation that fails must not lose the steps since the last save.
            saved = (cfg.save_every and step % cfg.save_every == 0) or last
            if saved:
                last_ckpt = save() or last_ckpt
            evaluated = False
            if evaluate is not None and ((cfg.eval_every and step % cfg.eval_every == 0) or last):
                last_eval = run_eval()
                evaluated = True
                _barrier(env)
            if env.is_main and (evaluated or saved):
                plot_metrics(metrics_path, out / PLOT_NAME)
    finally:
        bar.close()
    return TrainResult(step, losses, last_eval, last_ckpt)


def _restore(path: Path, raw: nn.Module, optimizer, schedule, batch_fn, env: Dist, micro_batch: int,
             accum: int) -> int:
    """Load a checkpoint into the live objects; returns its step."""
    ckpt.load_model_weights(raw, path)
    state = ckpt.load_train_state(path)
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if state.get("data", {}).get("state") is not None and hasattr(batch_fn, "load_state_dict"):
        batch_fn.load_state_dict(state["data"]["state"])
    if state["world_size"] != env.world_size or state["accumulation_steps"] != accum:
        log.warning("%s was written by %d process(es) x %d micro-batches, resuming with %d x %d: data is the same "
                    "if batch_fn numbers micro-batches by slot, but RNG streams (dropout) differ", path,
                    state["world_size"], state["accumulation_steps"], env.world_size, accum)
    rngs = state["rng"]
    if env.rank < len(rngs):
        ckpt.set_rng_state(rngs[env.rank])
    return int(state["step"])


def _barrier(env: Dist) -> None:
    if env.world_size > 1:
        dist.barrier()
