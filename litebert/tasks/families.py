"""Task families: one object per kind of task, owning everything that differs between kinds.

A family knows its head class, the label set it trains on, how examples (read from task files, or built from raw
inputs) become features, what a model's output means per feature (`scores`: arrays an ensemble can average), how
scores become predictions and metrics, the trivial baseline a model must beat, and the primary metric.
`finetune`, `evaluate`, `predict`, pipelines and ensembles call these methods and never ask what kind a task is:
adding a family is adding one class here and one entry in FAMILIES.

Pipelines (litebert.serving) use three more methods: `example` builds an unlabelled example from one raw
input, `load` the model a checkpoint directory holds for the family, and `answers` turns scores into one
structured answer per input (the pipeline presents it in transformers' output shapes). Two families exist for
pipelines only, on models that were not fine-tuned: MaskedLanguageModel (fill-mask) and Encoder (feature
extraction and sentence embeddings).

Calibration: a family may tune something on a split it is scored on (SQuAD v2.0's no-answer threshold, the
multi-label per-label thresholds). `score` returns what it tuned; fine-tuning saves it beside the best checkpoint
(`calibration.json`) and later scoring of another split (test) applies it instead of tuning on that split.
`score(..., calibration=None)` tunes on the split; `{}` scores it untuned (thresholds 0.5, no null threshold).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

import litebert.tasks.metrics as M  # not "from litebert.tasks import": that names the package, a cycle
from litebert.errors import ConfigError, DataError
from litebert.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from litebert.tasks.answers import Span, Spans, TokenScores, ranked
from litebert.tasks.features import (
    TextTagExample,
    covering,
    featurize_choices,
    featurize_classification,
    featurize_tags,
    featurize_text_tags,
    word_predictions,
)
from litebert.tasks.records import ChoiceExample, describe, label_list, nonblank, text_example
from litebert.tasks.squad import (
    QAExample,
    apply_null_threshold,
    decode_squad,
    evaluate_squad,
    featurize_squad,
    rarest_word_answers,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureSettings:
    """How examples become features: the token budget, and for span QA its windows and span cap."""

    max_length: int = 128
    doc_stride: int = 128  # QA: tokens between the starts of context windows
    max_query_length: int = 64  # QA: question tokens kept
    max_answer_length: int = 30  # QA: longest answer span decoded, in tokens


class Scored(NamedTuple):
    metrics: dict[str, Any]  # {} for an unlabelled split
    predictions: list  # one per example: class name, float, option index, label list, tag list, answer text
    calibration: dict[str, Any]  # what was tuned on this split ({} when nothing was)


def _softmax(x: torch.Tensor) -> np.ndarray:
    return torch.softmax(x.float(), -1).cpu().numpy()


class Family:
    """The interface, with the defaults most families share (see the module docstring)."""

    kind: str
    head: type
    label_type = "class"  # what a table's label cell holds: "class" (a name), "value" (a float), "set" (names)
    calibrates = False  # whether `score` tunes something on its split when given no calibration (None)

    def labels(self, task, train_examples: Sequence) -> list[str] | None:
        """Class names in id order, or None where the head has no classes of the task's choosing."""
        return None

    def config_overrides(self, labels: list[str] | None) -> dict[str, Any]:
        """What the head's AlbertConfig needs for this family and label set (num_labels, problem_type, ...)."""
        return {}

    def check_learnable(self, task, examples: Sequence, labels: list[str] | None, where: str) -> None:
        """DataError, before training, for training data this family's head cannot learn from."""

    def check_settings(self, max_length: int | None, max_query_length: int) -> None:
        """ConfigError, before any work, for feature settings this family cannot featurize with."""

    def primary_metric(self, task) -> str:
        return task.metrics[0]

    def featurize(self, examples: Sequence, tok, labels: list[str] | None, settings: FeatureSettings) -> list:
        raise NotImplementedError

    def scores(self, output, features: Sequence) -> list[np.ndarray]:
        """One array per feature from one batch's model output: what predictions are read from and what an
        ensemble averages (probabilities; QA's start/end logits, as the paper averaged them)."""
        return list(_softmax(output.logits))

    def score(self, task, examples: Sequence, features: Sequence, scores: Sequence[np.ndarray],
              labels: list[str] | None, settings: FeatureSettings, calibration: dict | None = None) -> Scored:
        raise NotImplementedError

    def baseline(self, task, train_examples: Sequence, eval_examples: Sequence) -> dict[str, Any]:
        """The score of what needs no model, on the eval examples."""
        return {}

    def example(self, raw: Any, index: int):
        """An unlabelled example from one raw input (pipelines, `predict --text`); ConfigError (one line, without
        the input's position, which the caller knows) for a malformed or empty one."""
        raise NotImplementedError

    def load(self, directory: str):
        """The model a checkpoint directory holds for this family (the head, on the fine-tuned weights)."""
        return self.head.from_pretrained(directory)

    def answers(self, examples: Sequence, features: Sequence, scores: Sequence[np.ndarray],
                labels: list[str] | None, settings: FeatureSettings, calibration: dict | None = None) -> list:
        """One structured answer per example for pipelines (Ranked, Span, ...), what `calibration` tuned
        applied; presenting it (transformers' dict shapes) is the pipeline's."""
        raise NotImplementedError


_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?")  # a class label that is a number (JSON 1, 1.0; a cell "1")


def _labelled(gold: Sequence) -> bool:
    return bool(gold) and all(g is not None for g in gold)


class SequenceClassification(Family):
    kind, head = "classification", AlbertForSequenceClassification

    def check_learnable(self, task, examples, labels, where):
        """One class (a 1-label head that scores "accuracy 1.0"), a named class with no example (a slice of
        --max-train-examples may miss one), or one whose every text is empty or blank is refused."""
        if labels is None:
            return
        if len(labels) < 2:
            raise DataError(f"{where}: every training example of task {task.name} has the label {labels[0]!r}: a "
                            "classifier needs at least two classes to learn from")
        if absent := sorted(set(labels).difference(ex.label for ex in examples), key=labels.index):
            raise DataError(f"{where}: class(es) {absent} of task {task.name} have no example among the "
                            f"{len(examples)} training examples read: train on more examples")
        texted = {ex.label for ex in examples if (ex.text_a or "").strip() or (ex.text_b or "").strip()}
        blank = [label for label in labels if label not in texted]
        if blank:
            raise DataError(f"{where}: every training text of class(es) {blank} is empty or blank: nothing tells "
                            "them apart from the others; fill or remove those rows")
        numbers = [label for label in labels if _NUMBER.fullmatch(label)]
        if numbers and len(numbers) < len(labels):  # 1 beside "neg"/"pos": a class of its own, made by a typo
            first = next(ex.id for ex in examples if ex.label in numbers)
            raise DataError(f"{where}: training label(s) {numbers} are numbers among the names "
                            f"{[x for x in labels if x not in numbers][:5]} (first: row {first}): each would be a "
                            "class of its own; write every label as a name, or every one as a number")

    def labels(self, task, train_examples):
        return list(task.labels) if task.labels else label_list(train_examples)

    def config_overrides(self, labels):
        return {"num_labels": len(labels), "id2label": dict(enumerate(labels))}

    def featurize(self, examples, tok, labels, settings):
        return featurize_classification(examples, tok, settings.max_length, labels)

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        """Class ids in the task's label order, not the model's: f1's positive class is the task's 1 (paraphrase)."""
        order = [*(task.labels or ()), *(name for name in labels if name not in (task.labels or ()))]
        preds = [order.index(labels[int(s.argmax())]) for s in scores]
        gold = [None if ex.label is None else order.index(str(ex.label)) for ex in examples]
        metrics = M.compute_metrics(task.metrics, preds, gold) if _labelled(gold) else {}
        return Scored(metrics, [order[p] for p in preds], {})

    def baseline(self, task, train_examples, eval_examples):
        counts: dict[str, int] = {}
        for ex in train_examples:
            counts[str(ex.label)] = counts.get(str(ex.label), 0) + 1
        majority = max(counts, key=counts.get)
        return {"method": "majority class", "majority_class": majority,
                "accuracy": float(np.mean([str(ex.label) == majority for ex in eval_examples]))}

    def example(self, raw, index):
        return text_example(raw, index)

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [ranked(labels, s, [int(s.argmax())]) for s in scores]


class Regression(SequenceClassification):
    kind, label_type = "regression", "value"
    check_learnable = Family.check_learnable  # a value per row, no classes to be missing

    def labels(self, task, train_examples):
        return None

    def config_overrides(self, labels):
        return {"num_labels": 1, "problem_type": "regression"}

    def scores(self, output, features):
        return list(output.logits.float().cpu().numpy())  # (1,) each: the predicted value

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        preds = [float(s[0]) for s in scores]
        gold = [ex.label for ex in examples]
        return Scored(M.compute_metrics(task.metrics, preds, gold) if _labelled(gold) else {}, preds, {})

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        name = labels[0] if labels else "LABEL_0"  # what transformers calls a regression head's one output
        return [ranked([name], s, [0]) for s in scores]

    def baseline(self, task, train_examples, eval_examples):
        mean = float(np.mean([ex.label for ex in train_examples]))
        gold = np.array([ex.label for ex in eval_examples], dtype=np.float64)
        return {"method": "training mean", "value": mean, "mse": float(np.mean((gold - mean) ** 2))}


class MultiLabelClassification(SequenceClassification):
    """Any number of classes per text: a sigmoid per class (BCE), a threshold per class tuned on dev.

    Saved with problem_type="multi_label_classification", so transformers' AlbertForSequenceClassification
    loads it as one too. The thresholds maximise each class's F1 on the split they are tuned on."""

    kind, label_type, calibrates = "multi_label", "set", True
    check_learnable = Family.check_learnable  # a set of labels per row: a row may rightly hold none

    def config_overrides(self, labels):
        return {**super().config_overrides(labels), "problem_type": "multi_label_classification"}

    def primary_metric(self, task):
        return "micro_f1"

    def scores(self, output, features):
        return list(torch.sigmoid(output.logits.float()).cpu().numpy())

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        probs = np.stack(scores) if len(scores) else np.zeros((0, len(labels)))
        gold = None if not examples or any(ex.label is None for ex in examples) else \
            np.array([[name in ex.label for name in labels] for ex in examples], dtype=bool)
        if calibration and "thresholds" in calibration:
            thresholds = np.asarray(calibration["thresholds"], dtype=np.float64)
            tuned = {}
        elif gold is not None and calibration is None:  # {}: scored as calibrated, with nothing tuned
            thresholds = M.tune_thresholds(probs, gold)
            tuned = {"thresholds": thresholds.tolist(), "labels": list(labels)}
        else:
            thresholds, tuned = np.full(len(labels), 0.5), {}
        pred = probs >= thresholds
        metrics = {} if gold is None else {**M.multi_label_scores(gold, pred),
                                           **{f"{k}@0.5": v for k, v in M.multi_label_scores(gold, probs >= 0.5)
                                              .items() if k == "micro_f1"}}
        return Scored(metrics, [[labels[j] for j in np.flatnonzero(row)] for row in pred], tuned)

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        """Every label's sigmoid, and the labels at or over their thresholds (dev-tuned, else 0.5)."""
        thresholds = np.asarray((calibration or {}).get("thresholds") or [0.5] * len(labels), dtype=np.float64)
        return [ranked(labels, s, np.flatnonzero(s >= thresholds), one=False) for s in scores]

    def baseline(self, task, train_examples, eval_examples):
        labels = label_list(train_examples)
        gold = np.array([[name in ex.label for name in labels] for ex in eval_examples], dtype=bool)
        prior = np.mean([[name in ex.label for name in labels] for ex in train_examples], axis=0)
        rng = np.random.default_rng(0)  # each label drawn with its training frequency: a seeded, fixed draw
        return {"all negative": M.multi_label_scores(gold, np.zeros_like(gold)),
                "label prior": M.multi_label_scores(gold, rng.random(gold.shape) < prior),
                "method": "all negative and label prior"}


class MultipleChoice(Family):
    kind, head = "multiple_choice", AlbertForMultipleChoice

    def featurize(self, examples, tok, labels, settings):
        return featurize_choices(examples, tok, settings.max_length)

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        preds = [int(s.argmax()) for s in scores]
        gold = [ex.label for ex in examples]
        return Scored(M.compute_metrics(task.metrics, preds, gold) if _labelled(gold) else {}, preds, {})

    def baseline(self, task, train_examples, eval_examples):
        return {"method": "chance", "accuracy": float(np.mean([1 / len(ex.options) for ex in eval_examples]))}

    def example(self, raw, index):
        shape = "{'question': str, 'options': [at least two strings], 'context': optional str}"
        if not (isinstance(raw, dict) and isinstance(raw.get("options"), list) and len(raw["options"]) >= 2):
            raise ConfigError(f"expected {shape}, got {describe(raw)}")
        unknown = sorted(set(raw) - {"question", "options", "context"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: expected {shape}")
        context = raw.get("context")
        return ChoiceExample(str(index), "" if context is None else nonblank(context, "context"),
                             nonblank(raw.get("question"), "question"),
                             [nonblank(o, f"option {j}") for j, o in enumerate(raw["options"])])

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [ranked(range(len(s)), s, [int(s.argmax())]) for s in scores]


class ExtractiveQA(Family):
    """SQuAD v1.1 and v2.0: spans decoded over every window of a context; v2.0's no-answer threshold is tuned on
    the split it is scored on, unless a calibration says it."""

    calibrates = True

    def check_settings(self, max_length, max_query_length):
        if max_length is not None and max_query_length + 3 >= max_length:  # [CLS] q [SEP] context [SEP]
            raise ConfigError(f"--max-query-length {max_query_length} + 3 special tokens leaves no room for "
                              f"context in --max-length {max_length}: lower --max-query-length or raise --max-length")

    kind, head = "qa", AlbertForQuestionAnswering

    def check_learnable(self, task, examples, labels, where):
        """Unlabelled questions (no answers field) would train as unanswerable ones: refused."""
        unlabelled = [ex.id for ex in examples if ex.answers is None]
        if unlabelled:
            raise DataError(f"{where}: {len(unlabelled)} of {len(examples)} training questions have no answers "
                            f"(first: id {unlabelled[0]!r}); an unanswerable one lists \"answers\": [] (or "
                            "is_impossible: true), an unlabelled one cannot train a QA head")

    def primary_metric(self, task):
        return "f1"

    def featurize(self, examples, tok, labels, settings):
        return featurize_squad(examples, tok, settings.max_length, settings.doc_stride, settings.max_query_length)

    def scores(self, output, features):
        both = torch.stack([output.start_logits, output.end_logits], 1).float().cpu().numpy()  # (B, 2, T)
        return [both[j, :, :len(f.input_ids)] for j, f in enumerate(features)]

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        decoded = decode_squad(examples, features, [s[0] for s in scores], [s[1] for s in scores],
                               max_answer_length=settings.max_answer_length)
        labelled = bool(examples) and all(ex.answers is not None for ex in examples)
        has_null = labelled and any(ex.is_impossible for ex in examples)
        threshold, tuned = None, {}
        if calibration and calibration.get("null_threshold") is not None:
            threshold = float(calibration["null_threshold"])
        elif has_null and calibration is None:  # {}: scored as calibrated, with no null threshold
            threshold = evaluate_squad(examples, decoded, None)["best_f1_thresh"]
            tuned = {"null_threshold": threshold}
        metrics = evaluate_squad(examples, decoded, threshold) if labelled else {}
        answers = apply_null_threshold(decoded, threshold)
        return Scored(metrics, [answers[ex.id] for ex in examples], tuned)

    def baseline(self, task, train_examples, eval_examples):
        """The passage word rarest in the training passages, or, where questions may have none (v2.0), no
        answer at all: whichever scores higher; none for unlabelled questions."""
        if any(ex.answers is None for ex in eval_examples):
            return {}
        gold = {ex.id: [a.text for a in ex.answers] for ex in eval_examples}
        rules = {"rarest passage word": rarest_word_answers(train_examples, eval_examples)}
        if any(ex.is_impossible for ex in eval_examples):
            rules["no answer"] = {ex.id: "" for ex in eval_examples}
        scores = {method: M.squad_scores(gold, answers) for method, answers in rules.items()}
        method = max(scores, key=lambda m: scores[m]["f1"])
        return {"method": method, "exact": scores[method]["exact"], "f1": scores[method]["f1"]}

    def example(self, raw, index):
        if not (isinstance(raw, dict) and "question" in raw and "context" in raw):
            raise ConfigError(f"expected {{'question': str, 'context': str}}, got {describe(raw)}")
        unknown = sorted(set(raw) - {"question", "context"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: expected {{'question': str, 'context': str}}")
        return QAExample(str(index), nonblank(raw["question"], "question"), nonblank(raw["context"], "context"),
                         [])

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        """The best span of each context (every valid span scored); no answer ("") where a calibrated v2.0
        null threshold says so. Offsets follow fast tokenizers: a bare "▁" covers its word's first character.
        The threshold was tuned on dev with the scoring decoder (`score`: the top-20 starts and ends, the task's
        span cap), which can pick another best span than this one: its abstention rate here may differ a little
        from the rate on dev."""
        features = [dataclasses.replace(f, offsets=[o if o is None else covering(o, examples[f.example_index].context)
                                                    for o in f.offsets]) for f in features]
        decoded = decode_squad(examples, features, [s[0] for s in scores], [s[1] for s in scores],
                               max_answer_length=settings.max_answer_length, exhaustive=True)
        threshold = (calibration or {}).get("null_threshold")
        out = []
        for ex in examples:
            p = decoded[ex.id]
            null = Span("", 0, 0, p.null_probability)
            best = null if threshold is not None and p.null_diff > float(threshold) or not p.text else \
                Span(p.text, p.start, p.end, p.probability)
            out.append(Spans(best, [Span(*s) for s in p.spans], null))
        return out


class TokenTagging(Family):
    """Word-level tags (BIO NER): each word is tagged by its first sub-token; scored by entity-level F1."""

    kind, head = "tagging", AlbertForTokenClassification

    def labels(self, task, train_examples):
        labels = list(task.labels) if task.labels else sorted({t for ex in train_examples for t in (ex.tags or [])})
        for tag in labels:  # refused before training, not at the first evaluation
            M.bio_parts(tag, f" in the tag set of {task.name}")
        return labels

    def config_overrides(self, labels):
        return {"num_labels": len(labels), "id2label": dict(enumerate(labels))}

    def primary_metric(self, task):
        return "f1"

    def featurize(self, examples, tok, labels, settings):
        if examples and all(isinstance(ex, TextTagExample) for ex in examples):  # raw text, from a pipeline
            return featurize_text_tags(examples, tok, settings.max_length)
        return featurize_tags(examples, tok, settings.max_length, labels)

    def scores(self, output, features):
        probs = _softmax(output.logits)  # (B, T, C)
        return [probs[j, :len(f.input_ids)] for j, f in enumerate(features)]

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        preds = [word_predictions(f.word_ids, s.argmax(-1), len(ex.words), labels)
                 for ex, f, s in zip(examples, features, scores)]
        gold = [ex.tags for ex in examples]
        cut = [len(ex.words) - 1 - max((w for w in f.word_ids if w is not None), default=-1)
               for ex, f in zip(examples, features)]
        if sum(cut):  # predicted "O" for want of tokens, not by the model: say so rather than score it silently
            log.warning("%d of %d words (in %d of %d sentences) lie past --max-length %d: predicted O, and scored "
                        "so against their gold tags; raise --max-length to tag them", sum(cut),
                        sum(len(ex.words) for ex in examples), sum(c > 0 for c in cut), len(examples),
                        settings.max_length)
        return Scored(M.entity_f1(gold, preds) if _labelled(gold) else {}, preds, {})

    def baseline(self, task, train_examples, eval_examples):
        outside = [["O"] * len(ex.words) for ex in eval_examples]  # no entities: the commonest tag everywhere
        return {"method": "every word O", **M.entity_f1([ex.tags for ex in eval_examples], outside)}

    def example(self, raw, index):
        if isinstance(raw, list) and raw and all(isinstance(w, str) and w and not re.search(r"\s", w) for w in raw):
            raw = " ".join(raw)
        elif not isinstance(raw, str):
            raise ConfigError(f"expected a string or a list of words (non-empty, without spaces), got "
                              f"{describe(raw)}")
        return TextTagExample(str(index), raw.split(), text=raw)  # "" has no entities, as in transformers

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [[TokenScores(t, f.input_ids[t], *f.offsets[t], f.word_ids[t], s[t])
                 for t in range(len(f.input_ids)) if f.offsets[t] is not None]
                for f, s in zip(features, scores)]


FAMILIES: dict[str, Family] = {f.kind: f for f in (SequenceClassification(), Regression(),
                                                   MultiLabelClassification(), MultipleChoice(), ExtractiveQA(),
                                                   TokenTagging())}


def family_of(task) -> Family:
    """The family of a registered or custom Task (its `kind`)."""
    if task.kind not in FAMILIES:
        raise ConfigError(f"task {task.name}: unknown kind {task.kind!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[task.kind]
