"""What an ensemble of fine-tuned models is, below the verbs that build it (`litebert ensemble`) and use it
(`litebert.pipeline`): the average of the members' family scores, the check that their scores can be averaged
at all (one family, the same labels, the same tokenizer), and the ensemble.json that records the members."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object
from litebert.tasks.families import Family
from litebert.tasks.fine_tuned import family_for_config
from litebert.text.transformers_files import SPIECE_FILE

ENSEMBLE_FILE = "ensemble.json"  # what `litebert ensemble --out DIR` writes: members, weights, calibration


def average_scores(members: Sequence[Sequence[np.ndarray]], weights: Sequence[float] | None = None) -> list[np.ndarray]:
    """Per feature, the weighted mean of the members' arrays (every member scored the same features). Computed
    in float64 and returned in the members' dtype, so one member with weight 1 comes back unchanged."""
    if not members:
        raise ConfigError("an ensemble needs at least one member")
    w = np.full(len(members), 1 / len(members)) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(w) != len(members) or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(f"weights {list(w)} do not fit {len(members)} members (non-negative, not all zero)")
    w = w / w.sum()
    if len({len(m) for m in members}) != 1:
        raise ConfigError(f"members scored different numbers of features: {[len(m) for m in members]}")
    averaged = []
    for rows in zip(*members):
        if len({np.shape(r) for r in rows}) != 1:
            raise ConfigError(f"members' scores of one feature differ in shape: {[np.shape(r) for r in rows]}")
        mean = sum(wi * np.asarray(r, dtype=np.float64) for wi, r in zip(w, rows))
        averaged.append(mean.astype(np.asarray(rows[0]).dtype))
    return averaged


def check_members(directories: Sequence[str], family: Family, what: str) -> list[str] | None:
    """The members' shared label list (None for a family without labels), after checking that each is a model
    of `family` (`what` names it in errors), with the first member's labels and tokenizer: else their scores
    would not line up."""
    first = directories[0]
    labels = AlbertConfig.load(first).label_names
    spiece = _file_hash(first, SPIECE_FILE)
    for d in directories:
        config = AlbertConfig.load(d)
        if config.architectures and (family.head.__name__ not in config.architectures
                                     or family_for_config(config) is not family):
            raise ConfigError(f"{d} is not fine-tuned for {what}: its architectures are {config.architectures}; "
                              "fine-tune it first (litebert finetune)")
        if config.label_names != labels:
            raise ConfigError(f"{d} has labels {config.label_names}, {first} has {labels}: members must share their "
                              "labels")
        if _file_hash(d, SPIECE_FILE) != spiece:
            raise ConfigError(f"{d} and {first} have different tokenizers: members must share one")
    return labels


def read_ensemble(directory: str | os.PathLike) -> tuple[list[str], list[float], dict[str, Any] | None]:
    """(member directories, weights, calibration) of the ensemble `litebert ensemble --out directory` recorded."""
    saved = read_json_object(os.path.join(directory, ENSEMBLE_FILE), CheckpointError)
    try:
        members = saved["members"]
        return [m["dir"] for m in members], [float(m["weight"]) for m in members], saved.get("calibration")
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{os.path.join(directory, ENSEMBLE_FILE)}: no member list with dir and weight "
                              "(not written by litebert ensemble?)") from None


def is_ensemble(directory: str | os.PathLike) -> bool:
    return os.path.isfile(os.path.join(directory, ENSEMBLE_FILE))


def _file_hash(directory: str, name: str) -> str | None:
    """sha256 of a file of the directory, or None where it has none."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
