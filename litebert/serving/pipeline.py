"""Pipelines: raw inputs in, answers out, with transformers' task names and output shapes.

    from litebert import pipeline
    classify = pipeline("text-classification", "out/novel_authorship/best")
    classify("It is a truth universally acknowledged...")          # [{"label": "Jane Austen", "score": 0.97}]
    classify([{"text": "a", "text_pair": "b"}, "c"], top_k=None)    # one list of every label per input

Tasks (the default is the checkpoint's: its config.json's head, or fill-mask for a pretrained model):
  fill-mask             "... [MASK] ..." -> top_k of {score, token, token_str, sequence} (a list per [MASK] when
                        there are several, as transformers)
  text-classification   a text, {"text", "text_pair"} or a (text, pair) tuple -> {label, score}; top_k=N or
                        None gives a list; multi-label checkpoints give every label over its dev-tuned threshold
  token-classification  a text or a list of words -> entities with character offsets; aggregation_strategy
                        "none" and "simple" as transformers (tokens), "first" (default), "average", "max" on the
                        text's whitespace-separated words
  question-answering    {"question", "context"} of any length (windows of max_length tokens, doc_stride apart)
                        -> {score, start, end, answer}; "" for no answer where a SQuAD 2.0 checkpoint's
                        calibrated null threshold says so
  multiple-choice       {"question", "options": [...], "context"?} -> {index, option, score}; top_k as above
  feature-extraction    a text -> its tokens' last hidden states, (1, T, H) nested lists as transformers
  sentence-embeddings   a text -> one (H,) vector, pooled as the model's sentence_config.json says (else mean)

Calling a pipeline with a list gives a list with one output per input; anything else is one input and gives
its output (a single string to text-classification gives [{label, score}], as transformers). Inputs are
featurized by their task family (litebert.tasks.families), batched by length (litebert.tasks.inference), run on
a backend (litebert.serving.backends: PyTorch or ONNX Runtime) and shown in transformers' output shapes
(litebert.serving.presenters).

transformers' own quirks kept: a multi-mask fill gives sequences with [CLS]/[SEP] (its decode), and a simple
group's word is its tokens decoded. Not kept: transformers' fill-mask answers a list of one input as if it
were that input alone; here a list always gives a list.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from litebert.sentence import SENTENCE_CONFIG, sentence_settings
from litebert.serving.backends import BACKENDS, backend_device
from litebert.serving.presenters import (
    LEGACY,
    present_choice,
    present_classes,
    present_entities,
    present_fill_mask,
    present_hidden,
    present_span,
    present_vector,
)
from litebert.tasks.ensembles import average_scores, check_members, is_ensemble, read_ensemble
from litebert.tasks.families import Family, FeatureSettings, family_for_config, read_calibration
from litebert.tasks.inference import batched_scores, check_finite_scores
from litebert.tasks.untrained import Encoder, MaskedLanguageModel
from litebert.tokenizer import Tokenizer
from litebert.weights import resolve_model_dir

# ----------------------------------------------------------------------------------------------------------------
# tasks


@dataclass(frozen=True)
class Task:
    present: Callable  # (pipeline, the family's answer, example, options) -> one output
    head: type | None = None  # the fine-tuned head it reads (its family comes from config.json), or
    family: Callable[[str], Family] | None = None  # for a task on a model that was not fine-tuned: dir -> family
    options: dict[str, Any] = field(default_factory=dict)  # what a call may set, with the defaults
    max_length: int = 512  # default token budget (capped by the model's positions)
    wrap_string: bool = False  # a single string in, a single dict out: give [dict], as transformers
    windowed: bool = False  # question + context windows: max_query_length and doc_stride apply

    def family_for(self, config: AlbertConfig, directory: str) -> Family:
        if self.family is not None:
            return self.family(directory)
        found = family_for_config(config)
        if found.head is not self.head:
            raise ConfigError(f"{directory} is an {found.head.__name__}; this task needs an {self.head.__name__}")
        return found


TASKS: dict[str, Task] = {
    "fill-mask": Task(present_fill_mask, family=lambda d: MaskedLanguageModel(), options={"top_k": 5}),
    "text-classification": Task(present_classes, AlbertForSequenceClassification, options={"top_k": LEGACY},
                                wrap_string=True),
    "token-classification": Task(present_entities, AlbertForTokenClassification,
                                 options={"aggregation_strategy": "first", "ignore_labels": None}),
    "question-answering": Task(present_span, AlbertForQuestionAnswering, max_length=384, windowed=True),
    "multiple-choice": Task(present_choice, AlbertForMultipleChoice, options={"top_k": LEGACY}),
    "feature-extraction": Task(present_hidden, family=lambda d: Encoder(None)),
    "sentence-embeddings": Task(present_vector,
                                family=lambda d: Encoder(sentence_settings(d).get("pooling", "mean"))),
}
ALIASES = {"sentiment-analysis": "text-classification", "ner": "token-classification"}
PRETRAINED = ("AlbertForPreTraining", "AlbertForMaskedLM")


def default_task(config: AlbertConfig, directory: str) -> str:
    """The task a checkpoint is for: its fine-tuned head's, fill-mask for a pretrained model, sentence
    embeddings for an encoder (feature extraction without a sentence_config.json)."""
    head = (config.architectures or ["AlbertModel"])[0]
    if head in PRETRAINED:
        return "fill-mask"
    if head == "AlbertModel":
        return "sentence-embeddings" if os.path.isfile(os.path.join(directory, SENTENCE_CONFIG)) \
            else "feature-extraction"
    head = family_for_config(config).head
    return next(name for name, task in TASKS.items() if task.head is head)


# ----------------------------------------------------------------------------------------------------------------
# the pipeline


class Pipeline:
    """Raw inputs -> the task's outputs (module docstring). Made by `pipeline(...)`."""

    def __init__(self, task: str, spec: Task, family: Family, backends: list, tokenizer: Tokenizer,
                 directory: str, labels: list[str] | None, settings: FeatureSettings, calibration: dict | None,
                 options: dict[str, Any], batch_size: int, weights: list[float] | None = None):
        self.task, self.spec, self.family, self.backends = task, spec, family, backends
        self.tokenizer, self.directory, self.labels, self.settings = tokenizer, directory, labels, settings
        self.calibration, self.options, self.batch_size = calibration, options, batch_size
        self.weights = weights  # an ensemble's (`litebert ensemble --out DIR` as the model): its members' weights
        self.name = os.path.basename(os.path.normpath(directory))

    @property
    def backend(self):
        """The (first member's) backend: what runs the model."""
        return self.backends[0]

    @property
    def precision(self) -> str:
        """What runs: the backend's precision ("auto" until the first batch has chosen fp32 or bf16)."""
        return self.backend.precision

    def __repr__(self) -> str:
        return (f"Pipeline(task={self.task!r}, model={self.directory!r}, backend={self.backend.name!r}, "
                f"precision={self.precision!r})")

    def validate(self, raw: Any) -> None:
        """Raise ConfigError (one line) if `raw` is not one input of this task."""
        self.family.example(raw, 0)

    def __call__(self, inputs: Any, batch_size: int | None = None, **options: Any) -> Any:
        """Outputs for a list of inputs (one each, in order), or the output of one input."""
        single = not isinstance(inputs, list)
        items = [inputs] if single else inputs
        opts = task_options(self.task, self.options, options)
        check_batch_size(batch_size or self.batch_size)
        if not items:
            return []
        examples = []
        for i, raw in enumerate(items):
            try:
                examples.append(self.family.example(raw, i))
            except ConfigError as e:
                raise ConfigError(f"input {i}: {e}" if not single else str(e)) from None
        features = self.family.featurize(examples, self.tokenizer, self.labels, self.settings)
        members = [batched_scores(backend, self.family, features, batch_size or self.batch_size,
                                  self.tokenizer.pad_id) for backend in self.backends]
        for member in members:  # NaN scores would become "score": NaN answers (not JSON) or a wrong label
            check_finite_scores(member, self.directory)
        scores = members[0] if len(members) == 1 else average_scores(members, self.weights)
        answers = self.family.answers(examples, features, scores, self.labels, self.settings, self.calibration)
        outputs = [self.spec.present(self, a, ex, opts) for a, ex in zip(answers, examples)]
        if single:
            out = outputs[0]
            return [out] if self.spec.wrap_string and isinstance(inputs, str) and isinstance(out, dict) else out
        return outputs


def task_options(task: str, defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`defaults` (the task's, or a pipeline's) updated with the options `given`, which the task must take."""
    unknown = sorted(set(given) - set(TASKS[task].options))
    if unknown:
        takes = ", ".join(TASKS[task].options) or "no options"
        raise ConfigError(f"{task} does not take {', '.join(unknown)} (it takes {takes})")
    options = {**defaults, **given}
    top_k = options.get("top_k")
    if top_k is not LEGACY and top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                                      or top_k < 1):
        raise ConfigError(f"top_k must be a positive integer or None, got {top_k!r}")
    return options


def check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")


def pipeline(task: str | None = None, model: str | os.PathLike | None = None, *, backend: str = "torch",
             precision: str = "fp32", batch_size: int = 16, max_length: int | None = None,
             doc_stride: int | None = None, max_query_length: int = 64, max_answer_length: int = 30,
             device: str | torch.device = "cpu", **options: Any) -> Pipeline:
    """A pipeline for `task` (default: the checkpoint's) on the model directory (or Hub id) `model`.

    model: a model directory, a Hub id, or an ensemble (`litebert ensemble --out DIR`): its members each run on
    the backend and their family scores are averaged with the ensemble's weights, as `litebert ensemble` did.
    backend: "torch" (precision "fp32", "bf16", "int8" or "auto") or "onnxruntime" ("fp32" or "int8").
    max_length: tokens per input (default 512, 384 for question answering, the trained one for sentence
    embeddings; capped by the model's positions). Question answering: windows start doc_stride tokens apart
    (default 128, at most half a window), questions keep max_query_length tokens, answers at most
    max_answer_length. device: "cpu" (default), "cuda", "cuda:N" or "auto" (a GPU when there is one); the
    torch backend only, int8 on the CPU only. Other keywords are the task's call options (top_k,
    aggregation_strategy, ...), given once here instead of at every call.
    """
    if model is None:
        raise ConfigError("pipeline needs a model: a model directory or a Hub id")
    members, weights, calibration = model_members(model)
    directory = members[0]
    config = AlbertConfig.load(directory)
    name = ALIASES.get(task, task) if task is not None else default_task(config, directory)
    if name not in TASKS:
        raise ConfigError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    spec = TASKS[name]
    options = task_options(name, spec.options, options)
    check_batch_size(batch_size)
    family = spec.family_for(config, directory)
    if weights is not None:
        check_members(members, family, name)
    tokenizer = Tokenizer.from_pretrained(directory)
    settings = feature_settings(spec, config, directory, max_length, doc_stride, max_query_length,
                                max_answer_length)
    labels = config.label_names
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose from torch or onnxruntime")
    device = backend_device(BACKENDS[backend], device, precision)
    backends = [BACKENDS[backend].load(family, d, precision, device) for d in members]
    where = directory if weights is None else os.fspath(model)  # an ensemble is named by its own directory
    return Pipeline(name, spec, family, backends, tokenizer, where, labels, settings, calibration, options, batch_size,
                    weights)


def model_members(model: str | os.PathLike) -> tuple[list[str], list[float] | None, dict | None]:
    """(directories, weights, calibration): one model directory (or Hub id) with its own calibration and no
    weights, or the members of an ensemble directory (`litebert ensemble --out DIR`) with its weights and the
    calibration tuned for their average."""

    directory = resolve_model_dir(model)
    if is_ensemble(directory):
        directories, weights, calibration = read_ensemble(directory)
        return [resolve_model_dir(d) for d in directories], weights, calibration
    return [directory], None, read_calibration(directory)


def feature_settings(spec: Task, config: AlbertConfig, directory: str, max_length: int | None,
                     doc_stride: int | None, max_query_length: int, max_answer_length: int) -> FeatureSettings:
    positions = config.max_position_embeddings
    if max_length is None:
        max_length = min(sentence_settings(directory).get("max_length", spec.max_length), positions)
    elif not 8 <= max_length <= positions:
        raise ConfigError(f"max_length must be between 8 and the model's {positions} positions, got {max_length}")
    window = max_length - max_query_length - 3  # QA: [CLS] question [SEP] window [SEP]
    if window < 1 and spec.windowed:
        raise ConfigError(f"max_query_length {max_query_length} leaves no room for context in max_length "
                          f"{max_length}")
    doc_stride = min(128, max(1, window // 2)) if doc_stride is None else doc_stride
    if doc_stride < 1 or max_answer_length < 1:
        raise ConfigError("doc_stride and max_answer_length must be positive")
    return FeatureSettings(max_length, doc_stride, max_query_length, max_answer_length)


