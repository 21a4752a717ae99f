"""`litebert reproduce EXPERIMENT`: the ALBERT paper's controlled experiments, one command each.

Each experiment (embedding size, cross-layer sharing, the inter-sentence objective, ...) is a named record of
rows; a row lists only what the paper changes (model fields at the paper's sizes, the objective, the data) and
the paper's numbers for it. A scale turns the paper's sizes into runnable ones (`cpu`: the demo's shapes,
minutes per row on 2 cores; `tiny`: seconds, for tests; `paper`: the paper's own, written as recipes and
torchrun commands instead of run). Every row of a grid gets the same budget and the same scoring: held-out MLM
and SOP accuracy (NSP too where the paper reports it) on pairs cut from documents no row trained on, and,
with --downstream, the average best dev score of fine-tuning on the bundled tasks with one fixed recipe.

    litebert reproduce objective --out out/paper/objective --seeds 2
    litebert reproduce embedding --out out/paper/embedding --scale paper --corpus wiki_books.txt

The grid resumes: rerunning the command skips every finished row (its result.json), resumes a killed row from
its last checkpoint, and --rows reruns a subset from scratch. The report (report.md beside results.json and
PNG plots) sets the grid's table beside the paper's and says, for each comparison the paper makes, whether the
ordering reproduces; with --seeds N a cell is mean ± sample standard deviation, and an ordering counts only
when the gap exceeds the combined spread (sqrt(sd_a^2 + sd_b^2)); otherwise it is "within noise".
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from litebert.errors import ConfigError, LitebertError
from litebert.files import write_json, write_text_atomically
from litebert.runconfig import BUNDLED_CONFIGS, load_toml

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
SOURCE = "Lan et al., ALBERT, arXiv:1909.11942 v6 (ICLR 2020)"


# -- the paper's experiments as data ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One run of a grid: what the paper changes for it, and the paper's numbers (its table's columns)."""

    name: str
    model: Mapping[str, Any] = field(default_factory=dict)  # AlbertConfig fields at the paper's sizes
    data: Mapping[str, Any] = field(default_factory=dict)  # pair_task (sop|nsp), objective (mlm), extra (bool)
    base: str | None = None  # preset the row starts from (default: the experiment's)
    warm_start: str | None = None  # a row whose final checkpoint this one continues from (Table 11)
    paper: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """A comparison the paper makes. Each pair (high, low) says high > low on `metric` ("order"), or that the
    two are within `tol` of each other ("near"). A side is a row name, "chance" (the held-out majority
    label), a number, or a difference "A - B" of those."""

    text: str
    pairs: tuple[tuple[str, str], ...]
    metric: str = "avg"
    kind: str = "order"
    tol: float = 0.0


@dataclass(frozen=True)
class Experiment:
    name: str
    table: str
    title: str
    base: str  # the paper's model for the rows (a preset)
    rows: tuple[Row, ...]
    columns: tuple[str, ...]  # the paper's columns, in its order
    claims: tuple[Claim, ...]
    held_out: tuple[str, ...] = ("sop",)  # held-out pair sets every row is scored on
    budget: str = "steps"  # or "minutes": every row gets the same wall-clock time (Table 6)
    analysis: str | None = None  # "transitions": Figure 1's per-layer L2 and angle
    note: str = ""


DOWNSTREAM = ("SQuAD1.1", "SQuAD2.0", "MNLI", "SST-2", "RACE", "Avg")
NOT_SHARED = {"sharing": "none", "num_hidden_groups": 12}  # ALBERT-base with every layer its own (BERT-style)


def _cells(columns: tuple[str, ...], text: str) -> dict[str, Any]:
    """The paper's cells of one row, written as its table prints them ("89M | 89.9/82.8 | ... | 81.7")."""
    values = [v.strip() for v in text.split("|")]
    assert len(values) == len(columns), (columns, text)
    return {c: (float(v) if re.fullmatch(r"[\d.]+", v) else v) for c, v in zip(columns, values)}


_T3 = ("Params",) + DOWNSTREAM
_T5 = ("MLM acc", "NSP acc", "SOP acc") + DOWNSTREAM


def _embedding() -> Experiment:
    paper = {("not-shared", 64): "87M | 89.9/82.9 | 80.1/77.8 | 82.9 | 91.5 | 66.7 | 81.3",
             ("not-shared", 128): "89M | 89.9/82.8 | 80.3/77.3 | 83.7 | 91.5 | 67.9 | 81.7",
             ("not-shared", 256): "93M | 90.2/83.2 | 80.3/77.4 | 84.1 | 91.9 | 67.3 | 81.8",
             ("not-shared", 768): "108M | 90.4/83.2 | 80.4/77.6 | 84.5 | 92.8 | 68.2 | 82.3",
             ("all-shared", 64): "10M | 88.7/81.4 | 77.5/74.8 | 80.8 | 89.4 | 63.5 | 79.0",
             ("all-shared", 128): "12M | 89.3/82.3 | 80.0/77.1 | 81.6 | 90.3 | 64.0 | 80.1",
             ("all-shared", 256): "16M | 88.8/81.5 | 79.1/76.3 | 81.5 | 90.3 | 63.4 | 79.6",
             ("all-shared", 768): "31M | 88.6/81.5 | 79.2/76.6 | 82.0 | 90.6 | 63.3 | 79.8"}
    rows = tuple(Row(f"{sharing} E={e}", {"embedding_size": e, **(NOT_SHARED if sharing == "not-shared" else {})},
                     paper=_cells(_T3, cells)) for (sharing, e), cells in paper.items())
    return Experiment(
        "embedding", "Table 3", "Effect of the vocabulary embedding size E", "albert-base-v2", rows, _T3, (
            Claim("not-shared: a larger E is better (E=768 > 256 > 128 > 64)",
                  (("not-shared E=768", "not-shared E=256"), ("not-shared E=256", "not-shared E=128"),
                   ("not-shared E=128", "not-shared E=64"))),
            Claim("all-shared: E=128 is best", (("all-shared E=128", "all-shared E=64"),
                                                ("all-shared E=128", "all-shared E=256"),
                                                ("all-shared E=128", "all-shared E=768"))),
            Claim("sharing costs accuracy at every E (not-shared > all-shared)",
                  tuple((f"not-shared E={e}", f"all-shared E={e}") for e in (64, 128, 256, 768))),
            Claim("all-shared loses least at E=128", tuple(
                (f"not-shared E={e} - all-shared E={e}", "not-shared E=128 - all-shared E=128")
                for e in (64, 256, 768))),
        ), note="E=768 is E=H: no factorization (BERT's embedding). At a scale, E=H maps to that scale's H.")


def _sharing() -> Experiment:
    paper = {(768, "all-shared"): "31M | 88.6/81.5 | 79.2/76.6 | 82.0 | 90.6 | 63.3 | 79.8",
             (768, "shared-attention"): "83M | 89.9/82.7 | 80.0/77.2 | 84.0 | 91.4 | 67.7 | 81.6",
             (768, "shared-FFN"): "57M | 89.2/82.1 | 78.2/75.4 | 81.5 | 90.8 | 62.6 | 79.5",
             (768, "not-shared"): "108M | 90.4/83.2 | 80.4/77.6 | 84.5 | 92.8 | 68.2 | 82.3",
             (128, "all-shared"): "12M | 89.3/82.3 | 80.0/77.1 | 82.0 | 90.3 | 64.0 | 80.1",
             (128, "shared-attention"): "64M | 89.9/82.8 | 80.7/77.9 | 83.4 | 91.9 | 67.6 | 81.7",
             (128, "shared-FFN"): "38M | 88.9/81.6 | 78.6/75.6 | 82.3 | 91.7 | 64.4 | 80.2",
             (128, "not-shared"): "89M | 89.9/82.8 | 80.3/77.3 | 83.2 | 91.5 | 67.9 | 81.6"}
    strategy = {"all-shared": {}, "shared-attention": {"sharing": "attention", "num_hidden_groups": 12},
                "shared-FFN": {"sharing": "ffn", "num_hidden_groups": 12}, "not-shared": NOT_SHARED}
    rows = tuple(Row(f"E={e} {s}", {"embedding_size": e, **strategy[s]}, paper=_cells(_T3, cells))
                 for (e, s), cells in paper.items())
    return Experiment(
        "sharing", "Table 4", "Cross-layer parameter-sharing strategies", "albert-base-v2", rows, _T3, (
            Claim("sharing all parameters costs accuracy (not-shared > all-shared) at E=768 and E=128",
                  (("E=768 not-shared", "E=768 all-shared"), ("E=128 not-shared", "E=128 all-shared"))),
            Claim("sharing the FFN is what hurts: shared-attention > shared-FFN at both E",
                  (("E=768 shared-attention", "E=768 shared-FFN"), ("E=128 shared-attention", "E=128 shared-FFN"))),
            Claim("sharing attention costs little: shared-attention > all-shared at both E",
                  (("E=768 shared-attention", "E=768 all-shared"), ("E=128 shared-attention", "E=128 all-shared"))),
            Claim("all-shared loses less at E=128 than at E=768",
                  (("E=768 not-shared - E=768 all-shared", "E=128 not-shared - E=128 all-shared"),)),
        ), note="The paper prints all-shared E=128 MNLI as 81.6 in Table 3 and 82.0 here; both are quoted as printed.")


def _objective() -> Experiment:
    rows = (Row("None", data={"objective": "mlm"},
                paper=_cells(_T5, "54.9 | 52.4 | 53.3 | 88.6/81.5 | 78.1/75.3 | 81.5 | 89.9 | 61.7 | 79.0")),
            Row("NSP", data={"pair_task": "nsp"},
                paper=_cells(_T5, "54.5 | 90.5 | 52.0 | 88.4/81.5 | 77.2/74.6 | 81.6 | 91.1 | 62.3 | 79.2")),
            Row("SOP", data={"pair_task": "sop"},
                paper=_cells(_T5, "54.0 | 78.9 | 86.5 | 89.3/82.3 | 80.0/77.1 | 82.0 | 90.3 | 64.0 | 80.1")))
    return Experiment(
        "objective", "Table 5", "The inter-sentence objective: none, NSP or SOP", "albert-base-v2", rows, _T5, (
            Claim("SOP-trained solves SOP, NSP-trained does not (SOP acc: SOP > NSP)", (("SOP", "NSP"),), "sop_acc"),
            Claim("NSP-trained is near chance on SOP (within 5 points of the majority label)", (("NSP", "chance"),),
                  "sop_acc", kind="near", tol=0.05),
            Claim("SOP-trained transfers to NSP (its NSP acc above the majority label's)", (("SOP", "chance"),),
                  "nsp_acc"),
            Claim("NSP-trained is best on NSP (NSP acc: NSP > SOP)", (("NSP", "SOP"),), "nsp_acc"),
            Claim("a sentence objective costs a little MLM accuracy (None > SOP)", (("None", "SOP"),), "mlm_acc"),
            Claim("SOP gives the best downstream average (SOP > NSP, SOP > None)", (("SOP", "NSP"), ("SOP", "None"))),
        ), held_out=("sop", "nsp"),
        note="Every row trains on the same documents: None is the SOP data with the sentence loss off, NSP the "
             "same text cut into next-sentence pairs. The paper's intrinsic accuracies are on its own dev set.")


def _same_time() -> Experiment:
    cols = DOWNSTREAM
    rows = (Row("BERT-large", {"embedding_size": 1024, "sharing": "none", "num_hidden_groups": 24},
                base="albert-large-v2", paper=_cells(cols, "93.5/87.4 | 86.9/84.3 | 87.8 | 94.6 | 77.3 | 87.2")),
            Row("ALBERT-xxlarge", base="albert-xxlarge-v2",
                paper=_cells(cols, "94.0/88.1 | 88.3/85.3 | 87.8 | 95.4 | 82.5 | 88.7")))
    return Experiment(
        "same-time", "Table 6", "The same training time: BERT-large vs ALBERT-xxlarge", "albert-large-v2", rows,
        cols, (Claim("ALBERT-xxlarge beats BERT-large in the same time", (("ALBERT-xxlarge", "BERT-large"),)),),
        budget="minutes", note="The paper: BERT-large 400k steps in 34 h, ALBERT-xxlarge 125k steps in 32 h. Here "
                               "each row's steps are what fits --budget-minutes at its measured speed.")


def _data() -> Experiment:
    rows = (Row("no additional data", paper=_cells(DOWNSTREAM, "89.3/82.3 | 80.0/77.1 | 81.6 | 90.3 | 64.0 | 80.1")),
            Row("with additional data", data={"extra": True},
                paper=_cells(DOWNSTREAM, "88.8/81.7 | 79.1/76.3 | 82.4 | 92.8 | 66.0 | 80.8")))
    return Experiment("data", "Table 7", "Additional training data", "albert-base-v2", rows, DOWNSTREAM, (
        Claim("additional data raises the average", (("with additional data", "no additional data"),)),),
        note="The additional text is --extra-corpus; held-out scoring stays on the main corpus's held-out documents.")


_DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


def _dropout() -> Experiment:
    rows = (Row("with dropout", _DROPOUT,
                paper=_cells(DOWNSTREAM, "94.7/89.2 | 89.6/86.9 | 90.0 | 96.3 | 85.7 | 90.4")),
            Row("without dropout", paper=_cells(DOWNSTREAM, "94.8/89.5 | 89.9/87.2 | 90.4 | 96.5 | 86.1 | 90.7")))
    return Experiment("dropout", "Table 8", "Removing dropout (ALBERT-xxlarge)", "albert-xxlarge-v2", rows, DOWNSTREAM,
                      (Claim("removing dropout helps", (("without dropout", "with dropout"),)),),
                      note="The paper's rows are at ~1M steps; a scale's budget is its own.")


def _depth() -> Experiment:
    cols = DOWNSTREAM
    paper = {1: "31.1/22.9 | 50.1/50.1 | 66.4 | 80.8 | 40.1 | 52.9",
             3: "79.8/69.7 | 64.4/61.7 | 77.7 | 86.7 | 54.0 | 71.2",
             6: "86.4/78.4 | 73.8/71.1 | 81.2 | 88.9 | 60.9 | 77.2",
             12: "89.8/83.3 | 80.7/77.9 | 83.3 | 91.7 | 66.7 | 81.5",
             24: "90.3/83.3 | 81.8/79.0 | 83.3 | 91.5 | 68.7 | 82.1"}
    depths = list(paper)
    rows = tuple(Row(f"L={d}", {"num_hidden_layers": d}, warm_start=f"L={depths[i - 1]}" if i else None,
                     paper=_cells(cols, paper[d])) for i, d in enumerate(depths))
    return Experiment("depth", "Table 11", "Number of layers (ALBERT-large, each warm-started from the shallower)",
                      "albert-large-v2", rows, cols, (
                          Claim("deeper is better up to 24 layers", tuple(
                              (f"L={b}", f"L={a}") for a, b in zip(depths, depths[1:]))),
                          Claim("the gains shrink: 6 -> 12 gains more than 12 -> 24",
                                (("L=12 - L=6", "L=24 - L=12"),)),
                      ), note="The paper's 48-layer row (81.8, below 24 layers' 82.1) is not in this grid.")


def _width() -> Experiment:
    cols = ("Params",) + DOWNSTREAM
    paper = {1024: "18M | 79.8/69.7 | 64.4/61.7 | 77.7 | 86.7 | 54.0 | 71.2",
             2048: "60M | 83.3/74.1 | 69.1/66.6 | 79.7 | 88.6 | 58.2 | 74.6",
             4096: "225M | 85.0/76.4 | 71.0/68.1 | 80.3 | 90.4 | 60.4 | 76.3",
             6144: "499M | 84.7/75.8 | 67.8/65.4 | 78.1 | 89.1 | 56.0 | 74.0"}
    rows = tuple(Row(f"H={h}", {"num_hidden_layers": 3, "hidden_size": h, "intermediate_size": 4 * h,
                                "num_attention_heads": h // 64}, paper=_cells(cols, cells))
                 for h, cells in paper.items())
    return Experiment("width", "Table 12", "Hidden size of a 3-layer ALBERT-large", "albert-large-v2", rows, cols, (
        Claim("wider is better up to H=4096", (("H=2048", "H=1024"), ("H=4096", "H=2048"))),
        Claim("the widest (H=6144) is worse than H=4096", (("H=4096", "H=6144"),)),
    ))


def _transitions() -> Experiment:
    rows = (Row("ALBERT-large"),
            Row("BERT-large", {"embedding_size": 1024, "sharing": "none", "num_hidden_groups": 24}))
    return Experiment(
        "transitions", "Figure 1", "Layer-to-layer transitions: L2 distance and angle between each layer's input "
                                   "and output", "albert-large-v2", rows, (), (
            Claim("ALBERT's L2 transitions are smoother than BERT's (less up-and-down over the layers)",
                  (("BERT-large", "ALBERT-large"),), "l2_oscillation"),
            Claim("ALBERT's angle transitions are smoother than BERT's", (("BERT-large", "ALBERT-large"),),
                  "angle_oscillation"),
            Claim("ALBERT's transitions do not converge to 0 (last layer's L2 above 5% of its largest)",
                  (("ALBERT-large", "0.05"),), "l2_last_ratio"),
        ), analysis="transitions",
        note="Figure 1 prints no numbers (L2 0-18, angle 0-45 degrees on its axes). Oscillation: the variation "
             "of a curve over layers 2..L beyond the net change (0 for a monotone curve), over its mean. The "
             "angle is arccos of the mean cosine similarity.")


def _curves() -> Experiment:
    rows = (Row("baseline"), Row("with dropout", _DROPOUT), Row("with additional data", data={"extra": True}))
    return Experiment(
        "curves", "Figure 2", "Held-out MLM accuracy over training: additional data, and dropout",
        "albert-base-v2", rows, (), (
            Claim("(a) additional data gives a higher MLM curve", (("with additional data", "baseline"),),
                  "mlm_acc_late"),
            Claim("(b) without dropout the MLM curve is higher", (("baseline", "with dropout"),), "mlm_acc_late"),
        ), note="Figure 2 prints no numbers ((a) 66-70% over steps 350k-550k; (b) 70-72.5% over 0.9M-1.5M, "
                "xxlarge). Here both panels use the base shape, one grid. mlm_acc_late: the mean held-out MLM "
                "accuracy over the evaluations of the second half of training.")


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    _embedding(), _sharing(), _objective(), _same_time(), _data(), _dropout(), _depth(), _width(), _transitions(),
    _curves())}


# -- scales ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scale:
    """How the paper's sizes become runnable ones, and the budget and scoring recipe of every row."""

    name: str
    sizes: Mapping[str, Mapping[int, int]]  # field -> {paper value: this scale's}; absent field: unchanged
    head_size: int  # hidden_size / num_attention_heads
    data: Mapping[str, Any]  # corpus, vocab_size, max_seq_length, dupe_factor, held_out_fraction, max_documents
    train: Mapping[str, Any]  # TrainConfig fields of every pretraining row
    pretrain: Mapping[str, Any]  # PretrainConfig fields
    finetune: Mapping[str, Any]  # the downstream recipe: TrainConfig fields + max_length, tasks, limits
    downstream: bool  # fine-tune by default
    budget_minutes: float  # the same-time budget per row
    transitions_sentences: int = 256
    model: Mapping[str, Any] = field(default_factory=dict)  # fields fixed at this scale


_DEMO = load_toml(BUNDLED_CONFIGS / "demo.toml", ("model", "pretrain", "train"))
_PAPER = load_toml(BUNDLED_CONFIGS / "paper_base.toml", ("model", "pretrain", "train"))
_DOWNSTREAM_TASKS = ("novel_authorship", "novel_characters")  # bundled: litebert/data/<task>/

SCALES: dict[str, Scale] = {
    # The demo's shapes (H 128, E 64 for the paper's 128, 4 applications of the shared layer for ALBERT-base's
    # 12) and its LAMB recipe at sequence length 64: a few minutes per row on 2 cores.
    "cpu": Scale(
        "cpu", sizes={"hidden_size": {768: 128, 1024: 128, 2048: 256, 4096: 512, 6144: 768},
                      "embedding_size": {64: 32, 128: 64, 256: 96},
                      "num_hidden_layers": {1: 1, 3: 2, 6: 3, 12: 4, 24: 8}},
        head_size=32,
        data=dict(corpus=os.path.join(DATA, "demo_corpus.txt.gz"), vocab_size=8000, max_seq_length=64,
                  dupe_factor=2, held_out_fraction=0.03, max_documents=None),
        train={**_DEMO["train"], "max_steps": 2000, "warmup_steps": 200, "eval_every": 200, "save_every": 250,
               "keep_last": 1, "log_every": 50},
        pretrain={"held_out": 64, "eval_batch_size": 128},
        finetune=dict(tasks=_DOWNSTREAM_TASKS, optimizer="adamw", lr=3e-4, batch_size=32, max_steps=300,
                      warmup_steps=30, weight_decay=0.01, eval_every=100, save_every=0, keep_last=1, log_every=50,
                      max_length=64),
        downstream=True, budget_minutes=5.0),
    # For tests: a handful of steps of a 32-wide model on a slice of the bundled Persuasion.
    "tiny": Scale(
        "tiny", sizes={"hidden_size": {768: 32, 1024: 32, 2048: 48, 4096: 64, 6144: 96},
                       "embedding_size": {64: 8, 128: 16, 256: 24},
                       "num_hidden_layers": {1: 1, 3: 1, 6: 2, 12: 2, 24: 3}},
        head_size=16,
        data=dict(corpus=os.path.join(DATA, "en_small.txt.gz"), vocab_size=400, max_seq_length=32, dupe_factor=1,
                  held_out_fraction=0.25, max_documents=8, max_sentences=40),
        train=dict(optimizer="lamb", lr=1e-2, batch_size=8, max_steps=4, warmup_steps=1, eval_every=0,
                   save_every=0, keep_last=1, log_every=2),
        pretrain={"held_out": 8, "eval_batch_size": 64},
        finetune=dict(tasks=("novel_authorship",), optimizer="adamw", lr=1e-3, batch_size=8, max_steps=2,
                      warmup_steps=0, eval_every=0, save_every=0, keep_last=1, log_every=1, max_length=32,
                      max_train_examples=32, max_eval_examples=32),
        downstream=False, budget_minutes=0.01, transitions_sentences=16),
    # The paper's recipe (paper_base.toml's [train]: LAMB 0.00176, batch 4096, 125k steps, seq 512): written
    # as TOML recipes and torchrun commands, not run.
    "paper": Scale(
        "paper", sizes={}, head_size=64,
        data=dict(corpus=None, vocab_size=30000, max_seq_length=512, dupe_factor=10, held_out_fraction=0.01,
                  max_documents=None),
        train={**_PAPER["train"]}, pretrain={**_PAPER["pretrain"], "eval_batch_size": 64},
        finetune=dict(tasks=("squad-v1.1", "squad-v2.0", "MNLI-m", "SST-2", "race")),
        downstream=True, budget_minutes=32 * 60),
}


def scale_model(exp: Experiment, row: Row, scale: Scale, vocab_size: int, sets: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The row's AlbertConfig fields at `scale`: the paper's model (the preset with the row's changes) with its
    sizes mapped, heads = H / head_size, FFN in the paper's ratio to H, a factorized E kept below H and E = H
    kept equal; then the scale's fixed fields and `sets` (--set model.X), which may not touch what rows vary."""
    from litebert.config import AlbertConfig
    paper = AlbertConfig.from_preset(row.base or exp.base, **row.model)  # validated at the paper's sizes

    def size(name: str, value: int) -> int:
        table = scale.sizes.get(name)
        if table is None:
            return value
        if value not in table:
            raise ConfigError(f"scale {scale.name} has no {name} for the paper's {value} (row {row.name!r})")
        return table[value]

    h = size("hidden_size", paper.hidden_size)
    layers = size("num_hidden_layers", paper.num_hidden_layers)
    e = h if paper.embedding_size == paper.hidden_size else size("embedding_size", paper.embedding_size)
    fields = dataclasses.asdict(paper)
    fields.update(hidden_size=h, embedding_size=e, num_hidden_layers=layers,
                  num_hidden_groups=layers if paper.num_hidden_groups == paper.num_hidden_layers else
                  paper.num_hidden_groups, num_attention_heads=max(1, h // scale.head_size),
                  intermediate_size=paper.intermediate_size * h // paper.hidden_size,
                  max_position_embeddings=max(paper.max_position_embeddings if scale.name == "paper" else 0,
                                              scale.data["max_seq_length"]),
                  vocab_size=vocab_size, **scale.model)
    varied = {k for r in exp.rows for k in r.model}
    for key, value in (sets or {}).items():
        if key in varied:
            raise ConfigError(f"--set model.{key}: the {exp.name} experiment varies {key} itself")
        if key not in fields:
            raise ConfigError(f"--set model.{key}: AlbertConfig has no field {key!r}")
        fields[key] = value
    AlbertConfig(**fields)  # refuse an impossible shape before anything runs
    return fields


# -- settings, data --------------------------------------------------------------------------------------------

@dataclass
class ReproduceConfig:
    """The options of `litebert reproduce` (the [reproduce] table of --config)."""

    experiment: list[str] = field(default_factory=list, metadata={
        "positional": True, "required": True, "help": f"one of: {', '.join(EXPERIMENTS)}"})
    out: str = field(default="", metadata={"required": True, "metavar": "DIR", "help": (
        "the grid's directory: data, one directory per row and seed, report.md, results.json, plots")})
    scale: str = field(default="cpu", metadata={"choices": ("cpu", "paper", "tiny"), "help": (
        "cpu: small models, minutes per row on 2 cores; paper: write the paper-size recipes and commands, "
        "run nothing; tiny: seconds per row (tests)")})
    seeds: int = field(default=1, metadata={"help": "runs per row with seeds seed, seed+1, ...: cells are mean ± sd"})
    seed: int = field(default=12345, metadata={"help": "the first seed (data preparation always uses this one)"})
    budget_minutes: float | None = field(default=None, metadata={"help": (
        "same-time: wall-clock minutes per row (default: the scale's); other experiments: set the step budget "
        "of every row to what the first row does in this many minutes")})
    rows: list[str] = field(default_factory=list, metadata={"help": "rerun only these rows, from scratch"})
    corpus: str | None = field(default=None, metadata={"metavar": "FILE", "help": (
        "pretraining text (one sentence per line, blank line between documents; JSONL; .gz) (default: the "
        "scale's, the bundled demo corpus at cpu)")})
    extra_corpus: list[str] = field(default_factory=list, metadata={"metavar": "FILE", "help": (
        "the additional text of `data` and `curves` (e.g. ../shared/data/corpus/en/bible_*.jsonl)")})
    set: list[str] = field(default_factory=list, metadata={"metavar": "KEY=VALUE", "help": (
        "override any recipe field: model.X (AlbertConfig), train.X (TrainConfig), pretrain.X, "
        "data.X (vocab_size, max_seq_length, dupe_factor, held_out_fraction, max_documents), finetune.X")})
    downstream: bool | None = field(default=None, metadata={"help": (
        "fine-tune every row on the bundled tasks with one fixed recipe (default: on at cpu, off at tiny)")})
    data_dir: str | None = field(default=None, metadata={"metavar": "DIR", "help": (
        "where the tokenizer and prepared data go (default: OUT/data); grids with the same corpus and scale "
        "may share it")})
    report_dir: str | None = field(default=None, metadata={"metavar": "DIR", "help": (
        "where report.md, results.json and the plots go (default: --out)")})
    report_only: bool = field(default=False, metadata={"help": "write the report from the finished rows, run nothing"})

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {self.seeds}")
        if self.budget_minutes is not None and self.budget_minutes <= 0:
            raise ConfigError(f"--budget-minutes must be > 0, got {self.budget_minutes}")


SET_SECTIONS = ("model", "train", "pretrain", "data", "finetune")


def parse_sets(items: list[str]) -> dict[str, dict[str, Any]]:
    """--set section.key=value (value read as TOML: 3, 1e-3, true, "text", [1, 2]; bare words are strings)."""
    out: dict[str, dict[str, Any]] = {s: {} for s in SET_SECTIONS}
    for item in items:
        key, sep, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or section not in out or not name:
            raise ConfigError(f"--set {item!r}: expected SECTION.KEY=VALUE with SECTION one of "
                              f"{', '.join(SET_SECTIONS)}")
        try:
            value = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        out[section][name] = value
    return out


def resolved_scale(name: str, sets: Mapping[str, Mapping[str, Any]]) -> Scale:
    """The scale with --set's train/pretrain/data/finetune values (model.X is applied per row). A key of
    pretrain.X or finetune.X that the verb does not know is refused by the verb, when the row runs."""
    from litebert.training.loop import TrainConfig
    scale = SCALES[name]
    bad = set(sets["train"]) - {f.name for f in dataclasses.fields(TrainConfig)}
    if bad:
        raise ConfigError(f"--set train.{sorted(bad)[0]}: TrainConfig has no such field")
    bad = set(sets["data"]) - set(SCALES["cpu"].data) - {"max_sentences"}
    if bad:
        raise ConfigError(f"--set data.{sorted(bad)[0]}: known: {', '.join(SCALES['cpu'].data)}")
    return dataclasses.replace(scale, train={**scale.train, **sets["train"]},
                               pretrain={**scale.pretrain, **sets["pretrain"]}, data={**scale.data, **sets["data"]},
                               finetune={**scale.finetune, **sets["finetune"]})


def split_corpus(inputs: list[str] | str | None, out_dir: str, held_out_fraction: float,
                 max_documents: int | None = None, max_sentences: int | None = None, name: str = "train"
                 ) -> tuple[str, str]:
    """Write the corpus's documents as `{name}.txt` and `heldout.txt` (its last documents, at least one) in the
    one-sentence-per-line format; with max_documents / max_sentences, only the first documents / sentences of
    each. held_out_fraction 0 writes no held-out file (the additional corpus)."""
    from litebert.corpus.documents import iter_documents, resolve_inputs
    docs = []
    for doc in iter_documents(resolve_inputs(inputs)):
        docs.append(doc[:max_sentences] if max_sentences else doc)
        if max_documents and len(docs) >= max_documents:
            break
    cut = min(int(len(docs) * (1 - held_out_fraction)), len(docs) - 1) if held_out_fraction > 0 else len(docs)
    if cut < 1:
        raise ConfigError(f"{inputs}: {len(docs)} documents leave none to train on after holding out "
                          f"{held_out_fraction:.0%}")
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for part, chunk in ((name, docs[:cut]), ("heldout", docs[cut:])):
        path = os.path.join(out_dir, f"{part}.txt")
        paths.append(path)
        if chunk:
            write_text_atomically(path, "\n\n".join("\n".join(sentences) for sentences in chunk) + "\n")
    return paths[0], paths[1]


class GridData:
    """The grid's tokenizer and prepared directories, made once each (a directory with meta.json is done)."""

    def __init__(self, root: str, scale: Scale, seed: int, corpus: str | None, extra: list[str]):
        self.root, self.scale, self.seed, self.corpus, self.extra = root, scale, seed, corpus, extra
        self.split = os.path.join(root, "split")
        self.tokenizer = os.path.join(root, "tokenizer")

    def _ensure_split(self) -> None:
        if os.path.isfile(os.path.join(self.split, "heldout.txt")):
            return
        d = self.scale.data
        split_corpus(self.corpus or d["corpus"], self.split, d["held_out_fraction"], d.get("max_documents"),
                     d.get("max_sentences"))

    def _ensure_tokenizer(self) -> None:
        if os.path.isfile(os.path.join(self.tokenizer, "spiece.model")):
            return
        from litebert.corpus.tokenizer_training import train_tokenizer
        tmp = self.tokenizer + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        train_tokenizer([os.path.join(self.split, "train.txt")], tmp, vocab_size=self.scale.data["vocab_size"],
                        seed=self.seed)
        os.replace(tmp, self.tokenizer)

    def path(self, part: str, task: str, extra: bool = False) -> str:
        """Where the pairs of `part` (train | heldout) for `task` (sop | nsp) go, the additional text with extra."""
        return os.path.join(self.root, f"{part}_{task}" + ("+extra" if extra else ""))

    def inputs(self, part: str, extra: bool = False) -> list[str]:
        return [os.path.join(self.split, f"{part}.txt")] + ([os.path.join(self.split, "extra.txt")] if extra else [])

    def dir(self, part: str, task: str, extra: bool = False) -> str:
        """The prepared pairs of `part`, made now if missing (a directory with meta.json is done)."""
        from litebert.corpus.pairs import prepare
        out = self.path(part, task, extra)
        if os.path.isfile(os.path.join(out, "meta.json")):
            return out
        self._ensure_split()
        self._ensure_tokenizer()
        d = self.scale.data
        if extra and not os.path.isfile(self.inputs(part, extra)[-1]):
            if not self.extra:
                raise ConfigError("this experiment adds text: give it with --extra-corpus FILE ... (e.g. "
                                  "../shared/data/corpus/en/bible_kjv.jsonl)")
            split_corpus(self.extra, self.split, 0, d.get("max_documents"), d.get("max_sentences"), name="extra")
        prepare(self.inputs(part, extra), out, self.tokenizer, max_seq_length=d["max_seq_length"], pair_task=task,
                dupe_factor=d["dupe_factor"] if part == "train" else 1, seed=self.seed, num_workers=1,
                progress=False)
        return out

    def vocab_size(self) -> int:
        from litebert.tokenizer import Tokenizer
        self._ensure_split()
        self._ensure_tokenizer()
        return Tokenizer.from_pretrained(self.tokenizer).vocab_size


# -- running rows ----------------------------------------------------------------------------------------------

def slug(name: str) -> str:
    return re.sub(r"[^\w.+-]+", "_", name.replace("=", "")).strip("_")


@dataclass
class Grid:
    """One experiment at one scale in one directory."""

    exp: Experiment
    cfg: ReproduceConfig
    scale: Scale
    sets: dict[str, dict[str, Any]]
    out: str
    data: GridData

    @property
    def seeds(self) -> list[int]:
        return [self.cfg.seed + k for k in range(self.cfg.seeds)]

    def row_dir(self, row: Row, seed: int) -> str:
        return os.path.join(self.out, "rows", slug(row.name), f"seed{seed}")

    def result_path(self, row: Row, seed: int) -> str:
        return os.path.join(self.row_dir(row, seed), "result.json")

    def row(self, name: str) -> Row:
        for row in self.exp.rows:
            if name in (row.name, slug(row.name)):
                return row
        raise ConfigError(f"{self.exp.name} has no row {name!r}; its rows: {', '.join(r.name for r in self.exp.rows)}")


# Each row is a recipe (the TOML `litebert pretrain --config` reads) run by the verb itself in its own process:
# the paper scale writes the same recipes without running them, a stage imports no verb, and a row that dies
# takes nothing of the grid with it. Tests swap the command (e.g. to inject a crash into the child).
VERB_COMMAND = [sys.executable, "-m", "litebert.cli"]


def run_verb(verb: str, args: list[str], log_path: str) -> None:
    """`litebert VERB ARGS` in a child process, its output in `log_path`; a failure names the log."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:
        code = subprocess.run(VERB_COMMAND + [verb, *args], stdout=log, stderr=subprocess.STDOUT).returncode
    if code == -signal.SIGINT or code == 130:
        raise KeyboardInterrupt
    if code != 0:
        with open(log_path, errors="replace") as f:
            last = ([line.strip() for line in f if line.strip()] or ["(no output)"])[-1]
        raise LitebertError(f"litebert {verb} exited with {code}: {last} (log: {log_path})")


def train_table(grid: Grid, out_dir: str, seed: int, steps: int | None = None, **extra) -> dict[str, Any]:
    """A [train] table of the scale's recipe: resumable (rerunning a recipe continues it), quiet."""
    fields = {**grid.scale.train, "out_dir": out_dir, "seed": seed, "resume": True, "progress": False, **extra}
    if steps is not None and steps != fields["max_steps"]:  # a minutes budget: warm up for 1/10 at most
        fields["max_steps"] = steps
        fields["warmup_steps"] = min(fields.get("warmup_steps", 0), steps // 10)
    return fields


def row_recipe(grid: Grid, row: Row, seed: int, steps: int, vocab_size: int, run_dir: str,
               init_from: str | None) -> dict[str, Any]:
    """The row's [model], [pretrain] and [train] tables: the scale's recipe with the row's changes ([model]:
    the fields that differ from the row's preset)."""
    from litebert.config import AlbertConfig
    data = grid.data
    pretrain = {**grid.scale.pretrain, "data": data.path("train", row.data.get("pair_task", "sop"),
                                                         row.data.get("extra", False)),
                "model": row.base or grid.exp.base, "objective": row.data.get("objective", "auto"),
                "eval_data": [data.path("heldout", t) for t in grid.exp.held_out]}
    if init_from:
        pretrain["init_from"] = init_from
    model = scale_model(grid.exp, row, grid.scale, vocab_size, grid.sets["model"])
    preset = dataclasses.asdict(AlbertConfig.from_preset(row.base or grid.exp.base))
    return {"model": {k: v for k, v in model.items() if k != "vocab_size" and v != preset[k]}, "pretrain": pretrain,
            "train": train_table(grid, run_dir, seed, steps)}


def write_recipe(path: str, sections: Mapping[str, Any], header: str) -> str:
    from litebert.runconfig import dump_toml
    write_text_atomically(path, header + dump_toml(sections))
    return path


def seconds_per_step(grid: Grid, row: Row, probe_steps: int = 8) -> float:
    """One training step of the row, measured: a short run of its recipe, timed from its metrics log (the
    first two steps not counted). What a minutes budget is turned into steps with."""
    from litebert.training.metrics_log import METRICS_NAME, read_metrics
    probe = os.path.join(grid.out, "probe", slug(row.name))
    shutil.rmtree(probe, ignore_errors=True)
    sections = row_recipe(grid, row, grid.cfg.seed, probe_steps, grid.data.vocab_size(), probe, None)
    sections["train"].update(max_steps=probe_steps, warmup_steps=0, log_every=1, eval_every=0, save_every=0)
    sections["pretrain"]["eval_data"] = []
    recipe = write_recipe(os.path.join(probe, "recipe.toml"), sections, f"# speed probe of {row.name!r}\n")
    run_verb("pretrain", ["--config", recipe], os.path.join(probe, "log.txt"))
    tokens = sections["train"]["batch_size"] * grid.scale.data["max_seq_length"]
    rates = [r["tokens_per_s"] for r in read_metrics(os.path.join(probe, METRICS_NAME))
             if "tokens_per_s" in r and r["step"] > 2]
    shutil.rmtree(probe, ignore_errors=True)
    return tokens / (sum(rates) / len(rates))


def step_budgets(grid: Grid, state: dict[str, Any]) -> dict[str, int]:
    """Steps per row: the scale's (and --set train.max_steps), or from --budget-minutes and a timed probe,
    measured once and kept in grid.json so a resumed grid trains the same steps."""
    if "steps" in state:
        return state["steps"]
    minutes = grid.cfg.budget_minutes or (grid.scale.budget_minutes if grid.exp.budget == "minutes" else None)
    if minutes is None:
        steps = {r.name: int(grid.scale.train["max_steps"]) for r in grid.exp.rows}
    elif grid.exp.budget == "minutes":  # each row its own steps: the same time
        per = {r.name: seconds_per_step(grid, r) for r in grid.exp.rows}
        state["seconds_per_step"] = per
        steps = {name: max(1, int(minutes * 60 / s)) for name, s in per.items()}
    else:  # the same steps for every row: what the first row does in the time
        first = grid.exp.rows[0]
        state["seconds_per_step"] = {first.name: seconds_per_step(grid, first)}
        steps = {r.name: max(1, int(minutes * 60 / state["seconds_per_step"][first.name])) for r in grid.exp.rows}
    state["steps"] = steps
    return steps


def run_row(grid: Grid, row: Row, seed: int, steps: int) -> dict[str, Any]:
    """Pretrain one row with one seed (its recipe, through `litebert pretrain`), score it, and write its
    result.json, the mark of a finished row. A stage whose summary.json exists is not rerun; a killed
    pretraining resumes from its last checkpoint (the recipe says resume = true)."""
    d = grid.row_dir(row, seed)
    for t in grid.exp.held_out:
        grid.data.dir("heldout", t)
    grid.data.dir("train", row.data.get("pair_task", "sop"), row.data.get("extra", False))
    init_from = None
    if row.warm_start:
        warm = read_json(grid.result_path(grid.row(row.warm_start), seed))
        if warm is None:
            raise ConfigError(f"row {row.name!r} warm-starts from {row.warm_start!r}, which has not finished "
                              f"for seed {seed}: run it first")
        init_from = os.path.join(grid.out, warm["checkpoint"])
    pre_dir = os.path.join(d, "pretrain")
    summary = read_json(os.path.join(pre_dir, "summary.json"))
    if summary is None:
        recipe = write_recipe(os.path.join(d, "pretrain.toml"),
                              row_recipe(grid, row, seed, steps, grid.data.vocab_size(), pre_dir, init_from),
                              f"# {grid.exp.table}, row {row.name!r}, seed {seed} (litebert reproduce "
                              f"{grid.exp.name}, scale {grid.scale.name})\n")
        run_verb("pretrain", ["--config", recipe], os.path.join(d, "pretrain.log"))
        summary = read_json(os.path.join(pre_dir, "summary.json"))
    final = summary["final"]
    result: dict[str, Any] = {
        "row": row.name, "seed": seed, "parameters": summary["parameters"], "steps": summary["steps"],
        "init_from": os.path.relpath(init_from, grid.out) if init_from else None,
        "checkpoint": os.path.relpath(summary["checkpoint"], grid.out),
        "mlm_acc": final["heldout_sop/mlm_acc"], "mlm_loss": final["heldout_sop/mlm_loss"]}
    for t in grid.exp.held_out:
        result[f"{t}_acc"] = final[f"heldout_{t}/{t}_acc"]
    result["curve"] = mlm_curve(pre_dir)
    late = [acc for step, acc in result["curve"] if step > summary["steps"] / 2] or [result["mlm_acc"]]
    result["mlm_acc_late"] = sum(late) / len(late)
    checkpoint = os.path.join(grid.out, result["checkpoint"])
    if grid.exp.analysis == "transitions":
        result.update(transitions(grid, checkpoint))
    if downstream_on(grid):
        result["downstream"] = downstream(grid, checkpoint, d, seed)
        result["avg"] = sum(v["score"] for v in result["downstream"].values()) / len(result["downstream"])
    write_json(grid.result_path(row, seed), result)
    return result


def mlm_curve(run_dir: str) -> list[list[float]]:
    """[step, held-out MLM accuracy] of every evaluation of a run (metrics.jsonl; the last record of a step)."""
    from litebert.training.metrics_log import METRICS_NAME, read_metrics
    points = {r["step"]: r["eval_heldout_sop/mlm_acc"] for r in read_metrics(os.path.join(run_dir, METRICS_NAME))
              if "eval_heldout_sop/mlm_acc" in r}
    return [[step, points[step]] for step in sorted(points)]


def transitions(grid: Grid, checkpoint: str) -> dict[str, Any]:
    """Figure 1's measures on the held-out text: per layer L2 and angle (degrees) between input and output."""
    from litebert.model import AlbertModel
    from litebert.paper.analysis import layer_transitions, read_sentences
    from litebert.tokenizer import Tokenizer
    sentences = read_sentences(os.path.join(grid.data.split, "heldout.txt"), grid.scale.transitions_sentences)
    batch = Tokenizer.from_pretrained(checkpoint)(sentences, max_length=grid.scale.data["max_seq_length"])
    r = layer_transitions(AlbertModel.from_pretrained(checkpoint), batch["input_ids"], batch["attention_mask"])
    angle = [math.degrees(math.acos(max(-1.0, min(1.0, c)))) for c in r["cosine"]]
    return {"l2": r["l2"], "angle": angle, "l2_oscillation": oscillation(r["l2"]),
            "angle_oscillation": oscillation(angle), "l2_last_ratio": r["l2"][-1] / max(r["l2"])}


def oscillation(values: list[float]) -> float:
    """How much a per-layer curve goes up and down, after its first layer: the variation beyond the net change
    (0 for a monotone curve), over the curve's mean."""
    v = values[1:]
    if len(v) < 3:
        return 0.0
    variation = sum(abs(b - a) for a, b in zip(v, v[1:])) - abs(v[-1] - v[0])
    return variation / (sum(v) / len(v))


def finetune_recipe(grid: Grid, checkpoint: str, task: str, out_dir: str, seed: int) -> dict[str, Any]:
    """[finetune] and [train] of the scale's one downstream recipe for `task`."""
    recipe = dict(grid.scale.finetune)
    recipe.pop("tasks")
    cfg = {"model": checkpoint, "task": task, "data_dir": PAPER_TASK_DIRS.get(task, os.path.join(DATA, task))}
    for key in ("max_length", "max_train_examples", "max_eval_examples"):
        if key in recipe:
            cfg[key] = recipe.pop(key)
    train = {**recipe, "out_dir": out_dir, "seed": seed}
    if grid.scale.name != "paper":
        train.update(resume=True, progress=False)
    return {"finetune": cfg, "train": train}


def downstream(grid: Grid, checkpoint: str, row_dir: str, seed: int) -> dict[str, Any]:
    """Fine-tune on each bundled task with the scale's one recipe (`litebert finetune --config`); the best dev
    score of the task's primary metric."""
    out = {}
    for task in grid.scale.finetune["tasks"]:
        ft_dir = os.path.join(row_dir, f"finetune_{task}")
        summary = read_json(os.path.join(ft_dir, "summary.json"))
        if summary is None:
            recipe = write_recipe(os.path.join(row_dir, f"finetune_{task}.toml"),
                                  finetune_recipe(grid, checkpoint, task, ft_dir, seed), "")
            run_verb("finetune", ["--config", recipe], os.path.join(row_dir, f"finetune_{task}.log"))
            summary = read_json(os.path.join(ft_dir, "summary.json"))
        metric = summary["primary_metric"]
        baseline = summary.get("baseline") or {}
        out[task] = {"metric": metric, "score": summary["best"].get(metric, float("nan")),
                     "baseline": baseline.get(metric) if isinstance(baseline.get(metric), (int, float)) else None}
    return out


def read_json(path: str) -> Any:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def chance(grid: Grid) -> dict[str, float]:
    """The majority label's accuracy on each held-out pair set (what a model that learned nothing scores)."""
    from litebert.corpus.pairs import PretrainDataset
    out = {}
    for t in grid.exp.held_out:
        held = PretrainDataset(grid.data.dir("heldout", t))
        positive = sum(int(held[i]["sentence_order_label"]) for i in range(len(held))) / len(held)
        out[f"{t}_acc"] = max(positive, 1 - positive)
    return out


def run_grid(grid: Grid, command: str | None = None) -> dict[str, Any]:
    """Run the grid's unfinished rows one after another (a progress line each), then write the report.
    `command` (what was typed) is kept for the report unless it reran a subset or only reported."""
    state_path = os.path.join(grid.out, "grid.json")
    state = read_json(state_path) or {}
    settings = grid_settings(grid)
    if state and state.get("settings") != settings:
        changed = sorted(k for k in settings if state["settings"].get(k) != settings[k])
        raise ConfigError(f"{grid.out} holds a grid made with other settings ({', '.join(changed)}); use another "
                          "--out, or the same options to continue it")
    if command and not (grid.cfg.rows or grid.cfg.report_only):
        state["command"] = command
    state["settings"] = settings
    os.makedirs(grid.out, exist_ok=True)
    write_json(state_path, state)
    if not grid.cfg.report_only:
        selected = [grid.row(name) for name in grid.cfg.rows] if grid.cfg.rows else list(grid.exp.rows)
        if grid.cfg.rows:
            for row in selected:
                for seed in grid.seeds:
                    shutil.rmtree(grid.row_dir(row, seed), ignore_errors=True)
        steps = step_budgets(grid, state)
        write_json(state_path, state)
        todo = [(r, s) for r in selected for s in grid.seeds if not os.path.isfile(grid.result_path(r, s))]
        done_before = len(selected) * len(grid.seeds) - len(todo)
        if done_before:
            print(f"{grid.exp.name}: {done_before} finished row run(s) kept (their result.json)", flush=True)
        t_start, durations = time.time(), []
        for k, (row, seed) in enumerate(todo, 1):
            elapsed = time.time() - t_start
            left = f"~{_minutes(sum(durations) / len(durations) * (len(todo) - k + 1))} left" if durations else \
                "time left: after the first row"
            print(f"[{k}/{len(todo)}] {grid.exp.name}: {row.name}, seed {seed}, {steps[row.name]} steps "
                  f"(elapsed {_minutes(elapsed)}, {left})", flush=True)
            t0 = time.time()
            result = run_row(grid, row, seed, steps[row.name])
            durations.append(time.time() - t0)
            write_json(os.path.join(grid.row_dir(row, seed), "timing.json"), {"seconds": durations[-1]})
            print(f"      done in {_minutes(durations[-1])}: held-out MLM {result['mlm_acc']:.1%}, "
                  + ", ".join(f"{t.upper()} {result[f'{t}_acc']:.1%}" for t in grid.exp.held_out)
                  + (f", downstream avg {result['avg']:.1%}" if "avg" in result else ""), flush=True)
    results = collect(grid, state)
    report_dir = grid.cfg.report_dir or grid.out
    os.makedirs(report_dir, exist_ok=True)
    write_json(os.path.join(report_dir, "results.json"), results)
    plots = write_plots(grid, results, report_dir)
    write_text_atomically(os.path.join(report_dir, "report.md"), report(grid, results, state, plots))
    print(f"report: {os.path.join(report_dir, 'report.md')}", flush=True)
    return results


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def grid_settings(grid: Grid) -> dict[str, Any]:
    """What makes a grid's rows comparable: a rerun with other values would mix two grids in one directory."""
    c = grid.cfg
    return {"experiment": grid.exp.name, "scale": c.scale, "seed": c.seed, "corpus": c.corpus,
            "extra_corpus": list(c.extra_corpus), "set": sorted(c.set), "budget_minutes": c.budget_minutes,
            "downstream": downstream_on(grid)}


def downstream_on(grid: Grid) -> bool:
    return grid.cfg.downstream if grid.cfg.downstream is not None else grid.scale.downstream


# -- results, claims, report -----------------------------------------------------------------------------------

METRICS = ("parameters", "steps", "mlm_acc", "mlm_loss", "sop_acc", "nsp_acc", "mlm_acc_late", "avg",
           "l2_oscillation", "angle_oscillation", "l2_last_ratio")
PAPER_COLUMN = {"avg": "Avg", "mlm_acc": "MLM acc", "sop_acc": "SOP acc", "nsp_acc": "NSP acc"}


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, None
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def collect(grid: Grid, state: Mapping[str, Any]) -> dict[str, Any]:
    """results.json: every finished row's runs, their mean and spread, the claims' verdicts. Nothing in it
    depends on wall-clock time or on where the grid ran, so a resumed grid ends with the same file."""
    rows: dict[str, Any] = {}
    for row in grid.exp.rows:
        runs = {str(s): r for s in grid.seeds if (r := read_json(grid.result_path(row, s))) is not None}
        entry: dict[str, Any] = {"changes": {"model": dict(row.model), "data": dict(row.data),
                                             **({"base": row.base} if row.base else {}),
                                             **({"warm_start": row.warm_start} if row.warm_start else {})},
                                 "paper": dict(row.paper), "runs": runs}
        if runs:
            entry["model"] = scale_model(grid.exp, row, grid.scale, grid.data.vocab_size(), grid.sets["model"])
            stats = {}
            for key in METRICS:
                values = [r[key] for r in runs.values() if isinstance(r.get(key), (int, float))]
                if values:
                    m, sd = mean_sd(values)
                    stats[key] = {"mean": m, "sd": sd, "n": len(values)}
            for task in grid.scale.finetune["tasks"]:  # each task's best dev score beside the average
                values = [r["downstream"][task]["score"] for r in runs.values() if task in r.get("downstream", {})]
                if values:
                    m, sd = mean_sd(values)
                    stats[f"task:{task}"] = {"mean": m, "sd": sd, "n": len(values)}
            entry["stats"] = stats
        rows[row.name] = entry
    out = {"experiment": grid.exp.name, "table": grid.exp.table, "title": grid.exp.title, "scale": grid.scale.name,
           "seeds": grid.seeds, "settings": state.get("settings"), "steps": state.get("steps"),
           "recipe": {"train": dict(grid.scale.train), "pretrain": dict(grid.scale.pretrain),
                      "data": {k: (os.path.relpath(v, DATA) if k == "corpus" and v and v.startswith(DATA) else v)
                               for k, v in grid.scale.data.items()},
                      "finetune": dict(grid.scale.finetune)},
           "chance": chance(grid) if any(rows[r]["runs"] for r in rows) else {},
           "rows": rows}
    out["claims"] = [judge(c, out) for c in grid.exp.claims]
    return out


def _side(expr: str, values: Mapping[str, tuple[float, float | None]]) -> tuple[float, float | None] | None:
    """(value, variance or None) of "A", "A - B", a number, "chance"; None if a row has no value."""
    total, var, known = 0.0, 0.0, True
    for sign, term in zip((1, -1), expr.split(" - ")) if " - " in expr else [(1, expr)]:
        term = term.strip()
        if re.fullmatch(r"-?[\d.]+", term):
            total += sign * float(term)
            continue
        if term not in values:
            return None
        m, sd = values[term]
        total += sign * m
        if sd is None:
            known = False
        else:
            var += sd * sd
    return total, (var if known else None)


def verdict(kind: str, gap: float, spread: float | None, tol: float = 0.0) -> str:
    """holds / reversed / noise for one pair. order: gap = high - low; near: gap = a - b within tol."""
    if kind == "near":
        if spread is None:
            return "holds" if abs(gap) <= tol else "reversed"
        return "holds" if abs(gap) + spread <= tol else "reversed" if abs(gap) - spread > tol else "noise"
    if spread is None:  # one seed: the sign alone (a tie is no ordering)
        return "holds" if gap > 0 else "reversed" if gap < 0 else "noise"
    return "holds" if gap > spread else "reversed" if gap < -spread else "noise"


def judge(claim: Claim, results: Mapping[str, Any], metric: str | None = None) -> dict[str, Any]:
    """The claim on our numbers (and, where the paper's table has the metric, on the paper's), per pair."""
    metric = metric or claim.metric
    ours: dict[str, tuple[float, float | None]] = {}
    for name, entry in results["rows"].items():
        s = entry.get("stats", {}).get(metric)
        if s:
            ours[name] = (s["mean"], s["sd"])
    if metric in results.get("chance", {}):
        ours["chance"] = (results["chance"][metric], 0.0)
    paper = {name: (float(e["paper"][PAPER_COLUMN[metric]]), 0.0) for name, e in results["rows"].items()
             if metric in PAPER_COLUMN and isinstance(e["paper"].get(PAPER_COLUMN[metric]), float)}
    if metric in ("sop_acc", "nsp_acc"):
        paper["chance"] = (50.0, 0.0)
    pairs, verdicts = [], []
    for high, low in claim.pairs:
        a, b = _side(high, ours), _side(low, ours)
        pair: dict[str, Any] = {"high": high, "low": low}
        pa, pb = _side(high, paper), _side(low, paper)
        if pa and pb:
            pair["paper"] = [pa[0], pb[0]]
        if a and b:
            spread = None if a[1] is None or b[1] is None else math.sqrt(a[1] + b[1])
            v = verdict(claim.kind, a[0] - b[0], spread, claim.tol)
            pair.update(ours=[a[0], b[0]], spread=spread, verdict=v)
            verdicts.append((v, spread is None))
        pairs.append(pair)
    if not verdicts or len(verdicts) < len(claim.pairs):
        overall = "not measured" if not verdicts else "incomplete"
    elif any(v == "reversed" for v, _ in verdicts):
        overall = "not reproduced"
    elif all(v == "holds" for v, _ in verdicts):
        overall = "reproduced"
    else:
        overall = "within noise"
    if overall in ("reproduced", "not reproduced") and any(one for _, one in verdicts):
        overall += " (one seed: spread unknown)"
    out = {"claim": claim.text, "metric": metric, "kind": claim.kind, "verdict": overall, "pairs": pairs}
    if claim.kind == "near":
        out["tol"] = claim.tol
    if metric == "avg":  # the paper's tables score downstream; held-out MLM accuracy is what every row has
        out["proxy"] = judge(dataclasses.replace(claim, metric="mlm_acc"), results)
    return out


def _fmt(metric: str, value: float) -> str:
    if metric in ("parameters",):
        return f"{value / 1e6:.2f}M"
    if metric == "steps":
        return f"{value:.0f}"
    if metric.endswith("acc") or metric in ("avg", "mlm_acc_late") or metric.startswith("task:"):
        return f"{100 * value:.1f}"
    return f"{value:.3f}"


def _cell(stats: Mapping[str, Any] | None, metric: str) -> str:
    if not stats or metric not in stats:
        return "-"
    s = stats[metric]
    text = _fmt(metric, s["mean"])
    if s["sd"] is not None and metric not in ("parameters", "steps"):
        text += f" ± {_fmt(metric, s['sd'])}"
    return text


def _our_columns(grid: Grid, results: Mapping[str, Any]) -> list[tuple[str, str]]:
    cols = [("parameters", "params"), ("steps", "steps"), ("mlm_acc", "MLM acc")]
    if "nsp" in grid.exp.held_out:
        cols.append(("nsp_acc", "NSP acc"))
    cols += [("sop_acc", "SOP acc"), ("mlm_acc_late", "MLM acc, late mean")]
    if grid.exp.analysis == "transitions":
        cols += [("l2_oscillation", "L2 oscillation"), ("angle_oscillation", "angle oscillation"),
                 ("l2_last_ratio", "last L2 / max L2")]
    if any("avg" in e.get("stats", {}) for e in results["rows"].values()):
        cols += [(f"task:{t}", t) for t in grid.scale.finetune["tasks"]] + [("avg", "downstream avg")]
    return cols


def _pair_text(metric: str, pair: Mapping[str, Any], kind: str) -> str:
    rel = "~" if kind == "near" else "vs"
    text = f"{pair['high']} {rel} {pair['low']}"
    if "ours" in pair:
        a, b = pair["ours"]
        spread = f", spread {_fmt(metric, pair['spread'])}" if pair["spread"] is not None else ""
        text += (f": ours {_fmt(metric, a)} vs {_fmt(metric, b)} (gap {_fmt(metric, a - b)}{spread}) "
                 f"-> {pair['verdict']}")
    else:
        text += ": not measured"
    if "paper" in pair:
        a, b = pair["paper"]
        text += f"; paper {a:g} vs {b:g}"
    return text


def report(grid: Grid, results: Mapping[str, Any], state: Mapping[str, Any], plots: list[str]) -> str:
    exp, scale = grid.exp, grid.scale
    n_seeds = len(grid.seeds)
    lines = [f"# {exp.table}: {exp.title}", "",
             f"`litebert reproduce {exp.name}` at scale **{scale.name}**, {n_seeds} seed(s) per row "
             f"({', '.join(map(str, grid.seeds))}). Made by:", "", "```bash", state.get("command", ""), "```", ""]
    t, d = scale.train, scale.data
    steps = results.get("steps") or {}
    steps_text = ", ".join(sorted({str(v) for v in steps.values()})) if steps else str(t["max_steps"])
    lines += [f"**Setup.** Every row: {steps_text} {t['optimizer'].upper()} steps at lr {t['lr']}, batch "
              f"{t['batch_size']}, sequence length {d['max_seq_length']}, vocabulary {d['vocab_size']} "
              f"(a tokenizer trained on the training documents); {d['dupe_factor']} cut(s) of "
              f"`{os.path.basename(str(grid.cfg.corpus or d['corpus']))}`, its last "
              f"{d['held_out_fraction']:.0%} of documents held out. Scores: held-out MLM accuracy and "
              + "/".join(t_.upper() for t_ in exp.held_out) + " accuracy on pairs cut from the held-out documents"
              + (f"; downstream: best dev score after fine-tuning on {', '.join(scale.finetune['tasks'])} "
                 f"({scale.finetune.get('max_steps')} steps each, one recipe), averaged" if
                 any("avg" in e.get("stats", {}) for e in results["rows"].values()) else
                 "; no downstream fine-tuning in this grid (--downstream adds it)")
              + ". Cells are percentages; with several seeds, mean ± sample standard deviation.", ""]
    if results.get("chance"):
        lines += ["Chance on the held-out pairs (the majority label): "
                  + ", ".join(f"{k.split('_')[0].upper()} {100 * v:.1f}%" for k, v in results["chance"].items()), ""]
    if exp.note:
        lines += [f"**Note.** {exp.note}", ""]
    # ours
    cols = _our_columns(grid, results)
    lines += ["## This grid", "", "| row | model (H / E / layers / sharing) | " + " | ".join(c for _, c in cols) + " |",
              "|---" * (len(cols) + 2) + "|"]
    for name, entry in results["rows"].items():
        m = entry.get("model")
        shape = (f"{m['hidden_size']} / {m['embedding_size']} / {m['num_hidden_layers']} / "
                 f"{_sharing_name(m)}" + (f", dropout {m['hidden_dropout_prob']}" if m["hidden_dropout_prob"] else "")
                 ) if m else "not run"
        lines.append(f"| {name} | {shape} | " + " | ".join(_cell(entry.get("stats"), k) for k, _ in cols) + " |")
    lines.append("")
    # the paper's
    if exp.columns:
        lines += [f"## The paper ({exp.table}, quoted from {SOURCE})", "",
                  "| row | " + " | ".join(exp.columns) + " |", "|---" * (len(exp.columns) + 1) + "|"]
        for name, entry in results["rows"].items():
            lines.append(f"| {name} | " + " | ".join(str(entry['paper'].get(c, '')) for c in exp.columns) + " |")
        lines.append("")
    # claims
    lines += ["## The paper's comparisons", ""]
    for c in results["claims"]:
        lines.append(f"- **{c['claim']}** ({c['metric']}): **{c['verdict']}**")
        for pair in c["pairs"]:
            lines.append(f"  - {_pair_text(c['metric'], pair, c['kind'])}")
        proxy = c.get("proxy")
        if proxy:
            lines.append(f"  - proxy, held-out MLM accuracy (not what the paper's table measures): "
                         f"**{proxy['verdict']}**")
            for pair in proxy["pairs"]:
                lines.append(f"    - {_pair_text('mlm_acc', pair, 'order')}")
    lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    missing = [f"{r} (seed {s})" for r, e in results["rows"].items() for s in grid.seeds if str(s) not in e["runs"]]
    if missing:
        lines += [f"**Not yet run:** {', '.join(missing)}. Rerunning the command above runs them.", ""]
    return "\n".join(lines)


def _sharing_name(model: Mapping[str, Any]) -> str:
    if model["sharing"] != "all":
        return {"none": "none", "attention": "attention", "ffn": "FFN"}[model["sharing"]]
    return "all" if model["num_hidden_groups"] == 1 else f"{model['num_hidden_groups']} groups"


def write_plots(grid: Grid, results: Mapping[str, Any], out_dir: str) -> list[str]:
    """curves.png (held-out MLM accuracy over steps, every experiment) and transitions.png (Figure 1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    runs = {name: list(e["runs"].values()) for name, e in results["rows"].items() if e["runs"]}
    if any(r.get("curve") for rs in runs.values() for r in rs):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, rs in runs.items():
            steps = sorted({p[0] for r in rs for p in r["curve"]})
            series = [[dict((s, v) for s, v in r["curve"]).get(step) for r in rs] for step in steps]
            ok = [(step, [v for v in vals if v is not None]) for step, vals in zip(steps, series)]
            ok = [(step, vals) for step, vals in ok if vals]
            xs = [s for s, _ in ok]
            ax.plot(xs, [100 * sum(v) / len(v) for _, v in ok], marker=".", label=name)
            if len(rs) > 1:
                ax.fill_between(xs, [100 * min(v) for _, v in ok], [100 * max(v) for _, v in ok], alpha=0.2)
        ax.set(xlabel="step", ylabel="held-out MLM accuracy (%)",
               title=f"{grid.exp.table} ({grid.exp.name}, scale {grid.scale.name})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "curves.png"), dpi=110)
        plt.close(fig)
        written.append("curves.png")
    if grid.exp.analysis == "transitions" and runs:
        fig, (ax_l2, ax_angle) = plt.subplots(1, 2, figsize=(10, 4))
        for name, rs in runs.items():
            for key, ax in (("l2", ax_l2), ("angle", ax_angle)):
                curves = [r[key] for r in rs if key in r]
                if curves:
                    mean = [sum(v) / len(v) for v in zip(*curves)]
                    ax.plot(range(1, len(mean) + 1), mean, marker="o", label=name)
        ax_l2.set(title="L2 distance, layer input -> output", xlabel="layer", ylabel="L2")
        ax_angle.set(title="angle between layer input and output", xlabel="layer", ylabel="degrees")
        ax_l2.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "transitions.png"), dpi=110)
        plt.close(fig)
        written.append("transitions.png")
    return written


# -- the paper scale: recipes and commands ---------------------------------------------------------------------

PAPER_TASK_DIRS = {"squad-v1.1": "$SQUAD_DIR/v1.1", "squad-v2.0": "$SQUAD_DIR/v2.0", "MNLI-m": "$GLUE_DIR/MNLI",
                   "SST-2": "$GLUE_DIR/SST-2", "race": "$RACE_DIR"}


def write_paper_recipes(grid: Grid) -> list[str]:
    """One `litebert pretrain --config` recipe per row and seed (the ones a cpu grid runs, at the paper's
    sizes), and commands.sh: split, tokenizer, prepare, torchrun pretraining in row order (a warm start after
    its source), fine-tuning on the paper's tasks."""
    out, scale, d, data = grid.out, grid.scale, grid.scale.data, grid.data
    corpus = grid.cfg.corpus or "CORPUS.txt"
    steps = int(scale.train["max_steps"])
    q = shlex.quote
    cmds = ["#!/bin/sh", f"# {grid.exp.table}: {grid.exp.title}. The paper's recipe: {steps} steps, batch "
            f"{scale.train['batch_size']}, LAMB {scale.train['lr']}, sequence length {d['max_seq_length']}.",
            "# Set NPROC (processes per node) and the task directories ($GLUE_DIR, $SQUAD_DIR, $RACE_DIR).",
            "set -e", "NPROC=${NPROC:-8}", "",
            "# 1. hold out the last documents, train the tokenizer on the rest, cut the pairs",
            "python -c " + q(f"from litebert.paper.reproduce import split_corpus; split_corpus({json.dumps(corpus)}, "
                             f"{json.dumps(data.split)}, {d['held_out_fraction']})"),
            f"litebert tokenizer {q(os.path.join(data.split, 'train.txt'))} --out {q(data.tokenizer)} "
            f"--vocab-size {d['vocab_size']}"]
    variants = sorted({(r.data.get("pair_task", "sop"), bool(r.data.get("extra"))) for r in grid.exp.rows})
    if any(extra for _, extra in variants):
        cmds.append("python -c " + q(f"from litebert.paper.reproduce import split_corpus; split_corpus("
                                     f"{json.dumps(list(grid.cfg.extra_corpus) or ['EXTRA_CORPUS.txt'])}, "
                                     f"{json.dumps(data.split)}, 0, name=\"extra\")"))
    parts = [("train", t, e) for t, e in variants] + [("heldout", t, False) for t in grid.exp.held_out]
    for part, task, extra in parts:
        inputs = " ".join(q(p) for p in data.inputs(part, extra))
        cmds.append(f"litebert prepare {inputs} --tokenizer {q(data.tokenizer)} "
                    f"--out {q(data.path(part, task, extra))} "
                    f"--max-seq-length {d['max_seq_length']} --pair-task {task} --dupe-factor "
                    f"{d['dupe_factor'] if part == 'train' else 1} --seed {grid.cfg.seed}")
    cmds += ["", "# 2. pretrain every row (--nnodes N --rdzv-backend c10d --rdzv-endpoint HOST:PORT: many nodes)"]
    written = []
    for row in grid.exp.rows:
        for seed in grid.seeds:
            init_from = os.path.join(grid.row_dir(grid.row(row.warm_start), seed), "pretrain", f"step_{steps}") \
                if row.warm_start else None
            path = os.path.join(out, "recipes", f"{slug(row.name)}-seed{seed}.toml")
            sections = row_recipe(grid, row, seed, steps, d["vocab_size"],
                                  os.path.join(grid.row_dir(row, seed), "pretrain"), init_from)
            sections["train"].pop("progress")
            written.append(write_recipe(path, sections, (
                f"# {grid.exp.table}, row {row.name!r}, seed {seed}: the paper's recipe ({SOURCE}).\n"
                f"# torchrun --nproc-per-node 8 -m litebert.cli pretrain --config {path}\n")))
            cmds.append(f"torchrun --nproc-per-node $NPROC -m litebert.cli pretrain --config {q(path)}")
    cmds += ["", "# 3. fine-tune every row on the paper's tasks (the ALBERT README's recipes are litebert's defaults)"]
    for row in grid.exp.rows:
        for seed in grid.seeds:
            ckpt = os.path.join(grid.row_dir(row, seed), "pretrain", f"step_{steps}")
            for task in scale.finetune["tasks"]:
                r = finetune_recipe(grid, ckpt, task, os.path.join(grid.row_dir(row, seed), f"finetune_{task}"), seed)
                cmds.append(f"litebert finetune --model {q(ckpt)} --task {task} --data-dir {r['finetune']['data_dir']} "
                            f"--out-dir {q(r['train']['out_dir'])} --seed {seed}")
    write_text_atomically(os.path.join(out, "commands.sh"), "\n".join(cmds) + "\n")
    return written


# -- the verb --------------------------------------------------------------------------------------------------

def make_grid(cfg: ReproduceConfig) -> Grid:
    if len(cfg.experiment) != 1 or cfg.experiment[0] not in EXPERIMENTS:
        raise ConfigError(f"give one experiment, one of: {', '.join(EXPERIMENTS)} (got {' '.join(cfg.experiment)})")
    sets = parse_sets(cfg.set)
    scale = resolved_scale(cfg.scale, sets)
    if cfg.scale != "paper":  # a missing file is refused before anything is written
        from litebert.corpus.documents import resolve_inputs
        for inputs in ([cfg.corpus] if cfg.corpus else []) + [[p] for p in cfg.extra_corpus]:
            resolve_inputs(inputs)
    out = os.path.abspath(cfg.out)
    data = GridData(os.path.abspath(cfg.data_dir) if cfg.data_dir else os.path.join(out, "data"), scale, cfg.seed,
                    cfg.corpus, list(cfg.extra_corpus))
    return Grid(EXPERIMENTS[cfg.experiment[0]], cfg, scale, sets, out, data)


def reproduce(cfg: ReproduceConfig, command: str | None = None) -> dict[str, Any]:
    """Run (or, at the paper scale, write) the grid; `command` is what the report says made it."""
    grid = make_grid(cfg)
    for name in cfg.rows:
        grid.row(name)  # an unknown row is refused before anything runs
    if cfg.scale == "paper":
        written = write_paper_recipes(grid)
        print(f"{len(written)} recipes in {os.path.join(grid.out, 'recipes')}; the commands: "
              f"{os.path.join(grid.out, 'commands.sh')} (nothing was run)")
        return {"recipes": written, "commands": os.path.join(grid.out, "commands.sh")}
    return run_grid(grid, command)


def cli(argv: list[str]) -> int:
    from litebert.runconfig import add_config_args, parse_verb, verb_parser
    parser = verb_parser("reproduce", __doc__)
    add_config_args(parser, ReproduceConfig, "experiment and grid")
    (cfg,) = parse_verb(parser, argv, ReproduceConfig)
    reproduce(cfg, "litebert reproduce " + shlex.join(argv))
    return 0


__all__ = ["EXPERIMENTS", "SCALES", "Experiment", "Row", "Claim", "Scale", "ReproduceConfig", "reproduce",
           "scale_model", "split_corpus", "judge", "verdict"]
