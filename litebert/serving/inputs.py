"""Pipeline inputs read from files and streams (`litebert predict --input`, standard input)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from litebert.errors import DataError
from litebert.files import data_suffix
from litebert.tasks.records import blank_lines


class Record(NamedTuple):
    where: str  # file:line
    input: Any  # one pipeline input
    id: Any = None  # a JSONL/CSV row's "id", carried to its output


def read_inputs(lines: Iterable[str], source: str, fmt: str = "text", skip_blank: bool = False) -> Iterator[Record]:
    """Pipeline inputs from lines, lazily (a stream is read as it comes). Formats:
      text   one input per line: the line, or the JSON object it holds ({"question": ..., ...})
      jsonl  one JSON value per line: a string, an object of the input's fields (plus "id"), a list of words
      csv / tsv  a header row, then one input per row: the "text" cell alone, else the row's non-empty cells as
             the input's fields ("options" as a JSON list or "a|b|c")
    Output row i is input row i, so a blank line (or row) before another input is refused with its number
    (`records.read_rows`' rule); blank lines at the end shift nothing. skip_blank: typed by hand (a terminal),
    where nothing is aligned, a blank line is passed over. A line that is not UTF-8 is refused by number.
    """
    if fmt in ("csv", "tsv"):
        yield from _table_inputs(_decoded(lines, source), source, fmt)
        return
    blank: list[int] = []
    for n, line in enumerate(_decoded(lines, source), 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            blank += [] if skip_blank else [n]
            continue
        if blank:
            raise blank_lines(source, blank, "input")
        where = f"{source}:{n}"
        if fmt == "jsonl" or line.lstrip().startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                if fmt == "jsonl":
                    raise DataError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
                value = line  # text that merely starts with "{"
        else:
            value = line
        yield _record(where, value)


def _decoded(lines: Iterable[str], source: str) -> Iterator[str]:
    """`lines`, with a line that is not UTF-8 (standard input holding another encoding) refused by number."""
    it, n = iter(lines), 0
    while True:
        try:
            line = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError as e:
            raise DataError(f"{source}:{n + 1}: not UTF-8 text ({e.reason}); save the input as UTF-8") from None
        n += 1
        yield line


def _record(where: str, value: Any) -> Record:
    if isinstance(value, dict) and "id" in value:
        value = dict(value)
        return Record(where, value, value.pop("id"))
    return Record(where, value)


def _table_inputs(lines: Iterable[str], source: str, fmt: str) -> Iterator[Record]:
    reader = csv.reader(lines, delimiter="\t" if fmt == "tsv" else ",",
                        quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL)
    header, blank = next(reader, None), []
    while header is not None and not any(cell.strip() for cell in header):  # above the header: no row shifts
        header = next(reader, None)
    if header is None:
        return
    for row in reader:
        where = f"{source}:{reader.line_num}"
        if not any(cell.strip() for cell in row):
            blank.append(reader.line_num)
            continue
        if blank:
            raise blank_lines(source, blank, "row")
        if len(row) != len(header):
            raise DataError(f"{where}: {len(row)} cells under a header of {len(header)}")
        cells = {k: v for k, v in zip(header, row) if v != ""}
        if "options" in cells:
            text = cells["options"]
            try:
                cells["options"] = json.loads(text) if text.lstrip().startswith("[") else text.split("|")
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: options: invalid JSON ({e.msg})") from None
        record = _record(where, cells)
        value = record.input
        if set(value) == {"text"} or len(header) == 1:
            value = next(iter(value.values()), "")
        yield record._replace(input=value)


def input_format(path: str) -> str:
    """The format of an --input file from its suffix (under any .gz): jsonl, csv, tsv, else text."""
    return {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(data_suffix(Path(path)), "text")


# Keys of a task's own split files (train/dev/test.jsonl, a labelled table) that are no pipeline input's
SPLIT_KEYS = ("label", "labels", "title", "answers", "tags", "gold", "target")


def split_hint(value: Any) -> str:
    """For an input refused that holds a task split's keys: the route that reads such a file."""
    keys = sorted(set(value) & set(SPLIT_KEYS)) if isinstance(value, dict) else []
    if not keys:
        return ""
    return (f"; it holds {', '.join(keys)}, as a task's split file does: predict the split with "
            "`litebert predict --model DIR --task NAME --data-dir TASK_DIR --split test --out FILE`, or drop "
            "those keys (a pipeline input is the text fields alone)")


def output_format(path: str | None) -> str:
    """What `predict --out` writes: CSV or TSV for a .csv/.tsv name (under any .gz), else JSON Lines."""
    return {".csv": "csv", ".tsv": "tsv"}.get(data_suffix(Path(path)), "jsonl") if path else "jsonl"


class OutputWriter:
    """`predict`'s outputs, one row per input: JSON Lines {"id"?, "input", "output"}, or a table with the
    columns id (when the inputs had ids), input and output, cells that are not strings as JSON."""

    def __init__(self, out, fmt: str):
        self.out, self.fmt, self.writer = out, fmt, None
        if fmt in ("csv", "tsv"):
            self.writer = csv.writer(out, delimiter="\t" if fmt == "tsv" else ",", lineterminator="\n")

    def write(self, record: Record, output: Any) -> None:
        if self.writer is None:
            line = ({} if record.id is None else {"id": record.id}) | {"input": record.input, "output": output}
            self.out.write(json.dumps(line, ensure_ascii=False) + "\n")
            return
        if self.header is None:
            self.header = (["id"] if record.id is not None else []) + ["input", "output"]
            self.writer.writerow(self.header)
        cells = ([record.id] if "id" in self.header else []) + [record.input, output]
        self.writer.writerow([c if isinstance(c, str) else json.dumps(c, ensure_ascii=False) for c in cells])

    header: list[str] | None = None
