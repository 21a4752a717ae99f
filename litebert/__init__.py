"""litebert: ALBERT (Lan et al., 2019) end to end in PyTorch.

Public names are imported lazily so that `import litebert` stays cheap (the CLI and data workers import it).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "AlbertConfig": "litebert.config",
    "PRESETS": "litebert.config",
    "AlbertModel": "litebert.model",
    "AlbertForPreTraining": "litebert.model",
    "AlbertForMaskedLM": "litebert.model",
    "AlbertForSequenceClassification": "litebert.heads",
    "AlbertForTokenClassification": "litebert.heads",
    "AlbertForQuestionAnswering": "litebert.heads",
    "AlbertForMultipleChoice": "litebert.heads",
    "Tokenizer": "litebert.tokenizer",
    "Lamb": "litebert.training.optim",
    "pipeline": "litebert.serving.pipeline",
    **dict.fromkeys(("AutoConfig", "AutoTokenizer", "AlbertTokenizer", "AlbertTokenizerFast", "AutoModel",
                     "AutoModelForPreTraining", "AutoModelForMaskedLM", "AutoModelForSequenceClassification",
                     "AutoModelForTokenClassification", "AutoModelForQuestionAnswering",
                     "AutoModelForMultipleChoice"), "litebert.auto"),
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'litebert' has no attribute {name!r}")
