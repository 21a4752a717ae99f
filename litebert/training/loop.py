"""The one training loop, for pretraining and every fine-tuning task (its options: train_config.TrainConfig).

The loop knows three things about the outside world, all passed in:
  model(**batch).loss             a scalar; the model also has save_pretrained(dir) (checkpoints are HF dirs)
  data                            ShuffledData(num_examples, collate), or a batch_fn(step, micro, rank,
                                  world_size) -> dict of tensors (see data.py)
  evaluate(model) -> dict[str, float]   every eval_every steps and at the end, on rank 0, on the training
                                  device (the model's: move batches to next(model.parameters()).device)

`train` reads as a cadence: while step < max_steps: step += 1; train_step; maybe log; maybe save; maybe
evaluate. What a step needs is built once (`Run`); what a checkpoint holds is a `TrainState` (state.py).

Resume is one decision, taken on rank 0 and broadcast: the newest checkpoint whose files are intact (a damaged
one is moved aside with a warning; none intact is refused), refused by name when it is another run's (model,
data, tokenizer, labels).
Each checkpoint due an evaluation is evaluated exactly once: its metrics are written into it
(evaluation.json), and a resume from one that a kill left unevaluated evaluates it first. Under torchrun's
elastic restarts (TORCHELASTIC_RESTART_COUNT > 0) the loop resumes on its own.

Global batch = micro_batch_size * accumulation_steps * world_size. Each micro-batch loss is divided by the
number of accumulation steps and DDP averages over ranks, so the gradient is the mean of the micro-batch
means: the same for 1 process x 4 micro-batches and 2 processes x 2 (up to float summation order).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from litebert.config import turn_off_output_flags
from litebert.errors import CheckpointError, ConfigError, LitebertError
from litebert.files import write_text_atomically
from litebert.model import compile_layers
from litebert.progress import progress_bar
from litebert.runconfig import dump_toml
from litebert.runtime import gemm
from litebert.runtime.precision import PrecisionChoice, autocast, choose_precision, device_name, fp32_kernels
from litebert.training import checkpoint as ckpt
from litebert.training.data import BatchFn, ShuffledData, as_batch_fn, count_tokens, holds_no_padding, prefetched
from litebert.training.distributed import (
    Dist,
    all_reduce_sum,
    barrier,
    broadcast_object,
    configure_device,
    elastic_restart,
    restore_tf32_flags,
    setup_distributed,
    teardown_distributed,
    tf32_flags,
)
from litebert.training.graphs import micro_step
from litebert.training.metrics_log import MetricsLog
from litebert.training.optim import clip_grad_norm, make_optimizer, make_schedule
from litebert.training.state import (
    EarlyStopping,
    RunRecord,
    TrainState,
    label_identity,
    model_identity,
    preserved_rng,
    set_seed,
)
from litebert.training.train_config import CONFIG_NAME, TrainConfig
from litebert.weights import set_gradient_checkpointing

log = logging.getLogger("litebert")



class NonFiniteLossError(LitebertError):
    """The loss or gradient norm became NaN/inf. Raised before the update, so no checkpoint is affected."""


@dataclass
class TrainResult:
    step: int  # the last completed step
    losses: dict[int, float]  # step -> mean loss over the global batch, for the steps this call ran
    eval: dict[str, float]  # the last evaluation (on a resume of a finished run: its recorded final one)
    checkpoint: Path | None  # the last checkpoint written (or resumed from)
    start_eval: dict[str, float] = field(default_factory=dict)  # the initial weights', with evaluate_start


Evaluate = Callable[[nn.Module], Mapping[str, float]]


def train(model: nn.Module, data: ShuffledData | BatchFn, cfg: TrainConfig, evaluate: Evaluate | None = None, *,
          tokenizer: str | os.PathLike | None = None, configs: Mapping[str, Any] | None = None,
          evaluate_start: bool = False, identity: Mapping[str, Any] | None = None,
          early_stopping: EarlyStopping | None = None) -> TrainResult:
    """Train `model` for cfg.max_steps optimizer steps (see the module docstring for the contracts).

    tokenizer: a tokenizer dir or file copied into every checkpoint, so each one is a complete model dir.
    configs:   other sections (e.g. {"model": ..., "data": ...}) saved beside [train] in train_config.toml.
    evaluate_start: also evaluate the initial weights (step 0), once per run: on the training device, on rank
               0, kept in every checkpoint and returned as `start_eval` by every later resume.
    identity:  more of what defines the run, e.g. {"data": a fingerprint of the data}; recorded with the
               model's architecture, its labels and the tokenizer's hash, and compared on resume.
    early_stopping: ends the run once it has seen its patience of evaluations without a better metric
               (needs `evaluate` and cfg.eval_every); checkpointed with the run, so a resume stops where the
               uninterrupted run would.
    Under torchrun each process calls this with the same arguments; the process group is set up here.
    """
    env = setup_distributed(cfg.device, cfg.dist_timeout_minutes)
    run, tf32_before, gemm_before = None, tf32_flags(), gemm.pin(None)
    try:
        if early_stopping is not None and (evaluate is None or cfg.eval_every == 0):
            raise ConfigError("early stopping needs evaluations every N steps (--eval-every N): it counts them")
        whole_model_compiled = cfg.compile and cfg.compile_scope == "model"
        if cfg.cuda_graphs and (env.device.type != "cuda" or env.world_size > 1 or whole_model_compiled):
            raise ConfigError(f"--cuda-graphs captures one process's steps on a CUDA GPU, with --compile only of "
                              f"the blocks (this run: {env.device}, {env.world_size} process(es), compile "
                              f"{cfg.compile_scope if cfg.compile else 'off'})")
        if was_on := turn_off_output_flags(model):
            log.warning("the model's config had %s on; training reads neither, so they are off for this run and "
                        "its checkpoints", " and ".join(was_on))
        run = _start(model, data, cfg, env, tokenizer, configs, identity, early_stopping)
        progress = run.state.progress
        result = TrainResult(progress.step, {}, {}, run.resumed_from)
        stop = False
        if evaluate is not None:
            result.start_eval, result.eval = _owed_evaluations(run, evaluate, evaluate_start)
            stop = _count_evaluation(run, early_stopping, result.eval, _resumed_step_due(run))  # made or read back
        # a bar on a terminal, a line every 30 s in a log (rank 0 only)
        with progress_bar(cfg.max_steps, "train", env.is_main and cfg.progress, initial=progress.step,
                          unit="steps") as bar:
            while progress.step < cfg.max_steps and not stop:
                progress.step += 1
                step, last = progress.step, progress.step == cfg.max_steps
                stats = train_step(run, step)
                result.losses[step] = stats.loss
                run.metrics.add_step(stats.loss, stats.tokens, stats.seconds)
                bar.update(1)
                if _every(step, cfg.log_every) or last:
                    record = run.metrics.log_steps(step, lr=stats.lr, grad_norm=stats.grad_norm)
                    bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:,.0f}")
                # Save before evaluating: an evaluation that fails must not lose the steps since the last save.
                saved = _every(step, cfg.save_every) or last
                path = run.save() if saved else None  # the path on rank 0, None on the others
                result.checkpoint = path or result.checkpoint
                evaluated = evaluate is not None and _eval_due(cfg, step)
                if evaluated:
                    result.eval = _evaluate(run, evaluate, step, path)
                    stop = _count_evaluation(run, early_stopping, result.eval, True)
                    if stop and not saved:  # the run ends here, as at max_steps: its last step is kept
                        path = run.save()
                        result.checkpoint = path or result.checkpoint
                        if path is not None:  # rank 0
                            ckpt.write_evaluation(path, result.eval)
                if saved or evaluated:  # an evaluation and the end are always drawn, saves at most every 30 s
                    run.metrics.plot(now=evaluated or last)
        result.step = progress.step
        return result
    finally:
        # DDP holds the process group: released first, the group is freed (its threads joined) here. Whatever a
        # reference cycle still holds (a Run reached from itself, an exception's traceback) is collected now: one
        # left to interpreter shutdown aborts the process ("terminate called without an active exception").
        if run is not None and hasattr(run.batch_fn, "stop_workers"):  # data.prefetched's (a user's batch_fn
            run.batch_fn.stop_workers()  # may have a close() of its own, not ours to call)
        run = None
        gc.collect()
        teardown_distributed(env)
        restore_tf32_flags(tf32_before)
        gemm.pin(gemm_before)


def _every(step: int, interval: int) -> bool:
    return interval > 0 and step % interval == 0


def _eval_due(cfg: TrainConfig, step: int) -> bool:
    return _every(step, cfg.eval_every) or step == cfg.max_steps


class StepStats(NamedTuple):
    loss: float  # mean over the global batch
    grad_norm: float  # before clipping
    lr: float  # the rate the update used
    tokens: float  # all ranks
    seconds: float


def train_step(run: Run, step: int) -> StepStats:
    """Optimizer step `step` (1-based): `run.accumulation` micro-batches per rank, then the update.

    The update waits for the one host sync of the step: a NaN/inf loss or gradient norm stops the run before
    the weights change, so the last checkpoint and the weights in memory are both good."""
    t0 = time.perf_counter()
    env, accum = run.env, run.accumulation
    loss_sum = torch.zeros((), device=env.device)
    tokens = 0
    for micro in range(accum):
        # batch_fn numbers steps from 0: the steps done before this one.
        host = run.batch_fn(step - 1, micro, env.rank, env.world_size)
        no_padding = holds_no_padding(host)  # read before it moves: no device sync, and a graph keyed by it
        batch = {k: v.to(env.device, non_blocking=True) for k, v in host.items()}
        # Gradients are all-reduced only on the last micro-batch of a step.
        sync = run.net.no_sync() if env.world_size > 1 and micro < accum - 1 else nullcontext()
        with sync:
            loss = run.micro_step(batch, 1 / accum, no_padding)
        loss_sum += loss.float()
        tokens += count_tokens(batch)
    if not run.gradients_checked:
        _check_every_parameter_has_a_gradient(run)
    stats = all_reduce_sum(torch.stack([loss_sum / accum, torch.tensor(float(tokens), device=env.device)]))
    stats[0] /= env.world_size
    grad_norm = clip_grad_norm(run.model.parameters(), run.cfg.clip_norm)
    # The one host sync of a step: the NaN check needs the values before the update.
    loss_value, tokens_all, norm_value = torch.cat([stats, grad_norm.view(1).to(stats)]).tolist()
    if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
        raise NonFiniteLossError(
            f"non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'} at step {step} "
            f"(loss {loss_value}, grad norm {norm_value}); stopped before the update; last good "
            f"checkpoint: {ckpt.latest_checkpoint(run.cfg.out_dir) or 'none'}")
    lr = run.optimizer.param_groups[0]["lr"]  # the rate this update uses
    run.optimizer.step()
    run.schedule.step()
    run.optimizer.zero_grad(set_to_none=not run.cfg.cuda_graphs)  # a captured backward writes where it captured
    return StepStats(loss_value, norm_value, lr, tokens_all, time.perf_counter() - t0)


def _check_every_parameter_has_a_gradient(run: Run) -> None:
    """Under DDP, once, after the first backward: a trainable parameter outside the loss gets no gradient, its
    bucket is never averaged, and DDP stops at the next step with "Expected to have finished reduction in the
    prior iteration". Said here instead, with the names, before an update that mixes averaged and unaveraged
    gradients."""
    run.gradients_checked = True
    if run.env.world_size == 1 or run.cfg.find_unused_parameters:
        return
    outside = [name for name, p in run.model.named_parameters() if p.requires_grad and p.grad is None]
    if outside:
        raise ConfigError(f"{len(outside)} trainable parameters of {type(run.model).__name__} take no part in the "
                          f"loss (e.g. {', '.join(outside[:3])}), so DistributedDataParallel cannot average their "
                          "gradients: freeze them (requires_grad_(False)) or set find_unused_parameters")


def _evaluate(run: Run, evaluate: Evaluate, step: int, checkpoint: Path | None = None) -> dict[str, float]:
    """Rank 0 evaluates (the others wait), in eval mode, without moving the training RNG streams. The metrics
    go to metrics.jsonl and, when the step was saved, into its checkpoint: the proof it was evaluated."""
    result: dict[str, float] = {}
    if run.env.is_main:
        run.model.eval()
        try:
            with preserved_rng(), torch.no_grad(), run.autocast():
                result = {k: float(v) for k, v in evaluate(run.model).items()}
        finally:  # a caller that catches a failed evaluation keeps a model in training mode
            run.model.train()
        run.metrics.write({"step": step, **{k if k.startswith("eval_") else f"eval_{k}": v
                                            for k, v in result.items()}})
        if checkpoint is not None:
            ckpt.write_evaluation(checkpoint, result)
    barrier()
    return result


def _count_evaluation(run: Run, early_stopping: EarlyStopping | None, metrics: dict[str, float],
                      evaluated: bool) -> bool:
    """Feeds the evaluation of this step (if `evaluated`, which every rank knows alike) to early stopping;
    True when the run stops here. Rank 0 evaluates, so rank 0 decides and every rank follows."""
    if early_stopping is None or not evaluated:
        return False
    stop = broadcast_object(early_stopping.update(metrics, run.state.progress.step) if run.env.is_main else None)
    if stop and run.env.is_main:
        log.info("early stopping at step %d: %d evaluations without a better %s than %.4g", run.state.progress.step,
                 early_stopping.stale, early_stopping.metric, early_stopping.best)
    return stop


def _resumed_step_due(run: Run) -> bool:
    """Whether the step a run resumed at was due an evaluation (every rank computes the same)."""
    step = run.state.progress.step
    return step > 0 and run.resumed_from is not None and _eval_due(run.cfg, step)


def _owed_evaluations(run: Run, evaluate: Evaluate, evaluate_start: bool
                      ) -> tuple[dict[str, float], dict[str, float]]:
    """(start_eval, eval) at the start of a call. The initial weights are evaluated once per run (a resume
    reads the result from its checkpoint); a resumed checkpoint due an evaluation is evaluated only if the run
    was killed between saving and evaluating it, else its recorded metrics are returned. Rank 0 reads what
    was recorded and every rank follows its decision (the evaluation's barrier needs all of them)."""
    step, record = run.state.progress.step, run.state.record
    if evaluate_start and step == 0 and not record.start_eval:
        record.start_eval = _evaluate(run, evaluate, 0)
    owed = _resumed_step_due(run)
    recorded = ckpt.read_evaluation(run.resumed_from) if owed and run.env.is_main else None
    if broadcast_object(owed and recorded is None):
        log.info("evaluating %s: the run stopped before its evaluation", run.resumed_from)
        return dict(record.start_eval), _evaluate(run, evaluate, step, run.resumed_from)
    return dict(record.start_eval), dict(recorded or {})


# -- building a run ----------------------------------------------------------------------------------------------

@dataclass
class Run:
    """What the cadence hands its steps, built once by `_start`."""

    cfg: TrainConfig
    env: Dist
    model: nn.Module  # the module itself: saved, evaluated, its gradients clipped
    net: nn.Module  # the model, wrapped in DDP when there are several ranks
    forward: Callable[..., Any]  # net, or net compiled whole (--compile-scope model): what a step calls
    optimizer: torch.optim.Optimizer
    schedule: Any
    batch_fn: BatchFn  # the micro-batches of a step (asked ahead by worker processes on a GPU: data.prefetched)
    accumulation: int
    state: TrainState
    metrics: MetricsLog
    tokenizer: str | os.PathLike | None
    resumed_from: Path | None
    gradients_checked: bool = False  # the DDP check of the first backward (train_step)
    precision: str = "fp32"  # what runs: cfg.precision, or what "auto" chose
    micro_step: Callable[[dict[str, torch.Tensor], float, bool], torch.Tensor] = field(init=False)  # fwd + bwd
    autocast: Callable[[], Any] = field(init=False)  # the run's precision as a context: `with run.autocast():`

    def __post_init__(self) -> None:
        # A partial, not a method: a Run holding a bound method of itself is a reference cycle, freed only by a
        # later garbage collection, and it keeps DDP, hence the process group, alive (train's end).
        self.autocast = partial(autocast, self.precision, self.env.device.type)
        self.micro_step = micro_step(self.forward, self.autocast, self.cfg.cuda_graphs)

    def save(self) -> Path | None:
        return self.state.save(self.cfg.out_dir, tokenizer=self.tokenizer, keep_last=self.cfg.keep_last,
                               extra={"config": dataclasses.asdict(self.cfg)})


def _start(model: nn.Module, data: ShuffledData | BatchFn, cfg: TrainConfig, env: Dist,
           tokenizer: str | os.PathLike | None, configs: Mapping[str, Any] | None,
           identity: Mapping[str, Any] | None, early_stopping: EarlyStopping | None = None) -> Run:
    """Seed, build optimizer and schedule, resume if asked, write the run's config, wrap the model."""
    out = Path(cfg.out_dir)
    micro_batch, accum = cfg.accumulation(env.world_size)
    run_identity = {"model": model_identity(model), "labels": label_identity(model), **(identity or {})}
    if tokenizer is not None:  # checked now, not at the first save after hours of training
        if not os.path.exists(tokenizer):
            raise ConfigError(f"tokenizer {tokenizer} does not exist: checkpoints could not include it")
        run_identity["tokenizer"] = ckpt.fingerprint(tokenizer)
    record = RunRecord(run_identity, {**configure_device(env.device, cfg.tf32), "world_size": env.world_size})
    log.info("training on %s (TF32 %s), %d process(es)", env.device, record.runtime["tf32"], env.world_size)
    set_seed(cfg.seed + env.rank)  # dropout differs across ranks, as it would across a bigger batch
    model = model.to(env.device)
    if cfg.gradient_checkpointing:
        set_gradient_checkpointing(model, True)
    optimizer = make_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, (cfg.beta1, cfg.beta2), cfg.eps)
    schedule = make_schedule(optimizer, cfg.warmup_steps, cfg.max_steps, cfg.lr_decay_power)
    batch_fn = as_batch_fn(data, cfg.batch_size, micro_batch, cfg.seed)
    metrics = MetricsLog(out, writes=env.is_main)
    state = TrainState(model, optimizer, schedule, batch_fn, env, accum, record, early_stopping, metrics.window)
    resumed_from = _checkpoint_to_resume(out, cfg.resume, env)
    if resumed_from is not None:
        state.restore(resumed_from)
        log.info("resumed from %s at step %d", resumed_from, state.progress.step)
    if env.device.type == "cpu":  # a resume keeps the start's fp32 GEMM kernels: another backend rounds otherwise
        record.gemm = gemm.keep_choice(record.gemm)
    precision = cfg.precision
    if precision == "auto":
        chosen = record.auto_precision  # a resumed run keeps what its start chose
        if chosen is None:
            choice = _auto_precision(model, batch_fn, env, state.progress.step)
            chosen = {**choice.record(), "device": device_name(env.device), "fp32_kernels": fp32_kernels(env.device),
                      **({"gemm_backend": gemm.backend().name} if env.device.type == "cpu" else {})}
            record.auto_precision = chosen
        elif env.is_main:
            print(f"litebert: precision auto -> {chosen['chosen']}, as chosen when this run started", flush=True)
        precision, configs = chosen["chosen"], {**(configs or {}), "precision": chosen}
    if env.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomically(out / CONFIG_NAME, dump_toml({"train": cfg, **(configs or {})}))  # what --resume checks
    # A fresh start drops what an earlier attempt in this directory logged (its step 0 too). A resume keeps the
    # records up to its step, less an evaluation of that step its checkpoint holds no record of (a kill between
    # logging and recording it): _owed_evaluations redoes that one.
    redone = resumed_from is not None and env.is_main and ckpt.read_evaluation(resumed_from) is None
    metrics.restart_at(state.progress.step if resumed_from is not None else -1, evaluated=not redone)

    net = model
    if env.world_size > 1:  # every trainable parameter must be in the loss (see train_step's check)
        net = nn.parallel.DistributedDataParallel(model, device_ids=[env.device.index] if env.device.type == "cuda"
                                                  else None, find_unused_parameters=cfg.find_unused_parameters)
    model.train()
    forward = net
    if cfg.compile and cfg.compile_scope == "layers":
        compile_layers(model)
    elif cfg.compile:
        forward = torch.compile(net)
    workers = cfg.data_workers if cfg.data_workers is not None else 2 if env.device.type == "cuda" else 0
    step_batches = prefetched(batch_fn, workers, accum, cfg.max_steps, pin_memory=env.device.type == "cuda")
    return Run(cfg, env, model, net, forward, optimizer, schedule, step_batches,
               accum, state, metrics, tokenizer, resumed_from, precision=precision)


def _auto_precision(model: nn.Module, batch_fn: BatchFn, env: Dist, step: int) -> PrecisionChoice:
    """--precision auto: this run's next micro-batch, forward and backward in fp32 and in bf16, timed (gradients
    discarded, RNG streams untouched; timings averaged over ranks so all agree, and still one micro-batch's
    seconds for the recorded rates). Nothing runs on a device without bf16 kernels: fp32. See
    litebert.runtime.precision.choose_precision."""
    batch: dict[str, torch.Tensor] = {}

    def run(precision: str) -> None:
        if not batch:
            batch.update({k: v.to(env.device) for k, v in batch_fn(step, 0, env.rank, env.world_size).items()})
        with autocast(precision, env.device.type):
            loss = model(**batch).loss
        loss.backward()

    def mean_over_ranks(seconds: list[float]) -> list[float]:
        return (all_reduce_sum(torch.tensor(seconds, dtype=torch.float64, device=env.device)) / env.world_size).tolist()

    model.train()
    with preserved_rng():
        choice = choose_precision(run, env.device, combine=mean_over_ranks)
    model.zero_grad(set_to_none=True)
    if batch:
        choice = dataclasses.replace(choice, unit="tokens", rates={  # seconds are per micro-batch
            p: round(count_tokens(batch) / s, 1) for p, s in choice.seconds.items()})
    if env.is_main:
        print(f"litebert: {choice}", flush=True)
    return choice


def _checkpoint_to_resume(out: Path, resume: bool, env: Dist) -> Path | None:
    """Which checkpoint every rank resumes from, decided once, on rank 0, and broadcast: ranks that each looked
    for themselves could disagree (a checkpoint appearing or moved aside between their looks, a filesystem
    that shows it to one node first). Rank 0 clears what crashed saves left and takes the newest intact
    checkpoint (`resume_point`). Checkpoints found without --resume are refused (the run would overwrite them
    step by step), except after an elastic restart, which resumes on its own. A refusal is rank 0's decision
    too, raised on every rank (one rank raising alone would leave the others waiting in the broadcast)."""
    restarts = elastic_restart()
    resume = resume or restarts > 0
    decision: tuple[str | None, LitebertError | None] = (None, None)  # (checkpoint, refusal)
    if env.is_main:
        ckpt.remove_partial(out)
        if not resume and ckpt.latest_checkpoint(out) is not None:
            decision = (None, ConfigError(f"{out} already holds checkpoints; pass --resume to continue, or choose "
                                          "another out_dir"))
        elif resume:
            try:
                found = ckpt.resume_point(out)
                decision = (None if found is None else str(found), None)
            except CheckpointError as e:  # every checkpoint damaged
                decision = (None, e)
    path, error = broadcast_object(decision)
    if error is not None:
        raise error
    if restarts and path:
        log.warning("elastic restart %d: resuming from %s", restarts, path)
    return Path(path) if path else None
