"""The matmul ceiling of this machine, per precision and per GEMM backend: what model FLOP utilisation (MFU)
is measured against.

Paths tried for each precision (the best one is the ceiling); a path this CPU cannot run (oneDNN's bf16 needs
AVX512BW/VL/DQ or AVX-NE-CONVERT) is reported as unavailable, with the reason:
  * `torch.mm` / `F.linear`: torch's default dispatch ("torch": MKL sgemm for fp32; oneDNN for bf16 where the
    CPU has bf16 kernels, else a slow reference kernel);
  * oneDNN directly ("onednn"): `torch._C._nn.mkldnn_linear` on tensors already in oneDNN layout (no
    conversions timed), and `torch.ops.mkldnn._linear_pointwise` on plain tensors (no conversions needed:
    what litebert.runtime.gemm's "onednn" backend calls);
  * fp32 backward (dx = dy W and dW = dy^T x, as litebert.runtime.gemm computes them), on each backend.
Shapes: ALBERT-base's FFN GEMM at 8x128 tokens (1024x768 @ 768x3072) and a large square one (2048^3).
On x86 with AMX (Sapphire Rapids and later) bf16 runs on the tile units and is several times fp32.

    .venv/bin/python bench/gemm.py [--quick]
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from common import base_parser, configure, emit, machine

from litebert.runtime import gemm

BACKEND_OF = {"torch.mm": "torch", "F.linear": "torch", "onednn_linear": "onednn",
              "onednn_linear_pointwise": "onednn", "backward torch": "torch", "backward onednn": "onednn"}


def gflops(fn, flops: int, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(flops / (time.perf_counter() - start) / 1e9)
    return out


def paths(M: int, K: int, N: int, dtype: torch.dtype, backward: bool = False) -> tuple[dict, dict]:
    """({name: forward callable} for the paths this CPU runs, {name: why not} for those it cannot). With
    `backward`, fp32 only: {name: callable computing dx and dW} instead (twice the FLOPs of a forward)."""
    x, w, b = torch.randn(M, K).to(dtype), torch.randn(N, K).to(dtype), torch.randn(N).to(dtype)
    if backward:
        dy = torch.randn(M, N).to(dtype)
        candidates = {"backward torch": lambda: (gemm._grad_input("mkl", dy, w), gemm._grad_weight("mkl", dy, x)),
                      "backward onednn": lambda: (gemm._grad_input("onednn", dy, w),
                                                  gemm._grad_weight("onednn", dy, x))}
    else:
        wt = w.t().contiguous()  # (K, N): the layout MKL likes for x @ W
        candidates = {"torch.mm": lambda: torch.mm(x, wt), "F.linear": lambda: F.linear(x, w, b),
                      "onednn_linear_pointwise": lambda: gemm._onednn_linear(x, w, b)}
        try:
            xm, wm, bm = x.to_mkldnn(), w.to_mkldnn(), b.to_mkldnn()
            candidates["onednn_linear"] = lambda: torch._C._nn.mkldnn_linear(xm, wm, bm)
        except RuntimeError as e:
            candidates["onednn_linear"] = e
    if M * K * N > 16 ** 3:  # which paths run is a property of the CPU, not of the shape: ask a tiny one
        available, unavailable = paths(16, 16, 16, dtype, backward)
        return {name: fn for name, fn in candidates.items() if name in available}, unavailable
    available, unavailable = {}, {}
    for name, fn in candidates.items():
        try:
            if isinstance(fn, Exception):
                raise fn
            if BACKEND_OF[name] == "onednn" and not gemm.onednn_available():
                raise RuntimeError("torch built without oneDNN")
            fn()  # a kernel the CPU lacks raises here (e.g. "mkldnn_linear: bf16 path needs the cpu support ...")
            available[name] = fn
        except RuntimeError as e:
            unavailable[name] = str(e).splitlines()[0][:200]
    return available, unavailable


def main() -> None:
    parser = base_parser(__doc__)
    args = parser.parse_args()
    configure(args)
    repeats = args.repeats or (3 if args.quick else 15)
    shapes = [(256, 768, 768)] if args.quick else [(1024, 768, 3072), (2048, 2048, 2048)]
    record: dict = {"bench": "gemm", "repeats": repeats, "results": {}, "unavailable": {}, "ceiling_gflops": {},
                    "ceiling_gflops_by_backend": {}}
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        by_backend: dict[str, float] = {}
        for M, K, N in shapes:
            fns, missing = paths(M, K, N, dtype)
            flops = {path: 2 * M * K * N for path in fns}
            if dtype == torch.float32:
                backward, missing_bw = paths(M, K, N, dtype, backward=True)
                fns.update(backward)
                missing.update(missing_bw)
                flops.update({path: 4 * M * K * N for path in backward})
            for path, why in missing.items():
                record["unavailable"][f"{name} {path}"] = why
            # A reference kernel (bf16 without bf16 kernels) can take seconds per call: ~3 s per path at most.
            rate = min(gflops(fn, flops[path], 0, 1)[0] for path, fn in fns.items())  # also a first warm-up
            n = max(1, min(repeats, int(3.0 * rate * 1e9 / max(flops.values()))))
            for _ in range(2 if n > 1 else 1):  # two interleaved passes, so a noisy moment hits all paths
                for path, fn in fns.items():
                    g = gflops(fn, flops[path], args.warmup if n == repeats else 0, n)
                    key = f"{name} {path} {M}x{K}x{N}"
                    prev = record["results"].get(key, {"gflops_max": 0.0})
                    if max(g) > prev["gflops_max"]:
                        record["results"][key] = {"gflops_median": round(statistics.median(g), 1),
                                                  "gflops_max": round(max(g), 1)}
                    if not path.startswith("backward"):  # the ceiling is the forward GEMM's rate
                        backend = BACKEND_OF[path]
                        by_backend[backend] = max(by_backend.get(backend, 0.0), statistics.median(g))
        record["ceiling_gflops_by_backend"][name] = {k: round(v, 1) for k, v in by_backend.items()}
        record["ceiling_gflops"][name] = round(max(by_backend.values(), default=0.0), 1)
    record["machine"] = machine()
    record["note"] = ("ceiling = best median over paths and shapes; MFU elsewhere divides by it. Backends: torch = "
                      "torch's default dispatch (fp32: MKL), onednn = oneDNN called directly")
    emit(record)


if __name__ == "__main__":
    main()
