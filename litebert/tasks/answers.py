"""What a task family's `answers` gives pipelines, one per input: structured answers that
litebert.serving's presenters turn into transformers' output shapes."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class LabelScore(NamedTuple):
    label: str | int  # a class name; an option's index for multiple choice
    score: float  # probability (sigmoid per label for multi-label), or the value for regression


class Ranked(NamedTuple):
    """A classifier's answer: every class best first, and the ones the family predicts."""

    ranked: list[LabelScore]
    predicted: list[LabelScore]  # the top class; for multi-label, every label over its threshold
    one: bool  # exactly one class is always predicted (then a pipeline shows it alone by default)


class Span(NamedTuple):
    """An extractive answer: context[start:end] == answer; "" with start = end = 0 for no answer."""

    answer: str
    start: int
    end: int
    score: float  # p(start) * p(end) in its window; for no answer, p([CLS]) * p([CLS])


class Spans(NamedTuple):
    """A question's answers: the best (no answer where a calibrated threshold says so), every decoded span best
    first (for top_k), and no answer with its probability (for handle_impossible_answer)."""

    best: Span
    spans: list[Span]
    null: Span


class TokenScores(NamedTuple):
    """One token of a tagged text (special tokens left out)."""

    index: int  # position in the model's input ([CLS] is 0)
    id: int
    start: int  # characters of the text it covers; a bare "▁" piece covers its word's first character, as
    end: int  # fast tokenizers report it
    word: int | None  # which whitespace-separated word of the text (None: a bare "▁", which covers none)
    probs: np.ndarray  # (num_labels,)


class MaskFill(NamedTuple):
    input_ids: list[int]
    positions: list[int]  # where the [MASK] tokens are
    probs: np.ndarray  # (num_masks, vocab_size)


def ranked(names: Sequence, scores: np.ndarray, predicted: Sequence[int], one: bool = True) -> Ranked:
    order = sorted(range(len(scores)), key=lambda j: -scores[j])  # stable: ties keep the class order
    pick = sorted(predicted, key=lambda j: -scores[j])
    return Ranked([LabelScore(names[j], float(scores[j])) for j in order],
                  [LabelScore(names[j], float(scores[j])) for j in pick], one)
