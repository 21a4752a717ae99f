"""Raw text to documents: the corpus forms `litebert prepare` (and the tokenizer trainer, and `litebert
analyze`) read, and the rule-based sentence splitter.

A document is a list of sentences. Text files follow BERT's create_pretraining_data.py input (one sentence per
line, a blank line between documents; or, with paragraphs=True, a paragraph per line to split); JSONL files hold
one document per record. Any file may be gzipped. Undecodable lines and unreadable records are counted in
`stats` and skipped, never silently merged into a neighbouring document.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import zlib
from typing import Iterator

from litebert.errors import DataError
from litebert.files import data_suffix

BUNDLED_CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "en_small.txt.gz")


def resolve_inputs(inputs: list[str] | str | None) -> list[str]:
    """Files for paths, globs and directories (sorted, so runs are reproducible); None -> the bundled corpus."""
    if inputs is None or inputs == []:
        return [BUNDLED_CORPUS]
    if isinstance(inputs, str):
        inputs = [inputs]
    files: list[str] = []
    for item in inputs:
        item = str(item)
        if os.path.isdir(item):
            found = sorted(p for p in glob.glob(os.path.join(item, "**", "*"), recursive=True) if os.path.isfile(p))
        elif os.path.isfile(item):
            found = [item]
        else:
            found = sorted(p for p in glob.glob(item, recursive=True) if os.path.isfile(p))
        if not found:
            raise FileNotFoundError(f"no input files match {item!r}")
        files += found
    return files


_SENTENCE_END = re.compile(r"""(?<=[.!?])["')\]]*\s+(?=["'(\[]?[A-Z0-9\u0080-\uffff])""")
_ABBREV = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|Capt|Col|Gen|Lt|Rev|No|vs|etc|e\.g|i\.e)|\b[A-Z])\.$")


def split_sentences(paragraph: str) -> list[str]:
    """Rule-based sentence split of a paragraph: after . ! ? (and closing quotes), not after Mr./Dr./initials."""
    out, start = [], 0
    for m in _SENTENCE_END.finditer(paragraph):
        head = paragraph[start : m.start()].rstrip("\"')]")
        if _ABBREV.search(head):
            continue
        out.append(paragraph[start : m.start() + len(m.group(0).rstrip())].strip())
        start = m.end()
    tail = paragraph[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def _lines(path: str, stats: dict) -> Iterator[tuple[str | None, int]]:
    """Decoded lines of a text or .gz file and their byte size; undecodable lines are counted and skipped."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f):
                try:  # a BOM at the start of the file is not text (an editor's mark; it broke line 1's JSON)
                    yield raw.decode("utf-8-sig" if n == 0 else "utf-8").rstrip("\r\n"), len(raw)
                except UnicodeDecodeError:
                    stats["skipped_non_utf8_lines"] += 1
                    yield None, len(raw)  # dropped, but it must not end a document as a blank line would
    except (OSError, EOFError, zlib.error) as e:  # truncated/corrupt gzip (a bad deflate stream), unreadable file
        raise DataError(f"cannot read {path}: {e}") from None


def iter_documents(paths: list[str], paragraphs: bool = False, text_field: str = "text",
                   stats: dict | None = None, progress=None) -> Iterator[list[str]]:
    """Documents as lists of sentences from text files (one sentence per line, blank line between documents;
    with paragraphs=True each line is a paragraph to split) or JSONL (.jsonl/.json, one document per line, its
    `text_field` holding paragraphs separated by newlines). Any file may be gzipped.

    A JSONL record without `text_field` is counted apart from bad JSON (skipped_missing_text_field), and a JSONL
    file where no record has it is an error naming the field and the keys the records do have: the usual cause
    is a wrong --text-field, which would otherwise read as a corpus of bad lines."""
    stats = stats if stats is not None else collections.Counter()
    for path in paths:
        is_jsonl = data_suffix(path) in (".jsonl", ".json")
        doc: list[str] = []
        found, other_keys = False, None  # does any record of this file have the field; keys of the first without
        for line, nbytes in _lines(path, stats):
            if progress is not None:
                progress.update(nbytes)
            stats["bytes"] += nbytes
            if line is None:
                continue
            if is_jsonl:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, dict) and text_field not in record:
                    stats["skipped_missing_text_field"] += 1
                    other_keys = list(record) if other_keys is None else other_keys
                    continue
                found = found or isinstance(record, dict)
                text = record[text_field] if isinstance(record, dict) else None
                if not isinstance(text, str):
                    stats["skipped_bad_json_lines"] += 1
                    continue
                sentences = [s for p in text.split("\n") for s in split_sentences(p)]
                if sentences:
                    yield sentences
                continue
            line = line.strip()
            if not line:
                if doc:
                    yield doc
                doc = []
            else:
                doc.extend(split_sentences(line) if paragraphs else [line])
        if other_keys is not None and not found:
            raise DataError(f"{path}: no record has the text field {text_field!r}; its records have the keys "
                             f"{other_keys[:10]} (choose one with --text-field)")
        if doc:
            yield doc


def chunks_of_documents(docs: Iterator[list[str]], chunk_chars: int) -> Iterator[list[list[str]]]:
    """Group documents into chunks of about chunk_chars characters: the unit of work and of seeding."""
    chunk, size = [], 0
    for doc in docs:
        chunk.append(doc)
        size += sum(len(s) for s in doc)
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk
