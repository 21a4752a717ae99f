"""What a tokenizer call takes and returns in transformers' shapes: the truncation and padding strategies by
their names, the pair truncation rule of the `tokenizers` library, and BatchEncoding.
"""

from __future__ import annotations

from collections import namedtuple

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
    if not isinstance(text, (str, list, tuple)):  # a datasets batch is a dict: list() of it gives its keys
        raise ConfigError(f"expected a text, a list of texts or a list of words, got a {type(text).__name__}"
                          + (" (a datasets batch: pass its column, tok(batch['text']))" if isinstance(text, dict) else ""))
    single = isinstance(text, str) or (split_into_words and isinstance(text, (list, tuple))
                                       and all(isinstance(w, str) for w in text))
    if isinstance(text, str) and split_into_words:
        raise ConfigError("is_split_into_words=True takes a list of words (or a list of such lists), got a string")
    return ([text] if single else list(text)), single


TokenSpan = namedtuple("TokenSpan", "start end")  # transformers' names: tokens [start, end) of a word
CharSpan = namedtuple("CharSpan", "start end")  # characters [start, end) of a token or word in its text


class Alignment:
    """Where each token of a call's rows came from, kept as the call assembled them: per row, its (id, word,
    span) items and token types, then `width - len(items)` pads. BatchEncoding reads word_ids, sequence_ids,
    tokens and the maps between characters, words and tokens from it, only when asked."""

    def __init__(self, rows: list[tuple[list[tuple], list[int]]], width: int | None, pieces: list[str], pad_id: int,
                 spans: bool):
        self.rows, self.width, self.pieces, self.pad_id, self.has_spans = rows, width, pieces, pad_id, spans

    def __getstate__(self) -> dict:
        """The pieces of the ids the rows hold, not the vocabulary (a 30k one would ride along with every pickled
        encoding: DataLoader workers, process pools)."""
        used = {t[0] for items, _ in self.rows for t in items} | {self.pad_id}
        return {**self.__dict__, "pieces": {i: self.pieces[i] for i in used}}

    def _pad_count(self, i: int) -> int:
        return max(0, (self.width or 0) - len(self.rows[i][0]))

    def words(self, i: int) -> list[int | None]:
        return [t[1] for t in self.rows[i][0]] + [None] * self._pad_count(i)

    def sequences(self, i: int) -> list[int | None]:
        """0 or 1 for a token of the first or second text; None for an added [CLS]/[SEP] (no word) and padding."""
        items, types = self.rows[i]
        return [None if t[1] is None else kind for t, kind in zip(items, types)] + [None] * self._pad_count(i)

    def tokens(self, i: int) -> list[str]:
        return [self.pieces[t[0]] for t in self.rows[i][0]] + [self.pieces[self.pad_id]] * self._pad_count(i)

    def span(self, i: int, j: int, asked: str) -> tuple[int, int] | None:
        """Token j's characters in its text; None for an added [CLS]/[SEP] or padding."""
        if not self.has_spans:  # sentencepiece's offsets cost ~6x the encoding; transformers' Rust makes them always
            raise ConfigError(f"{asked}() needs character offsets: encode with return_offsets_mapping=True")
        items = self.rows[i][0]
        j = j + len(items) + self._pad_count(i) if j < 0 else j
        return items[j][2] if j < len(items) and items[j][1] is not None else None


class BatchEncoding(dict):
    """What a tokenizer call returns, as transformers' BatchEncoding: a dict (input_ids, token_type_ids,
    attention_mask, and what was asked for) whose keys are also attributes, with `.to(device)` and the alignment
    of a fast tokenizer's output: word_ids, sequence_ids, tokens, and the maps between characters, words and
    tokens (token_to_word, word_to_tokens, char_to_token, ...), called as transformers' are."""

    def __init__(self, data: dict, alignment: Alignment | None = None):
        super().__init__(data)
        self._alignment = alignment

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device) -> "BatchEncoding":
        return BatchEncoding({k: v.to(device) if hasattr(v, "to") else v for k, v in self.items()}, self._alignment)

    def _aligned(self, asked: str) -> Alignment:
        if self._alignment is None:
            raise ConfigError(f"{asked}() reads how a tokenizer call cut its texts; this BatchEncoding was made "
                              "by pad or by hand, which keep no such record")
        return self._alignment

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word (a whitespace-separated word, or the index into is_split_into_words' list) of each token;
        None for [CLS], [SEP] and padding. With a pair, each text counts its words from 0, as in transformers."""
        return self._aligned("word_ids").words(batch_index)

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """0 or 1: which text of the pair each token came from; None for [CLS], [SEP] and padding."""
        return self._aligned("sequence_ids").sequences(batch_index)

    def tokens(self, batch_index: int = 0) -> list[str]:
        return self._aligned("tokens").tokens(batch_index)

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        i, j = _indices(batch_or_token_index, token_index)
        return self.sequence_ids(i)[j]

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        i, j = _indices(batch_or_token_index, token_index)
        return self.word_ids(i)[j]

    def _sequence(self, i: int, sequence_index: int) -> int:
        """The sequence a map reads: a row of one text ignores sequence_index, as the tokenizers library does."""
        return sequence_index if 1 in self.sequence_ids(i) else 0

    def word_to_tokens(self, batch_or_word_index: int, word_index: int | None = None,
                       sequence_index: int = 0) -> TokenSpan | None:
        i, w = _indices(batch_or_word_index, word_index)
        sequence_index = self._sequence(i, sequence_index)
        hits = [j for j, (word, seq) in enumerate(zip(self.word_ids(i), self.sequence_ids(i)))
                if word == w and seq == sequence_index]
        return TokenSpan(hits[0], hits[-1] + 1) if hits else None

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None) -> CharSpan | None:
        i, j = _indices(batch_or_token_index, token_index)
        span = self._aligned("token_to_chars").span(i, j, "token_to_chars")
        return None if span is None else CharSpan(*span)

    def char_to_token(self, batch_or_char_index: int, char_index: int | None = None,
                      sequence_index: int = 0) -> int | None:
        """The token covering character `char_index` of the first (sequence_index 0) or second text; None for a
        character no token covers (a space)."""
        i, c = _indices(batch_or_char_index, char_index)
        alignment, sequence_index = self._aligned("char_to_token"), self._sequence(i, sequence_index)
        for j, seq in enumerate(self.sequence_ids(i)):
            if seq == sequence_index and (span := alignment.span(i, j, "char_to_token")) and span[0] <= c < span[1]:
                return j
        return None

    def word_to_chars(self, batch_or_word_index: int, word_index: int | None = None,
                      sequence_index: int = 0) -> CharSpan | None:
        i, w = _indices(batch_or_word_index, word_index)
        tokens = self.word_to_tokens(i, w, sequence_index)
        if tokens is None:
            return None
        first, last = (self._aligned("word_to_chars").span(i, j, "word_to_chars") for j in (tokens.start, tokens.end - 1))
        return CharSpan(first[0], last[1])

    def char_to_word(self, batch_or_char_index: int, char_index: int | None = None,
                     sequence_index: int = 0) -> int | None:
        i, c = _indices(batch_or_char_index, char_index)
        j = self.char_to_token(i, c, sequence_index)
        return None if j is None else self.word_ids(i)[j]


def _indices(batch_or_index: int, index: int | None) -> tuple[int, int]:
    """transformers' two call forms: (batch_index, index), or (index) alone for the first row."""
    return (batch_or_index, index) if index is not None else (0, batch_or_index)


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
