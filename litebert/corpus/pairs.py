"""Pretraining data: documents -> sentence-order pairs -> memory-mapped token shards.

The recipe is the one of google-research/albert's create_pretraining_data.py, with its defects fixed:
- pack consecutive sentences of a document up to a target length (a random shorter target with prob short_seq_prob),
  cut the chunk at a random sentence boundary into A and B, and for SOP swap them with prob 0.5 (label 1 = swapped);
- a one-sentence chunk is split inside the sentence for SOP, never turned into an NSP negative (the original leaks
  random-document B segments into SOP data there);
- masking (litebert/corpus/masking.py) picks whole words in n-gram spans with p(n) ∝ 1/n and really never overlaps
  spans (the original's "already covered" check tests the wrong thing).

Layout on disk (`out_dir`): meta.json (every argument, counts, the sha256 of spiece.model) and per shard
`shard_NNNNN.<field>.npy`: input_ids (flat, with [CLS]/[SEP]), offsets (N+1), b_start (token type 1 from here),
label (SOP/NSP, -100 for none), doc (the document, for held-out splits by document); static masking adds masked_ids and mlm_labels. Shards are written in input
order, and every random choice is seeded from (seed, chunk index, copy), so the same inputs and seed give
byte-identical shards whatever the number of workers.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import glob
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from litebert.corpus.documents import chunks_of_documents, iter_documents, resolve_inputs
from litebert.config import IGNORE_INDEX
from litebert.corpus.masking import mask_tokens
from litebert.errors import ConfigError, DataError
from litebert.files import read_npy_header
from litebert.tokenizer import Tokenizer

log = logging.getLogger("litebert")

FORMAT = "litebert-pretrain-v2"  # v2: document-major order and a per-example document id
PAIR_TASKS = ("sop", "nsp", "none")


# ----------------------------------------------------------------------------- instances


@dataclass
class InstanceOptions:
    """The knobs of instance creation; stored in meta.json (pretraining masks with its masking knobs)."""

    max_seq_length: int = field(default=128, metadata={"help": "tokens per example, [CLS] and [SEP]s included"})
    short_seq_prob: float = field(default=0.1, metadata={
        "help": "probability that a document's chunks aim at a random shorter length, as ALBERT's recipe"})
    pair_task: str = field(default="sop", metadata={"help": "sop (ALBERT), nsp (BERT) or none",
                                                    "choices": PAIR_TASKS})
    dupe_factor: int = field(default=1, metadata={"help": "copies of the corpus, each cut differently"})
    static_masking: bool = field(default=False, metadata={"help": "mask once here instead of at batch time"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "fraction of the tokens to mask"})
    max_predictions_per_seq: int = field(default=20, metadata={"help": "at most this many masked tokens per example"})
    max_ngram: int = field(default=3, metadata={
        "help": "longest masked span, in whole words (a span of n words is picked with probability ~ 1/n)"})
    seed: int = field(default=12345, metadata={"help": "seed of every random choice (cuts, order swaps, masks)"})


@dataclass
class PrepareConfig:
    """What `litebert prepare` reads and writes, and how; the knobs of the examples are InstanceOptions'."""

    inputs: list[str] = field(default_factory=list, metadata={
        "positional": True,
        "help": "text (one sentence per line, blank line between documents), JSONL or .gz files, globs or "
                "directories (default: the bundled Persuasion corpus)"})
    out: str = field(default="out/data", metadata={"help": "output directory for shards + meta.json",
                                                   "metavar": "DIR"})
    tokenizer: str = field(default="out/tokenizer", metadata={
        "help": "directory with spiece.model (litebert tokenizer)", "metavar": "DIR"})
    num_workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1), metadata={
        "help": "worker processes (1: tokenize in this process)"})
    shard_size: int = field(default=100_000, metadata={"help": "examples per shard"})
    chunk_chars: int = field(default=1 << 20, metadata={
        "help": "characters of documents per unit of work (bounds each worker's memory)"})
    paragraphs: bool = field(default=False, metadata={
        "help": "text lines are paragraphs: split them into sentences"})
    text_field: str = field(default="text", metadata={"help": "JSONL field holding the document text"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace shard/meta files in --out that `litebert prepare` did not write (its own earlier "
                "dataset is replaced without this)"})


def trim_segments_randomly(a: np.ndarray, b: np.ndarray | None, max_tokens: int, rng: np.random.Generator):
    """Trim the longer segment one token at a time, from the front or back at random (the original recipe)."""
    la, lb = len(a), 0 if b is None else len(b)
    cut = {"a": [0, 0], "b": [0, 0]}  # tokens removed at [front, back]
    while la + lb > max_tokens:
        side = "a" if la > lb else "b"
        cut[side][0 if rng.random() < 0.5 else 1] += 1
        la, lb = (la - 1, lb) if side == "a" else (la, lb - 1)
    a = a[cut["a"][0] : len(a) - cut["a"][1]]
    if b is not None:
        b = b[cut["b"][0] : len(b) - cut["b"][1]]
    return a, b


def create_instances(doc: list[np.ndarray], doc_index: int, chunk_docs: list[list[np.ndarray]], word_starts: np.ndarray,
                     rng: np.random.Generator, opt: InstanceOptions, stats: dict) -> list[tuple]:
    """(A, B or None, label) triples of one tokenized document (a list of sentences' id arrays)."""
    pair = opt.pair_task != "none"
    max_tokens = opt.max_seq_length - (3 if pair else 2)
    if pair and len(doc) < 2:
        stats["skipped_one_sentence_docs"] += 1
        return []
    target = max_tokens
    if rng.random() < opt.short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    out, chunk, length, i = [], [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            if chunk:
                a, b, label = _make_pair(chunk, doc_index, chunk_docs, word_starts, rng, opt, target, stats)
                if a is None:
                    pass
                else:
                    i -= label[1]  # NSP: sentences not used by a random B go back to the document
                    if any(len(s) > max_tokens for s in chunk):
                        stats["long_sentences_truncated"] += 1
                    a, b = trim_segments_randomly(a, b, max_tokens, rng)
                    if len(a) > 0 and (b is None or len(b) > 0):
                        out.append((a, b, label[0]))
            chunk, length = [], 0
        i += 1
    return out


def _make_pair(chunk, doc_index, chunk_docs, word_starts, rng, opt, target, stats):
    """Segments A and B of one packed chunk and (label, sentences to give back)."""
    cat = np.concatenate
    if opt.pair_task == "none":
        return cat(chunk), None, (IGNORE_INDEX, 0)
    if len(chunk) >= 2:
        a_end = int(rng.integers(1, len(chunk)))
    if opt.pair_task == "sop":
        if len(chunk) == 1:
            # One long sentence: cut it at a random word start, so SOP still sees real order (no NSP leak).
            seg = chunk[0]
            cuts = np.flatnonzero(word_starts[seg[1:]]) + 1
            if len(seg) < 2:
                stats["skipped_short_chunks"] += 1
                return None, None, (0, 0)
            k = int(rng.choice(cuts)) if len(cuts) else int(rng.integers(1, len(seg)))
            a, b = seg[:k], seg[k:]
            stats["sop_split_inside_sentence"] += 1
        else:
            a, b = cat(chunk[:a_end]), cat(chunk[a_end:])
        if rng.random() < 0.5:
            return b, a, (1, 0)
        return a, b, (0, 0)
    # NSP, as the original: B from a random other document (here: of the same chunk, as we stream) with prob 0.5.
    others = [j for j in range(len(chunk_docs)) if j != doc_index]
    if (len(chunk) == 1 or rng.random() < 0.5) and others:
        a_end = 1 if len(chunk) == 1 else a_end
        a = cat(chunk[:a_end])
        other = chunk_docs[others[int(rng.integers(len(others)))]]
        start = int(rng.integers(len(other)))
        b_parts, b_len = [], 0
        for s in other[start:]:
            b_parts.append(s)
            b_len += len(s)
            if b_len >= target - len(a):
                break
        return a, cat(b_parts), (1, len(chunk) - a_end)
    if len(chunk) == 1:
        stats["skipped_short_chunks"] += 1
        return None, None, (0, 0)
    return cat(chunk[:a_end]), cat(chunk[a_end:]), (0, 0)


# ----------------------------------------------------------------------------- workers


_WORKER: dict = {}


def _init_worker(tokenizer_dir: str) -> None:
    tok = Tokenizer.from_pretrained(tokenizer_dir)
    tok.num_threads = 1  # one process per core already
    _WORKER["tok"] = tok


def _process_chunk(chunk_index: int, docs: list[list[str]], opt: InstanceOptions) -> dict:
    """Tokenize one chunk of documents and build its instances (all copies); pure given (chunk, opt)."""
    tok: Tokenizer = _WORKER["tok"]
    stats = collections.Counter()
    flat = tok.encode_batch([s for d in docs for s in d])
    tokenized, k = [], 0
    for d in docs:
        sents = [np.asarray(ids, dtype=np.int32) for ids in flat[k : k + len(d)]]
        k += len(d)
        sents = [s for s in sents if len(s)]
        if sents:
            tokenized.append(sents)
    stats["documents"] += len(docs)
    stats["sentences"] += k
    seqs, b_starts, labels, doc_ids, masked, mlm = [], [], [], [], [], []
    # Document-major order (all copies of a document together), so that the last examples of the shards are
    # the last documents: a held-out split taken from the end shares no text with training. Each copy has its
    # own random stream, as if the copies were made one after another.
    rngs = [np.random.default_rng([opt.seed, chunk_index, dupe]) for dupe in range(opt.dupe_factor)]
    mask_rngs = [np.random.default_rng([opt.seed, chunk_index, dupe, 1]) for dupe in range(opt.dupe_factor)]
    for j, doc in enumerate(tokenized):
        for dupe in range(opt.dupe_factor):
            for a, b, label in create_instances(doc, j, tokenized, tok.word_start_table, rngs[dupe], opt, stats):
                seq = [[tok.cls_id], a, [tok.sep_id]] + ([b, [tok.sep_id]] if b is not None else [])
                seq = np.concatenate(seq).astype(np.int32)
                seqs.append(seq)
                b_starts.append(len(a) + 2 if b is not None else len(seq))
                labels.append(label)
                doc_ids.append(j)
                if opt.static_masking:
                    m, lab = mask_tokens(seq, tok.word_start_table[seq], tok.special_table[seq], mask_rngs[dupe],
                                         tok.vocab_size, tok.mask_id, opt.masked_lm_prob,
                                         opt.max_predictions_per_seq, opt.max_ngram)
                    masked.append(m)
                    mlm.append(lab)
    out = {"input_ids": seqs, "b_start": b_starts, "label": labels, "doc": doc_ids, "num_docs": len(tokenized),
           "stats": stats}
    if opt.static_masking:
        out["masked_ids"], out["mlm_labels"] = masked, mlm
    return out


class _ShardWriter:
    """Accumulates instances and writes a shard of .npy files every `shard_size` instances."""

    def __init__(self, out_dir: str, shard_size: int, token_dtype, static: bool):
        self.out_dir, self.shard_size, self.dtype, self.static = out_dir, shard_size, token_dtype, static
        self.buf: dict[str, list] = collections.defaultdict(list)
        self.shards: list[dict] = []
        self.num_tokens = 0
        self.num_docs = 0  # documents of the chunks added so far: makes chunk-local document ids global

    def add(self, result: dict) -> None:
        for key in ("input_ids", "b_start", "label", "masked_ids", "mlm_labels"):
            self.buf[key].extend(result.get(key, []))
        self.buf["doc"].extend(self.num_docs + j for j in result["doc"])
        self.num_docs += result["num_docs"]
        while len(self.buf["input_ids"]) >= self.shard_size:
            self.flush(self.shard_size)

    def flush(self, n: int | None = None) -> None:
        n = len(self.buf["input_ids"]) if n is None else n
        if n == 0:
            return
        take = {k: v[:n] for k, v in self.buf.items()}
        for k in list(self.buf):
            del self.buf[k][:n]
        name = f"shard_{len(self.shards):05d}"
        lengths = np.array([len(s) for s in take["input_ids"]], dtype=np.int64)
        arrays = {
            "input_ids": np.concatenate(take["input_ids"]).astype(self.dtype),
            "offsets": np.r_[0, np.cumsum(lengths)].astype(np.int64),
            "b_start": np.asarray(take["b_start"], dtype=np.int32),
            "label": np.asarray(take["label"], dtype=np.int8),
            "doc": np.asarray(take["doc"], dtype=np.int64),
        }
        if self.static:
            arrays["masked_ids"] = np.concatenate(take["masked_ids"]).astype(self.dtype)
            arrays["mlm_labels"] = np.concatenate(take["mlm_labels"]).astype(np.int32)
        for k, arr in arrays.items():
            np.save(os.path.join(self.out_dir, f"{name}.{k}.npy"), arr)
        self.shards.append({"name": name, "num_instances": int(n), "num_tokens": int(lengths.sum()),
                            "max_id": int(arrays["input_ids"].max())})
        self.num_tokens += int(lengths.sum())


def check_options(opt: InstanceOptions, shard_size: int) -> None:
    """A one-line ConfigError naming the first option outside its range, before any file is read or written.

    Masking options are checked even without static masking: pretraining reads them from meta.json."""
    if opt.pair_task not in PAIR_TASKS:
        raise ConfigError(f"pair_task must be one of {PAIR_TASKS}, got {opt.pair_task!r}")
    # [CLS] A [SEP] B [SEP] with one-token A and B; without pairs [CLS] A [SEP] with room for the 2-token
    # minimum of a shortened target (short_seq_prob)
    shortest = 4 if opt.pair_task == "none" else 5
    rules = [  # (name, value, allowed, the range in words)
        ("max_seq_length", opt.max_seq_length, shortest <= opt.max_seq_length <= 1 << 16, f"in [{shortest}, 65536]"),
        ("short_seq_prob", opt.short_seq_prob, 0 <= opt.short_seq_prob <= 1, "in [0, 1]"),
        ("dupe_factor", opt.dupe_factor, opt.dupe_factor >= 1, ">= 1"),
        ("masked_lm_prob", opt.masked_lm_prob, 0 < opt.masked_lm_prob <= 1, "in (0, 1]"),
        ("max_predictions_per_seq", opt.max_predictions_per_seq, opt.max_predictions_per_seq >= 1, ">= 1"),
        ("max_ngram", opt.max_ngram, opt.max_ngram >= 1, ">= 1"),
        ("seed", opt.seed, opt.seed >= 0, ">= 0"),
        ("shard_size", shard_size, shard_size >= 1, ">= 1"),
    ]
    for name, value, ok, allowed in rules:
        if not ok:  # NaN fails every comparison, so it lands here too
            raise ConfigError(f"{name} must be {allowed}, got {value}")


DATASET_FILES = ("shard_*.npy", "vocab_*.npy", "meta.json")
STAGING, OUTGOING = ".prepare-incoming", ".prepare-outgoing"  # inside out_dir: the new dataset, the old one
_OLD_NAMES = "names.json"  # in OUTGOING, written before anything moves: which files are the old dataset's


def _dataset_names(out_dir: str) -> list[str]:
    return sorted({os.path.basename(p) for pattern in DATASET_FILES for p in glob.glob(os.path.join(out_dir, pattern))})


@contextlib.contextmanager
def _staged_dataset(out_dir: str):
    """A fresh directory inside `out_dir` to write a dataset into. When the block succeeds, its files replace
    the dataset already in `out_dir`; when it fails or is interrupted, it is removed and the old dataset is
    untouched. The swap moves the old files aside into OUTGOING (meta.json first) and the new ones in
    (meta.json last), so meta.json is there only when a whole dataset is; a kill during the swap is finished or
    undone by `recover_dataset`, which the next prepare runs first."""
    from litebert.files import fsync_path, write_json

    staging = os.path.join(out_dir, STAGING)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        yield staging
        for name in os.listdir(staging):
            fsync_path(os.path.join(staging, name))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    outgoing = os.path.join(out_dir, OUTGOING)
    shutil.rmtree(outgoing, ignore_errors=True)
    os.makedirs(outgoing)
    old = sorted(_dataset_names(out_dir), key=lambda n: n != "meta.json")  # never mix the files of two runs
    write_json(os.path.join(outgoing, _OLD_NAMES), old)
    for name in old:
        os.replace(os.path.join(out_dir, name), os.path.join(outgoing, name))
    for name in sorted(os.listdir(staging), key=lambda n: n == "meta.json"):
        os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
    fsync_path(out_dir)
    shutil.rmtree(outgoing)
    os.rmdir(staging)


def recover_dataset(out_dir: str) -> str | None:
    """Finish or undo a dataset swap of `_staged_dataset` that a kill interrupted; returns what it did.

    meta.json in out_dir means a whole dataset is there (the old one before it moved, or the new one after its
    last file arrived): what waits aside is deleted. Otherwise the old files are put back and the new ones that
    had arrived are removed."""
    outgoing, did = os.path.join(out_dir, OUTGOING), None
    if os.path.isdir(outgoing):
        names_file = os.path.join(outgoing, _OLD_NAMES)
        if not os.path.isfile(os.path.join(out_dir, "meta.json")) and os.path.isfile(names_file):
            with open(names_file, encoding="utf-8") as f:
                old = json.load(f)
            for name in _dataset_names(out_dir):
                if name not in old:
                    os.remove(os.path.join(out_dir, name))
            for name in sorted(old, key=lambda n: n == "meta.json"):
                if os.path.exists(os.path.join(outgoing, name)):
                    os.replace(os.path.join(outgoing, name), os.path.join(out_dir, name))
            did = "restored the previous dataset"
        else:
            did = "removed the replaced dataset"
        shutil.rmtree(outgoing)
    shutil.rmtree(os.path.join(out_dir, STAGING), ignore_errors=True)
    return did


def check_out_dir(out_dir: str, overwrite: bool) -> None:
    """Refuse (ConfigError) to replace dataset-like files (shard_*.npy, vocab_*.npy, meta.json) that are not a
    `litebert prepare` dataset, unless `overwrite`."""
    if overwrite or not os.path.isdir(out_dir):
        return
    names = _dataset_names(out_dir)
    if not names:
        return
    meta_file = os.path.join(out_dir, "meta.json")
    try:
        with open(meta_file, encoding="utf-8") as f:
            ours = str(json.load(f).get("format", "")).startswith("litebert-pretrain")
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        what = "a meta.json that `litebert prepare` did not write" if "meta.json" in names else \
            f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''} without a meta.json"
        raise ConfigError(f"{out_dir} holds {what}; prepare would replace them: choose another --out, or pass "
                          "--overwrite")


def _run_chunks(chunks, opt: InstanceOptions, tokenizer_dir: str, num_workers: int, collect) -> None:
    """Pass each (i, documents) chunk's `_process_chunk` result to `collect`, in chunk order. With num_workers > 1
    a process pool does the work with at most 2 * num_workers chunks in flight, so memory stays bounded however
    large the corpus; otherwise it runs here, which is simpler to debug and needs no pickling."""
    if num_workers <= 1:
        _init_worker(tokenizer_dir)
        for i, docs in chunks:
            collect(_process_chunk(i, docs, opt))
        return
    import multiprocessing as mp

    # fork: workers need only numpy + sentencepiece, and spawn cannot re-import a `python -` or notebook __main__
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(num_workers, _init_worker, (tokenizer_dir,)) as pool:
        pending = collections.deque()
        for i, docs in chunks:
            pending.append(pool.apply_async(_process_chunk, (i, docs, opt)))
            while len(pending) >= 2 * num_workers:
                collect(pending.popleft().get())
        while pending:
            collect(pending.popleft().get())


def prepare(inputs: list[str] | None, out_dir: str, tokenizer_dir: str, options: InstanceOptions | None = None, *,
            num_workers: int = 2, shard_size: int = 100_000, chunk_chars: int = 1 << 20, paragraphs: bool = False,
            text_field: str = "text", progress: bool = True, overwrite: bool = False, **knobs) -> dict:
    """Stream documents from `inputs` (None: the bundled corpus) into shards in `out_dir`; returns meta.json's dict.

    The examples are made with `options`, or InstanceOptions' defaults, with any of its fields given as keyword
    arguments on top (`prepare(None, out, tok, max_seq_length=64, dupe_factor=2)`). Work is split into chunks
    of about `chunk_chars` characters of documents; with num_workers > 1 they are processed by a process pool,
    at most 2 * num_workers chunks in flight, so memory stays bounded.
    The new dataset replaces an old one in `out_dir` only once it is complete (`_staged_dataset`); files there
    that look like a dataset but are not one of prepare's are replaced only with overwrite=True.
    """
    from tqdm import tqdm

    opt = dataclasses.replace(options or InstanceOptions(), **knobs)
    check_options(opt, shard_size)
    paths = resolve_inputs(inputs)
    tok = Tokenizer.from_pretrained(tokenizer_dir)
    if os.path.isdir(out_dir) and recover_dataset(out_dir):
        log.warning("%s: an interrupted prepare had left the dataset half-replaced; put right first", out_dir)
    check_out_dir(out_dir, overwrite)
    os.makedirs(out_dir, exist_ok=True)
    token_dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.int32
    with _staged_dataset(out_dir) as staging:
        writer = _ShardWriter(staging, shard_size, token_dtype, opt.static_masking)
        stats = collections.Counter()
        total = None if any(p.endswith(".gz") for p in paths) else sum(os.path.getsize(p) for p in paths)
        # disable=None: tqdm stays quiet when stderr is no terminal (a log file, CI)
        bar = tqdm(total=total, unit="B", unit_scale=True, desc="prepare", disable=None if progress else True)
        t0 = time.time()
        chunks = enumerate(chunks_of_documents(iter_documents(paths, paragraphs, text_field, stats, bar), chunk_chars))

        def collect(result):
            stats.update(result.pop("stats"))
            writer.add(result)
            bar.set_postfix(instances=sum(s["num_instances"] for s in writer.shards) + len(writer.buf["input_ids"]))

        _run_chunks(chunks, opt, tokenizer_dir, num_workers, collect)
        writer.flush()
        bar.close()
        n = sum(s["num_instances"] for s in writer.shards)
        if stats["documents"] == 0:
            raise DataError(f"no text found in {', '.join(paths)}" + _skips(stats))
        if n == 0:
            raise DataError(f"no pretraining examples from {stats['documents']} documents{_skips(stats)}")
        np.save(os.path.join(staging, "vocab_word_starts.npy"), tok.word_start_table)
        np.save(os.path.join(staging, "vocab_special.npy"), tok.special_table)
        meta = {
            "format": FORMAT,
            "tokenizer_sha256": tok.sha256,
            "tokenizer_dir": os.path.abspath(tokenizer_dir),
            "vocab_size": tok.vocab_size,
            "special_ids": {"pad": tok.pad_id, "unk": tok.unk_id, "cls": tok.cls_id, "sep": tok.sep_id, "mask": tok.mask_id},
            "token_dtype": np.dtype(token_dtype).name,
            "inputs": [os.path.abspath(p) for p in paths],
            "args": {**asdict(opt), "num_workers": num_workers, "shard_size": shard_size, "chunk_chars": chunk_chars,
                     "paragraphs": paragraphs, "text_field": text_field},
            "num_instances": n,
            "num_tokens": writer.num_tokens,
            "stats": dict(sorted(stats.items())),
            "seconds": round(time.time() - t0, 3),
            "shards": writer.shards,
        }
        with open(os.path.join(staging, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
    return meta


def _skips(stats) -> str:
    skips = {k: v for k, v in stats.items() if k.startswith("skipped") and v}
    return f" (skipped: {', '.join(f'{k[8:]}={v}' for k, v in skips.items())})" if skips else ""


# ----------------------------------------------------------------------------- reading shards


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


# ----------------------------------------------------------------------------- CLI


def cli(argv: list[str]) -> int:
    from litebert.runconfig import add_config_args, parse_verb, verb_parser

    parser = verb_parser("prepare", __doc__)
    add_config_args(parser, PrepareConfig, "input and output")
    add_config_args(parser, InstanceOptions, "examples (stored in meta.json)")
    run, opt = parse_verb(parser, argv, PrepareConfig, InstanceOptions)
    meta = prepare(run.inputs or None, run.out, run.tokenizer, opt, num_workers=run.num_workers,
                   shard_size=run.shard_size, chunk_chars=run.chunk_chars, paragraphs=run.paragraphs,
                   text_field=run.text_field, progress=run.progress, overwrite=run.overwrite)
    skipped = {k: v for k, v in meta["stats"].items() if k.startswith("skipped") or k == "long_sentences_truncated"}
    print(f"wrote {meta['num_instances']} examples ({meta['num_tokens']} tokens, {len(meta['shards'])} shards) "
          f"to {run.out} from {meta['stats'].get('documents', 0)} documents"
          + (f"; {', '.join(f'{k}={v}' for k, v in skipped.items())}" if skipped else ""))
    return 0
