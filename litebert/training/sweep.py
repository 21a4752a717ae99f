"""Grids of fine-tuning runs: seeds x swept hyperparameters, a summary over seeds, the selected configuration.

    litebert finetune --model M --task T --data-dir D --out-dir out/grid --seeds 1 2 3 --lr 1e-5 2e-5

The verb (litebert.finetune) parses the command line with `split_argv` and gives `run_grid` its training and
scoring functions.

Any numeric option of `litebert finetune` (TrainConfig or FinetuneConfig: --lr, --batch-size, --max-steps,
--dropout, --warmup-steps, ...) given several values is swept; --seeds gives the seeds. Each point of the grid is
an ordinary run directory, `<out-dir>/<field>=<value>_..._seed=<seed>`, holding what `litebert finetune` writes
(best/, summary.json, metrics). The grid is resumable as a whole: a run with a summary.json is finished and not
redone, a run with checkpoints resumes from its latest (`--resume`), any other starts afresh. A run directory
made with other settings (its train_config.toml: any option that decides the result, `DECIDING`) is refused by
name rather than kept or resumed; a seed or a swept value given twice is refused.

The summary (printed, and grid.json + grid.md in the grid directory) gives, per configuration, the best dev
score's mean, sample standard deviation, min and max over seeds. A run whose best dev score does not beat the
family's trivial baseline (majority class, chance, every word O, ...) or whose loss went non-finite is counted as
diverged and left out of those figures: ALBERT fine-tuning sometimes sits at the majority class (google-research/
albert issues 56, 123), and averaging such runs in hides both the failure rate and the working runs' score.
The selected configuration has the best mean among those where at most half of the runs diverged.
Test-set hygiene: dev selects; with --score-test only the selected configuration's runs are scored on test,
once each (kept in <run>/scored_test.json).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object, write_json, write_text_atomically
from litebert.runconfig import flag_name, load_toml
from litebert.training.checkpoint import list_checkpoints
from litebert.training.loop import NonFiniteLossError
from litebert.training.train_config import CONFIG_NAME, TrainConfig

# What a grid runs, given by the verb that drives it (litebert.finetune): one run, and one checkpoint scored.
TrainRun = Callable[[Any, TrainConfig], dict]  # (task config, train config) -> the run's summary.json
ScoreCheckpoint = Callable[[str, Any, str], tuple]  # (model dir, task config, split) -> (Scored, task, examples)

GRID_NAME, GRID_TABLE, FAILED_NAME = "grid.json", "grid.md", "failed.json"
# Metrics a constant prediction scores 0 on (a correlation); the families' baselines report them only implicitly.
_ZERO_FOR_CONSTANT = {"mcc", "pearson", "spearman"}


def sweepable_fields(*classes: type) -> dict[str, type]:
    """The options a grid may sweep: numeric fields (and fields with choices) of the run's config classes
    (FinetuneConfig and TrainConfig), each with the class that has it."""
    found = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind = next((a for a in typing.get_args(hints[f.name]) if a is not type(None)), hints[f.name])
            if kind in (int, float) or (kind is str and "choices" in f.metadata):
                found[f.name] = cls
    return found


@dataclass
class GridArgs:
    """A `litebert finetune` command line split into the run's own flags and the grid's."""

    base: list[str]  # the flags of every run (each swept flag with its first value, so the base parses)
    axes: dict[str, list[str]]  # field -> the values given, as typed
    seeds: list[str]
    score_test: bool


def split_argv(argv: Sequence[str], fields: Mapping[str, type]) -> GridArgs | None:
    """The grid a command line asks for, or None for a single run: --seeds, or a sweepable flag (one of
    `fields`) with several values (`--lr 1e-5 2e-5`, or `--lr=1e-5 2e-5` as argparse spells a flag too)."""
    base, axes, seeds, score_test, grid = [], {}, [], False, False
    given: list[str] = []  # every flag's field name, in order
    i = 0
    while i < len(argv):
        token = argv[i]
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        flag, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        values = [inline] * bool(eq) + list(argv[i + 1:j])
        name = flag[2:].replace("-", "_") if flag.startswith("--") else None
        given.append(name)
        if name in ("seeds", "seed") and (name == "seeds" or len(values) > 1):
            seeds, grid = seeds + values, True
        elif name == "score_test":
            if values:  # `--score-test false` would score test all the same
                raise ConfigError(f"--score-test takes no value (got {' '.join(values)})")
            score_test, grid = True, True
        elif name in fields and len(values) > 1:
            axes[name], grid = values, True
            base += [f"{flag}={values[0]}"] if eq else [flag, values[0]]
        else:
            base += argv[i:j]
        i = j
    if not grid:
        return None
    if "seeds" in given and not seeds:
        raise ConfigError("--seeds needs at least one seed")
    for name in axes:
        if given.count(name) > 1:  # argparse keeps a flag's last value; a grid would keep one of its lists
            raise ConfigError(f"--{name.replace('_', '-')} is given more than once: give all the values it sweeps "
                              "after one flag")
    for name, values in [("seeds", seeds), *axes.items()]:
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:  # one run counted twice in the spread over seeds
            raise ConfigError(f"--{name.replace('_', '-')} gives {', '.join(twice)} more than once: each value is "
                              "one run")
    return GridArgs(base, axes, seeds, score_test)


@dataclass
class Run:
    """One point of the grid: its swept values and the configs of its run."""

    values: dict[str, Any]  # swept field -> value, the seed last
    cfg: Any  # the task config (FinetuneConfig)
    train_cfg: TrainConfig

    @property
    def name(self) -> str:
        return run_name(self.values)

    @property
    def configuration(self) -> str:
        return run_name({k: v for k, v in self.values.items() if k != "seed"}) or "(one configuration)"


def run_name(values: Mapping[str, Any]) -> str:
    """`lr=1e-05_seed=1`: the values in a directory name (floats as repr, so 1e-5 and 0.00001 are one run)."""
    return "_".join(f"{k}={'none' if v is None else repr(v) if isinstance(v, float) else v}"
                    for k, v in values.items())


def grid_runs(cfg: Any, train_cfg: TrainConfig, axes: Mapping[str, Sequence[Any]],
              seeds: Sequence[int]) -> list[Run]:
    """The runs of a grid over `axes` (field -> values, of cfg's class or TrainConfig) x `seeds`, each in
    train_cfg.out_dir/<name>, resuming whatever it finds there."""
    owners = sweepable_fields(type(cfg), TrainConfig)
    unknown = sorted(set(axes) - set(owners))
    if unknown:
        raise ConfigError(f"cannot sweep {unknown}; sweepable: {', '.join(sorted(owners))}")
    names = sorted(axes)
    runs = []
    for combo in itertools.product(*(axes[n] for n in names)):
        for seed in seeds or [train_cfg.seed]:
            values = {**dict(zip(names, combo)), "seed": int(seed)}
            ft = {k: v for k, v in values.items() if owners[k] is type(cfg)}
            tr = {k: v for k, v in values.items() if owners[k] is TrainConfig}
            run = Run(values, dataclasses.replace(cfg, **ft), dataclasses.replace(train_cfg, **tr))
            run.train_cfg = dataclasses.replace(run.train_cfg, out_dir=os.path.join(train_cfg.out_dir, run.name),
                                                resume=True)
            runs.append(run)
    twice = sorted({run.name for run in runs if [r.name for r in runs].count(run.name) > 1})
    if twice:  # 1e-5 and 0.00001, or seeds given twice: one run counted twice
        raise ConfigError(f"the grid names run(s) {', '.join(twice)} more than once: give each value once")
    return runs


# Options that do not change what a run learns or how it is scored: a run made with others is still this run.
NOT_DECIDING = frozenset({"out_dir", "resume", "progress", "log_every", "keep_last", "save_every", "device",
                          "dist_timeout_minutes", "compile", "compile_scope", "tf32", "gradient_checkpointing",
                          "find_unused_parameters", "overwrite", "eval_batch_size", "padding_free", "cuda_graphs",
                          "data_workers"})


def settings_differ(out_dir: str, cfg: Any, train_cfg: TrainConfig, section: str = "finetune",
                    ignore: frozenset[str] = frozenset()) -> list[str]:
    """The options that decide a run's result (`cfg`'s, recorded as [section], and train_cfg's, less NOT_DECIDING
    and `ignore`) whose values differ from those recorded in out_dir/train_config.toml, as `--lr 0.001 (was
    0.002)`; [] when none is recorded."""
    path = os.path.join(out_dir, CONFIG_NAME)
    if not os.path.isfile(path):
        return []
    recorded = load_toml(path)
    differ = []
    for name, obj in ((section, cfg), ("train", train_cfg)):
        old = recorded.get(name, {})
        for key, value in dataclasses.asdict(obj).items():
            was = old.get(key)  # None is written as a comment: absent
            if key not in NOT_DECIDING and key not in ignore and _differs(was, value):
                differ.append(f"{flag_name(key)} {value} (was {'none' if was is None else was})")
    return differ


def _differs(was: Any, now: Any) -> bool:
    if isinstance(was, (int, float)) and isinstance(now, (int, float)) and not isinstance(now, bool):
        return not math.isclose(was, now, rel_tol=1e-12)
    return (list(was) if isinstance(was, tuple) else was) != (list(now) if isinstance(now, tuple) else now)


def refuse_other_settings(out_dir: str, cfg: Any, train_cfg: TrainConfig, what: str) -> None:
    differ = settings_differ(out_dir, cfg, train_cfg)
    if differ:
        raise ConfigError(f"{out_dir} holds {what} made with other settings: {'; '.join(differ)}. Give the same "
                          "options, or another --out-dir")


# What a single run's --resume may change: a higher --max-steps extends the run. (A grid's runs are fixed by its
# flags: there every setting counts.)
EXTENDABLE = frozenset({"max_steps"})


def refuse_changed_resume(cfg: Any, train_cfg: TrainConfig, section: str,
                          model: Mapping[str, Any] | None = None) -> None:
    """A single run's --resume from checkpoints made with other settings that decide the result would go on
    as a run of neither: refused by name. Checked from train_config.toml, which the loop writes at each start.
    `model`: the [model] values a pretraining sets on top of its preset (dropout, ...), compared too: the
    architecture is the checkpoint's to check, but a rate that decides the rest of the run is not."""
    out = train_cfg.out_dir
    if not train_cfg.resume or not list_checkpoints(out):
        return
    differ = settings_differ(out, cfg, train_cfg, section, ignore=EXTENDABLE) + _model_differs(out, model or {})
    if differ:
        raise ConfigError(f"{out} holds checkpoints of a run made with other settings: {'; '.join(differ)}. "
                          "--resume continues it with its own (only --max-steps may change, to extend it): give "
                          "the same options, or another --out-dir")


def _model_differs(out_dir: str, model: Mapping[str, Any]) -> list[str]:
    path = os.path.join(out_dir, CONFIG_NAME)
    recorded = load_toml(path).get("model", {}) if model and os.path.isfile(path) else {}
    return [f"model.{key} {value} (was {recorded[key]})" for key, value in model.items()
            if key in recorded and _differs(recorded[key], value)]


def run_once(run: Run, train: TrainRun) -> tuple[dict[str, Any], str]:
    """The run's summary, training it unless it finished before; and what happened ("trained", "kept"). A run
    directory made with other settings is refused by name (`settings_differ`), not kept or resumed."""
    out = run.train_cfg.out_dir
    refuse_other_settings(out, run.cfg, run.train_cfg, "a grid run")
    for name in ("summary.json", FAILED_NAME):
        path = os.path.join(out, name)
        if os.path.isfile(path):
            return read_json_object(path, CheckpointError), "kept"
    try:
        return train(run.cfg, run.train_cfg), "trained"
    except NonFiniteLossError as e:  # deterministic given its seed: recorded, not retried on resume
        failed = {"error": str(e), "out_dir": out}
        write_json(os.path.join(out, FAILED_NAME), failed)
        return failed, "trained"


def trivial_score(baseline: Mapping[str, Any], primary: str) -> float | None:
    """The primary metric of the family's trivial baseline (the best of its rules when it has several), 0 for a
    correlation (a constant scores none), None when the baseline does not say."""
    if isinstance(baseline.get(primary), (int, float)):
        return float(baseline[primary])
    nested = [v[primary] for v in baseline.values() if isinstance(v, dict) and isinstance(v.get(primary), (int, float))]
    if nested:
        return float(max(nested))
    return 0.0 if primary in _ZERO_FOR_CONSTANT else None


def diverged(summary: Mapping[str, Any]) -> str | None:
    """Why a run counts as diverged, or None: a non-finite loss, no dev score, or a best dev score that does
    not beat the trivial baseline."""
    if "error" in summary:
        return summary["error"]
    primary = summary["primary_metric"]
    score = summary.get("best", {}).get(primary)
    if not isinstance(score, (int, float)) or not math.isfinite(score):
        return "no dev score"
    trivial = trivial_score(summary.get("baseline", {}), primary)
    if trivial is not None and score <= trivial:
        method = summary.get("baseline", {}).get("method", "trivial baseline")
        return f"best dev {primary} {score:.4f} does not beat {method} ({trivial:.4f})"
    return None


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, sample standard deviation (None for one value), min and max; all None for no values."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else None,
            "min": float(a.min()), "max": float(a.max())}


def summarize(runs: Sequence[Run], summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The grid's report: each run, each configuration's spread over seeds, the selected configuration."""
    rows, primary, baseline = [], None, None
    for run, summary in zip(runs, summaries):
        primary = primary or summary.get("primary_metric")
        baseline = baseline or summary.get("baseline")
        reason = diverged(summary)
        rows.append({"name": run.name, "configuration": run.configuration, "values": run.values,
                     "dir": run.train_cfg.out_dir, "dev": (summary.get("best") or {}).get(primary),
                     "diverged": reason, "steps": summary.get("steps"),
                     "early_stopped": summary.get("early_stopped", False)})
    configurations = []
    for name in dict.fromkeys(r["configuration"] for r in rows):
        mine = [r for r in rows if r["configuration"] == name]
        ok = [r["dev"] for r in mine if not r["diverged"]]
        configurations.append({"configuration": name, "values": {k: v for k, v in mine[0]["values"].items()
                                                                  if k != "seed"},
                               "runs": len(mine), "diverged": len(mine) - len(ok), **spread(ok)})
    eligible = [c for c in configurations if c["mean"] is not None and 2 * c["diverged"] <= c["runs"]]
    selected = max(eligible, key=lambda c: c["mean"])["configuration"] if eligible else None
    return {"primary_metric": primary, "baseline": baseline,
            "trivial_score": trivial_score(baseline or {}, primary) if primary else None,
            "runs": rows, "configurations": configurations, "selected": selected}


def scored_once(run: Run, score: ScoreCheckpoint, split: str = "test") -> dict[str, Any]:
    """The metrics of the run's best dev checkpoint on all of `split`, computed once: kept in
    <run>/scored_<split>.json and read back on every later call."""
    path = os.path.join(run.train_cfg.out_dir, f"scored_{split}.json")
    if os.path.isfile(path):
        scored = read_json_object(path, CheckpointError)
        if not isinstance(scored.get("metrics"), dict):
            raise CheckpointError(f"{path}: no metrics; delete it to score the run again")
        return scored["metrics"]
    cfg = dataclasses.replace(run.cfg, max_eval_examples=None)
    metrics = score(os.path.join(run.train_cfg.out_dir, "best"), cfg, split)[0].metrics
    write_json(path, {"split": split, "metrics": metrics})
    return metrics


def score_test(report: dict[str, Any], runs: Sequence[Run], score: ScoreCheckpoint, split: str = "test"
               ) -> dict[str, Any]:
    """Score the selected configuration's working runs on `split`, each once (`scored_once`), and add their
    spread to the report."""
    by_name = {run.name: run for run in runs}
    scores = {}
    for row in report["runs"]:
        if row["configuration"] != report["selected"] or row["diverged"]:
            continue
        row[split] = scored_once(by_name[row["name"]], score, split).get(report["primary_metric"])
        scores[row["name"]] = row[split]
    report[split] = {"configuration": report["selected"], **spread([v for v in scores.values() if v is not None])}
    return report


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(report: Mapping[str, Any]) -> str:
    """The report as Markdown: a row per configuration, the baseline and the selection under it."""
    m = report["primary_metric"]
    lines = [f"| configuration | runs | diverged | dev {m} mean | std | min | max |", "|---|---|---|---|---|---|---|"]
    for c in report["configurations"]:
        mark = " (selected)" if c["configuration"] == report["selected"] else ""
        lines.append(f"| {c['configuration']}{mark} | {c['runs']} | {c['diverged']} | {_fmt(c['mean'])} | "
                     f"{_fmt(c['std'])} | {_fmt(c['min'])} | {_fmt(c['max'])} |")
    method = (report.get("baseline") or {}).get("method", "trivial baseline")
    lines += ["", f"Trivial baseline ({method}): dev {m} {_fmt(report['trivial_score'])}. "
              "Diverged runs (not beating it, or a non-finite loss) are counted, not averaged in; std is over seeds "
              "(n - 1)."]
    lines.append(f"Selected: {report['selected'] or 'none (every configuration diverged in more than half its runs)'}")
    for r in report["runs"]:
        if r["diverged"]:
            lines.append(f"- diverged: {r['name']}: {r['diverged']}")
    if "test" in report:
        t = report["test"]
        lines.append(f"Test {m} of the selected configuration's runs (each scored once): mean {_fmt(t['mean'])}, "
                     f"std {_fmt(t['std'])}, min {_fmt(t['min'])}, max {_fmt(t['max'])}")
    return "\n".join(lines) + "\n"


def run_grid(cfg: Any, train_cfg: TrainConfig, axes: Mapping[str, Sequence[Any]], seeds: Sequence[int], *,
             train: TrainRun, score: ScoreCheckpoint, test: bool = False, echo=print) -> dict[str, Any]:
    """Train (or keep) every run of the grid in order, then write grid.json and grid.md in train_cfg.out_dir and
    return the report (see `summarize`)."""
    runs = grid_runs(cfg, train_cfg, axes, seeds)
    summaries = []
    for i, run in enumerate(runs, 1):
        summary, what = run_once(run, train)
        summaries.append(summary)
        best_dev = (summary.get("best") or {}).get(summary.get("primary_metric"))  # not `score`: the scorer's name
        echo(f"[{i}/{len(runs)}] {run.name}: {what}, best dev {summary.get('primary_metric', '')} {_fmt(best_dev)}"
             + (f" (diverged: {diverged(summary)})" if diverged(summary) else ""))
    report = summarize(runs, summaries)
    report.update(grid_dir=train_cfg.out_dir, task=cfg.task, axes={k: list(v) for k, v in axes.items()},
                  seeds=[int(s) for s in seeds] or [train_cfg.seed])
    if test and report["selected"]:
        score_test(report, runs, score)
    write_json(os.path.join(train_cfg.out_dir, GRID_NAME), report)
    write_text_atomically(os.path.join(train_cfg.out_dir, GRID_TABLE), table(report))
    return report


def read_grid(directory: str | os.PathLike) -> dict[str, Any]:
    path = os.path.join(directory, GRID_NAME)
    if not os.path.isfile(path):
        raise ConfigError(f"{directory} holds no {GRID_NAME}: run the grid first (litebert finetune --seeds ...)")
    return read_json_object(path, ConfigError)
