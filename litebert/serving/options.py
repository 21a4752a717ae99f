"""transformers' pipeline arguments in litebert's terms: devices as ints, dtypes as precisions, a model object or
a Tokenizer instead of paths, and the call options that change how a family's outputs are read
(text-classification's function_to_apply, fill-mask's targets, question answering's top_k and
handle_impossible_answer)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.heads import class_name_of
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, encoder_of
from litebert.tasks.answers import Span, ranked
from litebert.tasks.families import Family
from litebert.tasks.untrained import Encoder, MaskedLanguageModel
from litebert.tokenizer import Tokenizer

# ----------------------------------------------------------------------------------------------------------------
# pipeline(...) arguments


def device_name(device: Any) -> str:
    """transformers' device argument as litebert's: an int is a GPU's index, -1 the CPU; a torch.device or a
    name as they are."""
    if isinstance(device, bool):
        raise ConfigError(f"device must be an int, a name or a torch.device, got {device!r}")
    if isinstance(device, int):
        return "cpu" if device < 0 else f"cuda:{device}"
    return str(device)


# "auto" is transformers' "the dtype the weights were saved in" (resolved by checkpoint_precision), not
# litebert's precision "auto" (whichever is faster here, measured): an answer must not depend on the load.
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", "float32": "fp32", "bfloat16": "bf16", "float": "fp32",
          "fp32": "fp32", "bf16": "bf16", "auto": "checkpoint"}


def dtype_precision(dtype: Any) -> str:
    """transformers' dtype (torch_dtype) as a litebert precision: float32 -> fp32, bfloat16 -> bf16 (autocast),
    "auto" -> the checkpoint's (checkpoint_precision). float16 has no litebert kernels: a ConfigError says what to use."""
    name = str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype
    if name not in DTYPES:
        raise ConfigError(f"dtype {name!r} is not one litebert runs; use torch.float32, torch.bfloat16 or "
                          "\"auto\" (or precision=\"int8\")")
    return DTYPES[name]


def checkpoint_precision(config) -> str:
    """The precision of the dtype a config.json says its weights were saved in (transformers' dtype="auto"):
    bf16 for bfloat16, fp32 for anything else litebert saves or reads."""
    saved = config.extra.get("dtype") or config.extra.get("torch_dtype")
    return "bf16" if str(saved).removeprefix("torch.") == "bfloat16" else "fp32"


def model_tokenizer(tokenizer: Any, directory: str | None) -> Tokenizer:
    """A Tokenizer given as one, a path to one, or (None) the model directory's own."""
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    if tokenizer is not None:
        return Tokenizer.from_pretrained(os.fspath(tokenizer))
    if directory is None:
        raise ConfigError("a model object needs its tokenizer: pipeline(..., model=model, tokenizer=PATH or a "
                          "litebert Tokenizer)")
    return Tokenizer.from_pretrained(directory)


def object_model(family: Family, model: torch.nn.Module) -> torch.nn.Module:
    """What a backend runs for a family, from a model object (what family.load reads from a directory)."""
    if isinstance(family, Encoder):
        return encoder_of(model)
    if isinstance(family, MaskedLanguageModel):
        if not isinstance(model, (AlbertForMaskedLM, AlbertForPreTraining)):
            raise ConfigError(f"an {type(model).__name__} has no masked-LM head for fill-mask; pass an "
                              "AlbertForPreTraining or AlbertForMaskedLM")
        return model
    if not isinstance(model, family.head):
        raise ConfigError(f"the model is an {type(model).__name__}; this task needs an {family.head.__name__}")
    return model


def model_config(model: Any) -> AlbertConfig:
    """A model object's config, naming its class as `architectures` where the config names none (a model built
    in code and never saved), so that its task and family come from its head as a checkpoint's would."""
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(config, AlbertConfig):
        raise ConfigError(f"model must be a directory, a Hub id or a litebert model, got {type(model).__name__}")
    if config.architectures:
        return config
    known = class_name_of(model)  # a subclass too
    return config if known is None else config.replace(architectures=[known])


def check_truncation(value: Any) -> None:
    """litebert always cuts an input at max_length (its windows, for question answering), a pair from its longer
    text first: transformers' truncation=True, "longest_first". Its other strategies would be ignored, and False
    would mean an error on long inputs: refused."""
    if value is not True and value != "longest_first":
        raise ConfigError(f"truncation={value!r}: litebert cuts every input at max_length, a pair longest_first; "
                          "pass True or \"longest_first\" (or leave it out), and max_length=N to choose where")


# ----------------------------------------------------------------------------------------------------------------
# text-classification: function_to_apply

FUNCTIONS = {
    "softmax": lambda x: np.exp(x - x.max()) / np.exp(x - x.max()).sum(),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "none": lambda x: x,
}


class AppliedFunction:
    """A sequence classifier's family whose scores are the raw logits and whose answers apply transformers'
    function_to_apply ("softmax", "sigmoid" or "none"); the top class is the prediction (as transformers,
    multi-label thresholds included)."""

    def __init__(self, family: Family, function: str):
        self.family, self.function = family, FUNCTIONS[function]

    def __getattr__(self, name: str):
        return getattr(self.family, name)

    def scores(self, output, features):
        return list(output.logits.float().cpu().numpy())

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        names = labels or [f"LABEL_{j}" for j in range(len(scores[0]) if scores else 0)]
        out = []
        for s in scores:
            s = self.function(np.asarray(s, dtype=np.float64))
            out.append(ranked(names, s, [int(s.argmax())]))
        return out


def default_function(config: AlbertConfig) -> str | None:
    """transformers' default function_to_apply where it differs from the family's own reading of the logits: a
    one-logit classifier not saved as a regression (problem_type unset, as a checkpoint trained outside
    transformers' Trainer leaves it) is a binary classifier to transformers, shown through a sigmoid; litebert's
    family for it (regression) would show the raw logit. None: the family's reading is transformers'."""
    if config.num_labels == 1 and config.problem_type is None:
        return "sigmoid"
    return None


def check_function(value: Any) -> None:
    if value is not None and str(value).lower() not in FUNCTIONS:
        raise ConfigError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {value!r}")


# ----------------------------------------------------------------------------------------------------------------
# fill-mask: targets


def target_ids(tok: Tokenizer, targets: Any) -> list[int]:
    """transformers' fill-mask targets: each a vocabulary piece, else the first piece it tokenizes to."""
    check_targets(targets)
    targets = [targets] if isinstance(targets, str) else targets
    vocab, ids = tok.get_vocab(), []
    for target in targets:
        id_ = vocab.get(target)
        if id_ is None:
            pieces = tok.encode(target, add_special_tokens=False)
            if not pieces:
                continue
            id_ = pieces[0]
        if id_ not in ids:
            ids.append(id_)
    if not ids:
        raise ConfigError(f"none of the targets {list(targets)} is a token of this model's vocabulary")
    return ids


def check_targets(targets: Any) -> None:
    if targets is not None and not isinstance(targets, str) and not (
            isinstance(targets, (list, tuple)) and all(isinstance(t, str) for t in targets)):
        raise ConfigError(f"targets must be a string or a list of strings, got {targets!r}")


# ----------------------------------------------------------------------------------------------------------------
# token-classification: aggregation_strategy, ignore_labels

AGGREGATIONS = ("none", "simple", "first", "average", "max")


def check_aggregation(strategy: Any) -> None:
    if strategy not in AGGREGATIONS:
        raise ConfigError(f"aggregation_strategy must be one of {', '.join(AGGREGATIONS)}, got {strategy!r}")


def check_ignore_labels(labels: Any) -> None:
    if labels is not None and not (isinstance(labels, (list, tuple)) and all(isinstance(x, str) for x in labels)):
        raise ConfigError(f"ignore_labels must be a list of labels, got {labels!r}")


# ----------------------------------------------------------------------------------------------------------------
# question-answering: top_k, handle_impossible_answer


def qa_answers(answer, options: dict) -> list[Span]:
    """The top_k best answers of one question (a family's Spans), best first; with handle_impossible_answer, no
    answer ("") ranks among them before the first span it is more probable than, as transformers' pipeline
    compared its null score with the spans'."""
    spans = list(answer.spans) if answer.best.answer else [answer.best]
    if options.get("handle_impossible_answer") and answer.best.answer:
        at = next((i for i, s in enumerate(spans) if s.score < answer.null.score), len(spans))
        spans.insert(at, answer.null)
    return spans[: options.get("top_k", 1)] or [answer.null]
