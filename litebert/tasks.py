"""Fine-tuning tasks: readers for the formats datasets are distributed in, and a registry of known tasks.
(litebert/features.py turns the examples into model inputs and batches them.)

Readers are pure functions of a path and a few knobs, returning an `Examples` list of small dataclasses; any
line-based file may be gzipped (`train.jsonl.gz`), and a split file missing from a task's directory is looked
for with .gz added (litebert/data/novel_authorship ships that way).
A record that cannot be read (a malformed row, invalid JSON, a label outside the label set, an answer span
that is not in its context) raises DataError naming file:line, or with errors="skip" is left out, counted
in `Examples.skipped` and reported in one log line. SQuAD-format data lives in litebert/squad.py, which uses
the same machinery.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

log = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label of positions the loss skips (F.cross_entropy's default ignore_index)


# ----------------------------------------------------------------------------------------------------------------
# examples and bad-record accounting


@dataclass
class TextExample:
    """One sentence or sentence pair with a class name (str), a regression target (float) or None (unlabelled)."""

    id: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None


@dataclass
class ChoiceExample:
    """Multiple choice: pick one of `options` (RACE: article/question/4 answers; SWAG: sent1/sent2/4 endings)."""

    id: str
    context: str  # "" when the question stands alone (wordnet_defmc)
    question: str
    options: list[str]
    label: int | None = None


@dataclass
class TagExample:
    """A sentence as words with one tag per word (BIO for NER), or tags None when unlabelled."""

    id: str
    words: list[str]
    tags: list[str] | None = None


class DataError(ValueError):
    """A record that cannot be read. The message starts with where it is: file:line, or file: JSON path."""


class BadRecord(Exception):
    """Raised by a record parser; `collect` turns it into a DataError or a counted skip."""

    def __init__(self, message: str, where: str | None = None):
        super().__init__(message)
        self.where = where  # overrides the record's own location (e.g. one line inside a CoNLL sentence)


class Examples(list):
    """A reader's result: the examples, plus `skipped` with one "where: why" line per record left out."""

    def __init__(self, items: Iterable = (), skipped: Iterable[str] = ()):
        super().__init__(items)
        self.skipped = list(skipped)


def collect(records: Iterable[tuple[str, Any]], parse: Callable[[str, Any], Any], path: os.PathLike | str,
            errors: str = "raise") -> Examples:
    """Parse each (where, raw) record; a BadRecord raises DataError ("raise") or is skipped and counted ("skip")."""
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip', got {errors!r}")
    items, skipped, total = [], [], 0
    for where, raw in records:
        total += 1
        try:
            items.append(parse(where, raw))
        except BadRecord as e:
            message = f"{e.where or where}: {e}"
            if errors == "raise":
                raise DataError(message) from None
            skipped.append(message)
    if skipped:
        log.warning("%s: skipped %d of %d records (first: %s)", path, len(skipped), total, skipped[0])
    return Examples(items, skipped)


def label_list(examples: Iterable) -> list[str]:
    """The sorted label set of labelled examples (use the training split's, then pass it to the other splits)."""
    return sorted({e.label for e in examples if e.label is not None})


# ----------------------------------------------------------------------------------------------------------------
# raw records: lines, TSV/CSV rows, JSON Lines


def open_text(path: Path, newline: str | None = "\n"):
    r"""A text file or a .gz one, read as UTF-8 (a BOM dropped). newline="\n" by default: a stray \r inside a
    field must not end the line (universal newlines would split there); the csv module wants newline="".
    A .gz file is decompressed here, whole (task files are small), so a truncated or non-gzip file is a
    DataError naming it rather than an EOFError halfway through a reader."""
    if path.suffix.lower() != ".gz":
        return open(path, encoding="utf-8-sig", newline=newline)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:  # BadGzipFile is an OSError; a truncated stream ends in EOFError
        raise DataError(f"{path}: cannot read as gzip ({e})") from None
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline=newline)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def nonblank_lines(path: Path) -> Iterator[tuple[str, str]]:
    with open_text(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield f"{path}:{n}", line


def _rows(path: Path, fmt: str) -> Iterator[tuple[str, list[str]]]:
    """TSV rows split on tabs with no quoting (GLUE's sentences contain bare quotes); CSV rows with quoting."""
    if fmt == "tsv":
        for where, line in nonblank_lines(path):
            yield where, line.split("\t")
        return
    with open_text(path, newline="") as f:
        reader = csv.reader(f)
        for row in reader:
            if any(cell.strip() for cell in row):
                yield f"{path}:{reader.line_num}", row


def json_record(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise BadRecord(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
        raise BadRecord(f"expected a JSON object, got {type(record).__name__}")
    return record


def data_suffix(path: Path) -> str:
    """The suffix that says a file's format, under any .gz: "train.jsonl.gz" -> ".jsonl"."""
    return Path(path.name.lower().removesuffix(".gz")).suffix


def _format(path: Path) -> str:
    suffix = data_suffix(path)
    formats = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
    if suffix not in formats:
        raise ValueError(f"{path}: cannot tell the format from the suffix {suffix!r} (want .tsv, .csv or .jsonl)")
    return formats[suffix]


def _get(record, key, kind: type | tuple = str):
    """record[key] (a row index or a JSON key), checked to be present and of the expected type."""
    try:
        value = record[key]
    except (KeyError, IndexError):
        raise BadRecord(f"missing field {key!r}") from None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRecord(f"field {key!r} should be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------------------------
# readers


def read_table(path: os.PathLike | str, text_columns: Sequence[str | int], label_column: str | int | None = None, *,
               labels: Sequence[str] | None = None, regression: bool = False, id_column: str | int | None = None,
               header: bool = True, columns: Sequence[str] | None = None, errors: str = "raise",
               label_optional: bool = False) -> Examples:
    """Sentence (one text column) or sentence-pair (two) examples from a .tsv, .csv or .jsonl file (or .gz).

    Columns are header names (JSON keys for .jsonl) or 0-based indices. A file without a header row takes its
    names from `columns`, if given. label_column None reads unlabelled data (test splits); labels, if given, is
    the label set and any other label is a bad record; regression reads float targets. Ids come from
    id_column when the file has it, else they are the 0-based data row number (GLUE's test "index").
    Only the named columns are read, so metadata such as a `title` that gives the label away never reaches a model.
    label_optional: a file without the label column (not in the header; for .jsonl, not in the first record) is
    read as unlabelled instead of being an error, as a test file distributed without answers.
    """
    path = Path(path)
    if len(text_columns) not in (1, 2):
        raise ValueError(f"text_columns must name one or two columns, got {list(text_columns)}")
    fmt = _format(path)
    labels = None if labels is None else [str(x) for x in labels]
    if fmt == "jsonl":
        records, width, id_key = nonblank_lines(path), None, id_column
        if label_optional and label_column is not None:
            first = next(records, None)
            records = itertools.chain([first] if first else [], records)
            try:
                if first is not None and label_column not in json_record(first[1]):
                    label_column = None
            except BadRecord:
                pass  # reported as a bad record when it is parsed below
    else:
        records = _rows(path, fmt)
        names = list(columns) if columns is not None else None
        if header:
            first = next(records, None)
            if first is None:
                return Examples()
            names = [name.strip() for name in first[1]]
        index = {name: i for i, name in enumerate(names or [])}
        if label_optional and isinstance(label_column, str) and label_column not in index:
            label_column = None
        for col in [*text_columns, *([] if label_column is None else [label_column])]:
            if not isinstance(col, int) and col not in index:
                raise DataError(f"{path}:1: no column {col!r} in {names}")
        resolve = lambda col: col if isinstance(col, int) or col is None else index[col]  # noqa: E731
        text_columns, label_column = [resolve(c) for c in text_columns], resolve(label_column)
        id_key = resolve(id_column) if id_column in index or isinstance(id_column, int) else None
        width = len(names) if names else None

    def parse(where: str, numbered) -> TextExample:
        n, record = numbered
        if fmt == "jsonl":
            record = json_record(record)
        elif width is not None and len(record) != width:
            raise BadRecord(f"expected {width} tab/comma-separated fields, found {len(record)}")
        texts = [_get(record, col) for col in text_columns]
        label = None
        if label_column is not None:
            raw = _get(record, label_column, (str, int, float))
            if regression:
                try:
                    label = float(raw)
                except ValueError:
                    raise BadRecord(f"label {raw!r} is not a number") from None
            else:
                label = str(raw)
                if labels is not None and label not in labels:
                    raise BadRecord(f"label {label!r} is not one of {labels}")
        has_id = id_key is not None and (fmt != "jsonl" or id_key in record)
        ident = str(_get(record, id_key, (str, int))) if has_id else str(n)
        return TextExample(ident, texts[0], texts[1] if len(texts) == 2 else None, label)

    return collect(((where, (n, rec)) for n, (where, rec) in enumerate(records)), parse, path, errors)


def read_choice_jsonl(path: os.PathLike | str, *, question: str = "question", options: str = "options",
                      label: str | None = "label", context: str | None = None, id_key: str = "id",
                      errors: str = "raise") -> Examples:
    """Multiple choice from JSON Lines ({id, question, options: [...], label: index}, as wordnet_defmc)."""
    path = Path(path)

    def parse(where: str, line: str) -> ChoiceExample:
        record = json_record(line)
        opts = _get(record, options, list)
        if len(opts) < 2 or not all(isinstance(o, str) for o in opts):
            raise BadRecord(f"{options!r} should be a list of at least two strings, got {opts!r}")
        answer = None if label is None else _get(record, label, int)
        if answer is not None and not 0 <= answer < len(opts):
            raise BadRecord(f"label {answer} is not an index into {len(opts)} options")
        ctx = "" if context is None else _get(record, context)
        ident = str(record.get(id_key, where.rsplit(":", 1)[-1]))
        return ChoiceExample(ident, ctx, _get(record, question), list(opts), answer)

    return collect(nonblank_lines(path), parse, path, errors)


def read_race(path: os.PathLike | str, levels: Sequence[str] = ("middle", "high"), errors: str = "raise") -> Examples:
    """RACE: a split directory holding middle/ and high/ (one JSON file per article), or one such file.

    Each file is {"id", "article", "questions": [...], "options": [[4 answers], ...], "answers": ["A".."D"]};
    every question becomes one example with id "<file id>-<question number>".
    """
    path = Path(path)
    files = [path] if path.is_file() else [f for level in levels for f in sorted((path / level).glob("*.txt"))
                                           + sorted((path / level).glob("*.json"))]
    if not files:
        raise DataError(f"{path}: no RACE files (expected {'/ or '.join(levels)}/ with *.txt or *.json)")

    def records():
        for file in files:
            text = file.read_text(encoding="utf-8")
            try:
                article = json.loads(text)
            except json.JSONDecodeError as e:
                yield f"{file}:{e.lineno}", BadRecord(f"invalid JSON ({e.msg})")
                continue
            if not isinstance(article, dict):
                yield f"{file}:1", BadRecord("expected a JSON object")
                continue
            name = f"{file.parent.name}/{article.get('id', file.name)}"
            for k, question in enumerate(article.get("questions", [])):
                yield f"{file}: questions[{k}]", (name, k, article)

    def parse(where: str, raw) -> ChoiceExample:
        if isinstance(raw, BadRecord):
            raise raw
        name, k, article = raw
        options, answers = _get(article, "options", list), _get(article, "answers", list)
        if k >= len(options) or k >= len(answers):
            raise BadRecord(f"{len(article['questions'])} questions but {len(options)} option lists "
                            f"and {len(answers)} answers")
        letter = answers[k]
        if not (isinstance(letter, str) and len(letter) == 1 and 0 <= ord(letter) - ord("A") < len(options[k])):
            raise BadRecord(f"answer {letter!r} is not a letter among {len(options[k])} options")
        return ChoiceExample(f"{name}-{k}", _get(article, "article"), _get(article["questions"], k),
                             list(options[k]), ord(letter) - ord("A"))

    return collect(records(), parse, path, errors)


def read_swag(path: os.PathLike | str, errors: str = "raise") -> Examples:
    """SWAG CSV (train.csv / val.csv / test.csv): context sent1, the ending's start sent2, endings ending0..3."""
    path = Path(path)
    rows = _rows(path, "csv")
    first = next(rows, None)
    if first is None:
        return Examples()
    index = {name: i for i, name in enumerate(first[1])}
    need = ["sent1", "sent2", "ending0", "ending1", "ending2", "ending3"]
    missing = [c for c in need if c not in index]
    if missing:
        raise DataError(f"{first[0]}: SWAG header lacks {missing}")
    has_label, id_col = "label" in index, index.get("fold-ind")

    def parse(where: str, row: list[str]) -> ChoiceExample:
        if len(row) != len(index):
            raise BadRecord(f"expected {len(index)} fields, found {len(row)}")
        label = row[index["label"]] if has_label else None
        if label is not None and label not in ("0", "1", "2", "3"):
            raise BadRecord(f"label {label!r} is not 0-3")
        ident = row[id_col] if id_col is not None else where.rsplit(":", 1)[-1]
        return ChoiceExample(ident, row[index["sent1"]], row[index["sent2"]],
                             [row[index[f"ending{i}"]] for i in range(4)], None if label is None else int(label))

    return collect(rows, parse, path, errors)


def read_conll(path: os.PathLike | str, labels: Sequence[str] | None = None, has_tags: bool = True,
               errors: str = "raise") -> Examples:
    """CoNLL-style tagging: one token per line (word first, tag last column), a blank line between sentences,
    -DOCSTART- lines skipped. Sentence ids are "<file name>:<first line>"."""
    path = Path(path)

    def sentences():
        lines: list[tuple[int, str]] = []
        with open_text(path) as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if line.startswith("-DOCSTART-"):
                    continue
                if line.strip():
                    lines.append((n, line))
                elif lines:
                    yield f"{path}:{lines[0][0]}", lines
                    lines = []
        if lines:
            yield f"{path}:{lines[0][0]}", lines

    def parse(where: str, lines: list[tuple[int, str]]) -> TagExample:
        words, tags = [], []
        for n, line in lines:
            fields = line.split()
            if has_tags and len(fields) < 2:
                raise BadRecord(f"expected a word and a tag, found {line!r}", where=f"{path}:{n}")
            if has_tags and labels is not None and fields[-1] not in labels:
                raise BadRecord(f"tag {fields[-1]!r} is not one of {list(labels)}", where=f"{path}:{n}")
            words.append(fields[0])
            tags.append(fields[-1])
        return TagExample(f"{path.name}:{where.rsplit(':', 1)[-1]}", words, tags if has_tags else None)

    return collect(sentences(), parse, path, errors)


# ----------------------------------------------------------------------------------------------------------------
# the task registry


@dataclass(frozen=True)
class Task:
    """How to read, score and submit one task. Column names are those of the files as distributed."""

    name: str
    kind: str  # "classification" | "regression" | "multiple_choice" | "qa" | "tagging"
    format: str  # which reader: "table" | "choice_jsonl" | "race" | "swag" | "squad" | "conll"
    files: dict[str, str]  # split -> path inside the task's directory
    text_columns: tuple[str, ...] = ()
    label_column: str | None = None
    labels: tuple[str, ...] | None = None  # class names in id order (None: regression or not a classifier)
    metrics: tuple[str, ...] = ("accuracy",)  # names in litebert.metrics.METRICS (qa/tagging: their own scores)
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


def read_task(task: str | Task, data_dir: os.PathLike | str, split: str, errors: str = "raise",
              labels: Sequence[str] | None = None) -> Examples:
    """The examples of one split of a registered task, read from the task's directory `data_dir`.

    labels: the label set for tasks that do not fix one (the training split's, for a custom table or a CoNLL tag
    set); a registered set wins. A label outside it is a bad record (an error, or a counted skip).
    """
    task = TASKS[task] if isinstance(task, str) else task
    if split not in task.files:
        raise ValueError(f"task {task.name} has no {split!r} split (has {sorted(task.files)})")
    path = Path(data_dir) / task.files[split]
    gzipped = path.with_name(path.name + ".gz")
    path = gzipped if not path.exists() and gzipped.is_file() else path
    labelled = split not in task.unlabelled
    if task.format == "table":
        # A test table may come without its label column (read unlabelled, for prediction); train and dev may not.
        return read_table(path, task.text_columns, task.label_column if labelled else None,
                          labels=task.labels or labels, regression=task.kind == "regression", id_column=task.id_column,
                          header=split not in task.headerless, columns=task.columns, errors=errors,
                          label_optional=split == "test")
    if task.format == "squad":
        from litebert.squad import read_squad  # squad.py builds on this module

        return read_squad(path, errors=errors)
    if task.format == "choice_jsonl":
        return read_choice_jsonl(path, label="label" if labelled else None, errors=errors)
    if task.format == "race":
        return read_race(path, errors=errors)
    if task.format == "swag":
        return read_swag(path, errors=errors)
    if task.format == "conll":
        return read_conll(path, labels=task.labels or labels, errors=errors)
    raise ValueError(f"task {task.name}: unknown format {task.format!r}")


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
            raise ValueError(f"task {task.name} has no GLUE submission file name; pass a file path")
        path.mkdir(parents=True, exist_ok=True)
        path = path / task.submission
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("index\tprediction\n")
        for example, pred in zip(examples, predictions):
            value = f"{float(pred):.3f}" if task.labels is None else task.labels[int(pred)]
            f.write(f"{example.id}\t{value}\n")
    return path
