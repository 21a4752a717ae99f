"""Evaluation metrics: GLUE-style classification/regression scores, entity-level F1 for BIO tagging, and the
official SQuAD v1.1/v2.0 EM/F1 (with v2.0's no-answer threshold search).

Every function takes plain sequences (lists, numpy arrays, CPU tensors) and returns Python floats, so the
training loop, the CLI and the tests can call them without ceremony. scipy / scikit-learn are imported inside
the functions that use them: core litebert does not depend on them (they are the `eval` extra).
"""

from __future__ import annotations

import collections
import logging
import re
import string
from typing import Callable, Mapping, Sequence

import numpy as np

from litebert.config import IGNORE_INDEX
from litebert.errors import ConfigError, DataError

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# classification and regression


def accuracy(preds: Sequence, labels: Sequence) -> float:
    preds, labels = _pair(preds, labels)
    return float((preds == labels).mean())


def f1(preds: Sequence, labels: Sequence, positive=1) -> float:
    """Binary F1 of the `positive` class (GLUE's MRPC/QQP F1: positive = 1 = paraphrase/duplicate)."""
    from sklearn.metrics import f1_score

    preds, labels = _pair(preds, labels)
    return float(f1_score(labels, preds, pos_label=positive, average="binary", zero_division=0))


def macro_f1(preds: Sequence, labels: Sequence) -> float:
    """Unweighted mean of per-class F1 over the classes present in labels or predictions."""
    from sklearn.metrics import f1_score

    preds, labels = _pair(preds, labels)
    return float(f1_score(labels, preds, average="macro", zero_division=0))


def mcc(preds: Sequence, labels: Sequence) -> float:
    """Matthews correlation (CoLA's metric); 0.0 when undefined (a constant predictor)."""
    from sklearn.metrics import matthews_corrcoef

    preds, labels = _pair(preds, labels)
    return float(matthews_corrcoef(labels, preds))


def pearson(preds: Sequence, labels: Sequence) -> float:
    from scipy.stats import pearsonr

    preds, labels = _pair(preds, labels, dtype=np.float64)
    return float(pearsonr(preds, labels)[0])


def spearman(preds: Sequence, labels: Sequence) -> float:
    from scipy.stats import spearmanr

    preds, labels = _pair(preds, labels, dtype=np.float64)
    return float(spearmanr(preds, labels)[0])


def masked_accuracy(preds: Sequence, labels: Sequence, ignore_index: int = IGNORE_INDEX) -> float:
    """MLM accuracy: mean over positions whose label is not `ignore_index` (the unmasked ones)."""
    preds, labels = _pair(preds, labels)
    keep = labels != ignore_index
    return float((preds[keep] == labels[keep]).mean()) if keep.any() else 0.0


METRICS: dict[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy, "f1": f1, "macro_f1": macro_f1, "mcc": mcc, "pearson": pearson, "spearman": spearman,
}


def compute_metrics(names: Sequence[str], preds: Sequence, labels: Sequence) -> dict[str, float]:
    """{name: value} for the named metrics (a task's `metrics` in litebert.tasks.TASKS)."""
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ConfigError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    return {name: METRICS[name](preds, labels) for name in names}


def _pair(preds, labels, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    preds, labels = np.asarray(preds, dtype=dtype), np.asarray(labels, dtype=dtype)
    if preds.shape != labels.shape:
        raise ValueError(f"predictions {preds.shape} and labels {labels.shape} differ in shape")
    if preds.size == 0:
        raise ValueError("no predictions to score")
    return preds, labels


# ----------------------------------------------------------------------------------------------------------------
# multi-label classification


def multi_label_scores(gold: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Micro-F1 (over all example x label decisions), macro-F1 (the mean of per-label F1 over every label,
    0 for a label neither predicted nor present) and the exact-match ratio (every label of an example right).
    Counted here rather than by scikit-learn, which reads a one-label indicator matrix as a binary task."""
    gold, pred = np.asarray(gold, dtype=bool), np.asarray(pred, dtype=bool)
    if gold.shape != pred.shape or gold.ndim != 2:
        raise ValueError(f"gold {gold.shape} and predictions {pred.shape} should be equal (examples, labels)")
    tp, fp, fn = ((gold & pred).sum(0), (~gold & pred).sum(0), (gold & ~pred).sum(0))  # per label

    def f1(t, p, n):
        return np.divide(2 * t, 2 * t + p + n, out=np.zeros(np.shape(t)), where=(2 * t + p + n) > 0)

    return {"micro_f1": float(f1(tp.sum(), fp.sum(), fn.sum())),
            "macro_f1": float(f1(tp, fp, fn).mean()) if gold.shape[1] else 0.0,
            "exact_match": float((gold == pred).all(axis=1).mean()) if len(gold) else 0.0}


def tune_thresholds(probs: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Per label, the probability threshold that maximises that label's F1 on (probs, gold): each candidate is
    the midpoint between two neighbouring distinct probabilities, so the choice does not sit on a training
    example's own score. A label never present keeps 0.5 (no evidence to move it)."""
    probs, gold = np.asarray(probs, dtype=np.float64), np.asarray(gold, dtype=bool)
    thresholds = np.full(probs.shape[1], 0.5)
    for j in range(probs.shape[1]):
        positives = int(gold[:, j].sum())
        if positives == 0:
            continue
        order = np.argsort(-probs[:, j], kind="stable")
        p, g = probs[order, j], gold[order, j]
        tp = np.cumsum(g)  # predicting the top k positive: tp[k-1] true positives
        k = np.arange(1, len(p) + 1)
        f1s = 2 * tp / (k + positives)
        cuts = np.flatnonzero(np.append(p[1:] < p[:-1], True))  # only where the next probability is lower
        best = cuts[np.argmax(f1s[cuts])]
        thresholds[j] = (p[best] + p[best + 1]) / 2 if best + 1 < len(p) else p[best] / 2
    return thresholds


# ----------------------------------------------------------------------------------------------------------------
# entity-level F1 for BIO tags (conlleval / seqeval default semantics)


def bio_parts(tag: str, where: str = "") -> tuple[str, str | None]:
    """("O", None), ("B", X) or ("I", X); any other tag is a DataError (entity F1 reads BIO tags)."""
    if tag == "O":
        return "O", None
    if len(tag) > 2 and tag[1] == "-" and tag[0] in "BI":
        return tag[0], tag[2:]
    raise DataError(f"tag {tag!r}{where} is not O, B-X or I-X (entity F1 reads BIO tags: convert IO or BILOU "
                    "tags to BIO)")


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tag sequence as (type, start, end_exclusive).

    An entity is a maximal run B-X I-X*. As in conlleval, an I-X at the start of the sentence or after O or after
    a tag of another type opens a new entity (so IOB1 files score the same way), and B-X always opens one.
    """
    spans, start, kind = set(), None, None
    for i, tag in enumerate(list(tags) + ["O"]):  # the sentinel O closes a trailing entity
        prefix, tag_kind = bio_parts(tag, f" at position {i}")
        continues = prefix == "I" and tag_kind == kind
        if kind is not None and not continues:
            spans.add((kind, start, i))
            kind = None
        if prefix in "BI" and not continues:
            start, kind = i, tag_kind
    return spans


def entity_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict:
    """Micro precision/recall/F1 over exact entity matches, plus the same per entity type under "per_type"."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> [correct, predicted, gold]
    for i, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        g, p = entity_spans(g), entity_spans(p)
        for kind, *_ in g & p:
            counts[kind][0] += 1
        for kind, *_ in p:
            counts[kind][1] += 1
        for kind, *_ in g:
            counts[kind][2] += 1

    def prf(correct, predicted, actual):
        precision = correct / predicted if predicted else 0.0
        recall = correct / actual if actual else 0.0
        f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f}

    total = [sum(c[k] for c in counts.values()) for k in range(3)]
    return {**prf(*total), "per_type": {kind: prf(*c) for kind, c in sorted(counts.items())}}


# ----------------------------------------------------------------------------------------------------------------
# SQuAD: the official v2.0 evaluation script's definitions (v1.1 is the same on answerable questions)


def normalize_answer(s: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (the official order)."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_PUNCT = set(string.punctuation)


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 of the normalized strings. Two empty answers (a correct no-answer) score 1."""
    pred_toks, gold_toks = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    same = sum((collections.Counter(pred_toks) & collections.Counter(gold_toks)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def squad_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                 na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict[str, float]:
    """The official SQuAD v2.0 evaluation, as percentages.

    gold: question id -> gold answer texts ([] for an unanswerable question). predictions: id -> answer text
    ("" = no answer). na_probs: id -> no-answer score (higher = more likely unanswerable; litebert's decoder gives
    the null-minus-best logit difference); a question counts as "no answer" when its score > na_prob_thresh.
    Returns exact, f1, total, HasAns_*/NoAns_* breakdowns when both kinds occur, and, when na_probs is given, the
    best threshold search: best_exact, best_exact_thresh, best_f1, best_f1_thresh. A question missing from
    predictions scores 0 (as in the v1.1 script; the v2.0 script drops it from the total).
    """
    has_ans = {qid: bool(answers) for qid, answers in gold.items()}
    missing = [qid for qid in gold if qid not in predictions]
    if missing:
        log.warning("squad_scores: %d of %d questions have no prediction (first: %s); they score 0",
                    len(missing), len(gold), missing[0])
    exact_raw, f1_raw = {}, {}
    for qid, answers in gold.items():
        # Gold answers that normalize to nothing are dropped; an unanswerable question's only gold is "".
        answers = [a for a in answers if normalize_answer(a)] or [""]
        if qid in predictions:
            exact_raw[qid] = max(exact_match(predictions[qid], a) for a in answers)
            f1_raw[qid] = max(token_f1(predictions[qid], a) for a in answers)
        else:
            exact_raw[qid] = f1_raw[qid] = 0.0
    probs = {qid: 0.0 for qid in gold} if na_probs is None else {qid: na_probs.get(qid, 0.0) for qid in gold}

    def thresholded(raw):  # a question predicted unanswerable scores 1 exactly when it is unanswerable
        return {qid: float(not has_ans[qid]) if probs[qid] > na_prob_thresh and qid in predictions else raw[qid]
                for qid in raw}  # one without a prediction scores 0 whatever the threshold

    def summary(exact, f1_, qids, prefix=""):
        return {f"{prefix}exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
                f"{prefix}f1": 100.0 * sum(f1_[q] for q in qids) / len(qids), f"{prefix}total": len(qids)}

    exact, f1_ = thresholded(exact_raw), thresholded(f1_raw)
    out = summary(exact, f1_, list(gold))
    for prefix, wanted in (("HasAns_", True), ("NoAns_", False)):
        qids = [qid for qid in gold if has_ans[qid] == wanted]
        if qids:
            out.update(summary(exact, f1_, qids, prefix))
    if na_probs is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            out[f"best_{name}"], out[f"best_{name}_thresh"] = _best_thresh(raw, predictions, probs, has_ans)
    return out


def _best_thresh(raw: Mapping[str, float], predictions: Mapping[str, str], probs: Mapping[str, float],
                 has_ans: Mapping[str, bool]) -> tuple[float, float]:
    """Sweep the threshold upward through the questions sorted by no-answer score (the official find_best_thresh).

    Start from "everything is no-answer" (score = number of unanswerable questions); letting question q answer
    gains its raw score if it has an answer, and loses 1 if it has none but a non-empty prediction. The best
    score is the official one; the threshold returned is one that gives back, when applied ("no answer" where
    the score is above it), the best any threshold reaches: the official sweep can peak inside a group of tied
    scores, which no threshold splits (the best reported is then above what the threshold gives), and reports
    0.0 for "abstain on all", which answers every question scoring at most 0 where these scores are logit
    differences, not probabilities. So it cuts only after a tied group, and below every score for "abstain on
    all". A question without a prediction scores 0 at every threshold, as in squad_scores."""
    answered = [q for q in probs if q in predictions]
    score = best = sum(not has_ans[q] for q in answered)
    order = sorted(answered, key=lambda q: probs[q])
    best_cut, best_thresh = score, (probs[order[0]] - 1.0 if order else 0.0)
    for i, qid in enumerate(order):
        if has_ans[qid]:
            score += raw[qid]
        elif predictions.get(qid):
            score -= 1
        best = max(best, score)
        if score > best_cut and (i + 1 == len(order) or probs[order[i + 1]] > probs[qid]):  # a group's end
            best_cut, best_thresh = score, probs[qid]
    return 100.0 * best / len(raw), best_thresh
