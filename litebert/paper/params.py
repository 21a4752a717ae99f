"""Parameter counts of the paper's models, counted from the real modules, beside the paper's Tables 1 and 4.

Models are built on the meta device: counting xxlarge costs no memory. The paper does not say what it counts,
and its figures do not all follow one convention, so three counts are given per row: the encoder as litebert
(and HF) build it; without the E->H projection when E = H (BERT has no factorization, so no projection); and
also without the pooler. The verdict names the count that rounds to the paper's figure, or says that none can.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch

from litebert.config import PRESETS, AlbertConfig
from litebert.model import AlbertModel
from litebert.runconfig import parse_verb, verb_parser
from litebert.weights import parameter_count


@dataclass
class Row:
    table: str
    name: str
    config: AlbertConfig
    paper_millions: float | None


def _base(**overrides) -> AlbertConfig:
    return AlbertConfig.from_preset("albert-base-v2", **overrides)


def paper_rows() -> list[Row]:
    rows = [Row("Table 1", name, AlbertConfig.from_preset(name), paper)
            for name, paper in [("bert-base", 108), ("bert-large", 334), ("albert-base-v2", 12),
                                ("albert-large-v2", 18), ("albert-xlarge-v2", 60), ("albert-xxlarge-v2", 235)]]
    table5 = {768: {"all": 31, "attention": 83, "ffn": 57, "none": 108},
              128: {"all": 12, "attention": 64, "ffn": 38, "none": 89}}
    for E, figures in table5.items():
        for sharing, paper in figures.items():
            groups = 1 if sharing == "all" else 12
            rows.append(Row("Table 4", f"base E={E} sharing={sharing}",
                            _base(embedding_size=E, sharing=sharing, num_hidden_groups=groups), paper))
    rows += [Row("preset", name, AlbertConfig.from_preset(name), None)
             for name in PRESETS if not any(r.name == name for r in rows)]
    return rows


COUNTS = ("as built", "no E=H projection", "no projection, no pooler")


def counts(config: AlbertConfig) -> dict[str, int]:
    """The three counts of COUNTS for one config."""
    with torch.device("meta"):
        model = AlbertModel(config)
    total = model.num_parameters()
    projection = 0
    if config.embedding_size == config.hidden_size:
        projection = parameter_count(model.encoder.embedding_hidden_mapping_in)
    pooler = parameter_count(model.pooler)
    return dict(zip(COUNTS, (total, total - projection, total - projection - pooler)))


def verdict(row: Row, found: dict[str, int]) -> str:
    if row.paper_millions is None:
        return ""
    for convention, n in found.items():
        if round(n / 1e6) == row.paper_millions:
            return f"matches ({convention})"
    notes = {
        "albert-xlarge-v2": "unreachable: H=2048, 24 layers, E=128 gives 58.7M (the released model has the same)",
        "albert-xxlarge-v2": "unreachable: H=4096, 12 layers, E=128 gives 222.6M (the released model has the same)",
    }
    return notes.get(row.name, "unreachable by the architecture described")


def table() -> list[dict]:
    out = []
    for row in paper_rows():
        found = counts(row.config)
        out.append({"table": row.table, "model": row.name, "counts": found,
                    "paper_millions": row.paper_millions, "verdict": verdict(row, found)})
    return out


@dataclass
class ParamsConfig:
    """The options of `litebert params` (the [params] table of --config)."""

    json: bool = field(default=False, metadata={"help": "print JSON lines instead of a table"})


def cli(argv: list[str]) -> int:

    parser = verb_parser("params", __doc__, {"output": ParamsConfig})
    (cfg,) = parse_verb(parser, argv)
    rows = table()
    if cfg.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{'':8} {'model':30} {'as built':>9} {'no proj':>9} {'no pooler':>9} {'paper':>6}  verdict")
    for r in rows:
        paper = "" if r["paper_millions"] is None else f"{r['paper_millions']}M"
        found = "".join(f"{n / 1e6:9.2f}M" for n in r["counts"].values())
        print(f"{r['table']:8} {r['model']:30}{found} {paper:>6}  {r['verdict']}")
    print("\nas built: AlbertModel (embeddings, E->H projection, encoder, pooler; no pretraining heads).\n"
          "no proj: without the E->H projection when E = H (BERT has none). no pooler: also without the pooler.")
    return 0
