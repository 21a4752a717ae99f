"""What the loop trains on: a batch function, or a finite set of examples it shuffles into one.

    batch_fn(step, micro, rank, world_size) -> dict of tensors
        step counts the optimizer steps done before this one. A pure function of its arguments, so a resumed
        run sees the same data and each rank reads its own part; one with state_dict/load_state_dict has that
        state saved in every checkpoint.
    ShuffledData(num_examples, collate)
        the common case, a dataset of known size: the loop makes it a batch_fn (`shuffled_batches`) from the
        run's batch size, micro-batch size and seed, so verbs do not size micro-batches themselves.
On a GPU the loop asks for batches ahead (`PrefetchedBatches`): building one (masking, tokenizing) is host work
that would otherwise leave the device idle between steps.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from litebert.errors import ConfigError, LitebertError

BatchFn = Callable[[int, int, int, int], Mapping[str, torch.Tensor]]
Collate = Callable[[list[int], int], Mapping[str, torch.Tensor]]


@dataclass(frozen=True)
class ShuffledData:
    """`num_examples` examples, reshuffled every epoch; `collate(indices, position)` builds a micro-batch's
    tensors (see `shuffled_batches` for `position`)."""

    num_examples: int
    collate: Collate

    def __post_init__(self) -> None:
        if self.num_examples < 1:
            raise ConfigError(f"no examples to train on (num_examples = {self.num_examples})")

    def batch_fn(self, batch_size: int, micro_batch_size: int, seed: int) -> BatchFn:
        return shuffled_batches(self.num_examples, batch_size, micro_batch_size, seed, self.collate)


def shuffled_batches(num_examples: int, batch_size: int, micro_batch_size: int, seed: int,
                     collate: Collate) -> BatchFn:
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


def as_batch_fn(data: ShuffledData | BatchFn, batch_size: int, micro_batch_size: int, seed: int) -> BatchFn:
    if isinstance(data, ShuffledData):
        return data.batch_fn(batch_size, micro_batch_size, seed)
    if not callable(data):
        raise TypeError(f"train() takes ShuffledData or a batch_fn(step, micro, rank, world_size), got {data!r}")
    return data


def holds_no_padding(batch: Mapping[str, torch.Tensor]) -> bool:
    """Whether every attention mask of a micro-batch is all ones (and no packed positions run it padding-free),
    read where it costs nothing: on the host, before the batch moves to the device (model.batch_without_padding
    then holds for every encoder pass of the step: both sides of a sentence pair, attention_mask_b too)."""
    masks = [v for k, v in batch.items() if k.startswith("attention_mask")]
    return bool(masks) and "packed_positions" not in batch and all(bool(m.all()) for m in masks)


def count_tokens(batch: Mapping[str, torch.Tensor]) -> int:
    """Tokens processed (padding included: it costs compute; with packed_positions, the rows the encoder ran on);
    examples for batches without input_ids."""
    if "packed_positions" in batch:
        return batch["packed_positions"].numel()
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return len(next(iter(batch.values())))


class PrefetchedBatches:
    """A stateless batch_fn asked ahead: `workers` processes build the micro-batches that follow the one asked
    for, in the order the loop asks (step by step, micro-batch by micro-batch), pinned for an asynchronous copy
    when `pin_memory`. A batch is a pure function of its arguments, so this changes when it is built, never what
    it holds: a resume or any worker count trains on the same batches. Measured on a 2-core CPU, masking one
    256 x 128 pretraining batch takes 25 ms, longer than the gpu scale's whole step on an H100; the synchronous
    loop left the GPU idle for it every step.

    An ask out of order (the first, or after a resume) starts the workers again from there. Workers are forked
    (a batch_fn is usually a closure, which spawn could not send); stop_workers() stops them."""

    def __init__(self, batch_fn: BatchFn, workers: int, accumulation: int, max_steps: int, pin_memory: bool):
        self.batch_fn, self.workers, self.accumulation, self.max_steps = batch_fn, workers, accumulation, max_steps
        self.pin_memory = pin_memory
        self._batches: Iterator | None = None
        self._expected: tuple[int, int, int] | None = None  # (micro-batch index, rank, world size) asked next

    def __call__(self, step: int, micro: int, rank: int, world_size: int) -> Mapping[str, torch.Tensor]:
        index, total = step * self.accumulation + micro, self.max_steps * self.accumulation
        if index >= total:  # past the steps the run was started for: nothing to prefetch
            return self.batch_fn(step, micro, rank, world_size)
        if self._batches is None or self._expected != (index, rank, world_size):
            self.stop_workers()
            loader = DataLoader(_MicroBatches(self.batch_fn, index, total, self.accumulation, rank, world_size),
                                batch_size=None, num_workers=self.workers, pin_memory=self.pin_memory,
                                prefetch_factor=2, multiprocessing_context="fork",
                                generator=torch.Generator())  # its seed draw must not move the run's RNG (dropout)
            self._batches = iter(loader)
        item = next(self._batches)
        self._expected = (index + 1, rank, world_size)
        if isinstance(item, _Failed):
            raise item.error
        return item

    def stop_workers(self) -> None:
        """Stop the workers now, not when the loader's iterator is freed: an error raised through it (a worker's
        bug, a KeyboardInterrupt while waiting for a batch) holds it in its traceback, and its workers would live
        as long as the error, then until a garbage collection."""
        shutdown = getattr(self._batches, "_shutdown_workers", None)  # what the iterator's __del__ calls
        if shutdown is not None:
            shutdown()
        self._batches, self._expected = None, None


def prefetched(batch_fn: BatchFn, workers: int, accumulation: int, max_steps: int, pin_memory: bool) -> BatchFn:
    """`batch_fn` asked ahead by `workers` processes, or itself: with no workers, where processes cannot be
    forked, or when it has state of its own (state_dict: asking ahead would move it past the checkpoint)."""
    if workers == 0 or hasattr(batch_fn, "state_dict") or "fork" not in multiprocessing.get_all_start_methods():
        return batch_fn
    return PrefetchedBatches(batch_fn, workers, accumulation, max_steps, pin_memory)


@dataclass(frozen=True)
class _Failed:
    """A user-fixable error raised while a worker built a batch, sent back to be raised as itself: through the
    loader it would arrive as a new exception whose message is the worker's whole traceback."""

    error: LitebertError


class _MicroBatches(Dataset):
    """Micro-batches [first, total) of a run in the loop's order: item i is micro-batch (first + i) % accumulation
    of step (first + i) // accumulation."""

    def __init__(self, batch_fn: BatchFn, first: int, total: int, accumulation: int, rank: int, world_size: int):
        self.batch_fn, self.first, self.total, self.accumulation = batch_fn, first, total, accumulation
        self.rank, self.world_size = rank, world_size

    def __len__(self) -> int:
        return self.total - self.first

    def __getitem__(self, i: int) -> Mapping[str, torch.Tensor] | _Failed:
        step, micro = divmod(self.first + i, self.accumulation)
        try:
            return self.batch_fn(step, micro, self.rank, self.world_size)
        except LitebertError as e:
            return _Failed(e)
