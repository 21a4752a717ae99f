"""SentencePiece tokenizer with ALBERT's conventions, id-for-id equal to HF's sentencepiece `AlbertTokenizer`.

ALBERT tokenizes in three steps, and all three live here:
1. `preprocess_text`: collapse whitespace, ``/'' -> ", strip accents (NFKD, drop combining marks), lowercase.
2. SentencePiece unigram on the result (its own NFKC normalisation runs inside sentencepiece).
3. The digit-comma rule: a piece like "▁1990," is re-split into "▁1990" + "," so numbers are not glued to commas.
Special tokens written in the text ("[MASK]", "[SEP]", ...) are cut out first and map straight to their ids, as
HF's tokenizers do; the rest is encoded in one batched sentencepiece call per list of texts.

The vocabulary layout is ALBERT's: <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4. [CLS]/[SEP]/[MASK] are sentencepiece
*control* symbols (never produced from raw text by sentencepiece itself), exactly as the original spm_train flags.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass

import numpy as np
import sentencepiece as spm

from litebert.hub import fetch_from_hub, looks_like_hub_id

SPIECE_UNDERLINE = "▁"
SPECIALS = {"pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}
TRUNCATION = ("longest_first", "only_first", "only_second", "do_not_truncate")

# ----------------------------------------------------------------------------- normalisation


def preprocess_text(text: str, lower: bool = True, keep_accents: bool = False, remove_space: bool = True) -> str:
    """ALBERT's `preprocess_text` (tokenization.py of google-research/albert; HF's slow AlbertTokenizer)."""
    out = " ".join(text.strip().split()) if remove_space else text
    out = out.replace("``", '"').replace("''", '"')
    if not keep_accents and not out.isascii():  # ASCII has nothing to decompose: the fast path for English
        out = unicodedata.normalize("NFKD", out)
        out = "".join(c for c in out if not unicodedata.combining(c))
    return out.lower() if lower else out


def preprocess_with_alignment(text: str, lower=True, keep_accents=False, remove_space=True) -> tuple[str, list[int]]:
    """`preprocess_text` done character by character, also returning, for each output char, its source char index.

    Only used for offsets (span tasks). The string equals `preprocess_text(text)` except where a rule looks at
    context (Greek final sigma under str.lower); there the whole-string result wins, since it has the same length.
    """
    chars: list[str] = []
    src: list[int] = []
    n, i = len(text), 0
    if remove_space:  # strip() + split() + " ".join(): whitespace runs become one space mapped to the run's first char
        start, end = 0, n
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        i, n = start, end
    while i < n:
        c = text[i]
        if remove_space and c.isspace():
            j = i
            while j < n and text[j].isspace():
                j += 1
            chars.append(" ")
            src.append(i)
            i = j
            continue
        if text.startswith(("``", "''"), i):
            chars.append('"')
            src.append(i + 1)  # map to the pair's second char, so a span ending here covers both
            i += 2
            continue
        piece = c
        if not keep_accents:
            piece = "".join(d for d in unicodedata.normalize("NFKD", c) if not unicodedata.combining(d))
        if lower:
            piece = piece.lower()
        chars.extend(piece)
        src.extend([i] * len(piece))
        i += 1
    out = "".join(chars)
    exact = preprocess_text(text, lower, keep_accents, remove_space)
    if exact != out and len(exact) == len(out):
        out = exact
    return out, src


def _is_word_start_piece(piece: str) -> bool:
    """Whether a piece begins a new word for whole-word masking (the original `_is_start_piece_sp`).

    A piece continues the previous word only if it has no "▁" and is made of ASCII letters (plus punctuation);
    non-Latin scripts (Korean, Chinese, ...), digits and lone punctuation always start their own unit.
    """
    punct = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    if piece.startswith((SPIECE_UNDERLINE, "<")) or piece in punct or piece in ("€", "£"):
        return True
    return not all(ch.lower() in "abcdefghijklmnopqrstuvwxyz" or ch in punct for ch in piece)


# ----------------------------------------------------------------------------- tokenizer


@dataclass
class NormalizerOptions:
    """How raw text is normalised before sentencepiece; saved in tokenizer_config.json beside spiece.model."""

    do_lower_case: bool = True
    keep_accents: bool = False
    remove_space: bool = True


class Tokenizer:
    """A trained spiece.model plus ALBERT's normalisation; see the module docstring for the algorithm."""

    def __init__(self, model_file: str, do_lower_case=True, keep_accents=False, remove_space=True, num_threads=-1):
        if not os.path.isfile(model_file):
            raise FileNotFoundError(f"no SentencePiece model at {model_file}")
        with open(model_file, "rb") as f:
            self.model_proto = f.read()
        self.sha256 = hashlib.sha256(self.model_proto).hexdigest()
        # sentencepiece loads nothing from empty bytes (a zero-size vocabulary that fails later with IndexError)
        # and says only "ParseFromArray" for a truncated file: name the file and the problem here instead.
        if not self.model_proto:
            raise ValueError(f"{model_file}: not a valid SentencePiece model (the file is empty)")
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=self.model_proto)
        except RuntimeError as e:
            raise ValueError(f"{model_file}: not a valid SentencePiece model, corrupt or truncated "
                             f"({str(e).strip()})") from None
        self.options = NormalizerOptions(do_lower_case, keep_accents, remove_space)
        self.num_threads = num_threads  # sentencepiece batch threads; data workers set 1 to avoid oversubscription
        self.vocab_size = self.sp.get_piece_size()
        ids = {k: self.sp.piece_to_id(v) for k, v in SPECIALS.items()}
        self.pad_id, self.unk_id = ids["pad_token"], ids["unk_token"]
        self.cls_id, self.sep_id, self.mask_id = ids["cls_token"], ids["sep_token"], ids["mask_token"]
        self.pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        for name, piece in SPECIALS.items():
            if self.pieces[ids[name]] != piece and name != "unk_token":
                raise ValueError(f"{model_file}: the vocabulary has no {piece} piece (not an ALBERT-style model)")
        # Special tokens typed in the text are matched verbatim (case-sensitive), longest first.
        self._special_re = re.compile("(" + "|".join(re.escape(p) for p in sorted(SPECIALS.values(), key=len, reverse=True)) + ")")
        self._special_ids = {p: self.sp.piece_to_id(p) for p in SPECIALS.values()}
        # ids of pieces that the digit-comma rule re-splits ("9,", "▁1990,")
        self._comma_ids = {i for i, p in enumerate(self.pieces) if len(p) > 1 and p[-1] == "," and p[-2].isdigit()}
        special = np.array([self.sp.is_control(i) or self.sp.is_unknown(i) for i in range(self.vocab_size)])
        special[self.pad_id] = True
        self.special_table = special  # (V,) bool
        self.word_start_table = np.array([_is_word_start_piece(p) for p in self.pieces]) | special  # (V,) bool

    # -- loading and saving

    @classmethod
    def from_pretrained(cls, path: str) -> "Tokenizer":
        """Load a directory holding spiece.model (+ tokenizer_config.json), a .model file, or a Hub id."""
        path = str(path)
        if os.path.isfile(path):
            model_file, config_dir = path, os.path.dirname(path)
        elif os.path.isdir(path):
            model_file, config_dir = os.path.join(path, "spiece.model"), path
            if not os.path.isfile(model_file):
                raise FileNotFoundError(f"{path} has no spiece.model (train one with `litebert tokenizer`)")
        elif looks_like_hub_id(path):
            model_file = _download_from_hub(path)
            config_dir = os.path.dirname(model_file)
        else:
            raise FileNotFoundError(f"no such directory: {path}")
        opts = NormalizerOptions()
        config_file = os.path.join(config_dir, "tokenizer_config.json")
        if os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as f:
                cfg = json.load(f)
            opts = NormalizerOptions(**{k: cfg[k] for k in vars(opts) if k in cfg})
        return cls(model_file, **vars(opts))

    def save_pretrained(self, out_dir: str) -> None:
        """Write spiece.model and the files HF's AlbertTokenizer reads (tokenizer.json when `tokenizers` is installed)."""
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "spiece.model"), "wb") as f:
            f.write(self.model_proto)
        added = {str(self._special_ids[p]): {"content": p, "lstrip": False, "normalized": False, "rstrip": False,
                                             "single_word": False, "special": True} for p in SPECIALS.values()}
        config = {"tokenizer_class": "AlbertTokenizer", **vars(self.options), **SPECIALS,
                  "bos_token": "[CLS]", "eos_token": "[SEP]", "model_max_length": 512, "added_tokens_decoder": added}
        _write_json(os.path.join(out_dir, "tokenizer_config.json"), config)
        _write_json(os.path.join(out_dir, "special_tokens_map.json"),
                    {**SPECIALS, "bos_token": "[CLS]", "eos_token": "[SEP]"})
        try:
            fast = self.to_hf_fast()
        except ImportError:  # `tokenizers` is optional; HF can still convert spiece.model itself
            return
        fast.save(os.path.join(out_dir, "tokenizer.json"))

    def to_hf_fast(self):
        """A `tokenizers.Tokenizer` set up like HF's AlbertTokenizerFast conversion of this model.

        It approximates two sentencepiece behaviours: the digit-comma rule (pieces like "9," get their score
        lowered by 100, as HF's converter does) and user-defined symbols (ordinary vocab entries there). Expect
        rare id differences on such text; `Tokenizer.encode` is the reference.
        """
        from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers, decoders, processors
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.models import Unigram

        from sentencepiece import sentencepiece_model_pb2 as pb

        proto = pb.ModelProto.FromString(self.model_proto)
        vocab = [(p.piece, p.score - 100.0 if i in self._comma_ids else p.score) for i, p in enumerate(proto.pieces)]
        tok = HFTokenizer(Unigram(vocab, unk_id=self.unk_id, byte_fallback=False))
        norm = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        if not self.options.keep_accents:
            # NFC after stripping: NFKD also splits Hangul syllables into jamo, which sentencepiece's NFKC rejoins
            # but tokenizers' Precompiled map does not (every Korean word became <unk> without this).
            norm += [normalizers.NFKD(), normalizers.StripAccents(), normalizers.NFC()]
        if self.options.do_lower_case:
            norm.append(normalizers.Lowercase())
        if proto.normalizer_spec.precompiled_charsmap:
            norm.append(normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap))
        norm.append(normalizers.Replace(Regex(" {2,}"), " "))
        tok.normalizer = normalizers.Sequence(norm)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always")])
        tok.decoder = decoders.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
            special_tokens=[("[CLS]", self.cls_id), ("[SEP]", self.sep_id)])
        # normalized=False: "[MASK]" is matched in the raw text, before lowercasing could turn it into "[mask]".
        tok.add_special_tokens([AddedToken(p, normalized=False, special=True) for p in SPECIALS.values()])
        return tok

    # -- encoding

    def _split_specials(self, text: str) -> list[str]:
        return [part for part in self._special_re.split(text) if part]

    def _encode_plain(self, texts: list[str]) -> list[list[int]]:
        """Ids for many texts, no [CLS]/[SEP] added; special tokens typed in the text map to their ids."""
        chunks: list[str] = []
        layout: list[list[int | None]] = []  # per text: a special id, or None for "next chunk"
        for text in texts:
            row: list[int | None] = []
            for part in self._split_specials(text):
                if part in self._special_ids:
                    row.append(self._special_ids[part])
                else:
                    row.append(None)
                    chunks.append(preprocess_text(part, **self._pp))
            layout.append(row)
        encoded = iter(self.sp.encode(chunks, out_type=int, num_threads=self.num_threads) if chunks else [])
        out = []
        for row in layout:
            ids: list[int] = []
            for item in row:
                ids.extend(self._comma_fix(next(encoded)) if item is None else [item])
            out.append(ids)
        return out

    @property
    def _pp(self) -> dict:
        o = self.options
        return {"lower": o.do_lower_case, "keep_accents": o.keep_accents, "remove_space": o.remove_space}

    def _comma_fix(self, ids: list[int]) -> list[int]:
        """The digit-comma rule of ALBERT's tokenizer: re-split "▁12," as "▁12" "," (and "12," as "12" ",")."""
        if not self._comma_ids.intersection(ids):
            return ids
        out = []
        for i in ids:
            if i in self._comma_ids:
                out.extend(self._split_comma_piece(self.pieces[i]))
            else:
                out.append(i)
        return out

    def _split_comma_piece(self, piece: str) -> list[int]:
        sub = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
        if piece[0] != SPIECE_UNDERLINE and sub and sub[0][0] == SPIECE_UNDERLINE:
            sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
        return [self.sp.piece_to_id(p) for p in sub] + [self.sp.piece_to_id(piece[-1])]

    def tokenize(self, text: str) -> list[str]:
        return [self.pieces[i] for i in self._encode_plain([text])[0]]

    def encode(self, text: str, pair: str | None = None, add_special_tokens: bool = True,
               max_length: int | None = None, truncation: str = "longest_first") -> list[int]:
        """Ids of `[CLS] text [SEP]` or `[CLS] text [SEP] pair [SEP]` (== HF AlbertTokenizer(text, pair).input_ids)."""
        ids = self._encode_plain([text] if pair is None else [text, pair])
        return self._assemble(ids[0], ids[1] if pair is not None else None, add_special_tokens, max_length, truncation)[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Ids of many texts without special tokens, in one sentencepiece call (the data pipeline's entry point)."""
        return self._encode_plain(list(texts))

    def _assemble(self, a, b, add_special_tokens, max_length, truncation) -> tuple[list[int], list[int]]:
        """Truncate (HF's strategies) and add [CLS]/[SEP]; returns (input_ids, token_type_ids)."""
        if truncation not in TRUNCATION:
            raise ValueError(f"truncation must be one of {TRUNCATION}, got {truncation!r}")
        n_special = (2 if b is None else 3) if add_special_tokens else 0
        if max_length is not None and truncation != "do_not_truncate":
            a, b = truncate_pair(a, b, max_length - n_special, truncation)
        if not add_special_tokens:
            ids = a + (b or [])
            return ids, [0] * len(a) + [1] * len(b or [])
        ids = [self.cls_id] + a + [self.sep_id]
        types = [0] * len(ids)
        if b is not None:
            ids += b + [self.sep_id]
            types += [1] * (len(b) + 1)
        return ids, types

    def __call__(self, texts: list[str] | str, pairs: list[str] | None = None, max_length: int = 512,
                 padding: bool = True, truncation: str = "longest_first") -> dict:
        """Batch encode to int64 tensors: input_ids, attention_mask, token_type_ids (padded with pad_id)."""
        import torch

        texts = [texts] if isinstance(texts, str) else list(texts)
        pairs = [pairs] if isinstance(pairs, str) else pairs
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pairs")
        flat = self._encode_plain(texts + (list(pairs) if pairs is not None else []))
        rows = [self._assemble(flat[i], flat[len(texts) + i] if pairs is not None else None, True, max_length, truncation)
                for i in range(len(texts))]
        width = max((len(r[0]) for r in rows), default=0)
        if not padding and len({len(r[0]) for r in rows}) > 1:
            raise ValueError("rows have different lengths; use padding=True")
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.int64)
        types = torch.zeros((len(rows), width), dtype=torch.int64)
        mask = torch.zeros((len(rows), width), dtype=torch.int64)
        for r, (row_ids, row_types) in enumerate(rows):
            ids[r, : len(row_ids)] = torch.tensor(row_ids)
            types[r, : len(row_types)] = torch.tensor(row_types)
            mask[r, : len(row_ids)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids (no [CLS]/[SEP]) and (start, end) character spans into the original `text`, for span tasks.

        Spans exclude surrounding whitespace; a bare "▁" piece gets an empty span at the next word.
        """
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        pos = 0
        for part in self._split_specials(text):
            if part in self._special_ids:
                ids.append(self._special_ids[part])
                spans.append((pos, pos + len(part)))
            else:
                self._offsets_of_chunk(part, pos, ids, spans)
            pos += len(part)
        return ids, spans

    def _offsets_of_chunk(self, text: str, base: int, ids: list, spans: list) -> None:
        norm, src = preprocess_with_alignment(text, **self._pp)
        # sentencepiece reports byte offsets into `norm`; map bytes -> chars -> original chars
        byte_to_char = np.repeat(np.arange(len(norm) + 1), [len(c.encode()) for c in norm] + [1])
        src_end = src + [len(text)]

        def to_original(cb: int, ce: int) -> tuple[int, int]:
            s = src_end[cb]
            if cb < len(norm) and norm[cb] == '"' and text.startswith(("``", "''"), s - 1):
                s -= 1  # a "``" or "''" pair starts one char earlier
            if ce <= cb:
                return base + s, base + s
            e = src[ce - 1] + 1
            while s < e and text[s].isspace():
                s += 1
            while e > s and text[e - 1].isspace():
                e -= 1
            return base + s, base + e

        for p in self.sp.encode(norm, return_type="proto").pieces:
            cb, ce = int(byte_to_char[p.begin]), int(byte_to_char[p.end])
            if p.id not in self._comma_ids:
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

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of ids: pieces joined, "▁" -> space; special tokens kept as their names unless skipped."""
        words, plain = [], []
        for i in (int(x) for x in ids):
            if self.special_table[i] and i != self.unk_id:
                if plain:
                    words.append(self.sp.decode(plain))
                    plain = []
                if not skip_special_tokens:
                    words.append(self.pieces[i])
            else:
                plain.append(i)
        if plain:
            words.append(self.sp.decode(plain))
        return " ".join(w for w in words if w)

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


def truncate_pair(a: list[int], b: list[int] | None, budget: int, strategy: str) -> tuple[list[int], list[int] | None]:
    """Cut tokens from the end until len(a) + len(b) <= budget, as HF's slow tokenizers do.

    longest_first removes one token at a time from the longer side (from `b` on ties); only_first/only_second
    cut one side and raise if that cannot reach the budget.
    """
    total = len(a) + len(b or [])
    excess = total - max(budget, 0)
    if excess <= 0:
        return a, b
    if strategy == "longest_first" or b is None:
        if b is None:
            return a[: max(len(a) - excess, 0)], b
        la, lb = len(a), len(b)
        for _ in range(excess):
            if la > lb:
                la -= 1
            else:
                lb -= 1
        return a[:la], b[:lb]
    side = a if strategy == "only_first" else b
    if excess >= len(side):
        which = "first" if strategy == "only_first" else "second"
        raise ValueError(f"cannot truncate the {which} sequence ({len(side)} tokens) by {excess}; use longest_first")
    side = side[: len(side) - excess]
    return (side, b) if strategy == "only_first" else (a, side)


def _write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _download_from_hub(repo_id: str) -> str:
    """spiece.model of a Hub repo, and its tokenizer_config.json (the normalisation flags) when it has one."""
    def fetch(hub) -> str:
        path = hub.hf_hub_download(repo_id, "spiece.model")
        try:
            hub.hf_hub_download(repo_id, "tokenizer_config.json")
        except Exception:
            pass
        return path
    return fetch_from_hub(repo_id, fetch)
