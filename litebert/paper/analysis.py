"""Layer-to-layer transitions: the paper's Figure 1 (L2 distance and cosine similarity between the input and
output embeddings of each layer application), showing that sharing smooths the path from layer to layer.

The states are the model's own hidden states (output_hidden_states: the projected embeddings, then each block
application's output, a shared block once per application), which also keep the batch padded, whatever the
model's padding_free says, so that the attention mask picks its real tokens.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
from dataclasses import dataclass, field

import torch
from torch import nn

from litebert.corpus.documents import iter_documents, resolve_inputs
from litebert.errors import ConfigError, DataError
from litebert.files import check_replaceable, save_figure, write_json
from litebert.model import AlbertModel, encoder_of
from litebert.runconfig import parse_verb, verb_parser
from litebert.tokenizer import Tokenizer


@torch.no_grad()
def layer_transitions(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                      ) -> dict[str, list[float]]:
    """For each of the L (x inner_group_num) block applications: mean L2 distance and mean cosine similarity
    between its input and output token embeddings, over non-padding tokens."""
    albert = encoder_of(model)
    was_training = albert.training
    albert.eval()
    try:
        states = albert(input_ids, attention_mask, output_hidden_states=True).hidden_states
    finally:
        albert.train(was_training)
    keep = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    l2, cosine = [], []
    for before, after in zip(states[:-1], states[1:]):
        a, b = before[keep].float(), after[keep].float()  # (N, H)
        l2.append((a - b).norm(dim=-1).mean().item())
        cosine.append(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean().item())
    return {"l2": l2, "cosine": cosine}


def plot_transitions(results: dict[str, dict[str, list[float]]], path: str) -> str:
    """One line per model, L2 on the left and cosine on the right, as in the paper's Figure 1."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_l2, ax_cos) = plt.subplots(1, 2, figsize=(10, 4))
    for name, r in results.items():
        layers = range(1, len(r["l2"]) + 1)
        ax_l2.plot(layers, r["l2"], marker="o", label=name)
        ax_cos.plot(layers, r["cosine"], marker="o", label=name)
    ax_l2.set(title="L2 distance, layer input -> output", xlabel="layer", ylabel="L2")
    ax_cos.set(title="cosine similarity, layer input -> output", xlabel="layer", ylabel="cosine")
    ax_l2.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


IMAGE_FORMATS = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml", ".jpg": b"\xff\xd8\xff",
                 ".jpeg": b"\xff\xd8\xff", ".eps": b"%!PS", ".ps": b"%!PS"}  # what matplotlib writes, by signature
IMAGE_SUFFIXES = tuple(IMAGE_FORMATS)


def _is_image(path) -> bool:
    with open(path, "rb") as f:
        return f.read(8).startswith(tuple(IMAGE_FORMATS.values()))


def _is_transitions(path) -> bool:
    results = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(results, dict) and all(isinstance(r, dict) and {"l2", "cosine"} <= set(r)
                                             for r in results.values())


@dataclass
class AnalyzeConfig:
    """The options of `litebert analyze` (the [analyze] table of --config)."""

    models: list[str] = field(default_factory=list, metadata={
        "positional": True, "required": True, "help": "model directories (litebert or HF) to compare"})
    text: str | None = field(default=None, metadata={
        "help": "a text file, one sentence per line (default: the bundled corpus)", "metavar": "FILE"})
    max_sentences: int = field(default=64, metadata={"range": "[1, inf)",
        "help": "sentences of the text fed to every model"})
    max_length: int | None = field(default=None, metadata={"range": "[4, inf)",
        "help": "tokens per sentence (default: each model's max_position_embeddings)"})
    out: str = field(default="transitions.png", metadata={
        "help": "where to write the plot (a .json goes beside)", "metavar": "FILE"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace --out (and its .json) even when they are not a plot and results of this verb"})


def cli(argv: list[str]) -> int:

    parser = verb_parser("analyze", __doc__, {"models and text": AnalyzeConfig})
    (cfg,) = parse_verb(parser, argv)
    json_out = os.path.splitext(cfg.out)[0] + ".json"
    if not cfg.out.lower().endswith(IMAGE_SUFFIXES):
        raise ConfigError(f"--out {cfg.out}: the plot's file name ends with one of {', '.join(IMAGE_SUFFIXES)}")
    check_replaceable(cfg.out, _is_image, "an image", cfg.overwrite)
    check_replaceable(json_out, _is_transitions, "the transitions of litebert analyze", cfg.overwrite)
    results = {}
    sentences, skipped = read_sentences(cfg.text, cfg.max_sentences)  # the same text for every model
    for name, directory in zip(model_names(cfg.models), cfg.models):
        tokenizer = Tokenizer.from_pretrained(directory)
        model = AlbertModel.from_pretrained(directory)
        batch = tokenizer(sentences, padding=True, truncation=True,
                          max_length=cfg.max_length or model.config.max_position_embeddings, return_tensors="pt")
        results[name] = layer_transitions(
            model, batch["input_ids"], batch["attention_mask"])
    plot_transitions(results, cfg.out)
    write_json(json_out, results, indent=1)
    for name, r in results.items():
        print(f"{name}: L2 {' '.join(f'{x:.2f}' for x in r['l2'])}")
        print(f"{'':{len(name)}}  cos {' '.join(f'{x:.2f}' for x in r['cosine'])}")
    print(f"{len(sentences)} sentences of {cfg.text or 'the bundled corpus'}" +
          "".join(f", {n} {kind.removeprefix('skipped_').replace('_', ' ')} skipped" for kind, n in skipped.items()))
    print(f"plot: {cfg.out}")
    return 0


def model_names(directories: list[str]) -> list[str]:
    """Short labels for the plot: the directory names, or, where two runs end alike (runA/final, runB/final),
    the paths below their common parent."""
    paths = [os.path.normpath(os.path.abspath(d)) for d in directories]
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        raise ConfigError(f"{twice[0]} is given twice; compare different models")
    names = [os.path.basename(p) for p in paths]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath(paths)
    return [os.path.relpath(p, common) if p != common else os.path.basename(p) for p in paths]


def read_sentences(path: str | None, limit: int) -> tuple[list[str], dict[str, int]]:
    """The first `limit` sentences of a corpus in any form `litebert prepare` reads (default: the bundled one),
    and what was skipped on the way ({"skipped_non_utf8_lines": 2}), for the summary: the figure is over
    these sentences only. Blank lines end documents, as in prepare's corpora: they skip no sentence."""
    files, stats = resolve_inputs(path), collections.Counter()
    sentences = list(itertools.islice((s for doc in iter_documents(files, stats=stats) for s in doc), limit))
    if not sentences:
        raise DataError(f"{path or files[0]}: no sentences")
    return sentences, {k: n for k, n in sorted(stats.items()) if k.startswith("skipped_") and n}
