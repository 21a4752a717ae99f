"""Extractive question answering in the SQuAD format: reading, windowed featurization, span decoding, scoring.

The flow: read_squad -> featurize_squad (a long context becomes several overlapping windows, each remembering
which context characters its tokens cover) -> the QA head's start/end logits per window -> decode_squad
(best span over all windows, mapped back to the original context text, plus the v2.0 null-score difference)
-> evaluate_squad (the official EM/F1, and the no-answer threshold that maximises them on dev).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from litebert.tasks.metrics import squad_scores
from litebert.tasks.records import (
    BadRecord,
    DataError,
    Examples,
    collect,
    data_suffix,
    json_record,
    nonblank_lines,
    open_text,
)


class Answer(NamedTuple):
    text: str
    start: int  # character offset into the context


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    # [] = unanswerable (v2.0); dev/test sets list several gold answers; None = unlabelled (the record has no
    # answers at all, as a test file may not): not to be scored, or trained, as "unanswerable"
    answers: list[Answer] | None
    title: str = ""

    @property
    def is_impossible(self) -> bool:
        return self.answers == []

    @property
    def gold(self):
        return self.answers

    @property
    def texts(self) -> list[str]:
        return [self.question, self.context]


# ----------------------------------------------------------------------------------------------------------------
# reading


def read_squad(path: os.PathLike | str, errors: str = "raise") -> Examples:
    """QAExamples from SQuAD v1.1/v2.0 JSON ({"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]})
    or from flat JSON Lines ({id, context, question, answers: {text: [...], answer_start: [...]}}, as HF datasets
    and wordnet_qa store it). Every answer must be the context's text at answer_start, and ids must be unique."""
    path = Path(path)
    seen: set[str] = set()
    if data_suffix(path) == ".jsonl":
        return collect(nonblank_lines(path), lambda where, line: _parse_flat(line, seen), path, errors)
    data = _load_squad_data(path)
    return collect(_nested_questions(path, data), lambda where, raw: _parse_nested(raw, seen), path, errors)


def _qa_example(ident, question, context, texts, starts, title: str, seen: set[str]) -> QAExample:
    """One checked QAExample, shared by both layouts so they agree on what a valid record is: each answer must
    be the context's text at its offset (texts and starts None: an unlabelled question), and an id already in
    `seen` is a duplicate (the id is then added)."""
    if not isinstance(question, str) or not isinstance(context, str):
        raise BadRecord("question and context must be strings")
    if texts is None and starts is None:  # unlabelled
        return _checked_id(QAExample(str(ident), question, context, None, title), seen)
    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
        raise BadRecord(f"answers need equally long text and answer_start lists, got {texts!r} / {starts!r}")
    answers = []
    for text, start in zip(texts, starts):
        if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
            raise BadRecord(f"answer {text!r} at {start!r}: need a string and an integer offset")
        found = context[start: start + len(text)]
        if found != text:
            raise BadRecord(f"answer {text!r} does not match the context at {start} ({found!r})")
        answers.append(Answer(text, start))
    return _checked_id(QAExample(str(ident), question, context, answers, title), seen)


def _checked_id(example: QAExample, seen: set[str]) -> QAExample:
    if example.id in seen:
        raise BadRecord(f"duplicate id {example.id!r}")
    seen.add(example.id)
    return example


def _parse_flat(line: str, seen: set[str]) -> QAExample:
    """One JSON Lines record in the HF datasets layout; answers with empty lists mean unanswerable, no answers
    field (or null) an unlabelled question."""
    r = json_record(line)
    answers = r.get("answers")
    if answers is not None and not isinstance(answers, dict):
        raise BadRecord("answers should be {text: [...], answer_start: [...]}")
    if "id" not in r or "question" not in r or "context" not in r:
        raise BadRecord("a record needs id, question and context")
    if answers is None:
        return _qa_example(r["id"], r["question"], r["context"], None, None, "", seen)
    return _qa_example(r["id"], r["question"], r["context"], answers.get("text", []), answers.get("answer_start", []),
                       "", seen)


def _load_squad_data(path: Path):
    """The top-level "data" value of a SQuAD JSON file; a file that is not JSON, or has no "data", is one
    DataError for the whole file (there are no records to count or skip)."""
    try:
        with open_text(path) as f:
            return json.load(f)["data"]
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except (KeyError, TypeError):
        raise DataError(f"{path}:1: not SQuAD JSON (no top-level \"data\" list)") from None


def _nested_questions(path: Path, data):
    """(where, (title, paragraph, qa)) for every question of the nested layout. A malformed article or paragraph
    is yielded as a BadRecord in place of its questions, so `collect` counts or raises it like any bad record:
    one without its "paragraphs" or "qas" key too (a misspelt key read as no questions dropped them uncounted)."""
    if not isinstance(data, list):
        yield f"{path}: data", BadRecord(f'"data" should be a list of articles, got {type(data).__name__}')
        return
    for i, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            yield f"{path}: data[{i}]", BadRecord("an article should be {title, paragraphs: [...]}, got "
                                                  f"{_shown(article)}")
            continue
        for j, paragraph in enumerate(paragraphs):
            qas = paragraph.get("qas") if isinstance(paragraph, dict) else None
            if not isinstance(qas, list):
                yield f"{path}: data[{i}].paragraphs[{j}]", BadRecord(
                    f"a paragraph should be {{context, qas: [...]}}, got {_shown(paragraph)}")
                continue
            for k, qa in enumerate(qas):
                yield f"{path}: data[{i}].paragraphs[{j}].qas[{k}]", (article.get("title", ""), paragraph, qa)


def _parse_nested(raw, seen: set[str]) -> QAExample:
    """One question of the nested layout (or the structural BadRecord `_nested_questions` put in its place);
    is_impossible wins over any answers listed, and a question with neither is unlabelled."""
    if isinstance(raw, BadRecord):
        raise raw
    title, paragraph, qa = raw
    if not isinstance(qa, dict) or "id" not in qa or "question" not in qa:
        raise BadRecord("a question needs id and question")
    answers = [] if qa.get("is_impossible") else qa.get("answers")
    if answers is None:
        return _qa_example(qa["id"], qa["question"], paragraph.get("context"), None, None, title, seen)
    if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
        raise BadRecord("answers should be a list of {text, answer_start}")
    return _qa_example(qa["id"], qa["question"], paragraph.get("context"), [a.get("text") for a in answers],
                       [a.get("answer_start") for a in answers], title, seen)


def _shown(value, width: int = 60) -> str:
    """A bad value as a message shows it: its type and the start of its JSON."""
    text = json.dumps(value, ensure_ascii=False)
    return f"{type(value).__name__} {text[:width]}{'...' if len(text) > width else ''}"


# ----------------------------------------------------------------------------------------------------------------
# featurization


@dataclass
class QAFeature:
    """One window: [CLS] question [SEP] context window [SEP], unpadded."""

    input_ids: list[int]
    token_type_ids: list[int]
    start_position: int  # answer's first token; 0 ([CLS]) when unanswerable or not inside this window
    end_position: int
    example_index: int
    offsets: list[tuple[int, int] | None] = field(repr=False)  # token -> (start, end) in the context; None off it
    max_context: list[bool] = field(repr=False)  # this window gives the token its most context (BERT's rule)


def featurize_squad(examples: Sequence[QAExample], tok, max_length: int = 384, doc_stride: int = 128,
                    max_query_length: int = 64) -> list[QAFeature]:
    """Windows over each context, stepping by doc_stride tokens (at most a window), after the question cut to
    max_query_length; each window fills what the question leaves of max_length.

    The answer (the first gold answer) is located in tokens through the tokenizer's character offsets: its first
    token is the first one ending after answer_start, its last the last one starting before the answer's end.
    """
    if max_query_length + 3 >= max_length:  # so that every (truncated) question leaves room for context
        raise ValueError(f"max_query_length {max_query_length} + 3 special tokens leaves no room for context "
                         f"in max_length {max_length}")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}")
    features = []
    for i, ex in enumerate(examples):
        q_ids = tok.encode(ex.question, add_special_tokens=False)[:max_query_length]
        c_ids, c_offsets = tok.encode_with_offsets(ex.context)
        max_window = max_length - len(q_ids) - 3  # [CLS] q [SEP] window [SEP]
        tok_start = tok_end = None
        if ex.answers:
            a_start, a_end = ex.answers[0].start, ex.answers[0].start + len(ex.answers[0].text)
            inside = [t for t, (s, e) in enumerate(c_offsets) if s < a_end and e > a_start]
            if inside:
                tok_start, tok_end = inside[0], inside[-1]

        windows, start = [], 0
        while True:
            length = min(len(c_ids) - start, max_window)
            windows.append((start, length))
            if start + length >= len(c_ids):
                break
            start += min(length, doc_stride)
        # For each context token, the window where it has the most context on its shorter side (BERT's
        # _check_is_max_context); decoding only starts spans there, so overlaps are not scored twice.
        best = [(-math.inf, -1)] * len(c_ids)
        for w, (start, length) in enumerate(windows):
            for t in range(start, start + length):
                score = min(t - start, start + length - 1 - t) + 0.01 * length
                if score > best[t][0]:
                    best[t] = (score, w)

        prefix = [tok.cls_id, *q_ids, tok.sep_id]
        for w, (start, length) in enumerate(windows):
            ids = prefix + c_ids[start: start + length] + [tok.sep_id]
            types = [0] * len(prefix) + [1] * (length + 1)
            offsets = [None] * len(prefix) + list(c_offsets[start: start + length]) + [None]
            max_context = [False] * len(prefix) + [best[t][1] == w for t in range(start, start + length)] + [False]
            s_pos = e_pos = 0
            if tok_start is not None and start <= tok_start and tok_end < start + length:
                s_pos, e_pos = tok_start - start + len(prefix), tok_end - start + len(prefix)
            features.append(QAFeature(ids, types, s_pos, e_pos, i, offsets, max_context))
    return features


# ----------------------------------------------------------------------------------------------------------------
# decoding and scoring


@dataclass
class QAPrediction:
    text: str  # the best non-null span ("" when no valid span exists)
    null_diff: float  # null score (min over windows of start[0] + end[0]) minus the best span's score
    nbest: list[tuple[str, float]]  # the best distinct span texts with their start + end logit scores
    start: int = 0  # the best span's character offsets in the context: text == context[start:end]
    end: int = 0
    probability: float = 0.0  # p(start) * p(end) in the best span's window (softmax over its context and [CLS])
    null_probability: float = 1.0  # p([CLS]) * p([CLS]) in the window giving the null score (exhaustive: the least)
    spans: tuple = ()  # the nbest spans as (text, start, end, probability), best first (pipelines' top_k)


def decode_squad(examples: Sequence[QAExample], features: Sequence[QAFeature], start_logits: Sequence,
                 end_logits: Sequence, n_best: int = 20, max_answer_length: int = 30,
                 exhaustive: bool = False) -> dict[str, QAPrediction]:
    """Best answer spans from per-window start/end logits ((num_features, T) or one ragged row per feature).

    A span is (start, end) with start <= end, both on context tokens, at most max_answer_length tokens, starting
    where its window gives it the most context; its score is start_logit + end_logit, and its text is the
    original context between the tokens' character offsets. The null score is [CLS]'s start + end; the
    difference null - best feeds the v2.0 threshold (predict "no answer" when it exceeds the threshold).
    Candidates are the spans between the n_best highest start and end logits of each window (BERT's
    run_squad shortcut, kept for its scores); `exhaustive` scores every valid span instead, so the best span
    is the best one, as pipelines answer. Pipelines also read the best span's character offsets and its
    probability in its window, as transformers' question-answering pipeline scored answers: softmax over the
    window's context tokens and [CLS]. With `exhaustive`, spans of different windows are ranked by that
    probability and the null is the least probable [CLS] of any window, as that pipeline ranks them (a logit sum
    is not comparable across windows whose softmax denominators differ; the pipeline's scores are).
    """
    if not len(features) == len(start_logits) == len(end_logits):
        raise ValueError(f"{len(features)} features but {len(start_logits)}/{len(end_logits)} logit rows")
    by_example: dict[int, list[int]] = {}
    for f, feature in enumerate(features):
        by_example.setdefault(feature.example_index, []).append(f)
    predictions = {}
    for i, ex in enumerate(examples):
        candidates, rank, null, null_probability = {}, {}, math.inf, 1.0
        spans = {}  # text -> (start char, end char, probability) of its best-ranked occurrence
        for f in by_example.get(i, []):
            feature, n = features[f], len(features[f].input_ids)
            start = np.asarray(start_logits[f], dtype=np.float64)[:n]  # (T,) without the batch's padding
            end = np.asarray(end_logits[f], dtype=np.float64)[:n]
            p_start, p_end = _window_softmax(start, feature.offsets), _window_softmax(end, feature.offsets)
            window_null = float(p_start[0] * p_end[0])
            if start[0] + end[0] < null:
                null = start[0] + end[0]
                null_probability = window_null if not exhaustive else null_probability
            if exhaustive:
                null_probability = min(null_probability, window_null)
            for s, e in _candidate_spans(feature, start, end, n_best, max_answer_length, exhaustive):
                text = ex.context[feature.offsets[s][0]: feature.offsets[e][1]]
                score, probability = float(start[s] + end[e]), float(p_start[s] * p_end[e])
                if (probability if exhaustive else score) > rank.get(text, -math.inf):
                    candidates[text], rank[text] = score, probability if exhaustive else score
                    spans[text] = (feature.offsets[s][0], feature.offsets[e][1], probability)
        nbest = sorted(candidates.items(), key=lambda kv: -rank[kv[0]])[:n_best]
        best_text, best_score = nbest[0] if nbest else ("", -math.inf)
        char_start, char_end, probability = spans.get(best_text, (0, 0, 0.0))
        predictions[ex.id] = QAPrediction(best_text, float(null - best_score), nbest, char_start, char_end,
                                          probability, null_probability,
                                          tuple((text, *spans[text]) for text, _ in nbest))
    return predictions


def _candidate_spans(feature: QAFeature, start: np.ndarray, end: np.ndarray, n_best: int, max_answer_length: int,
                     exhaustive: bool) -> list[tuple[int, int]]:
    """(start, end) token pairs of one window worth scoring: both on context tokens, start where the window gives
    it the most context, 0 <= end - start < max_answer_length. Exhaustive: the n_best best-scoring of all such
    pairs (which holds the best span); else the valid pairs among the n_best best starts and ends."""
    if not exhaustive:
        return [(s, e) for s in np.argsort(-start, kind="stable")[:n_best]
                if feature.offsets[s] is not None and feature.max_context[s]
                for e in np.argsort(-end, kind="stable")[:n_best]
                if feature.offsets[e] is not None and 0 <= e - s < max_answer_length]
    context = np.array([o is not None for o in feature.offsets[: len(start)]])
    can_start = context & np.array(feature.max_context[: len(start)], dtype=bool)
    length = np.arange(len(end))[None, :] - np.arange(len(start))[:, None]  # (T, T): end - start
    valid = can_start[:, None] & context[None, :] & (length >= 0) & (length < max_answer_length)
    s_idx, e_idx = np.nonzero(valid)
    best = np.argsort(-(start[s_idx] + end[e_idx]), kind="stable")[:n_best]
    return list(zip(s_idx[best].tolist(), e_idx[best].tolist()))


def _window_softmax(logits: np.ndarray, offsets: Sequence) -> np.ndarray:
    """(T,) probabilities over the tokens a window can answer with: its context tokens and [CLS] (position 0)."""
    allowed = np.array([t == 0 or o is not None for t, o in enumerate(offsets[: len(logits)])])
    shifted = np.where(allowed, logits - logits[allowed].max(), -np.inf)
    weights = np.exp(shifted)
    return weights / weights.sum()


def apply_null_threshold(predictions: Mapping[str, QAPrediction], threshold: float | None) -> dict[str, str]:
    """id -> answer text, "" (no answer) where null_diff > threshold; threshold None never abstains (v1.1)."""
    return {qid: "" if threshold is not None and p.null_diff > threshold else p.text
            for qid, p in predictions.items()}


def evaluate_squad(examples: Sequence[QAExample], predictions: Mapping[str, QAPrediction],
                   threshold: float | None = None) -> dict[str, float]:
    """The official SQuAD scores (metrics.squad_scores) of decoded predictions at the given null threshold (None:
    always answer, as for v1.1), plus best_exact/best_f1 and the thresholds achieving them (best_f1_thresh is
    the one to use on test for v2.0)."""
    gold = {ex.id: [a.text for a in ex.answers] for ex in examples}
    texts = {qid: p.text for qid, p in predictions.items()}
    na = {qid: p.null_diff for qid, p in predictions.items()}
    return squad_scores(gold, texts, na, math.inf if threshold is None else threshold)


_WORD = re.compile(r"\w+(?:[-'\u2019]\w+)*")


def rarest_word_answers(train_examples: Sequence[QAExample], eval_examples: Sequence[QAExample]) -> dict[str, str]:
    """Span QA's "majority class": answer each question with the passage word that occurs in fewest training
    passages (an IDF pick; ties go to the first). Answers are often a passage's rarest word (on wordnet_qa this
    beats a random word by 4x), so a fine-tuned model must beat this, not chance."""
    passages: dict[str, int] = {}
    for context in {ex.context for ex in train_examples}:
        for word in {w.lower() for w in _WORD.findall(context)}:
            passages[word] = passages.get(word, 0) + 1
    return {ex.id: min(_WORD.findall(ex.context) or [""], key=lambda w: passages.get(w.lower(), 0))
            for ex in eval_examples}
