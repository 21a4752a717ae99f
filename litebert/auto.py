"""transformers' Auto names, so that a script moves to litebert by its imports alone:

    from litebert import AutoTokenizer, AutoModelForSequenceClassification   # was: from transformers import ...

Each Auto class stands for the one litebert class that transformers' would pick for an ALBERT checkpoint
(AutoModelForMaskedLM -> AlbertForMaskedLM, ...), with `from_pretrained` (a directory or a Hub id, and every
keyword the class takes) and `from_config` (a fresh model). A checkpoint of another architecture is refused by
name: transformers would load a BERT there, litebert loads ALBERT only. `AutoModel.from_pretrained` on a head's
checkpoint gives the bare encoder, as transformers' does.
"""

from __future__ import annotations

import os
from typing import Any

from litebert.config import AlbertConfig
from litebert.heads import MODEL_CLASSES
from litebert.tokenizer import Tokenizer
from litebert.weights import given_config, resolve_model_dir


class AutoConfig:
    """AutoConfig.from_pretrained(directory or Hub id, **overrides) -> AlbertConfig."""

    def __init__(self) -> None:
        raise TypeError("AutoConfig is used through AutoConfig.from_pretrained(...)")

    @staticmethod
    def from_pretrained(name_or_path: str | os.PathLike, *, local_files_only: bool = False,
                        revision: str | None = None, cache_dir: str | os.PathLike | None = None,
                        token: str | bool | None = None, **overrides: Any) -> AlbertConfig:
        directory = resolve_model_dir(name_or_path, local_files_only, revision, cache_dir, token)
        return AlbertConfig.from_pretrained(directory, **overrides)


class AutoTokenizer:
    """AutoTokenizer.from_pretrained(directory, Hub id or spiece.model) -> litebert's Tokenizer, which answers
    AlbertTokenizerFast's calls (docs/transformers.md)."""

    def __init__(self) -> None:
        raise TypeError("AutoTokenizer is used through AutoTokenizer.from_pretrained(...)")

    @staticmethod
    def from_pretrained(name_or_path: str | os.PathLike, **options: Any) -> Tokenizer:
        return Tokenizer.from_pretrained(os.fspath(name_or_path), **options)


class _AutoModel:
    """The litebert class `target` names, reached by transformers' Auto name."""

    target = "AlbertModel"

    def __init__(self) -> None:
        raise TypeError(f"{type(self).__name__} is used through {type(self).__name__}.from_pretrained(...) or "
                        ".from_config(config)")

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *args: Any, **kwargs: Any):
        return MODEL_CLASSES[cls.target].from_pretrained(name_or_path, *args, **kwargs)

    @classmethod
    def from_config(cls, config: Any):
        """A freshly initialised model of `config` (litebert's AlbertConfig or transformers')."""
        return MODEL_CLASSES[cls.target](given_config(config))


def _auto(name: str, target: str) -> type:
    return type(name, (_AutoModel,), {"target": target, "__doc__": f"{name}.from_pretrained(...) -> {target}."})


AutoModel = _auto("AutoModel", "AlbertModel")
AutoModelForPreTraining = _auto("AutoModelForPreTraining", "AlbertForPreTraining")
AutoModelForMaskedLM = _auto("AutoModelForMaskedLM", "AlbertForMaskedLM")
AutoModelForSequenceClassification = _auto("AutoModelForSequenceClassification", "AlbertForSequenceClassification")
AutoModelForTokenClassification = _auto("AutoModelForTokenClassification", "AlbertForTokenClassification")
AutoModelForQuestionAnswering = _auto("AutoModelForQuestionAnswering", "AlbertForQuestionAnswering")
AutoModelForMultipleChoice = _auto("AutoModelForMultipleChoice", "AlbertForMultipleChoice")

# transformers' ALBERT tokenizer names: litebert has one tokenizer, the fast one's behaviour
AlbertTokenizer = AlbertTokenizerFast = Tokenizer

AUTO_MODELS = (AutoModel, AutoModelForPreTraining, AutoModelForMaskedLM, AutoModelForSequenceClassification,
               AutoModelForTokenClassification, AutoModelForQuestionAnswering, AutoModelForMultipleChoice)

__all__ = ["AutoConfig", "AutoTokenizer", "AlbertTokenizer", "AlbertTokenizerFast", *(c.__name__ for c in AUTO_MODELS)]
