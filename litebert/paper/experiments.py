"""The ALBERT paper's controlled experiments as data, and the scales they run at. An Experiment is one of the
paper's tables: its rows (what the paper changes, and its numbers) and the comparisons it draws (Claims); a Scale
maps the paper's sizes onto runnable ones (scale_model). Data only: reproduce.py runs it, report.py judges it."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
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
    finetune_seeds: int = 1  # fine-tuning runs per checkpoint and task unless --finetune-seeds says
    model: Mapping[str, Any] = field(default_factory=dict)  # fields fixed at this scale


_DEMO = load_toml(BUNDLED_CONFIGS / "demo.toml", ("model", "pretrain", "train"))
_PAPER = load_toml(BUNDLED_CONFIGS / "paper_base.toml", ("model", "pretrain", "train"))
# The downstream suite, bundled in litebert/data/<task>/: novel_authorship with all its labels and with its first
# 539 training passages (10%; the file is shuffled), both of which move with pretraining (docs/results.md, label
# efficiency); novel_characters, the suite's second task until 2026-11-26, sat at its floor in every grid. The cpu
# scale keeps the first alone since its recipe converges (below): on 539 passages the same recipe leaves four
# seeds from one checkpoint 16 points apart (66.4, 50.3, 62.9, 59.2), no better than the 300-step one.
_DOWNSTREAM_TASKS = ("novel_authorship", "novel_authorship@539")


def split_task(spec: str) -> tuple[str, int | None]:
    """A downstream task of a scale's suite: `name`, or `name@N` for the task fine-tuned on its first N
    training examples (how a suite asks for the few-label regime, where pretraining shows most)."""
    name, at, count = spec.partition("@")
    if not at:
        return name, None
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(f"downstream task {spec!r}: expected NAME@N with N a positive number of training examples")
    return name, int(count)


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
        # Fine-tuning that converges: at lr 3e-4 for 300 steps every run was still climbing when it ended, and
        # its score said when it took off (four seeds from one checkpoint: 65.8 +- 8.8); at lr 1e-3 for 1000
        # steps the same seeds gave 83.9 +- 0.5 (docs/paper/README.md, "A fine-tuning recipe that converges").
        finetune=dict(tasks=_DOWNSTREAM_TASKS[:1], optimizer="adamw", lr=1e-3, batch_size=32, max_steps=1000,
                      warmup_steps=100, weight_decay=0.01, eval_every=100, save_every=0, keep_last=1, log_every=50,
                      max_length=64),
        downstream=True, budget_minutes=5.0, finetune_seeds=2),
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
        finetune=dict(tasks=("novel_authorship", "novel_authorship@16"), optimizer="adamw", lr=1e-3, batch_size=8,
                      max_steps=2, warmup_steps=0, eval_every=0, save_every=0, keep_last=1, log_every=1, max_length=32,
                      max_train_examples=32, max_eval_examples=32),
        downstream=False, budget_minutes=0.01, transitions_sentences=16),
    # One H100 (bf16): a table in about 8 minutes with 3 seeds. Sized first from albert-base's step time; run on
    # an H100 (2026-11-28, docs/paper/README.md) a row's run took 2.4 min, four at once (pretraining 105 ms a
    # step): steps this small are launch-bound and four processes time-slice the card, so both recipes now
    # replay captured CUDA graphs (measured there: 4.25x the steps/s of the demo's model, 5.2x for padding-free
    # fine-tuning at batch 32); the scale with graphs has not run on a card yet.
    "gpu": Scale(
        "gpu", sizes={"hidden_size": {768: 256, 1024: 256, 2048: 512, 4096: 1024, 6144: 1536},
                      "embedding_size": {64: 64, 128: 128, 256: 192},
                      "num_hidden_layers": {1: 1, 3: 2, 6: 3, 12: 4, 24: 8}},
        head_size=64,
        data=dict(corpus=os.path.join(DATA, "demo_corpus.txt.gz"), vocab_size=16000, max_seq_length=128,
                  dupe_factor=4, held_out_fraction=0.03, max_documents=None),
        train={**_DEMO["train"], "batch_size": 256, "lr": 4e-3, "max_steps": 800, "warmup_steps": 80,
               "eval_every": 200, "save_every": 400, "keep_last": 1, "log_every": 100, "precision": "bf16",
               "device": "cuda", "cuda_graphs": True},
        pretrain={"held_out": 512, "eval_batch_size": 512},
        # The cpu scale's converging recipe (lr 1e-3, 32,000 passages seen) at twice its batch; the earlier one,
        # 200 steps at lr 2e-4 on both tasks, was the cpu scale's unconverged recipe (300 steps at 3e-4) in kind:
        # 12,800 passages at a low lr.
        finetune=dict(tasks=_DOWNSTREAM_TASKS[:1], optimizer="adamw", lr=1e-3, batch_size=64, max_steps=500,
                      warmup_steps=50, weight_decay=0.01, eval_every=100, save_every=0, keep_last=1, log_every=50,
                      max_length=128, precision="bf16", device="cuda", cuda_graphs=True),
        downstream=True, budget_minutes=1.0),
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


def derived_model_sets(paper: AlbertConfig, scale: Scale, sets: Mapping[str, Any], row: str) -> dict[str, Any]:
    """`--set model.X` with what depends on X derived as the scale derives it: a hidden size brings its heads
    (H / head size) and FFN (the paper's ratio to H), and, in a row whose E equals H, its E; a layer count
    brings one group per layer in a row that shares nothing. What cannot be derived is refused."""
    out = dict(sets)
    ties_e = paper.embedding_size == paper.hidden_size
    if "hidden_size" in sets:
        h = sets["hidden_size"]
        out.setdefault("num_attention_heads", max(1, h // scale.head_size))
        out.setdefault("intermediate_size", paper.intermediate_size * h // paper.hidden_size)
        if ties_e:
            if sets.get("embedding_size", h) != h:
                raise ConfigError(f"--set model.embedding_size: row {row!r} ties E to H (E = H = {h})")
            out["embedding_size"] = h
    elif "embedding_size" in sets and ties_e:
        raise ConfigError(f"--set model.embedding_size: row {row!r} ties E to H; set model.hidden_size instead")
    if "num_hidden_layers" in sets and paper.num_hidden_groups == paper.num_hidden_layers:
        out.setdefault("num_hidden_groups", sets["num_hidden_layers"])
    return out


def scale_model(exp: Experiment, row: Row, scale: Scale, vocab_size: int, sets: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """The row's AlbertConfig fields at `scale`: the paper's model (the preset with the row's changes) with its
    sizes mapped, heads = H / head_size, FFN in the paper's ratio to H, a factorized E kept below H and E = H
    kept equal; then the scale's fixed fields and `sets` (--set model.X), which may not touch what rows vary."""
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
    fields.update(derived_model_sets(paper, scale, sets or {}, row.name))
    if paper.embedding_size < paper.hidden_size and fields["embedding_size"] >= fields["hidden_size"]:
        raise ConfigError(f"row {row.name!r} factorizes E below H (the paper's {paper.embedding_size} < "
                          f"{paper.hidden_size}); --set makes it E {fields['embedding_size']} >= H "
                          f"{fields['hidden_size']}, which is no factorization: keep E below H")
    AlbertConfig(**fields)  # refuse an impossible shape before anything runs
    return fields


__all__ = ["EXPERIMENTS", "SCALES", "Experiment", "Row", "Claim", "Scale", "scale_model", "split_task"]
