"""One grid of `litebert reproduce`: the verb's options (ReproduceConfig), the data its rows share (the corpus
split, the tokenizer, the prepared pairs: GridData), where each row's run lives (Grid) and the settings that make
its rows comparable. Apart from the verb so that report.py can read a Grid without importing reproduce.py: imports
point one way."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from litebert.corpus.documents import iter_documents, resolve_inputs
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import ConfigError, DataError
from litebert.files import read_json_as, write_text_atomically
from litebert.paper.experiments import DATA, EXPERIMENTS, SCALES, Experiment, Row, Scale
from litebert.runconfig import check_declared
from litebert.text.transformers_files import SPIECE_FILE
from litebert.tokenizer import Tokenizer

# -- the verb's options, the grid's data -----------------------------------------------------------------------

@dataclass
class ReproduceConfig:
    """The options of `litebert reproduce` (the [reproduce] table of --config)."""

    experiment: list[str] = field(default_factory=list, metadata={
        "positional": True, "required": True, "help": f"one of: {', '.join(EXPERIMENTS)}"})
    out: str = field(default="", metadata={"required": True, "metavar": "DIR", "help": (
        "the grid's directory: data, one directory per row and seed, report.md, results.json, plots")})
    scale: str = field(default="cpu", metadata={"choices": ("cpu", "gpu", "paper", "tiny"), "help": (
        "cpu: small models, minutes per row on 2 cores; gpu: a table in about 8 minutes on one H100 with --seeds "
        "3; paper: write the paper-size recipes and commands, run nothing (then --report-only over the "
        "result.json files those runs leave in --out); tiny: seconds per row (tests)")})
    seeds: int = field(default=1, metadata={"range": "[1, inf)",
        "help": "runs per row with seeds seed, seed+1, ...: cells are the mean ± the half-width of its t interval "
                "at level 0.95, comparisons Welch t-tests (5 or more decide effects smaller than the seed spread)"})
    seed: int = field(default=12345, metadata={"range": "[0, 4294967295]",
        "help": "the first seed (data preparation always uses this one)"})
    budget_minutes: float | None = field(default=None, metadata={"range": "(0, inf)", "help": (
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
    finetune_seeds: int | None = field(default=None, metadata={"range": "[1, inf)", "help": (
        "fine-tuning runs per pretrained checkpoint and task (seeds --seed onwards, the same for every "
        "pretraining seed): the report splits each task's spread between pretraining and fine-tuning seeds "
        "(default: the scale's, 2 at cpu, else 1)")})
    downstream: bool | None = field(default=None, metadata={"help": (
        "fine-tune every row on the bundled tasks with one fixed recipe (default: on at cpu, off at tiny)")})
    data_dir: str | None = field(default=None, metadata={"metavar": "DIR", "help": (
        "where the tokenizer and prepared data go (default: OUT/data); grids with the same corpus and scale "
        "may share it")})
    report_dir: str | None = field(default=None, metadata={"metavar": "DIR", "help": (
        "where report.md, results.json, the plots, timing.json and grid.json go, rewritten after every finished "
        "run (default: --out); keep it (in git, say) and a rerun whose --out was lost goes on from it. A report "
        "dir of another grid is refused, not overwritten")})
    reuse: list[str] = field(default_factory=list, metadata={"metavar": "DIR", "help": (
        "other grids' report dirs (their --report-dir, else their --out): a row whose recipe, data and scoring "
        "are one of theirs (Table 3's E=128 rows are Table 4's) takes that row's finished runs, seed for seed, "
        "instead of training them again, and the report names where they came from")})
    report_only: bool = field(default=False, metadata={"help": "write the report from the finished rows, run nothing"})
    nproc_per_node: int = field(default=1, metadata={"range": "[1, inf)", "help": (
        "train each row (pretraining and fine-tuning) with this many processes under torchrun; the grid itself "
        "runs in one process, so start it with `litebert reproduce`, not under torchrun (paper scale: the "
        "default NPROC of commands.sh, else 8)")})

    jobs: int = field(default=1, metadata={"range": "[1, inf)", "help": (
        "row runs trained at once, each in its own processes with the cores shared out (OMP_NUM_THREADS, unless "
        "set): small models use two cores better as two runs than as one (the cpu scale on 2 cores: 1.38x the "
        "steps/s with --jobs 2); a row that warm-starts from another waits for it")})

    def __post_init__(self) -> None:
        check_declared(self)  # built in code, held to the ranges above as the command line is


def split_corpus(inputs: list[str] | str | None, out_dir: str, held_out_fraction: float,
                 max_documents: int | None = None, max_sentences: int | None = None, name: str = "train"
                 ) -> tuple[str, str]:
    """Write the corpus's documents as `{name}.txt` and `heldout.txt` (its last documents, at least one) in the
    one-sentence-per-line format; with max_documents / max_sentences, only the first documents / sentences of
    each. held_out_fraction 0 writes no held-out file (the additional corpus)."""
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


def text_identity(inputs: list[str] | str | None) -> list[str]:
    """Corpus files by what travels between machines: a bundled one by its place among the bundled data, another
    by its name and size (every file a glob or a folder stands for)."""
    return [bundled_name(path) or f"{os.path.basename(path)}, {os.path.getsize(path)} bytes"
            for path in resolve_inputs(inputs)]


def bundled_name(path: str) -> str | None:
    """A path's place among litebert's bundled data (the same on every machine), or None for a file elsewhere."""
    full = os.path.abspath(path)
    return os.path.relpath(full, DATA) if full.startswith(str(DATA) + os.sep) else None


class GridData:
    """The grid's tokenizer and prepared directories, made once each (a directory with meta.json is done). A data
    dir serves every grid of one corpus, scale and seed (data.json says which): one made with others is refused,
    since its tokenizer and pairs would stand in, unseen, for the ones the grid asks for."""

    def __init__(self, root: str, scale: Scale, seed: int, corpus: str | None, extra: list[str]):
        self.root, self.scale, self.seed, self.corpus, self.extra = root, scale, seed, corpus, extra
        self.split = os.path.join(root, "split")
        self.tokenizer = os.path.join(root, "tokenizer")
        self._checked: set[bool] = set()  # the `extra` values check() has passed (each reads the corpus files)

    def settings(self, extra: bool = False) -> dict[str, Any]:
        """What the data is made from: the corpus (and with `extra`, the additional text), the scale's data
        settings and the seed that cuts it."""
        return {"corpus": text_identity(self.corpus or self.scale.data["corpus"]), "seed": self.seed,
                "data": {k: v for k, v in self.scale.data.items() if k != "corpus"},
                **({"extra": text_identity(self.extra)} if extra else {})}

    def check(self, extra: bool = False) -> None:
        """Refuse a data dir made from other text or settings; record this grid's in a new one (or one of a
        version that recorded none)."""
        if extra in self._checked:
            return
        if extra and not self.extra:
            raise ConfigError("this experiment adds text: give it with --extra-corpus FILE ... (e.g. "
                              "../shared/data/corpus/en/bible_kjv.jsonl)")
        path = os.path.join(self.root, "data.json")
        recorded, wanted = read_json(path) or {}, self.settings(extra)
        changed = sorted(k for k in wanted if k in recorded and recorded[k] != wanted[k])
        if changed:
            raise ConfigError(f"{self.root} holds data made with another {' and '.join(changed)} than this grid's; "
                              "give another --data-dir")
        if any(k not in recorded for k in wanted):
            os.makedirs(self.root, exist_ok=True)
            write_text_atomically(path, json.dumps({**recorded, **wanted}, indent=1) + "\n")
        self._checked.add(extra)

    def _ensure_split(self) -> None:
        self.check()
        if os.path.isfile(os.path.join(self.split, "heldout.txt")):
            return
        d = self.scale.data
        split_corpus(self.corpus or d["corpus"], self.split, d["held_out_fraction"], d.get("max_documents"),
                     d.get("max_sentences"))

    def _ensure_tokenizer(self) -> None:
        if os.path.isfile(os.path.join(self.tokenizer, SPIECE_FILE)):
            return
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
        out = self.path(part, task, extra)
        self.check(extra)
        if os.path.isfile(os.path.join(out, "meta.json")):
            return out
        self._ensure_split()
        self._ensure_tokenizer()
        d = self.scale.data
        if extra and not os.path.isfile(self.inputs(part, extra)[-1]):
            split_corpus(self.extra, self.split, 0, d.get("max_documents"), d.get("max_sentences"), name="extra")
        prepare(self.inputs(part, extra), out, self.tokenizer, max_seq_length=d["max_seq_length"], pair_task=task,
                dupe_factor=d["dupe_factor"] if part == "train" else 1, seed=self.seed,
                num_workers=min(8, os.cpu_count() or 1), progress=False)  # the same shards at any worker count
        return out

    def vocab_size(self) -> int:
        self._ensure_split()
        self._ensure_tokenizer()
        return Tokenizer.from_pretrained(self.tokenizer).vocab_size


# -- the grid: its rows' directories ---------------------------------------------------------------------------

def slug(name: str) -> str:
    return re.sub(r"[^\w.+-]+", "_", name.replace("=", "")).strip("_")


def finetune_dir_name(task: str) -> str:
    """A row's fine-tuning directory for one task of the suite (`novel_authorship@539` ->
    finetune_novel_authorship_539)."""
    return "finetune_" + slug(task)


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

    @property
    def finetune_seed_count(self) -> int:
        """Fine-tuning runs per checkpoint and task: --finetune-seeds, else the scale's."""
        return self.cfg.finetune_seeds or self.scale.finetune_seeds

    def finetune_seeds(self, seed: int) -> list[int]:
        """The fine-tuning seeds of a checkpoint pretrained with `seed`: with several, the same ones for every
        pretraining seed (the grid's first seed onwards), so the report can split the spread between the two;
        with one, the pretraining seed itself (as grids before --finetune-seeds)."""
        n = self.finetune_seed_count
        return [seed] if n == 1 else [self.cfg.seed + k for k in range(n)]

    @property
    def downstream(self) -> bool:
        """Whether every row is fine-tuned: --downstream, else the scale's default."""
        return self.cfg.downstream if self.cfg.downstream is not None else self.scale.downstream

    def row_dir(self, row: Row, seed: int) -> str:
        return os.path.join(self.out, "rows", slug(row.name), f"seed{seed}")

    def result_path(self, row: Row, seed: int) -> str:
        return os.path.join(self.row_dir(row, seed), "result.json")

    def row(self, name: str) -> Row:
        for row in self.exp.rows:
            if name in (row.name, slug(row.name)):
                return row
        raise ConfigError(f"{self.exp.name} has no row {name!r}; its rows: {', '.join(r.name for r in self.exp.rows)}")


# -- what makes a grid's rows comparable ----------------------------------------------------------------

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


def grid_settings(grid: Grid) -> dict[str, Any]:
    """What makes a grid's rows comparable: a rerun with other values would mix two grids in one directory. The
    fine-tuning recipe is recorded as it resolved (the scale's, with --set finetune.X), so that a changed
    default is caught as surely as a changed option."""
    c = grid.cfg
    return {"experiment": grid.exp.name, "scale": c.scale, "seed": c.seed, "corpus": c.corpus,
            "extra_corpus": list(c.extra_corpus), "set": sorted(s for s in c.set if not _sets_finetune(s)),
            "budget_minutes": c.budget_minutes, "downstream": grid.downstream,
            **({"downstream_tasks": list(grid.scale.finetune["tasks"]),
                "finetune_recipe": _recipe(grid.scale.finetune)} if grid.downstream else {}),
            **({"finetune_seeds": grid.finetune_seed_count} if grid.finetune_seed_count != 1 else {})}


# The cpu scale's fine-tuning recipe until 2026-11-27 (then lr 1e-3 for 1000 steps): what the grids whose
# grid.json records no recipe were fine-tuned with.
LEGACY_CPU_FINETUNE = dict(lr=3e-4, max_steps=300, warmup_steps=30)


def _sets_finetune(item: str) -> bool:
    return item.strip().startswith("finetune.")


def _recipe(finetune: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in finetune.items() if k != "tasks"}


def recorded_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A grid.json's settings in grid_settings' current form: a grid made before recipes were recorded kept its
    --set finetune.X among "set" and was fine-tuned with its scale's recipe of the day."""
    finetune_sets = [item for item in settings.get("set", []) if _sets_finetune(item)]
    current = {**settings, "set": [item for item in settings.get("set", []) if item not in finetune_sets]}
    if "finetune_recipe" in settings or not settings.get("downstream"):
        return current
    scale = settings.get("scale", "cpu")
    recipe = {**SCALES[scale].finetune, **(LEGACY_CPU_FINETUNE if scale == "cpu" else {}),
              **parse_sets(finetune_sets)["finetune"]}
    return {**current, "finetune_recipe": _recipe(recipe)}


def check_same_settings(recorded: dict[str, Any], settings: dict[str, Any], what: str, hint: str) -> None:
    """Refuse to continue a grid (or overwrite its report) made with other settings: two grids in one table."""
    recorded = recorded_settings(recorded)
    if recorded != settings:
        changed = sorted(k for k in {**recorded, **settings} if recorded.get(k) != settings.get(k))
        raise ConfigError(f"{what} made with other settings ({', '.join(changed)}); {hint}, or the same options "
                          "to continue it")


def read_json(path: str) -> Any:
    """None when the grid has not written the file yet; a damaged one is a DataError naming it."""
    if not os.path.isfile(path):
        return None
    return read_json_as(path, object, DataError)


def prepare_row_data(grid: Grid, row: Row) -> None:
    """The prepared pairs a row trains and is scored on, and with them the tokenizer (made once, shared by the
    grid)."""
    for t in grid.exp.held_out:
        grid.data.dir("heldout", t)
    grid.data.dir("train", row.data.get("pair_task", "sop"), row.data.get("extra", False))


__all__ = ["ReproduceConfig", "split_corpus"]
