"""README.md beside every saved model: a model card as the Hugging Face Hub reads one.

YAML front matter (library_name, tags, pipeline_tag, and license, base_model and metrics when known), then what
the model is. library_name is "transformers", not "litebert": the directory loads in transformers unchanged, and
the Hub shows that library's loading snippet; the "litebert" tag says where it was made. A README.md that litebert
did not write (a user's own card) is left as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from litebert.files import write_text_atomically
from litebert.hub import looks_like_hub_id

CARD_NAME = "README.md"
MARKER = "<!-- model card written by litebert -->"
PIPELINE_TAGS = {"AlbertModel": "feature-extraction", "AlbertForPreTraining": "fill-mask",
                 "AlbertForMaskedLM": "fill-mask", "AlbertForSequenceClassification": "text-classification",
                 "AlbertForTokenClassification": "token-classification",
                 "AlbertForQuestionAnswering": "question-answering"}  # the Hub has no multiple-choice pipeline


def model_card(architecture: str, config: dict[str, Any], parameters: int, base_model: str | None = None,
               license: str | None = None, metrics: dict[str, float] | None = None,
               summary: str | None = None) -> str:
    """The text of README.md. `config` is config.json's dict; `metrics` ({name: value}) and `summary` (a line
    on how it was trained) come from the run that saved it, when it says."""
    meta: list[str] = ["library_name: transformers", "tags:", "- albert", "- litebert"]
    if architecture in PIPELINE_TAGS:
        meta.append(f"pipeline_tag: {PIPELINE_TAGS[architecture]}")
    if license:
        meta.append(f"license: {license}")
    hub_base = base_model if base_model and looks_like_hub_id(base_model) and not os.path.exists(base_model) else None
    if hub_base:
        meta.append(f"base_model: {hub_base}")
    shape = (f"hidden size {config.get('hidden_size')}, {config.get('num_hidden_layers')} layers over "
             f"{config.get('num_hidden_groups')} parameter group(s), embeddings {config.get('embedding_size')}, "
             f"{config.get('num_attention_heads')} heads, {config.get('max_position_embeddings')} positions, "
             f"vocabulary {config.get('vocab_size')}")
    body = [MARKER, f"# {architecture}", "",
            f"An ALBERT model ({parameters / 1e6:.2f}M parameters; {shape}) saved by litebert. "
            "It loads in transformers as it is "
            f"(`transformers.{architecture}.from_pretrained(path)`) and in litebert "
            f"(`litebert.{architecture}.from_pretrained(path)`)."]
    labels = config.get("id2label")
    if labels and architecture in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
        body += ["", "Labels: " + ", ".join(f"{i} {name}" for i, name in sorted((int(k), v) for k, v in labels.items()))]
    if base_model:
        body += ["", f"Initialised from `{base_model}`."]
    if summary:
        body += ["", "## Training", "", summary]
    if metrics:
        body += ["", "## Results", "", "| metric | value |", "|---|---|"]
        body += [f"| {name} | {value:.4g} |" if isinstance(value, float) else f"| {name} | {value} |"
                 for name, value in metrics.items()]
    return "---\n" + "\n".join(meta) + "\n---\n" + "\n".join(body) + "\n"


def write_model_card(directory: str | os.PathLike, architecture: str, parameters: int, **card: Any) -> bool:
    """Write README.md into a model directory holding config.json, unless a README.md there is someone else's.
    Returns whether it wrote. `card`: model_card's base_model, license, metrics, summary."""
    path = Path(directory) / CARD_NAME
    if path.is_file() and MARKER not in path.read_text(encoding="utf-8", errors="replace"):
        return False
    config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    write_text_atomically(path, model_card(architecture, config, parameters, **card))
    return True
