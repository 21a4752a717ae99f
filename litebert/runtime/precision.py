"""Precisions: the one list of names, the context each runs under, and the measured choice behind "auto".

bf16 or fp32 (`--precision auto`): bf16 autocast where the device has bf16 kernels (a GPU; oneDNN's AVX512-BF16,
AMX or AVX-NE-CONVERT paths on a CPU, where torch otherwise falls back to slow reference code) *and* a
measurement of the model's own step at its own shapes finds it faster; fp32 otherwise. `choose_precision` does
this; the training loop records the choice and the rates in the run's train_config.toml. int8 is for inference
on the CPU only (litebert.interop.quantize).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from litebert.runtime.cpu import bf16_supported, cpu_model, isa
from litebert.runtime.gemm import backend as gemm_backend

PRECISIONS = ("fp32", "bf16", "int8", "auto")  # every precision litebert names; each user takes a subset:
TRAINING_PRECISIONS = ("fp32", "bf16", "auto")  # int8 has no training kernels
INFERENCE_PRECISIONS = PRECISIONS  # the torch backend
EXPORTED_PRECISIONS = ("fp32", "int8")  # what an exported graph holds: ONNX Runtime runs these


def autocast(precision: str, device_type: str = "cpu"):
    """The context a precision runs under: bf16 autocast, or nothing (fp32)."""
    if precision == "bf16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def device_name(device: torch.device | str) -> str:
    """The device and the hardware behind it, for what a measurement names: "cuda:0 (NVIDIA H100 80GB HBM3)"."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"{device.type} ({cpu_model()})" if device.type == "cpu" else str(device)


def tf32_allowed() -> bool:
    """Whether cuBLAS may run fp32 matmuls in TF32 (torch.backends.cuda.matmul.allow_tf32, off by default)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def fp32_kernels(device: torch.device | str) -> str:
    """What "fp32" runs on `device`: on a GPU cuBLAS in IEEE fp32 or, where torch allows it, TF32 (10-bit
    mantissa inputs, fp32 accumulation); on the CPU the GEMM backend litebert.runtime.gemm chose (mkl/onednn)."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"fp32 matmuls on cuBLAS ({'TF32' if tf32_allowed() else 'IEEE fp32, TF32 off'})"
    return f"fp32 GEMMs on {gemm_backend().name}"


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # "fp32" or "bf16": what runs
    reason: str
    seconds: dict[str, float] = field(default_factory=dict)  # per candidate: median seconds per measured call
    rates: dict[str, float] = field(default_factory=dict)  # per candidate: `unit` per second
    unit: str = "calls"

    def record(self) -> dict:
        return {"requested": "auto", "chosen": self.precision, "reason": self.reason,
                **{f"{p}_{self.unit}_per_s": r for p, r in self.rates.items()}}

    def __str__(self) -> str:
        rates = ", ".join(f"{p} {r:,.1f} {self.unit}/s" for p, r in self.rates.items())
        return f"precision auto -> {self.precision} ({self.reason}{'; ' + rates if rates else ''})"


def choose_precision(run: Callable[[str], object], device: torch.device | str = "cpu", work: float = 1.0,
                     unit: str = "calls", repeats: int = 3,
                     combine: Callable[[list[float]], list[float]] | None = None) -> PrecisionChoice:
    """bf16 or fp32 for `--precision auto`. `run(precision)` makes one representative call under that precision
    (a training step's forward and backward at the run's batch shape, or an inference forward); `work` is what
    one call does (e.g. tokens) for the rates. Without bf16 kernels on `device`: fp32, nothing measured.
    Otherwise each is warmed up once and timed `repeats` times, interleaved; the lower median wins (a tie
    within 2% goes to fp32, the exact one). `combine` (a mean over ranks: still one call's seconds) makes all
    processes agree."""
    device = torch.device(device)
    if not bf16_supported(device):
        has = f"ISA: {' '.join(isa()) or '?'}" if device.type == "cpu" else device_name(device)
        return PrecisionChoice("fp32", f"{device.type} has no bf16 matmul kernels ({has})", unit=unit)
    candidates = ("fp32", "bf16")
    seconds: dict[str, list[float]] = {p: [] for p in candidates}
    for r in range(repeats + 1):
        for p in (candidates if r % 2 == 0 else candidates[::-1]):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            run(p)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if r:  # round 0 is the warm-up
                seconds[p].append(time.perf_counter() - start)
    medians = [statistics.median(seconds[p]) for p in candidates]
    if combine is not None:
        medians = list(combine(medians))
    med = dict(zip(candidates, medians))
    chosen = "bf16" if med["bf16"] < 0.98 * med["fp32"] else "fp32"
    ratio = med["fp32"] / med["bf16"]
    return PrecisionChoice(chosen, f"bf16 autocast measured {ratio:.2f}x the speed of {fp32_kernels(device)} at this "
                                   f"model's shapes on {device_name(device)}",
                           {p: round(s, 5) for p, s in med.items()},
                           {p: round(work / s, 2) for p, s in med.items()}, unit)


def choose_inference_precision(model: torch.nn.Module, inputs: dict, repeats: int = 3) -> PrecisionChoice:
    """`choose_precision` for inference: `model(**inputs)` under inference_mode (tokens per second)."""
    device = next(model.parameters()).device
    tokens = float(inputs["input_ids"].numel()) if "input_ids" in inputs else 1.0

    def run(precision: str) -> None:
        with torch.inference_mode(), autocast(precision, device.type):
            model(**inputs)
    return choose_precision(run, device, tokens, "tokens", repeats)
