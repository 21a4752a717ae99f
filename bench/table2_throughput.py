"""The paper's Table 2 speed column on the machine at hand: training throughput of the BERT and ALBERT
configurations relative to BERT-large.

The paper's "Speedup" is how much faster each model trains than BERT-large on the same hardware (BERT-base 4.7x,
ALBERT-base 5.6x, -large 1.7x, -xlarge 0.6x, -xxlarge 0.3x; ../shared/paper/albert_tables.md). Here every preset trains
the same batch (sequence pairs, 15% of positions masked; MLM + SOP loss, backward, fused AdamW) with litebert,
steps interleaved across the models, and the line reports each model's median step time and its speed relative
to BERT-large measured in this run, beside the paper's. On a CPU the large models take seconds per step:
`--presets` picks a subset (BERT-large must be among them) and `--quick` runs tiny stand-ins of every shape.

    .venv/bin/python bench/table2_throughput.py --batch 2 --length 128
    .venv/bin/python bench/table2_throughput.py --quick
    python bench/table2_throughput.py --device cuda --precision bf16 --batch 16 --length 512   # on a GPU
"""

from __future__ import annotations

import os

import common
import torch
from common import base_parser, configure, emit, interleaved, machine, pretraining_batch, ratio, stats, to_device

from litebert.config import AlbertConfig
from litebert.model import AlbertForPreTraining
from litebert.runtime.precision import autocast

PAPER_SPEEDUP = {"bert-base": 4.7, "bert-large": 1.0, "albert-base-v2": 5.6, "albert-large-v2": 1.7,
                 "albert-xlarge-v2": 0.6, "albert-xxlarge-v2": 0.3}  # Table 2's "Speedup", relative to BERT-large
QUICK_SCALE = dict(hidden_size=1 / 16, intermediate_size=1 / 16)  # --quick: every width divided by 16


def build(preset: str, quick: bool, seed: int) -> AlbertForPreTraining:
    config = AlbertConfig.from_preset(preset)
    if quick:
        h = max(16, int(config.hidden_size * QUICK_SCALE["hidden_size"]))
        config = config.replace(hidden_size=h, num_attention_heads=max(1, h // 16),
                                intermediate_size=max(64, int(config.intermediate_size * QUICK_SCALE["intermediate_size"])),
                                embedding_size=min(config.embedding_size, h), vocab_size=2000)
    torch.manual_seed(seed)
    return AlbertForPreTraining(config).to(common.DEVICE)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--presets", default=",".join(PAPER_SPEEDUP), help="comma-separated; bert-large among them")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                        help="bf16: autocast, as pretraining on a GPU runs. Default: %(default)s")
    args = parser.parse_args()
    configure(args)
    presets = args.presets.split(",")
    if "bert-large" not in presets:
        raise SystemExit("--presets must include bert-large: the speeds are relative to it")
    repeats = args.repeats or (2 if args.quick else 5)
    models = {p: build(p, args.quick, args.seed) for p in presets}
    steps = {}
    for name, model in models.items():
        batch = to_device(pretraining_batch(model.config, args.batch, args.length, args.seed))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)

        def step(model=model, batch=batch, optimizer=optimizer):
            with autocast(args.precision, common.DEVICE.type):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        steps[name] = step
    times = interleaved(steps, args.warmup, repeats)
    rows = {}
    for name, seconds in times.items():  # the ratio of the medians printed beside it (common.ratio)
        rows[name] = {**stats(seconds, args.batch * args.length, "tokens"),
                      "parameters": sum(p.numel() for p in models[name].parameters()),
                      "speedup_vs_bert_large": ratio(times, name, "bert-large"), "paper": PAPER_SPEEDUP.get(name)}
    emit({"bench": "table2_throughput", "batch": args.batch, "length": args.length, "precision": args.precision,
          "quick": args.quick, "load_1min": os.getloadavg()[0], **machine(), "models": rows})


if __name__ == "__main__":
    main()
