"""Weights split over several safetensors files, in transformers' layout: `model-00001-of-00003.safetensors`, ...
and `model.safetensors.index.json` mapping each tensor to its file (`save_pretrained(max_shard_size=...)` in
either library). litebert reads such a directory as it reads one model.safetensors, and writes one when asked
for a shard size; writing either layout removes the other, or a stale file could be read in place of the new.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import TYPE_CHECKING

from litebert.errors import CheckpointError, ConfigError
from litebert.files import fsync_path, read_json_object, sha256_file, write_text_atomically

if TYPE_CHECKING:  # only in annotations: the tokenizer and data stages read INDEX_NAME without loading torch
    import torch

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = WEIGHTS_NAME + ".index.json"
STAGE_PREFIX = ".weights-"  # write_weights' staging folder inside the model directory
SHARD_PATTERN = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
# transformers' units (utils.hub.convert_file_size_to_int): KiB... are powers of 2, KB... of 10, Kb... bits
UNITS = {"GIB": 2 ** 30, "MIB": 2 ** 20, "KIB": 2 ** 10, "GB": 10 ** 9, "MB": 10 ** 6, "KB": 10 ** 3}


def shard_bytes(size: int | str) -> int:
    """max_shard_size as bytes, read as transformers reads it ("5GB", "500MB", "1GiB", or an int)."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    match = re.fullmatch(r"(\d+)([KMG]i?[Bb])", str(size).strip())
    if not match or (match.group(2).endswith("b") and "i" in match.group(2)):
        raise ConfigError(f"max_shard_size={size!r}: give bytes (an int) or a size such as \"5GB\", \"200MB\", \"1GiB\"")
    number, unit = int(match.group(1)), match.group(2)
    total = number * UNITS[unit.upper()]
    return max(1, total // 8 if unit.endswith("b") else total)


def _safetensors_io():
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file
    return SafetensorError, load_file, save_file


def read_sharded(directory: str) -> dict[str, torch.Tensor]:
    """The tensors of a sharded directory: every file the index names, and exactly the keys it maps to each."""
    index_path = os.path.join(directory, INDEX_NAME)
    weight_map = read_json_object(index_path, CheckpointError).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path}: not a transformers shard index (no weight_map of file names)")
    error, load_file, _ = _safetensors_io()
    state: dict[str, torch.Tensor] = {}
    for name in sorted(set(weight_map.values())):
        path = os.path.join(directory, name)
        if os.path.basename(name) != name or not os.path.isfile(path):
            raise CheckpointError(f"{index_path} names {name}, which the directory lacks")
        try:
            tensors = load_file(path)
        except (error, OSError, RuntimeError) as e:
            raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e})") from None
        expected = {k for k, v in weight_map.items() if v == name}
        if set(tensors) != expected:
            odd = sorted(set(tensors) ^ expected)[0]
            raise CheckpointError(f"{path} and {index_path} disagree about {odd}")
        state.update(tensors)
    return state


def sharded_digest(directory: str) -> str | None:
    """One sha256 over the index and every shard (what weights_digest gives a single file), None when unsharded."""
    index_path = os.path.join(directory, INDEX_NAME)
    if not os.path.isfile(index_path):
        return None
    digest = hashlib.sha256(sha256_file(index_path).encode())
    for name in sorted(n for n in os.listdir(directory) if SHARD_PATTERN.fullmatch(n)):
        digest.update(sha256_file(os.path.join(directory, name)).encode())
    return digest.hexdigest()


def write_weights(tensors: dict[str, torch.Tensor], directory: str, max_shard_size: int | str | None) -> None:
    """model.safetensors, or shards of at most max_shard_size bytes (a tensor larger than that alone in its
    file, as transformers does) with their index; the other layout's files are removed. Every new file is
    staged in a hidden folder inside the directory first (a full disk changes nothing; a killed save's folder
    goes at the next), then they go in around the file a reader takes first, the commit: model.safetensors, or
    the index. Before a new index goes in, the old one and model.safetensors go, so a kill in between leaves
    shards without an index (a loud error), never old and new weights mixed."""
    _, _, save_file = _safetensors_io()
    groups = _shard_groups(tensors, None if max_shard_size is None else shard_bytes(max_shard_size))
    names = [WEIGHTS_NAME] if len(groups) == 1 else \
        [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    old = [n for n in os.listdir(directory) if SHARD_PATTERN.fullmatch(n) or n in (INDEX_NAME, WEIGHTS_NAME)]
    for name in os.listdir(directory):  # what a killed save staged (a reader never looks there)
        if name.startswith(STAGE_PREFIX) and os.path.isdir(os.path.join(directory, name)):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    # inside it: on its filesystem when it is a mount point, and writable wherever it is
    staged = tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=directory)
    try:
        for name, group in zip(names, groups):
            save_file(group, os.path.join(staged, name), metadata={"format": "pt"})
        if len(groups) > 1:
            total = sum(t.numel() * t.element_size() for t in tensors.values())
            weight_map = {key: name for name, group in zip(names, groups) for key in group}
            write_text_atomically(os.path.join(staged, INDEX_NAME), json.dumps(
                {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n")
            for name in (INDEX_NAME, WEIGHTS_NAME):  # the reader's first choices go before the shards change
                if name in old:
                    os.remove(os.path.join(directory, name))
            names.append(INDEX_NAME)  # the commit, last
        for name in names:
            os.replace(os.path.join(staged, name), os.path.join(directory, name))
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    for name in old:
        if name not in names and os.path.exists(os.path.join(directory, name)):
            os.remove(os.path.join(directory, name))
    fsync_path(directory)


def _shard_groups(tensors: dict[str, torch.Tensor], limit: int | None) -> list[dict[str, torch.Tensor]]:
    """The tensors in order, cut into files of at most `limit` bytes (one file without a limit)."""
    groups: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if limit is not None and groups[-1] and size + nbytes > limit:
            groups.append({})
            size = 0
        groups[-1][key] = tensor
        size += nbytes
    return groups
