"""Where a pretraining step's time goes: torch.profiler's op table for one side (a diagnostic, not a benchmark).

On a GPU (`--device cuda`) the table lists CUDA kernels by their own device time, and a JSON line sums that time
by kind of kernel (GEMM, attention, normalisation, elementwise, reduction, optimizer, copy), so the share that is
not matrix work, the part fusion can remove, is one number.

    .venv/bin/python bench/profile_step.py --side litebert --precision bf16 --shape 8x128
    python bench/profile_step.py --device cuda --preset albert-base-v2 --shape 64x512 --precision bf16 [--compile layers]
"""

from __future__ import annotations

import common
import torch
from common import (
    base_parser,
    configure,
    emit,
    load_pair,
    machine,
    pretraining_batch,
    save_random_model,
    synchronize,
    to_device,
)
from train_step import make_step

from litebert.config import AlbertConfig
from litebert.model import compile_layers

# Kernel-name fragments, first match wins (cuBLAS/cuDNN/CUTLASS GEMMs on Hopper are sm90_xmma/nvjet/cutlass).
KERNEL_KINDS = (
    ("attention", ("flash", "fmha", "attention", "mem_eff")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "splitk", "matmul")),
    ("optimizer", ("multi_tensor", "fused_adam", "foreach", "adam")),
    ("normalisation", ("layer_norm", "layernorm", "norm_kernel")),
    ("softmax_and_loss", ("softmax", "nll_loss", "cross_entropy")),
    ("reduction", ("reduce",)),
    ("copy", ("copy", "memcpy", "memset", "cat", "index", "gather", "scatter", "embedding")),
    ("elementwise", ("elementwise", "triton")),
)


def kind_of(kernel: str) -> str:
    name = kernel.lower()
    return next((kind for kind, fragments in KERNEL_KINDS if any(f in name for f in fragments)), "other")


def device_time_by_kind(prof) -> dict:
    """Milliseconds of CUDA kernel time per kind, and each kind's share of the total."""
    cuda = torch.autograd.DeviceType.CUDA
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if event.device_type != cuda:
            continue
        us = getattr(event, "self_device_time_total", None)
        us = event.self_cuda_time_total if us is None else us
        totals[kind_of(event.key)] = totals.get(kind_of(event.key), 0.0) + us / 1e3
    whole = sum(totals.values()) or 1.0
    return {"kernel_ms": round(whole, 2),
            "by_kind": {k: {"ms": round(v, 2), "share": round(v / whole, 3)}
                        for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--side", default="litebert", choices=["litebert", "transformers"])
    parser.add_argument("--shape", default="8x128")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", choices=["model", "layers"],
                        help="profile litebert compiled whole (model) or block by block (layers, compile_layers)")
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    configure(args)
    config = AlbertConfig.from_preset("tiny" if args.quick else args.preset)
    B, T = map(int, args.shape.split("x"))
    ours, theirs = load_pair(save_random_model(config, args.seed), "AlbertForPreTraining", "sdpa")
    model = ours if args.side == "litebert" else theirs
    if args.compile:
        model = torch.compile(model) if args.compile == "model" else compile_layers(model)
    step = make_step(model,
                     to_device(pretraining_batch(config, B, T, args.seed)), args.precision)
    for _ in range(max(args.warmup, 2 if args.compile else 0)):
        step()
    synchronize()
    on_gpu = common.DEVICE.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    with torch.profiler.profile(activities=activities) as prof:
        step()
        synchronize()
    sort = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.rows))
    if on_gpu:
        emit({"bench": "profile_step", "side": args.side, "preset": args.preset, "shape": args.shape,
              "precision": args.precision, "compiled": args.compile, **device_time_by_kind(prof),
              "machine": machine()})


if __name__ == "__main__":
    main()
