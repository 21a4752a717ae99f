"""A training micro-step (forward and backward) replayed as one CUDA graph, for models too small to keep a GPU busy.

The demo's 0.8M-parameter ALBERT spends its eager step on an H100 launching kernels (one step, batch 32 x 64:
11.9 ms eager, 2.4 ms as one captured graph; docs/gpu.md). `--cuda-graphs` captures forward and backward once per
batch shape and then replays them: each batch is copied into the captured input tensors, the graph re-runs every
kernel with one launch, and the gradients accumulate in place. The update stays outside the graph, after the
step's one host sync, so a NaN still stops the run before the weights change.

What capture needs, and where it is provided:
  * no host syncs and no data-dependent shapes: the model takes its static-shape path (litebert.model.static_shapes,
    true while a stream captures): every position's MLM logits, the padding mask always built;
  * gradients at fixed addresses: the loop zeroes them in place instead of freeing them (`zero_grad(set_to_none=
    False)` when graphed);
  * a warm-up before capture, on a side stream (cuBLAS and autocast initialise lazily): the first calls of each
    batch shape are real training micro-steps run that way.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import torch

from litebert.model import batch_without_padding, forced_static_shapes

log = logging.getLogger("litebert")

WARMUP_CALLS = 2  # eager micro-steps of a batch shape before it is captured
MAX_GRAPHS = 8  # batch shapes kept captured; further shapes run eagerly (fine-tuning under --cuda-graphs pads to
# --max-length and rounds the padding-free token count up to a multiple of it: a few shapes, collate's static_length)


def forward_backward(forward: Callable[..., Any], autocast: Callable[[], AbstractContextManager],
                     batch: dict[str, torch.Tensor], scale: float, no_padding: bool = False) -> torch.Tensor:
    """One micro-batch: the loss (unscaled, detached), its gradients times `scale` accumulated into .grad.
    `no_padding`: the caller read the batch's attention_mask on the host, all ones (model.batch_without_padding)."""
    with autocast(), batch_without_padding(no_padding):
        loss = forward(**batch).loss
    (loss * scale).backward()
    return loss.detach()


def micro_step(forward: Callable[..., Any], autocast: Callable[[], AbstractContextManager], cuda_graphs: bool
               ) -> Callable[[dict[str, torch.Tensor], float, bool], torch.Tensor]:
    """What a training step calls per micro-batch, (batch, scale, no_padding) -> loss: `forward_backward`, or its
    captured replay with `--cuda-graphs`."""
    return GraphedMicroStep(forward, autocast) if cuda_graphs else partial(forward_backward, forward, autocast)


class GraphedMicroStep:
    """`forward_backward` for a fixed model, forward and autocast, captured per batch shape and replayed."""

    def __init__(self, forward: Callable[..., Any], autocast: Callable[[], AbstractContextManager]):
        self.forward, self.autocast = forward, autocast
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], torch.Tensor]] = {}
        self.calls: Counter = Counter()
        self.pool = None  # one memory pool shared by every graph (they never run at the same time)
        self.warned = False  # that MAX_GRAPHS shapes are captured and more run uncaptured

    def __call__(self, batch: dict[str, torch.Tensor], scale: float, no_padding: bool = False) -> torch.Tensor:
        key = (scale, no_padding, *((name, tuple(t.shape), t.dtype) for name, t in sorted(batch.items())))
        if key not in self.graphs:
            self.calls[key] += 1
            if self.calls[key] <= WARMUP_CALLS or len(self.graphs) >= MAX_GRAPHS:
                if len(self.graphs) >= MAX_GRAPHS and self.calls[key] == WARMUP_CALLS + 1 and not self.warned:
                    self.warned = True  # once: the run goes on, at eager speed for these shapes
                    log.warning("--cuda-graphs: %d batch shapes are captured, the most kept; this batch's shape "
                                "(%s) and any later new one run uncaptured. Batches of fewer shapes (padded to "
                                "--max-length, equal-length data) keep every step captured", MAX_GRAPHS,
                                ", ".join(f"{name} {tuple(t.shape)}" for name, t in sorted(batch.items())))
                return self._on_side_stream(batch, scale, no_padding)
            self._capture(key, batch, scale, no_padding)
        graph, inputs, loss = self.graphs[key]
        for name, tensor in batch.items():
            inputs[name].copy_(tensor, non_blocking=True)
        graph.replay()
        return loss.clone()  # the next replay overwrites the captured output

    def _on_side_stream(self, batch: dict[str, torch.Tensor], scale: float, no_padding: bool) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), forced_static_shapes():
            loss = forward_backward(self.forward, self.autocast, batch, scale, no_padding)
        torch.cuda.current_stream().wait_stream(side)
        return loss

    def _capture(self, key: tuple, batch: dict[str, torch.Tensor], scale: float, no_padding: bool) -> None:
        inputs = {name: tensor.clone() for name, tensor in batch.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = forward_backward(self.forward, self.autocast, inputs, scale, no_padding)
        self.pool = graph.pool()
        self.graphs[key] = (graph, inputs, loss)


__all__ = ["GraphedMicroStep", "forward_backward", "micro_step"]
