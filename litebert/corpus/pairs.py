"""Sentence-order pairs from documents: the instance recipe of pretraining data (litebert.corpus.shards writes
them to disk, litebert.corpus.dataset reads them back).

The recipe is the one of google-research/albert's create_pretraining_data.py, with its defects fixed:
- pack consecutive sentences of a document up to a target length (a random shorter target with prob short_seq_prob),
  cut the chunk at a random sentence boundary into A and B, and for SOP swap them with prob 0.5 (label 1 = swapped);
- a one-sentence chunk (a one-sentence document too) is split inside the sentence for SOP, never turned into an
  NSP negative (the original leaks random-document B segments into SOP data there);
- NSP's random B comes from an earlier document of the same chunk: the held-out split is the last documents
  (litebert.pretrain.held_out_start), so no training example holds held-out text. The other way round stays: a
  held-out NSP negative may take its B from a training document (its MLM on B scores text the model saw); a
  chunk's first document has no earlier one, so its pairs are all "actual next" (counted in the stats);
- masking (litebert/corpus/masking.py) picks whole words in n-gram spans with p(n) ∝ 1/n and really never overlaps
  spans (the original's "already covered" check tests the wrong thing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from litebert.config import IGNORE_INDEX
from litebert.errors import ConfigError

PAIR_TASKS = ("sop", "nsp", "none")


# ----------------------------------------------------------------------------- instances


@dataclass
class InstanceOptions:
    """The knobs of instance creation; stored in meta.json (pretraining masks with its masking knobs)."""

    max_seq_length: int = field(default=128, metadata={"range": "[4, 65536]",
        "help": "tokens per example, [CLS] and [SEP]s included"})
    short_seq_prob: float = field(default=0.1, metadata={"range": "[0, 1]",
        "help": "probability that a document's chunks aim at a random shorter length, as ALBERT's recipe"})
    pair_task: str = field(default="sop", metadata={"help": "sop (ALBERT), nsp (BERT) or none",
                                                    "choices": PAIR_TASKS})
    dupe_factor: int = field(default=1, metadata={"range": "[1, inf)",
        "help": "copies of the corpus, each cut differently"})
    static_masking: bool = field(default=False, metadata={"help": "mask once here instead of at batch time"})
    masked_lm_prob: float = field(default=0.15, metadata={"range": "(0, 1]", "help": "fraction of the tokens to mask"})
    max_predictions_per_seq: int = field(default=20, metadata={"range": "[1, inf)",
        "help": "at most this many masked tokens per example"})
    max_ngram: int = field(default=3, metadata={"range": "[1, inf)",
        "help": "longest masked span, in whole words (a span of n words is picked with probability ~ 1/n)"})
    seed: int = field(default=12345, metadata={"range": "[0, 4294967295]",
        "help": "seed of every random choice (cuts, order swaps, masks)"})


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
    if opt.pair_task == "nsp" and len(doc) < 2:  # only random-B negatives could be made: counted by the caller
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
    # NSP, as the original: B from a random other document with prob 0.5; here an earlier one of the same chunk
    # (as we stream, and so that held-out documents, the last ones, lend no training example their text).
    others = range(doc_index)
    if not others:
        stats["nsp_pairs_without_an_earlier_document"] += 1
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


# ----------------------------------------------------------------------------- options


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
