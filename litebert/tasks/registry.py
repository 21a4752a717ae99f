"""The registry of known tasks: where each one's files are, which reader and family it uses, how it is scored
and submitted. A custom table task (`litebert finetune --task table`) is a Task built from flags.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from litebert.errors import ConfigError
from litebert.files import atomic_open
from litebert.tasks.families import family_of
from litebert.tasks.readers import read_choice_jsonl, read_conll, read_race, read_swag, read_table
from litebert.tasks.records import Examples, TextExample
from litebert.tasks.squad import read_squad


@dataclass(frozen=True)
class Task:
    """How to read, score and submit one task. Column names are those of the files as distributed."""

    name: str
    kind: str  # the family (litebert.tasks.families.FAMILIES): "classification", "multi_label", "qa", ...
    format: str  # which reader: "table" | "choice_jsonl" | "race" | "swag" | "squad" | "conll"
    files: dict[str, str]  # split -> path inside the task's directory
    text_columns: tuple[str, ...] = ()
    label_column: str | None = None
    labels: tuple[str, ...] | None = None  # class names in id order (None: regression or not a classifier)
    metrics: tuple[str, ...] = ("accuracy",)  # names in litebert.tasks.metrics.METRICS (qa/tagging: their own scores)
    id_column: str | None = None
    unlabelled: tuple[str, ...] = ()  # splits distributed without labels (GLUE test sets)
    headerless: tuple[str, ...] = ()  # splits whose file has no header row; `columns` names their fields
    columns: tuple[str, ...] | None = None
    submission: str | None = None  # GLUE leaderboard file name for test predictions
    directory: str | None = None  # the task's folder in the distribution (glue_data/MNLI, ...)
    max_answer_length: int = 30  # QA: longest span decoded, in tokens (SQuAD's 30; one-word answers need fewer)


def _glue(name, text, label, labels, metrics=("accuracy",), directory=None, dev="dev.tsv", test="test.tsv",
          id_column="index", **kw) -> Task:
    files = {"train": "train.tsv", "dev": dev, "test": test}
    return Task(name, "regression" if labels is None else "classification", "table", files, text, label,
                labels, metrics, id_column, ("test",), submission=f"{name}.tsv", directory=directory or name, **kw)


def _splits(ext: str) -> dict[str, str]:
    return {split: f"{split}.{ext}" for split in ("train", "dev", "test")}


_NLI = ("contradiction", "entailment", "neutral")  # MNLI's label order (HF's and the GLUE processors')
_BIN = ("0", "1")

TASKS: dict[str, Task] = {t.name: t for t in [
    # CoLA train/dev: no header; source, label, the author's original mark ("*" or empty), sentence.
    _glue("CoLA", ("sentence",), "label", _BIN, ("mcc",), headerless=("train", "dev"),
          columns=("source", "label", "original_label", "sentence")),
    _glue("SST-2", ("sentence",), "label", _BIN),
    _glue("MRPC", ("#1 String", "#2 String"), "Quality", _BIN, ("accuracy", "f1")),
    _glue("STS-B", ("sentence1", "sentence2"), "score", None, ("pearson", "spearman")),
    _glue("QQP", ("question1", "question2"), "is_duplicate", _BIN, ("accuracy", "f1"), id_column="id"),
    _glue("MNLI-m", ("sentence1", "sentence2"), "gold_label", _NLI, directory="MNLI",
          dev="dev_matched.tsv", test="test_matched.tsv"),
    _glue("MNLI-mm", ("sentence1", "sentence2"), "gold_label", _NLI, directory="MNLI",
          dev="dev_mismatched.tsv", test="test_mismatched.tsv"),
    _glue("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment")),
    _glue("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
    _glue("WNLI", ("sentence1", "sentence2"), "label", _BIN),
    # The diagnostic set: test only, predicted with an MNLI model, scored by the GLUE server with R3 (MCC).
    Task("AX", "classification", "table", {"test": "diagnostic.tsv"}, ("sentence1", "sentence2"), None, _NLI,
         ("mcc",), "index", ("test",), submission="AX.tsv", directory="diagnostic"),
    # /work/shared/data/tasks (JSON Lines). Never read `title`: it gives the author away.
    Task("novel_authorship", "classification", "table", _splits("jsonl"), ("text",), "label",
         ("Charles Dickens", "H. G. Wells", "Jane Austen", "Jules Verne"), ("accuracy", "macro_f1"), "id"),
    # Multi-label: the main characters each novel_authorship passage names (scripts/make_novel_characters.py).
    Task("novel_characters", "multi_label", "table", _splits("jsonl"), ("text",), "characters",
         metrics=("micro_f1", "macro_f1", "exact_match"), id_column="id"),
    Task("bible_paraphrase", "classification", "table", _splits("jsonl"), ("sentence1", "sentence2"), "label",
         _BIN, ("accuracy", "f1"), "id"),
    # Answers are one (inflected) word: 8 tokens cover 99.8% of train answers with a small vocabulary, and a
    # span cap of 30 lets an unsure model answer with half a sentence (EM 6.0 -> 10.8 on the same checkpoint).
    Task("wordnet_qa", "qa", "squad", _splits("jsonl"), metrics=("exact", "f1"), max_answer_length=8),
    Task("wordnet_defmc", "multiple_choice", "choice_jsonl", _splits("jsonl")),
    # Other standard benchmarks, in their distributed layouts.
    Task("squad-v1.1", "qa", "squad", {"train": "train-v1.1.json", "dev": "dev-v1.1.json"}, metrics=("exact", "f1")),
    Task("squad-v2.0", "qa", "squad", {"train": "train-v2.0.json", "dev": "dev-v2.0.json"}, metrics=("exact", "f1")),
    Task("race", "multiple_choice", "race", {"train": "train", "dev": "dev", "test": "test"}),
    Task("swag", "multiple_choice", "swag", {"train": "train.csv", "dev": "val.csv", "test": "test.csv"},
         unlabelled=("test",)),
    Task("conll2003", "tagging", "conll", {"train": "train.txt", "dev": "valid.txt", "test": "test.txt"},
         metrics=("f1",)),
]}


def _read_table_split(path: Path, task: Task, split: str, labels, errors: str) -> Examples:
    # A test table may come without its label column (read unlabelled, for prediction); train and dev may not.
    labelled = split not in task.unlabelled
    label_type = family_of(task).label_type
    return read_table(path, task.text_columns, task.label_column if labelled else None,
                      labels=task.labels or labels, regression=label_type == "value",
                      multi_label=label_type == "set", id_column=task.id_column,
                      header=split not in task.headerless, columns=task.columns, errors=errors,
                      label_optional=split == "test")


# Task.format -> reader(path, task, split, labels, errors): the one place a format is tied to its reader.
READERS: dict[str, Callable[[Path, Task, str, Sequence[str] | None, str], Examples]] = {
    "table": _read_table_split,
    "squad": lambda path, task, split, labels, errors: read_squad(path, errors=errors),
    "choice_jsonl": lambda path, task, split, labels, errors: read_choice_jsonl(
        path, label=None if split in task.unlabelled else "label", errors=errors),
    "race": lambda path, task, split, labels, errors: read_race(path, errors=errors),
    "swag": lambda path, task, split, labels, errors: read_swag(path, errors=errors),
    "conll": lambda path, task, split, labels, errors: read_conll(path, labels=task.labels or labels, errors=errors),
}


def read_task(task: str | Task, data_dir: os.PathLike | str, split: str, errors: str = "raise",
              labels: Sequence[str] | None = None) -> Examples:
    """The examples of one split of a registered task, read from the task's directory `data_dir`.

    labels: the label set for tasks that do not fix one (the training split's, for a custom table or a CoNLL tag
    set); a registered set wins. A label outside it is a bad record (an error, or a counted skip).
    A split file missing from the directory is looked for with .gz added (litebert/data/novel_authorship).
    """
    task = TASKS[task] if isinstance(task, str) else task
    if split not in task.files:
        raise ConfigError(f"task {task.name} has no {split!r} split (has {sorted(task.files)})")
    if task.format not in READERS:
        raise ConfigError(f"task {task.name}: unknown format {task.format!r} (known: {', '.join(READERS)})")
    path = Path(data_dir) / task.files[split]
    gzipped = path.with_name(path.name + ".gz")
    path = gzipped if not path.exists() and gzipped.is_file() else path
    return READERS[task.format](path, task, split, labels, errors)


def write_glue_predictions(path: os.PathLike | str, task: str | Task, examples: Sequence[TextExample],
                           predictions: Sequence) -> Path:
    """Write test predictions in the GLUE submission format: a header "index\\tprediction", then one row per
    example with its file index and the class name (or a regression score). Returns the file written.

    `path` is the file to write, or a directory to write the leaderboard's file name into (MNLI-m.tsv, STS-B.tsv,
    AX.tsv, ...): an existing directory, or any path ending in a separator ("subs/"), created when missing.
    """
    task = TASKS[task] if isinstance(task, str) else task
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} examples but {len(predictions)} predictions")
    as_directory = str(path).endswith(("/", os.sep)) or Path(path).is_dir()
    path = Path(path)
    if as_directory:
        if task.submission is None:
            raise ConfigError(f"task {task.name} has no GLUE submission file name; pass a file path")
        path.mkdir(parents=True, exist_ok=True)
        path = path / task.submission
    with atomic_open(path, newline="\n") as f:
        f.write("index\tprediction\n")
        for example, pred in zip(examples, predictions):
            value = f"{float(pred):.3f}" if task.labels is None else _task_label(task, pred)
            f.write(f"{example.id}\t{value}\n")
    return path


def _task_label(task: Task, pred: Any) -> str:
    """A predicted class as the task names it: its name, or its index among the task's labels (a model saved
    with numbered labels). Anything else is a model whose labels are not the task's: refused by name."""
    if pred in task.labels:
        return pred
    if isinstance(pred, int) or (isinstance(pred, str) and pred.isdigit()):
        if int(pred) < len(task.labels):
            return task.labels[int(pred)]
    raise ConfigError(f"the model predicts {pred!r}, which is not a label of task {task.name} "
                      f"({', '.join(task.labels)}): its labels are not the task's")

