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
featurized by their task family (litebert.tasks.families), batched by length, and run on a backend:
  TorchBackend   PyTorch, precision "fp32", "bf16" (autocast), "int8" (dynamic quantization of every Linear) or
                 "auto" (bf16 where the first batch runs measurably faster in it on this machine, else fp32)
  OnnxBackend    ONNX Runtime on the directory's model.onnx ("fp32") or model.int8.onnx ("int8"), or on
                 litebert's own export (and quantization) made on the fly
A backend (the Backend protocol) is a callable from one padded batch to the model's outputs by name, so other
engines plug in beside these.

transformers' own quirks kept: a multi-mask fill gives sequences with [CLS]/[SEP] (its decode), and a simple
group's word is its tokens decoded. Not kept: transformers' fill-mask answers a list of one input as if it
were that input alone; here a list always gives a list.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol

import numpy as np
import torch

from litebert.config import AlbertConfig
from litebert.errors import ConfigError, DataError
from litebert.files import data_suffix
from litebert.gemm import PrecisionChoice, autocast, choose_inference_precision
from litebert.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                            AlbertForTokenClassification)
from litebert.interop.quantize import INT8_ONNX
from litebert.tasks.ensembles import average_scores, check_members, is_ensemble, read_ensemble
from litebert.tasks.families import (MODEL_INPUTS, Encoder, FeatureSettings, Family, MaskedLanguageModel,
                                     batched_scores, family_for_config, read_calibration)
from litebert.sentence import SENTENCE_CONFIG, sentence_settings
from litebert.tokenizer import SPIECE_UNDERLINE, Tokenizer
from litebert.training.distributed import resolve_device

LEGACY = object()  # top_k not given: transformers' single-dict output


# ----------------------------------------------------------------------------------------------------------------
# backends: one padded batch (collate's tensors) -> the model's outputs by name


class Backend(Protocol):
    """What runs the model: one padded batch (collate's int64 input_ids, attention_mask, token_type_ids) -> the
    model's outputs, read by name as attributes (logits, start_logits, last_hidden_state, ...). `load` builds
    one for a family's model in a checkpoint directory. Another engine or precision (int8) is another class in
    BACKENDS."""

    name: str
    PRECISIONS: tuple[str, ...]
    precision: str

    @classmethod
    def load(cls, family: Family, directory: str, precision: str) -> "Backend": ...

    def __call__(self, batch: dict[str, torch.Tensor]) -> Any: ...


def check_precision(backend: type, precision: str) -> None:
    if precision not in backend.PRECISIONS:
        raise ConfigError(f"the {backend.name} backend runs in {' or '.join(backend.PRECISIONS)}, not "
                          f"{precision!r}")


class TorchBackend:
    """PyTorch on the CPU or a GPU: fp32, bf16 autocast, int8 (torch.ao dynamic quantization of every
    nn.Linear, see litebert.interop.quantize; CPU only), or auto: fp32 or bf16, whichever runs the first batch
    faster there. Batches go to the model's device; the families take what they decode from there."""

    name, PRECISIONS, DEVICES = "torch", ("fp32", "bf16", "int8", "auto"), ("cpu", "cuda")

    def __init__(self, model: torch.nn.Module, precision: str = "fp32", device: str | torch.device = "cpu"):
        check_precision(TorchBackend, precision)
        self.device = torch.device(device)
        if precision == "int8" and self.device.type != "cpu":
            raise ConfigError(f"int8 runs on the CPU (torch.ao dynamic quantization), not on {self.device}: use "
                              "fp32 or bf16 there")
        if precision == "int8":
            from litebert.interop.quantize import quantize_model
            model = quantize_model(model)
        self.model, self.precision = model.eval().to(self.device), precision
        self.choice: PrecisionChoice | None = None  # what "auto" measured, after the first batch

    @classmethod
    def load(cls, family: Family, directory: str, precision: str, device: str = "cpu") -> "TorchBackend":
        check_precision(cls, precision)  # before the weights are read
        return cls(family.load(directory), precision, device)

    def __call__(self, batch: dict[str, torch.Tensor]):
        inputs = {k: batch[k].to(self.device, non_blocking=True) for k in MODEL_INPUTS}
        if self.precision == "auto":
            self.choice = choose_inference_precision(self.model, inputs)
            self.precision = self.choice.precision
            logging.getLogger("litebert").info("pipeline: %s", self.choice)
        with torch.inference_mode(), autocast(self.precision, self.device.type):
            return self.model(**inputs)  # on the device: each family takes to the CPU only what it reads


class MissingOutput(ConfigError, AttributeError):
    """A graph without the output a task reads (an AttributeError too, so that hasattr works)."""


class GraphOutputs(dict):
    """An ONNX graph's outputs by name, read as attributes the way families read a PyTorch model's output."""

    def __getattr__(self, name: str) -> torch.Tensor:
        if name not in self:
            raise MissingOutput(f"the ONNX graph has no output {name!r} (it has {', '.join(self)}): export the "
                                "model class this task reads")
        return self[name]


class OnnxBackend:
    """ONNX Runtime on the CPU: the directory's model.onnx (a `litebert export` output), else litebert's export
    of the checkpoint (its config.json's class) into a temporary directory, checked against PyTorch as every
    export is."""

    name, PRECISIONS, DEVICES = "onnxruntime", ("fp32", "int8"), ("cpu",)
    FILES = {"fp32": "model.onnx", "int8": INT8_ONNX}  # a `litebert export [--quantize int8]` directory

    def __init__(self, path: str, precision: str = "fp32", keep: Any = None):
        check_precision(OnnxBackend, precision)
        try:
            import onnxruntime
        except ImportError:
            raise ConfigError("the onnxruntime backend needs onnxruntime: pip install onnxruntime") from None
        self.precision, self.path, self._keep = precision, path, keep  # keep: a temporary export's directory
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    @classmethod
    def load(cls, family: Family, directory: str, precision: str, device: str = "cpu") -> "OnnxBackend":
        check_precision(cls, precision)
        path = os.path.join(directory, cls.FILES[precision])
        if os.path.isfile(path):
            return cls(path, precision)
        from litebert.interop.export import ExportError, export_model
        tmp = tempfile.TemporaryDirectory(prefix="litebert-onnx-")
        try:
            export_model(directory, tmp.name, "onnx", quantize="int8" if precision == "int8" else "none")
        except ExportError as e:  # its "--force" is export's flag: say how to reach it from here
            if precision != "int8":
                raise
            raise ExportError(f"{e}. To use this int8 model anyway, export it once (`litebert export --model "
                              f"{directory} --out DIR --quantize int8 --force`, or --verify-text with your own "
                              f"inputs) and give DIR as the model") from None
        return cls(os.path.join(tmp.name, cls.FILES[precision]), precision, keep=tmp)

    def __call__(self, batch: dict[str, torch.Tensor]) -> GraphOutputs:
        outputs = self.session.run(None, {k: batch[k].numpy() for k in self.input_names})
        return GraphOutputs(zip(self.output_names, map(torch.from_numpy, outputs)))


BACKENDS: dict[str, type] = {"torch": TorchBackend, "pytorch": TorchBackend, "onnxruntime": OnnxBackend,
                             "onnx": OnnxBackend, "ort": OnnxBackend}


# ----------------------------------------------------------------------------------------------------------------
# presenters: a family's answer -> transformers' output shape


def metaspace_decode(pieces: list[str]) -> str:
    """What transformers' fast ALBERT tokenizer makes of pieces (its Metaspace decoder): "▁" is a space, except
    in the first piece, where it is dropped."""
    return "".join(p.replace(SPIECE_UNDERLINE, "") if i == 0 else p.replace(SPIECE_UNDERLINE, " ")
                   for i, p in enumerate(pieces))


def decode(tok: Tokenizer, ids, skip_special_tokens: bool = False) -> str:
    """transformers' `tokenizer.decode` for an ALBERT tokenizer (special tokens kept as their names, glued)."""
    return metaspace_decode([tok.pieces[i] for i in map(int, ids)
                             if not (skip_special_tokens and tok.special_table[i])])


def present_fill_mask(pipe: "Pipeline", answer, example, options: dict) -> list:
    single = len(answer.positions) == 1
    rows = []
    for position, probs in zip(answer.positions, answer.probs):
        row = []
        for token in np.argsort(-probs, kind="stable")[: options["top_k"]]:
            ids = list(answer.input_ids)
            ids[position] = int(token)
            row.append({"score": float(probs[token]), "token": int(token), "token_str": decode(pipe.tokenizer, [token]),
                        "sequence": decode(pipe.tokenizer, ids, skip_special_tokens=single)})
        rows.append(row)
    return rows[0] if single else rows


def present_ranked(answer, options: dict, item: Callable) -> Any:
    """transformers' text-classification shape: the prediction as one dict when top_k is not given (a list
    when the family may predict any number, as multi-label does), else the top_k (None: all) best first."""
    top_k = options["top_k"]
    if top_k is LEGACY:
        return item(answer.predicted[0]) if answer.one else [item(x) for x in answer.predicted]
    return [item(x) for x in (answer.ranked if top_k is None else answer.ranked[:top_k])]


def present_classes(pipe: "Pipeline", answer, example, options: dict) -> Any:
    return present_ranked(answer, options, lambda x: {"label": x.label, "score": x.score})


def present_choice(pipe: "Pipeline", answer, example, options: dict) -> Any:
    return present_ranked(answer, options,
                          lambda x: {"index": x.label, "option": example.options[x.label], "score": x.score})


def present_span(pipe: "Pipeline", answer, example, options: dict) -> dict:
    return {"score": answer.score, "start": answer.start, "end": answer.end, "answer": answer.answer}


def present_hidden(pipe: "Pipeline", answer, example, options: dict) -> list:
    return [answer.tolist()]  # (1, T, H), as transformers' feature-extraction


def present_vector(pipe: "Pipeline", answer, example, options: dict) -> list:
    return answer.tolist()


AGGREGATIONS = ("none", "simple", "first", "average", "max")


def present_entities(pipe: "Pipeline", tokens, example, options: dict) -> list[dict]:
    """transformers' token-classification: "none" one dict per token; "simple" adjacent tokens of one entity
    grouped (B-/I- prefixes); "first", "average", "max" tag whole words (the first sub-token's tag, the average
    of the word's probabilities, the most confident sub-token's) before grouping. Words are the text's
    whitespace-separated words (transformers guesses them from the offsets); a word's string is its decoded
    tokens, as transformers gives it."""
    strategy, ignore = options["aggregation_strategy"], options["ignore_labels"]
    if strategy not in AGGREGATIONS:
        raise ConfigError(f"aggregation_strategy must be one of {', '.join(AGGREGATIONS)}, got {strategy!r}")
    ignore = ["O"] if ignore is None else ignore
    labels, text = pipe.labels, example.text

    def piece(t) -> str:  # an unknown token is shown as the text it stands for, as transformers does
        return text[t.start:t.end] if t.id == pipe.tokenizer.unk_id else pipe.tokenizer.pieces[t.id]

    if strategy in ("none", "simple"):
        entities = [{"entity": labels[int(t.probs.argmax())], "score": float(t.probs.max()), "index": t.index,
                     "word": piece(t), "start": t.start, "end": t.end, "pieces": [piece(t)]} for t in tokens]
        if strategy == "none":
            return [{k: v for k, v in e.items() if k != "pieces"} for e in entities if e["entity"] not in ignore]
    else:
        words: dict[int, list] = {}
        for t in tokens:
            if t.word is not None:  # a bare "▁" belongs to no word: a word's first sub-token is the one after it
                words.setdefault(t.word, []).append(t)
        entities = []
        for group in words.values():
            if strategy == "first":
                probs = group[0].probs
            elif strategy == "max":
                probs = max(group, key=lambda t: t.probs.max()).probs
            else:
                probs = np.mean([t.probs for t in group], axis=0)
            entities.append({"entity": labels[int(probs.argmax())], "score": float(probs.max()),
                             "start": group[0].start, "end": group[-1].end, "pieces": [piece(t) for t in group]})
    # A group's word is its pieces decoded together (transformers decodes each word first, and for ALBERT's
    # pieces that glues "new york" into "newyork" under "first"/"average"/"max").
    groups = [{"entity_group": run[0]["entity"].split("-", 1)[-1],
               "score": float(np.mean([e["score"] for e in run])),
               "word": metaspace_decode([p for e in run for p in e["pieces"]]), "start": run[0]["start"],
               "end": run[-1]["end"]} for run in entity_runs(entities)]
    return [g for g in groups if g["entity_group"] not in ignore]


def entity_runs(entities: list[dict]) -> list[list[dict]]:
    """Adjacent entities that make one: the same type, each after the first not a B- (transformers' rule;
    an unprefixed tag counts as I-)."""
    runs: list[list[dict]] = []
    for e in entities:
        bi, tag = (e["entity"][0], e["entity"][2:]) if e["entity"][:2] in ("B-", "I-") else ("I", e["entity"])
        last = runs[-1][-1]["entity"] if runs else None
        last_tag = None if last is None else last[2:] if last[:2] in ("B-", "I-") else last
        if runs and tag == last_tag and bi != "B":
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs


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


def backend_device(cls: type, device: str, precision: str) -> torch.device:
    """Where a backend runs: `device` ("auto": a GPU when there is one and the backend runs there at this
    precision; int8 is the CPU's), refused in one line when the backend has no kernels there or this machine
    lacks it."""
    device = str(device)
    if device == "auto" and ("cuda" not in cls.DEVICES or precision == "int8"):
        device = "cpu"
    if device != "auto" and device.split(":")[0] not in cls.DEVICES:
        raise ConfigError(f"the {cls.name} backend runs on {' or '.join(cls.DEVICES)}, not on {device!r}")
    return resolve_device(device)


def model_members(model: str | os.PathLike) -> tuple[list[str], list[float] | None, dict | None]:
    """(directories, weights, calibration): one model directory (or Hub id) with its own calibration and no
    weights, or the members of an ensemble directory (`litebert ensemble --out DIR`) with its weights and the
    calibration tuned for their average."""
    from litebert.weights import resolve_model_dir

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


# ----------------------------------------------------------------------------------------------------------------
# inputs from files and streams (`litebert predict`)


class Record(NamedTuple):
    where: str  # file:line
    input: Any  # one pipeline input
    id: Any = None  # a JSONL/CSV row's "id", carried to its output


def read_inputs(lines: Iterable[str], source: str, fmt: str = "text") -> Iterator[Record]:
    """Pipeline inputs from lines, lazily (a stream is read as it comes). Formats:
      text   one input per non-blank line: the line, or the JSON object it holds ({"question": ..., ...})
      jsonl  one JSON value per line: a string, an object of the input's fields (plus "id"), a list of words
      csv / tsv  a header row, then one input per row: the "text" cell alone, else the row's non-empty cells as
             the input's fields ("options" as a JSON list or "a|b|c")
    """
    if fmt in ("csv", "tsv"):
        yield from _table_inputs(lines, source, fmt)
        return
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        where = f"{source}:{n}"
        if fmt == "jsonl" or line.lstrip().startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                if fmt == "jsonl":
                    raise DataError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
                value = line  # text that merely starts with "{"
        else:
            value = line
        yield _record(where, value)


def _record(where: str, value: Any) -> Record:
    if isinstance(value, dict) and "id" in value:
        value = dict(value)
        return Record(where, value, value.pop("id"))
    return Record(where, value)


def _table_inputs(lines: Iterable[str], source: str, fmt: str) -> Iterator[Record]:
    reader = csv.reader(lines, delimiter="\t" if fmt == "tsv" else ",",
                        quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL)
    header = next(reader, None)
    if not header:
        return
    for row in reader:
        where = f"{source}:{reader.line_num}"
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} cells under a header of {len(header)}")
        cells = {k: v for k, v in zip(header, row) if v != ""}
        if "options" in cells:
            text = cells["options"]
            try:
                cells["options"] = json.loads(text) if text.lstrip().startswith("[") else text.split("|")
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: options: invalid JSON ({e.msg})") from None
        record = _record(where, cells)
        value = record.input
        if set(value) == {"text"} or len(header) == 1:
            value = next(iter(value.values()), "")
        yield record._replace(input=value)


def input_format(path: str) -> str:
    """The format of an --input file from its suffix (under any .gz): jsonl, csv, tsv, else text."""
    return {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(data_suffix(Path(path)), "text")
