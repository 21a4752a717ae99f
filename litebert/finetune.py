"""Fine-tuning, evaluation and prediction for every task family, through the one training loop.

This file is wiring: the task (litebert.tasks.TASKS, or a custom table) names its reader and its family
(litebert.tasks.families), and the family does everything that differs between kinds of task (head, labels,
features, predictions, scores, baseline). Everything else (optimizer, schedule, accumulation, checkpoints,
resume, logging) is the training loop's, shared with pretraining.

Defaults follow the ALBERT fine-tuning recipes (google-research/albert's README table: AdamW, per-task learning
rate, batch size, steps and warmup); every value can be overridden. The best dev checkpoint is kept in
`<out_dir>/best`, a complete model directory (transformers loads it), beside the last one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from litebert import tasks as T
from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError, DataError, NonFiniteError
from litebert.files import (atomic_open, check_replaceable, read_json_object, restore_replaced, write_dir_atomically,
                            write_json)
from litebert.runconfig import add_config_args, load_toml, resolve_config
from litebert.tasks.families import (CALIBRATION_FILE, FeatureSettings, Family, Scored, family_for_config, family_of,
                                     model_scores, read_calibration)
from litebert.tasks.ensembles import check_members
from litebert.tasks.features import collate
from litebert.training.distributed import resolve_device
from litebert.training.state import EarlyStopping
from litebert.training.loop import (TrainConfig, TrainResult, is_main_process, shuffled_batches, train,
                                    world_size)

BEST_SCORE_NAME = "best_score.json"  # in best/, written with it: what it scored, so --resume keeps it unless beaten


@dataclass(frozen=True)
class Recipe:
    """A task's fine-tuning recipe: TrainConfig values, and the token budget of its inputs."""

    lr: float
    batch_size: int
    max_steps: int
    warmup_steps: int
    max_length: int


# The paper-scale recipes of the standard benchmarks are the ALBERT README's fine-tuning table; the bundled
# tasks get CPU-sized recipes for small models.
RECIPES: dict[str, Recipe] = {
    "CoLA": Recipe(1e-5, 16, 5336, 320, 512), "STS-B": Recipe(2e-5, 16, 3598, 214, 512),
    "SST-2": Recipe(1e-5, 32, 20935, 1256, 512), "MNLI-m": Recipe(3e-5, 128, 10000, 1000, 512),
    "MNLI-mm": Recipe(3e-5, 128, 10000, 1000, 512), "QNLI": Recipe(1e-5, 32, 33112, 1986, 512),
    "QQP": Recipe(5e-5, 128, 14000, 1000, 512), "RTE": Recipe(3e-5, 32, 800, 200, 512),
    "MRPC": Recipe(2e-5, 32, 800, 200, 512), "WNLI": Recipe(2e-5, 16, 2000, 250, 512),
    "squad-v1.1": Recipe(5e-5, 48, 3649, 365, 384), "squad-v2.0": Recipe(3e-5, 48, 8144, 814, 512),
    "race": Recipe(2e-5, 32, 12000, 1000, 512),
    "novel_authorship": Recipe(5e-4, 32, 600, 60, 128), "bible_paraphrase": Recipe(5e-4, 32, 600, 60, 128),
    "wordnet_qa": Recipe(5e-4, 32, 800, 80, 192), "wordnet_defmc": Recipe(5e-4, 32, 800, 80, 64),
    "novel_characters": Recipe(5e-4, 32, 600, 60, 128),
}
DEFAULT_MAX_LENGTH = 512


@dataclass
class FinetuneConfig:
    """The task and the starting model. Training knobs are TrainConfig's (defaults from RECIPES)."""

    model: str = field(default="", metadata={"help": "pretrained model directory (litebert or HF), or a Hub id"})
    task: str = field(default="novel_authorship", metadata={
        "help": f"a registered task ({', '.join(T.TASKS)}) or 'table' (any CSV/TSV/JSONL, see --text-columns)"})
    data_dir: str = field(default="", metadata={"help": "the task's directory (train/dev/test files as distributed)"})
    tokenizer: str | None = field(default=None, metadata={"help": "tokenizer directory (default: --model's)"})
    max_length: int | None = field(default=None, metadata={"help": "max tokens per input (default: the recipe's)"})
    doc_stride: int = field(default=128, metadata={"help": "QA: tokens between the starts of context windows"})
    max_query_length: int = field(default=64, metadata={"help": "QA: question tokens kept"})
    max_answer_length: int | None = field(default=None, metadata={
        "help": "QA: longest answer span, in tokens (default: the task's; 30 as in SQuAD, 8 for wordnet_qa)"})
    text_columns: list[str] = field(default_factory=list, metadata={"help": "table task: one or two text columns"})
    label_column: str = field(default="label", metadata={"help": "table task: the label column"})
    regression: bool = field(default=False, metadata={"help": "table task: float labels (MSE), Pearson/Spearman"})
    multi_label: bool = field(default=False, metadata={
        "help": "table task: any number of labels per row (a JSON list, or 'a|b' in CSV/TSV); sigmoid/BCE head, "
                "micro/macro-F1 and exact match, a threshold per label tuned on dev"})
    train_file: str = field(default="train.jsonl", metadata={"help": "table task: training file in data_dir"})
    dev_file: str = field(default="dev.jsonl", metadata={"help": "table task: dev file in data_dir"})
    test_file: str = field(default="test.jsonl", metadata={
        "help": "table task: test file in data_dir, for evaluate/predict (may lack the label column)"})
    eval_split: str = field(default="dev", metadata={"help": "split scored during training and kept best on"})
    from_scratch: bool = field(default=False, metadata={
        "help": "random initialisation with --model's architecture: the baseline pretraining must beat"})
    max_train_examples: int | None = field(default=None, metadata={"help": "use only the first N training examples"})
    max_eval_examples: int | None = field(default=None, metadata={"help": "score only the first N eval examples"})
    eval_batch_size: int = field(default=64, metadata={"help": "examples per evaluation forward"})
    dropout: float | None = field(default=None, metadata={
        "help": "hidden, attention and classifier dropout while fine-tuning (default: the model's, and 0.1 before "
                "the classifier as in transformers; ALBERT v2 pretrains without dropout, and a small model fine-tuned "
                "on a few thousand examples may want 0.1; 0 turns all three off)"})
    early_stopping_patience: int = field(default=0, metadata={
        "help": "stop after N evaluations (--eval-every) without a better dev score; best/ keeps the best "
                "(0: train all --max-steps)"})
    overwrite: bool = field(default=False, metadata={
        "help": "finetune: start afresh in an --out-dir that holds an earlier run's best/ or summary.json, "
                "replacing them (without it such a directory is refused unless --resume); evaluate, predict: "
                "replace an --out file that is not an earlier result of the verb; ensemble: write into an --out "
                "directory that is not an ensemble's"})

    def __post_init__(self) -> None:
        # Refused here, before training: otherwise the first evaluation fails with range()'s own message.
        if self.eval_batch_size < 1:
            raise ConfigError(f"invalid FinetuneConfig: eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if self.early_stopping_patience < 0:
            raise ConfigError("invalid FinetuneConfig: early_stopping_patience must be >= 0, got "
                              f"{self.early_stopping_patience}")


def resolve_task(cfg: FinetuneConfig) -> T.Task:
    if not cfg.model:
        raise ConfigError("--model is required: the directory of a pretrained (or, to evaluate, fine-tuned) model")
    if not cfg.data_dir:
        raise ConfigError("--data-dir is required: the task's directory with its train/dev/test files")
    if cfg.task in T.TASKS:
        return T.TASKS[cfg.task]
    if cfg.task != "table":
        raise ConfigError(f"unknown task {cfg.task!r}; choose from {', '.join(T.TASKS)} or 'table'")
    if not 1 <= len(cfg.text_columns) <= 2:
        raise ConfigError("a table task needs --text-columns with one or two column names")
    if cfg.regression and cfg.multi_label:
        raise ConfigError("a table task is --regression or --multi-label, not both")
    kind, metrics = ("regression", ("pearson", "spearman")) if cfg.regression else \
        ("multi_label", ("micro_f1", "macro_f1", "exact_match")) if cfg.multi_label else \
        ("classification", ("accuracy", "macro_f1"))
    files = {"train": cfg.train_file, "dev": cfg.dev_file, "test": cfg.test_file}
    return T.Task("table", kind, "table", files, tuple(cfg.text_columns), cfg.label_column, None, metrics)


def feature_settings(cfg: FinetuneConfig, task: T.Task, max_length: int) -> FeatureSettings:
    return FeatureSettings(max_length, cfg.doc_stride, cfg.max_query_length,
                           cfg.max_answer_length or task.max_answer_length)


def read_split(task: T.Task, cfg: FinetuneConfig, split: str, labels: list[str] | None = None,
               limit: int | None = None) -> T.Examples:
    """A split's examples; with `labels` (the training split's), a label outside them is a counted skip."""
    examples = T.read_task(task, cfg.data_dir, split, errors="skip", labels=labels)
    return examples if limit is None else T.Examples(examples[:limit], examples.skipped, examples.skip_counts)


def load_model(cfg: FinetuneConfig, family: Family, labels: list[str] | None, model_dir: str):
    """The family's head on `model_dir` (cfg.model resolved to a local directory), or its random init."""
    overrides = family.config_overrides(labels)
    if cfg.dropout is not None:
        overrides.update(hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
                         classifier_dropout_prob=cfg.dropout)
    if cfg.from_scratch:
        return family.head(AlbertConfig.load(model_dir).replace(**overrides))
    return family.head.from_pretrained(model_dir, **overrides)


def checked_max_length(cfg: FinetuneConfig, task: T.Task, model_dir: str) -> int:
    """--max-length, else the recipe's, capped by what the model's position embeddings can hold."""
    positions = AlbertConfig.load(model_dir).max_position_embeddings
    if cfg.max_length is None:
        recipe = RECIPES.get(task.name)
        return min(recipe.max_length if recipe else DEFAULT_MAX_LENGTH, positions)
    if cfg.max_length > positions:
        raise ConfigError(f"max_length {cfg.max_length} exceeds the model's max_position_embeddings {positions}")
    return cfg.max_length


def load_tokenizer(cfg: FinetuneConfig, model_dir: str, config: AlbertConfig):
    """--tokenizer, else the model's own, refused if it has ids the model's embeddings lack (otherwise the
    first batch holding one dies with an IndexError deep inside the embedding lookup), and --tokenizer refused
    when it is not the model's: another spiece.model than the one in the model's directory, or, where the
    directory has none, another vocabulary size. Its ids would mean other words to the model: it trains and
    scores, worse, without a word."""
    from litebert.tokenizer import Tokenizer
    tok = Tokenizer.from_pretrained(cfg.tokenizer or model_dir)
    if tok.vocab_size > config.vocab_size:
        raise ConfigError(f"tokenizer {cfg.tokenizer or model_dir} has {tok.vocab_size} pieces but model "
                          f"{cfg.model} has vocab_size {config.vocab_size}: use the model's tokenizer, or extend "
                          "the model's vocabulary first (litebert extend-vocab)")
    if cfg.tokenizer:
        own = os.path.join(model_dir, "spiece.model")
        if os.path.isfile(own):
            with open(own, "rb") as f:
                same = hashlib.sha256(f.read()).hexdigest() == tok.sha256
            if not same:
                raise ConfigError(f"--tokenizer {cfg.tokenizer} is not the tokenizer of {cfg.model}: its "
                                  f"spiece.model differs from {own}; leave --tokenizer out to use the model's")
        elif tok.vocab_size != config.vocab_size:
            raise ConfigError(f"--tokenizer {cfg.tokenizer} has {tok.vocab_size} pieces but {cfg.model} was "
                              f"trained with a vocabulary of {config.vocab_size}: it is not the model's tokenizer")
    return tok


def check_finite_scores(scores, source: str) -> None:
    """NonFiniteError when a model's outputs hold NaN or infinity: every metric computed from them would be
    wrong (argmax of NaN is 0) without a word."""
    bad = sum(1 for s in scores if s is not None and not np.isfinite(s).all())
    if bad:
        raise NonFiniteError(f"{source}: the model's outputs are NaN or infinite for {bad} of {len(scores)} "
                             "inputs; its weights are damaged, or training diverged")


def check_out_dir(cfg: FinetuneConfig, train_cfg: TrainConfig) -> None:
    """A fresh run (no --resume) into a directory holding an earlier run's best/ or summary.json would replace
    them at its first evaluation: refused unless --overwrite. (Checkpoints are the loop's to refuse.)"""
    out = train_cfg.out_dir
    earlier = [name for name in ("best", "summary.json") if os.path.exists(os.path.join(out, name))]
    if earlier and not train_cfg.resume and not cfg.overwrite:
        raise ConfigError(f"{out} holds an earlier run's {' and '.join(earlier)}: pass --resume to continue it, "
                          "--overwrite to replace it, or choose another --out-dir")


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
        saved = _read_json(path)
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
    from litebert.weights import resolve_model_dir
    task = resolve_task(cfg)
    family = family_of(task)
    model_dir = resolve_model_dir(cfg.model)  # a Hub id as its local download: checkpoints copy its tokenizer
    tok = load_tokenizer(cfg, model_dir, AlbertConfig.load(model_dir))
    settings = feature_settings(cfg, task, checked_max_length(cfg, task, model_dir))
    train_examples = read_split(task, cfg, "train", limit=cfg.max_train_examples)
    if not train_examples:
        raise DataError(f"{cfg.data_dir}: no training examples for task {task.name}")
    labels = family.labels(task, train_examples)
    eval_examples = read_split(task, cfg, cfg.eval_split, labels, cfg.max_eval_examples)
    if not eval_examples:
        raise DataError(f"{cfg.data_dir}: no usable {cfg.eval_split} examples for task {task.name} "
                        f"({len(eval_examples.skipped)} skipped; first: {(eval_examples.skipped or ['-'])[0]})")
    return Prepared(task, family, model_dir, tok, settings, labels, train_examples, eval_examples,
                    family.featurize(train_examples, tok, labels, settings),
                    family.featurize(eval_examples, tok, labels, settings))


def _write_best(directory: str, model, tokenizer, scored: Scored, primary: str, eval_split: str) -> None:
    """Fill `directory` as a best/ checkpoint: the model and tokenizer, the score it won with (which a resumed
    run must beat) and what the family calibrated on `eval_split`, so evaluating it later applies the same."""
    model.save_pretrained(directory)
    tokenizer.save_pretrained(str(directory))
    write_json(os.path.join(directory, BEST_SCORE_NAME), {"primary_metric": primary, "metrics": scored.metrics})
    if scored.calibration:
        write_json(os.path.join(directory, CALIBRATION_FILE), {"split": eval_split, **scored.calibration})


def _run_summary(cfg: FinetuneConfig, train_cfg: TrainConfig, run: Prepared, result: TrainResult, primary: str,
                 final: dict, best_metrics: dict, best_dir: str) -> dict[str, Any]:
    """summary.json's content: what was trained on and scored (with the rows skipped, by reason), the final and
    best metrics beside the family's trivial baseline, and whether early stopping ended the run."""
    split, ev = cfg.eval_split, run.eval_examples
    return {"task": run.task.name, "kind": run.task.kind, "from_scratch": cfg.from_scratch, "model": cfg.model,
            "examples": {"train": len(run.train_examples), split: len(ev),
                         "skipped_train": len(run.train_examples.skipped),
                         f"skipped_{split}": len(ev.skipped),
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
    primary = run.family.primary_metric(run.task)
    best_dir = os.path.join(train_cfg.out_dir, "best")
    if is_main_process():  # a kill between the two renames that replace best/ left it aside: put it back first
        restore_replaced(best_dir)
    best = previous_best(best_dir, primary, train_cfg.resume)
    earlier = read_summary(train_cfg.out_dir) if train_cfg.resume else {}

    def evaluate(m) -> dict[str, float]:
        scores = model_scores(m, run.family, run.eval_features, cfg.eval_batch_size, run.tokenizer.pad_id)
        check_finite_scores(scores, f"{train_cfg.out_dir}: evaluation on {cfg.eval_split}")
        scored = run.family.score(run.task, run.eval_examples, run.eval_features, scores, run.labels, run.settings)
        value = scored.metrics.get(primary, -float("inf"))
        improved = value > best["metric"]
        if improved:  # replaced whole or not at all: a kill mid-write keeps the previous best
            write_dir_atomically(best_dir, lambda tmp: _write_best(tmp, m, run.tokenizer, scored, primary,
                                                                   cfg.eval_split))
            best.update(metric=value, metrics=scored.metrics)
        return {k: v for k, v in scored.metrics.items() if isinstance(v, (int, float))}

    pad_id, features = run.tokenizer.pad_id, run.train_features
    micro, _ = train_cfg.accumulation(world_size())
    batch_fn = shuffled_batches(len(features), train_cfg.batch_size, micro, train_cfg.seed,
                                lambda idx, _position: collate([features[i] for i in idx], pad_id))
    stopping = EarlyStopping(primary, cfg.early_stopping_patience) if cfg.early_stopping_patience else None
    result = train(model, batch_fn, train_cfg, evaluate, tokenizer=cfg.tokenizer or run.model_dir,
                   configs={"finetune": dataclasses.asdict(cfg)}, early_stopping=stopping)
    # A resumed run that had finished trains no step: its final scores are the earlier summary's.
    final = dict(result.eval) or (earlier.get("final", {}) if earlier.get("steps") == result.step else {})
    summary = _run_summary(cfg, train_cfg, run, result, primary, final, best["metrics"], best_dir)
    if is_main_process():
        write_json(os.path.join(train_cfg.out_dir, "summary.json"), summary)
    return summary


def _read_json(path: str) -> dict[str, Any]:
    """A JSON object a fine-tuned directory holds; CheckpointError naming the file when it is damaged."""
    return read_json_object(path, CheckpointError)


@dataclass
class Split:
    """One split of the task, featurized once as every member reads it (the members share tokenizer and labels)."""

    name: str
    task: T.Task
    family: Family
    labels: list[str] | None
    settings: Any
    pad_id: int
    examples: T.Examples
    features: list

    def score(self, scores: Sequence[np.ndarray], calibration: dict | None = None) -> Scored:
        return self.family.score(self.task, self.examples, self.features, scores, self.labels, self.settings,
                                 calibration)


def read_task_split(cfg: FinetuneConfig, members: Sequence[str], split: str) -> Split:
    """`split` of cfg's task, featurized with the first member's tokenizer, after checking every member is a
    model of this task's family with the same labels and tokenizer (else their scores would not line up)."""
    first = members[0]
    cfg = dataclasses.replace(cfg, model=first)
    task = resolve_task(cfg)
    family = family_of(task)
    tok = load_tokenizer(cfg, first, AlbertConfig.load(first))  # first: a tokenizer too large for the model
    labels = check_members(members, family, f"{task.name} ({task.kind})")
    examples = read_split(task, cfg, split, labels, cfg.max_eval_examples)
    settings = feature_settings(cfg, task, checked_max_length(cfg, task, first))
    return Split(split, task, family, labels, settings, tok.pad_id, examples,
                 family.featurize(examples, tok, labels, settings))


def evaluate_checkpoint(model_dir: str, cfg: FinetuneConfig, split: str, device: str = "cpu"
                        ) -> tuple[Scored, T.Task, T.Examples]:
    """Load a fine-tuned directory and score it on `split` (or just predict, for unlabelled splits). What the
    family calibrated on dev during fine-tuning is applied, so a test split is never tuned on."""
    from litebert.weights import resolve_model_dir
    directory = resolve_model_dir(model_dir)
    data = read_task_split(cfg, [directory], split)
    model = data.family.head.from_pretrained(directory).to(resolve_device(device))  # model_scores moves batches
    scores = model_scores(model, data.family, data.features, cfg.eval_batch_size, data.pad_id)
    check_finite_scores(scores, f"{directory} on {split}")
    return data.score(scores, read_calibration(directory)), data.task, data.examples


def _parser(prog: str, description: str, train_args: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML recipe with [finetune] and [train] sections")
    add_config_args(parser, FinetuneConfig, "task and model")
    if train_args:
        add_config_args(parser, TrainConfig, "training (defaults: the task's ALBERT recipe)")
    else:
        parser.add_argument("--device", default="auto", type=_device, help="auto (a GPU when there is one), cpu, "
                            "cuda or cuda:N (raw inputs on the onnxruntime backend: the CPU)")
    return parser


def _device(name: str) -> str:
    try:
        resolve_device(name)  # refused here, as the flag's one-line error
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def _finetune_config(args: argparse.Namespace, sections: tuple[str, ...]) -> tuple[FinetuneConfig, dict]:
    """The [finetune] table of --config under the command line's flags, and the whole TOML."""
    toml = load_toml(args.config, sections) if args.config else {}
    return resolve_config(FinetuneConfig, toml.get("finetune"), args, source=f"{args.config} [finetune]"), toml


def recipe_defaults(task_name: str, train_table: dict[str, Any]) -> dict[str, Any]:
    """The task's recipe as TrainConfig values, under whatever the TOML set (flags apply after)."""
    recipe = RECIPES.get(task_name)
    if recipe is None:
        return dict(train_table)
    return {"optimizer": "adamw", "lr": recipe.lr, "batch_size": recipe.batch_size, "max_steps": recipe.max_steps,
            "warmup_steps": recipe.warmup_steps, "weight_decay": 0.01, **train_table}


GRID_HELP = """grids of runs (litebert.sweep):
  --seeds 1 2 3            one run per seed, in --out-dir/<values>/ (resumable; grid.json, grid.md)
  --lr 1e-5 2e-5 ...       any numeric option given several values is swept: seeds x values
  --score-test             score the selected configuration's runs on test, once each"""


def parse_args(argv: list[str]) -> tuple[FinetuneConfig, TrainConfig]:
    """A single run's configs from its flags: defaults < the task's recipe < --config's TOML < flags."""
    parser = _parser("litebert finetune", __doc__, train_args=True)
    parser.epilog = GRID_HELP
    args = parser.parse_args(argv)
    cfg, toml = _finetune_config(args, ("finetune", "train"))
    train_table = recipe_defaults(cfg.task, toml.get("train", {}))
    return cfg, resolve_config(TrainConfig, train_table, args, source=f"{args.config} [train]")


def cli(argv: list[str]) -> int:
    """One run; `litebert finetune` reaches it through litebert.sweep, which runs grids (--seeds, swept flags)."""
    summary = finetune(*parse_args(argv))
    print(json.dumps({"task": summary["task"], "best": summary["best"], "baseline": summary["baseline"],
                      "best_dir": summary["best_dir"]}, indent=1))
    return 0


def cli_evaluate(argv: list[str]) -> int:
    parser = _parser("litebert evaluate", "Score a fine-tuned checkpoint (--model) on a split of its task.", False)
    parser.add_argument("--split", default="dev", help="which of the task's files to score: dev, test, ...")
    parser.add_argument("--out", help="write metrics.json here")
    args = parser.parse_args(argv)
    cfg, _ = _finetune_config(args, ("finetune", "train"))
    check_replaceable(args.out, _is_metrics, "a metrics file of litebert evaluate", cfg.overwrite)
    scored, task, examples = evaluate_checkpoint(cfg.model, cfg, args.split, args.device)
    metrics = scored.metrics
    if not metrics:  # a test file without its label column reads as unlabelled: nothing to score against
        raise DataError(f"{cfg.data_dir}: the {args.split} split of {task.name} has no labels to score "
                         "(use litebert predict)")
    if examples.skipped:  # a score over a subset says so beside it
        metrics = {**metrics, "scored_on": examples.scored_on(args.split)}
    if args.out:
        write_json(args.out, metrics, indent=1)
    print(json.dumps(metrics, indent=1))
    return 0


def cli_predict(argv: list[str]) -> int:
    parser = _parser("litebert predict", "Predict with a checkpoint (--model). Raw inputs (--text, --input FILE, "
                     "or standard input, one per line) go through the pipeline of the checkpoint's task (or "
                     "--task: fill-mask, text-classification, ...) and come out as JSON Lines {input, output}. "
                     "With --task and --data-dir, a split of a task is predicted instead: JSONL (id, prediction), "
                     "or the GLUE submission format for GLUE tasks.", False)
    parser.add_argument("--split", default="test", help="with --data-dir: which of the task's files to predict")
    parser.add_argument("--out", help="output file (a directory for GLUE submissions); raw inputs default to "
                        "standard output")
    raw = parser.add_argument_group("raw inputs (without --data-dir)")
    raw.add_argument("--text", action="append", help="one input (repeatable); a JSON object for pairs, "
                     'question answering, ...: \'{"question": "...", "context": "..."}\'')
    raw.add_argument("--input", metavar="FILE", help="inputs, one per line: text (or JSON objects), .jsonl or "
                     ".csv/.tsv with a header (default: standard input, read as it comes)")
    raw.add_argument("--backend", default="torch", choices=("torch", "onnxruntime"), help="default: torch")
    raw.add_argument("--precision", default="fp32", help="torch: fp32, bf16, int8 or auto (bf16 where measured "
                     "faster here); onnxruntime: fp32 or int8. Default: fp32")
    raw.add_argument("--top-k", type=int, help="fill-mask, text-classification, multiple-choice: answers per input")
    raw.add_argument("--aggregation-strategy", help="token-classification: none, simple, first, average, max")
    args = parser.parse_args(argv)
    cfg, toml = _finetune_config(args, ("finetune", "train"))
    check_replaceable(args.out, _is_predictions, "a predictions file of litebert predict", cfg.overwrite)
    if not cfg.data_dir:
        return predict_inputs(cfg, args, args.task if "task" in vars(args) else toml.get("finetune", {}).get("task"))
    if args.text or args.input:
        raise ConfigError("--text/--input are raw inputs for the checkpoint's task; --data-dir predicts a split of "
                          "a task from its files: give one or the other")
    if not args.out:
        raise ConfigError("--out is required to predict a split (--data-dir)")
    scored, task, examples = evaluate_checkpoint(cfg.model, cfg, args.split, args.device)
    preds = scored.predictions
    if task.submission:
        path = T.write_glue_predictions(args.out, task, examples, preds)
    else:
        path = args.out
        with atomic_open(path) as f:
            for ex, p in zip(examples, preds):
                f.write(json.dumps({"id": ex.id, "prediction": p}, ensure_ascii=False) + "\n")
    print(f"wrote {len(preds)} predictions to {path}")
    return 0


def _is_metrics(path) -> bool:
    """What `litebert evaluate --out` writes: one JSON object of scores, some per class or type (entity F1's
    per_type), and the subset it was scored on."""
    def scores(value) -> bool:
        return isinstance(value, (int, float)) or isinstance(value, dict) and all(map(scores, value.values()))
    metrics = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(metrics, dict) and all(scores(v) or k == "scored_on" for k, v in metrics.items())


def _is_predictions(path) -> bool:
    """What `litebert predict --out` writes: JSON Lines with a prediction or an output per input, or a GLUE
    submission (a header "index\tprediction")."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    if first.rstrip("\r\n") == "index\tprediction":
        return True
    record = json.loads(first)
    return isinstance(record, dict) and ("prediction" in record or {"input", "output"} <= set(record))


def predict_inputs(cfg: FinetuneConfig, args: argparse.Namespace, task: str | None) -> int:
    """`litebert predict` on raw inputs: each batch of inputs through the pipeline, written (and flushed) as one
    JSON line per input, {"id" (a JSONL/CSV row's), "input", "output"}, as soon as it is done."""
    import contextlib
    import itertools
    import sys
    from pathlib import Path

    from litebert.serving.pipeline import input_format, pipeline, read_inputs
    from litebert.tasks.records import open_text
    from litebert.weights import resolve_model_dir

    if not cfg.model:
        raise ConfigError("--model is required: a fine-tuned or pretrained model directory")
    if task in T.TASKS or task == "table":  # a registered task names the checkpoint's own (pipeline) task
        family = family_for_config(AlbertConfig.load(resolve_model_dir(cfg.model)))
        if task != "table" and family_of(T.TASKS[task]) is not family:
            raise ConfigError(f"{cfg.model} is not fine-tuned for {task}")
        task = None
    options = {k: getattr(args, k) for k in ("top_k", "aggregation_strategy") if getattr(args, k) is not None}
    pipe = pipeline(task, cfg.model, backend=args.backend, precision=args.precision, batch_size=cfg.eval_batch_size,
                    max_length=cfg.max_length, max_query_length=cfg.max_query_length,
                    doc_stride=cfg.doc_stride if "doc_stride" in vars(args) else None,  # else the pipeline's
                    max_answer_length=cfg.max_answer_length or 30, device=args.device, **options)
    chunk, stream = cfg.eval_batch_size, None
    if args.text:
        if not all(t.strip() for t in args.text):
            raise ConfigError("--text is empty")
        records = read_inputs(args.text, "--text")
    elif args.input:
        fmt = input_format(args.input)
        stream = open_text(Path(args.input), newline="" if fmt in ("csv", "tsv") else "\n")
        records = read_inputs(stream, args.input, fmt)
    else:
        chunk = 1 if sys.stdin.isatty() else chunk  # typed by hand: answer each line at once
        records = read_inputs(sys.stdin, "stdin")
    written = 0
    # --out is replaced when every input is done (atomic_open; a kill leaves the old file and .tmp-NAME)
    with stream or contextlib.nullcontext(), \
            atomic_open(args.out) if args.out else contextlib.nullcontext(sys.stdout) as out:
        while batch := list(itertools.islice(records, chunk)):
            for r in batch:
                try:
                    pipe.validate(r.input)
                except ConfigError as e:
                    raise ConfigError(f"{r.where}: {e}") from None
            for r, output in zip(batch, pipe([r.input for r in batch])):
                line = ({} if r.id is None else {"id": r.id}) | {"input": r.input, "output": output}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            out.flush()
            written += len(batch)
    if args.out:
        print(f"wrote {written} {pipe.task} outputs to {args.out}")
    return 0
