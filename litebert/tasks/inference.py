"""Running a model over features in batches of similar length, for every family: fine-tuning's evaluation,
evaluate, predict, pipelines and ensembles all score through `batched_scores`."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from litebert.errors import NonFiniteError
from litebert.tasks.families import Family
from litebert.tasks.features import collate

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def model_scores(model, family: Family, features: Sequence, batch_size: int, pad_id: int) -> list[np.ndarray]:
    """The family's per-feature scores of a PyTorch `model`, in the features' order (see batched_scores)."""
    model.eval()
    device = next(model.parameters()).device  # during fine-tuning: the training device
    return batched_scores(lambda batch: model(**{k: batch[k].to(device) for k in MODEL_INPUTS}), family,
                          features, batch_size, pad_id)


def batched_scores(run: Callable[[dict[str, torch.Tensor]], Any], family: Family, features: Sequence,
                   batch_size: int, pad_id: int) -> list[np.ndarray]:
    """The family's per-feature scores, in the features' order, where `run` maps one padded batch (collate's
    tensors) to the model's output: a PyTorch forward, an ONNX Runtime session, ..."""
    scores: list[np.ndarray | None] = [None] * len(features)
    for index in length_batches(features, batch_size):
        chunk = [features[i] for i in index]
        for i, row in zip(index, family.scores(run(collate(chunk, pad_id)), chunk)):
            scores[i] = row
    return scores


def check_finite_scores(scores: Sequence[np.ndarray | None], source: str) -> None:
    """NonFiniteError when a model's outputs hold NaN or infinity: every metric or answer computed from them would
    be wrong (argmax of NaN is 0; "score": NaN is not even JSON) without a word. The one check between scores
    and answers: evaluate, fine-tuning's evaluation, ensemble members, pipelines (predict, serve)."""
    bad = sum(1 for s in scores if s is not None and not np.isfinite(s).all())
    if bad:
        raise NonFiniteError(f"{source}: the model's outputs are NaN or infinite for {bad} of {len(scores)} "
                             "inputs; its weights are damaged, or training diverged")


# A batch is cut short when padding it to its next (longest) feature would add more than this share of padding
# to its real tokens, once it would hold at least PADDING_CUT_MIN_TOKENS padded (below that, a model call's
# fixed cost outweighs the padding). bench/pipeline_batching.py measures it against cutting at batch_size alone.
PADDING_SLACK, PADDING_CUT_MIN_TOKENS = 0.25, 256


def length_batches(features: Sequence, batch_size: int) -> Iterator[list[int]]:
    """Feature indices in batches of at most batch_size, cut from the features sorted by length, so each pads
    to near its own length rather than to the longest of a random handful; a batch also ends where the next
    feature would pad it beyond PADDING_SLACK (once it holds PADDING_CUT_MIN_TOKENS). Multiple-choice features
    are grouped by their number of options first: a batch is one (B, C, T) block, its tokens counted per
    option."""
    def options(i: int) -> int:
        ids = features[i].input_ids
        return len(ids) if ids and isinstance(ids[0], list) else 0

    def tokens(i: int) -> int:
        ids = features[i].input_ids
        return sum(map(len, ids)) if options(i) else len(ids)

    batch: list[int] = []
    real = 0  # tokens of the batch without padding
    for i in sorted(range(len(features)), key=lambda i: (options(i), feature_length(features[i].input_ids))):
        length = feature_length(features[i].input_ids)
        # sorted: the new feature is the batch's longest; a multiple-choice row pads each of its options
        padded = (len(batch) + 1) * length * max(1, options(i))
        too_padded = padded > (1 + PADDING_SLACK) * (real + tokens(i)) and padded >= PADDING_CUT_MIN_TOKENS
        if batch and (len(batch) == batch_size or options(i) != options(batch[0]) or too_padded):
            yield batch
            batch, real = [], 0
        batch.append(i)
        real += tokens(i)
    if batch:
        yield batch


def feature_length(input_ids: list) -> int:
    """Tokens of one feature: its length, or its longest option's for multiple choice (a list per option)."""
    return max(map(len, input_ids)) if input_ids and isinstance(input_ids[0], list) else len(input_ids)
