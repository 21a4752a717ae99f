"""ALBERT's masked-LM corruption of one sequence: whole-word n-gram spans (p(n) ∝ 1/n), 80/10/10 replacement.
A pure function of (one sequence, a generator, the knobs); corpus/batches.py applies it at batch time.

Masking happens at batch time (dynamic masking, as RoBERTa and cramming do; `litebert prepare --static-masking`
stores masks instead, as the original did). Every random choice comes from a generator seeded by
(seed, stream, position), so a resumed run, or any number of processes, rebuilds exactly the same batches.
"""

from __future__ import annotations

import numpy as np

from litebert.config import IGNORE_INDEX


def select_spans(word_starts: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator, masked_lm_prob=0.15,
                 max_predictions_per_seq=20, max_ngram=3) -> list[tuple[int, int]]:
    """Token ranges [start, end) to predict: whole-word n-grams, p(n) ∝ 1/n, no overlap, no special tokens.

    The number of tokens is round(masked_lm_prob * #non-special), at least 1 and at most max_predictions_per_seq
    (the original counts [CLS] and [SEP] too: at 64 tokens it masks 10 where this masks 9). Each span draws n
    first and then takes the next start (in a random order of words) where n whole words fit. Where every word is
    one token, the n of the spans follows p(n) exactly and only the last span may shrink to fit the budget; with
    words of several pieces a span that would overflow the budget shrinks wherever it comes, which skews the mix
    toward one word (measured on 3,000 sequences of 1-3-piece words: 0.60 / 0.25 / 0.15 for n = 1 / 2 / 3 against
    the target 0.55 / 0.27 / 0.18; google-research/albert's own script gives 0.62 / 0.25 / 0.13).
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
    labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    labels[pos] = ids[pos]
    masked = ids.astype(np.int64, copy=True)
    u = rng.random(len(pos))
    masked[pos[u < 0.8]] = mask_id
    rand = pos[u >= 0.9]
    masked[rand] = rng.integers(num_reserved, vocab_size, size=len(rand))
    return masked, labels
