"""A grid's record in its report dir: results.json, report.md and the plots, with timing.json (each run's time and
machine) and grid.json (the command, settings and step budgets). Rewritten after every finished run, it is what
a session keeps (in git, say) when the grid's --out, with its checkpoints, does not survive: rerunning the command
reads it back (kept_record) and restores the finished runs (restore_runs), so that only the rest are trained and
the grid ends with the same results.json as one never interrupted. A record of another grid is refused before
anything is written, never overwritten."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from litebert.errors import ConfigError
from litebert.files import write_json, write_text_atomically
from litebert.paper.experiments import Row
from litebert.paper.grid import Grid, check_same_settings, read_json
from litebert.paper.recipes import row_identity
from litebert.paper.report import collect, report, timings, write_plots
from litebert.runtime.cpu import cpu_model


@functools.cache
def machine(gpu: bool) -> str:
    """Where rows run, for the report's time spent: the CPU, and the GPU where the scale trains on one."""
    if gpu:
        import torch
        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (host: {cpu_model()})"
    return cpu_model()


def write_report(grid: Grid, state: Mapping[str, Any], report_dir: str, quiet: bool = False) -> dict[str, Any]:
    """The record, from the rows finished so far."""
    results, spent = collect(grid, state), timings(grid)
    os.makedirs(report_dir, exist_ok=True)
    write_json(os.path.join(report_dir, "results.json"), results)
    write_json(os.path.join(report_dir, "timing.json"), spent)  # apart: results.json is the same wherever run
    if not same_dir(report_dir, grid.out):
        write_json(os.path.join(report_dir, "grid.json"), state)
    plots = write_plots(grid, results, report_dir)
    write_text_atomically(os.path.join(report_dir, "report.md"), report(grid, results, state, plots, spent))
    if not quiet:
        print(f"report: {os.path.join(report_dir, 'report.md')}", flush=True)
    return results


def same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


class Record(NamedTuple):
    """What a report dir holds of a grid: its results.json, its grid.json (or, from a version that wrote none,
    the settings and steps of results.json and the command of report.md) and its runs' timings."""
    directory: str
    results: dict[str, Any]
    state: dict[str, Any]
    timing: dict[str, Any]


def kept_record(grid: Grid, report_dir: str, settings: Mapping[str, Any]) -> Record | None:
    """The record in report_dir (None if there is none, or it is --out's own), refused if it is another grid's:
    another experiment, other settings, or seeds that --seeds leaves out (rewriting it would drop their runs)."""
    results = read_json(os.path.join(report_dir, "results.json"))
    if results is None:
        return None
    if same_dir(report_dir, grid.out):  # its runs are in --out itself; a smaller --seeds would still drop them
        _check_seeds(grid, results, report_dir)
        return None
    if results.get("experiment") != grid.exp.name or not results.get("settings"):
        raise ConfigError(f"{report_dir} holds the report of another grid ({results.get('experiment')!r}, made "
                          f"before grids recorded their settings or by another experiment); choose another "
                          "--report-dir")
    state = read_json(os.path.join(report_dir, "grid.json")) or {
        "settings": results["settings"], **({"steps": results["steps"]} if results.get("steps") else {}),
        **({"command": command} if (command := _command_of(os.path.join(report_dir, "report.md"))) else {})}
    for recorded in (results["settings"], state.get("settings", {})):
        check_same_settings(recorded, settings, f"{report_dir} holds the report of a grid",
                            "choose another --report-dir")
    _check_seeds(grid, results, report_dir)
    return Record(report_dir, results, state, read_json(os.path.join(report_dir, "timing.json")) or {})


def _check_seeds(grid: Grid, results: Mapping[str, Any], report_dir: str) -> None:
    left_out = sorted({int(s) for e in results["rows"].values() for s in e.get("runs", {})} - set(grid.seeds))
    if left_out:
        raise ConfigError(f"{report_dir} holds runs of seed(s) {', '.join(map(str, left_out))}, which --seeds "
                          f"{len(grid.seeds)} leaves out and this report would drop: give --seeds "
                          f"{max(left_out) - grid.cfg.seed + 1}, or choose another --report-dir")


def _command_of(report_md: str) -> str | None:
    """The command in a report.md's first bash block (what made the grid)."""
    if not os.path.isfile(report_md):
        return None
    with open(report_md, encoding="utf-8") as f:
        found = re.search(r"```bash\n(.+?)\n```", f.read())
    return found.group(1) if found else None


def restore_runs(grid: Grid, record: Record, rows: list[Row]) -> None:
    """Give a grid whose --out was lost the finished runs of `rows` that its record holds (each run's
    result.json as it was, and its timing). A seed of a warm-started chain is restored only where the record
    holds the whole chain: the checkpoints a warm start needs are not kept."""
    runs = {name: entry.get("runs", {}) for name, entry in record.results["rows"].items()}
    chained = any(r.warm_start for r in grid.exp.rows)
    restored = 0
    for seed in grid.seeds:
        if chained and not all(str(seed) in runs.get(r.name, {}) for r in grid.exp.rows):
            continue  # the seed's chain reruns whole
        for row in rows:
            result = runs.get(row.name, {}).get(str(seed))
            if result is not None and not os.path.isfile(grid.result_path(row, seed)):
                timing = record.timing.get(row.name, {}).get(str(seed))
                if timing is not None:
                    write_json(os.path.join(grid.row_dir(row, seed), "timing.json"), timing)
                write_json(grid.result_path(row, seed), result)
                restored += 1
    if restored:
        print(f"{grid.exp.name}: {restored} finished row run(s) restored from {record.directory}", flush=True)


def reuse_sources(grid: Grid, dirs: list[str], report_dir: str) -> dict[str, list[dict[str, Any]]]:
    """--reuse's grids, each as its finished runs that recorded an identity; a directory that holds no grid's
    results.json, this grid's own, or one whose runs recorded none (made before 2026-11-27, or by a grid of warm
    starts) is refused before anything is written."""
    sources = {}
    for directory in dirs:
        if same_dir(directory, report_dir) or same_dir(directory, grid.out):
            raise ConfigError(f"--reuse {directory}: that is this grid's own directory; name another grid's")
        try:
            results = read_json(os.path.join(directory, "results.json"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--reuse {directory}: its results.json cannot be read ({e})") from None
        if not isinstance(results, dict) or not isinstance(results.get("rows"), dict):
            raise ConfigError(f"--reuse {directory}: no results.json of a litebert reproduce grid there")
        runs = [run for entry in results["rows"].values() for run in entry.get("runs", {}).values()
                if isinstance(run, dict) and run.get("identity")]
        if not runs:
            raise ConfigError(f"--reuse {directory}: none of its runs records the identity a run is matched by "
                              "(they were made before 2026-11-27, or by a grid of warm starts)")
        sources[os.path.relpath(directory)] = runs
    return sources


def reuse_runs(grid: Grid, rows: list[Row], steps: Mapping[str, int], sources: Mapping[str, list[dict[str, Any]]]
               ) -> int:
    """Give each of `rows` the --reuse grids' runs of its identity, seed for seed, as its own but marked with
    where they were trained (a run the source took from a third grid keeps that grid's mark); the number taken.
    Their time is counted where they ran, not here."""
    taken: dict[str, int] = {}
    for row in rows:
        identity = row_identity(grid, row, steps[row.name])
        for directory, runs in sources.items():
            for run in runs:
                path = grid.result_path(row, run["seed"])
                if run["identity"] != identity or run["seed"] not in grid.seeds or os.path.isfile(path):
                    continue
                origin = run.get("reused") or {"grid": directory, "row": run["row"], "checkpoint": run["checkpoint"]}
                write_json(path, {**run, "row": row.name, "checkpoint": None, "reused": origin})
                taken[directory] = taken.get(directory, 0) + 1
    for directory, n in taken.items():
        print(f"{grid.exp.name}: {n} finished row run(s) taken from {directory} (the same recipe, data and seed)",
              flush=True)
    return sum(taken.values())


__all__ = ["kept_record", "restore_runs", "reuse_runs", "reuse_sources", "write_report"]
