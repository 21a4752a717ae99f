"""What a tokenizer call takes and returns in transformers' shapes: the truncation and padding strategies by
their names, the pair truncation rule of the `tokenizers` library, and BatchEncoding.
"""

from __future__ import annotations

import numpy as np

from litebert.errors import ConfigError
from litebert.text.conventions import SPIECE_UNDERLINE

TRUNCATION = ("longest_first", "only_first", "only_second", "do_not_truncate")


PADDING = ("longest", "max_length", "do_not_pad")


def truncation_strategy(truncation: bool | str | None) -> str:
    """HF's `truncation` argument as one of TRUNCATION; None (litebert's default) is longest_first."""
    if truncation is None or truncation is True:
        return "longest_first"
    if truncation is False:
        return "do_not_truncate"
    if truncation not in TRUNCATION:
        raise ConfigError(f"truncation must be True, False or one of {', '.join(TRUNCATION)}; got {truncation!r}")
    return truncation


def padding_strategy(padding: bool | str) -> str:
    """HF's `padding` argument as one of PADDING."""
    if isinstance(padding, bool):
        return "longest" if padding else "do_not_pad"
    if padding not in PADDING:
        raise ConfigError(f"padding must be True, False or one of {', '.join(PADDING)}; got {padding!r}")
    return padding


def check_return_tensors(return_tensors: str | None) -> None:
    if return_tensors not in ("pt", "np", None):
        raise ConfigError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")


def as_tensors(rows: dict[str, list], return_tensors: str) -> dict:
    """Equal-length rows of ids as int64 arrays ("np") or tensors ("pt"), as transformers returns them."""
    check_return_tensors(return_tensors)
    if return_tensors == "np":
        return {k: np.array(v, dtype=np.int64) for k, v in rows.items()}
    import torch

    return {k: torch.tensor(v, dtype=torch.int64) for k, v in rows.items()}


def round_up(width: int, multiple: int | None) -> int:
    """transformers' pad_to_multiple_of: the padded width rounded up to a multiple (None: as it is)."""
    if multiple is None:
        return width
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ConfigError(f"pad_to_multiple_of must be a positive integer, got {multiple!r}")
    return -(-width // multiple) * multiple


def id_list(ids) -> list[int]:
    """Token ids as a list of ints, from a list, a 1-D tensor or array, or one id."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]


def part_ids(parts: list[tuple[bool, list[int]]]) -> list[int]:
    """The ids of one text from its parts (`word_numbers`' input), in order."""
    return [i for _, ids in parts for i in ids]


def word_numbers(parts: list[tuple[bool, list[int]]], pieces: list[str]) -> list[int]:
    """The word of each token of one text, as transformers' word_ids(), from its parts as the tokenizer cut it:
    (typed, ids) for a special token written in the text (its own word) or a stretch of text between them. In a
    stretch a word starts at its first token and at each "▁" piece; a <unk> that sentencepiece made of a character
    outside the vocabulary stays in its word (only a typed "<unk>" is a word), or every word after it would shift."""
    numbers, n = [], -1
    for typed, ids in parts:
        for j, i in enumerate(ids):
            n += typed or j == 0 or pieces[i].startswith(SPIECE_UNDERLINE)
            numbers.append(n)
    return numbers


def added_special(token_id: int) -> tuple:
    """An added [CLS]/[SEP] among the (id, word, offsets) items of a call: no word, an empty span."""
    return token_id, None, (0, 0)


def as_batch(text, split_into_words: bool) -> tuple[list, bool]:
    """(a list of inputs, whether one was given): an input is a string, or a list of words with is_split_into_words."""
    single = isinstance(text, str) or (split_into_words and isinstance(text, (list, tuple))
                                       and all(isinstance(w, str) for w in text))
    if isinstance(text, str) and split_into_words:
        raise ConfigError("is_split_into_words=True takes a list of words (or a list of such lists), got a string")
    return ([text] if single else list(text)), single


class BatchEncoding(dict):
    """What a tokenizer call returns, as transformers' BatchEncoding: a dict (input_ids, token_type_ids,
    attention_mask, and what was asked for) whose keys are also attributes, with `.to(device)` and `word_ids(i)`."""

    def __init__(self, data: dict, word_ids: list[list[int | None]] | None = None):
        super().__init__(data)
        self._word_ids = word_ids or []

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device) -> "BatchEncoding":
        return BatchEncoding({k: v.to(device) if hasattr(v, "to") else v for k, v in self.items()}, self._word_ids)

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word (a whitespace-separated word, or the index into is_split_into_words' list) of each token;
        None for [CLS], [SEP] and padding. With a pair, each text counts its words from 0, as in transformers."""
        return self._word_ids[batch_index]


def windows(a: list, b: list | None, budget: int, strategy: str, stride: int) -> list[tuple[list, list | None]]:
    """return_overflowing_tokens: the side being cut split into windows of the budget left by the other side,
    each starting `stride` tokens before the previous one's end, as the `tokenizers` library splits them (the
    side kept whole repeats in every window)."""
    cut_b = b is not None and strategy == "only_second"
    if b is not None and strategy not in ("only_first", "only_second"):
        raise ConfigError(f"return_overflowing_tokens with a pair needs truncation=\"only_first\" or "
                          f"\"only_second\" (the side to window), got {strategy!r}")
    seq, kept = (b, a) if cut_b else (a, b)
    size = budget - len(kept or [])
    if size <= 0 or stride >= size:
        raise ConfigError(f"stride={stride} leaves no new tokens in windows of {max(size, 0)} (max_length less "
                          "the special tokens and the other text): lower stride or raise max_length")
    parts, start = [], 0
    while True:
        parts.append(seq[start:start + size])
        if start + size >= len(seq):
            break
        start += size - stride
    return [(kept, part) if cut_b else (part, kept) for part in parts]


def truncate_pair(a: list[int], b: list[int] | None, budget: int, strategy: str) -> tuple[list[int], list[int] | None]:
    """Cut tokens from the end until len(a) + len(b) <= budget, as transformers' tokenizers do.

    longest_first cuts the longer side down to the budget left by the shorter; if both must be cut, each keeps
    half and the longer (`b` on a tie) the odd token. That is the rule of the `tokenizers` library, behind
    transformers 5's AlbertTokenizer and every fast tokenizer of transformers 4. ALBERT's own `_truncate_seq_pair`
    (and transformers 4's slow tokenizer) removed one token at a time instead, which gives the odd token to `a`.
    only_first/only_second cut one side and raise if that cannot reach the budget.
    """
    total = len(a) + len(b or [])
    if total <= budget:
        return a, b
    if budget <= 0:  # as in tokenizers: whatever the strategy, no room leaves both sides empty
        return a[:0], None if b is None else b[:0]
    if strategy == "longest_first" and b is None:
        return a[:budget], b
    if strategy == "longest_first":
        short, long = sorted((len(a), len(b)))
        long = short if short > budget else max(short, budget - short)
        if short + long > budget:
            short, long = budget // 2, budget // 2 + budget % 2
        la, lb = (short, long) if len(a) <= len(b) else (long, short)
        return a[:la], b[:lb]
    if strategy == "only_second" and b is None:
        raise ConfigError("truncation='only_second' needs a pair of texts")
    side, excess = (a if strategy == "only_first" else b), total - budget
    if excess >= len(side):
        which = "first" if strategy == "only_first" else "second"
        raise ConfigError(f"cannot truncate the {which} sequence ({len(side)} tokens) by {excess}; use longest_first")
    side = side[: len(side) - excess]
    return (side, b) if strategy == "only_first" else (a, side)
