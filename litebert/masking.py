"""ALBERT's masked-LM corruption: whole-word n-gram spans (p(n) ∝ 1/n), 80/10/10 replacement, and the masked
batch a pretraining step reads.

Masking happens at batch time (dynamic masking, as RoBERTa and cramming do; `litebert prepare --static-masking`
stores masks instead, as the original did). Every random choice comes from a generator seeded by
(seed, stream, position), so a resumed run, or any number of processes, rebuilds exactly the same batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from litebert.pretrain_data import PretrainDataset

IGNORE = -100  # label value the losses ignore


def select_spans(word_starts: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator, masked_lm_prob=0.15,
                 max_predictions_per_seq=20, max_ngram=3) -> list[tuple[int, int]]:
    """Token ranges [start, end) to predict: whole-word n-grams, p(n) ∝ 1/n, no overlap, no special tokens.

    The number of tokens is round(masked_lm_prob * #non-special), at least 1 and at most max_predictions_per_seq.
    Each span draws n first and then takes the next start (in a random order of words) where n whole words fit,
    so the n of the spans follows p(n) exactly; only the last span may shrink to fit the budget.
    """
    cand = ~np.asarray(special_mask, dtype=bool)
    n_cand = int(cand.sum())
    if n_cand == 0:
        return []
    budget = min(max_predictions_per_seq, max(1, int(round(n_cand * masked_lm_prob))))
    prev_cand = np.r_[False, cand[:-1]]
    starts_mask = cand & (np.asarray(word_starts, dtype=bool) | ~prev_cand)
    starts = np.flatnonzero(starts_mask)  # (W,) first token of each word
    bounds = np.r_[np.flatnonzero(starts_mask | ~cand), len(cand)]
    ends = bounds[np.searchsorted(bounds, starts, side="right")]  # (W,) one past each word's last token
    run = np.cumsum(~cand)[starts]  # words with equal run lie in the same segment, without a special between
    W = len(starts)
    p = 1.0 / np.arange(1, max_ngram + 1)
    ns = iter(rng.choice(np.arange(1, max_ngram + 1), size=W, p=p / p.sum()).tolist())
    covered = np.zeros(W, dtype=bool)
    spans, count = [], 0
    n = next(ns)
    for pass_ in (0, 1):  # pass 1 (rare: short texts) fills what is left with single words
        for w in rng.permutation(W).tolist():
            if count >= budget:
                return spans
            m = 1 if pass_ else n
            last = w + m - 1
            if last >= W or run[last] != run[w] or covered[w : last + 1].any():
                continue
            while m > 1 and count + ends[w + m - 1] - starts[w] > budget:
                m -= 1  # the budget is nearly spent: shrink this (last) span, as the original does
            size = int(ends[w + m - 1] - starts[w])
            if count + size > budget:
                continue
            covered[w : w + m] = True
            spans.append((int(starts[w]), int(ends[w + m - 1])))
            count += size
            n = next(ns, 1)
    return spans


def mask_tokens(input_ids: np.ndarray, word_starts: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator,
                vocab_size: int, mask_id: int, masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
                max_ngram: int = 3, num_reserved: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """ALBERT's MLM corruption of one sequence: (masked ids, labels with -100 where nothing is predicted).

    Spans come from `select_spans`; each chosen token independently becomes [MASK] (80%), stays (10%) or becomes
    a random id in [num_reserved, vocab_size) (10%; the reserved ids are <pad> <unk> [CLS] [SEP] [MASK]).
    """
    ids = np.asarray(input_ids)
    spans = select_spans(word_starts, special_mask, rng, masked_lm_prob, max_predictions_per_seq, max_ngram)
    pos = np.concatenate([np.arange(s, e) for s, e in spans]) if spans else np.zeros(0, dtype=np.int64)
    labels = np.full(ids.shape, IGNORE, dtype=np.int64)
    labels[pos] = ids[pos]
    masked = ids.astype(np.int64, copy=True)
    u = rng.random(len(pos))
    masked[pos[u < 0.8]] = mask_id
    rand = pos[u >= 0.9]
    masked[rand] = rng.integers(num_reserved, vocab_size, size=len(rand))
    return masked, labels


def make_batch(dataset: PretrainDataset, indices: list[int], seed: int, rank: int, step: int, vocab_size: int,
               mask_id: int, max_seq_length: int, masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
               pad_to_max_length: bool = False, max_ngram: int = 3) -> dict:
    """A padded, masked batch (torch int64): input_ids, attention_mask, token_type_ids, labels (-100 = not
    predicted), sentence_order_label. Dynamic masking is seeded from (seed, rank, step) alone, so a resumed run
    rebuilds exactly the same batch; static shards use their stored masks."""
    import torch

    rng = np.random.default_rng([seed, rank, step])
    rows = [dataset[int(i)] for i in indices]
    width = max_seq_length if pad_to_max_length else max((len(r["input_ids"]) for r in rows), default=0)
    B = len(rows)
    ids = np.full((B, width), dataset.pad_id, dtype=np.int64)
    labels = np.full((B, width), IGNORE, dtype=np.int64)
    types = np.zeros((B, width), dtype=np.int64)
    attn = np.zeros((B, width), dtype=np.int64)
    for r, row in enumerate(rows):
        T = len(row["input_ids"])
        if T > max_seq_length:
            raise ValueError(f"example {indices[r]} has {T} tokens > max_seq_length={max_seq_length}; "
                             f"the data was prepared with max_seq_length={dataset.max_seq_length}")
        if dataset.static:
            masked, lab = row["masked_input_ids"], row["labels"]
        else:
            masked, lab = mask_tokens(row["input_ids"], row["word_starts"], row["special_mask"], rng, vocab_size,
                                      mask_id, masked_lm_prob, max_predictions_per_seq, max_ngram)
        ids[r, :T], labels[r, :T], types[r, :T], attn[r, :T] = masked, lab, row["token_type_ids"], 1
    sop = np.array([r["sentence_order_label"] for r in rows], dtype=np.int64)
    t = torch.from_numpy
    return {"input_ids": t(ids), "attention_mask": t(attn), "token_type_ids": t(types), "labels": t(labels),
            "sentence_order_label": t(sop)}
