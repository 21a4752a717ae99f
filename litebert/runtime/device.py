"""Where a model runs: a device name ("auto", "cpu", "cuda", "cuda:N") checked against this machine."""

from __future__ import annotations

import torch

from litebert.errors import ConfigError


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """TrainConfig.device as a torch.device ("cuda" means this rank's GPU). A name torch does not parse, a device
    type other than cpu/cuda, or a GPU this machine lacks, is a one-line ConfigError here; otherwise torch fails
    later, inside set_device or the first .to(), with a traceback (an AttributeError on CPU-only builds)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(f"cuda:{local_rank}" if device == "cuda" else device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {device!r} is not one litebert trains on (use auto, cpu, cuda or cuda:N)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r}: no CUDA GPU is available to this torch "
                              f"({torch.__version__}); use cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r}: there is no {dev} ({torch.cuda.device_count()} CUDA devices)")
    return dev


def check_device(device: str) -> str:
    """`device` if this machine has it (see resolve_device), else the ConfigError: a config's check of its field."""
    resolve_device(device)
    return device
