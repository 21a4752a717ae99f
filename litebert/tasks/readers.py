"""Readers for the formats fine-tuning datasets are distributed in: tables (TSV/CSV/JSON Lines), multiple-choice
JSON Lines, RACE, SWAG and CoNLL. SQuAD's reader lives in squad.py with the rest of span QA.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Sequence

from litebert.errors import ConfigError
from litebert.tasks.records import (
    UNKNOWN_LABEL,
    BadRecord,
    ChoiceExample,
    DataError,
    Examples,
    TagExample,
    TextExample,
    _get,
    _rows,
    collect,
    json_record,
    nonblank_lines,
    open_text,
    parquet_records,
    table_format,
)


def read_table(path: os.PathLike | str, text_columns: Sequence[str | int], label_column: str | int | None = None, *,
               labels: Sequence[str] | None = None, regression: bool = False, id_column: str | int | None = None,
               header: bool = True, columns: Sequence[str] | None = None, errors: str = "raise",
               label_optional: bool = False, multi_label: bool = False) -> Examples:
    """Sentence (one text column) or sentence-pair (two) examples from a .tsv, .csv or .jsonl file (or .gz), or
    a .parquet file (a `datasets` table: `Dataset.to_parquet`, the Hub's dataset files), read as its JSON rows.

    Columns are header names (JSON keys for .jsonl) or 0-based indices. A file without a header row takes its
    names from `columns`, if given. label_column None reads unlabelled data (test splits); labels, if given, is
    the label set and any other label is a bad record; regression reads float targets; multi_label reads a set of
    labels per row (a JSON list in .jsonl, "a|b|c" in a CSV/TSV cell, empty for none). Ids come from
    id_column when the file has it, else they are the 0-based data row number (GLUE's test "index").
    Only the named columns are read, so metadata such as a `title` that gives the label away never reaches a model.
    label_optional: a file without the label column (not in the header; for .jsonl, not in the first record) is
    read as unlabelled instead of being an error, as a test file distributed without answers.
    """
    path = Path(path)
    if len(text_columns) not in (1, 2):
        raise ConfigError(f"text_columns must name one or two columns, got {list(text_columns)}")
    fmt = table_format(path)
    labels = None if labels is None else [str(x) for x in labels]
    if fmt in ("jsonl", "parquet"):  # a Parquet row is read as the JSON object it holds
        records, width, id_key = nonblank_lines(path) if fmt == "jsonl" else parquet_records(path), None, id_column
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
        if fmt in ("jsonl", "parquet"):
            record = json_record(record)
        elif width is not None and len(record) != width:
            raise BadRecord(f"expected {width} tab/comma-separated fields, found {len(record)}")
        texts = [_get(record, col) for col in text_columns]
        label = None
        if label_column is not None and multi_label:
            label = _label_set(_get(record, label_column, (str, list)), labels)
        elif label_column is not None:
            raw = _get(record, label_column, (str, int, float))
            if regression:
                try:
                    label = float(raw)
                except (ValueError, OverflowError):  # "abc"; an integer too large for a float
                    raise BadRecord(f"label {str(raw)[:40]!r} is not a number") from None
                if not math.isfinite(label):  # "NaN", "inf", JSON's NaN: a loss and a correlation of NaN
                    raise BadRecord(f"label {str(raw)[:40]!r} is not a finite number")
            else:
                label = str(raw).strip()  # "neg " of a hand-made table is "neg", not a class of its own
                if labels is not None and label not in labels:
                    raise BadRecord(f"label {label!r} is not one of {labels}", kind=UNKNOWN_LABEL)
        has_id = id_key is not None and (fmt not in ("jsonl", "parquet") or id_key in record)
        ident = str(_get(record, id_key, (str, int))) if has_id else str(n)
        return TextExample(ident, texts[0], texts[1] if len(texts) == 2 else None, label)

    return collect(((where, (n, rec)) for n, (where, rec) in enumerate(records)), parse, path, errors)


MULTI_LABEL_SEPARATOR = "|"  # between the labels of one CSV/TSV cell


def _label_set(raw: str | list, labels: Sequence[str] | None) -> list[str]:
    """A multi-label cell as a sorted list of distinct labels, each checked against the label set if known."""
    names = raw if isinstance(raw, list) else [x for x in raw.split(MULTI_LABEL_SEPARATOR) if x.strip()]
    if not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in names):
        raise BadRecord(f"labels should be a list of strings, got {raw!r}")
    names = sorted({str(x).strip() for x in names})
    unknown = [x for x in names if labels is not None and x not in labels]
    if unknown:
        raise BadRecord(f"label(s) {unknown} not among {list(labels)}", kind=UNKNOWN_LABEL)
    return names


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
            try:
                article = json.loads(file.read_bytes().decode("utf-8-sig"))
            except UnicodeDecodeError as e:
                yield f"{file}:1", BadRecord(f"not UTF-8 text ({e.reason} at byte {e.start})")
                continue
            except json.JSONDecodeError as e:
                yield f"{file}:{e.lineno}", BadRecord(f"invalid JSON ({e.msg})")
                continue
            if not isinstance(article, dict):
                yield f"{file}:1", BadRecord("expected a JSON object")
                continue
            questions = article.get("questions")
            if not isinstance(questions, list) or not questions:  # a misspelt key read as no question, silently
                yield f"{file}: questions", BadRecord("questions should be a non-empty list, got "
                                                      + ("nothing" if questions is None else repr(questions)[:40]))
                continue
            counts = [len(v) if isinstance(v, list) else None for v in (questions, article.get("options"),
                                                                         article.get("answers"))]
            if len(set(counts)) != 1:  # extra option lists or answers were ignored
                yield f"{file}: questions", BadRecord(f"{counts[0]} questions but {counts[1]} option lists and "
                                                      f"{counts[2]} answers")
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
        if not isinstance(options[k], list) or not all(isinstance(o, str) for o in options[k]):
            raise BadRecord(f"options[{k}] should be a list of strings, got {options[k]!r}")
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
                raise BadRecord(f"tag {fields[-1]!r} is not one of {list(labels)}", where=f"{path}:{n}",
                                kind=UNKNOWN_LABEL)
            words.append(fields[0])
            tags.append(fields[-1])
        return TagExample(f"{path.name}:{where.rsplit(':', 1)[-1]}", words, tags if has_tags else None)

    return collect(sentences(), parse, path, errors)


