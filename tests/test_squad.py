"""SQuAD-format QA: readers on official-format files, windowed featurization, span decoding, scoring."""

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from fixtures.tokenizers import FakeTokenizer, train_tiny_tokenizer
from paths import SHARED_DATA

from litebert.finetune import FinetuneConfig, feature_settings
from litebert.tasks import squad as S
from litebert.tasks.families import FAMILIES
from litebert.tasks.features import collate
from litebert.tasks.squad import rarest_word_answers

QA = FAMILIES["qa"]
from litebert.tasks import TASKS, DataError, read_task

FIX = Path(__file__).parent / "fixtures" / "squad"
WORDNET_QA = SHARED_DATA / "tasks" / "wordnet_qa"


# ----------------------------------------------------------------------------------------------------------------
# reading


def test_read_v11_nested_json():
    examples = S.read_squad(FIX / "dev-v1.1.json")
    assert [e.id for e in examples] == ["56be4db0acb8001400a502ec", "56be4db0acb8001400a502ed",
                                        "56be4db0acb8001400a502ee", "w1"]
    first = examples[0]
    assert first.title == "Super_Bowl_50" and [a.text for a in first.answers] == ["Denver Broncos"] * 2 + ["Denver"]
    assert all(e.context[a.start: a.start + len(a.text)] == a.text for e in examples for a in e.answers)
    assert examples[2].answers[0].text == "24\u201310" and not any(e.is_impossible for e in examples)


def test_read_v20_and_flat_jsonl():
    v2 = S.read_squad(FIX / "dev-v2.0.json")
    assert [e.is_impossible for e in v2] == [False, False, True]
    assert v2[2].answers == []  # plausible_answers are not answers
    flat = S.read_squad(FIX / "flat.jsonl")
    assert flat[0].answers == [S.Answer("Warsaw", 0)] and flat[1].is_impossible


def test_a_question_without_answers_is_unlabelled_not_unanswerable(tmp_path):
    """A test file may carry no answers: such questions are not scored as unanswerable (no made-up EM/F1, no
    threshold tuned against empty golds) and cannot train; answers with empty lists, or is_impossible, still
    mean unanswerable."""
    flat = tmp_path / "test.jsonl"
    flat.write_text("".join(json.dumps({"id": f"t{i}", "context": "Warsaw is the capital of Poland.",
                                        "question": "What is the capital?"}) + "\n" for i in range(3)))
    nested = tmp_path / "test.json"
    nested.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Warsaw is in Poland.", "qas": [
        {"id": "a", "question": "q"}, {"id": "b", "question": "q", "is_impossible": True}]}]}]}))
    assert [e.answers for e in S.read_squad(nested)] == [None, []]
    examples = S.read_squad(flat)
    assert all(e.answers is None and not e.is_impossible for e in examples)
    tok = FakeTokenizer(piece=10)
    settings = feature_settings(FinetuneConfig(), TASKS["squad-v2.0"], 16)
    feats = S.featurize_squad(examples, tok, max_length=16, doc_stride=4, max_query_length=8)
    outputs = [np.stack(logits_for(feats[i:i + 1], {}, null=1.0)[0:2])[:, 0] for i in range(len(feats))]
    metrics, predictions, tuned = QA.score(TASKS["squad-v2.0"], examples, feats, outputs, None, settings)
    assert metrics == {} and tuned == {} and len(predictions) == 3
    assert QA.baseline(TASKS["squad-v2.0"], examples, examples) == {}
    with pytest.raises(DataError, match=r"3 of 3 training questions have no answers \(first: id 't0'\)"):
        QA.check_learnable(TASKS["squad-v2.0"], examples, None, str(flat))


def test_gzipped_squad_files_read_like_the_plain_ones(tmp_path):
    for name in ("dev-v2.0.json", "flat.jsonl"):
        with gzip.open(tmp_path / f"{name}.gz", "wb") as f:
            f.write((FIX / name).read_bytes())
        assert S.read_squad(tmp_path / f"{name}.gz") == S.read_squad(FIX / name)


def test_mismatched_span_duplicate_id_bad_json(tmp_path):
    ctx = "Warsaw is the capital of Poland."
    data = {"data": [{"title": "t", "paragraphs": [{"context": ctx, "qas": [
        {"id": "a", "question": "q", "answers": [{"text": "Poland", "answer_start": 3}]},
        {"id": "b", "question": "q", "answers": [{"text": "Poland", "answer_start": ctx.index("Poland")}]},
        {"id": "b", "question": "q", "answers": []}]}]}]}
    nested = tmp_path / "train.json"
    nested.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"train\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]: answer 'Poland' does not "
                                        r"match the context at 3 \('saw is'\)"):
        S.read_squad(nested)
    kept = S.read_squad(nested, errors="skip")
    assert [e.id for e in kept] == ["b"] and len(kept.skipped) == 2 and "duplicate id 'b'" in kept.skipped[1]
    flat = tmp_path / "rows.jsonl"
    rows = [{"id": k, "context": ctx, "question": "q", "answers": {"text": ["Warsaw"], "answer_start": [s]}}
            for k, s in (("x", 0), ("y", 1))]
    flat.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"rows\.jsonl:2: answer 'Warsaw' does not match"):
        S.read_squad(flat)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"title": }]}')
    with pytest.raises(DataError, match=r"broken\.json:2: invalid JSON"):
        S.read_squad(broken)


def test_an_article_or_paragraph_without_its_key_is_a_counted_bad_record(tmp_path):
    """A misspelt "paragraphs" or "qas" key read as "no questions" dropped them without a count: the dev score
    then said nothing of the questions it never saw."""
    def paragraph(name, key="qas"):
        return {"context": f"{name} is big.", key: [{"id": name, "question": "q",
                                                       "answers": [{"text": name, "answer_start": 0}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [{"title": "a", "paragraphs": [paragraph("Warsaw")]},
                                         {"title": "b", "paragraph": [paragraph("Paris")]},
                                         {"title": "c", "paragraphs": [paragraph("Rome", key="questions")]},
                                         {"title": "d", "paragraphs": []}]}))
    kept = S.read_squad(path, errors="skip")
    assert [e.id for e in kept] == ["Warsaw"] and kept.records == 3
    assert "data[1]: an article should be" in kept.skipped[0]
    assert "data[2].paragraphs[0]: a paragraph should be" in kept.skipped[1]
    with pytest.raises(DataError, match=r"dev\.json: data\[1\]: an article should be \{title, paragraphs"):
        S.read_squad(path)


# ----------------------------------------------------------------------------------------------------------------
# featurization

CONTEXT = " ".join(f"w{i}" for i in range(30))  # 30 one-token words with FakeTokenizer(piece=10)
ANSWER = "w17 w18"


def windowed(question="where is it", answers=(ANSWER,), **kw):
    tok = FakeTokenizer(piece=10)
    ex = S.QAExample("e", question, CONTEXT, [S.Answer(a, CONTEXT.index(a)) for a in answers])
    kw = {"max_length": 16, "doc_stride": 4, "max_query_length": 8, **kw}
    return tok, ex, S.featurize_squad([ex], tok, **kw)


def test_windows_positions_and_offsets():
    tok, ex, feats = windowed()
    # 16 - 3 question tokens - 3 specials = 10 context tokens a window, stepping by 4: starts 0 4 8 12 16 20
    assert len(feats) == 6 and all(len(f.input_ids) == 16 for f in feats)
    assert [f.offsets[5][0] for f in feats] == [CONTEXT.index(f"w{s} ") for s in (0, 4, 8, 12, 16, 20)]
    f = feats[3]
    assert f.input_ids[:5] == [tok.cls_id, *tok.encode("where is it", add_special_tokens=False), tok.sep_id]
    assert f.token_type_ids == [0] * 5 + [1] * 11
    positions = [(f.start_position, f.end_position) for f in feats]
    assert positions == [(0, 0), (0, 0), (0, 0), (5 + 5, 5 + 6), (5 + 1, 5 + 2), (0, 0)]  # windows at 12 and 16
    for f in feats:
        if f.start_position:
            assert ex.context[f.offsets[f.start_position][0]: f.offsets[f.end_position][1]] == ANSWER
    # every context token has exactly one window where it has the most context; w17 gets window 12's
    assert sum(sum(f.max_context) for f in feats) == 30
    assert feats[3].max_context[10] and not feats[4].max_context[6]
    batch = collate(feats, tok.pad_id)
    assert batch["start_positions"].tolist() == [0, 0, 0, 10, 6, 0] and batch["input_ids"].shape == (6, 16)


def test_question_truncation_unanswerable_and_bad_lengths():
    _, _, feats = windowed(question="a b c d e f g h i j k l", max_query_length=4, max_length=12)
    assert feats[0].input_ids.index(3) == 5  # [CLS] + 4 question tokens, then [SEP]
    _, _, feats = windowed(answers=())
    assert all((f.start_position, f.end_position) == (0, 0) for f in feats)
    with pytest.raises(ValueError, match="leaves no room for context"):
        windowed(max_query_length=13)
    with pytest.raises(ValueError, match="doc_stride"):
        windowed(doc_stride=0)


# ----------------------------------------------------------------------------------------------------------------
# decoding


def logits_for(feats, values, null=0.0, base=-50.0):
    """Per-window (start, end) logits: `base` everywhere (hopeless), [CLS] at `null`, and {(window, pos): value}
    for starts in `values["start"]` and ends in `values["end"]`."""
    start, end = np.full((len(feats), 16), base), np.full((len(feats), 16), base)
    start[:, 0] = end[:, 0] = null
    for (w, pos), v in values.get("start", {}).items():
        start[w, pos] = v
    for (w, pos), v in values.get("end", {}).items():
        end[w, pos] = v
    return start, end


# Window 3 holds w12 .. w21 at positions 5 .. 14, window 4 w16 .. w25. A token has its most context where
# min(tokens left, tokens right) is largest: w15 .. w18 in window 3, w20 in window 4.
GOLD = {"start": {(3, 10): 3.0}, "end": {(3, 11): 3.0}}  # w17 .. w18, score 6


@pytest.mark.parametrize("decoy,kw,expected", [
    ({}, {}, ANSWER),
    ({"start": {(3, 2): 20.0}, "end": {(3, 3): 20.0}}, {}, ANSWER),  # a span inside the question
    ({"start": {(3, 12): 10.0}, "end": {(3, 9): 10.0}}, {}, ANSWER),  # end (w16) before start (w19)
    ({"start": {(3, 8): 10.0}, "end": {(3, 14): 10.0}}, {"max_answer_length": 3}, ANSWER),  # w15 .. w21/w18: too long
    ({"start": {(3, 8): 10.0}, "end": {(3, 14): 10.0}}, {}, "w15 w16 w17 w18 w19 w20 w21"),  # now it fits
    ({"start": {(1, 5): 10.0}, "end": {(2, 14): 10.0}}, {}, ANSWER),  # start and end in different windows
    ({"start": {(4, 6): 9.0}, "end": {(4, 7): 9.0}}, {}, ANSWER),  # w17 has its most context in window 3, not 4
    ({"start": {(4, 9): 9.0}, "end": {(4, 9): 9.0}}, {}, "w20"),  # w20's most context is in window 4
])
def test_decode_picks_the_best_valid_span_and_maps_back_to_text(decoy, kw, expected):
    _, ex, feats = windowed()
    values = {k: {**GOLD[k], **decoy.get(k, {})} for k in ("start", "end")}
    pred = S.decode_squad([ex], feats, *logits_for(feats, values), **kw)["e"]
    assert pred.text == expected
    assert pred.null_diff == pytest.approx(0.0 - pred.nbest[0][1])
    assert (ANSWER, pytest.approx(6.0)) in pred.nbest and len({t for t, _ in pred.nbest}) == len(pred.nbest)


def test_the_span_cap_defaults_to_the_tasks():
    """The QA family decodes with the task's cap unless --max-answer-length says otherwise: wordnet_qa's answers
    are single words (8 tokens), SQuAD keeps its 30."""
    _, ex, feats = windowed()
    long_span = {"start": {**GOLD["start"], (3, 8): 10.0}, "end": {**GOLD["end"], (3, 14): 10.0}}  # 7 tokens
    start, end = logits_for(feats, long_span)
    outputs = [np.stack([s, e]) for s, e in zip(start, end)]
    assert TASKS["wordnet_qa"].max_answer_length == 8 and TASKS["squad-v1.1"].max_answer_length == 30
    capped = dataclasses.replace(TASKS["wordnet_qa"], max_answer_length=3)
    for task, cap, expected in [(capped, None, ANSWER), (TASKS["squad-v1.1"], None, "w15 w16 w17 w18 w19 w20 w21"),
                                (TASKS["squad-v1.1"], 3, ANSWER), (capped, 30, "w15 w16 w17 w18 w19 w20 w21")]:
        settings = feature_settings(FinetuneConfig(max_answer_length=cap), task, 16)
        metrics, predictions, _ = QA.score(task, [ex], feats, outputs, None, settings)
        assert predictions == [expected]
        assert metrics["exact"] == (100.0 if expected == ANSWER else 0.0)


def test_null_answer_threshold_and_scores():
    _, ex, feats = windowed()
    start, end = logits_for(feats, {"start": {(3, 10): -3.0}, "end": {(3, 11): -3.0}}, null=1.0)  # span -6, null 2
    pred = S.decode_squad([ex], feats, start, end, max_answer_length=4)
    assert pred["e"].text == ANSWER and pred["e"].null_diff == pytest.approx(2.0 - (-6.0))
    assert S.apply_null_threshold(pred, 0.0) == {"e": ""}
    assert S.apply_null_threshold(pred, 10.0) == {"e": ANSWER} == S.apply_null_threshold(pred, None)
    scores = S.evaluate_squad([ex], pred)
    assert scores["exact"] == 100.0 and scores["best_exact_thresh"] == pytest.approx(8.0)
    assert S.evaluate_squad([ex], pred, threshold=0.0)["exact"] == 0.0


def test_v2_threshold_tuned_on_dev():
    examples = S.read_squad(FIX / "dev-v2.0.json")
    preds = {"n1": S.QAPrediction("France", -3.0, []), "n2": S.QAPrediction("the Normans", 1.0, []),
             "n3": S.QAPrediction("The Normans", 2.0, [])}
    out = S.evaluate_squad(examples, preds)  # never abstaining: n1 right, n2 and n3 wrong
    assert out["exact"] == pytest.approx(100 / 3) and out["NoAns_exact"] == 0.0
    assert out["best_exact"] == pytest.approx(200 / 3) and out["best_exact_thresh"] == -3.0  # abstain on n2, n3
    tuned = S.evaluate_squad(examples, preds, threshold=out["best_exact_thresh"])
    assert tuned["exact"] == pytest.approx(out["best_exact"])


# ----------------------------------------------------------------------------------------------------------------
# end to end on wordnet_qa: oracle logits at the gold positions give back the gold answers


def oracle_scores(examples, tok, **kw):
    feats = S.featurize_squad(examples, tok, **kw)
    width = max(len(f.input_ids) for f in feats)
    start, end = np.full((len(feats), width), -10.0), np.full((len(feats), width), -10.0)
    for k, f in enumerate(feats):
        start[k, f.start_position] += 20
        end[k, f.end_position] += 20
    return S.evaluate_squad(examples, S.decode_squad(examples, feats, start, end), threshold=0.0), feats


@pytest.mark.skipif(not WORDNET_QA.exists(), reason="shared task data not present")
def test_wordnet_qa_oracle_round_trip_fake_tokenizer():
    examples = read_task("wordnet_qa", WORDNET_QA, "dev")
    scores, feats = oracle_scores(examples, FakeTokenizer(piece=100), max_length=48, doc_stride=16, max_query_length=24)
    assert len(feats) > len(examples)  # contexts (~35 words) really are split into windows
    # one answer, "corrupt" in "corrupt...from", is not a whitespace word: the fake tokenizer cannot cut it out
    assert scores["exact"] == pytest.approx(99.9)


@pytest.fixture(scope="module")
def real_tok(tmp_path_factory):
    return train_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.mark.skipif(not WORDNET_QA.exists(), reason="shared task data not present")
def test_wordnet_qa_oracle_round_trip_real_tokenizer(real_tok):
    examples = read_task("wordnet_qa", WORDNET_QA, "dev")[:200]
    # Windows (~60 tokens) overlap by ~45, so the window where an answer's first token has the most context (the
    # only one decoding starts spans in, as in BERT/ALBERT) holds the whole answer, as SQuAD's 384/128 windows do.
    scores, feats = oracle_scores(examples, real_tok, max_length=96, doc_stride=16, max_query_length=32)
    assert len(feats) > len(examples)
    assert scores["exact"] == 100.0


def test_the_qa_baseline_answers_with_the_passage_word_rarest_in_training_passages():
    train = [S.QAExample("t1", "q", "The cat sat on the mat.", []), S.QAExample("t2", "q", "The dog sat here.", [])]
    dev = [S.QAExample("d1", "q", "The dog chased a cat.", [S.Answer("chased", 8)]),  # 'chased', 'a': 0 passages
           S.QAExample("d2", "q", "The mat sat.", [S.Answer("mat", 4)]),  # mat 1 < sat 2 < the 2
           S.QAExample("d3", "q", "Sat sat, the cat's cat-flap.", [S.Answer("cat-flap", 20)])]
    assert rarest_word_answers(train, dev) == {"d1": "chased", "d2": "mat", "d3": "cat's"}
    baseline = QA.baseline(TASKS["wordnet_qa"], train, dev)
    # d3 scores 0: the official normalisation deletes punctuation, "cats" vs "catflap" share no token
    assert baseline["exact"] == pytest.approx(200 / 3) and baseline["f1"] == pytest.approx(200 / 3)
    # SQuAD v2.0: where most questions have no answer, answering nothing is the baseline to beat.
    unanswerable = [S.QAExample(f"n{i}", "q", "The dog ran.", []) for i in range(3)]
    assert QA.baseline(TASKS["squad-v2.0"], train, dev[:1] + unanswerable) == {
        "method": "no answer", "exact": 75.0, "f1": 75.0}
    assert QA.baseline(TASKS["squad-v2.0"], train, dev + unanswerable[:1])["method"] == "rarest passage word"
