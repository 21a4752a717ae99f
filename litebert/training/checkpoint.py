"""Training checkpoints: `out_dir/step_N/`, each one a valid HF model directory plus the state to resume.

    step_N/config.json, model.safetensors   model.save_pretrained(dir): loads in litebert and transformers
    step_N/spiece.model, ...                tokenizer files, when the run was given a tokenizer
    step_N/train_state.pt                   optimizer, scheduler, step, data position, RNG states (state.py)
    step_N/COMPLETE                         written last: only directories holding it are checkpoints; it
                                            lists every file with its size and sha256
    step_N/evaluation.json                  added after the step's evaluation: its metrics (see loop.py)

A checkpoint is written into `out_dir/.tmp-step_N`, the marker added, every file fsync'ed, and the directory
renamed into place (`write_dir_atomically`, also used for fine-tuning's best/), so a crash at any moment
leaves either the previous checkpoints or a new complete one. What the disk does later (a truncated copy, a
bad sector) is caught on resume by `verify_checkpoint`, and `resume_point` falls back to the newest
checkpoint that is intact (and refuses the resume when none is).
`train_state.pt` holds only tensors, lists, dicts and primitives and is read with `weights_only=True`:
loading a checkpoint never runs pickled code.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from litebert.errors import CheckpointError
from litebert.files import (
    read_json_object,
    remove_dead_stages,
    sha256_file,
    sha256_named_files,
    write_dir_atomically,
    write_json,
)
from litebert.text.transformers_files import SPIECE_FILE, match_model_max_length
from litebert.training import prerelease
from litebert.weight_shards import INDEX_NAME
from litebert.weights import read_state_dict

log = logging.getLogger("litebert")

MARKER = "COMPLETE"
STATE_NAME = "train_state.pt"
EVALUATION_NAME = "evaluation.json"
DAMAGED_SUFFIX = ".damaged"
# Damaged checkpoints kept aside for inspection, the newest by step: enough to tell one bad copy from a fault that
# recurs, while a disk that keeps damaging them fills with no more than this many dead checkpoints.
KEEP_DAMAGED = 2
_STEP_DIR = re.compile(r"^step_(\d+)$")
_DAMAGED_DIR = re.compile(r"^step_(\d+)" + re.escape(DAMAGED_SUFFIX) + "$")
# Files of a model directory that are not tokenizer files (never copied from a tokenizer dir).
_NOT_TOKENIZER = {"config.json", "model.safetensors", "pytorch_model.bin", INDEX_NAME, STATE_NAME, MARKER,
                  EVALUATION_NAME}


def step_dir(out_dir: str | os.PathLike, step: int) -> Path:
    return Path(out_dir) / f"step_{step}"


def list_checkpoints(out_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints under out_dir as (step, path), oldest first. Half-written ones are ignored."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    found = []
    for child in out.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / MARKER).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    found = list_checkpoints(out_dir)
    return found[-1][1] if found else None


def save_checkpoint(out_dir: str | os.PathLike, step: int, model: nn.Module, train_state: dict[str, Any], *,
                    tokenizer: str | os.PathLike | None = None, keep_last: int = 0) -> Path:
    """Atomically write `out_dir/step_{step}` and prune to the newest `keep_last` (<= 0 keeps all).

    `model` must have `save_pretrained(dir)`; `train_state` is saved with torch.save as is (keep it to
    tensors, dicts, lists and primitives, so `load_train_state` can read it with weights_only=True).
    `tokenizer` is a tokenizer directory (its files are copied) or a single file such as spiece.model.
    """
    out = Path(out_dir)

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            _copy_tokenizer(Path(tokenizer), tmp)
        torch.save(train_state, tmp / STATE_NAME)
        files = {p.relative_to(tmp).as_posix(): _file_record(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        (tmp / MARKER).write_text(json.dumps({"step": step, "files": files}) + "\n")

    final = write_dir_atomically(step_dir(out, step), fill)
    if keep_last > 0:
        for _, old in list_checkpoints(out)[:-keep_last]:
            _remove_checkpoint(old)
    return final


def remove_partial(out_dir: str | os.PathLike) -> list[Path]:
    """Delete what crashed saves left behind (.tmp-/.trash- dirs, step dirs without the marker, file stages of
    dead writers), after putting back a `.trash-<name>` whose replacement never arrived (a kill between
    `write_dir_atomically`'s renames)."""
    out = Path(out_dir)
    removed = []
    if out.is_dir():
        for child in list(out.iterdir()):
            original = out / child.name[len(".trash-"):]
            if child.name.startswith(".trash-") and child.is_dir() and not original.exists():
                os.rename(child, original)
        for child in out.iterdir():
            partial = child.name.startswith((".tmp-", ".trash-"))
            unmarked = _STEP_DIR.match(child.name) and not (child / MARKER).is_file()
            if child.is_dir() and (partial or unmarked):
                shutil.rmtree(child)
                removed.append(child)
        removed += remove_dead_stages(out)
    return removed


def load_train_state(checkpoint_dir: str | os.PathLike) -> dict[str, Any]:
    """The dict saved as train_state.pt, read with weights_only=True (no pickled code runs)."""

    path = Path(checkpoint_dir) / STATE_NAME
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # a truncated zip, or pickled code that weights_only refuses
        first = str(e).splitlines()[0] if str(e) else ""
        raise CheckpointError(f"{path}: unreadable training state ({type(e).__name__}: {first})") from None


def verify_checkpoint(checkpoint_dir: str | os.PathLike) -> str | None:
    """What is wrong with a complete checkpoint's files, or None when they are intact: each file the marker
    lists has its size and sha256 (a truncated or altered copy fails). Checkpoints written before the marker
    listed its files are checked by reading them: train_state.pt loads, model.safetensors parses."""
    path = Path(checkpoint_dir)
    try:
        files = read_json_object(path / MARKER).get("files")
    except (OSError, ValueError) as e:
        return f"{MARKER}: unreadable ({e})"
    if files is None:
        return prerelease.verify_by_reading(path, [load_train_state, lambda p: read_state_dict(os.fspath(p))])
    if not (isinstance(files, dict) and all(isinstance(e, dict) and {"size", "sha256"} <= set(e)
                                            for e in files.values())):
        return f"{MARKER}: its list of files is damaged"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != expected["size"]:
            return f"{name} has {file.stat().st_size} bytes, {expected['size']} were written"
        if sha256_file(file) != expected["sha256"]:
            return f"{name} differs from what was written (sha256)"
    return None


def resume_point(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint whose files are intact, or None when out_dir holds no checkpoint (call on
    one rank: it renames). Damaged ones newer than it are renamed to `step_N.damaged` (the newest KEEP_DAMAGED
    kept for inspection, never picked again) with a warning: a resume loses the steps since the intact one, not
    the run.
    When every checkpoint is damaged the resume is refused (CheckpointError) and nothing is renamed: going on
    as a fresh start would train from step 0 and drop the run's metrics log, all under a warning."""
    damaged = []
    for _, path in reversed(list_checkpoints(out_dir)):
        problem = verify_checkpoint(path)
        if problem is None:
            for bad, why in damaged:
                _move_aside(bad, why, path)
            if damaged:
                _prune_damaged(out_dir)
            return path
        damaged.append((path, problem))
    if damaged:
        found = "; ".join(f"{bad.name}: {why}" for bad, why in damaged)
        raise CheckpointError(f"cannot resume from {out_dir}: none of its checkpoints is intact ({found}); restore "
                              "one from a copy, or remove them to start the run again from step 0")
    return None


def _move_aside(path: Path, problem: str, intact: Path) -> None:
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    shutil.rmtree(aside, ignore_errors=True)
    os.rename(path, aside)
    log.warning("checkpoint %s is damaged (%s): moved to %s; resuming from %s", path, problem, aside.name,
                intact.name)


def _prune_damaged(out_dir: str | os.PathLike) -> None:
    found = sorted((int(m.group(1)), child) for child in Path(out_dir).iterdir()
                   if (m := _DAMAGED_DIR.match(child.name)))
    for _, old in found[:-KEEP_DAMAGED]:
        shutil.rmtree(old, ignore_errors=True)
        log.warning("removed %s: only the newest %d damaged checkpoints are kept", old.name, KEEP_DAMAGED)


def read_evaluation(checkpoint_dir: str | os.PathLike) -> dict[str, float] | None:
    """The metrics of the evaluation of this checkpoint's weights, or None when it was not evaluated (a kill
    between the save and the evaluation that followed it)."""
    try:
        return json.loads((Path(checkpoint_dir) / EVALUATION_NAME).read_text())
    except (OSError, ValueError):
        return None


def write_evaluation(checkpoint_dir: str | os.PathLike, metrics: dict[str, float]) -> None:
    write_json(Path(checkpoint_dir) / EVALUATION_NAME, metrics)


def fingerprint(path: str | os.PathLike) -> str:
    """sha256 of a tokenizer: its spiece.model (the vocabulary; a file path is hashed as is), else every
    tokenizer file of the directory (those `_copy_tokenizer` copies), by name."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    if (path / SPIECE_FILE).is_file():
        return sha256_file(path / SPIECE_FILE)
    return sha256_named_files((file.name, file) for file in sorted(p for p in path.iterdir() if _is_tokenizer_file(p)))


def load_model_weights(model: nn.Module, checkpoint_dir: str | os.PathLike) -> None:
    """Load a checkpoint's weights into an existing model, strictly.

    Every key of the model's state dict must be in the file, except keys that are the same tensor as one
    that is (tied weights, which save_pretrained stores once); keys the model lacks are an error.
    """

    state, path = read_state_dict(os.fspath(checkpoint_dir))
    own = model.state_dict(keep_vars=True)  # the parameters: tied ones found by their shared storage
    unexpected = sorted(set(state) - set(own))
    if unexpected:
        raise CheckpointError(f"{path}: weights the model does not have, e.g. {unexpected[0]}")
    for key, value in state.items():
        if value.shape != own[key].shape:
            raise CheckpointError(f"{path}: {key} has shape {tuple(value.shape)}, the model's "
                                  f"{tuple(own[key].shape)}: the checkpoint is of another model")
    loaded_storages = {own[k].untyped_storage().data_ptr() for k in state}
    missing = [k for k in own if k not in state and own[k].untyped_storage().data_ptr() not in loaded_storages]
    if missing:
        raise CheckpointError(f"{path}: missing {len(missing)} weights, e.g. {missing[0]}")
    model.load_state_dict(state, strict=False)


# -- RNG state as tensors and lists, so that weights_only loading accepts it ----------------------------------

def rng_state() -> dict[str, Any]:
    """Python, numpy, torch and CUDA generator states, converted to tensors / lists / primitives."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # This process's GPU only (setup_distributed made it current): every visible GPU's states would not
        # restore on a node with fewer of them, and the others are not this rank's to restore.
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        cuda = prerelease.cuda_rng_state(cuda, torch.cuda.current_device())
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)


# -- helpers ------------------------------------------------------------------------------------------------

def _copy_tokenizer(source: Path, target: Path) -> None:
    if source.is_file():
        shutil.copy2(source, target / source.name)
        return
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such tokenizer file or directory")
    for path in source.iterdir():
        if _is_tokenizer_file(path):
            shutil.copy2(path, target / path.name)
    match_model_max_length(str(target))  # the copied tokenizer_config.json names the model's positions


def _is_tokenizer_file(path: Path) -> bool:
    return path.is_file() and path.name not in _NOT_TOKENIZER and path.suffix not in (".safetensors", ".bin")


def _file_record(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def _remove_checkpoint(path: Path) -> None:
    """Remove the marker first, so a crash halfway through leaves a directory that no longer looks valid."""
    (path / MARKER).unlink(missing_ok=True)
    shutil.rmtree(path)
