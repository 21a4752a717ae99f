"""Writing results so that nothing is lost: a file or a directory is replaced whole or not at all.

Every verb writes through these: a kill, a full disk or an exception while writing leaves the previous result
intact (the new one is staged beside it, fsync'ed, then renamed into place).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from litebert.errors import ConfigError, DataError


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's (or a directory's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def naming(error: OSError, path: str | os.PathLike, staging: Path | None = None, note: str = "",
           written: int = 0, needed: int | None = None) -> OSError:
    """`error` with a file name the user knows: `path` when it has none (a full disk while writing says "No
    space left on device" and nothing else), and a file inside `staging` named as it will be inside `path`
    (not as .tmp-NAME/...); `note` is added to the system's words; `written`, `needed`: see `_space`."""
    if error.errno is None:
        return error
    filename = error.filename
    if error.errno in _FULL_ERRNOS:
        if error.filename2 is not None:  # shutil's copy names its source first
            filename = error.filename2
        note = f" ({_space(path, written, needed)}){note}"
    if filename is None:
        filename = os.fspath(path)
    elif staging is not None and str(filename).startswith(str(staging)):
        filename = os.fspath(path) + str(filename)[len(str(staging)):]
    elif not note:
        return error
    named = type(error)(error.errno, f"{error.strerror}{note}", filename)
    named.__traceback__ = error.__traceback__
    return named


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How the libraries that write for us say "disk full" without an OSError: torch.save (RuntimeError "file write
# failed"), safetensors (SafetensorError "IoError(Os { code: 28, kind: StorageFull ..."), tokenizers (Exception
# "No space left on device (os error 28)"), numpy's tofile (OSError without errno: "N requested and M written"),
# sentencepiece (OSError or RuntimeError "... No space left on device").
_FULL_WORDS = ("no space left on device", "storagefull", "os error 28", "code: 28", "file write failed",
               "disk quota exceeded")


def disk_full(error: BaseException, path: str | os.PathLike, note: str = "", written: int = 0,
              needed: int | None = None) -> OSError | None:
    """An OSError(ENOSPC) naming `path` (the destination), the free bytes there and the bytes needed (see
    `_space`), for any library's way of saying the disk is full; None when `error` is something else (it is
    then raised as it is)."""
    if isinstance(error, OSError) and error.errno is not None:
        return naming(error, path, note=note, written=written, needed=needed) if error.errno in _FULL_ERRNOS \
            else None
    text = str(error).lower()
    numpy_short = isinstance(error, OSError) and " requested and " in text
    if not (numpy_short or any(words in text for words in _FULL_WORDS)):
        return None
    named = OSError(errno.ENOSPC, f"No space left on device ({_space(path, written, needed)}){note}",
                    os.fspath(path))
    named.__traceback__ = error.__traceback__
    return named


def _space(path: str | os.PathLike, written: int = 0, needed: int | None = None) -> str:
    """The free bytes where `path` is written, and the room the write needs: `needed` where the writer knows it
    (a copy: its source's size), else the size of the result it replaces (a rerun's), else, for a first write,
    what was staged before the disk filled (`written`, a lower bound: the rest was still to come)."""
    path = Path(path)
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    size = _bytes_in(path)
    room = f", {needed} needed" if needed else f", {size} needed as before" if size else \
        f", more than {written} needed ({written} written when it filled)" if written else ""
    return f"{shutil.disk_usage(parent).free} bytes free there{room}"


def _bytes_in(path: Path) -> int:
    """The size of a file, or of every file under a directory; 0 for nothing there."""
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
    except OSError:
        return 0


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """`open(path, mode)` for writing a whole file that replaces `path` only when the with-block ends without
    an error: written to a sibling temporary file (.tmp-NAME.HOST.PID), fsync'ed, then renamed, so a reader, or
    another process writing at the same time, sees the old file or a new one, never a part. Text modes default
    to UTF-8."""
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    path = Path(path)
    if path.exists() and not path.is_file():  # a device or a pipe (--out /dev/stdout): nothing to replace
        with open(path, mode, **kwargs) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = f".tmp-{path.name}.{socket.gethostname()}."
    _remove_dead_stages(path.parent, stage)
    tmp = path.with_name(f"{stage}{os.getpid()}")  # per process: two writers never share a stage
    try:
        with open(tmp, mode, **kwargs) as f:
            _hold(f)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        written = _bytes_in(tmp)
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno is not None:
            raise naming(e, path, written=written) from None
        full = disk_full(e, path, written=written)
        if full is not None:
            raise full from None
        raise


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 100) -> None:
    """A matplotlib figure written atomically (atomic_open), in the format its file name ends with."""
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=Path(path).suffix.lstrip(".").lower() or "png", dpi=dpi)


def check_replaceable(path: str | os.PathLike | None, ours: Callable[[Path], bool], kind: str,
                      overwrite: bool = False, hint: str = "choose another --out, or pass --overwrite to replace it"
                      ) -> None:
    """Refuse, before any work, to replace a file the verb did not write: `--out` given the name of an input
    (predict --input data.jsonl --out data.jsonl) or of anything else would be lost whole. An existing
    non-empty regular file is replaced only when `ours(path)` recognises it as `kind`, or with overwrite."""
    p = Path(path) if path else None
    if overwrite or p is None or not p.is_file() or p.stat().st_size == 0:
        return
    try:
        mine = ours(p)
    except (OSError, ValueError, UnicodeDecodeError):
        mine = False
    if not mine:
        raise ConfigError(f"{path} exists and is not {kind}: {hint}")


def read_npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) from the header of an open .npy file, which is left at the array's data (nothing is
    unpickled); a DataError (a ValueError) for a file that is not .npy of format version 1.0 or 2.0, what
    np.save writes."""
    import numpy as np
    version = np.lib.format.read_magic(f)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise DataError(f".npy format version {version[0]}.{version[1]}")
    shape, _, dtype = readers[version](f)
    return shape, dtype


def _hold(f: IO) -> None:
    """Lock a stage while it is written (POSIX): the lock dies with its writer, however it dies."""
    if os.name == "posix":
        import fcntl
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)


def _remove_dead_stages(parent: Path, stage: str) -> None:
    """Stages `stage`PID that a kill left (no handler ran), cleared by the next writer of the same file."""
    for stale in parent.glob(glob.escape(stage) + "*"):
        _remove_if_dead(stale, stale.name[len(stage):])


def remove_dead_stages(directory: str | os.PathLike) -> list[Path]:
    """Every file stage a kill left in `directory`, whatever file it was for: a run killed while writing a file
    it never writes again (its last plot, say) is cleared here, when the run is resumed, not by a next writer.
    Returns those removed."""
    own_host = re.compile(r"\.tmp-.+\." + re.escape(socket.gethostname()) + r"\.(\d+)")
    removed = []
    for stale in Path(directory).glob(".tmp-*"):
        match = own_host.fullmatch(stale.name)
        if match and stale.is_file() and _remove_if_dead(stale, match.group(1)):
            removed.append(stale)
    return removed


def _remove_if_dead(stale: Path, pid: str) -> bool:
    """Remove the stage `stale` if its writer is dead: a process this host does not run whose lock is free.
    Both, because hosts (or containers) that share a name and a filesystem but not their processes would
    otherwise take each other's live stages. POSIX only."""
    if os.name != "posix" or not pid.isdigit() or _running(int(pid)):
        return False
    import fcntl
    try:
        with open(stale, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its writer lives elsewhere
            stale.unlink(missing_ok=True)
    except OSError:
        return False
    return True


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists (POSIX)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Replace `path` by `text` (UTF-8), atomically (atomic_open)."""
    with atomic_open(path) as f:
        f.write(text)


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


def restore_replaced(final: str | os.PathLike) -> bool:
    """Put back the directory `final` from its `.trash-<name>` when a kill came between the two renames of
    `write_dir_atomically` (the old one moved aside, the new one not yet in place). Returns whether it did."""
    final = Path(final)
    trash = final.parent / f".trash-{final.name}"
    if trash.is_dir() and not final.exists():
        os.rename(trash, final)
        return True
    return False


def _staged(final: Path, fill: Callable[[Path], None]) -> Path:
    """`fill` run on a fresh sibling `.tmp-<name>` of `final`, every file fsync'ed; removed if anything fails.
    An OSError without a file name (a full disk inside `fill`) is given `final`'s."""
    tmp = final.parent / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)  # debris of an earlier crash
    tmp.mkdir()
    try:
        fill(tmp)
        for path in tmp.rglob("*"):
            if path.is_file():
                fsync_path(path)
        fsync_path(tmp)
    except BaseException as e:
        written = _bytes_in(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        note = f" (nothing replaced: {final} is as it was)" if final.exists() else " (nothing written)"
        if isinstance(e, OSError) and e.errno is not None:
            raise naming(e, final, tmp, note, written) from None
        full = disk_full(e, final, note, written)
        if full is not None:
            raise full from None
        raise
    return tmp


def write_dir_atomically(final: str | os.PathLike, fill: Callable[[Path], None]) -> Path:
    """Replace the directory `final` by what `fill(tmp)` writes into the sibling `.tmp-<name>`: every file is
    fsync'ed before the rename, so a kill at any moment leaves the old directory or the new one, never a mix.
    Between the two renames that replace an existing directory the old one waits as `.trash-<name>`, which
    `restore_replaced` (called here first, and by the training loop's `remove_partial`) puts back."""
    given, final = Path(final), Path(os.path.abspath(final))  # "." has no name to stage beside
    final.parent.mkdir(parents=True, exist_ok=True)
    restore_replaced(final)
    _swap_dir(_staged(final, fill), final)
    return given


def _swap_dir(tmp: Path, final: Path) -> None:
    trash = final.parent / f".trash-{final.name}"
    if final.exists():  # e.g. a marker-less leftover, a rerun over the same step, a better best/
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(final, trash)
        os.rename(tmp, final)
        shutil.rmtree(trash)
    else:
        os.rename(tmp, final)
    fsync_path(final.parent)


def write_files_atomically(final: str | os.PathLike, fill: Callable[[Path], None], owned: Collection[str] = (),
                           last: Collection[str] = (), overwrite: bool = True) -> Path:
    """Write the files `fill(tmp)` makes into the directory `final`, which may hold files of others.

    `owned` names the files this kind of result consists of. When `final` is missing or holds nothing else, it
    is replaced whole (as `write_dir_atomically`: the old set or the new one, never a mix). Otherwise the other
    files stay, and each new file replaces its namesake with one rename, those in `last` after the rest (e.g.
    config.json, which says a model directory is there); an owned file the new set lacks is removed. A failure
    while writing (a full disk) leaves `final` untouched; a kill during the renames may leave some files new.
    overwrite=False: a ConfigError, before anything in `final` changes, if a file there would be replaced by
    different bytes or removed (an identical rerun goes through).
    """
    given, final = Path(final), Path(os.path.abspath(final))  # "." has no name to stage beside
    final.parent.mkdir(parents=True, exist_ok=True)
    restore_replaced(final)
    here = Path(os.getcwd())
    whole = not final.exists() or (all(p.name in owned for p in final.iterdir())
                                   and final != here and final not in here.parents)  # never swap away the cwd
    tmp = _staged(final, fill)
    names = sorted(os.listdir(tmp), key=lambda name: name in last)
    try:
        if any((tmp / name).is_dir() for name in names):
            raise IsADirectoryError(f"write_files_atomically writes files only, got directories in {names}")
        removed = [n for n in owned if n not in names and (final / n).is_file()]
        if not overwrite:
            clash = sorted(n for n in names if (final / n).exists() and not _same_bytes(tmp / n, final / n))
            if clash + removed:
                raise ConfigError(f"{final} already holds {', '.join(clash + removed)}, which this would replace: "
                                  "choose another output directory, or pass --overwrite")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if whole:
        _swap_dir(tmp, final)
        return given
    for name in names:
        os.replace(tmp / name, final / name)
    for name in removed:
        (final / name).unlink()
    os.rmdir(tmp)
    fsync_path(final)
    return given


def _same_bytes(a: Path, b: Path) -> bool:
    if not b.is_file() or a.stat().st_size != b.stat().st_size:
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk = fa.read(1 << 20)
            if chunk != fb.read(1 << 20):
                return False
            if not chunk:
                return True


def read_json_object(path: str | os.PathLike, error: type[Exception] = ValueError) -> dict[str, Any]:
    """The JSON object in a file; a missing file is FileNotFoundError, a damaged (non-JSON, non-UTF-8) or
    non-object one is `error` with a one-line message naming it."""
    return read_json_as(path, dict, error)


def read_json_as(path: str | os.PathLike, kind: type, error: type[Exception] = ValueError) -> Any:
    """The JSON value of type `kind` (dict: an object, list: an array) in a file, with read_json_object's errors."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid JSON, damaged or truncated ({e})") from None
    if not isinstance(data, kind):
        raise error(f"{path}: expected a JSON {'array' if kind is list else 'object'}, got {type(data).__name__}")
    return data


def data_suffix(path: str | os.PathLike) -> str:
    """The suffix that says a file's format, under any .gz: "train.jsonl.gz" -> ".jsonl"."""
    return Path(Path(path).name.lower().removesuffix(".gz")).suffix


def same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether a and b are one existing file or directory, however spelled ("x" / "./x/", symlinks)."""
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """shutil.copyfile, except that a file copied onto itself is left as it is (shutil raises SameFileError)."""
    if not same_path(src, dst):
        try:
            shutil.copyfile(src, dst)
        except OSError as e:  # a full disk: name the destination that is full, not the source
            full = disk_full(e, dst, needed=_bytes_in(Path(src)))
            raise (full or e) from None


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's contents, read in pieces (a checkpoint's weights need not fit in memory)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_named_files(files: Iterable[tuple[str, str | os.PathLike]]) -> str:
    """One sha256 over (name, file) pairs in the order given: a renamed, edited, added or removed file changes it.
    Checkpoints record tokenizer fingerprints made this way, so its formula stays as it is."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + sha256_file(path).encode())
    return digest.hexdigest()
