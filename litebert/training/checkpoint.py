"""Training checkpoints: `out_dir/step_N/`, each one a valid HF model directory plus the state to resume.

    step_N/config.json, model.safetensors   model.save_pretrained(dir): loads in litebert and transformers
    step_N/spiece.model, ...                tokenizer files, when the run was given a tokenizer
    step_N/train_state.pt                   optimizer, scheduler, step, data position, RNG states (state.py)
    step_N/COMPLETE                         written last: only directories holding it are checkpoints

A checkpoint is written into `out_dir/.tmp-step_N`, the marker added, every file fsync'ed, and the directory
renamed into place (`write_dir_atomically`, also used for fine-tuning's best/), so a crash at any moment
leaves either the previous checkpoints or a new complete one.
`train_state.pt` holds only tensors, lists, dicts and primitives and is read with `weights_only=True`:
loading a checkpoint never runs pickled code.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from litebert.files import write_dir_atomically

MARKER = "COMPLETE"
STATE_NAME = "train_state.pt"
_STEP_DIR = re.compile(r"^step_(\d+)$")
# Files of a model directory that are not tokenizer files (never copied from a tokenizer dir).
_NOT_TOKENIZER = {"config.json", "model.safetensors", "pytorch_model.bin", STATE_NAME, MARKER}


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
        (tmp / MARKER).write_text(json.dumps({"step": step}) + "\n")

    final = write_dir_atomically(step_dir(out, step), fill)
    if keep_last > 0:
        for _, old in list_checkpoints(out)[:-keep_last]:
            _remove_checkpoint(old)
    return final


def remove_partial(out_dir: str | os.PathLike) -> list[Path]:
    """Delete what crashed saves left behind (.tmp-/.trash- dirs, step dirs without the marker), after putting
    back a `.trash-<name>` whose replacement never arrived (a kill between `write_dir_atomically`'s renames)."""
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
    return removed


def load_train_state(checkpoint_dir: str | os.PathLike) -> dict[str, Any]:
    """The dict saved as train_state.pt, read with weights_only=True (no pickled code runs)."""
    path = Path(checkpoint_dir) / STATE_NAME
    return torch.load(path, map_location="cpu", weights_only=True)


def load_model_weights(model: nn.Module, checkpoint_dir: str | os.PathLike) -> None:
    """Load a checkpoint's weights into an existing model, strictly.

    Every key of the model's state dict must be in the file, except keys that are the same tensor as one
    that is (tied weights, which save_pretrained stores once); keys the model lacks are an error.
    """
    from litebert.weights import CheckpointError, read_state_dict

    state, path = read_state_dict(os.fspath(checkpoint_dir))
    own = model.state_dict()
    unexpected = sorted(set(state) - set(own))
    if unexpected:
        raise CheckpointError(f"{path}: weights the model does not have, e.g. {unexpected[0]}")
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
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- helpers ------------------------------------------------------------------------------------------------

def _copy_tokenizer(source: Path, target: Path) -> None:
    if source.is_file():
        shutil.copy2(source, target / source.name)
        return
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such tokenizer file or directory")
    for path in source.iterdir():
        if path.is_file() and path.name not in _NOT_TOKENIZER and path.suffix not in (".safetensors", ".bin"):
            shutil.copy2(path, target / path.name)


def _remove_checkpoint(path: Path) -> None:
    """Remove the marker first, so a crash halfway through leaves a directory that no longer looks valid."""
    (path / MARKER).unlink(missing_ok=True)
    shutil.rmtree(path)
