"""SentencePiece tokenizer with ALBERT's conventions, id-for-id equal to HF's sentencepiece `AlbertTokenizer`.

ALBERT tokenizes in three steps (the Tokenizer runs them; the parts it shares live in litebert/text/):
1. `preprocess_text` (text.conventions): collapse whitespace, ``/'' -> ", strip accents (NFKD, drop combining
   marks), lowercase (character by character, as transformers does: a word-final capital sigma becomes "σ", not "ς").
2. SentencePiece unigram on the result (its own NFKC normalisation runs inside sentencepiece).
3. The digit-comma rule: a piece like "▁1990," is re-split into "▁1990" + "," so numbers are not glued to commas.
Special tokens written in the text ("[MASK]", "[SEP]", ...) are cut out first and map straight to their ids, as
HF's tokenizers do; the rest is encoded in one batched sentencepiece call per list of texts.

The vocabulary layout is ALBERT's: <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4. [CLS]/[SEP]/[MASK] are sentencepiece
*control* symbols (never produced from raw text by sentencepiece itself), exactly as the original spm_train flags.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import warnings

import numpy as np
import sentencepiece as spm

from litebert.errors import CheckpointError, ConfigError
from litebert.hub import hub_options, looks_like_hub_id
from litebert.text import encoding
from litebert.text.conventions import (
    SPECIALS,
    SPIECE_UNDERLINE,
    NormalizerOptions,
    is_word_start_piece,
    preprocess_text,
    preprocess_with_alignment,
    vanishes,
)
from litebert.text.encoding import BatchEncoding
from litebert.text.pretokenize import segmenter_for
from litebert.text.tokens import TokenNames
from litebert.text.transformers_files import (
    MODEL_MAX_LENGTH,
    SPIECE_FILE,
    albert_tokenizer_agrees,
    download_tokenizer,
    fast_tokenizer,
    read_tokenizer_config,
    save_tokenizer,
)

THREADED_ENCODE_MIN_TEXTS = 64  # below this many texts sentencepiece's thread pool costs more than it saves


class Tokenizer(TokenNames):
    """A trained spiece.model plus ALBERT's normalisation; see the module docstring for the algorithm."""

    def __init__(self, model_file: str, do_lower_case=True, keep_accents=False, remove_space=True, num_threads=-1,
                 model_max_length: int = MODEL_MAX_LENGTH, pre_tokenizer: dict | None = None):
        if not os.path.isfile(model_file):
            raise FileNotFoundError(f"no SentencePiece model at {model_file}")
        with open(model_file, "rb") as f:
            self.model_proto = f.read()
        self.sha256 = hashlib.sha256(self.model_proto).hexdigest()
        # Morphemes segmented before sentencepiece (litebert/text/pretokenize.py): the record names the segmenter, and
        # it is part of the tokenizer's identity (prepared shards check sha256), as the same pieces give other ids.
        self.pre_tokenizer, self._segment = pre_tokenizer, None
        if pre_tokenizer:

            self._segment = segmenter_for(pre_tokenizer, model_file)
            self.sha256 = hashlib.sha256(self.model_proto + repr(sorted(pre_tokenizer.items())).encode()).hexdigest()
        # sentencepiece loads nothing from empty bytes (a zero-size vocabulary that fails later with IndexError)
        # and says only "ParseFromArray" for a truncated file: name the file and the problem here instead.
        if not self.model_proto:
            raise CheckpointError(f"{model_file}: not a valid SentencePiece model (the file is empty)")
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        except RuntimeError as e:
            raise CheckpointError(f"{model_file}: not a valid SentencePiece model, corrupt or truncated "
                             f"({str(e).strip()})") from None
        self.options = NormalizerOptions(do_lower_case, keep_accents, remove_space)
        self.num_threads = num_threads  # sentencepiece batch threads; data workers set 1 to avoid oversubscription
        self.model_max_length = model_max_length  # the model's positions (transformers' name): what truncation=True cuts to
        self.name_or_path = os.path.dirname(model_file)  # from_pretrained: what it was given (a Hub id, a path)
        self.vocab_size = self.sp.get_piece_size()
        ids = {k: self.sp.piece_to_id(v) for k, v in SPECIALS.items()}
        self.pad_id, self.unk_id = ids["pad_token"], ids["unk_token"]
        self.cls_id, self.sep_id, self.mask_id = ids["cls_token"], ids["sep_token"], ids["mask_token"]
        self.pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        for name, piece in SPECIALS.items():
            if self.pieces[ids[name]] != piece and name != "unk_token":
                raise CheckpointError(f"{model_file}: the vocabulary has no {piece} piece (not an ALBERT-style model)")
        # Special tokens typed in the text are matched verbatim (case-sensitive), longest first.
        self._special_re = re.compile("(" + "|".join(re.escape(p) for p in sorted(SPECIALS.values(), key=len, reverse=True)) + ")")
        self.special_ids = {p: self.sp.piece_to_id(p) for p in SPECIALS.values()}
        # ids of pieces that the digit-comma rule re-splits ("9,", "▁1990,")
        self.comma_ids = {i for i, p in enumerate(self.pieces) if len(p) > 1 and p[-1] == "," and p[-2].isdigit()}
        special = np.array([self.sp.is_control(i) or self.sp.is_unknown(i) for i in range(self.vocab_size)])
        special[self.pad_id] = True
        self.special_table = special  # (V,) bool
        self.word_start_table = np.array([is_word_start_piece(p) for p in self.pieces]) | special  # (V,) bool

    @classmethod
    def from_pretrained(cls, path: str, *, local_files_only: bool = False, revision: str | None = None,
                        cache_dir: str | os.PathLike | None = None, token: str | bool | None = None) -> "Tokenizer":
        """Load a directory holding spiece.model (+ tokenizer_config.json), a .model file, or a Hub id (with
        transformers' local_files_only, revision, cache_dir and token; refused for a local path)."""
        path = str(path)
        options = hub_options(path, revision=revision, cache_dir=cache_dir, token=token)
        if os.path.isfile(path):
            model_file, config_dir = path, os.path.dirname(path)
        elif os.path.isdir(path):
            model_file, config_dir = os.path.join(path, SPIECE_FILE), path
            if not os.path.isfile(model_file):
                raise FileNotFoundError(f"{path} has no spiece.model (train one with `litebert tokenizer`)")
        elif looks_like_hub_id(path):
            model_file = download_tokenizer(path, local_files_only, **options)
            config_dir = os.path.dirname(model_file)
        else:
            raise FileNotFoundError(f"no such directory: {path}")
        options, model_max_length, pre_tokenizer = read_tokenizer_config(config_dir)
        tokenizer = cls(model_file, **options, model_max_length=model_max_length, pre_tokenizer=pre_tokenizer)
        tokenizer.name_or_path = path  # transformers' name: what it was loaded from, as given
        return tokenizer

    def save_pretrained(self, out_dir: str) -> None:
        """Write spiece.model and what transformers reads (text.transformers_files.save_tokenizer says which
        files, and why), so that `AutoTokenizer.from_pretrained(out_dir)` gives our ids."""
        save_tokenizer(self, out_dir)

    def hf_albert_agrees(self) -> bool:
        """Whether transformers' AlbertTokenizer, which rebuilds its normaliser from our flags, encodes as we do
        (text.transformers_files.albert_tokenizer_agrees)."""
        return albert_tokenizer_agrees(self)

    def to_hf_fast(self):
        """A `tokenizers.Tokenizer` that encodes like this one (text.transformers_files.fast_tokenizer)."""
        return fast_tokenizer(self)

    # -- encoding

    def _split_specials(self, text: str) -> list[str]:
        return [part for part in self._special_re.split(text) if part]

    def _encode_chunks(self, chunks: list[str]) -> list[list[int]]:
        # sentencepiece's list encoding starts a thread pool per call: ~0.12 ms, 25x the encoding of a short sentence.
        # It pays from 32-128 texts on 2 cores (bench/small_calls.py); a pipeline featurizes one text at a time.
        if len(chunks) < THREADED_ENCODE_MIN_TEXTS:
            return [self.sp.encode(chunk, out_type=int) for chunk in chunks]
        return self.sp.encode(chunks, out_type=int, num_threads=self.num_threads)

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        """Ids for many texts, no [CLS]/[SEP] added; special tokens typed in the text map to their ids."""
        return [encoding.part_ids(parts) for parts in self._encode_parts(texts)]

    def _encode_parts(self, texts: list[str]) -> list[list[tuple[bool, list[int]]]]:
        """Per text, its parts: (True, [id]) for a special token typed in it, (False, ids) for the text between
        them (all of it encoded in one sentencepiece call). word_ids() needs the cut: a <unk> is either."""
        chunks: list[str] = []
        layout: list[list[int | None]] = []  # per text: a special id, or None for "next chunk"
        for text in texts:
            row: list[int | None] = []
            for part in self._split_specials(text):
                if part in self.special_ids:
                    row.append(self.special_ids[part])
                else:
                    row.append(None)
                    chunks.append(self.preprocess(part))
            layout.append(row)
        encoded = iter(self._encode_chunks(chunks))
        return [[(False, self._comma_fix(next(encoded))) if item is None else (True, [item]) for item in row]
                for row in layout]

    def preprocess(self, text: str) -> str:
        """ALBERT's normalisation of raw text with this tokenizer's options (after the morpheme segmentation of
        a pre-tokenized tokenizer), as sentencepiece sees it."""
        return preprocess_text(self._segment.segment(text) if self._segment else text, **self._pp)

    @property
    def _pp(self) -> dict:
        o = self.options
        return {"lower": o.do_lower_case, "keep_accents": o.keep_accents, "remove_space": o.remove_space}

    def _comma_fix(self, ids: list[int]) -> list[int]:
        """The digit-comma rule of ALBERT's tokenizer: re-split "▁12," as "▁12" "," (and "12," as "12" ",")."""
        if not self.comma_ids.intersection(ids):
            return ids
        out = []
        for i in ids:
            if i in self.comma_ids:
                out.extend(self._split_comma_piece(self.pieces[i]))
            else:
                out.append(i)
        return out

    def _split_comma_piece(self, piece: str) -> list[int]:
        sub = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
        if piece[0] != SPIECE_UNDERLINE and sub and sub[0][0] == SPIECE_UNDERLINE:
            sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
        return [self.sp.piece_to_id(p) for p in sub] + [self.sp.piece_to_id(piece[-1])]

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """The pieces of a text (or a pair), with [CLS]/[SEP] when add_special_tokens, as transformers'."""
        if not add_special_tokens and pair is None:
            return [self.pieces[i] for i in self._encode_plain([text])[0]]
        return self.convert_ids_to_tokens(self.encode(text, pair, add_special_tokens=add_special_tokens))

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True,
               max_length: int | None = None, truncation: bool | str = "longest_first", *,
               text_pair: str | None = None, return_tensors: str | None = None):
        """Ids of `[CLS] text [SEP]` or `[CLS] text [SEP] pair [SEP]` (== HF AlbertTokenizer(text, pair).input_ids),
        cut to max_length (if given) by `truncation`: True/"longest_first", "only_first", "only_second", or
        False/"do_not_truncate". text_pair is transformers' name for pair; return_tensors "pt" or "np" gives
        the ids as one (1, T) row, as transformers' `encode(text, return_tensors="pt")`."""
        if text_pair is not None:
            if pair is not None:
                raise ConfigError("pass the second text once, as pair or as text_pair")
            pair = text_pair
        ids = self._encode_plain([text] if pair is None else [text, pair])
        strategy = encoding.truncation_strategy(truncation)
        ids = self._assemble(ids[0], ids[1] if pair is not None else None, add_special_tokens, max_length, strategy)[0]
        return ids if return_tensors is None else encoding.as_tensors({"input_ids": [ids]}, return_tensors)["input_ids"]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of many texts without special tokens, in one sentencepiece call (the data pipeline's entry point)."""
        return self._encode_plain(list(texts))

    def _assemble(self, a: list, b: list | None, add_special_tokens: bool, max_length: int | None, truncation: str,
                  special=lambda i: i) -> tuple[list, list[int]]:
        """Truncate (one of HF's strategies, by name) and add [CLS]/[SEP] (as `special(id)`: the items of `a` and
        `b` may be ids or tuples about each token); returns (items, token_type_ids)."""
        n_special = (2 if b is None else 3) if add_special_tokens else 0
        if max_length is not None and truncation != "do_not_truncate":
            if max_length < n_special:  # transformers returns such rows uncut
                raise ConfigError(f"max_length={max_length} leaves no room for the {n_special} special tokens")
            a, b = encoding.truncate_pair(a, b, max_length - n_special, truncation)
        if not add_special_tokens:
            ids = a + (b or [])
            return ids, [0] * len(a) + [1] * len(b or [])
        cls, sep = special(self.cls_id), special(self.sep_id)
        ids = [cls] + a + [sep]
        types = [0] * len(ids)
        if b is not None:
            ids += b + [sep]
            types += [1] * (len(b) + 1)
        return ids, types

    def __call__(self, text: str | list | None = None, text_pair: str | list | None = None,
                 max_length: int | None = None, padding: bool | str = False, truncation: bool | str | None = None,
                 return_tensors: str | None = None, add_special_tokens: bool = True, *,
                 is_split_into_words: bool = False, return_offsets_mapping: bool = False,
                 return_special_tokens_mask: bool = False, return_length: bool = False,
                 return_token_type_ids: bool | None = None, return_attention_mask: bool | None = None,
                 pad_to_multiple_of: int | None = None, return_overflowing_tokens: bool = False,
                 stride: int = 0) -> "BatchEncoding":
        """Encode a text, a pair or a batch, called as transformers' tokenizers are, with their results.

        `tok(texts, text_pair, truncation=True, padding="max_length", max_length=128, return_tensors="pt")` equals
        AlbertTokenizerFast with the same arguments, and so do is_split_into_words (lists of words; `word_ids()`)
        and the return_* flags. padding: True/"longest", "max_length", False/"do_not_pad" (pad_to_multiple_of rounds up). truncation:
        True/"longest_first", "only_first", "only_second", False/"do_not_truncate"; True with no max_length
        cuts to `model_max_length` (the model's positions).

        The defaults are transformers': lists (flat for one text), unpadded, so that `len(tok(text)["input_ids"])`
        counts tokens and `dataset.map(lambda b: tok(b["text"]), batched=True)` leaves padding to the collator.
        A batch the model takes as it is: `model(**tok(texts, padding=True, return_tensors="pt"))`.
        truncation=None (the default) cuts only when max_length is given, as transformers does without padding;
        with no max_length nothing is cut, and a row longer than model_max_length warns, as in transformers (the
        model would refuse it).
        return_overflowing_tokens: a text longer than max_length gives several rows, `stride` tokens
        overlapping, and overflow_to_sample_mapping names each row's input (a pair windows the side that
        truncation="only_first"/"only_second" names). Offsets (return_offsets_mapping) follow AlbertTokenizerFast, except that a quote written as `` or ''
        spans both characters (transformers: the second), and so does a letter with the accents normalisation
        strips after it (transformers: the letter alone; conventions.vanishes says why).
        """
        strategy, pad = encoding.truncation_strategy(truncation), encoding.padding_strategy(padding)
        encoding.check_return_tensors(return_tensors)
        if stride < 0 or (stride and not return_overflowing_tokens):  # transformers ignores it then, silently
            raise ConfigError(f"stride={stride} overlaps the windows of return_overflowing_tokens=True: pass both, "
                              "or a stride >= 0")
        if text is None:
            raise ConfigError("nothing to encode: pass text (a string, a list of strings, or words with "
                              "is_split_into_words=True)")
        texts, single = encoding.as_batch(text, is_split_into_words)
        pairs = None if text_pair is None else encoding.as_batch(text_pair, is_split_into_words)[0]
        if pairs is not None and len(pairs) != len(texts):
            raise ConfigError(f"got {len(texts)} texts but {len(pairs)} pairs")
        implicit = truncation is None and max_length is None  # transformers' default: no cut, a warning
        if implicit:
            strategy = "do_not_truncate"
        if max_length is None:
            max_length = self.model_max_length
        if pad != "do_not_pad" and strategy != "do_not_truncate" and pad_to_multiple_of and max_length % pad_to_multiple_of:
            raise ConfigError(f"truncation to {max_length} tokens and pad_to_multiple_of={pad_to_multiple_of} "
                              "disagree (rows longer than max_length get cut, then padded past it): make max_length "
                              "a multiple, as transformers asks")
        a = [self._encode_input(t, is_split_into_words, return_offsets_mapping) for t in texts]
        b = [self._encode_input(t, is_split_into_words, return_offsets_mapping) for t in pairs] if pairs else None
        rows, samples = self._rows(a, b, add_special_tokens, max_length, strategy,
                                   stride if return_overflowing_tokens else None)
        if implicit and any(len(ids) > self.model_max_length for ids, _ in rows):
            warnings.warn(f"a row has {max(len(ids) for ids, _ in rows)} tokens, more than model_max_length "
                          f"{self.model_max_length}: the model cannot take it (truncation=True cuts it)", stacklevel=2)
        width = None
        if pad != "do_not_pad":
            width = max((len(ids) for ids, _ in rows), default=0) if pad == "longest" else max_length
            width = encoding.round_up(width, pad_to_multiple_of)  # tensor cores' tile, as transformers pads
        out = {"input_ids": [], "token_type_ids": [], "attention_mask": []}
        extra: dict[str, list] = {}
        for ids, types in rows:
            fill = max(0, width - len(ids)) if width is not None else 0
            token_ids = [t[0] for t in ids]
            out["input_ids"].append(token_ids + [self.pad_id] * fill)
            out["token_type_ids"].append(types + [0] * fill)  # HF pads token types with 0 too
            out["attention_mask"].append([1] * len(ids) + [0] * fill)
            if return_special_tokens_mask:
                extra.setdefault("special_tokens_mask", []).append([int(t[1] is None) for t in ids] + [1] * fill)
            if return_offsets_mapping:
                extra.setdefault("offset_mapping", []).append([t[2] for t in ids] + [(0, 0)] * fill)
            if return_length:
                extra.setdefault("length", []).append(len(ids) + fill)
        out.update(extra)
        for key, keep in (("token_type_ids", return_token_type_ids), ("attention_mask", return_attention_mask)):
            if keep is False:
                del out[key]
        if return_overflowing_tokens:  # one row per window, and the text it came from
            out["overflow_to_sample_mapping"], single = samples, False
        alignment = encoding.Alignment(rows, width, self.pieces, self.pad_id, return_offsets_mapping)
        if return_tensors is None:
            if single:
                out = {k: (v[0] if k != "length" else v) for k, v in out.items()}
            return BatchEncoding(out, alignment)
        if len({len(r) for r in out["input_ids"]}) > 1:
            raise ConfigError("rows have different lengths and cannot make one tensor: use padding=True, "
                              "or return_tensors=None for lists")
        arrays = encoding.as_tensors(out, return_tensors)
        return BatchEncoding({k: v.reshape(len(rows), -1, 2) if k == "offset_mapping" else
                              v if k in ("length", "overflow_to_sample_mapping") else v.reshape(len(rows), -1)
                              for k, v in arrays.items()}, alignment)

    def _rows(self, a: list[list[tuple]], b: list[list[tuple]] | None, add_special_tokens: bool, max_length: int,
              strategy: str, stride: int | None) -> tuple[list[tuple[list, list[int]]], list[int]]:
        """(tokens, token types) of each row, and the input each came from: one row per input, or with
        return_overflowing_tokens (stride not None) one per window (encoding.windows). Each token is an (id,
        word index, offsets) triple, carried through truncation and [CLS]/[SEP]."""
        rows, samples = [], []
        n_special = (2 if b is None else 3) if add_special_tokens else 0
        for i, pieces_a in enumerate(a):
            pieces_b = b[i] if b is not None else None
            parts = [(pieces_a, pieces_b)]
            if stride is not None and strategy != "do_not_truncate":
                parts = encoding.windows(pieces_a, pieces_b, max_length - n_special, strategy, stride)
            for part_a, part_b in parts:
                rows.append(self._assemble(part_a, part_b, add_special_tokens, max_length, strategy,
                                           encoding.added_special))
                samples.append(i)
        return rows, samples

    def _encode_input(self, text: str | list[str], split_into_words: bool, offsets: bool) -> list[tuple]:
        """(id, word index, (start, end)) per token of one input: a text (word index 0) or a list of words, each
        encoded on its own, as transformers encodes pre-split words (offsets then count within each word)."""
        words = text if split_into_words else [text]
        out: list[tuple] = []
        for w, word in enumerate(words):
            if not isinstance(word, str):
                raise ConfigError(f"expected text (str), got {type(word).__name__}"
                                  + (" (lists of words need is_split_into_words=True)" if not split_into_words else ""))
            parts, spans = self._parts_with_offsets(word) if offsets else (self._encode_parts([word])[0], None)
            ids = encoding.part_ids(parts)
            if spans is not None:  # a bare "▁" has an empty span here; transformers gives it the next character
                spans = [(s, s + 1) if s == e and self.pieces[i] == SPIECE_UNDERLINE else (s, e)
                         for i, (s, e) in zip(ids, spans)]
            words = [w] * len(ids) if split_into_words else encoding.word_numbers(parts, self.pieces)
            out += [(i, words[j], spans[j] if spans else None) for j, i in enumerate(ids)]
        return out

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids (no [CLS]/[SEP]) and (start, end) character spans into the original `text`, for span tasks.

        Spans exclude surrounding whitespace; a bare "▁" piece gets an empty span at the next word.
        """
        parts, spans = self._parts_with_offsets(text)
        return encoding.part_ids(parts), spans

    def _parts_with_offsets(self, text: str) -> tuple[list[tuple[bool, list[int]]], list[tuple[int, int]]]:
        """`_encode_parts` of one text, with the spans of `encode_with_offsets`."""
        parts: list[tuple[bool, list[int]]] = []
        spans: list[tuple[int, int]] = []
        pos = 0
        for part in self._split_specials(text):
            if part in self.special_ids:
                parts.append((True, [self.special_ids[part]]))
                spans.append((pos, pos + len(part)))
            else:
                parts.append((False, []))
                self._offsets_of_chunk(part, pos, parts[-1][1], spans)
            pos += len(part)
        return parts, spans

    def _offsets_of_chunk(self, text: str, base: int, ids: list, spans: list) -> None:
        if self._segment is not None:  # spans into the segmented text, mapped back through its inserted spaces
            segmented, source = self._segment.segment_aligned(text)
            source.append(len(text))
            inner: list[tuple[int, int]] = []
            self._offsets_of_plain_chunk(segmented, 0, ids, inner)
            spans.extend((base + source[s], base + (source[e - 1] + 1 if e > s else source[s])) for s, e in inner)
            return
        self._offsets_of_plain_chunk(text, base, ids, spans)

    def _offsets_of_plain_chunk(self, text: str, base: int, ids: list, spans: list) -> None:
        norm, src = preprocess_with_alignment(text, **self._pp)
        # sentencepiece reports byte offsets into `norm`; map bytes -> chars -> original chars
        byte_to_char = np.repeat(np.arange(len(norm) + 1), [len(c.encode()) for c in norm] + [1])
        src_end = src + [len(text)]
        gone = functools.cache(functools.partial(vanishes, sp_normalize=self.sp.normalize, **self._pp))

        def to_original(cb: int, ce: int) -> tuple[int, int]:
            s = src_end[cb]
            if cb < len(norm) and norm[cb] == '"' and text.startswith(("``", "''"), s - 1):
                s -= 1  # a "``" or "''" pair starts one char earlier
            if ce <= cb:
                return base + s, base + s
            e = src[ce - 1] + 1
            if ce == len(norm) or src[ce] != src[ce - 1]:  # what normalises to nothing after that char is its own
                while e < len(text) and gone(text[e]):
                    e += 1
            # past the spaces; a bare "▁" (its space run maps to the run's first char) is empty at the next word
            while s < len(text) and (text[s].isspace() or gone(text[s])):
                s += 1
            while e > s and text[e - 1].isspace():
                e -= 1
            return base + s, base + max(s, e)

        for p in self.sp.encode(norm, return_type="proto").pieces:
            cb, ce = int(byte_to_char[p.begin]), int(byte_to_char[p.end])
            if p.id not in self.comma_ids:
                ids.append(p.id)
                spans.append(to_original(cb, ce))
                continue
            # digit-comma rule: sub-pieces share the piece's span left to right, the comma gets the last char
            sub = self._split_comma_piece(self.pieces[p.id])
            while cb < ce - 1 and norm[cb].isspace():
                cb += 1
            for sid in sub[:-1]:
                n = len(self.pieces[sid].lstrip(SPIECE_UNDERLINE))
                ids.append(sid)
                spans.append(to_original(cb, min(cb + n, ce - 1)))
                cb = min(cb + n, ce - 1)
            ids.append(sub[-1])
            spans.append(to_original(ce - 1, ce))

    def word_start_mask(self, ids) -> np.ndarray:
        """(T,) bool: True where a piece starts a word (or is special), for whole-word masking."""
        return self.word_start_table[np.asarray(ids)]

    def special_mask(self, ids) -> np.ndarray:
        """(T,) bool: True at <pad>/<unk>/[CLS]/[SEP]/[MASK] (control symbols), never masked for MLM."""
        return self.special_table[np.asarray(ids)]

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, {self.options}, sha256={self.sha256[:12]})"
