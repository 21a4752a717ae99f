"""The half of transformers' tokenizer interface that reads the vocabulary alone: ids <-> pieces, decoding, the
special tokens by transformers' names. Tokenizer (litebert/tokenizer.py) takes it as a base class, kept apart so
that the encoding algorithm reads on its own there.

A subclass provides `pieces` (id -> piece), `sp` (the SentencePieceProcessor), `special_table` ((V,) bool) and
the ids pad_id, unk_id, cls_id, sep_id, mask_id.
"""

from __future__ import annotations

import numpy as np

from litebert.errors import ConfigError
from litebert.text import encoding
from litebert.text.conventions import SPECIALS, SPIECE_UNDERLINE

# What `pad` fills each padded row's end with (transformers' values: the pad id, token type 0, no attention, special)
PAD_VALUES = {"input_ids": lambda tok: tok.pad_id, "token_type_ids": lambda tok: 0,
              "attention_mask": lambda tok: 0, "special_tokens_mask": lambda tok: 1}


def _as_tensor(value, return_tensors: str):
    """A passed-through feature (labels) as an array or tensor of its own dtype (float scores stay floats)."""
    if return_tensors == "np":
        return np.asarray(value)
    import torch

    return torch.as_tensor(value)  # a list of floats: float32, as transformers makes it


def _one_example(value, key: str):
    """A feature's ids as one row: a text encoded alone with return_tensors="pt" is a batch of one, (1, T), which
    collators would otherwise stack into a 3-d batch; read as its row, such datasets feed them too."""
    rows = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(rows, (list, tuple)) or not rows or not isinstance(rows[0], (list, tuple)):
        return value
    if len(rows) != 1:
        raise ConfigError(f"pad: a feature's {key} holds {len(rows)} rows; give one example per feature")
    return rows[0]


def clean_up_tokenization(text: str) -> str:
    """transformers' clean_up_tokenization_spaces=True: the spaces a word-level tokenizer put before
    punctuation and English contractions, taken out of decoded text."""
    for spaced, joined in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                           (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(spaced, joined)
    return text


class TokenNames:
    """ids, pieces and text, answered as transformers' AlbertTokenizer answers them."""

    clean_up_tokenization_spaces = False  # AlbertTokenizer's default in transformers 5
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    # transformers' padding_side / truncation_side: litebert pads and cuts on the right only, so setting "left"
    # is refused here rather than kept as an attribute nothing reads (a silent no-op).
    @property
    def padding_side(self) -> str:
        return "right"

    @padding_side.setter
    def padding_side(self, side: str) -> None:
        if side != "right":
            raise ConfigError(f"padding_side={side!r}: litebert pads on the right only (ALBERT's encoder reads "
                              "[CLS] at position 0)")

    @property
    def truncation_side(self) -> str:
        return "right"

    @truncation_side.setter
    def truncation_side(self, side: str) -> None:
        if side != "right":
            raise ConfigError(f"truncation_side={side!r}: litebert cuts on the right only; cut the text before "
                              "encoding to keep its end")

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None) -> str:
        """Text of ids (a list, a 1-D tensor or array, or one id), as transformers decodes: pieces joined, "▁" ->
        space, the first piece's leading space dropped; special tokens written as they are unless skipped;
        clean_up_tokenization_spaces (None: the tokenizer's attribute, False) as `clean_up_tokenization`."""
        tokens = self.convert_ids_to_tokens(encoding.id_list(ids), skip_special_tokens=skip_special_tokens)
        text = self.convert_tokens_to_string(tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def batch_decode(self, sequences, skip_special_tokens: bool = False,
                     clean_up_tokenization_spaces: bool | None = None) -> list[str]:
        """`decode` of each row of a batch (lists, or a 2-D tensor or array)."""
        return [self.decode(row, skip_special_tokens, clean_up_tokenization_spaces) for row in sequences]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens).replace(SPIECE_UNDERLINE, " ").removeprefix(
            " " if tokens and tokens[0][:1] == SPIECE_UNDERLINE else "")

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False) -> list[str] | str:
        """The pieces of ids (one id gives one piece), as transformers; skip_special_tokens drops <pad>, <unk>,
        [CLS], [SEP] and [MASK]."""
        if not isinstance(ids, (list, tuple)) and np.ndim(ids) == 0:
            return self.pieces[int(ids)]
        return [self.pieces[i] for i in encoding.id_list(ids) if not (skip_special_tokens and self.special_table[i])]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        """The ids of pieces (one piece gives one id); a piece outside the vocabulary is <unk>."""
        if isinstance(tokens, str):
            return self.sp.piece_to_id(tokens)
        return [self.sp.piece_to_id(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        return {piece: i for i, piece in enumerate(self.pieces)}

    # transformers' names for the special tokens and their ids ([CLS] and [SEP] are also ALBERT's bos and eos)
    pad_token, unk_token, cls_token, sep_token, mask_token = SPECIALS.values()
    bos_token, eos_token = SPECIALS["cls_token"], SPECIALS["sep_token"]
    pad_token_id = property(lambda self: self.pad_id)
    unk_token_id = property(lambda self: self.unk_id)
    cls_token_id = bos_token_id = property(lambda self: self.cls_id)
    sep_token_id = eos_token_id = property(lambda self: self.sep_id)
    mask_token_id = property(lambda self: self.mask_id)

    @property
    def all_special_tokens(self) -> list[str]:
        """In transformers' order: bos, eos, unk, pad, mask (ALBERT's bos and eos are [CLS] and [SEP])."""
        return [self.bos_token, self.eos_token, self.unk_token, self.pad_token, self.mask_token]

    @property
    def all_special_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    # offsets and word_ids() are here, which is what code asking transformers' is_fast wants to know
    is_fast = True

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """[CLS] a [SEP], or [CLS] a [SEP] b [SEP]: what a length budget leaves for text."""
        return 3 if pair else 2

    def get_special_tokens_mask(self, token_ids_0: list[int], token_ids_1: list[int] | None = None,
                                already_has_special_tokens: bool = False) -> list[int]:
        """1 for a special token, 0 for text, as transformers: over the ids as they are, or over the
        [CLS]/[SEP] that encoding them (and the pair) would add."""
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise ConfigError("get_special_tokens_mask: ids that already have their special tokens are one "
                                  "sequence; pass token_ids_1=None")
            special = set(self.all_special_ids)
            return [int(i in special) for i in encoding.id_list(token_ids_0)]
        mask = [1] + [0] * len(token_ids_0) + [1]
        return mask + [0] * len(token_ids_1) + [1] if token_ids_1 is not None else mask

    def pad(self, encoded_inputs, padding: bool | str = True, max_length: int | None = None,
            pad_to_multiple_of: int | None = None, return_attention_mask: bool | None = None,
            return_tensors: str | None = None) -> encoding.BatchEncoding:
        """transformers' `tokenizer.pad`, what its data collators call (DataCollatorWithPadding): features
        (a list of {input_ids, ...} or one dict of rows) padded on the right; input_ids with <pad>, token_type_ids
        and attention_mask (made when absent, unless return_attention_mask=False) with 0, special_tokens_mask with
        1; other keys (labels) passed through, made tensors with the rest when return_tensors asks."""
        if isinstance(encoded_inputs, (list, tuple)):
            if not encoded_inputs:
                raise ConfigError("pad: no features to pad")
            batch = {k: [_one_example(feature[k], k) if k in PAD_VALUES else feature[k] for feature in encoded_inputs]
                     for k in encoded_inputs[0]}
        else:
            batch = dict(encoded_inputs)
        if "input_ids" not in batch:
            raise ConfigError(f"pad: features need input_ids, got {sorted(batch)}")
        first = batch["input_ids"][0] if len(batch["input_ids"]) else None
        one = first is not None and not isinstance(first, (list, tuple)) and np.ndim(first) == 0  # an example's row
        rows = {k: [encoding.id_list(v)] if one else [encoding.id_list(r) for r in v]
                for k, v in batch.items() if k in PAD_VALUES}
        lengths = [len(r) for r in rows["input_ids"]]
        if "attention_mask" not in rows and return_attention_mask is not False:
            rows["attention_mask"] = [[1] * n for n in lengths]
        if return_attention_mask is False:
            rows.pop("attention_mask", None)
        strategy = encoding.padding_strategy(padding)
        width = None if strategy == "do_not_pad" else encoding.round_up(
            max(lengths, default=0) if strategy == "longest" else (max_length or self.model_max_length),
            pad_to_multiple_of)
        for key, value in rows.items():
            rows[key] = [r + [PAD_VALUES[key](self)] * (width - len(r)) if width and len(r) < width else r
                         for r in value]
        passed = {k: v for k, v in batch.items() if k not in PAD_VALUES}  # labels and the like, as they are
        if return_tensors is not None:
            rows = encoding.as_tensors(rows, return_tensors)  # int64, as transformers makes ids
            passed = {k: _as_tensor(v, return_tensors) if np.ndim(v) >= 1 else v for k, v in passed.items()}
        return encoding.BatchEncoding({**passed, **{k: v[0] if one else v for k, v in rows.items()}})

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """transformers' roles -> tokens (what `tokenizer.special_tokens_map` prints there)."""
        return {"bos_token": self.bos_token, "eos_token": self.eos_token, "unk_token": self.unk_token,
                "sep_token": self.sep_token, "pad_token": self.pad_token, "cls_token": self.cls_token,
                "mask_token": self.mask_token}

