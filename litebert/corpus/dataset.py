"""Reading pretraining shards (what `litebert prepare` wrote), memory-mapped and checked.

Layout on disk (`out_dir`): meta.json (every argument, counts, the sha256 of spiece.model) and per shard
`shard_NNNNN.<field>.npy`: input_ids (flat, with [CLS]/[SEP]), offsets (N+1), b_start (token type 1 from here),
label (SOP/NSP, -100 for none), doc (the document, for held-out splits by document); static masking adds
masked_ids and mlm_labels.
"""

from __future__ import annotations

import json
import os

import numpy as np

from litebert.errors import DataError
from litebert.files import read_npy_header
from litebert.tokenizer import Tokenizer

FORMAT = "litebert-pretrain-v2"  # v2: document-major order and a per-example document id


DATASET_FILES = ("shard_*.npy", "vocab_*.npy", "meta.json")
STAGING, OUTGOING = ".prepare-incoming", ".prepare-outgoing"  # inside out_dir: the new dataset, the old one


class PretrainDataset:
    """The shards of a `prepare` run, memory-mapped; refuses a tokenizer other than the one they were made with.

    Opening checks what is cheap to check, so that damage is a DataError naming the file instead of a crash
    steps later: meta.json reads and has its fields; every shard file is there with the shape meta.json says
    and the bytes its header promises (a truncated .npy); the ids fit the vocabulary (meta.json's record of
    each shard's largest id). A shard's ids themselves are checked when it is first mapped."""

    def __init__(self, data_dir: str, tokenizer: Tokenizer | str | None = None):
        meta_file = os.path.join(data_dir, "meta.json")
        if not os.path.isfile(meta_file):
            if os.path.isdir(os.path.join(data_dir, OUTGOING)):
                raise DataError(f"{data_dir} has no meta.json: a `litebert prepare` into it was interrupted while "
                                "replacing its dataset; run that prepare again (it puts the previous dataset back "
                                "first, then replaces it)")
            raise FileNotFoundError(f"{data_dir} has no meta.json (make it with `litebert prepare`)")
        self.meta = _read_meta(meta_file)
        if isinstance(tokenizer, str):
            tokenizer = Tokenizer.from_pretrained(tokenizer)
        if tokenizer is not None and tokenizer.sha256 != self.meta["tokenizer_sha256"]:
            raise DataError(f"{data_dir} was made with another tokenizer (spiece.model sha256 "
                             f"{self.meta['tokenizer_sha256'][:12]}, given {tokenizer.sha256[:12]}); run prepare again")
        self.data_dir = data_dir
        self.static = bool(self.meta["args"]["static_masking"])
        self.max_seq_length = int(self.meta["args"]["max_seq_length"])
        self.pad_id = int(self.meta["special_ids"]["pad"])
        self.word_start_table = _load_npy(os.path.join(data_dir, "vocab_word_starts.npy"))
        self.special_table = _load_npy(os.path.join(data_dir, "vocab_special.npy"))
        self.vocab_size = int(self.meta["vocab_size"])
        if not len(self.word_start_table) == len(self.special_table) == self.vocab_size:
            raise DataError(f"{data_dir}: vocab_word_starts.npy / vocab_special.npy have {len(self.word_start_table)}"
                            f" / {len(self.special_table)} entries, meta.json's vocab_size is {self.vocab_size}")
        if tokenizer is not None and tokenizer.vocab_size != self.vocab_size:
            raise DataError(f"{data_dir}: made for a vocabulary of {self.vocab_size}, the tokenizer has "
                            f"{tokenizer.vocab_size} pieces")
        self.shards = [s["name"] for s in self.meta["shards"]]
        self.cum = np.cumsum([0] + [s["num_instances"] for s in self.meta["shards"]])
        for shard in self.meta["shards"]:
            if shard.get("max_id", 0) >= self.vocab_size:
                raise DataError(f"{data_dir}: {shard['name']} holds id {shard['max_id']}, outside the vocabulary "
                                f"of {self.vocab_size} (meta.json); run prepare again")
            for name, length in self._expected_lengths(shard).items():
                _check_npy(os.path.join(data_dir, f"{shard['name']}.{name}.npy"), length)
        self._arrays: dict[int, dict[str, np.ndarray]] = {}  # opened lazily, so the object pickles cheaply

    def _fields(self) -> list[str]:
        return ["input_ids", "offsets", "b_start", "label", "doc"] + (["masked_ids", "mlm_labels"] if self.static
                                                                        else [])

    def _expected_lengths(self, shard: dict) -> dict[str, int]:
        n, tokens = int(shard["num_instances"]), int(shard["num_tokens"])
        lengths = {"input_ids": tokens, "offsets": n + 1, "b_start": n, "label": n, "doc": n,
                   "masked_ids": tokens, "mlm_labels": tokens}
        return {f: lengths[f] for f in self._fields()}

    def _shard(self, k: int) -> dict[str, np.ndarray]:
        if k not in self._arrays:
            arrays = {f: _load_npy(os.path.join(self.data_dir, f"{self.shards[k]}.{f}.npy"), mmap_mode="r")
                      for f in self._fields()}
            offsets = arrays["offsets"]
            if offsets[0] != 0 or offsets[-1] != len(arrays["input_ids"]) or np.any(np.diff(offsets) < 0):
                raise DataError(f"{self.data_dir}: {self.shards[k]}.offsets.npy does not index "
                                f"{self.shards[k]}.input_ids.npy; the file is damaged: run prepare again")
            for f in ("input_ids", "masked_ids"):  # once per shard and process: as cheap as reading it once
                if f in arrays and len(arrays[f]) and int(arrays[f].max()) >= self.vocab_size:
                    raise DataError(f"{self.data_dir}: {self.shards[k]}.{f}.npy holds id {int(arrays[f].max())}, "
                                    f"outside the vocabulary of {self.vocab_size}; the file is damaged: run "
                                    "prepare again")
            self._arrays[k] = arrays
        return self._arrays[k]

    def document_ids(self) -> np.ndarray:
        """The document each example was cut from (non-decreasing: examples are stored document by document)."""
        return np.concatenate([self._shard(k)["doc"] for k in range(len(self.shards))])

    def __getstate__(self):
        return {**self.__dict__, "_arrays": {}}

    def __len__(self) -> int:
        return int(self.cum[-1])

    def __getitem__(self, i: int) -> dict:
        """One unmasked example (numpy): input_ids, token_type_ids, sentence_order_label, word_starts,
        special_mask; static shards add masked_input_ids and labels."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} examples")
        i %= n
        k = int(np.searchsorted(self.cum, i, side="right") - 1)
        j, a = i - int(self.cum[k]), self._shard(k)
        s, e = int(a["offsets"][j]), int(a["offsets"][j + 1])
        ids = np.asarray(a["input_ids"][s:e], dtype=np.int64)
        types = np.zeros(len(ids), dtype=np.int64)
        types[int(a["b_start"][j]):] = 1
        item = {"input_ids": ids, "token_type_ids": types, "sentence_order_label": int(a["label"][j]),
                "word_starts": self.word_start_table[ids], "special_mask": self.special_table[ids]}
        if self.static:
            item["masked_input_ids"] = np.asarray(a["masked_ids"][s:e], dtype=np.int64)
            item["labels"] = np.asarray(a["mlm_labels"][s:e], dtype=np.int64)
        return item


def _read_meta(path: str) -> dict:
    """meta.json, with the fields a dataset is opened by; DataError naming the file when it is damaged."""
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON, damaged or truncated ({e}); run prepare again") from None
    data_dir = os.path.dirname(path) or "."
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"{data_dir}: unknown data format {found!r}, expected {FORMAT}")
    try:
        for key in ("tokenizer_sha256", "vocab_size"):
            meta[key]
        meta["args"]["static_masking"], meta["args"]["max_seq_length"], meta["special_ids"]["pad"]
        for shard in meta["shards"]:
            shard["name"], int(shard["num_instances"]), int(shard["num_tokens"])
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{path}: damaged, a field is missing or wrong ({type(e).__name__}: {e}); run prepare "
                        "again") from None
    return meta


def _check_npy(path: str, length: int) -> None:
    """A shard file is there, whole (its data as long as its header says), and of `length` entries."""
    try:
        with open(path, "rb") as f:
            shape, dtype = read_npy_header(f)
            data_start, size = f.tell(), os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise DataError(f"{path} is missing; the dataset is incomplete: run prepare again") from None
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{path}: not a .npy file, damaged ({e}); run prepare again") from None
    expected = data_start + int(np.prod(shape)) * dtype.itemsize
    if size < expected:
        raise DataError(f"{path}: truncated ({size} of {expected} bytes); run prepare again")
    if shape != (length,):
        raise DataError(f"{path}: shape {shape}, meta.json says ({length},); the dataset is damaged: run prepare "
                        "again")


def _load_npy(path: str, mmap_mode: str | None = None) -> np.ndarray:
    """np.load with a damaged or missing file as a DataError naming it ("mmap length is greater than file size"
    says neither which file nor what to do)."""
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path} is missing; the dataset is incomplete: run prepare again") from None
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{path}: damaged or truncated ({e}); run prepare again") from None
