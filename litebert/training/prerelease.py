"""Reading litebert's own files written before its first release (0.1.0, November 2026), in one place.

Drop this module, and the calls into it, after 2027-06-01: by then no run started before the release is still
resumed. Each entry names the format it reads and what current files hold instead:

  optimizer_state_by_name   MLM-only pretraining checkpoints whose optimizer still holds the pooler's and SOP
                            head's state (those two are frozen now); matched by parameter name, extra dropped
  OBJECTS_ADDED_SINCE       train_state.pt objects that older checkpoints lack ("record": the run's identity,
                            compared on resume, and its evaluation of the initial weights; "log_window": the
                            steps the metrics log had not recorded yet)
  Accepting, meta_fingerprint  pretraining checkpoints whose data fingerprint hashed all of meta.json (now: not
                            the shard layout nor the number of workers, which leave the examples as they are)
  cuda_rng_state            one CUDA RNG state per visible GPU (now: this rank's device only)
  verify_by_reading         COMPLETE markers without a file list (now: each file's size and sha256)
  untrained_of              pretraining summaries without the initial weights' evaluation
  OLD_DEMO_ENTRIES          a demo directory's data/ and tasks/ (now: data64/, data128/), and summary.json as a
                            demo's sign where the marker file is missing
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from litebert.errors import CheckpointError

log = logging.getLogger("litebert")

OBJECTS_ADDED_SINCE = ("record", "log_window")
OLD_DEMO_ENTRIES = {"data", "tasks"}
OLD_DEMO_SIGN = "summary.json"


def optimizer_state_by_name(optimizer: torch.optim.Optimizer, saved: dict[str, Any], path: Any) -> dict[str, Any]:
    """`saved` (an optimizer's state_dict) indexed for `optimizer` by parameter name, when both record names
    and their lists differ. Checkpoints of MLM-only pretraining written before the pooler and SOP head were
    frozen hold state for those two, which the run no longer optimizes: dropped, with a note; a parameter the
    checkpoint has no state for is a CheckpointError naming it."""
    now = optimizer.state_dict()["param_groups"]
    groups = saved.get("param_groups") or []
    if not all("param_names" in g for g in [*groups, *now]) or \
            [g["param_names"] for g in groups] == [g["param_names"] for g in now]:
        return saved  # the same parameters (or no names to match by): torch checks the sizes
    where = {name: (g, index) for g in groups for name, index in zip(g["param_names"], g["params"])}
    missing = [name for g in now for name in g["param_names"] if name not in where]
    if missing:
        raise CheckpointError(f"cannot resume from {path}: its optimizer state has no entry for "
                              f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} (another model?)")
    state, remapped = {}, []
    for group in now:
        sources = {id(where[name][0]) for name in group["param_names"]}
        if len(sources) > 1:  # their saved groups may differ in weight decay or layer adaptation
            raise CheckpointError(f"cannot resume from {path}: the optimizer's parameter groups differ from the "
                                  f"checkpoint's ({group['param_names'][0]} and others were saved in other groups)")
        hyper = {k: v for k, v in where[group["param_names"][0]][0].items() if k not in ("params", "param_names")}
        remapped.append({**hyper, "params": group["params"], "param_names": group["param_names"]})
        for name, index in zip(group["param_names"], group["params"]):
            _, saved_index = where[name]
            if saved_index in saved["state"]:
                state[index] = saved["state"][saved_index]
    dropped = sorted(set(where) - {name for g in now for name in g["param_names"]})
    if dropped:
        log.info("%s: optimizer state of %d parameter(s) this run does not train is not used (%s)", path,
                 len(dropped), ", ".join(dropped[:4]) + (" ..." if len(dropped) > 4 else ""))
    return {"state": state, "param_groups": remapped}


@dataclass(frozen=True)
class Accepting:
    """A part of a run's identity (RunRecord) recorded as `now`, which a checkpoint written before its fingerprint
    changed holds as `before`: either matches, so that such a checkpoint is still checked, as strictly as then."""

    now: Any
    before: Any


def meta_fingerprint(meta: Mapping[str, Any], train_examples: int) -> dict[str, Any]:
    """Pretraining's data fingerprint as older checkpoints recorded it: meta.json less its timing and paths."""
    kept = {k: v for k, v in meta.items() if k not in ("seconds", "inputs", "tokenizer_dir")}
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
    return {"meta_sha256": digest, "train_examples": train_examples}


def cuda_rng_state(saved: Any, device_index: int) -> torch.Tensor | None:
    """This device's CUDA RNG state from a checkpoint's "cuda" entry: one state, or (before) a list of one per
    visible GPU, from which this device's is taken (None when the list is shorter)."""
    if isinstance(saved, (list, tuple)):
        return saved[device_index] if device_index < len(saved) else None
    return saved


def verify_by_reading(path: Any, readers: Sequence[Callable[[Any], Any]]) -> str | None:
    """What is wrong with a checkpoint whose marker lists no files, found by reading each file (`readers`: the
    training state's and the weights' loaders), or None when all of them read."""
    try:
        for read in readers:
            read(path)
    except Exception as e:  # noqa: BLE001 - any failure to read is damage
        return str(e)
    return None


def untrained_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation of the initial weights in a pretraining summary; empty where the run resumed from a
    checkpoint older than that evaluation."""
    return summary.get("untrained") or {}
