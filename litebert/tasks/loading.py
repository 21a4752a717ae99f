"""What every verb on a fine-tuning task reads, read one way: the task and model config (TaskConfig), the
task's recipe, its splits featurized, a tokenizer checked against its model, and a checkpoint scored on a split.
Fine-tuning, evaluate, predict and ensembles call these; none of them reads a task another way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object
from litebert.runtime.device import resolve_device
from litebert.tasks.ensembles import check_members
from litebert.tasks.families import Family, FeatureSettings, Scored, family_of
from litebert.tasks.fine_tuned import CALIBRATION_FILE, fine_tuned_max_length, read_calibration
from litebert.tasks.inference import check_finite_scores, model_scores
from litebert.tasks.records import Examples
from litebert.tasks.registry import TASKS, Task, read_task
from litebert.text.transformers_files import SPIECE_FILE
from litebert.tokenizer import Tokenizer
from litebert.weights import resolve_model_dir

log = logging.getLogger("litebert")


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
class TaskConfig:
    """A task and a model: what fine-tuning, evaluate, predict and ensembles read (the [finetune] table of a
    recipe, which the verbs that only score share with fine-tuning)."""

    toml_section = "finetune"
    # TaskConfig's own fields: a recipe's [finetune] table may hold them, and a verb that only scores skips them
    toml_ignored = ("eval_split", "from_scratch", "max_train_examples", "dropout", "early_stopping_patience",
                    "padding_free")

    model: str = field(default="", metadata={"help": "pretrained model directory (litebert or HF), or a Hub id"})
    task: str = field(default="novel_authorship", metadata={
        "help": f"a registered task ({', '.join(TASKS)}) or 'table' (any CSV/TSV/JSONL, see --text-columns); "
                "required with --data-dir (default: novel_authorship, the demo's task, for raw inputs and recipes)"})
    data_dir: str = field(default="", metadata={"help": "the task's directory (train/dev/test files as distributed)"})
    tokenizer: str | None = field(default=None, metadata={"help": "tokenizer directory (default: --model's)"})
    max_length: int | None = field(default=None, metadata={"range": "[4, inf)",
        "help": "max tokens per input (default: the recipe's)"})
    doc_stride: int = field(default=128, metadata={"range": "[1, inf)",
        "help": "QA: tokens between the starts of context windows"})
    max_query_length: int = field(default=64, metadata={"range": "[1, inf)", "help": "QA: question tokens kept"})
    max_answer_length: int | None = field(default=None, metadata={"range": "[1, inf)",
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
    max_eval_examples: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "score only the first N eval examples"})
    eval_batch_size: int = field(default=64, metadata={"range": "[1, inf)", "help": "examples per evaluation forward"})
    overwrite: bool = field(default=False, metadata={
        "help": "finetune: start afresh in an --out-dir that holds an earlier run's best/ or summary.json, "
                "replacing them (without it such a directory is refused unless --resume); evaluate, predict: "
                "replace an --out file that is not an earlier result of the verb; ensemble: write into an --out "
                "directory that is not an ensemble's"})

    def __post_init__(self) -> None:
        # Refused here, before any work: otherwise the first evaluation fails with range()'s own message.
        if self.eval_batch_size < 1:
            raise ConfigError(f"invalid {type(self).__name__}: eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if self.task in TASKS:  # what the task's family cannot featurize with, refused before any work
            family_of(TASKS[self.task]).check_settings(self.max_length, self.max_query_length)


BUNDLED_TASKS = Path(__file__).resolve().parents[1] / "data"  # the demo's tasks ship with the package


def resolve_task(cfg: TaskConfig) -> Task:
    if not cfg.model:
        raise ConfigError("--model is required: the directory of a pretrained (or, to evaluate, fine-tuned) model")
    if not cfg.data_dir:
        raise ConfigError("--data-dir is required: the task's directory with its train/dev/test files (the demo's "
                          f"task is bundled: --task novel_authorship --data-dir {BUNDLED_TASKS / 'novel_authorship'})")
    if cfg.task in TASKS:
        return TASKS[cfg.task]
    if cfg.task != "table":
        raise ConfigError(f"unknown task {cfg.task!r}; choose from {', '.join(TASKS)} or 'table'")
    if not 1 <= len(cfg.text_columns) <= 2:
        raise ConfigError("a table task needs --text-columns with one or two column names")
    if cfg.regression and cfg.multi_label:
        raise ConfigError("a table task is --regression or --multi-label, not both")
    kind, metrics = ("regression", ("pearson", "spearman")) if cfg.regression else \
        ("multi_label", ("micro_f1", "macro_f1", "exact_match")) if cfg.multi_label else \
        ("classification", ("accuracy", "macro_f1"))
    files = {"train": cfg.train_file, "dev": cfg.dev_file, "test": cfg.test_file}
    return Task("table", kind, "table", files, tuple(cfg.text_columns), cfg.label_column, None, metrics)


def feature_settings(cfg: TaskConfig, task: Task, max_length: int) -> FeatureSettings:
    return FeatureSettings(max_length, cfg.doc_stride, cfg.max_query_length,
                           cfg.max_answer_length or task.max_answer_length)


def read_split(task: Task, cfg: TaskConfig, split: str, labels: list[str] | None = None,
               limit: int | None = None) -> Examples:
    """A split's examples; with `labels` (the training split's), a label outside them is a counted skip."""
    examples = read_task(task, cfg.data_dir, split, errors="skip", labels=labels)
    return examples if limit is None else Examples(examples[:limit], examples.skipped, examples.skip_counts,
                                                   examples.first_skip)


def checked_max_length(cfg: TaskConfig, task: Task, model_dir: str, fine_tuned: bool = False) -> int:
    """--max-length, else (`fine_tuned`: a model being scored) the length it was fine-tuned with, else the
    recipe's, capped by what the model's position embeddings can hold."""
    positions = AlbertConfig.load(model_dir).max_position_embeddings
    if cfg.max_length is None:
        recipe = RECIPES.get(task.name)
        recorded = fine_tuned_max_length(model_dir) if fine_tuned else None
        return min(recorded or (recipe.max_length if recipe else DEFAULT_MAX_LENGTH), positions)
    if cfg.max_length > positions:
        raise ConfigError(f"max_length {cfg.max_length} exceeds the model's max_position_embeddings {positions}")
    return cfg.max_length


def load_tokenizer(cfg: TaskConfig, model_dir: str, config: AlbertConfig):
    """--tokenizer, else the model's own, refused if it has ids the model's embeddings lack (otherwise the
    first batch holding one dies with an IndexError deep inside the embedding lookup), and --tokenizer refused
    when it is not the model's: another spiece.model than the one in the model's directory, or, where the
    directory has none, another vocabulary size. Its ids would mean other words to the model: it trains and
    scores, worse, without a word."""
    tok = Tokenizer.from_pretrained(cfg.tokenizer or model_dir)
    if tok.vocab_size > config.vocab_size:
        raise ConfigError(f"tokenizer {cfg.tokenizer or model_dir} has {tok.vocab_size} pieces but model "
                          f"{cfg.model} has vocab_size {config.vocab_size}: use the model's tokenizer, or extend "
                          "the model's vocabulary first (litebert extend-vocab)")
    if cfg.tokenizer:
        own = os.path.join(model_dir, SPIECE_FILE)
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


def _read_json(path: str) -> dict[str, Any]:
    """A JSON object a fine-tuned directory holds; CheckpointError naming the file when it is damaged."""
    return read_json_object(path, CheckpointError)


@dataclass
class Split:
    """One split of the task, featurized once as every member reads it (the members share tokenizer and labels)."""

    name: str
    task: Task
    family: Family
    labels: list[str] | None
    settings: Any
    pad_id: int
    examples: Examples
    features: list

    def score(self, scores: Sequence[np.ndarray], calibration: dict | None = None) -> Scored:
        return self.family.score(self.task, self.examples, self.features, scores, self.labels, self.settings,
                                 calibration)


def read_task_split(cfg: TaskConfig, members: Sequence[str], split: str) -> Split:
    """`split` of cfg's task, featurized with the first member's tokenizer, after checking every member is a
    model of this task's family with the same labels and tokenizer (else their scores would not line up)."""
    first = members[0]
    cfg = dataclasses.replace(cfg, model=first)
    task = resolve_task(cfg)
    family = family_of(task)
    config = AlbertConfig.load(first)
    tok = load_tokenizer(cfg, first, config)  # first: a tokenizer too large for the model
    labels = model_labels_for_task(task, family, check_members(members, family, f"{task.name} ({task.kind})"),
                                   first, config.num_labels)
    examples = read_split(task, cfg, split, labels, cfg.max_eval_examples)
    settings = feature_settings(cfg, task, checked_max_length(cfg, task, first, fine_tuned=True))
    return Split(split, task, family, labels, settings, tok.pad_id, examples,
                 family.featurize(examples, tok, labels, settings))


def model_labels_for_task(task: Task, family: Family, model_labels: list[str] | None, directory: str,
                          num_labels: int) -> list[str] | None:
    """The class names a fine-tuned model's outputs mean, as a split of `task` is scored with them; None for a
    family without classes of the task's (regression, multiple choice, span QA), whatever names its config has.

    Scoring maps each gold label to the model's output by name, so the model must name every label the task
    fixes: a model whose config.json names none (transformers' LABEL_0, LABEL_1, ...) is read as the task's
    numbered classes "0".."n-1" in that order (the one reading of LABEL_i that is no guess), and otherwise
    refused, as is one whose names are not the task's (its dev rows would fail, or all be skipped, by label).
    A task fixing no labels (a table) reads unnamed outputs as LABEL_i, as pipelines and transformers name them."""
    fixed = family.labels(task, ())
    if fixed is None:
        return None
    if model_labels is None:
        if fixed == [str(i) for i in range(num_labels)]:
            return fixed
        if not fixed:
            return [f"LABEL_{i}" for i in range(num_labels)]
        raise ConfigError(f"{directory} names no labels (config.json's id2label is LABEL_0..LABEL_{num_labels - 1}): "
                          f"which output is which class of {task.name} is unknown; write the class names, in "
                          "output order, into its id2label")
    if missing := [label for label in fixed if label not in model_labels]:
        raise ConfigError(f"{directory} has labels {model_labels}, not the labels of task {task.name} {fixed} "
                          f"(missing: {missing}): it was not fine-tuned for this task")
    return model_labels


def check_task_given(cfg: TaskConfig, given: set[str]) -> None:
    """A split is read as its task's files: without --task, TaskConfig's default (the demo's task) would read
    another task's data with the wrong reader and fail with a misleading message."""
    if cfg.data_dir and "task" not in given:
        raise ConfigError(f"--task is required with --data-dir: the task whose files {cfg.data_dir} holds (one of "
                          "the registered tasks, or 'table' with --text-columns)")


def evaluate_checkpoint(model_dir: str, cfg: TaskConfig, split: str, device: str = "cpu"
                        ) -> tuple[Scored, Task, Examples]:
    """Load a fine-tuned directory and score it on `split` (or just predict, for unlabelled splits). What the
    family calibrated on dev during fine-tuning is applied, so a test split is never tuned on: a directory
    without calibration.json (a step_N checkpoint, a converted model) is calibrated on dev only, as
    fine-tuning does, and scored elsewhere without tuning (thresholds 0.5, no null threshold), with a warning."""
    directory = resolve_model_dir(model_dir)
    data = read_task_split(cfg, [directory], split)
    model = data.family.head.from_pretrained(directory).to(resolve_device(device))  # model_scores moves batches
    scores = model_scores(model, data.family, data.features, cfg.eval_batch_size, data.pad_id)
    check_finite_scores(scores, f"{directory} on {split}")
    calibration = read_calibration(directory)
    if calibration is None and split != "dev" and data.family.calibrates:
        log.warning("%s has no %s: its %s split is scored without tuning on it (thresholds 0.5, no null "
                    "threshold); evaluate the directory fine-tuning saved as best/ for its dev calibration",
                    directory, CALIBRATION_FILE, split)
        calibration = {}
    return data.score(scores, calibration), data.task, data.examples
