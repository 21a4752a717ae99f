"""`litebert prepare`: documents -> sentence-order pairs (litebert.corpus.pairs) -> shards on disk
(litebert.corpus.dataset describes the layout).

Shards are written in input order, and every random choice is seeded from (seed, chunk index, copy), so the same
inputs and seed give byte-identical shards whatever the number of workers. A new dataset is staged inside the
output directory and replaces the old one whole (`_staged_dataset`), so a killed run leaves one or the other.
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

from litebert.corpus.dataset import DATASET_FILES, FORMAT, OUTGOING, STAGING
from litebert.corpus.documents import chunks_of_documents, iter_documents, resolve_inputs
from litebert.corpus.masking import mask_tokens
from litebert.corpus.pairs import InstanceOptions, check_options, create_instances
from litebert.errors import ConfigError, DataError
from litebert.files import fsync_path, read_json_as, write_json
from litebert.progress import progress_bar
from litebert.runconfig import parse_verb, verb_parser
from litebert.tokenizer import Tokenizer

log = logging.getLogger("litebert")


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
    num_workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1), metadata={"range": "[1, inf)",
        "help": "worker processes (1: tokenize in this process)"})
    shard_size: int = field(default=100_000, metadata={"range": "[1, inf)", "help": "examples per shard"})
    chunk_chars: int = field(default=1 << 20, metadata={"range": "[1, inf)",
        "help": "characters of documents per unit of work (bounds each worker's memory)"})
    paragraphs: bool = field(default=False, metadata={
        "help": "text lines are paragraphs: split them into sentences"})
    text_field: str = field(default="text", metadata={"help": "JSONL field holding the document text"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace shard/meta files in --out that `litebert prepare` did not write (its own earlier "
                "dataset is replaced without this)"})


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
        if opt.pair_task == "nsp" and len(doc) < 2:  # once per document, not per copy
            stats["skipped_one_sentence_docs"] += 1
            continue
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
            old = read_json_as(names_file, list, DataError)
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
        bar = progress_bar(total, "prepare", progress, unit="B", unit_scale=True)  # a log gets a line every 30 s
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
        write_json(os.path.join(staging, "meta.json"), meta)
    return meta


def _skips(stats) -> str:
    skips = {k: v for k, v in stats.items() if k.startswith("skipped") and v}
    return f" (skipped: {', '.join(f'{k[8:]}={v}' for k, v in skips.items())})" if skips else ""


def cli(argv: list[str]) -> int:

    parser = verb_parser("prepare", __doc__, {"input and output": PrepareConfig, "examples (stored in meta.json)": InstanceOptions})
    run, opt = parse_verb(parser, argv)
    meta = prepare(run.inputs or None, run.out, run.tokenizer, opt, num_workers=run.num_workers,
                   shard_size=run.shard_size, chunk_chars=run.chunk_chars, paragraphs=run.paragraphs,
                   text_field=run.text_field, progress=run.progress, overwrite=run.overwrite)
    skipped = {k: v for k, v in meta["stats"].items() if k.startswith("skipped") or k == "long_sentences_truncated"}
    print(f"wrote {meta['num_instances']} examples ({meta['num_tokens']} tokens, {len(meta['shards'])} shards) "
          f"to {run.out} from {meta['stats'].get('documents', 0)} documents"
          + (f"; {', '.join(f'{k}={v}' for k, v in skipped.items())}" if skipped else ""))
    return 0
