"""Pipelines: raw inputs in, answers out, with transformers' task names and output shapes.

    from litebert import pipeline
    classify = pipeline("text-classification", "out/novel_authorship/best")
    classify("It is a truth universally acknowledged...")          # [{"label": "Jane Austen", "score": 0.97}]
    classify([{"text": "a", "text_pair": "b"}, "c"], top_k=None)    # one list of every label per input

Tasks (the default is the checkpoint's: its config.json's head, or fill-mask for a pretrained model):
  fill-mask             "... [MASK] ..." -> top_k of {score, token, token_str, sequence} (a list per [MASK] when
                        there are several, as transformers); targets= limits them to those tokens
  text-classification   a text, {"text", "text_pair"} or a (text, pair) tuple -> {label, score}; top_k=N or
                        None gives a list; multi-label checkpoints give every label over its dev-tuned threshold;
                        function_to_apply "softmax", "sigmoid" or "none" (logits) as transformers, whose
                        default it keeps (a sigmoid for one logit unless config.json says regression)
  token-classification  a text or a list of words -> entities with character offsets; aggregation_strategy
                        "none" (default) and "simple" as transformers (tokens), "first", "average", "max" on the
                        text's whitespace-separated words
  question-answering    {"question", "context"} (or question=..., context=...) of any length (windows of
                        max_length tokens, doc_stride apart) -> {score, start, end, answer} (a list for top_k > 1);
                        "" for no answer where a SQuAD 2.0 checkpoint's calibrated null threshold says so, or
                        where handle_impossible_answer=True and no answer is more probable; max_answer_len=15
  multiple-choice       {"question", "options": [...], "context"?} -> {index, option, score}; top_k as above
  feature-extraction    a text -> its tokens' last hidden states, (1, T, H) nested lists as transformers
  sentence-embeddings   a text -> one (H,) vector, pooled as the model's sentence_config.json says (else mean)

Calling a pipeline with a list gives a list with one output per input, with a generator a generator of
outputs; anything else is one input and gives its output (a single string to text-classification gives [{label, score}], as transformers). Inputs are
featurized by their task family (litebert.tasks.families), batched by length (litebert.tasks.inference), run on
a backend (litebert.serving.backends: PyTorch or ONNX Runtime) and shown in transformers' output shapes
(litebert.serving.presenters).

transformers' own quirks kept: a multi-mask fill gives sequences with [CLS]/[SEP] (its decode), and a simple
group's word is its tokens decoded, and fill-mask answers a list of one input as if it were that input alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

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
from litebert.serving.backends import BACKENDS, TorchBackend, backend_device
from litebert.serving.options import (
    AppliedFunction,
    check_aggregation,
    check_function,
    check_ignore_labels,
    check_targets,
    check_truncation,
    checkpoint_precision,
    default_function,
    device_name,
    dtype_precision,
    model_config,
    model_tokenizer,
    object_model,
)
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
from litebert.tasks.families import Family, FeatureSettings
from litebert.tasks.fine_tuned import family_for_config, read_calibration
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


def _sentence_settings(directory: str | None) -> dict:
    return sentence_settings(directory) if directory is not None else {}  # a model object has no directory


TASKS: dict[str, Task] = {
    "fill-mask": Task(present_fill_mask, family=lambda d: MaskedLanguageModel(),
                      options={"top_k": 5, "targets": None}),
    "text-classification": Task(present_classes, AlbertForSequenceClassification,
                                options={"top_k": LEGACY, "function_to_apply": None}, wrap_string=True),
    "token-classification": Task(present_entities, AlbertForTokenClassification,
                                 options={"aggregation_strategy": "none", "ignore_labels": None}),
    "question-answering": Task(present_span, AlbertForQuestionAnswering, max_length=384, windowed=True,
                               options={"top_k": 1, "handle_impossible_answer": False, "max_answer_len": None}),
    "multiple-choice": Task(present_choice, AlbertForMultipleChoice, options={"top_k": LEGACY}),
    "feature-extraction": Task(present_hidden, family=lambda d: Encoder(None), options={"return_tensors": False}),
    "sentence-embeddings": Task(present_vector,
                                family=lambda d: Encoder(_sentence_settings(d).get("pooling", "mean"))),
}
COMMON_OPTIONS = ("truncation",)  # every task takes these (checked, then dropped: see check_truncation)
ALIASES = {"sentiment-analysis": "text-classification", "ner": "token-classification"}
PRETRAINED = ("AlbertForPreTraining", "AlbertForMaskedLM")


def default_task(config: AlbertConfig, directory: str) -> str:
    """The task a checkpoint is for: its fine-tuned head's, fill-mask for a pretrained model, sentence
    embeddings for an encoder (feature extraction without a sentence_config.json)."""
    head = (config.architectures or ["AlbertModel"])[0]
    if head in PRETRAINED:
        return "fill-mask"
    if head == "AlbertModel":
        return "sentence-embeddings" if directory and os.path.isfile(os.path.join(directory, SENTENCE_CONFIG)) \
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
        self.name = os.path.basename(os.path.normpath(directory)) if directory else "model"  # a model object

    @property
    def backend(self):
        """The (first member's) backend: what runs the model."""
        return self.backends[0]

    @property
    def model(self):
        """transformers' `pipe.model`: the (first member's) PyTorch model; an ONNX Runtime backend has none."""
        model = getattr(self.backend, "model", None)
        if model is None:
            raise AttributeError(f"pipe.model: the {self.backend.name} backend runs an exported graph, not a PyTorch "
                                 "model (litebert.AlbertForSequenceClassification.from_pretrained loads one)")
        return model

    @property
    def device(self) -> torch.device:
        """transformers' `pipe.device`: where the model runs."""
        return torch.device(getattr(self.backend, "device", "cpu"))

    @property
    def precision(self) -> str:
        """What runs: the backend's precision ("auto" until the first batch has chosen fp32 or bf16)."""
        return self.backend.precision

    def __repr__(self) -> str:
        return (f"Pipeline(task={self.task!r}, model={self.directory!r}, backend={self.backend.name!r}, "
                f"precision={self.precision!r})")

    def set_defaults(self, options: dict[str, Any]) -> None:
        """Make `options` the defaults of every call (`litebert serve --parameters`), checked as a call's are:
        they are call options, never the pipeline's own arguments (max_length, backend, ...)."""
        self.options = task_options(self.task, self.options, options)

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ConfigError (one line) unless `options` are call options this task takes."""
        task_options(self.task, self.options, options)

    def validate(self, raw: Any) -> None:
        """Raise ConfigError (one line) if `raw` is not one input of this task."""
        self.family.example(raw, 0)

    def __call__(self, inputs: Any = None, batch_size: int | None = None, *, question: Any = None,
                 context: Any = None, **options: Any) -> Any:
        """Outputs for a list of inputs (one each, in order), a generator of outputs for a generator (or other
        iterator) of inputs, or the output of one input. Question answering also takes transformers'
        question=..., context=... (strings, or lists of them)."""
        if question is not None or context is not None:
            inputs = qa_keywords(self.task, inputs, question, context)
        if isinstance(inputs, Iterator) and not isinstance(inputs, (str, dict, list, tuple)):
            check_batch_size(batch_size or self.batch_size)
            task_options(self.task, self.options, options)  # refused now, not at the first item
            return self._stream(inputs, batch_size, options)
        single = not isinstance(inputs, list)
        items = [inputs] if single else inputs
        opts = task_options(self.task, self.options, {k: v for k, v in options.items() if k != "_as_list"})
        check_batch_size(batch_size or self.batch_size)
        if not items:
            return []
        family, settings = self.family, self.settings
        if opts.get("function_to_apply") is not None:
            family = AppliedFunction(family, str(opts["function_to_apply"]).lower())
        if opts.get("max_answer_len") is not None:
            settings = dataclasses.replace(settings, max_answer_length=opts["max_answer_len"])
        examples = []
        for i, raw in enumerate(items):
            try:
                examples.append(family.example(raw, i))
            except ConfigError as e:
                raise ConfigError(f"input {i}: {e}" if not single else str(e)) from None
        features = family.featurize(examples, self.tokenizer, self.labels, settings)
        members = [batched_scores(backend, family, features, batch_size or self.batch_size,
                                  self.tokenizer.pad_id) for backend in self.backends]
        for member in members:  # NaN scores would become "score": NaN answers (not JSON) or a wrong label
            check_finite_scores(member, self.directory)
        scores = members[0] if len(members) == 1 else average_scores(members, self.weights)
        answers = family.answers(examples, features, scores, self.labels, settings, self.calibration)
        outputs = [self.spec.present(self, a, ex, opts) for a, ex in zip(answers, examples)]
        if single:
            out = outputs[0]
            return [out] if self.spec.wrap_string and isinstance(inputs, str) and isinstance(out, dict) else out
        if self.task == "fill-mask" and len(outputs) == 1 and not options.pop("_as_list", False):
            return outputs[0]  # transformers' fill-mask answers a list of one as that one input
        return outputs

    def outputs(self, inputs: list, batch_size: int | None = None, **options: Any) -> list:
        """One output per input of a list, always a list (fill-mask's list of one included): for callers
        that pair inputs with outputs (predict, the server)."""
        return self(list(inputs), batch_size, _as_list=True, **options)

    def _stream(self, inputs: Iterator, batch_size: int | None, options: dict) -> Iterator:
        """One output per input of an iterator, read and run batch_size inputs at a time."""
        size = batch_size or self.batch_size
        while chunk := list(itertools.islice(inputs, size)):
            yield from self.outputs(chunk, batch_size, **options)


def qa_keywords(task: str, inputs: Any, question: Any, context: Any) -> Any:
    """transformers' question=..., context=...: one {question, context}, or a list of them from lists (one
    context string serves every question)."""
    if task != "question-answering":
        raise ConfigError(f"question= and context= are question-answering's; {task} takes its inputs")
    if inputs is not None:
        raise ConfigError("give the inputs or question= and context=, not both")
    if question is None or context is None:
        raise ConfigError("question-answering needs both question= and context=")
    if isinstance(question, str) and isinstance(context, str):
        return {"question": question, "context": context}
    questions = [question] if isinstance(question, str) else list(question)
    contexts = [context] * len(questions) if isinstance(context, str) else list(context)
    if len(questions) != len(contexts):
        raise ConfigError(f"{len(questions)} questions but {len(contexts)} contexts")
    return [{"question": q, "context": c} for q, c in zip(questions, contexts)]


def task_options(task: str, defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`defaults` (the task's, or a pipeline's) updated with the options `given`, which the task must take, each
    checked here: a bad value is refused before any input is read, not found after the model ran."""
    unknown = sorted(set(given) - set(TASKS[task].options) - set(COMMON_OPTIONS))
    if unknown:
        takes = ", ".join([*TASKS[task].options, *COMMON_OPTIONS])
        raise ConfigError(f"{task} does not take {', '.join(unknown)} (it takes {takes})")
    if "truncation" in given:
        check_truncation(given["truncation"])
    options = {**defaults, **{k: v for k, v in given.items() if k not in COMMON_OPTIONS}}
    for name, value in options.items():
        OPTION_CHECKS.get(name, lambda v: None)(value)
    return options


def positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_top_k(top_k: Any) -> None:
    if top_k is not LEGACY and top_k is not None and not positive_int(top_k):
        raise ConfigError(f"top_k must be a positive integer or None, got {top_k!r}")


def check_max_answer_len(value: Any) -> None:
    if value is not None and not positive_int(value):
        raise ConfigError(f"max_answer_len must be a positive integer, got {value!r}")


def check_return_tensors(value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"return_tensors must be True or False, got {value!r}")


OPTION_CHECKS: dict[str, Callable[[Any], None]] = {  # a call option's value -> None, or a one-line ConfigError
    "top_k": check_top_k, "function_to_apply": check_function, "max_answer_len": check_max_answer_len,
    "aggregation_strategy": check_aggregation, "ignore_labels": check_ignore_labels, "targets": check_targets,
    "return_tensors": check_return_tensors}



def check_batch_size(batch_size: Any) -> None:
    if not positive_int(batch_size):
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")


def pipeline(task: str | None = None, model: str | os.PathLike | torch.nn.Module | None = None,
             tokenizer: str | os.PathLike | Tokenizer | None = None, *, backend: str = "torch",
             precision: str | None = None, batch_size: int = 16, max_length: int | None = None,
             doc_stride: int | None = None, max_query_length: int = 64, max_answer_length: int = 15,
             device: str | int | torch.device = "cpu", dtype: Any = None, torch_dtype: Any = None,
             min_agreement: float | None = None, **options: Any) -> Pipeline:
    """A pipeline for `task` (default: the checkpoint's) on the model directory (or Hub id) `model`.

    model: a model directory, a Hub id, a litebert model object (then tokenizer= is needed; the torch
    backend), or an ensemble (`litebert ensemble --out DIR`): its members each run on the backend and their
    family scores are averaged with the ensemble's weights, as `litebert ensemble` did.
    tokenizer: a path or a litebert Tokenizer (default: the model directory's).
    backend: "torch" (precision "fp32", "bf16", "int8" or "auto") or "onnxruntime" ("fp32" or "int8").
    dtype / torch_dtype: transformers' names for the precision: torch.float32 (fp32), torch.bfloat16 (bf16
    autocast) or "auto" (as in transformers, the dtype its config.json says the weights were saved in).
    max_length: tokens per input (default 512, 384 for question answering, the trained one for sentence
    embeddings; capped by the model's positions). Question answering: windows start doc_stride tokens apart
    (default 128, at most half a window), questions keep max_query_length tokens, answers at most
    max_answer_length (default 15 tokens, transformers' max_answer_len; also a call option under that name).
    device: "cpu" (default), "cuda", "cuda:N", "auto" (a GPU when there is one), a torch.device, or an int as
    transformers (-1 the CPU, N the GPU cuda:N); the torch backend only, int8 on the CPU only.
    min_agreement: int8 made here (either backend) is checked against fp32 on 256 random inputs, as `litebert
    export` checks it, and refused when fewer than this share of its predictions are unchanged (default 0.95,
    below export's 0.99: backends.INT8_MIN_AGREEMENT says why; 0: unchecked). Other keywords
    are the task's call options (top_k, aggregation_strategy, function_to_apply, targets, ...), given once here
    instead of at every call; truncation=True or "longest_first" (every task's) is what litebert always does.
    """
    if model is None:
        raise ConfigError("pipeline needs a model: a model directory, a Hub id or a litebert model")
    precision = pipeline_precision(precision, dtype, torch_dtype)
    device = device_name(device)
    if isinstance(model, torch.nn.Module):
        if callable(getattr(model, "get_base_model", None)):  # PEFT's wrapper: its base model holds the adapters
            model = model.get_base_model()
        members, weights, calibration, config = [None], None, None, model_config(model)
    else:
        members, weights, calibration = model_members(model)
        config = AlbertConfig.load(members[0])
    directory = members[0]
    if precision == "checkpoint":  # dtype="auto": the dtype its weights were saved in
        precision = checkpoint_precision(config)
    name = ALIASES.get(task, task) if task is not None else default_task(config, directory)
    if name not in TASKS:
        raise ConfigError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    spec = TASKS[name]
    defaults = dict(spec.options)
    if name == "text-classification" and (function := default_function(config)) is not None:
        defaults["function_to_apply"] = function  # a one-logit classifier: transformers' sigmoid
    options = task_options(name, defaults, options)
    check_batch_size(batch_size)
    family = spec.family_for(config, directory)
    if weights is not None:
        check_members(members, family, name)
    tokenizer = model_tokenizer(tokenizer, directory)
    settings = feature_settings(spec, config, directory, max_length, doc_stride, max_query_length,
                                max_answer_length)
    labels = config.label_names or [f"LABEL_{i}" for i in range(config.num_labels)]  # transformers' when unnamed
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose from torch or onnxruntime")
    device = backend_device(BACKENDS[backend], device, precision)
    if min_agreement is not None and precision != "int8":
        raise ConfigError(f"min_agreement (serve's --min-agreement) checks int8 against fp32; this runs in {precision}")
    if directory is None:
        if BACKENDS[backend] is not TorchBackend:
            raise ConfigError(f"a model object runs on the torch backend; for {backend}, give its directory")
        backends = [TorchBackend(object_model(family, model), precision, device, min_agreement)]
    else:
        backends = [BACKENDS[backend].load(family, d, precision, device, min_agreement) for d in members]
    where = directory if weights is None else os.fspath(model)  # an ensemble is named by its own directory
    return Pipeline(name, spec, family, backends, tokenizer, where, labels, settings, calibration, options, batch_size,
                    weights)


def pipeline_precision(precision: str | None, dtype: Any, torch_dtype: Any) -> str:
    """precision, or transformers' dtype (torch_dtype) as one; fp32 when none is given."""
    given = [(name, v) for name, v in (("precision", precision), ("dtype", dtype), ("torch_dtype", torch_dtype))
             if v is not None]
    if len(given) > 1:
        raise ConfigError(f"give one of precision, dtype and torch_dtype, not {' and '.join(n for n, _ in given)}")
    if not given:
        return "fp32"
    name, value = given[0]
    return value if name == "precision" else dtype_precision(value)


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
        max_length = min(_sentence_settings(directory).get("max_length", spec.max_length), positions)
    elif not 8 <= max_length <= positions:
        raise ConfigError(f"max_length must be between 8 and the model's {positions} positions, got {max_length}")
    if not positive_int(max_query_length):  # 0 would keep no question; -3 would cut 3 tokens off its end
        raise ConfigError(f"max_query_length must be a positive integer, got {max_query_length!r}")
    window = max_length - max_query_length - 3  # QA: [CLS] question [SEP] window [SEP]
    if window < 1 and spec.windowed:
        raise ConfigError(f"max_query_length {max_query_length} leaves no room for context in max_length "
                          f"{max_length}")
    doc_stride = min(128, max(1, window // 2)) if doc_stride is None else doc_stride
    if doc_stride < 1 or max_answer_length < 1:
        raise ConfigError("doc_stride and max_answer_length must be positive")
    return FeatureSettings(max_length, doc_stride, max_query_length, max_answer_length)


