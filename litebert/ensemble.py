"""Ensembles of fine-tuned models: the average of their family scores, members chosen greedily on dev.

    litebert ensemble --task T --data-dir D --models run1/best run2/best ... --out out/ens
    litebert ensemble --task T --data-dir D --from-grid out/grid --top 8 --out out/ens
    litebert ensemble --task T --data-dir D --models out/run --average-last 3 --out out/avg

What is averaged is what the task's family scores per feature (litebert.tasks.families: `scores`): class
probabilities, regression values, label probabilities (multi-label), option probabilities, QA start/end logits
before span decoding (as the paper averaged them), tag probabilities. The average is then scored by the family
exactly as one model's scores are, so an ensemble of one model is that model.

Selection, as the paper's ensembles (Tables 9-10: checkpoints "selected based on development set performance"):
start from the best single member on dev, add the candidate that most improves the dev metric of the average,
stop when none does; each candidate at most once, equal weights.

Test-set hygiene: selection and calibration (multi-label thresholds, SQuAD v2.0's no-answer threshold, tuned
for the averaged scores) use dev only. The test split (--split) is scored once, after selection: the ensemble
with its dev calibration, and each selected member with its own (best/calibration.json). ensemble.json in --out
records the members, their weights, the selection steps and every score.

--average-last K: each --models entry is a run directory; its member is the weight average of the run's last K
checkpoints (step_N/, as --save-every/--keep-last left them), written to <out>/averaged/<run>/.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from litebert import tasks as T
from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.files import atomic_open, write_dir_atomically, write_json
from litebert.finetune import FinetuneConfig
from litebert.runconfig import given_fields, parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.tasks.ensembles import ENSEMBLE_FILE, average_scores, is_ensemble, read_ensemble
from litebert.tasks.families import Family
from litebert.tasks.fine_tuned import family_for_config
from litebert.tasks.inference import check_finite_scores, model_scores
from litebert.tasks.loading import Split, check_task_given, read_task_split
from litebert.tokenizer import Tokenizer
from litebert.training.checkpoint import list_checkpoints
from litebert.training.sweep import read_grid
from litebert.weights import read_state_dict


class Ensemble:
    """Fine-tuned models of one task whose family scores are averaged with `weights` (default: equal).

        ens = Ensemble.load("out/ens")                   # what `litebert ensemble` selected
        scores = ens.scores(family, features, pad_id=tok.pad_id)
        family.score(task, examples, features, scores, labels, settings, ens.calibration)
    """

    def __init__(self, models: Sequence[torch.nn.Module], weights: Sequence[float] | None = None,
                 calibration: dict[str, Any] | None = None):
        self.models, self.weights, self.calibration = list(models), weights, calibration

    @classmethod
    def from_dirs(cls, directories: Sequence[str], weights: Sequence[float] | None = None,
                  calibration: dict[str, Any] | None = None) -> "Ensemble":
        return cls([load_member(d) for d in directories], weights, calibration)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "Ensemble":
        """The ensemble `litebert ensemble --out directory` recorded (its members' directories must remain)."""
        return cls.from_dirs(*read_ensemble(directory))

    def scores(self, family: Family, features: Sequence, batch_size: int = 64, pad_id: int = 0) -> list[np.ndarray]:
        return average_scores([model_scores(m, family, features, batch_size, pad_id) for m in self.models],
                              self.weights)


def load_member(directory: str):
    config = AlbertConfig.load(directory)
    return family_for_config(config).head.from_pretrained(directory)


def member_scores(directory: str, split: Split, batch_size: int) -> list[np.ndarray]:
    """One member's family scores on the split (the model is loaded, used and let go); a member whose outputs
    are NaN or infinite is refused by name, not scored (as chance) nor averaged in."""
    scores = model_scores(load_member(directory), split.family, split.features, batch_size, split.pad_id)
    check_finite_scores(scores, directory)
    return scores


def greedy_select(candidates: Mapping[str, Sequence[np.ndarray]],
                  metric: Callable[[list[np.ndarray]], float]) -> tuple[list[str], list[dict[str, Any]]]:
    """Members chosen on dev: the best single candidate, then, while the metric of the average improves, the
    candidate that improves it most (ties: the earlier candidate). Returns the members and the steps taken."""
    single = {name: metric(list(scores)) for name, scores in candidates.items()}
    chosen = [max(single, key=single.get)]
    best = single[chosen[0]]
    history = [{"added": chosen[0], "size": 1, "dev": best}]
    while len(chosen) < len(candidates):
        trials = {name: metric(average_scores([candidates[n] for n in chosen + [name]]))
                  for name in candidates if name not in chosen}
        name = max(trials, key=trials.get)
        if not trials[name] > best:
            break
        chosen.append(name)
        best = trials[name]
        history.append({"added": name, "size": len(chosen), "dev": best})
    return chosen, history


def average_checkpoints(run_dir: str | os.PathLike, k: int, out: str | os.PathLike) -> Path:
    """A model directory whose weights are the mean of the last `k` checkpoints of a run (config and tokenizer
    from the newest). Integer buffers are taken from the newest checkpoint."""
    found = list_checkpoints(run_dir)
    if k < 1 or len(found) < k:
        raise CheckpointError(f"{run_dir}: {len(found)} complete checkpoints, cannot average the last {k} (fine-tune "
                              "with --save-every N and --keep-last >= K)")
    states = [read_state_dict(str(path))[0] for _, path in found[-k:]]
    if any(set(s) != set(states[-1]) for s in states):
        raise CheckpointError(f"{run_dir}: the last {k} checkpoints hold different weights")
    averaged = {name: (torch.stack([s[name].double() for s in states]).mean(0).to(t.dtype)
                       if t.is_floating_point() else t) for name, t in states[-1].items()}
    newest = str(found[-1][1])
    model = load_member(newest)
    missing, unexpected = model.load_state_dict(averaged, strict=False)
    if unexpected:
        raise CheckpointError(f"{newest}: weights the model does not have, e.g. {unexpected[0]}")

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        Tokenizer.from_pretrained(newest).save_pretrained(str(tmp))
        write_json(tmp / "averaged.json", {"run": str(run_dir), "checkpoints": [str(p) for _, p in found[-k:]]})

    return write_dir_atomically(out, fill)


def grid_members(grid_dir: str, top: int) -> list[str]:
    """The best/ directories of a grid's `top` runs by dev score, diverged runs left out (any configuration)."""
    grid = read_grid(grid_dir)
    runs = sorted((r for r in grid["runs"] if not r["diverged"] and r["dev"] is not None), key=lambda r: -r["dev"])
    if not runs:
        raise ConfigError(f"{grid_dir}: every run diverged; nothing to ensemble")
    return [os.path.join(r["dir"], "best") for r in runs[:top]]


def build_ensemble(cfg: FinetuneConfig, members: Sequence[str], *, select: bool = True, split: str | None = "test",
                   out: str | os.PathLike | None = None, echo=print) -> dict[str, Any]:
    """Score the candidates on dev, select (or take all), score the ensemble on dev (calibrating it there), then
    once on `split` with that calibration, beside each selected member. Writes ensemble.json, calibration.json
    and the split's predictions into `out` when given; returns the report."""
    members = list(dict.fromkeys(recorded_dir(str(m)) for m in members))
    dev = read_task_split(cfg, members, cfg.eval_split)
    primary = dev.family.primary_metric(dev.task)
    candidates, single_dev, calibrated = {}, {}, {}
    for m in members:
        candidates[m] = member_scores(m, dev, cfg.eval_batch_size)
        on_dev = dev.score(candidates[m])  # calibrated on dev, as fine-tuning did
        single_dev[m], calibrated[m] = on_dev.metrics, on_dev.calibration  # the latter for its test score
        if not single_dev[m]:
            raise ConfigError(f"the {cfg.eval_split} split of {dev.task.name} has no labels to select on")
        echo(f"{cfg.eval_split} {primary} {single_dev[m][primary]:.4f}  {m}")

    def metric(scores: list[np.ndarray]) -> float:
        return dev.score(scores).metrics[primary]

    chosen, history = greedy_select(candidates, metric) if select else (members, [])
    weights = [1 / len(chosen)] * len(chosen)
    scored = dev.score(average_scores([candidates[m] for m in chosen], weights))
    report: dict[str, Any] = {
        "task": dev.task.name, "kind": dev.task.kind, "primary_metric": primary, "selection": "greedy on "
        f"{cfg.eval_split}" if select else "all candidates", "steps": history,
        "members": [{"dir": m, "weight": w, cfg.eval_split: single_dev[m][primary]} for m, w in zip(chosen, weights)],
        "candidates": [{"dir": m, cfg.eval_split: single_dev[m][primary]} for m in members],
        "calibration": scored.calibration, cfg.eval_split: _numbers(scored.metrics)}
    best_single = max(members, key=lambda m: single_dev[m][primary])  # chosen on dev, as a user would
    report["single"] = {"best_on_dev": best_single, cfg.eval_split: {
        "best": single_dev[best_single][primary],
        "mean_of_candidates": float(np.mean([single_dev[m][primary] for m in members]))}}
    echo(f"ensemble of {len(chosen)}: {cfg.eval_split} {primary} {scored.metrics[primary]:.4f}")
    predictions = None
    if split and split not in dev.task.files:
        echo(f"{dev.task.name} has no {split} split: nothing scored after selection")
    elif split:
        test = read_task_split(cfg, members, split)
        member_test = {m: member_scores(m, test, cfg.eval_batch_size) for m in dict.fromkeys(chosen + [best_single])}
        ens_test = test.score(average_scores([member_test[m] for m in chosen], weights), scored.calibration)
        predictions = (test, ens_test.predictions)
        if ens_test.metrics:
            single_test = {m: test.score(s, calibrated[m]).metrics[primary] for m, s in member_test.items()}
            report[split] = _numbers(ens_test.metrics)
            for row in report["members"]:
                row[split] = single_test[row["dir"]]
            report["single"][split] = {"best_on_dev": single_test[best_single],
                                       "mean_of_members": float(np.mean([single_test[m] for m in chosen]))}
            echo(f"ensemble {split} {primary} {ens_test.metrics[primary]:.4f}; best single (on dev) "
                 f"{single_test[best_single]:.4f}")
    if out is not None:
        write_report(out, report, predictions)
    return report


def recorded_dir(member: str) -> str:
    """How ensemble.json names a member: a local directory by its absolute path, since the file is read from
    other working directories (litebert serve, pipeline(model=...)) than the one it was built in; a Hub id as is."""
    return os.path.abspath(member) if os.path.exists(member) else member


def _numbers(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}


def write_report(out: str | os.PathLike, report: dict[str, Any], predictions: tuple[Split, list] | None) -> None:
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, ENSEMBLE_FILE), report)
    if report["calibration"]:
        write_json(os.path.join(out, "calibration.json"), report["calibration"])
    if predictions is None:
        return
    split, preds = predictions
    if split.task.submission:
        report["predictions"] = str(T.write_glue_predictions(os.path.join(out, "glue") + os.sep, split.task,
                                                             split.examples, preds))
    else:
        report["predictions"] = os.path.join(out, f"{split.name}_predictions.jsonl")
        with atomic_open(report["predictions"]) as f:
            for ex, p in zip(split.examples, preds):
                f.write(json.dumps({"id": ex.id, "prediction": p}, ensure_ascii=False) + "\n")
    write_json(os.path.join(out, ENSEMBLE_FILE), report)


@dataclass
class EnsembleConfig:
    """Which models, how they are chosen, and where the result goes (the task and features: FinetuneConfig)."""

    models: list[str] = field(default_factory=list, metadata={
        "help": "fine-tuned model directories (a run's best/), or run directories with --average-last"})
    from_grid: str = field(default="", metadata={
        "help": "a grid directory (litebert finetune --seeds ...): its best runs on dev are the candidates"})
    top: int = field(default=8, metadata={"range": "[1, inf)",
        "help": "--from-grid: how many runs, best dev score first"})
    select: bool = field(default=True, metadata={
        "help": "choose members greedily on dev (--no-select: every candidate, equal weights)"})
    split: str = field(default="test", metadata={
        "help": "split scored once after selection, and predicted ('none': no split)"})
    average_last: int = field(default=0, metadata={"range": "[0, inf)",
        "help": "each member: the weight average of its run's last K checkpoints (0: the models as given)"})
    out: str = field(default="", metadata={"help": "directory for ensemble.json, calibration.json and predictions"})


def check_out_dir(out: str, overwrite: bool) -> None:
    """Refuse, before any work, an --out that holds files of something else (a model directory, whose
    calibration.json would be replaced): only an earlier ensemble (its ensemble.json) or an empty directory."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"--out {out} is a file: the ensemble's output is a directory")
    if overwrite or not os.path.isdir(out) or not os.listdir(out) or is_ensemble(out):
        return
    raise ConfigError(f"{out} holds files that are not an ensemble's (no {ENSEMBLE_FILE}): choose another --out, or "
                      "pass --overwrite to write into it")


# What an ensemble never reads of FinetuneConfig (the training options a fine-tuning recipe's TOML may hold), and
# the options of one way of choosing members.
ENSEMBLE_READERS = {**dict.fromkeys(("from_scratch", "max_train_examples", "dropout", "early_stopping_patience",
                                     "padding_free"), ("`litebert finetune`",)),
                    "model": ("--model (one member)",), "top": ("--from-grid",)}


def cli(argv: list[str]) -> int:
    parser = verb_parser("ensemble", __doc__, {"task and model": FinetuneConfig, "ensemble": EnsembleConfig},
                         other_tables=("train",))
    args = parser.parse_args(argv)
    cfg, ens, _ = parse_verb(parser, args)
    check_task_given(cfg, given_fields(args))
    if not ens.out:
        parser.error("--out is required: the directory for ensemble.json and predictions")
    check_out_dir(ens.out, cfg.overwrite)
    if ens.models and ens.from_grid:
        parser.error("give --models DIR... or --from-grid DIR, not both")
    refuse_flags_of_other_modes(args, "--models" if ens.models else "--from-grid" if ens.from_grid
                                else "--model (one member)", ENSEMBLE_READERS, "ensemble")
    members = ens.models or (grid_members(ens.from_grid, ens.top) if ens.from_grid else [cfg.model] if cfg.model
                             else parser.error("give --models DIR... or --from-grid DIR"))
    if len({Path(m).resolve() for m in members}) < len(members):
        raise ConfigError(f"a member is given twice: {', '.join(members)}")
    if ens.average_last:  # numbered: run dirs of one name (seed1/ft, seed2/ft) must not overwrite each other
        members = [str(average_checkpoints(m, ens.average_last,
                                           os.path.join(ens.out, "averaged", f"{i}-{Path(m).resolve().name}")))
                   for i, m in enumerate(members)]
    report = build_ensemble(cfg, members, select=ens.select,
                            split=None if ens.split.lower() in ("none", "") else ens.split, out=ens.out)
    print(json.dumps({k: report[k] for k in ("members", "single") if k in report}, indent=1))
    print(f"wrote {os.path.join(ens.out, ENSEMBLE_FILE)}")
    return 0
