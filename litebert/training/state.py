"""What a checkpoint holds, as named objects that each have state_dict/load_state_dict, so saving is one loop
over them and restoring another:

    model       the weights, written as the checkpoint's model files (save_pretrained): every checkpoint is a
                model directory that litebert and transformers load
    optimizer   moments and step counts
    schedule    the learning-rate schedule's position
    data        the data position: the step (batch functions are pure functions of it) and the batch
                function's own state, when it has state_dict
    progress    the step and every rank's RNG streams (python, numpy, torch, CUDA), so that a resumed run draws
                the dropout masks an uninterrupted one would

The last four go into `train_state.pt`, each under its name, except that progress's keys sit at the top level
(step, rng, world_size, accumulation_steps), where every checkpoint so far has them: a checkpoint written
before this layout resumes, and `load_train_state(path)["step"]` reads the same in all of them.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from litebert.training import checkpoint as ckpt
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


class TrainState:
    """The model and the named objects of a run (see the module docstring), saved and restored together."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, schedule: Any, batch_fn: BatchFn,
                 env: Dist, accumulation_steps: int):
        self.model, self.env = model, env
        self.progress = Progress(env, accumulation_steps)
        # Restored in this order; progress last, so that its RNG states are the ones training continues with.
        self.objects = {"optimizer": optimizer, "schedule": schedule,
                        "data": DataPosition(batch_fn, self.progress), "progress": self.progress}

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
        ckpt.load_model_weights(self.model, path)
        states = _named_layout(ckpt.load_train_state(path), self.objects)
        for name, obj in self.objects.items():
            obj.load_state_dict(states[name])


def _file_layout(states: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    others = {name: state for name, state in states.items() if name != "progress"}
    return {**states["progress"], **others, **(extra or {})}


def _named_layout(saved: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: {k: saved[k] for k in PROGRESS_KEYS} if name == "progress" else saved[name] for name in names}


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
