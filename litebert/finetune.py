"""`litebert finetune`: fine-tuning for every task family through the one training loop, one run or a grid.

This file is wiring: the task (litebert.tasks.TASKS, or a custom table) names its reader and its family
(litebert.tasks.families), and the family does everything that differs between kinds of task (head, labels,
features, predictions, scores, baseline). Everything else (optimizer, schedule, accumulation, checkpoints,
resume, logging) is the training loop's, shared with pretraining.

Defaults follow the ALBERT fine-tuning recipes (google-research/albert's README table: AdamW, per-task learning
rate, batch size, steps and warmup); every value can be overridden. The best dev checkpoint is kept in
`<out_dir>/best`, a complete model directory (transformers loads it), beside the last one. Scoring a checkpoint
later is litebert.evaluate; grids of runs (--seeds, swept flags) are litebert.training.sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from litebert import tasks as T
from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError, DataError
from litebert.files import read_json_object, restore_replaced, write_dir_atomically, write_json
from litebert.model import encoder_of
from litebert.runconfig import load_toml, parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.tasks.families import Family, FeatureSettings, Scored, family_of
from litebert.tasks.features import collate
from litebert.tasks.fine_tuned import BEST_SCORE_NAME, CALIBRATION_FILE
from litebert.tasks.inference import model_scores
from litebert.tasks.loading import (
    RECIPES,
    TaskConfig,
    check_finite_scores,
    checked_max_length,
    evaluate_checkpoint,
    feature_settings,
    load_tokenizer,
    read_split,
    resolve_task,
)
from litebert.tasks.records import UNKNOWN_LABEL, blank_examples
from litebert.training import sweep
from litebert.training.checkpoint import list_checkpoints
from litebert.training.data import ShuffledData
from litebert.training.distributed import is_main_process
from litebert.training.loop import TrainResult, train
from litebert.training.state import EarlyStopping
from litebert.training.train_config import CONFIG_NAME, TrainConfig
from litebert.weights import resolve_model_dir

log = logging.getLogger("litebert")



@dataclass
class FinetuneConfig(TaskConfig):
    """The task and the starting model, and how fine-tuning uses them. Training knobs are TrainConfig's
    (defaults from the task's recipe, litebert.tasks.loading.RECIPES)."""

    eval_split: str = field(default="dev", metadata={"help": "split scored during training and kept best on"})
    from_scratch: bool = field(default=False, metadata={
        "help": "random initialisation with --model's architecture: the baseline pretraining must beat"})
    max_train_examples: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "use only the first N training examples"})
    dropout: float | None = field(default=None, metadata={"range": "[0, 1)",
        "help": "hidden, attention and classifier dropout while fine-tuning (default: the model's, and 0.1 before "
                "the classifier as in transformers; ALBERT v2 pretrains without dropout, and a small model fine-tuned "
                "on a few thousand examples may want 0.1; 0 turns all three off)"})
    early_stopping_patience: int = field(default=0, metadata={"range": "[0, inf)",
        "help": "stop after N evaluations (--eval-every) without a better dev score; best/ keeps the best "
                "(0: train all --max-steps)"})
    padding_free: bool = field(default=True, metadata={
        "help": "run the encoder on each batch's real tokens alone, no work spent on padding (varlen flash attention "
                "on CUDA in bf16/fp16; elsewhere attention re-pads, the rest stays unpadded): the same model to "
                "rounding (QA trains padded: its loss reads every position, padding too). On because a CPU measured "
                "it faster: 1.5x the padded step's tokens/s (tiny model, novel_authorship at 128, 52%% padding). On "
                "an H100 (albert-base, bf16, max_length 512) it halves the GPU's work and memory and skips the "
                "padded step's setup for each new batch length (0.75 s vs 11.7 s over 20 batches); a step at a "
                "length seen before, launch-bound at these sizes, is 0.86x as fast at batch 32 and 1.25x at batch "
                "128 (bench/finetune_padding.py, docs/gpu.md). --compile turns it off (padded batches keep the "
                "compiled blocks' shapes); with --cuda-graphs each batch is padded to --max-length and its real "
                "tokens rounded up to a multiple of it, a few shapes that are captured once each"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.early_stopping_patience < 0:
            raise ConfigError("invalid FinetuneConfig: early_stopping_patience must be >= 0, got "
                              f"{self.early_stopping_patience}")


def load_model(cfg: FinetuneConfig, family: Family, labels: list[str] | None, model_dir: str):
    """The family's head on `model_dir` (cfg.model resolved to a local directory), or its random init."""
    overrides = family.config_overrides(labels)
    if cfg.dropout is not None:
        overrides.update(hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                         classifier_dropout_prob=cfg.dropout)
    if cfg.from_scratch:
        return family.head(AlbertConfig.load(model_dir).replace(**overrides))
    return family.head.from_pretrained(model_dir, **overrides)


def check_out_dir(cfg: FinetuneConfig, train_cfg: TrainConfig) -> None:
    """A fresh run (no --resume) into a directory holding an earlier run's best/ or summary.json would replace
    them at its first evaluation: refused unless --overwrite. (Checkpoints are the loop's to refuse.) A --resume
    into a directory with a best/ and no checkpoint would start afresh and adopt that best/: refused unless the
    run that made it recorded the same settings. A --resume from checkpoints is refused when the settings that
    decide the result differ from theirs (sweep.refuse_changed_resume; --max-steps may be raised)."""
    out = train_cfg.out_dir
    earlier = [name for name in ("best", "summary.json") if os.path.exists(os.path.join(out, name))]
    if earlier and not train_cfg.resume and not cfg.overwrite:
        raise ConfigError(f"{out} holds an earlier run's {' and '.join(earlier)}: pass --resume to continue it, "
                          "--overwrite to replace it, or choose another --out-dir")
    if earlier and cfg.overwrite and not train_cfg.resume:
        if steps := list_checkpoints(out):  # refused before anything is removed: the loop would refuse them next
            raise ConfigError(f"{out} also holds the earlier run's checkpoints ({steps[-1][1].name} ...), which "
                              "--overwrite does not replace: pass --resume to continue that run, or choose another "
                              "--out-dir")
        if is_main_process():
            _remove_earlier_run(out)
    sweep.refuse_changed_resume(cfg, train_cfg, "finetune")
    if train_cfg.resume and "best" in earlier and not list_checkpoints(out) and not cfg.overwrite:
        # Nothing to resume: a new run would start here and take the old best/ (and its score) as its own.
        if not os.path.isfile(os.path.join(out, CONFIG_NAME)):
            raise ConfigError(f"{out} holds a best/ but no checkpoint or train_config.toml to resume: it is not "
                              "a run this --resume can continue; use --overwrite to replace it, or another --out-dir")
        sweep.refuse_other_settings(out, cfg, train_cfg, "a best/")


def _remove_earlier_run(out: str) -> None:
    """--overwrite's replacement, done before the new run starts rather than at its first evaluation: left in
    place until then, the earlier best/ (and its score) would pass as the new run's to a --resume of it killed
    before that evaluation. The score goes first (one unlink), so a kill midway leaves nothing to inherit."""
    best = os.path.join(out, "best")
    for path in (os.path.join(best, BEST_SCORE_NAME), os.path.join(out, "summary.json")):
        if os.path.isfile(path):
            os.remove(path)
    shutil.rmtree(best, ignore_errors=True)


def read_summary(out_dir: str) -> dict[str, Any]:
    """The summary.json of an earlier run in out_dir, or {} (none, or unreadable: a resume then rebuilds it)."""
    try:
        return read_json_object(os.path.join(out_dir, "summary.json"), CheckpointError)
    except (OSError, CheckpointError):
        return {}


def previous_best(best_dir: str, primary: str, resume: bool) -> dict[str, Any]:
    """The score of the best/ a resumed run inherits (from the file written with it), so that the first
    evaluation after --resume replaces it only with a better model. A fresh run starts from nothing."""
    path = os.path.join(best_dir, BEST_SCORE_NAME)
    if resume and os.path.isfile(path):
        saved = read_json_object(path, CheckpointError)
        if saved.get("primary_metric") == primary:
            return {"metric": saved["metrics"][primary], "metrics": saved["metrics"]}
    return {"metric": -float("inf"), "metrics": {}}


@dataclass
class Prepared:
    """Everything a fine-tuning run reads before its first step."""

    task: T.Task
    family: Family
    model_dir: str  # --model as a local directory (a Hub id downloaded)
    tokenizer: Any
    settings: FeatureSettings
    labels: list[str] | None
    train_examples: T.Examples
    eval_examples: T.Examples
    train_features: list
    eval_features: list


def prepare(cfg: FinetuneConfig) -> Prepared:
    """Read and featurize the task, refusing what cannot train (no examples, an empty eval split) before the
    model is loaded."""
    task = resolve_task(cfg)
    family = family_of(task)
    model_dir = resolve_model_dir(cfg.model)  # a Hub id as its local download: checkpoints copy its tokenizer
    tok = load_tokenizer(cfg, model_dir, AlbertConfig.load(model_dir))
    settings = feature_settings(cfg, task, checked_max_length(cfg, task, model_dir))
    train_examples = read_split(task, cfg, "train", limit=cfg.max_train_examples)
    if not train_examples:
        raise DataError(f"{cfg.data_dir}: no training examples for task {task.name}")
    if train_examples.skip_counts.get(UNKNOWN_LABEL):  # the task fixes its labels: a typo, not a row to drop
        raise DataError(f"{train_examples.first_skip[UNKNOWN_LABEL]} (task {task.name} has a fixed label set; a "
                        "training label outside it is a mistake to fix, not a row to leave out)")
    labels = family.labels(task, train_examples)
    family.check_learnable(task, train_examples, labels, os.path.join(cfg.data_dir, task.files["train"]))
    eval_examples = read_split(task, cfg, cfg.eval_split, labels, cfg.max_eval_examples)
    if not eval_examples:
        raise DataError(f"{cfg.data_dir}: no usable {cfg.eval_split} examples for task {task.name} "
                        f"({len(eval_examples.skipped)} skipped; first: {(eval_examples.skipped or ['-'])[0]})")
    if unlabelled := sum(ex.gold is None for ex in eval_examples):  # nothing to select best/ on, or to stop at
        raise DataError(f"{cfg.data_dir}: {unlabelled} of {len(eval_examples)} {cfg.eval_split} examples of task "
                        f"{task.name} have no label: --eval-split needs a labelled split (dev)")
    return Prepared(task, family, model_dir, tok, settings, labels, train_examples, eval_examples,
                    family.featurize(train_examples, tok, labels, settings),
                    family.featurize(eval_examples, tok, labels, settings))


def examples_fingerprint(train_examples: Sequence, eval_examples: Sequence) -> dict[str, Any]:
    """What a resume must find unchanged: the training examples (their number and order decide every batch of
    the shuffle) and those it evaluates on. An edited file resumed silently made a run that is neither's."""
    def digest(examples: Sequence) -> str:
        h = hashlib.sha256()
        for example in examples:
            h.update(repr(example).encode("utf-8"))
        return h.hexdigest()
    return {"train": len(train_examples), "train_sha256": digest(train_examples), "eval": len(eval_examples),
            "eval_sha256": digest(eval_examples)}


def _write_best(directory: str, model, tokenizer, scored: Scored, primary: str, eval_split: str,
                card: dict[str, Any], settings: FeatureSettings) -> None:
    """Fill `directory` as a best/ checkpoint: the model and tokenizer (its model card with the scores), the
    score it won with (which a resumed run must beat) and the feature settings it won with, and what the family
    calibrated on `eval_split`, so evaluating it later applies the same."""
    metrics = {f"{eval_split} {k}": v for k, v in scored.metrics.items() if isinstance(v, (int, float))}
    model.save_pretrained(directory, card={**card, "metrics": metrics})
    tokenizer.save_pretrained(str(directory))
    write_json(os.path.join(directory, BEST_SCORE_NAME), {"primary_metric": primary, "metrics": scored.metrics,
                                                          "features": dataclasses.asdict(settings)})
    if scored.calibration:
        write_json(os.path.join(directory, CALIBRATION_FILE), {"split": eval_split, **scored.calibration})


def _run_summary(cfg: FinetuneConfig, train_cfg: TrainConfig, run: Prepared, result: TrainResult, primary: str,
                 final: dict, best_metrics: dict, best_dir: str | None) -> dict[str, Any]:
    """summary.json's content: what was trained on and scored (with the rows skipped, by reason), the final and
    best metrics beside the family's trivial baseline, and whether early stopping ended the run."""
    split, ev = cfg.eval_split, run.eval_examples
    return {"task": run.task.name, "kind": run.task.kind, "from_scratch": cfg.from_scratch, "model": cfg.model,
            "examples": {"train": len(run.train_examples), split: len(ev),
                         "skipped_train": len(run.train_examples.skipped),
                         f"skipped_{split}": len(ev.skipped),
                         # read and used, but with an empty or blank text: the model sees [CLS] [SEP] there
                         "blank_text": {"train": blank_examples(run.train_examples), split: blank_examples(ev)},
                         "skipped_by_reason": {"train": run.train_examples.skip_counts, split: ev.skip_counts}},
            # the metrics are over these rows only: say so beside them when some were left out
            "scored_on": ev.scored_on(split),
            "primary_metric": primary, "final": final, "best": best_metrics,
            "baseline": run.family.baseline(run.task, run.train_examples, run.eval_examples), "steps": result.step,
            "early_stopped": result.step < train_cfg.max_steps,
            "best_dir": best_dir, "out_dir": train_cfg.out_dir}


def finetune(cfg: FinetuneConfig, train_cfg: TrainConfig) -> dict[str, Any]:
    """Fine-tune, keep the best dev checkpoint (with what the family calibrated on dev), and return (and write)
    a summary."""
    check_out_dir(cfg, train_cfg)
    run = prepare(cfg)
    torch.manual_seed(train_cfg.seed)
    model = load_model(cfg, run.family, run.labels, run.model_dir)
    padding_free = encoder_of(model).padding_free = cfg.padding_free and not train_cfg.compile
    if cfg.padding_free and train_cfg.compile:  # a padding-free batch's token count changes every batch
        log.info("--compile: padded batches, so that the compiled transformer blocks keep their shapes")
    primary = run.family.primary_metric(run.task)
    best_dir = os.path.join(train_cfg.out_dir, "best")
    if is_main_process():  # a kill between the two renames that replace best/ left it aside: put it back first
        restore_replaced(best_dir)
    best = previous_best(best_dir, primary, train_cfg.resume)
    earlier = read_summary(train_cfg.out_dir) if train_cfg.resume else {}
    card = {"base_model": None if cfg.from_scratch else cfg.model, "summary": (
        f"Fine-tuned on {run.task.name} ({len(run.train_examples)} training examples) with litebert: "
        f"{train_cfg.optimizer} at lr {train_cfg.lr}, batch {train_cfg.batch_size}, up to {train_cfg.max_steps} "
        f"steps, seed {train_cfg.seed}" + (", from random initialisation" if cfg.from_scratch else "")
        + f"; this is the checkpoint with the best {cfg.eval_split} {primary}.")}

    def evaluate(m) -> dict[str, float]:
        scores = model_scores(m, run.family, run.eval_features, cfg.eval_batch_size, run.tokenizer.pad_id)
        check_finite_scores(scores, f"{train_cfg.out_dir}: evaluation on {cfg.eval_split}")
        scored = run.family.score(run.task, run.eval_examples, run.eval_features, scores, run.labels, run.settings)
        value = scored.metrics.get(primary, -float("inf"))
        improved = value > best["metric"]
        if improved:  # replaced whole or not at all: a kill mid-write keeps the previous best
            write_dir_atomically(best_dir, lambda tmp: _write_best(tmp, m, run.tokenizer, scored, primary,
                                                                   cfg.eval_split, card, run.settings))
            best.update(metric=value, metrics=scored.metrics)
        return {k: v for k, v in scored.metrics.items() if isinstance(v, (int, float))}

    pad_id, features = run.tokenizer.pad_id, run.train_features
    # graph shapes; its packed positions alone turn the padding-free encoder on, so never with --compile
    static_length = run.settings.max_length if padding_free and train_cfg.cuda_graphs else 0
    data = ShuffledData(len(features), lambda idx, _position: collate([features[i] for i in idx], pad_id,
                                                                       static_length))
    stopping = EarlyStopping(primary, cfg.early_stopping_patience) if cfg.early_stopping_patience else None
    result = train(model, data, train_cfg, evaluate, tokenizer=cfg.tokenizer or run.model_dir,
                   configs={"finetune": dataclasses.asdict(cfg)}, early_stopping=stopping,
                   identity={"data": examples_fingerprint(run.train_examples, run.eval_examples)})
    # A resumed run that had finished trains no step: its final scores are the earlier summary's.
    final = dict(result.eval) or (earlier.get("final", {}) if earlier.get("steps") == result.step else {})
    # No best/ when every evaluation scored NaN (a constant prediction's correlation): the summary names none.
    if is_main_process() and not os.path.isdir(best_dir):
        log.warning("%s: no evaluation gave a finite %s %s, so there is no best/ checkpoint", train_cfg.out_dir,
                    cfg.eval_split, primary)
    summary = _run_summary(cfg, train_cfg, run, result, primary, final, best["metrics"],
                           best_dir if os.path.isdir(best_dir) else None)
    if is_main_process():
        write_json(os.path.join(train_cfg.out_dir, "summary.json"), summary)
    return summary


def recipe_defaults(task_name: str, max_steps: int | None = None) -> dict[str, Any]:
    """The task's recipe as TrainConfig values: beneath --config's [train] table and the flags. A `max_steps`
    given by the user (and no warmup) keeps the recipe's share of warmup steps, not its count, so that a shorter
    run still warms up and then decays (the recipe's 60 warmup steps in a run of 20 would end before its peak)."""
    recipe = RECIPES.get(task_name)
    if recipe is None:
        return {}
    warmup = recipe.warmup_steps
    if max_steps is not None and max_steps > 0:
        warmup = round(recipe.warmup_steps * min(max_steps, recipe.max_steps) / recipe.max_steps)
    return {"optimizer": "adamw", "lr": recipe.lr, "batch_size": recipe.batch_size, "max_steps": recipe.max_steps,
            "warmup_steps": warmup, "weight_decay": 0.01}


def recipe_help() -> str:
    """The epilog's recipe table: what a task's run trains with unless --config or a flag says otherwise (the
    "(default: ...)" shown beside the training options is the loop's own, used for tasks without a recipe)."""
    rows = [f"  {name:<22}adamw  {r.lr:<7g}{r.batch_size:>6}{r.max_steps:>8}{r.warmup_steps:>8}"
            for name, r in RECIPES.items()]
    return ("training defaults come from the task's recipe (optimizer adamw, weight decay 0.01); the defaults\n"
            "printed beside the training options apply only to a task without one:\n"
            f"  {'task':<22}{'opt':<7}{'lr':<7}{'batch':>6}{'steps':>8}{'warmup':>8}\n" + "\n".join(rows))


GRID_HELP = """grids of runs (litebert.training.sweep):
  --seeds 1 2 3            one run per seed, in --out-dir/<values>/ (resumable; grid.json, grid.md)
  --lr 1e-5 2e-5 ...       any numeric option given several values is swept: seeds x values
  --score-test             score the selected configuration's runs on test, once each"""


def command_line() -> argparse.ArgumentParser:
    return verb_parser("finetune", __doc__, {"task and model": FinetuneConfig,
                                             "training (defaults: the task's ALBERT recipe)": TrainConfig},
                       epilog=recipe_help() + "\n\n" + GRID_HELP)


def parse_args(argv: list[str]) -> tuple[FinetuneConfig, TrainConfig]:
    """A single run's configs from its flags: defaults < the task's recipe < --config's TOML < flags."""
    parser = command_line()
    args = parser.parse_args(argv)

    def recipe(configs: tuple, given: dict) -> dict[str, Any]:  # by a flag or in --config's [train] alike
        warmup = given.get("warmup_steps", recorded_warmup(given) if given.get("resume") else None)
        scaled = recipe_defaults(configs[0].task, given.get("max_steps") if warmup is None else None)
        return scaled if warmup is None else {**scaled, "warmup_steps": warmup}

    return parse_verb(parser, args, defaults={TrainConfig: recipe})


def recorded_warmup(given: dict) -> int | None:
    """A resumed run's own warmup (its train_config.toml), where the user sets none: extending --max-steps must
    not rescale the recipe's warmup into a setting the resume then refuses as changed."""
    path = os.path.join(given.get("out_dir") or TrainConfig.out_dir, CONFIG_NAME)
    return load_toml(path).get("train", {}).get("warmup_steps") if os.path.isfile(path) else None


def warmup_given(argv: list[str]) -> bool:
    """A warmup the user set, by --warmup-steps or in --config's [train]: what a grid over --max-steps needs."""
    if any(a.startswith("--warmup-steps") for a in argv):
        return True
    config = getattr(command_line().parse_known_args(argv)[0], "config", None)
    return bool(config) and "warmup_steps" in load_toml(config).get("train", {})


# What one run reads and a grid does not: a grid resumes each of its runs itself, and --seeds replaces --seed.
GRID_READERS = {"resume": ("one run",), "seed": ("one run", "a grid without --seeds")}


def cli(argv: list[str]) -> int:
    """`litebert finetune`: one run, or a grid when the flags ask for one (--seeds, a swept flag)."""
    grid = sweep.split_argv(argv, sweep.sweepable_fields(FinetuneConfig, TrainConfig))
    if grid is None or any(a in ("-h", "--help") for a in argv):
        summary = finetune(*parse_args(argv))
        print(json.dumps({"task": summary["task"], "examples": summary["examples"], "best": summary["best"],
                          "baseline": summary["baseline"], "best_dir": summary["best_dir"]}, indent=1))
        return 0
    refuse_flags_of_other_modes(command_line().parse_args(grid.base), "a grid with --seeds" if grid.seeds
                                else "a grid without --seeds", GRID_READERS, "finetune")
    if "max_steps" in grid.axes and not warmup_given(grid.base):
        raise ConfigError("sweeping --max-steps needs --warmup-steps: the recipe's warmup is scaled to one run's "
                          "steps, and each run of the grid would get the first's")
    cfg, train_cfg = parse_args(grid.base)

    def typed(name: str, value: str) -> Any:  # parsed as the run's own flag would be
        c, t = parse_args(grid.base + [f"--{name.replace('_', '-')}", value])
        return getattr(c if hasattr(c, name) else t, name)

    axes = {name: [typed(name, v) for v in values] for name, values in grid.axes.items()}
    seeds = [typed("seed", s) for s in grid.seeds]
    report = sweep.run_grid(cfg, train_cfg, axes, seeds, train=finetune, score=evaluate_checkpoint,
                            test=grid.score_test)
    print("\n" + sweep.table(report), end="")
    print(f"wrote {os.path.join(train_cfg.out_dir, sweep.GRID_NAME)} and {sweep.GRID_TABLE}")
    return 0
