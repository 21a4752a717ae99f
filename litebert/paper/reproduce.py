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

The grid runs in one process, its rows one after another or --jobs N at once (each row in its own processes, the
cores shared out); --nproc-per-node N trains each row with N processes under torchrun (the batch sizes are
global: the same examples per step). The grid resumes: rerunning the command skips every finished
row (its result.json), resumes a killed row from its last checkpoint, and --rows reruns a subset from scratch;
with --out lost, it goes on from the finished runs its --report-dir keeps.
The report (report.md beside results.json and PNG plots) sets the grid's table beside the paper's and says,
for each comparison the paper makes whether it reproduces, is contradicted, or is inconclusive at the grid's
power: with --seeds N a cell is its mean ± a 95% t interval, and each comparison is a Welch t-test on the seeds
(litebert.paper.stats), printed with its p-value and the smallest gap the grid could have detected; a claim of
k comparisons is reproduced when all k are, contradicted when one is at alpha / k.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from litebert.corpus.documents import resolve_inputs
from litebert.errors import ConfigError, LitebertError
from litebert.files import check_replaceable, write_json
from litebert.model import AlbertModel
from litebert.paper.analysis import layer_transitions, read_sentences
from litebert.paper.budgets import step_budgets, training_minutes
from litebert.paper.children import ALONE, Lane, TimeLedger, crowding, lane_for, minutes, run_chains, run_verb
from litebert.paper.experiments import DATA, EXPERIMENTS, SCALES, Row, Scale, scale_model, split_task
from litebert.paper.grid import (
    Grid,
    GridData,
    ReproduceConfig,
    check_same_settings,
    grid_settings,
    parse_sets,
    prepare_row_data,
    read_json,
)
from litebert.paper.recipes import (
    check_started,
    finetune_dirs,
    finetune_recipe,
    finished_elsewhere,
    row_identity,
    row_recipe,
    stale_results,
    write_paper_recipes,
    write_recipe,
)
from litebert.paper.record import kept_record, machine, restore_runs, reuse_runs, reuse_sources, write_report
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.tokenizer import Tokenizer
from litebert.training.distributed import world_size
from litebert.training.metrics_log import METRICS_NAME, read_metrics
from litebert.training.train_config import TrainConfig

# The experiments and scales are data (experiments.py); a grid's options, settings, shared data and row
# directories are grid.py's; results.json, the verdicts, report.md and the plots are report.py's; the record a
# report dir keeps, and what a rerun reads back from it, is record.py's; starting a row's verbs as child
# processes, several at once, is children.py's. Here: the scale --set makes, what a row runs and scores, and
# the verb.


# -- settings --------------------------------------------------------------------------------------------------

def resolved_scale(name: str, sets: Mapping[str, Mapping[str, Any]]) -> Scale:
    """The scale with --set's train/pretrain/data/finetune values (model.X is applied per row). A key of
    pretrain.X or finetune.X that the verb does not know is refused by the verb, when the row runs."""
    scale = SCALES[name]
    bad = set(sets["train"]) - {f.name for f in dataclasses.fields(TrainConfig)}
    if bad:
        raise ConfigError(f"--set train.{sorted(bad)[0]}: TrainConfig has no such field")
    bad = set(sets["data"]) - set(SCALES["cpu"].data) - {"max_sentences"}
    if bad:
        raise ConfigError(f"--set data.{sorted(bad)[0]}: known: {', '.join(SCALES['cpu'].data)}")
    finetune = {**scale.finetune, **sets["finetune"]}
    tasks = finetune["tasks"]
    finetune["tasks"] = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    for task in finetune["tasks"]:
        task_name, _ = split_task(str(task))
        if name != "paper" and not os.path.isdir(os.path.join(DATA, task_name)):
            raise ConfigError(f"--set finetune.tasks: no bundled task {task_name!r} (in {DATA})")
    return dataclasses.replace(scale, train={**scale.train, **sets["train"]},
                               pretrain={**scale.pretrain, **sets["pretrain"]}, data={**scale.data, **sets["data"]},
                               finetune=finetune)


# -- running rows ----------------------------------------------------------------------------------------------

def run_row(grid: Grid, row: Row, seed: int, steps: int, lane: Lane = ALONE) -> dict[str, Any]:
    """Pretrain one row with one seed (its recipe, through `litebert pretrain`), score it, and write its
    result.json, the mark of a finished row. A stage whose summary.json exists is not rerun; a killed
    pretraining resumes from its last checkpoint (the recipe says resume = true)."""
    d = grid.row_dir(row, seed)
    prepare_row_data(grid, row)
    if grid.scale.name != "paper":  # a paper-scale run was made elsewhere: only read here
        check_started(grid, row, seed, steps)
    init_from = None
    if row.warm_start:
        warm = read_json(grid.result_path(grid.row(row.warm_start), seed))
        if warm is None:
            raise ConfigError(f"row {row.name!r} warm-starts from {row.warm_start!r}, which has not finished "
                              f"for seed {seed}: run it first")
        init_from = os.path.join(grid.out, warm["checkpoint"])
        if not os.path.isdir(init_from):
            raise ConfigError(f"row {row.name!r} warm-starts from {row.warm_start!r}'s checkpoint, which is not in "
                              f"{grid.out} (its result came back from a report, without checkpoints): rerun the "
                              "grid without --rows, or with --rows naming the rows it starts from")
    pre_dir = os.path.join(d, "pretrain")
    summary = read_json(os.path.join(pre_dir, "summary.json"))
    if summary is None:
        recipe = write_recipe(os.path.join(d, "pretrain.toml"),
                              row_recipe(grid, row, seed, steps, grid.data.vocab_size(), pre_dir, init_from),
                              f"# {grid.exp.table}, row {row.name!r}, seed {seed} (litebert reproduce "
                              f"{grid.exp.name}, scale {grid.scale.name})\n")
        run_verb("pretrain", ["--config", recipe], os.path.join(d, "pretrain.log"), grid.cfg.nproc_per_node,
                 progress=(pre_dir, steps), lane=lane)
        summary = read_json(os.path.join(pre_dir, "summary.json"))
    final = summary["final"]
    result: dict[str, Any] = {
        "row": row.name, "seed": seed, "parameters": summary["parameters"], "steps": summary["steps"],
        "init_from": os.path.relpath(init_from, grid.out) if init_from else None,
        "checkpoint": os.path.relpath(summary["checkpoint"], grid.out),
        "mlm_acc": final["heldout_sop/mlm_acc"], "mlm_loss": final["heldout_sop/mlm_loss"]}
    for t in grid.exp.held_out:
        result[f"{t}_acc"] = final[f"heldout_{t}/{t}_acc"]
    if grid.scale.name != "paper" and (identity := row_identity(grid, row, steps)):
        result["identity"] = identity  # what another grid matches to take this run (--reuse)
    result["curve"] = mlm_curve(pre_dir)
    late = [acc for step, acc in result["curve"] if step > summary["steps"] / 2] or [result["mlm_acc"]]
    result["mlm_acc_late"] = sum(late) / len(late)
    checkpoint = os.path.join(grid.out, result["checkpoint"])
    if grid.exp.analysis == "transitions":
        result.update(transitions(grid, checkpoint))
    if grid.downstream:
        result["downstream"] = downstream(grid, checkpoint, d, seed, lane)
        result["avg"] = sum(v["score"] for v in result["downstream"].values()) / len(result["downstream"])
    write_json(grid.result_path(row, seed), result)
    return result


def mlm_curve(run_dir: str) -> list[list[float]]:
    """[step, held-out MLM accuracy] of every evaluation of a run (metrics.jsonl; the last record of a step)."""
    points = {r["step"]: r["eval_heldout_sop/mlm_acc"] for r in read_metrics(os.path.join(run_dir, METRICS_NAME))
              if "eval_heldout_sop/mlm_acc" in r}
    return [[step, points[step]] for step in sorted(points)]


def transitions(grid: Grid, checkpoint: str) -> dict[str, Any]:
    """Figure 1's measures on the held-out text: per layer L2 and angle (degrees) between input and output."""
    sentences, _ = read_sentences(os.path.join(grid.data.split, "heldout.txt"), grid.scale.transitions_sentences)
    batch = Tokenizer.from_pretrained(checkpoint)(sentences, padding=True, truncation=True,
                                                  max_length=grid.scale.data["max_seq_length"], return_tensors="pt")
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


def downstream(grid: Grid, checkpoint: str, row_dir: str, seed: int, lane: Lane = ALONE) -> dict[str, Any]:
    """Fine-tune on each bundled task with the scale's one recipe (`litebert finetune --config`), once per
    fine-tuning seed; the best dev score of the task's primary metric, averaged over those seeds."""
    out = {}
    for task in grid.scale.finetune["tasks"]:
        scores, metric, baseline = [], None, {}
        for ft_seed, name in finetune_dirs(grid, task, seed):
            ft_dir = os.path.join(row_dir, name)
            summary = read_json(os.path.join(ft_dir, "summary.json"))
            if summary is None:
                recipe = write_recipe(os.path.join(row_dir, f"{name}.toml"),
                                      finetune_recipe(grid, checkpoint, task, ft_dir, ft_seed), "")
                run_verb("finetune", ["--config", recipe], os.path.join(row_dir, f"{name}.log"),
                         grid.cfg.nproc_per_node, progress=(ft_dir, grid.scale.finetune["max_steps"]), lane=lane)
                summary = read_json(os.path.join(ft_dir, "summary.json"))
            metric = summary["primary_metric"]
            baseline = summary.get("baseline") or {}
            if not isinstance(summary["best"].get(metric), (int, float)):  # a NaN would pass as "inconclusive"
                raise LitebertError(f"{ft_dir}: its summary.json has no best {metric} (the run never evaluated "
                                    "its dev set); delete the folder to rerun it")
            scores.append(summary["best"][metric])
        out[task] = {"metric": metric, "score": sum(scores) / len(scores), "scores": scores,
                     "baseline": baseline.get(metric) if isinstance(baseline.get(metric), (int, float)) else None}
    return out


def run_grid(grid: Grid, command: str | None = None) -> dict[str, Any]:
    """Run the grid's unfinished rows (run_rows: a progress line each, the report rewritten after each), then
    write the report. `command` (what was typed) is kept for the report unless it reran a subset or only
    reported. Every refusal (another grid in --out or in --report-dir) comes before anything is written."""
    state_path, report_dir = os.path.join(grid.out, "grid.json"), grid.cfg.report_dir or grid.out
    settings = grid_settings(grid)
    state = read_json(state_path)
    if state is not None:
        check_same_settings(state.get("settings", {}), settings, f"{grid.out} holds a grid", "use another --out")
    record = kept_record(grid, report_dir, settings)
    sources = reuse_sources(grid, grid.cfg.reuse, report_dir)
    if grid.scale.name != "paper" and not grid.cfg.report_only:  # a data dir of other settings, before --out
        grid.data.check(any(row.data.get("extra") for row in grid.exp.rows))
    lost = state is None and record is not None  # --out is gone (or new) and its report dir kept: go on from it
    state = (record.state if lost else state) or {}
    if command and not (grid.cfg.rows or grid.cfg.report_only):
        state["command"] = command
    state["settings"] = settings
    os.makedirs(grid.out, exist_ok=True)
    write_json(state_path, state)
    selected = [grid.row(name) for name in grid.cfg.rows] if grid.cfg.rows else list(grid.exp.rows)
    rerun = with_warm_started(grid, selected) if grid.cfg.rows and not grid.cfg.report_only else []
    selected = rerun or selected
    if lost:
        restore_runs(grid, record, [r for r in grid.exp.rows if r not in rerun])
    if not grid.cfg.report_only:
        for row in rerun:
            for seed in grid.seeds:
                shutil.rmtree(grid.row_dir(row, seed), ignore_errors=True)
        steps = step_budgets(grid, state)
        write_json(state_path, state)
        if stale := stale_results(grid, selected, steps):
            shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
            raise ConfigError(f"{len(stale)} finished run(s) were made with other settings than this grid's now "
                              f"({shown}): a recipe, the data or the fine-tuning changed since, or how litebert "
                              "trains (recipes.IDENTITY_FORMAT); --report-only rewrites their report, --rows reruns "
                              "them, another --out starts afresh")
        taken = reuse_runs(grid, [r for r in selected if r not in rerun], steps, sources)
        todo = [(r, s) for r in selected for s in grid.seeds if not os.path.isfile(grid.result_path(r, s))]
        done_before = len(selected) * len(grid.seeds) - len(todo) - taken
        if done_before:
            print(f"{grid.exp.name}: {done_before} finished row run(s) kept (their result.json)", flush=True)
        lock = threading.Lock()

        def report_so_far() -> None:  # a report that cannot be written stops no run: the next rewrite has it all
            with lock:
                try:
                    write_report(grid, state, report_dir, quiet=True)
                except Exception as e:  # noqa: BLE001 - the runs matter more than this copy of their results
                    print(f"{grid.exp.name}: the report could not be written ({e}); the grid goes on", flush=True)
        run_rows(grid, todo, steps, report_so_far)
    if grid.scale.name == "paper":  # the runs were made elsewhere by commands.sh: read the finished ones
        steps = {r.name: int(grid.scale.train["max_steps"]) for r in grid.exp.rows}
        for row in grid.exp.rows:
            for seed in grid.seeds:
                if not os.path.isfile(grid.result_path(row, seed)) and finished_elsewhere(grid, row, seed):
                    run_row(grid, row, seed, steps[row.name])
    return write_report(grid, state, report_dir)


class _Tally:
    """The grid's progress lines, for rows that may finish in any order (--jobs): which run starts, of how
    many, the time elapsed and left, and each result. The time left weighs the runs still to come by their
    model's arithmetic (rows of one grid can differ tenfold: Table 12's widths), at the seconds per unit the
    finished runs took, shared among the runs at once."""

    def __init__(self, grid: Grid, todo: list[tuple[Row, int]], steps: dict[str, int], parallel: int) -> None:
        self.grid, self.parallel, self.started = grid, parallel, 0
        self.costs = {row.name: _cost(grid, row, steps[row.name]) for row, _ in todo}
        self.todo, self.done_cost, self.done_seconds = [row.name for row, _ in todo], 0.0, 0.0
        self.t_start, self.lock = time.time(), threading.Lock()

    def start(self, row: Row, seed: int, steps: int) -> None:
        with self.lock:
            self.started += 1
            to_come = [self.costs[name] for name in self.todo[self.started - 1:]]
            seconds = self.done_seconds / self.done_cost * sum(to_come) / min(self.parallel, len(to_come)) \
                if self.done_cost else None
            left = f"~{minutes(seconds)} left" if seconds is not None else "time left: after the first row"
            print(f"[{self.started}/{len(self.todo)}] {self.grid.exp.name}: {row.name}, seed {seed}, {steps} steps "
                  f"(elapsed {minutes(time.time() - self.t_start)}, {left})", flush=True)

    def done(self, lane: Lane, seconds: float, result: dict[str, Any]) -> None:
        with self.lock:
            self.done_seconds += seconds
            self.done_cost += self.costs[result["row"]]
            print(f"      {lane.tag}done in {minutes(seconds)}: held-out MLM {result['mlm_acc']:.1%}, "
                  + ", ".join(f"{t.upper()} {result[f'{t}_acc']:.1%}" for t in self.grid.exp.held_out)
                  + (f", downstream avg {result['avg']:.1%}" if "avg" in result else ""), flush=True)


def _cost(grid: Grid, row: Row, steps: int) -> float:
    """A row run's arithmetic, up to a factor: multiply-adds per token of its model (the layer applications,
    the embedding projection, the MLM decoder) times its steps. Fine-tuning, a fixed number of steps of the
    same model, scales with it."""
    m = scale_model(grid.exp, row, grid.scale, grid.data.vocab_size(), grid.sets["model"])
    h, e = m["hidden_size"], m["embedding_size"]
    return steps * (m["num_hidden_layers"] * (4 * h * h + 2 * h * m["intermediate_size"]) + h * e
                    + e * m["vocab_size"])


def with_warm_started(grid: Grid, rows: list[Row]) -> list[Row]:
    """`rows` and every row that continues from one of them, directly or through others (Table 11's L=6 from
    L=3): rerunning a row replaces the checkpoint those rows were trained from, so they rerun too."""
    chosen = {row.name for row in rows}
    for row in grid.exp.rows:  # a row comes after the row it warm-starts from
        if row.warm_start in chosen:
            chosen.add(row.name)
    added = [r.name for r in grid.exp.rows if r.name in chosen and r not in rows]
    if added:
        print(f"{grid.exp.name}: {', '.join(added)} warm-start from the rows named, and rerun with them", flush=True)
    return [row for row in grid.exp.rows if row.name in chosen]


def run_rows(grid: Grid, todo: list[tuple[Row, int]], steps: dict[str, int],
             after_each: Callable[[], None] = lambda: None) -> None:
    """Train the (row, seed) runs of `todo` in order, --jobs of them at once (children.run_chains: what a
    failure or an interrupt does), calling after_each when a run finishes. A run that warm-starts from another
    row waits for it: with warm starts, each seed's rows are one chain. The data every row needs is prepared
    first, in this thread."""
    if any(r.warm_start for r in grid.exp.rows):
        chains = [[(r, s) for r, s in todo if s == seed] for seed in dict.fromkeys(s for _, s in todo)]
    else:
        chains = [[item] for item in todo]
    parallel = min(grid.cfg.jobs, len(chains)) or 1
    for name in dict.fromkeys(r.name for r, _ in todo):
        prepare_row_data(grid, grid.row(name))
    tally = _Tally(grid, todo, steps, parallel)
    where = machine(grid.scale.train.get("device") == "cuda")
    threads = lane_for(grid, parallel).thread_count
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if todo and (warning := crowding(threads * parallel * grid.cfg.nproc_per_node)):
        print(f"{grid.exp.name}: {warning}", flush=True)

    def run_one(item: tuple[Row, int]) -> None:
        row, seed = item
        lane = lane_for(grid, parallel, row, seed)
        tally.start(row, seed, steps[row.name])
        with TimeLedger(os.path.join(grid.row_dir(row, seed), "spent.json")) as spent:
            result = run_row(grid, row, seed, steps[row.name], lane)
        trained = training_minutes(grid, os.path.join(grid.row_dir(row, seed), "pretrain"))
        write_json(os.path.join(grid.row_dir(row, seed), "timing.json"),
                   {"seconds": spent.seconds, "attempts": spent.attempts, "machine": where, "at_once": parallel,
                    "threads": threads, "processes": grid.cfg.nproc_per_node, "load_1min_before_grid": load,
                    "pretrain_minutes": trained})
        tally.done(lane, spent.attempt_seconds, result)  # this attempt's pace: what the time left is estimated from
        after_each()

    if parallel == 1:  # in this thread: a row's verb may run in this process (tests) and set signals
        for item in todo:
            run_one(item)
    else:
        run_chains(chains, run_one, parallel)


# -- the verb --------------------------------------------------------------------------------------------------

def make_grid(cfg: ReproduceConfig) -> Grid:
    if len(cfg.experiment) != 1 or cfg.experiment[0] not in EXPERIMENTS:
        raise ConfigError(f"give one experiment, one of: {', '.join(EXPERIMENTS)} (got {' '.join(cfg.experiment)})")
    sets = parse_sets(cfg.set)
    scale = resolved_scale(cfg.scale, sets)
    if cfg.scale != "paper":  # a missing file is refused before anything is written
        for inputs in ([cfg.corpus] if cfg.corpus else []) + [[p] for p in cfg.extra_corpus]:
            resolve_inputs(inputs)
    out = os.path.abspath(cfg.out)
    data = GridData(os.path.abspath(cfg.data_dir) if cfg.data_dir else os.path.join(out, "data"), scale, cfg.seed,
                    cfg.corpus, list(cfg.extra_corpus))
    return Grid(EXPERIMENTS[cfg.experiment[0]], cfg, scale, sets, out, data)


def reproduce(cfg: ReproduceConfig, command: str | None = None) -> dict[str, Any]:
    """Run (or, at the paper scale, write) the grid; `command` is what the report says made it."""
    if world_size() > 1:  # every rank would run the whole grid into the same directory
        raise ConfigError("litebert reproduce runs its grid in one process: start it without torchrun and pass "
                          f"--nproc-per-node {world_size()} to train each row with that many processes")
    grid = make_grid(cfg)
    for name in cfg.rows:
        grid.row(name)  # an unknown row is refused before anything runs
    if cfg.scale == "paper" and cfg.reuse:
        raise ConfigError("--reuse takes runs a cpu, gpu or tiny grid made; the paper scale's runs are made by its "
                          "commands.sh, which trains every row")
    if cfg.scale == "paper" and not cfg.report_only:
        written = write_paper_recipes(grid)
        print(f"{len(written)} recipes in {os.path.join(grid.out, 'recipes')}; the commands: "
              f"{os.path.join(grid.out, 'commands.sh')} (nothing was run)")
        return {"recipes": written, "commands": os.path.join(grid.out, "commands.sh")}
    check_replaceable(os.path.join(cfg.report_dir or grid.out, "report.md"),
                      lambda p: "litebert reproduce" in p.read_text(encoding="utf-8"), "a report of litebert reproduce",
                      hint="choose another --report-dir")
    return run_grid(grid, command)


def cli(argv: list[str]) -> int:
    parser = verb_parser("reproduce", __doc__, {"experiment and grid": ReproduceConfig})
    args = parser.parse_args(argv)
    (cfg,) = parse_verb(parser, args)
    runs_here = ("--scale cpu", "--scale gpu", "--scale tiny")  # the paper scale writes commands, runs nothing
    readers = {"jobs": runs_here, "nproc_per_node": (*runs_here, "--scale paper")}  # --report-only runs nothing
    refuse_flags_of_other_modes(args, "--report-only" if cfg.report_only else f"--scale {cfg.scale}", readers,
                                "reproduce")
    reproduce(cfg, "litebert reproduce " + shlex.join(argv))
    return 0


__all__ = ["reproduce"]
