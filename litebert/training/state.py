"""What a checkpoint holds, as named objects that each have state_dict/load_state_dict, so saving is one loop
over them and restoring another:

    model       the weights, written as the checkpoint's model files (save_pretrained): every checkpoint is a
                model directory that litebert and transformers load
    optimizer   moments and step counts
    schedule    the learning-rate schedule's position
    data        the data position: the step (batch functions are pure functions of it) and the batch
                function's own state, when it has state_dict
    progress    the step and every rank's RNG streams (python, numpy, torch, this rank's CUDA device), so that
                a resumed run draws the dropout masks an uninterrupted one would
    record      what the run is (architecture, label set, tokenizer, data), compared on resume so that a
                resume with another model, data, tokenizer or labels is refused by name; what it measured once
                (the evaluation of the initial weights); and the device choices it ran with (TF32, the CPU's
                GEMM backends, --precision auto's choice), the last two kept by a resume
    early_stopping  (with early stopping only) the best metric so far, the evaluations since it improved and
                the step of the last one counted

The others go into `train_state.pt`, each under its name, except that progress's keys sit at the top level
(step, rng, world_size, accumulation_steps), where every checkpoint so far has them: a checkpoint written
before this layout resumes, and `load_train_state(path)["step"]` reads the same in all of them. The record
is checked first, before any weight is loaded: a mismatch is named, not a size error from load_state_dict.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from litebert.errors import CheckpointError
from litebert.training import checkpoint as ckpt
from litebert.training import prerelease
from litebert.training.data import BatchFn
from litebert.training.distributed import Dist, all_gather, barrier

log = logging.getLogger("litebert")

PROGRESS_KEYS = ("step", "rng", "world_size", "accumulation_steps")


class Progress:
    """The step counter (the loop's one) and the RNG streams of every rank."""

    def __init__(self, env: Dist, accumulation_steps: int):
        self.step = 0
        self.rank, self.world_size, self.accumulation_steps = env.rank, env.world_size, accumulation_steps

    def state_dict(self) -> dict[str, Any]:
        """A collective under DDP: every rank contributes its RNG states."""
        return {"step": self.step, "rng": all_gather(ckpt.rng_state()), "world_size": self.world_size,
                "accumulation_steps": self.accumulation_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["world_size"] != self.world_size or state["accumulation_steps"] != self.accumulation_steps:
            log.warning("the checkpoint was written by %d process(es) x %d micro-batches, resuming with %d x %d: "
                        "data is the same if batch_fn numbers micro-batches by slot, but RNG streams (dropout) "
                        "differ", state["world_size"], state["accumulation_steps"], self.world_size,
                        self.accumulation_steps)
        if self.rank < len(state["rng"]):  # a rank the writer did not have keeps its seeded streams
            ckpt.set_rng_state(state["rng"][self.rank])
        self.step = int(state["step"])


class DataPosition:
    """Where the data stream stands. The step is progress's; saved here too, as every checkpoint has it."""

    def __init__(self, batch_fn: BatchFn, progress: Progress):
        self.batch_fn, self.progress = batch_fn, progress

    def state_dict(self) -> dict[str, Any]:
        own = self.batch_fn.state_dict() if hasattr(self.batch_fn, "state_dict") else None
        return {"step": self.progress.step, "state": own}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("state") is not None and hasattr(self.batch_fn, "load_state_dict"):
            self.batch_fn.load_state_dict(state["state"])


# Config keys that do not change what a checkpoint's weights mean: a resume may change them.
_NOT_ARCHITECTURE = ("dropout", "initializer_range", "id2label", "label2id", "architectures",
                     "transformers_version", "torch_dtype")


def model_identity(model: nn.Module) -> dict[str, Any]:
    """The model's class and the config fields that define its architecture (dropout rates excluded)."""
    config = getattr(model, "config", None)
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config) if isinstance(config, Mapping) else {}
    return {"class": type(model).__name__,
            **{k: v for k, v in values.items() if not any(word in k for word in _NOT_ARCHITECTURE)}}


def label_identity(model: nn.Module) -> list[str] | None:
    """The model's label names in id order (config.id2label), or None for a model without named labels."""
    return getattr(getattr(model, "config", None), "label_names", None)


def _plain(value: Any) -> Any:
    """JSON's types only, so the record loads with weights_only=True and compares by value."""
    return json.loads(json.dumps(value, default=str))


class RunRecord:
    """What the run is and what it measured once (module docstring)."""

    NAMES = {"model": "the model (architecture)", "data": "the data", "tokenizer": "the tokenizer",
             "labels": "the label set"}

    def __init__(self, identity: Mapping[str, Any], runtime: Mapping[str, Any] | None = None):
        accepting = {k: v for k, v in identity.items() if isinstance(v, prerelease.Accepting)}
        self.identity = _plain({k: accepting[k].now if k in accepting else v for k, v in identity.items()})
        self.before = _plain({k: v.before for k, v in accepting.items()})  # never saved: only compared
        self.runtime = _plain(dict(runtime or {}))
        self.start_eval: dict[str, float] = {}
        # --precision auto's choice, made once when the run starts and kept by its checkpoints: a resume that
        # measured again could switch precision mid-run (the two are often within the timings' noise)
        self.auto_precision: dict[str, Any] | None = None
        self.gemm: dict[str, Any] | None = None  # the CPU's fp32 GEMM backends, kept alike (runtime.gemm.keep_choice)

    def state_dict(self) -> dict[str, Any]:
        return {"identity": self.identity, "start_eval": self.start_eval, "runtime": self.runtime,
                **({"auto_precision": _plain(self.auto_precision)} if self.auto_precision else {}),
                **({"gemm": _plain(self.gemm)} if self.gemm else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.start_eval = dict(state.get("start_eval") or {})
        self.auto_precision = state.get("auto_precision")
        self.gemm = state.get("gemm")

    def mismatch(self, saved: Mapping[str, Any]) -> str | None:
        """How the checkpoint's identity differs from this run's, naming each part, or None. Parts that either
        side does not record (older checkpoints, a verb that passes no data fingerprint) are not compared."""
        saved = saved.get("identity") or {}
        problems = []
        for key in self.identity:
            accepted = [self.identity[key], *([self.before[key]] if key in self.before else [])]
            if key not in saved or saved[key] in accepted:
                continue
            # reported against the form the checkpoint holds (an older fingerprint, prerelease.Accepting)
            now = next((value for value in accepted if _fields(value) == _fields(saved[key])), accepted[0])
            problems.append(f"{self.NAMES.get(key, key)} differs ({_difference(saved[key], now)})")
        return "; ".join(problems) or None


def _fields(value: Any) -> Any:
    return sorted(value) if isinstance(value, dict) else None


def _difference(then: Any, now: Any) -> str:
    if isinstance(then, dict) and isinstance(now, dict):
        keys = [k for k in sorted(set(then) | set(now), key=str) if then.get(k) != now.get(k)]
        return ", ".join(f"{k}: {_short(then.get(k))} in the checkpoint, {_short(now.get(k))} now" for k in keys[:3])
    return f"{_short(then)} in the checkpoint, {_short(now)} now"


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if isinstance(value, str) and len(text) == 64 else text if len(text) <= 80 else text[:77] + "..."


class EarlyStopping:
    """Ends a run after `patience` evaluations in a row without a better `metric` (higher is better).

    A named object of the checkpointed state, which records the step of the last evaluation it counted: the loop
    feeds it each step's evaluation (made, or read back on resume) and it counts each step once, so a resumed
    run stops where the uninterrupted one would have. (The checkpoint of the step a run stops at may be saved
    after that step's count: resumed, that evaluation is read back again, and is not counted twice.)"""

    def __init__(self, metric: str, patience: int):
        if patience < 1:
            raise ValueError(f"early stopping needs a patience >= 1, got {patience}")
        self.metric, self.patience = metric, patience
        self.best, self.stale, self.counted_step = -math.inf, 0, -1

    @property
    def stopped(self) -> bool:
        return self.stale >= self.patience

    def update(self, metrics: Mapping[str, float], step: int) -> bool:
        """Counts the evaluation of `step` unless it was counted before; True when the run should stop. An
        evaluation without the metric counts as not better (a score that could not be computed never resets
        the patience)."""
        if step <= self.counted_step:
            return self.stopped
        value = metrics.get(self.metric, -math.inf)
        if value > self.best:
            self.best, self.stale = value, 0
        else:
            self.stale += 1
        self.counted_step = step
        return self.stopped

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "best": self.best, "stale": self.stale, "counted_step": self.counted_step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best, self.stale = float(state["best"]), int(state["stale"])
        self.counted_step = int(state.get("counted_step", -1))  # older checkpoints: not recorded, counts as then


class TrainState:
    """The model and the named objects of a run (see the module docstring), saved and restored together."""

    OPTIONAL = (*prerelease.OBJECTS_ADDED_SINCE, "early_stopping")  # early stopping: only runs that use it

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, schedule: Any, batch_fn: BatchFn,
                 env: Dist, accumulation_steps: int, record: RunRecord | None = None,
                 early_stopping: EarlyStopping | None = None, log_window: Any = None):
        self.model, self.env = model, env
        self.progress = Progress(env, accumulation_steps)
        self.record = record or RunRecord({})
        # Restored in this order; progress last, so that its RNG states are the ones training continues with.
        self.objects = {"record": self.record, "optimizer": optimizer, "schedule": schedule,
                        "data": DataPosition(batch_fn, self.progress)}
        if early_stopping is not None:
            self.objects["early_stopping"] = early_stopping
        if log_window is not None:  # the metrics log's steps since its last record (MetricsLog.window)
            self.objects["log_window"] = log_window
        self.objects["progress"] = self.progress

    def save(self, out_dir: str | os.PathLike, *, tokenizer: str | os.PathLike | None = None, keep_last: int = 0,
             extra: dict[str, Any] | None = None) -> Path | None:
        """Write `out_dir/step_N` (rank 0; every rank must call: progress gathers RNG states). `extra` is
        saved in train_state.pt for reading, never restored (the run's config). Returns the path on rank 0."""
        states = {name: obj.state_dict() for name, obj in self.objects.items()}
        path = None
        if self.env.is_main:
            path = ckpt.save_checkpoint(out_dir, self.progress.step, self.model, _file_layout(states, extra),
                                        tokenizer=tokenizer, keep_last=keep_last)
        barrier()
        return path

    def restore(self, path: str | os.PathLike) -> None:
        """Load a checkpoint, after checking that it is this run's (RunRecord.mismatch)."""
        saved = ckpt.load_train_state(path)
        problem = self.record.mismatch(saved.get("record") or {})
        if problem:
            raise CheckpointError(f"cannot resume from {path}: {problem}; resume with what the run was started "
                                  "with, or start a new run in another out_dir")
        ckpt.load_model_weights(self.model, path)
        states = _named_layout(saved, self.objects)
        optimizer = self.objects["optimizer"]
        if isinstance(optimizer, torch.optim.Optimizer):
            states["optimizer"] = prerelease.optimizer_state_by_name(optimizer, states["optimizer"], path)
        for name, obj in self.objects.items():
            if states[name] is not None:  # None: an OPTIONAL object the checkpoint does not have
                obj.load_state_dict(states[name])
        schedule = self.objects["schedule"]
        if isinstance(schedule, torch.optim.lr_scheduler.LambdaLR):
            # The optimizer's saved lr is the old schedule's: with --max-steps raised, the first step after the
            # resume would use it (0 where the old run had finished). The same schedule gives the same value.
            for group, base, factor in zip(optimizer.param_groups, schedule.base_lrs, schedule.lr_lambdas):
                group["lr"] = base * factor(schedule.last_epoch)


def _file_layout(states: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    others = {name: state for name, state in states.items() if name != "progress"}
    return {**states["progress"], **others, **(extra or {})}


def _named_layout(saved: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: {k: saved[k] for k in PROGRESS_KEYS} if name == "progress" else
            saved.get(name) if name in TrainState.OPTIONAL else saved[name] for name in names}


# -- RNG ---------------------------------------------------------------------------------------------------------

def set_seed(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def preserved_rng():
    """Run a block (evaluation) without moving the training RNG streams, so evaluating never changes training."""
    state = ckpt.rng_state()
    try:
        yield
    finally:
        ckpt.set_rng_state(state)
