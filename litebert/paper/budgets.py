"""How many steps a row of a grid trains: the scale's, or a minutes budget (Table 6: every row the same time)
turned into steps by timing each row's recipe, and afterwards how long a run really spent training.
"""

from __future__ import annotations

import os
import shutil
import statistics
from typing import Any

from litebert.paper.children import crowding, lane_for, run_verb
from litebert.paper.experiments import Row
from litebert.paper.grid import Grid, prepare_row_data, slug
from litebert.paper.recipes import row_recipe, write_recipe
from litebert.training.metrics_log import METRICS_NAME, read_metrics


def seconds_per_step(grid: Grid, row: Row, probe_steps: int = 8) -> float:
    """One training step of the row, measured: a short run of its recipe, timed from its metrics log (the
    first two steps not counted). What a minutes budget is turned into steps with."""
    probe = os.path.join(grid.out, "probe", slug(row.name))
    shutil.rmtree(probe, ignore_errors=True)
    prepare_row_data(grid, row)  # a new grid's first step: its data may not exist yet
    sections = row_recipe(grid, row, grid.cfg.seed, probe_steps, grid.data.vocab_size(), probe, None)
    sections["train"].update(max_steps=probe_steps, warmup_steps=0, log_every=1, eval_every=0, save_every=0)
    sections["pretrain"]["eval_data"] = []
    recipe = write_recipe(os.path.join(probe, "recipe.toml"), sections, f"# speed probe of {row.name!r}\n")
    run_verb("pretrain", ["--config", recipe], os.path.join(probe, "log.txt"), grid.cfg.nproc_per_node,
             lane=lane_for(grid, grid.cfg.jobs))  # the threads a row will have (then beside others)
    seconds = [tokens_per_step(grid) / r["tokens_per_s"] for r in read_metrics(os.path.join(probe, METRICS_NAME))
               if "tokens_per_s" in r and r["step"] > 2]  # one step each: the mean of times, not of rates
    shutil.rmtree(probe, ignore_errors=True)
    return sum(seconds) / len(seconds)


def tokens_per_step(grid: Grid) -> int:
    """The tokens a training step of the grid's recipe reads (its logged tokens/s are of these)."""
    return grid.scale.train["batch_size"] * grid.scale.data["max_seq_length"]


def minutes_budget(grid: Grid) -> float | None:
    """--budget-minutes, else the scale's for an experiment that gives every row the same time; None: steps."""
    return grid.cfg.budget_minutes or (grid.scale.budget_minutes if grid.exp.budget == "minutes" else None)


PROBE_ROUNDS = 3


def probed_speeds(grid: Grid, rows: list[Row], state: dict[str, Any]) -> dict[str, float]:
    """Each row's seconds a step: the median of PROBE_ROUNDS probes, taken in turn (A B A B ...) so that a change
    in the machine's load falls on every row alike. One probe a row once set Table 6's two rows 3.5x apart in
    one grid and 4.8x in another of the same speed. Every probe is kept in grid.json."""
    if warning := crowding(lane_for(grid, grid.cfg.jobs).thread_count * grid.cfg.nproc_per_node):
        print(f"{grid.exp.name}: the speed probes: {warning}", flush=True)
    probes: dict[str, list[float]] = {row.name: [] for row in rows}
    for _ in range(PROBE_ROUNDS):
        for row in rows:
            probes[row.name].append(seconds_per_step(grid, row))
    state["probes"] = probes
    state["seconds_per_step"] = {name: statistics.median(times) for name, times in probes.items()}
    print(f"{grid.exp.name}: seconds a step, the median of {PROBE_ROUNDS} probes each: " + ", ".join(
        f"{name} {state['seconds_per_step'][name]:.3g} ({min(t):.3g}-{max(t):.3g})" for name, t in probes.items()),
        flush=True)
    return state["seconds_per_step"]


def step_budgets(grid: Grid, state: dict[str, Any]) -> dict[str, int]:
    """Steps per row: the scale's (and --set train.max_steps), or from --budget-minutes and a timed probe,
    measured once and kept in grid.json so a resumed grid trains the same steps."""
    if "steps" in state:
        return state["steps"]
    minutes = minutes_budget(grid)
    if minutes is None:
        steps = {r.name: int(grid.scale.train["max_steps"]) for r in grid.exp.rows}
    elif grid.exp.budget == "minutes":  # each row its own steps: the same time
        per = probed_speeds(grid, list(grid.exp.rows), state)
        steps = {name: max(1, int(minutes * 60 / s)) for name, s in per.items()}
    else:  # the same steps for every row: what the first row does in the time
        first = grid.exp.rows[0]
        per = probed_speeds(grid, [first], state)
        steps = {r.name: max(1, int(minutes * 60 / per[first.name])) for r in grid.exp.rows}
    state["steps"] = steps
    return steps


def training_minutes(grid: Grid, run_dir: str) -> float | None:
    """The minutes a run spent in training steps, from the speed it logged over each interval (evaluations and
    saves left out): what Table 6 gives every row alike, measured after the fact rather than assumed."""
    speeds = {r["step"]: r["tokens_per_s"] for r in read_metrics(os.path.join(run_dir, METRICS_NAME))
              if r.get("tokens_per_s")}
    if not speeds:
        return None
    seconds, last = 0.0, 0
    for step in sorted(speeds):
        seconds, last = seconds + (step - last) * tokens_per_step(grid) / speeds[step], step
    return seconds / 60
