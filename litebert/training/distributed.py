"""Rank, world size and device, from one place.

Before `train` joins the process group a verb already needs the world size (to size its micro-batches) and
whether it is rank 0 (to write summaries); after `train` returns the group is gone again. `rank_and_size`
answers for all three moments: the process group's own numbers while it exists, torchrun's environment
(RANK, WORLD_SIZE) otherwise, which are the numbers the group is, or will be, built from.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from litebert.errors import ConfigError
from litebert.runtime.device import resolve_device


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # we initialised the process group, so we tear it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _group_exists() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_size() -> tuple[int, int]:
    """(rank, world size): the process group's, or torchrun's environment before and after it ((0, 1) alone)."""
    if _group_exists():
        return dist.get_rank(), dist.get_world_size()
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return (int(os.environ.get("RANK", "0")) if size > 1 else 0), size


def world_size() -> int:
    """Processes in the run (1 without torchrun)."""
    return rank_and_size()[1]


def is_main_process() -> bool:
    """Rank 0 (or no torchrun): the process that writes summaries and prints."""
    return rank_and_size()[0] == 0


def process_device(device: str) -> torch.device:
    """`device` ("auto", "cuda", ...) as this process's: under torchrun "cuda" is the GPU of its LOCAL_RANK."""
    return resolve_device(device, int(os.environ.get("LOCAL_RANK", "0")))


def setup_distributed(device: str = "auto", timeout_minutes: float = 60.0) -> Dist:
    """Join the process group that torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), or use
    one the caller already initialised; single process otherwise. NCCL on GPU, gloo on CPU.

    `timeout_minutes` bounds every collective, the barriers included: while rank 0 evaluates and writes a
    checkpoint the other ranks wait in a barrier, and NCCL's default of 10 minutes is shorter than an
    evaluation of albert-base on a large held-out set."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = process_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)  # also makes it the device whose RNG state checkpoints save
    owns_group = not _group_exists() and world_size() > 1
    if owns_group:
        _bind_world_defaults_before_the_group_exists()
        try:
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                                    timeout=timedelta(minutes=timeout_minutes))
        except RuntimeError as e:
            if elastic_restart() and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                # torchrun shares its rendezvous store with the workers; after a restart they can read the
                # previous attempt's addresses and connect to ports nobody listens on any more.
                raise ConfigError(f"joining the process group after elastic restart "
                                  f"{os.environ['TORCHELASTIC_RESTART_COUNT']} failed ({str(e).splitlines()[0]}): "
                                  "start torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 so that each restart "
                                  "gets a fresh store (pytorch/pytorch#135712)") from e
            raise
    return Dist(*rank_and_size(), local_rank, dev, owns_group)


def elastic_restart() -> int:
    """How many times torchrun's elastic agent has restarted this run's workers (0: the first attempt)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def tf32_flags() -> tuple[bool, bool]:
    """The process's TF32 switches (matmul, cuDNN), to put back when a run ends: `train` called in a notebook or a
    test must not leave every later fp32 matmul of the process in TF32."""
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def restore_tf32_flags(flags: tuple[bool, bool]) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def configure_device(device: torch.device, tf32: bool) -> dict[str, Any]:
    """Choices that exist only on CUDA, made here and returned for the run's record.

    TF32 (Ampere and later): float32 matmuls and convolutions read their inputs with a 10-bit mantissa and
    accumulate in fp32, several times the fp32 rate; PyTorch leaves it off for matmuls. The legacy flags are
    used on purpose: mixing them with the newer `fp32_precision` API makes `get_float32_matmul_precision()`
    raise. `train` puts the flags back when the run ends (tf32_flags). On CPU nothing is changed (the same flag
    would not touch oneDNN, but a CPU run stays untouched)."""
    if device.type != "cuda":
        return {"device": str(device), "tf32": False}
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return {"device": str(device), "tf32": tf32, "gpu": torch.cuda.get_device_name(device)}


def _bind_world_defaults_before_the_group_exists() -> None:
    """torch.distributed.nn.functional, which DistributedDataParallel imports, binds `group.WORLD` as its
    functions' default argument when it is first imported. Imported after the group exists, it holds the group
    for ever: destroy_process_group cannot free it, and gloo's worker threads live on into interpreter shutdown,
    where one that releases a finished collective (tensors Python had let go) must take the GIL and aborts the
    process: "terminate called without an active exception", about 1 run in 30 of two loaded ranks. Imported
    first, its defaults are None."""
    importlib.import_module("torch.distributed.nn.functional")


def teardown_distributed(env: Dist) -> None:
    """Leave the process group if `setup_distributed` created it (one the caller made stays theirs)."""
    if env.owns_group and _group_exists():
        dist.destroy_process_group()


def barrier() -> None:
    """Wait for every rank (nothing to wait for alone)."""
    if _group_exists() and dist.get_world_size() > 1:
        dist.barrier()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (a collective): one decision, taken on rank 0, for all of them."""
    if not _group_exists() or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (a collective: all ranks call it)."""
    if not _group_exists() or dist.get_world_size() == 1:
        return [obj]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks, in place (a collective)."""
    if _group_exists() and dist.get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor
