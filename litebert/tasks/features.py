"""Model inputs from task examples: the featurizers (one per head family) and the collate that pads a batch.

Featurizers code against a small tokenizer interface (litebert.tokenizer.Tokenizer provides it):
  tok.encode(text, pair=None, add_special_tokens=True, max_length=None, truncation="longest_first") -> ids
  tok.encode_with_offsets(text) -> (ids, [(start, end) char spans into text])   # no special tokens
  tok.cls_id, tok.sep_id, tok.pad_id
SQuAD-style windows are featurized in litebert/tasks/squad.py and batched by the same `collate`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from litebert.config import IGNORE_INDEX
from litebert.errors import DataError
from litebert.model import packed_positions
from litebert.tasks.records import ChoiceExample, TagExample, TextExample
from litebert.text.conventions import SPECIALS


@dataclass
class Feature:
    """Model inputs for one example, unpadded (collate pads). Multiple choice holds (C, T) nested lists."""

    input_ids: list
    token_type_ids: list  # 0 for [CLS] first-segment [SEP], 1 for the second segment and its [SEP]
    label: int | float | list[int] | None = None  # class id | regression target | per-token ids | None
    example_index: int = 0  # which example (in the list given to the featurizer) this came from
    word_ids: list[int | None] | None = field(default=None, repr=False)  # tagging: each token's word


def token_types(ids: Sequence[int], sep_id: int) -> list[int]:
    """Segment ids of [CLS] a [SEP] (b [SEP]): 0 through the first [SEP], 1 after it."""
    first_sep = ids.index(sep_id) if sep_id in ids else len(ids) - 1
    return [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)


def word_of_token(start: int, end: int, word_starts: Sequence[int], word_ends: Sequence[int]) -> int | None:
    """The word holding a token's last character (None: a bare "▁", or an empty span). Its last, not its first: a
    word that normalises to nothing (a zero-width space) leaves the next token's span starting inside it."""
    if end <= start:
        return None
    j = bisect.bisect_right(word_ends, end - 1)  # the first word ending after that character
    return j if j < len(word_starts) and word_starts[j] <= end - 1 else None


def featurize_classification(examples: Sequence[TextExample], tok, max_length: int,
                             labels: Sequence[str] | None) -> list[Feature]:
    """[CLS] a [SEP] (b [SEP]) truncated to max_length; label = index in `labels`, a float when labels is None
    (regression), or a multi-hot list of floats over `labels` when the example has a list of labels."""
    index = None if labels is None else {str(name): i for i, name in enumerate(labels)}
    features = []
    for i, ex in enumerate(examples):
        ids = tok.encode(ex.text_a, pair=ex.text_b, max_length=max_length)
        if ex.label is None:
            label = None
        elif isinstance(ex.label, list):
            unknown = [name for name in ex.label if name not in index]
            if unknown:
                raise DataError(f"example {ex.id}: labels {unknown} are not among {list(labels)}")
            label = [1.0 if name in ex.label else 0.0 for name in labels]
        elif index is None:
            label = float(ex.label)
        elif str(ex.label) in index:
            label = index[str(ex.label)]
        else:
            raise DataError(f"example {ex.id}: label {ex.label!r} is not one of {list(labels)}")
        features.append(Feature(ids, token_types(ids, tok.sep_id), label, i))
    return features


def choice_pair(context: str, question: str, option: str) -> tuple[str, str]:
    """The (first, second) segment for one option, as the reference implementations build them.

    RACE (google-research/albert race_utils): (article, question with "_" filled by the option, or
    question + option). SWAG (BERT run_swag): (sent1, sent2 + ending) - the same rule. A question without a
    context (wordnet_defmc): (question, option).
    """
    if not context:
        return question, option
    second = question.replace("_", option) if "_" in question else f"{question} {option}".strip()
    return context, second


def featurize_choices(examples: Sequence[ChoiceExample], tok, max_length: int) -> list[Feature]:
    """One (C, T) block of [CLS] first [SEP] second [SEP] rows per example; the label is the option index."""
    features = []
    for i, ex in enumerate(examples):
        rows = [tok.encode(*choice_pair(ex.context, ex.question, option), max_length=max_length)
                for option in ex.options]
        features.append(Feature(rows, [token_types(r, tok.sep_id) for r in rows], ex.label, i))
    return features


def featurize_tags(examples: Sequence[TagExample], tok, max_length: int, labels: Sequence[str]) -> list[Feature]:
    """Word-level tags on the first sub-token of each word, IGNORE_INDEX on the others and on [CLS]/[SEP].

    The words are joined with spaces and tokenized once (as pretraining saw the text), then each token is mapped
    to the word its character span overlaps; `word_ids` keeps that map so token predictions become word tags
    again (`word_predictions`). Words past max_length are cut off; they get no feature position.
    """
    index = {name: i for i, name in enumerate(labels)}
    features = []
    for i, ex in enumerate(examples):
        starts, ends, pos = [], [], 0
        for word in ex.words:
            starts.append(pos)
            ends.append(pos + len(word))
            pos += len(word) + 1
        ids, offsets = tok.encode_with_offsets(" ".join(ex.words))
        word_ids = []
        for s, e in offsets:
            word_ids.append(word_of_token(s, e, starts, ends))
        ids, word_ids = ids[: max_length - 2], word_ids[: max_length - 2]
        tags, seen = [], set()
        for j in word_ids:
            first = j is not None and j not in seen
            seen.add(j)
            if ex.tags is not None:
                if first and ex.tags[j] not in index:
                    raise DataError(f"example {ex.id}: tag {ex.tags[j]!r} is not one of {list(labels)}")
                tags.append(index[ex.tags[j]] if first else IGNORE_INDEX)
        ids = [tok.cls_id, *ids, tok.sep_id]
        label = None if ex.tags is None else [IGNORE_INDEX, *tags, IGNORE_INDEX]
        features.append(Feature(ids, [0] * len(ids), label, i, [None, *word_ids, None]))
    return features


def word_predictions(word_ids: Sequence[int | None], token_preds: Sequence[int], num_words: int,
                     labels: Sequence[str], default: str = "O") -> list[str]:
    """Word tags from per-token predictions: each word takes its first sub-token's; cut-off words get default."""
    tags, seen = [default] * num_words, set()
    for j, pred in zip(word_ids, token_preds):
        if j is not None and j not in seen:
            seen.add(j)
            tags[j] = labels[int(pred)]
    return tags


# ----------------------------------------------------------------------------------------------------------------
# batching


def pad(rows: Sequence[Sequence], value: int, dtype: torch.dtype = torch.long, width: int = 0) -> torch.Tensor:
    """(B, T) from B ragged rows, or (B, C, T) from B lists of C ragged rows, filled with `value` on the right;
    T is the longest row, or `width` if that is more."""
    nested = bool(rows) and bool(rows[0]) and isinstance(rows[0][0], (list, tuple))
    flat = [r for row in rows for r in row] if nested else list(rows)
    width = max(width, *(len(r) for r in flat))
    # filled in numpy: a row copied from a list costs ~1 us there against ~8 us through torch.tensor, which
    # made padding a served batch of 32 short texts a twentieth of its forward pass
    out = np.full((len(flat), width), value, dtype=torch.empty((), dtype=dtype).numpy().dtype)
    for i, r in enumerate(flat):
        out[i, : len(r)] = r
    out = torch.from_numpy(out)
    if nested:
        if len({len(row) for row in rows}) != 1:
            raise ValueError("multiple-choice examples in one batch must have the same number of options")
        return out.view(len(rows), len(rows[0]), width)  # (B, C, T)
    return out


def collate(features: Sequence, pad_id: int = 0, static_length: int = 0) -> dict[str, torch.Tensor]:
    """Pad a list of features (Feature or squad.QAFeature) into the heads' keyword arguments: input_ids,
    attention_mask, token_type_ids and, when labelled, labels (int64; float32 for regression and multi-hot
    rows; per-token labels padded with IGNORE_INDEX) or start_positions/end_positions.

    `static_length`: pad to that length, and for (B, T) inputs add `packed_positions`, the real tokens' places
    with their count rounded up (litebert.model.packed_positions): the padding-free encoder's shapes then come
    from a few, as a CUDA graph needs (`finetune --cuda-graphs`). Not for answer spans: QA's loss is a softmax over
    every position, padding included (it trains padded, litebert.heads), so more padding would change the loss."""
    if not features:
        raise ValueError("collate needs at least one feature")
    spans = all(getattr(f, "start_position", None) is not None for f in features)
    if spans:
        static_length = 0
    ids = [f.input_ids for f in features]
    ones = [[[1] * len(r) for r in row] if isinstance(row[0], list) else [1] * len(row) for row in ids]
    batch = {"input_ids": pad(ids, pad_id, width=static_length), "attention_mask": pad(ones, 0, width=static_length),
             "token_type_ids": pad([f.token_type_ids for f in features], 0, width=static_length)}
    if static_length and batch["attention_mask"].dim() == 2:
        batch["packed_positions"] = packed_positions(batch["attention_mask"])
    labels = [getattr(f, "label", None) for f in features]
    if all(x is not None for x in labels):
        if isinstance(labels[0], list) and labels[0] and isinstance(labels[0][0], float):
            batch["labels"] = torch.tensor(labels, dtype=torch.float32)  # (B, num_labels) multi-hot
        elif isinstance(labels[0], list):
            batch["labels"] = pad(labels, IGNORE_INDEX, width=static_length)
        else:
            dtype = torch.float32 if isinstance(labels[0], float) else torch.long
            batch["labels"] = torch.tensor(labels, dtype=dtype)
    elif any(x is not None for x in labels):
        raise ValueError("a batch mixes labelled and unlabelled features")
    if spans:
        batch["start_positions"] = torch.tensor([f.start_position for f in features], dtype=torch.long)
        batch["end_positions"] = torch.tensor([f.end_position for f in features], dtype=torch.long)
    return batch


def covering(span: tuple[int, int], text: str) -> tuple[int, int]:
    """A token's characters as fast tokenizers report them: the empty span of a bare "▁" piece (litebert's
    tokenizer gives it the start of the next word) covers that word's first character."""
    s, e = span
    return (s, e) if e > s else (s, min(s + 1, len(text)))


@dataclass
class TextTagExample(TagExample):
    """A sentence to tag as it was typed: its words are its whitespace-separated spans."""

    text: str = ""


@dataclass
class TextTagFeature(Feature):
    offsets: list = field(default_factory=list, repr=False)  # token -> (start, end) in the text; None: special


def featurize_text_tags(examples: Sequence[TextTagExample], tok, max_length: int) -> list[TextTagFeature]:
    """[CLS] text [SEP] with each token's characters in the text and its word (the same ids as featurize_tags
    gives the words joined by spaces: ALBERT's normalisation collapses whitespace)."""
    specials = set(SPECIALS.values())
    features = []
    for i, ex in enumerate(examples):
        ids, spans = tok.encode_with_offsets(ex.text)
        words = [m.span() for m in re.finditer(r"\S+", ex.text)]
        starts, ends = [s for s, _ in words], [e for _, e in words]
        offsets, word_ids = [], []
        for s, e in spans[: max_length - 2]:
            word_ids.append(word_of_token(s, e, starts, ends))  # as featurize_tags
            offsets.append(None if ex.text[s:e] in specials else covering((s, e), ex.text))  # "[MASK]" typed
        ids = [tok.cls_id, *ids[: max_length - 2], tok.sep_id]
        features.append(TextTagFeature(ids, [0] * len(ids), None, i, [None, *word_ids, None],
                                       [None, *offsets, None]))
    return features
