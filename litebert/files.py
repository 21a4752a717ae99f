"""Writing results so that nothing is lost: a file or a directory is replaced whole or not at all.

Every verb writes through these: a kill, a full disk or an exception while writing leaves the previous result
intact (the new one is staged beside it, fsync'ed, then renamed into place).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's (or a directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Replace `path` by `text` (UTF-8): written to a sibling temporary file, fsync'ed, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """`obj` as JSON (UTF-8, non-ASCII kept, numpy scalars as floats), replacing `path` atomically."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=_plain)
    write_text_atomically(path, text + "\n")


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy and torch scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_dir_atomically(final: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Replace the directory `final` by what `fill(tmp)` writes into the sibling `.tmp-<name>`: every file is
    fsync'ed before the rename, so a kill at any moment leaves the old directory or the new one, never a mix.
    Between the two renames that replace an existing directory the old one waits as `.trash-<name>`, which
    `remove_partial` puts back."""
    final = Path(final)
    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp, trash = parent / f".tmp-{final.name}", parent / f".trash-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)  # debris of an earlier crash
    tmp.mkdir()
    try:
        fill(tmp)
        for path in tmp.rglob("*"):
            if path.is_file():
                fsync_path(path)
        fsync_path(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # e.g. a marker-less leftover, a rerun over the same step, a better best/
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(final, trash)
        os.rename(tmp, final)
        shutil.rmtree(trash)
    else:
        os.rename(tmp, final)
    fsync_path(parent)
    return final



def data_suffix(path: str | os.PathLike) -> str:
    """The suffix that says a file's format, under any .gz: "train.jsonl.gz" -> ".jsonl"."""
    return Path(Path(path).name.lower().removesuffix(".gz")).suffix


def same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether a and b are one existing file or directory, however spelled ("x" / "./x/", symlinks)."""
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """shutil.copyfile, except that a file copied onto itself is left as it is (shutil raises SameFileError)."""
    if not same_path(src, dst):
        shutil.copyfile(src, dst)
