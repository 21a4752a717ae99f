"""Pretraining step, litebert vs transformers: forward, MLM + SOP loss, backward, optimizer step.

Both sides load the same saved albert-base directory and train on the same batch (full-length sequence
pairs, 15% of positions masked) with torch.optim.AdamW(fused=True) (one kernel; ~3x faster than foreach
here, and the same for both sides), fp32 or bf16 autocast. transformers runs
with whichever of its "eager" and "sdpa" attention is faster here (both are timed, the faster is kept and
named in the output). Steps are interleaved; `speedup` is peer median / litebert median from this one run.
MFU = model FLOPs (3x forward, see common.forward_flops) per second / the matmul ceiling of that precision,
measured by a GEMM burst interleaved with the steps (bench/gemm.py's fastest path), so under the same load.

    .venv/bin/python bench/train_step.py            # 8x128 and 2x512, fp32 and bf16 (~4 min)
    .venv/bin/python bench/train_step.py --quick    # smoke run on a tiny model
"""

from __future__ import annotations

import contextlib
import statistics

import torch

from common import (base_parser, configure, emit, forward_flops, interleaved, load_pair, machine, pretraining_batch,
                    ratio, save_random_model, stats)
from gemm import gflops, paths

from litebert.config import AlbertConfig


def autocast(precision: str):
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def make_step(model, batch: dict, precision: str):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)  # one kernel; 3x the foreach step here
    model.train()

    def step():
        with autocast(precision):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss
    return step


def gemm_probe(precision: str) -> tuple[callable, int]:
    """A fixed burst of GEMMs at ALBERT's FFN shape on the fastest path for this precision, and its FLOPs.

    It runs interleaved with the model steps as a third side, so the ceiling that MFU divides by is
    measured under the same machine load as the steps (this machine is shared; a ceiling taken a minute
    earlier can be 2x off)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    M, K, N = 1024, 768, 3072
    fns = paths(M, K, N, dtype)
    best = max(fns, key=lambda k: statistics.median(gflops(fns[k], 2 * M * K * N, 2, 5)))
    n = 40 if precision == "bf16" else 8  # ~0.1-0.2 s per burst

    def burst():
        for _ in range(n):
            fns[best]()
    return burst, n * 2 * M * K * N


def mfu_fields(result: dict, times: dict, flops: int, probe_flops: int) -> None:
    """Adds the ceiling (median of the interleaved GEMM probe) and every side's MFU at its median."""
    peak = probe_flops / statistics.median(times.pop("gemm_probe")) / 1e9
    result["ceiling_gflops"] = round(peak, 1)
    for side, seconds in times.items():
        result[side]["mfu"] = round(flops / statistics.median(seconds) / 1e9 / peak, 3)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--shapes", default="8x128,2x512", help="comma-separated BxT")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--attn", default="auto", choices=["auto", "eager", "sdpa"],
                        help="transformers attention implementation (auto: time both, keep the faster)")
    args = parser.parse_args()
    configure(args)
    preset = "tiny" if args.quick else args.preset
    shapes = ["4x32"] if args.quick else args.shapes.split(",")
    repeats = args.repeats or (2 if args.quick else 4)
    config = AlbertConfig.from_preset(preset)
    directory = save_random_model(config, args.seed)

    for shape in shapes:
        B, T = map(int, shape.split("x"))
        batch = pretraining_batch(config, B, T, args.seed)
        masked = int((batch["labels"] != -100).sum())
        flops = 3 * forward_flops(config, B, T, mlm_positions=masked, loss_rows=masked + B)
        for precision in args.precisions.split(","):
            ours, theirs = load_pair(directory, "AlbertForPreTraining", "sdpa")
            steps = {"litebert": make_step(ours, batch, precision)}
            candidates = {"sdpa": theirs}
            if args.attn in ("auto", "eager"):
                candidates["eager"] = load_pair(directory, "AlbertForPreTraining", "eager")[1]
            if args.attn == "eager":
                del candidates["sdpa"]
            trial = interleaved({k: make_step(m, batch, precision) for k, m in candidates.items()}, 1, 1)
            attn = min(trial, key=lambda k: trial[k][0])
            steps["transformers"] = make_step(candidates[attn], batch, precision)
            steps["gemm_probe"], probe_flops = gemm_probe(precision)
            times = interleaved(steps, args.warmup, repeats)
            result = {"bench": "train_step", "preset": preset, "shape": shape, "precision": precision,
                      "optimizer": "AdamW(fused)", "peer_attn": attn, "repeats": repeats,
                      "tokens": B * T, "model_gflop_per_step": round(flops / 1e9, 2)}
            for side in ("litebert", "transformers"):
                result[side] = stats(times[side], B * T, "tokens")
            result["speedup"] = ratio(times, "litebert", "transformers")
            mfu_fields(result, times, flops, probe_flops)
            result["machine"] = machine()
            emit(result)


if __name__ == "__main__":
    main()
