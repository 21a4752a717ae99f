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
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np
import torch

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object
from litebert.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                            AlbertForTokenClassification, model_class)
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel, encoder_of
import litebert.tasks.metrics as M  # not "from litebert.tasks import": that names the package, a cycle
from litebert.tasks.features import (Feature, collate, featurize_choices, featurize_classification, featurize_tags,
                                     word_predictions)
from litebert.tokenizer import SPECIALS
from litebert.tasks.records import ChoiceExample, TagExample, TextExample, label_list
from litebert.tasks.squad import (QAExample, apply_null_threshold, decode_squad, evaluate_squad,
                                  featurize_squad)


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


# What `Family.answers` gives pipelines, one per input.

class LabelScore(NamedTuple):
    label: str | int  # a class name; an option's index for multiple choice
    score: float  # probability (sigmoid per label for multi-label), or the value for regression


class Ranked(NamedTuple):
    """A classifier's answer: every class best first, and the ones the family predicts."""

    ranked: list[LabelScore]
    predicted: list[LabelScore]  # the top class; for multi-label, every label over its threshold
    one: bool  # exactly one class is always predicted (then a pipeline shows it alone by default)


class Span(NamedTuple):
    """An extractive answer: context[start:end] == answer; "" with start = end = 0 for no answer."""

    answer: str
    start: int
    end: int
    score: float  # p(start) * p(end) in its window; for no answer, p([CLS]) * p([CLS])


class TokenScores(NamedTuple):
    """One token of a tagged text (special tokens left out)."""

    index: int  # position in the model's input ([CLS] is 0)
    id: int
    start: int  # characters of the text it covers; a bare "▁" piece covers its word's first character, as
    end: int  # fast tokenizers report it
    word: int | None  # which whitespace-separated word of the text (None: a bare "▁", which covers none)
    probs: np.ndarray  # (num_labels,)


class MaskFill(NamedTuple):
    input_ids: list[int]
    positions: list[int]  # where the [MASK] tokens are
    probs: np.ndarray  # (num_masks, vocab_size)


def _softmax(x: torch.Tensor) -> np.ndarray:
    return torch.softmax(x.float(), -1).cpu().numpy()


def _ranked(names: Sequence, scores: np.ndarray, predicted: Sequence[int], one: bool = True) -> Ranked:
    order = sorted(range(len(scores)), key=lambda j: -scores[j])  # stable: ties keep the class order
    pick = sorted(predicted, key=lambda j: -scores[j])
    return Ranked([LabelScore(names[j], float(scores[j])) for j in order],
                  [LabelScore(names[j], float(scores[j])) for j in pick], one)


class Family:
    """The interface, with the defaults most families share (see the module docstring)."""

    kind: str
    head: type
    label_type = "class"  # what a table's label cell holds: "class" (a name), "value" (a float), "set" (names)

    def labels(self, task, train_examples: Sequence) -> list[str] | None:
        """Class names in id order, or None where the head has no classes of the task's choosing."""
        return None

    def config_overrides(self, labels: list[str] | None) -> dict[str, Any]:
        """What the head's AlbertConfig needs for this family and label set (num_labels, problem_type, ...)."""
        return {}

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


def _labelled(gold: Sequence) -> bool:
    return bool(gold) and all(g is not None for g in gold)


def _nonblank(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what} should be a string, got {type(value).__name__}")
    if not value.strip():
        raise ConfigError(f"{what} is empty")
    return value


def _text_example(raw: Any, index: int) -> TextExample:
    """A string, a (text, text_pair) pair, or {"text": ..., "text_pair": ...} as transformers' pipelines take."""
    if isinstance(raw, str):
        return TextExample(str(index), _nonblank(raw, "the text"))
    if isinstance(raw, dict) and "text" in raw:
        unknown = sorted(set(raw) - {"text", "text_pair"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: a text pair is {{'text', 'text_pair'}}")
        pair = raw.get("text_pair")
        return TextExample(str(index), _nonblank(raw["text"], "text"),
                           None if pair is None else _nonblank(pair, "text_pair"))
    if isinstance(raw, (list, tuple)) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        return TextExample(str(index), _nonblank(raw[0], "the text"), _nonblank(raw[1], "the text pair"))
    raise ConfigError(f"expected a string, a pair of strings or {{'text', 'text_pair'}}, got {type(raw).__name__}")


class SequenceClassification(Family):
    kind, head = "classification", AlbertForSequenceClassification

    def labels(self, task, train_examples):
        return list(task.labels) if task.labels else label_list(train_examples)

    def config_overrides(self, labels):
        return {"num_labels": len(labels), "id2label": dict(enumerate(labels))}

    def featurize(self, examples, tok, labels, settings):
        return featurize_classification(examples, tok, settings.max_length, labels)

    def score(self, task, examples, features, scores, labels, settings, calibration=None):
        preds = [int(s.argmax()) for s in scores]
        gold = [None if ex.label is None else labels.index(str(ex.label)) for ex in examples]
        metrics = M.compute_metrics(task.metrics, preds, gold) if _labelled(gold) else {}
        return Scored(metrics, [labels[p] for p in preds], {})

    def baseline(self, task, train_examples, eval_examples):
        counts: dict[str, int] = {}
        for ex in train_examples:
            counts[str(ex.label)] = counts.get(str(ex.label), 0) + 1
        majority = max(counts, key=counts.get)
        return {"method": "majority class", "majority_class": majority,
                "accuracy": float(np.mean([str(ex.label) == majority for ex in eval_examples]))}

    def example(self, raw, index):
        return _text_example(raw, index)

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [_ranked(labels, s, [int(s.argmax())]) for s in scores]


class Regression(SequenceClassification):
    kind, label_type = "regression", "value"

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
        return [_ranked([name], s, [0]) for s in scores]

    def baseline(self, task, train_examples, eval_examples):
        mean = float(np.mean([ex.label for ex in train_examples]))
        gold = np.array([ex.label for ex in eval_examples], dtype=np.float64)
        return {"method": "training mean", "value": mean, "mse": float(np.mean((gold - mean) ** 2))}


class MultiLabelClassification(SequenceClassification):
    """Any number of classes per text: a sigmoid per class (BCE), a threshold per class tuned on dev.

    Saved with problem_type="multi_label_classification", so transformers' AlbertForSequenceClassification
    loads it as one too. The thresholds maximise each class's F1 on the split they are tuned on."""

    kind, label_type = "multi_label", "set"

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
        elif gold is not None:
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
        return [_ranked(labels, s, np.flatnonzero(s >= thresholds), one=False) for s in scores]

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
            raise ConfigError(f"expected {shape}, got {_describe(raw)}")
        unknown = sorted(set(raw) - {"question", "options", "context"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: expected {shape}")
        context = raw.get("context")
        return ChoiceExample(str(index), "" if context is None else _nonblank(context, "context"),
                             _nonblank(raw.get("question"), "question"),
                             [_nonblank(o, f"option {j}") for j, o in enumerate(raw["options"])])

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [_ranked(range(len(s)), s, [int(s.argmax())]) for s in scores]


class ExtractiveQA(Family):
    """SQuAD v1.1 and v2.0: spans decoded over every window of a context; v2.0's no-answer threshold is tuned on
    the split it is scored on, unless a calibration says it."""

    kind, head = "qa", AlbertForQuestionAnswering

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
        has_null = any(not ex.answers for ex in examples)
        threshold, tuned = None, {}
        if calibration and calibration.get("null_threshold") is not None:
            threshold = float(calibration["null_threshold"])
        elif has_null and labelled:
            threshold = evaluate_squad(examples, decoded, None)["best_f1_thresh"]
            tuned = {"null_threshold": threshold}
        metrics = evaluate_squad(examples, decoded, threshold) if labelled else {}
        answers = apply_null_threshold(decoded, threshold)
        return Scored(metrics, [answers[ex.id] for ex in examples], tuned)

    def baseline(self, task, train_examples, eval_examples):
        """The passage word rarest in the training passages, or, where questions may have none (v2.0), no
        answer at all: whichever scores higher."""
        gold = {ex.id: [a.text for a in ex.answers] for ex in eval_examples}
        rules = {"rarest passage word": rarest_word_answers(train_examples, eval_examples)}
        if any(not ex.answers for ex in eval_examples):
            rules["no answer"] = {ex.id: "" for ex in eval_examples}
        scores = {method: M.squad_scores(gold, answers) for method, answers in rules.items()}
        method = max(scores, key=lambda m: scores[m]["f1"])
        return {"method": method, "exact": scores[method]["exact"], "f1": scores[method]["f1"]}

    def example(self, raw, index):
        if not (isinstance(raw, dict) and "question" in raw and "context" in raw):
            raise ConfigError(f"expected {{'question': str, 'context': str}}, got {_describe(raw)}")
        unknown = sorted(set(raw) - {"question", "context"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: expected {{'question': str, 'context': str}}")
        return QAExample(str(index), _nonblank(raw["question"], "question"), _nonblank(raw["context"], "context"),
                         [])

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        """The best span of each context (every valid span scored); no answer ("") where a calibrated v2.0
        null threshold says so. Offsets follow fast tokenizers: a bare "▁" covers its word's first character."""
        features = [dataclasses.replace(f, offsets=[o if o is None else covering(o, examples[f.example_index].context)
                                                    for o in f.offsets]) for f in features]
        decoded = decode_squad(examples, features, [s[0] for s in scores], [s[1] for s in scores],
                               max_answer_length=settings.max_answer_length, exhaustive=True)
        threshold = (calibration or {}).get("null_threshold")
        out = []
        for ex in examples:
            p = decoded[ex.id]
            if threshold is not None and p.null_diff > float(threshold) or not p.text:
                out.append(Span("", 0, 0, p.null_probability))
            else:
                out.append(Span(p.text, p.start, p.end, p.probability))
        return out


def _describe(raw: Any) -> str:
    return f"an object with keys {sorted(raw)}" if isinstance(raw, dict) else type(raw).__name__


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


def covering(span: tuple[int, int], text: str) -> tuple[int, int]:
    """A token's characters as fast tokenizers report them: the empty span of a bare "▁" piece (litebert's
    tokenizer gives it the start of the next word) covers that word's first character."""
    s, e = span
    return (s, e) if e > s else (s, min(s + 1, len(text)))


@dataclass
class TextTagExample(TagExample):
    """A sentence to tag as it was typed: its words are its whitespace-separated spans."""

    text: str = ""


@dataclass
class TextTagFeature(Feature):
    offsets: list = field(default_factory=list, repr=False)  # token -> (start, end) in the text; None: special


def featurize_text_tags(examples: Sequence[TextTagExample], tok, max_length: int) -> list[TextTagFeature]:
    """[CLS] text [SEP] with each token's characters in the text and its word (the same ids as featurize_tags
    gives the words joined by spaces: ALBERT's normalisation collapses whitespace)."""
    specials = set(SPECIALS.values())
    features = []
    for i, ex in enumerate(examples):
        ids, spans = tok.encode_with_offsets(ex.text)
        words = [m.span() for m in re.finditer(r"\S+", ex.text)]
        ends = [e for _, e in words]
        offsets, word_ids = [], []
        for s, e in spans[: max_length - 2]:
            j = bisect.bisect_right(ends, s)  # the first word ending after the token starts; as featurize_tags
            word_ids.append(j if j < len(words) and words[j][0] < e else None)  # a bare "▁" is in no word
            offsets.append(None if ex.text[s:e] in specials else covering((s, e), ex.text))  # "[MASK]" typed
        ids = [tok.cls_id, *ids[: max_length - 2], tok.sep_id]
        features.append(TextTagFeature(ids, [0] * len(ids), None, i, [None, *word_ids, None],
                                       [None, *offsets, None]))
    return features


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
        return Scored(M.entity_f1(gold, preds) if _labelled(gold) else {}, preds, {})

    def baseline(self, task, train_examples, eval_examples):
        outside = [["O"] * len(ex.words) for ex in eval_examples]  # no entities: the commonest tag everywhere
        return {"method": "every word O", **M.entity_f1([ex.tags for ex in eval_examples], outside)}

    def example(self, raw, index):
        if isinstance(raw, list) and raw and all(isinstance(w, str) and w and not re.search(r"\s", w) for w in raw):
            raw = " ".join(raw)
        elif not isinstance(raw, str):
            raise ConfigError(f"expected a string or a list of words (non-empty, without spaces), got "
                              f"{_describe(raw)}")
        text = _nonblank(raw, "the text")
        return TextTagExample(str(index), text.split(), text=text)

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [[TokenScores(t, f.input_ids[t], *f.offsets[t], f.word_ids[t], s[t])
                 for t in range(len(f.input_ids)) if f.offsets[t] is not None]
                for f, s in zip(features, scores)]


@dataclass
class MaskFeature(Feature):
    mask_positions: list[int] = field(default_factory=list)


class MaskedLanguageModel(Family):
    """Fill-mask on a pretrained model: the MLM head's distribution at each [MASK] of a text. For pipelines
    only: nothing is fine-tuned or scored."""

    kind, head = "masked_lm", AlbertForMaskedLM
    mask = SPECIALS["mask_token"]

    def example(self, raw, index):
        text = _nonblank(raw, "the text")
        if self.mask not in text:
            raise ConfigError(f"no {self.mask} in the text: fill-mask predicts the tokens at {self.mask}")
        return TextExample(str(index), text)

    def load(self, directory):
        """The checkpoint's own class when it has the MLM head (pretraining checkpoints are AlbertForPreTraining),
        so that nothing is reported unused; a fine-tuned head has no MLM weights left."""
        config = AlbertConfig.load(directory)
        cls = model_class(config)
        if cls not in (AlbertForMaskedLM, AlbertForPreTraining):
            raise ConfigError(f"{directory} holds an {cls.__name__}, without the masked-LM head fill-mask needs; "
                              "use a pretrained checkpoint (AlbertForPreTraining or AlbertForMaskedLM)")
        return cls.from_pretrained(directory)

    def featurize(self, examples, tok, labels, settings):
        features = []
        for i, ex in enumerate(examples):
            ids = tok.encode(ex.text_a, max_length=settings.max_length)
            positions = [t for t, token in enumerate(ids) if token == tok.mask_id]
            if not positions:
                raise ConfigError(f"input {i}: its {self.mask} is cut off by max_length {settings.max_length}")
            features.append(MaskFeature(ids, [0] * len(ids), None, i, None, positions))
        return features

    def scores(self, output, features):
        logits = output.logits if hasattr(output, "logits") else output.prediction_logits  # AlbertForPreTraining
        return [_softmax(logits[j, f.mask_positions]) for j, f in enumerate(features)]  # (num_masks, V) each

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [MaskFill(f.input_ids, f.mask_positions, s) for f, s in zip(features, scores)]


class Encoder(Family):
    """The encoder's last hidden states: every token's vector (pooling None), or one vector per text, the mean
    over its tokens ([CLS] and [SEP] included, as sentence-transformers does) or the [CLS] vector. For
    pipelines only."""

    kind, head = "encoding", AlbertModel
    POOLING = ("mean", "cls")

    def __init__(self, pooling: str | None = None):
        if pooling is not None and pooling not in self.POOLING:
            raise ConfigError(f"pooling must be one of {self.POOLING}, got {pooling!r}")
        self.pooling = pooling

    def example(self, raw, index):
        return _text_example(raw, index)

    def load(self, directory):
        """The encoder of whatever the checkpoint holds (a head's `albert`), loaded without unused weights."""
        return encoder_of(model_class(AlbertConfig.load(directory)).from_pretrained(directory))

    def featurize(self, examples, tok, labels, settings):
        return featurize_classification(examples, tok, settings.max_length, None)

    def scores(self, output, features):
        hidden = output.last_hidden_state.float().cpu().numpy()  # (B, T, H)
        return [hidden[j, :len(f.input_ids)] for j, f in enumerate(features)]  # (T, H) each, without padding

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        if self.pooling is None:
            return list(scores)
        return [s.mean(0) if self.pooling == "mean" else s[0] for s in scores]  # (H,)


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@torch.no_grad()
def model_scores(model, family: Family, features: Sequence, batch_size: int, pad_id: int) -> list[np.ndarray]:
    """The family's per-feature scores of a PyTorch `model`, in the features' order (see batched_scores)."""
    model.eval()
    device = next(model.parameters()).device  # during fine-tuning: the training device
    return batched_scores(lambda batch: model(**{k: batch[k].to(device) for k in MODEL_INPUTS}), family,
                          features, batch_size, pad_id)


def batched_scores(run: Callable[[dict[str, torch.Tensor]], Any], family: Family, features: Sequence,
                   batch_size: int, pad_id: int) -> list[np.ndarray]:
    """The family's per-feature scores, in the features' order, where `run` maps one padded batch (collate's
    tensors) to the model's output: a PyTorch forward, an ONNX Runtime session, ..."""
    scores: list[np.ndarray | None] = [None] * len(features)
    for index in length_batches(features, batch_size):
        chunk = [features[i] for i in index]
        for i, row in zip(index, family.scores(run(collate(chunk, pad_id)), chunk)):
            scores[i] = row
    return scores


# A batch is cut short when padding it to its next (longest) feature would add more than this share of padding
# to its real tokens, once it would hold at least PADDING_CUT_MIN_TOKENS padded (below that, a model call's
# fixed cost outweighs the padding). Measured on the demo's classifier, 1 thread, 32 corpus sentences per call: 2.0x the
# texts/s of cutting at batch_size alone (bench/README.md).
PADDING_SLACK, PADDING_CUT_MIN_TOKENS = 0.25, 256


def length_batches(features: Sequence, batch_size: int) -> Iterator[list[int]]:
    """Feature indices in batches of at most batch_size, cut from the features sorted by length, so each pads
    to near its own length rather than to the longest of a random handful; a batch also ends where the next
    feature would pad it beyond PADDING_SLACK (once it holds PADDING_CUT_MIN_TOKENS). Multiple-choice features
    are grouped by their number of options first: a batch is one (B, C, T) block, its tokens counted per
    option."""
    def options(i: int) -> int:
        ids = features[i].input_ids
        return len(ids) if ids and isinstance(ids[0], list) else 0

    def tokens(i: int) -> int:
        ids = features[i].input_ids
        return sum(map(len, ids)) if options(i) else len(ids)

    batch: list[int] = []
    real = 0  # tokens of the batch without padding
    for i in sorted(range(len(features)), key=lambda i: (options(i), feature_length(features[i].input_ids))):
        length = feature_length(features[i].input_ids)
        # sorted: the new feature is the batch's longest; a multiple-choice row pads each of its options
        padded = (len(batch) + 1) * length * max(1, options(i))
        too_padded = padded > (1 + PADDING_SLACK) * (real + tokens(i)) and padded >= PADDING_CUT_MIN_TOKENS
        if batch and (len(batch) == batch_size or options(i) != options(batch[0]) or too_padded):
            yield batch
            batch, real = [], 0
        batch.append(i)
        real += tokens(i)
    if batch:
        yield batch


def feature_length(input_ids: list) -> int:
    """Tokens of one feature: its length, or its longest option's for multiple choice (a list per option)."""
    return max(map(len, input_ids)) if input_ids and isinstance(input_ids[0], list) else len(input_ids)


FAMILIES: dict[str, Family] = {f.kind: f for f in (SequenceClassification(), Regression(),
                                                   MultiLabelClassification(), MultipleChoice(), ExtractiveQA(),
                                                   TokenTagging())}


CALIBRATION_FILE = "calibration.json"  # beside a fine-tuned checkpoint: what its family tuned on dev


def read_calibration(directory: str) -> dict[str, Any] | None:
    """What the family calibrated on dev when the checkpoint was fine-tuned (thresholds), or None."""
    path = os.path.join(directory, CALIBRATION_FILE)
    if not os.path.isfile(path):
        return None
    return read_json_object(path, CheckpointError)  # a damaged file is named, not a JSONDecodeError


def family_of(task) -> Family:
    """The family of a registered or custom Task (its `kind`)."""
    if task.kind not in FAMILIES:
        raise ConfigError(f"task {task.name}: unknown kind {task.kind!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[task.kind]


def family_for_config(config: AlbertConfig) -> Family:
    """The family a fine-tuned checkpoint was trained as, from its config.json (architectures, problem_type)."""
    head = (config.architectures or [""])[0]
    if head == AlbertForSequenceClassification.__name__:
        if config.problem_type == "regression" or config.num_labels == 1:
            return FAMILIES["regression"]
        if config.problem_type == "multi_label_classification":
            return FAMILIES["multi_label"]
        return FAMILIES["classification"]
    for family in FAMILIES.values():
        if family.head.__name__ == head:
            return family
    raise ConfigError(f"a {head or 'headless'} checkpoint is not fine-tuned for any task family; heads litebert "
                      f"fine-tunes: {', '.join(sorted({f.head.__name__ for f in FAMILIES.values()}))}")
