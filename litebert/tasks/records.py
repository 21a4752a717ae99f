"""Task examples and bad-record accounting, and the raw records every reader is built on.

Readers (litebert/tasks/readers.py, squad.py) are pure functions of a path and a few knobs returning an
`Examples` list of small dataclasses; any line-based file may be gzipped (`train.jsonl.gz`).
A record that cannot be read (a malformed row, invalid JSON, a label outside the label set, an answer span
that is not in its context) raises DataError naming file:line, or with errors="skip" is left out, counted
in `Examples.skipped` and reported in one log line.
"""

from __future__ import annotations

import collections
import csv
import gzip
import io
import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from litebert.errors import ConfigError, DataError
from litebert.files import data_suffix

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# examples and bad-record accounting


@dataclass
class TextExample:
    """One sentence or sentence pair with a class name (str), a regression target (float), a set of class names
    (list, multi-label) or None (unlabelled)."""

    id: str
    text_a: str
    text_b: str | None = None
    label: str | float | list[str] | None = None

    @property
    def gold(self):
        """What the example is scored against; None when it is unlabelled (every example type has it)."""
        return self.label

    @property
    def texts(self) -> list[str]:
        """What the model reads, each of which should hold something (see `blank_examples`)."""
        return [self.text_a] if self.text_b is None else [self.text_a, self.text_b]


@dataclass
class ChoiceExample:
    """Multiple choice: pick one of `options` (RACE: article/question/4 answers; SWAG: sent1/sent2/4 endings)."""

    id: str
    context: str  # "" when the question stands alone (wordnet_defmc)
    question: str
    options: list[str]
    label: int | None = None

    @property
    def gold(self):
        return self.label

    @property
    def texts(self) -> list[str]:
        return [self.question, *self.options]  # the context may rightly be ""


@dataclass
class TagExample:
    """A sentence as words with one tag per word (BIO for NER), or tags None when unlabelled."""

    id: str
    words: list[str]
    tags: list[str] | None = None

    @property
    def gold(self):
        return self.tags

    @property
    def texts(self) -> list[str]:
        return [" ".join(self.words)]


class BadRecord(Exception):
    """Raised by a record parser; `collect` turns it into a DataError or a counted skip."""

    def __init__(self, message: str, where: str | None = None, kind: str = "unreadable"):
        super().__init__(message)
        self.where = where  # overrides the record's own location (e.g. one line inside a CoNLL sentence)
        self.kind = kind  # what `Examples.skip_counts` counts it as: "unreadable", or "unknown_label"


UNKNOWN_LABEL = "unknown_label"  # BadRecord.kind of a label outside the label set (e.g. one training never had)


class Examples(list):
    """A reader's result: the examples, plus `skipped` with one "where: why" line per record left out, and
    `skip_counts`, how many of each kind ({"unknown_label": 3, "unreadable": 1})."""

    def __init__(self, items: Iterable = (), skipped: Iterable[str] = (), skip_counts: dict[str, int] | None = None,
                 first_skip: dict[str, str] | None = None):
        super().__init__(items)
        self.skipped = list(skipped)
        self.skip_counts = dict(skip_counts) if skip_counts is not None else \
            ({"unreadable": len(self.skipped)} if self.skipped else {})
        self.first_skip = dict(first_skip or {})  # kind -> the first "where: why" of that kind

    @property
    def records(self) -> int:
        """How many records were read: the examples and the skipped ones."""
        return len(self) + len(self.skipped)

    def scored_on(self, split: str) -> str:
        """"344 of 500 dev rows", and why the others were left out: what a metric over these examples is a
        score of, to be reported beside it."""
        text = f"{len(self)} of {self.records} {split} rows"
        if self.skipped:
            text += " (left out: " + ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in
                                               sorted(self.skip_counts.items())) + ")"
        return text


def collect(records: Iterable[tuple[str, Any]], parse: Callable[[str, Any], Any], path: os.PathLike | str,
            errors: str = "raise") -> Examples:
    """Parse each (where, raw) record; a BadRecord raises DataError ("raise") or is skipped and counted ("skip")."""
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip', got {errors!r}")
    items, skipped, total, kinds, firsts = [], [], 0, collections.Counter(), {}
    for where, raw in records:
        total += 1
        try:
            items.append(parse(where, raw))
        except BadRecord as e:
            message = f"{e.where or where}: {e}"
            if errors == "raise":
                raise DataError(message) from None
            skipped.append(message)
            kinds[e.kind] += 1
            firsts.setdefault(e.kind, message)
    if skipped:
        log.warning("%s: skipped %d of %d records (first: %s)", path, len(skipped), total, skipped[0])
    return Examples(items, skipped, kinds, firsts)


def blank_examples(examples: Iterable) -> int:
    """How many examples have a text that is empty or blank (a pair's second text, a question, an option): the
    model reads [CLS] [SEP] there. Counted in a run's summary, not refused: a few may be rightly empty."""
    return sum(1 for ex in examples if any(not (t or "").strip() for t in getattr(ex, "texts", ())))


def label_list(examples: Iterable) -> list[str]:
    """The sorted label set of labelled examples (use the training split's, then pass it to the other splits);
    a multi-label example contributes each of its labels."""
    found: set[str] = set()
    for e in examples:
        if isinstance(e.label, list):
            found.update(e.label)
        elif e.label is not None:
            found.add(e.label)
    return sorted(found)


# ----------------------------------------------------------------------------------------------------------------
# raw records: lines, TSV/CSV rows, JSON Lines


def open_text(path: Path, newline: str | None = "\n"):
    r"""A text file or a .gz one, read as UTF-8 (a BOM dropped). newline="\n" by default: a stray \r inside a
    field must not end the line (universal newlines would split there); the csv module wants newline="".
    A .gz file is decompressed here, whole (task files are small), so a truncated or non-gzip file is a
    DataError naming it rather than an EOFError halfway through a reader."""
    if path.suffix.lower() != ".gz":
        return _Decoded(open(path, encoding="utf-8-sig", newline=newline), path)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile; a truncated stream; a corrupt deflate stream
        raise DataError(f"{path}: cannot read as gzip ({e})") from None
    try:
        return io.StringIO(data.decode("utf-8-sig"), newline=newline)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_rows(path: Path, what: str = "line") -> list[str]:
    """The lines of a line-oriented input (one input per line, its output row i is line i), without their line
    ends. A blank line would shift every row after it if skipped, and has no output if kept: it is refused with
    its line number (DataError), as are the others, so the user sees them all at once. Blank lines at the end
    of the file shift nothing and are left out."""
    with open_text(path) as f:
        rows = [line.rstrip("\r\n") for line in f]
    while rows and not rows[-1].strip():
        rows.pop()
    blank = [i for i, row in enumerate(rows, 1) if not row.strip()]
    if blank:
        raise blank_lines(path, blank, what)
    return rows


def blank_lines(source: os.PathLike | str, numbers: list[int], what: str = "line") -> DataError:
    """The refusal of interior blank lines in a line-oriented input (`read_rows`' rule), naming them."""
    shown = ", ".join(map(str, numbers[:5])) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
    return DataError(f"{source}: blank {what}(s) at line {shown}: each line is one input and row i of the output "
                     "is line i; remove them (nothing was written)")


class _Decoded:
    """A text file read line by line (or whole), whose decode errors name it: a UnicodeDecodeError says
    neither which file nor where."""

    def __init__(self, f, path: Path):
        self._f, self._path, self._lines = f, path, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        try:
            line = next(self._f)
        except UnicodeDecodeError as e:
            raise self._error(e) from None
        self._lines += 1
        return line

    def read(self, size: int = -1) -> str:
        try:
            return self._f.read(size)
        except UnicodeDecodeError as e:
            raise self._error(e) from None

    def _error(self, e: UnicodeDecodeError) -> DataError:
        # Decoding runs a chunk ahead of the lines handed out, so the line is found by reading the file again.
        line = self._lines + 1
        try:
            with open(self._path, "rb") as f:
                for line, raw in enumerate(f, 1):
                    try:
                        raw.decode("utf-8")
                    except UnicodeDecodeError:
                        break
        except OSError:
            pass
        return DataError(f"{self._path}:{line}: not UTF-8 text ({e.reason}: byte {e.object[e.start:e.start + 1]!r}); "
                         "save the file as UTF-8")

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
        try:
            for row in reader:
                if any(cell.strip() for cell in row):
                    yield f"{path}:{reader.line_num}", row
        except csv.Error as e:  # a field over csv's size limit, a stray NUL: the file, not one record, is unreadable
            raise DataError(f"{path}:{reader.line_num}: not readable as CSV ({e})") from None


def json_record(line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise BadRecord(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
        raise BadRecord(f"expected a JSON object, got {type(record).__name__}")
    return record


def table_format(path: Path) -> str:
    suffix = data_suffix(path)
    formats = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
    if suffix not in formats:
        raise DataError(f"{path}: cannot tell the format from the suffix {suffix!r} (want .tsv, .csv, .jsonl or "
                        ".parquet)")
    return formats[suffix]


def parquet_records(path: Path) -> Iterator[tuple[str, str]]:
    """The rows of a Parquet file (what `datasets`' `Dataset.to_parquet` writes and the Hub serves datasets as),
    each as a JSON line, so that they are read, checked and counted exactly as a .jsonl file's rows."""
    try:
        import pyarrow  # an optional dependency: litebert[parquet]
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow (pip install 'litebert[parquet]')") from None
    try:
        table = pq.ParquetFile(path)
    except (OSError, pyarrow.ArrowException) as e:  # missing, truncated, or not Parquet at all
        raise DataError(f"{path}: not a readable Parquet file ({e})") from None
    n = 0
    for batch in table.iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            n += 1
            yield f"{path}:row {n}", json.dumps(row, ensure_ascii=False, default=str)


def _get(record, key, kind: type | tuple = str):
    """record[key] (a row index or a JSON key), checked to be present and of the expected type."""
    try:
        value = record[key]
    except (KeyError, IndexError):
        raise BadRecord(f"missing field {key!r}") from None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadRecord(f"field {key!r} should be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


# ----------------------------------------------------------------------------- one raw pipeline input


def nonblank(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what} should be a string, got {type(value).__name__}")
    if not value.strip():
        raise ConfigError(f"{what} is empty")
    return value


def raw_text(value: Any, what: str) -> str:
    """A text to classify or encode: any string, "" included ([CLS] [SEP] alone, as transformers reads it)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} should be a string, got {type(value).__name__}")
    return value


def text_example(raw: Any, index: int) -> TextExample:
    """A string, a (text, text_pair) pair, or {"text": ..., "text_pair": ...} as transformers' pipelines take;
    "" is a text, as there."""
    if isinstance(raw, str):
        return TextExample(str(index), raw)
    if isinstance(raw, dict) and "text" in raw:
        unknown = sorted(set(raw) - {"text", "text_pair"})
        if unknown:
            raise ConfigError(f"unexpected key(s) {unknown}: a text pair is {{'text', 'text_pair'}}")
        pair = raw.get("text_pair")
        return TextExample(str(index), raw_text(raw["text"], "text"), None if pair is None else raw_text(pair, "text_pair"))
    if isinstance(raw, (list, tuple)) and len(raw) == 2 and all(isinstance(x, str) for x in raw):
        return TextExample(str(index), raw[0], raw[1])
    raise ConfigError(f"expected a string, a pair of strings or {{'text', 'text_pair'}}, got {type(raw).__name__}")


def describe(raw: Any) -> str:
    return f"an object with keys {sorted(raw)}" if isinstance(raw, dict) else type(raw).__name__
