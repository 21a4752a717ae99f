"""What the loop trains on: a batch function, or a finite set of examples it shuffles into one.

    batch_fn(step, micro, rank, world_size) -> dict of tensors
        step counts the optimizer steps done before this one. A pure function of its arguments, so a resumed
        run sees the same data and each rank reads its own part; one with state_dict/load_state_dict has that
        state saved in every checkpoint.
    ShuffledData(num_examples, collate)
        the common case, a dataset of known size: the loop makes it a batch_fn (`shuffled_batches`) from the
        run's batch size, micro-batch size and seed, so verbs do not size micro-batches themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from litebert.errors import ConfigError

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


def count_tokens(batch: Mapping[str, torch.Tensor]) -> int:
    """Tokens processed (padding included: it costs compute; with packed_positions, the rows the encoder ran on);
    examples for batches without input_ids."""
    if "packed_positions" in batch:
        return batch["packed_positions"].numel()
    if "input_ids" in batch:
        return batch["input_ids"].numel()
    return len(next(iter(batch.values())))
