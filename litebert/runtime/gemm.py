"""Which kernels run the model's fp32 matmuls on this machine: measured, not assumed, since the fastest path
depends on the CPU.

fp32 GEMM backends for the large linear layers (packed QKV, attention output, FFN, E->H projection, MLM head):
  mkl     torch's default: F.linear and its autograd (MKL sgemm in the x86 builds of torch)
  onednn  oneDNN's fp32 inner product on plain (dense) tensors, `torch.ops.mkldnn._linear_pointwise`, in a
          custom autograd Function whose backward also runs on oneDNN (dx = dy W, dW = dy^T x, on views:
          no layout conversions). Strict fp32: it is used only while oneDNN's fp32 math mode is left at
          full precision, never with a bf16/tf32 down-conversion.
MKL sgemm runs at the AVX-512 FMA peak on Intel CPUs, but was measured at less than half of oneDNN's rate on
an AMD EPYC with AVX-512 (MKL takes a narrower path on non-Intel CPUs); on an AVX2-only AMD EPYC (Zen 3) MKL
was the faster again. So the choice is a short measurement (forward and backward separately, ALBERT-like
shapes, ~0.5 s) on first use, cached per machine in ~/.cache/litebert/gemm.json under the CPU model, torch
version and thread count. Override: env LITEBERT_GEMM=mkl|onednn|auto, or `set_backend(...)`. A training run
keeps the choice it started with, in its checkpoints too (`keep_choice`): the two round differently.

Attention's batched matmuls stay on torch's default: this torch exposes no fp32 oneDNN batched matmul.
Under autocast, torch.compile, tracing or ONNX export, `linear` is plain F.linear.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from litebert.files import atomic_open
from litebert.runtime.cpu import cpu_model, isa

log = logging.getLogger("litebert")

BACKENDS = ("mkl", "onednn")
ENV = "LITEBERT_GEMM"  # mkl | onednn | auto
CACHE_ENV = "LITEBERT_CACHE_DIR"  # default ~/.cache/litebert
ONEDNN_MARGIN = 0.05  # oneDNN must be this much faster to be chosen: torch's default has no Python in the way
ONEDNN_MIN_MACS = 1 << 21  # a measured choice of oneDNN leaves GEMMs under ~2M multiply-adds to F.linear


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_is_strict_fp32() -> bool:
    """oneDNN's fp32 math mode: "none"/"ieee" is fp32; "bf16"/"tf32" would round inputs (not allowed here)."""
    try:
        return torch.backends.mkldnn.matmul.fp32_precision in ("none", "ieee")
    except (AttributeError, RuntimeError):
        return torch.get_float32_matmul_precision() == "highest"


# -- the kernels --------------------------------------------------------------------------------------------------

def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # (..., K) x (N, K)^T -> (..., N); any strides (oneDNN reads the weight's layout from its strides)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _forward(kernel: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _onednn_linear(x, weight, bias) if kernel == "onednn" else F.linear(x, weight, bias)


def _grad_input(kernel: str, g: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """dy (M, N), W (N, K) -> dx = dy W (M, K)."""
    return _onednn_linear(g, weight.t(), None) if kernel == "onednn" else g.mm(weight)


def _grad_weight(kernel: str, g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dy (M, N), x (M, K) -> dW = dy^T x (N, K)."""
    return _onednn_linear(g.t(), x.t(), None) if kernel == "onednn" else g.t().mm(x)


class _Linear(torch.autograd.Function):
    """y = x W^T + b with the chosen kernel forward and the chosen kernel for both backward GEMMs."""

    @staticmethod
    def forward(ctx, x, weight, bias, forward_kernel: str, backward_kernel: str):
        ctx.save_for_backward(x, weight)
        ctx.kernel, ctx.has_bias = backward_kernel, bias is not None
        return _forward(forward_kernel, x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])  # (M, N)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _grad_input(ctx.kernel, g, weight).view(x.shape)
        if ctx.needs_input_grad[1]:
            dw = _grad_weight(ctx.kernel, g, x.reshape(-1, x.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dw, db, None, None


# -- the choice ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmChoice:
    """The kernel for y = x W^T + b (forward) and for dx, dW (backward); where the choice came from; and the
    measured GFLOP/s per backend and direction when it was measured."""

    forward: str
    backward: str
    source: str  # "env", "set_backend", "cache", "measured", or "unavailable" (oneDNN missing: mkl)
    gflops: dict[str, dict[str, float]] = field(default_factory=dict)
    min_macs: int = 0  # smaller GEMMs stay on F.linear (a measured choice; a forced one applies everywhere)

    @property
    def name(self) -> str:
        if self.forward == self.backward:
            return self.forward
        return f"{self.forward} forward, {self.backward} backward"

    def record(self) -> dict:
        return {"backend": self.name, **{k: v for k, v in asdict(self).items() if k != "min_macs"}}


_forced: str | None = None
_chosen: dict[tuple, GemmChoice] = {}  # per (threads, forced, env) in this process
_pinned: GemmChoice | None = None  # a training run's choice, for its whole length (`keep_choice`)


def set_backend(name: str | None) -> None:
    """Force "mkl" or "onednn" for this process ("auto" or None: measure/cache, unless LITEBERT_GEMM says
    otherwise). set_backend wins over the environment variable."""
    global _forced
    if name not in (None, "auto", *BACKENDS):
        raise ValueError(f"GEMM backend must be one of auto, {', '.join(BACKENDS)}; got {name!r}")
    _forced = None if name == "auto" else name


@contextlib.contextmanager
def forced_backend(name: str):
    """`set_backend(name)` for the duration of a with-block."""
    global _forced
    before = _forced
    set_backend(name)
    try:
        yield
    finally:
        _forced = before


def named() -> str | None:
    """The backend that set_backend or LITEBERT_GEMM names, or None where the choice is measured (auto)."""
    env = (os.environ.get(ENV) or "").strip().lower()
    return _forced or (env if env in BACKENDS else None)


def backend() -> GemmChoice:
    """The GEMM choice for this process at its current thread count (measured and cached on first use), or the
    running training's (`keep_choice`) unless a backend is named."""
    if _pinned is not None and named() is None:
        return _pinned
    key = (torch.get_num_threads(), _forced, os.environ.get(ENV))
    choice = _chosen.get(key)
    if choice is None:
        choice = _chosen[key] = _resolve((key[2] or "auto").strip().lower() or "auto")
    return choice


def pin(choice: GemmChoice | None) -> GemmChoice | None:
    """Make `choice` what `backend()` returns until pinned again (None: chosen as usual); returns the pin it
    replaces, for the caller to put back."""
    global _pinned
    before, _pinned = _pinned, choice
    return before


def keep_choice(recorded: dict | None) -> dict:
    """Pin a training run's GEMM choice: `recorded`, what its start chose (kept in its checkpoints), or on a fresh
    start what `backend()` chooses now; returns the choice as its checkpoints record it. The two backends round
    differently, so a resume that chose again (measured again: a cache measured under load, unwritable or gone)
    could switch mid-run and no longer equal the uninterrupted run. A backend named now still wins, and where
    oneDNN is missing torch's default runs: each with a warning, when it is not the recorded choice."""
    pin(None)
    kept = GemmChoice(**{f: recorded[f] for f in GemmChoice.__dataclass_fields__ if f in recorded}) if recorded \
        else backend()
    if recorded and (named() or ("onednn" in (kept.forward, kept.backward) and not onednn_available())):
        now = backend()
        if (now.forward, now.backward) != (kept.forward, kept.backward):
            log.warning("this run started with fp32 GEMMs on %s, it goes on with %s (%s): from here its numbers "
                        "differ from an uninterrupted run's by fp32 rounding", kept.name, now.name,
                        f"{ENV} or set_backend names it" if named() else "this torch has no oneDNN")
        kept = now
    pin(kept)
    return asdict(kept)


def _resolve(env: str) -> GemmChoice:
    if env not in ("auto", *BACKENDS):
        warnings.warn(f"{ENV}={env!r} is not one of auto, {', '.join(BACKENDS)}; measuring (auto)")
        env = "auto"
    name, source = (_forced, "set_backend") if _forced else (env, "env")
    if name != "auto":
        if name == "onednn" and not onednn_available():
            warnings.warn("oneDNN is not available in this torch build: GEMMs run on torch's default (mkl)")
            return GemmChoice("mkl", "mkl", "unavailable")
        return GemmChoice(name, name, source)
    if not onednn_available():
        return GemmChoice("mkl", "mkl", "unavailable")
    key = cache_key()
    cached = _read_cache().get(key)
    if _valid(cached) and not _measured_under_load(cached):
        return GemmChoice(cached["forward"], cached["backward"], "cache", cached.get("gflops", {}), ONEDNN_MIN_MACS)
    choice = measure_backends()
    _write_cache(key, {"forward": choice.forward, "backward": choice.backward, "gflops": choice.gflops,
                       "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                       "loadavg_1min": round(os.getloadavg()[0], 2)})
    log.info("GEMM backend for %s: %s (%s)", key, choice.name, choice.gflops)
    return choice


def _valid(entry: object) -> bool:
    return isinstance(entry, dict) and entry.get("forward") in BACKENDS and entry.get("backward") in BACKENDS


def _measured_under_load(entry: dict) -> bool:
    """A choice measured while other processes kept every core busy is measured again once the machine is
    quiet (load below half the cores): a loaded measurement can rank the kernels wrongly."""
    cores = os.cpu_count() or 1
    return float(entry.get("loadavg_1min", 0.0)) >= cores and os.getloadavg()[0] < cores / 2


# Shapes of the measurement: ALBERT-base's two FFN GEMMs at 256 tokens, and a small model's (the demo's H 128).
MEASURE_SHAPES = ((256, 768, 3072), (256, 3072, 768), (512, 128, 512))


@contextlib.contextmanager
def _strict_fp32_math():
    """fp32 math as `linear` uses oneDNN: CPU autocast off and oneDNN's fp32 math mode at full precision, put
    back after. The first `backend()` call may come from inside a bf16 run's autocast or a process that set
    torch.set_float32_matmul_precision("medium"): timed there, F.linear (or both kernels) runs in bf16, and
    the cached fp32 choice of this machine would be the ranking of bf16 kernels."""
    matmul = torch.backends.mkldnn.matmul
    try:
        before, restore = matmul.fp32_precision, lambda: setattr(matmul, "fp32_precision", before)
        matmul.fp32_precision = "none"
    except (AttributeError, RuntimeError):  # a torch without oneDNN's fp32_precision: the global switch
        before, restore = torch.get_float32_matmul_precision(), lambda: torch.set_float32_matmul_precision(before)
        torch.set_float32_matmul_precision("highest")
    try:
        with torch.autocast("cpu", enabled=False):
            yield
    finally:
        restore()


def measure_backends(shapes=MEASURE_SHAPES, repeats: int = 4) -> GemmChoice:
    """Times each backend's forward GEMM and backward pair (dx, dW) on `shapes`, interleaved (min over
    repeats, the least disturbed by other processes), and picks per direction; oneDNN must win by
    ONEDNN_MARGIN. Always in strict fp32 (`_strict_fp32_math`), whatever the caller's context. Returns the
    choice with the GFLOP/s it measured."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for M, K, N in shapes:
        x, w, b, dy = (torch.randn(*s, generator=g) for s in ((M, K), (N, K), (N,), (M, N)))
        cases.append((x, w, b, dy, 2 * M * K * N))
    work = {"forward": lambda k, x, w, b, dy: _forward(k, x, w, b),
            "backward": lambda k, x, w, b, dy: (_grad_input(k, dy, w), _grad_weight(k, dy, x))}
    flops = {"forward": sum(c[-1] for c in cases), "backward": 2 * sum(c[-1] for c in cases)}
    seconds = {(k, d): [] for k in BACKENDS for d in work}
    with torch.no_grad(), _strict_fp32_math():
        for r in range(repeats + 1):  # the first round warms up (oneDNN creates its primitives)
            for kernel in (BACKENDS if r % 2 else BACKENDS[::-1]):
                for direction, fn in work.items():
                    start = time.perf_counter()
                    for x, w, b, dy, _ in cases:
                        fn(kernel, x, w, b, dy)
                    if r:
                        seconds[kernel, direction].append(time.perf_counter() - start)
    best = {kd: min(s) for kd, s in seconds.items()}
    pick = {d: "onednn" if best["onednn", d] < (1 - ONEDNN_MARGIN) * best["mkl", d] else "mkl" for d in work}
    gflops = {k: {d: round(flops[d] / best[k, d] / 1e9, 1) for d in work} for k in BACKENDS}
    return GemmChoice(pick["forward"], pick["backward"], "measured", gflops, ONEDNN_MIN_MACS)


# -- the cache ----------------------------------------------------------------------------------------------------

def cache_path() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "litebert")
    return Path(root) / "gemm.json"


def cache_key() -> str:
    return f"{cpu_model()} | {' '.join(isa())} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def _read_cache() -> dict:
    path = cache_path()
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, found {type(data).__name__}")
        return data
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        warnings.warn(f"ignoring the unreadable GEMM cache {path} ({e}); measuring again")
        return {}


def _write_cache(key: str, entry: dict) -> None:
    """Adds `entry` under `key`, replacing the cache file atomically (files.atomic_open), so a reader or
    another process writing at the same time sees the old file or a new one, never a part."""
    path = cache_path()
    try:
        data = _read_cache()
        data[key] = entry
        with atomic_open(path) as f:
            json.dump(data, f, indent=1, sort_keys=True)
    except OSError as e:  # a read-only home: measure again next time, but run
        warnings.warn(f"could not write the GEMM cache {path}: {e}")


# -- the call sites -----------------------------------------------------------------------------------------------

def eager_fp32_on_cpu(x: torch.Tensor) -> bool:
    """Whether `x` is an fp32 CPU tensor in eager mode, where a hand-picked CPU kernel may replace torch's op:
    not while compiling, tracing or scripting, whose graphs must hold the standard op (the TorchScript-based
    ONNX export traces; torch.export compiles)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32
            and not (torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()))


def _plain_only(x: torch.Tensor, weight: torch.Tensor, min_macs: int) -> bool:
    """Where only F.linear will do: outside eager fp32 on the CPU, under autocast, or a GEMM too small to pay
    oneDNN's fixed cost per call (~50 us here, against ~9 us for F.linear)."""
    return (not eager_fp32_on_cpu(x) or weight.dtype != torch.float32 or x.numel() * weight.shape[0] < min_macs
            or torch.is_autocast_enabled("cpu") or not _onednn_is_strict_fp32())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear through this machine's fastest fp32 GEMM (see the module docstring); the same result to fp32
    rounding, and the same gradients."""
    # first: backend() reads process state (threads, env) that dynamo cannot trace (a graph break per call and a
    # recompile per weight shape), and it times the CPU's GEMMs, which a GPU run never calls
    if torch.compiler.is_compiling() or not x.is_cpu:
        return F.linear(x, weight, bias)
    choice = backend()
    if (choice.forward == "mkl" and choice.backward == "mkl") or _plain_only(x, weight, choice.min_macs):
        return F.linear(x, weight, bias)
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                         or (bias is not None and bias.requires_grad))):
        return _forward(choice.forward, x, weight, bias)
    return _Linear.apply(x, weight, bias, choice.forward, choice.backward)


def _hooked(module: torch.nn.Module) -> bool:
    """Whether a hook would run in `module(x)`: its own or a global one, forward or backward. Only Module.__call__
    runs them: a module called through `linear` would skip them without a word."""
    hooks = torch.nn.modules.module
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or hooks._global_forward_hooks or hooks._global_forward_pre_hooks
                or hooks._global_backward_hooks or hooks._global_backward_pre_hooks)


def plain_module(module: torch.nn.Module, kind: type = torch.nn.Linear) -> bool:
    """Whether `module(x)` is exactly what its weights say: a `kind` itself (an nn.Linear: x @ weight.T + bias;
    not one swapped for a quantized one, or wrapped by an adapter such as PEFT's LoRA layers) without hooks
    (paper.analysis reads the E->H projection's output; attribution libraries hook backward). Only then may its
    weight be used directly."""
    return type(module) is kind and not _hooked(module)


def dense(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`module(x)` for the model's nn.Linear layers, through `linear`; a module that is not `plain_module` is
    called as itself, so it behaves exactly as it would, and so is every module under torch.compile."""
    if torch.compiler.is_compiling() or not plain_module(module):
        return module(x)
    return linear(x, module.weight, module.bias)


__all__ = ["BACKENDS", "GemmChoice", "backend", "cache_key", "cache_path", "dense", "eager_fp32_on_cpu",
           "forced_backend", "keep_choice", "linear", "measure_backends", "named", "pin", "plain_module",
           "set_backend"]
