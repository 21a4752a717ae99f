"""What each row of a grid runs, as the TOML tables the verbs read (`litebert pretrain --config`, `litebert
finetune --config`): the scale's recipe with the row's changes. A cpu or gpu grid runs them here; the paper scale
writes them out, with commands.sh to run them elsewhere, and reads back what those runs left.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from typing import Any

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.files import write_json, write_text_atomically
from litebert.paper.experiments import DATA, SOURCE, Row, scale_model, split_task
from litebert.paper.grid import Grid, finetune_dir_name, read_json, slug
from litebert.runconfig import dump_toml


def train_table(grid: Grid, out_dir: str, seed: int, steps: int | None = None, **extra) -> dict[str, Any]:
    """A [train] table of the scale's recipe: resumable (rerunning a recipe continues it), quiet."""
    fields = {**grid.scale.train, "out_dir": out_dir, "seed": seed, "resume": True, "progress": False, **extra}
    one_process_only(grid, fields)
    if steps is not None and steps != fields["max_steps"]:  # a minutes budget: warm up for 1/10 at most
        fields["max_steps"] = steps
        fields["warmup_steps"] = min(fields.get("warmup_steps", 0), steps // 10)
    return fields


def one_process_only(grid: Grid, train: dict[str, Any]) -> None:
    """A scale's CUDA graphs (the gpu scale's launch-bound steps) under --nproc-per-node N > 1: off, since a captured
    step cannot hold DDP's gradient all-reduce."""
    if grid.cfg.nproc_per_node > 1:
        train["cuda_graphs"] = False


def row_recipe(grid: Grid, row: Row, seed: int, steps: int, vocab_size: int, run_dir: str,
               init_from: str | None) -> dict[str, Any]:
    """The row's [model], [pretrain] and [train] tables: the scale's recipe with the row's changes ([model]:
    the fields that differ from the row's preset)."""
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


def row_identity(grid: Grid, row: Row, steps: int) -> str | None:
    """A digest of what decides a row's runs but the seed: its recipe (the scale's, the row's changes, --set), the
    text and settings its data is made from, what is measured after pretraining and the fine-tuning. Rows of two
    grids with one identity make the same run from the same seed (Table 3's E=128 rows are Table 4's), so one
    grid can take the other's runs (--reuse) rather than train them again; each run records it when it finishes.
    Not in it: the machine and the processes a run had, which move the last digits. None in a grid of warm
    starts, where a row begins from another run's checkpoint."""
    return None if any(r.warm_start for r in grid.exp.rows) else recipe_digest(grid, row, steps)


def recipe_digest(grid: Grid, row: Row, steps: int) -> str:
    """row_identity's digest, for any row (a warm start's too, its starting checkpoint left out): what a run
    records when it starts, so that a rerun of the grid under other settings does not continue it."""
    sections = row_recipe(grid, row, 0, steps, grid.scale.data["vocab_size"], "", None)
    for key in ("out_dir", "seed", "resume", "progress"):  # where the run lives, its seed, how it is run
        sections["train"].pop(key, None)
    pretrain = sections["pretrain"]
    pretrain["data"] = os.path.relpath(pretrain["data"], grid.data.root)
    pretrain["eval_data"] = [os.path.relpath(p, grid.data.root) for p in pretrain["eval_data"]]
    n = grid.finetune_seed_count
    finetune = {"recipe": dict(grid.scale.finetune),
                "seeds": grid.finetune_seeds(grid.cfg.seed) if n > 1 else "the pretraining seed"}
    analysis = {"transitions": {"sentences": grid.scale.transitions_sentences}}.get(grid.exp.analysis or "")
    identity = {"format": IDENTITY_FORMAT, "recipe": sections, "analysis": analysis,
                "data": grid.data.settings(row.data.get("extra", False)),
                "finetune": finetune if grid.downstream else None}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_started(grid: Grid, row: Row, seed: int, steps: int) -> None:
    """Record what a run starts with (recipe_digest, in its started.json), and refuse to continue one started with other
    settings: a changed scale, recipe or data would otherwise resume its checkpoint under the new recipe and
    finish as a run of neither."""
    path = os.path.join(grid.row_dir(row, seed), "started.json")
    digest, started = recipe_digest(grid, row, steps), read_json(path)
    if started is None:
        write_json(path, {"identity": digest})
    elif started.get("identity") != digest:
        raise ConfigError(f"row {row.name!r}, seed {seed} was started with other settings (its recipe, data or "
                          f"fine-tuning: identity {started.get('identity')}, now {digest}); go back to them to "
                          f"continue it, or rerun it from scratch with --rows {shlex.quote(row.name)}")


def stale_results(grid: Grid, rows: list[Row], steps: dict[str, int]) -> list[str]:
    """The finished runs of `rows` whose recorded identity is not what the row would run now."""
    stale = []
    for row in rows:
        identity = row_identity(grid, row, steps[row.name])
        for seed in grid.seeds:
            result = read_json(grid.result_path(row, seed))
            if identity and result and result.get("identity") not in (None, identity):
                stale.append(f"{row.name} (seed {seed})")
    return stale


# Raised when what a run measures, or how, changes in a way the recipe does not show: older runs then match no row.
IDENTITY_FORMAT = 2  # 2 (2026-11-27): each example's masks drawn from its own position, not its micro-batch's


def write_recipe(path: str, sections: Mapping[str, Any], header: str) -> str:
    write_text_atomically(path, header + dump_toml(sections))
    return path


def finetune_recipe(grid: Grid, checkpoint: str, task: str, out_dir: str, seed: int) -> dict[str, Any]:
    """[finetune] and [train] of the scale's one downstream recipe for `task` (a suite's `name@N`: its first N
    training examples)."""
    recipe = dict(grid.scale.finetune)
    recipe.pop("tasks")
    name, labels = split_task(task)
    cfg = {"model": checkpoint, "task": name, "data_dir": PAPER_TASK_DIRS.get(name, os.path.join(DATA, name))}
    for key in ("max_length", "max_train_examples", "max_eval_examples"):
        if key in recipe:
            cfg[key] = recipe.pop(key)
    if labels is not None:
        cfg["max_train_examples"] = min(labels, cfg.get("max_train_examples", labels))
    train = {**recipe, "out_dir": out_dir, "seed": seed}
    one_process_only(grid, train)
    if grid.scale.name != "paper":
        train.update(resume=True, progress=False)
    return {"finetune": cfg, "train": train}


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
            "set -e", f"NPROC=${{NPROC:-{grid.cfg.nproc_per_node if grid.cfg.nproc_per_node > 1 else 8}}}", "",
            "# 1. hold out the last documents, train the tokenizer on the rest, cut the pairs",
            "python -c " + q(f"from litebert.paper.grid import split_corpus; split_corpus({json.dumps(corpus)}, "
                             f"{json.dumps(data.split)}, {d['held_out_fraction']})"),
            f"litebert tokenizer {q(os.path.join(data.split, 'train.txt'))} --out {q(data.tokenizer)} "
            f"--vocab-size {d['vocab_size']}"]
    variants = sorted({(r.data.get("pair_task", "sop"), bool(r.data.get("extra"))) for r in grid.exp.rows})
    if any(extra for _, extra in variants):
        cmds.append("python -c " + q(f"from litebert.paper.grid import split_corpus; split_corpus("
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
    cmds += ["", "# 3. fine-tune every row on the paper's tasks (the ALBERT README's recipes are litebert's defaults;",
             "#    each task's directory comes from the environment, so it is given on the command line)"]
    for row in grid.exp.rows:
        for seed in grid.seeds:
            ckpt = os.path.join(grid.row_dir(row, seed), "pretrain", f"step_{steps}")
            for task in scale.finetune["tasks"]:
                for ft_seed, name in finetune_dirs(grid, task, seed):
                    sections = finetune_recipe(grid, ckpt, task, os.path.join(grid.row_dir(row, seed), name), ft_seed)
                    data_dir = sections["finetune"].pop("data_dir")
                    path = os.path.join(out, "recipes", "finetune", f"{slug(row.name)}-seed{seed}-{name}.toml")
                    write_recipe(path, sections, f"# {grid.exp.table}, row {row.name!r}, seed {seed}: fine-tuning "
                                                 f"on {task} (litebert finetune --config this --data-dir DIR)\n")
                    cmds.append(f"litebert finetune --config {q(path)} --data-dir {data_dir}")
    cmds += ["", "# 4. the report, from what the runs above left in this directory", report_command(grid)]
    write_text_atomically(os.path.join(out, "commands.sh"), "\n".join(cmds) + "\n")
    return written


def finished_elsewhere(grid: Grid, row: Row, seed: int) -> bool:
    """Whether commands.sh's runs of a row (its pretraining and, with downstream, every fine-tuning) are done,
    so that run_row only reads them: at the paper scale nothing is trained here."""
    d = grid.row_dir(row, seed)
    needed = [os.path.join(d, "pretrain", "summary.json")]
    if grid.downstream:
        needed += [os.path.join(d, name, "summary.json") for task in grid.scale.finetune["tasks"]
                   for _, name in finetune_dirs(grid, task, seed)]
    return all(os.path.isfile(p) for p in needed)


def finetune_dirs(grid: Grid, task: str, seed: int) -> list[tuple[int, str]]:
    """(fine-tuning seed, directory name in the row's directory) of each fine-tuning of `task` from the checkpoint
    pretrained with `seed`: the first seed's is the task's own directory, the others' name their seed. One list
    for what a row runs, what commands.sh writes and what a paper-scale report waits for."""
    return [(ft_seed, finetune_dir_name(task) + ("" if k == 0 else f"_seed{ft_seed}"))
            for k, ft_seed in enumerate(grid.finetune_seeds(seed))]


# Options of a grid that say how to run it, not which runs its report reads.
RUN_ONLY_OPTIONS = ("experiment", "out", "scale", "report_only", "rows", "reuse", "nproc_per_node", "jobs")


def report_command(grid: Grid) -> str:
    """commands.sh's last line, `litebert reproduce --report-only` with every option of this grid that decides
    which runs its report reads and how (--seed, --seeds, --finetune-seeds, --set, --data-dir, ...): without
    them the report would look for other seeds, tasks or data than the commands made."""
    args = [grid.exp.name, "--scale", "paper", "--out", grid.out, "--report-only"]
    for f in dataclasses.fields(grid.cfg):
        value, default = getattr(grid.cfg, f.name), f.default if f.default_factory is dataclasses.MISSING \
            else f.default_factory()
        if f.name in RUN_ONLY_OPTIONS or value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.name == "data_dir":
            value = grid.data.root  # absolute, as every path in commands.sh
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, *map(str, value if isinstance(value, list) else [value])]
    return "litebert reproduce " + shlex.join(args)
