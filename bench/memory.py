"""Peak memory of a pretraining step, litebert vs transformers, each side in a fresh subprocess.

A child process loads one side only (the same saved directory for both), builds AdamW and the batch, resets
the kernel's peak-RSS counter (writing 5 to /proc/self/clear_refs resets VmHWM) and runs `--steps` steps.
Reported: peak RSS during those steps minus RSS just before them, i.e. all that training adds on top of the
resident model and batch: gradients, AdamW state (equal on both sides: 3 x parameters), activations and
temporaries. A fresh process per side keeps one side's allocator caches and freed pages out of the other's
figure. Measuring after a warm-up step instead would under-count: the allocator keeps the first step's
pages, so later peaks reuse them and barely move RSS.

--device cuda: the same on the GPU, from torch's allocator: peak allocated during the steps minus allocated just
before them (torch.cuda.max_memory_allocated after reset_peak_memory_stats), per side in a fresh process.

    .venv/bin/python bench/memory.py                  # 8x128 and 2x512, fp32 and bf16 (~3 min)
    .venv/bin/python bench/memory.py --quick
    python bench/memory.py --device cuda --shapes 64x512 --precisions bf16
"""

from __future__ import annotations

import json
import subprocess
import sys

import common
import torch
from common import base_parser, configure, emit, machine, pretraining_batch, save_random_model, to_device

from litebert.config import AlbertConfig


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def child(args) -> None:
    from train_step import make_step
    configure(args)
    config = AlbertConfig.load(args.dir)
    B, T = map(int, args.shape.split("x"))
    if args.side == "litebert":
        from litebert.model import AlbertForPreTraining
        model = AlbertForPreTraining.from_pretrained(args.dir)
    else:
        import transformers
        model = transformers.AlbertForPreTraining.from_pretrained(args.dir, attn_implementation=args.attn)
    if args.checkpointing and args.side == "litebert":
        model.albert.encoder.gradient_checkpointing = True
    model.to(common.DEVICE)
    step = make_step(model, to_device(pretraining_batch(config, B, T, args.seed)), args.precision)
    if common.DEVICE.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        print(json.dumps({"allocated_before_mib": round(before / 2**20, 1), "peak_mib": round(peak / 2**20, 1),
                          "peak_delta_mib": round((peak - before) / 2**20, 1)}))
        return
    before = status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    for _ in range(args.steps):
        step()
    print(json.dumps({"rss_before_mib": round(before / 1024, 1), "rss_peak_mib": round(status_kib("VmHWM") / 1024, 1),
                      "peak_delta_mib": round((status_kib("VmHWM") - before) / 1024, 1)}))


def measure(args, side: str, shape: str, precision: str, directory: str, checkpointing: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--dir", directory, "--shape", shape, "--precision", precision,
           "--threads", str(args.threads), "--attn", args.attn, "--steps", str(args.steps), "--seed", str(args.seed),
           "--malloc", args.malloc, "--device", args.device]
    if args.tf32:
        cmd.append("--tf32")
    if checkpointing:
        cmd.append("--checkpointing")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--shapes", default="8x128,2x512")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--attn", default="sdpa", choices=["eager", "sdpa"], help="transformers attention")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--child", choices=["litebert", "transformers"], help=argparse_hidden())
    parser.add_argument("--dir", help=argparse_hidden())
    parser.add_argument("--shape", help=argparse_hidden())
    parser.add_argument("--precision", help=argparse_hidden())
    parser.add_argument("--checkpointing", action="store_true", help=argparse_hidden())
    args = parser.parse_args()
    if args.child:
        args.side = args.child
        return child(args)
    configure(args)  # the children apply --malloc themselves; here it is recorded in "machine"
    preset = "tiny" if args.quick else args.preset
    shapes = ["4x32"] if args.quick else args.shapes.split(",")
    directory = save_random_model(AlbertConfig.from_preset(preset), args.seed)
    for shape in shapes:
        for precision in args.precisions.split(","):
            ours = measure(args, "litebert", shape, precision, directory)
            theirs = measure(args, "transformers", shape, precision, directory)
            ours_ckpt = measure(args, "litebert", shape, precision, directory, checkpointing=True)
            emit({"bench": "memory", "preset": preset, "shape": shape, "precision": precision, "peer_attn": args.attn,
                  "litebert": ours, "litebert_checkpointing": ours_ckpt, "transformers": theirs,
                  "ratio": round(ours["peak_delta_mib"] / theirs["peak_delta_mib"], 3),
                  "ratio_checkpointing": round(ours_ckpt["peak_delta_mib"] / theirs["peak_delta_mib"], 3),
                  "machine": machine()})


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
