"""Metrics against hand-worked values and against a transcription of the official SQuAD evaluation scripts."""

import collections
import math
import re
import string

import numpy as np
import pytest

from litebert.tasks import metrics as M

# ----------------------------------------------------------------------------------------------------------------
# classification / regression, from the definitions

PREDS, LABELS = [1, 1, 0, 0, 1, 0], [1, 0, 0, 1, 1, 0]  # TP=2 FP=1 FN=1 TN=2


def test_binary_metrics_by_hand():
    tp, fp, fn, tn = 2, 1, 1, 2
    assert M.accuracy(PREDS, LABELS) == pytest.approx(4 / 6)
    assert M.f1(PREDS, LABELS) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert M.mcc(PREDS, LABELS) == pytest.approx((tp * tn - fp * fn) / denominator)
    assert M.mcc([1, 1, 1], [0, 1, 1]) == 0.0  # constant predictor: undefined -> 0


def test_macro_f1_by_hand():
    labels, preds = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]
    # class 0: P=1/2 R=1/2 F=1/2; class 1: P=2/3 R=1 F=4/5; class 2: P=1 R=1/2 F=2/3
    assert M.macro_f1(preds, labels) == pytest.approx((1 / 2 + 4 / 5 + 2 / 3) / 3)


def test_correlations_by_formula():
    x, y = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([2.0, 4.0, 5.0, 4.0, 9.0])
    xc, yc = x - x.mean(), y - y.mean()
    assert M.pearson(x, y) == pytest.approx((xc * yc).sum() / math.sqrt((xc ** 2).sum() * (yc ** 2).sum()))
    ranks_y = np.array([1, 2.5, 4, 2.5, 5])  # the tie (4, 4) shares the average rank 2.5
    rc, xr = ranks_y - ranks_y.mean(), x - x.mean()
    assert M.spearman(x, y) == pytest.approx((xr * rc).sum() / math.sqrt((xr ** 2).sum() * (rc ** 2).sum()))


def test_masked_accuracy_and_registry():
    assert M.masked_accuracy([5, 6, 7, 8], [5, -100, 0, -100]) == 0.5
    expected = {"accuracy": pytest.approx(4 / 6), "f1": pytest.approx(2 / 3)}
    assert M.compute_metrics(["accuracy", "f1"], PREDS, LABELS) == expected
    with pytest.raises(ValueError, match="unknown metric"):
        M.compute_metrics(["bleu"], PREDS, LABELS)
    with pytest.raises(ValueError, match="shape"):
        M.accuracy([1, 2], [1])


# ----------------------------------------------------------------------------------------------------------------
# entity-level F1 (conlleval semantics)


def test_entity_spans_conlleval_rules():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-PER", "B-ORG", "I-ORG"]
    # I-LOC after O opens an entity; B-LOC after I-LOC opens another; I-PER after a LOC opens a PER.
    assert M.entity_spans(tags) == {("PER", 0, 2), ("LOC", 3, 5), ("LOC", 5, 6), ("PER", 6, 7), ("ORG", 7, 9)}
    assert M.entity_spans(["I-MISC"]) == {("MISC", 0, 1)}
    with pytest.raises(ValueError, match="not O, B-X or I-X"):
        M.entity_spans(["PER"])


def test_entity_f1_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-MISC"]]
    # gold: PER(0,2) LOC(3,4) | ORG(0,1); pred: PER(0,2) ORG(3,4) | ORG(0,1) MISC(1,2)
    # -> 2 correct of 4 predicted and 3 gold
    out = M.entity_f1(gold, pred)
    p, r = 2 / 4, 2 / 3
    assert out["precision"] == pytest.approx(p) and out["recall"] == pytest.approx(r)
    assert out["f1"] == pytest.approx(2 * p * r / (p + r))
    assert out["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert out["per_type"]["LOC"]["recall"] == 0.0


# ----------------------------------------------------------------------------------------------------------------
# SQuAD: hand-worked examples


def test_squad_normalization_and_token_f1_by_hand():
    assert M.normalize_answer("The  Cat, sat!\n") == "cat sat"
    assert M.normalize_answer("an apple a day") == "apple day"
    assert M.exact_match("An apple.", "apple") == 1
    assert M.token_f1("the cat sat", "a cat sat down") == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))  # P=1 R=2/3
    assert M.token_f1("cat cat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)  # counts are clipped: 1 common token
    assert M.token_f1("dog", "cat") == 0.0
    assert M.token_f1("", "") == 1.0 and M.token_f1("", "cat") == 0.0


# ----------------------------------------------------------------------------------------------------------------
# SQuAD: the official scripts, transcribed compactly as references
# (evaluate-v2.0.py and evaluate-v1.1.py), with the originals' structure and names, on the nested dataset JSON.


def _ref_normalize(s):
    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _ref_get_tokens(s):
    return _ref_normalize(s).split() if s else []


def _ref_compute_f1(a_gold, a_pred):
    gold_toks, pred_toks = _ref_get_tokens(a_gold), _ref_get_tokens(a_pred)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def _ref_v2_eval(dataset, preds, na_probs=None, na_prob_thresh=1.0):
    na_probs = na_probs or {k: 0.0 for k in preds}
    qas = [qa for article in dataset for p in article["paragraphs"] for qa in p["qas"]]
    qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for qa in qas}
    exact_raw, f1_raw = {}, {}
    for qa in qas:
        gold = [a["text"] for a in qa["answers"] if _ref_normalize(a["text"])] or [""]
        if qa["id"] not in preds:
            continue
        exact_raw[qa["id"]] = max(int(_ref_normalize(a) == _ref_normalize(preds[qa["id"]])) for a in gold)
        f1_raw[qa["id"]] = max(_ref_compute_f1(a, preds[qa["id"]]) for a in gold)

    def apply_no_ans_threshold(scores):
        return {q: float(not qid_to_has_ans[q]) if na_probs[q] > na_prob_thresh else s for q, s in scores.items()}

    def make_eval_dict(exact, f1, qid_list=None):
        qid_list = list(exact) if qid_list is None else qid_list
        total = len(qid_list)
        return collections.OrderedDict([("exact", 100.0 * sum(exact[k] for k in qid_list) / total),
                                        ("f1", 100.0 * sum(f1[k] for k in qid_list) / total), ("total", total)])

    def find_best_thresh(scores):
        num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
        cur_score = best_score = num_no_ans
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            if qid_to_has_ans[qid]:
                diff = scores[qid]
            else:
                diff = -1 if preds[qid] else 0
            cur_score += diff
            if cur_score > best_score:
                best_score, best_thresh = cur_score, na_probs[qid]
        return 100.0 * best_score / len(scores), best_thresh

    exact_t, f1_t = apply_no_ans_threshold(exact_raw), apply_no_ans_threshold(f1_raw)
    out = make_eval_dict(exact_t, f1_t)
    has = [k for k, v in qid_to_has_ans.items() if v]
    no = [k for k, v in qid_to_has_ans.items() if not v]
    for prefix, ids in (("HasAns", has), ("NoAns", no)):
        if ids:
            out.update({f"{prefix}_{k}": v for k, v in make_eval_dict(exact_t, f1_t, ids).items()})
    out["best_exact"], out["best_exact_thresh"] = find_best_thresh(exact_raw)
    out["best_f1"], out["best_f1_thresh"] = find_best_thresh(f1_raw)
    return dict(out)


def _ref_v1_eval(dataset, predictions):
    def f1_score(prediction, ground_truth):
        prediction_tokens = _ref_normalize(prediction).split()
        ground_truth_tokens = _ref_normalize(ground_truth).split()
        common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            return 0
        precision, recall = num_same / len(prediction_tokens), num_same / len(ground_truth_tokens)
        return (2 * precision * recall) / (precision + recall)

    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                ground_truths = [a["text"] for a in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += max(_ref_normalize(prediction) == _ref_normalize(gt) for gt in ground_truths)
                f1 += max(f1_score(prediction, gt) for gt in ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _dataset():
    """Answerable questions with several gold answers, unanswerable ones, and a gold that normalizes to ""."""
    def qa(qid, *answers):
        return {"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0} for a in answers]}

    return [{"title": "t", "paragraphs": [{"context": "...", "qas": [
        qa("a", "Denver Broncos", "the Denver Broncos"), qa("b", "24-10"), qa("c", "in 1998", "1998", "the year 1998"),
        qa("d", "Carolina Panthers"), qa("e", "Super Bowl 50", "Super Bowl"), qa("f", "a", "Warsaw"), qa("g", "The"),
        qa("n1"), qa("n2"), qa("n3")]}]}]


PREDS_V2 = {"a": "Broncos", "b": "24\u201310", "c": "1998!", "d": "the panthers of Carolina", "e": "",
            "f": "Warsaw city", "g": "the", "n1": "", "n2": "Denver", "n3": "something else"}
NA_PROBS = {"a": 0.1, "b": 0.7, "c": 0.2, "d": 0.4, "e": 0.9, "f": 0.3, "g": 0.5, "n1": 0.95, "n2": 0.8, "n3": 0.35}


def _gold(dataset):
    qas = [qa for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    return {qa["id"]: [a["text"] for a in qa["answers"]] for qa in qas}


@pytest.mark.parametrize("thresh", [1.0, 0.5, 0.25])
def test_squad_v2_matches_official_script(thresh):
    dataset = _dataset()
    ref = _ref_v2_eval(dataset, PREDS_V2, NA_PROBS, thresh)
    ours = M.squad_scores(_gold(dataset), PREDS_V2, NA_PROBS, thresh)
    assert ours.keys() == ref.keys()
    for key in ref:
        assert ours[key] == pytest.approx(ref[key]), key
    assert 0 < ref["NoAns_total"] < ref["total"]  # the breakdown is really exercised


def test_squad_v2_without_na_probs_matches_official_defaults():
    dataset = _dataset()
    ref = _ref_v2_eval(dataset, PREDS_V2)
    ours = M.squad_scores(_gold(dataset), PREDS_V2)
    assert {k: ours[k] for k in ours} == pytest.approx({k: ref[k] for k in ours})
    assert "best_f1" not in ours  # the threshold search needs no-answer scores


def test_squad_v1_matches_official_script():
    dataset = _dataset()
    for paragraph in dataset[0]["paragraphs"]:
        # v1.1: every question answerable, no gold that normalizes to ""
        paragraph["qas"] = [qa for qa in paragraph["qas"] if qa["answers"] and qa["id"] not in "fg"]
    preds = {k: v for k, v in PREDS_V2.items() if k in _gold(dataset)}
    ref = _ref_v1_eval(dataset, preds)
    ours = M.squad_scores(_gold(dataset), preds)
    assert ours["exact"] == pytest.approx(ref["exact_match"]) and ours["f1"] == pytest.approx(ref["f1"])


@pytest.mark.parametrize("scores", [
    {"a": -2.0, "n1": -1.0, "n2": -3.0, "n3": -0.5},  # abstaining on all is best: no threshold of 0.0 does it
    {"a": 1.0, "n1": 1.0, "n2": 1.0, "n3": 3.0},  # the sweep peaks inside the tie at 1.0 (a first, then n1, n2)
])
def test_the_tuned_no_answer_threshold_gives_back_a_best_score(scores):
    """No-answer scores here are logit differences (negative too) and may tie: the threshold returned, applied
    as the scores are ("no answer" above it), scores the best that any threshold reaches (the official sweep's,
    where no tie splits it)."""
    gold = {"a": ["red"], "n1": [], "n2": [], "n3": []}
    predictions = {"a": "red", "n1": "x", "n2": "y", "n3": "z"}  # every question answered, only a rightly
    out = M.squad_scores(gold, predictions, scores)
    applied = M.squad_scores(gold, predictions, scores, out["best_f1_thresh"])["f1"]
    reachable = max(M.squad_scores(gold, predictions, scores, t)["f1"]
                    for t in [min(scores.values()) - 1, *scores.values()])
    assert applied == reachable
    assert applied == 75.0 and out["best_f1"] >= applied  # a peak inside a tie (100 here) is not reachable


def test_squad_missing_prediction_scores_zero():
    out = M.squad_scores({"a": ["x"], "b": ["y"]}, {"a": "x"})
    assert out["exact"] == 50.0 and out["total"] == 2


def test_an_unanswerable_question_without_a_prediction_scores_zero_at_every_threshold():
    """Its no-answer score defaulted to 0.0, so under a negative threshold it was 'predicted unanswerable' and
    scored 1, and the best-threshold sweep credited it from the start."""
    gold, predictions = {"q1": [], "q2": ["Paris"]}, {"q2": "Paris"}
    out = M.squad_scores(gold, predictions, {"q2": -2.0}, na_prob_thresh=-1.0)
    assert out["exact"] == 50.0 and out["NoAns_exact"] == 0.0
    assert out["best_exact"] == 50.0
