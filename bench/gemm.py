"""The matmul ceiling of this machine, per precision: what model FLOP utilisation (MFU) is measured against.

Paths tried for each precision (the best one is the ceiling):
  * `torch.mm` / `F.linear`: torch's default dispatch (MKL sgemm for fp32; oneDNN for bf16);
  * oneDNN directly: `torch._C._nn.mkldnn_linear` on tensors already in oneDNN layout (no conversions
    timed), fp32 and bf16.
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


def gflops(fn, flops: int, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(flops / (time.perf_counter() - start) / 1e9)
    return out


def paths(M: int, K: int, N: int, dtype: torch.dtype) -> dict:
    x, w, b = torch.randn(M, K).to(dtype), torch.randn(N, K).to(dtype), torch.randn(N).to(dtype)
    wt = w.t().contiguous()  # (K, N): the layout MKL likes for x @ W
    xm, wm, bm = x.to_mkldnn(), w.to_mkldnn(), b.to_mkldnn()
    fns = {"torch.mm": lambda: torch.mm(x, wt), "F.linear": lambda: F.linear(x, w, b),
           "onednn_linear": lambda: torch._C._nn.mkldnn_linear(xm, wm, bm)}
    runnable = {}
    for name, fn in fns.items():
        try:
            fn()
        except RuntimeError:  # oneDNN's bf16 linear needs AVX512-BF16 or AVX-NE-CONVERT: an AVX2 EPYC has neither
            continue
        runnable[name] = fn
    return runnable


def main() -> None:
    parser = base_parser(__doc__)
    args = parser.parse_args()
    configure(args)
    repeats = args.repeats or (3 if args.quick else 15)
    shapes = [(1024, 768, 3072)] if args.quick else [(1024, 768, 3072), (2048, 2048, 2048)]
    record: dict = {"bench": "gemm", "machine": machine(), "repeats": repeats, "results": {}, "ceiling_gflops": {}}
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        best = 0.0
        for M, K, N in shapes:
            fns = paths(M, K, N, dtype)
            for _ in range(2):  # two interleaved passes over the paths, so a noisy moment hits all of them
                for path, fn in fns.items():
                    g = gflops(fn, 2 * M * K * N, args.warmup, repeats)
                    key = f"{name} {path} {M}x{K}x{N}"
                    prev = record["results"].get(key, {"gflops_max": 0.0})
                    if max(g) > prev["gflops_max"]:
                        record["results"][key] = {"gflops_median": round(statistics.median(g), 1),
                                                  "gflops_max": round(max(g), 1)}
                    best = max(best, statistics.median(g))
        record["ceiling_gflops"][name] = round(best, 1)
    record["note"] = "ceiling = best median over paths and shapes; MFU elsewhere divides by it"
    emit(record)


if __name__ == "__main__":
    main()
