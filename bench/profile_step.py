"""Where a pretraining step's time goes: torch.profiler's op table for one side (a diagnostic, not a benchmark).

    .venv/bin/python bench/profile_step.py --side litebert --precision bf16 --shape 8x128
"""

from __future__ import annotations

import torch
from common import base_parser, configure, load_pair, pretraining_batch, save_random_model
from train_step import make_step

from litebert.config import AlbertConfig


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--side", default="litebert", choices=["litebert", "transformers"])
    parser.add_argument("--shape", default="8x128")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    configure(args)
    config = AlbertConfig.from_preset("tiny" if args.quick else args.preset)
    B, T = map(int, args.shape.split("x"))
    ours, theirs = load_pair(save_random_model(config, args.seed), "AlbertForPreTraining", "sdpa")
    step = make_step(ours if args.side == "litebert" else theirs, pretraining_batch(config, B, T, args.seed),
                     args.precision)
    for _ in range(args.warmup):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
