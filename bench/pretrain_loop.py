"""The pretraining loop end to end, batches built in step against batches built ahead by worker processes.

bench/train_step.py times the step on batches made before the clock starts; a real run also builds each batch
(dynamic masking of prepared pairs: 25 ms for 256 x 128 on a 2-core Xeon) and, without workers, the device waits
for it every step. This runs `litebert pretrain` itself, in this process, on prepared data (`litebert prepare`)
for --steps steps per side, sides alternating (--repeats runs each, the order flipped every repeat), and reads
each step's tokens/s (its batch's tokens, padding included, over the step's wall time, batch building included)
from the run's metrics.jsonl (log_every 1), the first --warmup steps of every run left out. Every run trains on the
same batches in the same order. Sides are `--data-workers N` for each N of --workers. Reported per side: the
median tokens/s over all its runs' steps; `speedup` is its median against the first side's (0: built in step).
`batch_build_ms`: the host time one batch takes to build (what a step without workers waits for).

    python bench/pretrain_loop.py --data .gpu/work/data128 --device cuda --precision bf16 --gpu-scale
    python bench/pretrain_loop.py --data .gpu/work/data128 --device cuda --preset albert-base-v2 --batch-size 64
    .venv/bin/python bench/pretrain_loop.py --data out/demo/data --quick          # smoke run on a CPU

On a CPU the workers take cores from the step (0 is the default there): expect no gain on 2 cores.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time

from common import base_parser, configure, emit, machine

from litebert.cli import main as litebert_main
from litebert.corpus.dataset import PretrainDataset
from litebert.paper.experiments import SCALES
from litebert.pretrain import Batches, sentence_task
from litebert.training.metrics_log import read_metrics


def gpu_scale_model(path: str) -> None:
    """The [model] of `litebert reproduce --scale gpu`'s base row (E 128, H 256, 4 applications of one layer)."""
    sizes, head = SCALES["gpu"].sizes, SCALES["gpu"].head_size
    hidden = sizes["hidden_size"][768]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"[model]\nembedding_size = {sizes['embedding_size'][128]}\nhidden_size = {hidden}\n"
                f"num_hidden_layers = {sizes['num_hidden_layers'][12]}\nnum_attention_heads = {hidden // head}\n"
                f"intermediate_size = {4 * hidden}\nhidden_dropout_prob = 0.0\nattention_probs_dropout_prob = 0.0\n")


def one_run(args, workers: int, out_dir: str, config: str | None) -> list[float]:
    """Tokens/s of each step of one `litebert pretrain` run after its warm-up steps."""
    argv = ["pretrain", "--data", args.data, "--model", args.preset, "--max-steps", str(args.steps),
            "--batch-size", str(args.batch_size), "--held-out", "8", "--eval-every", "0", "--save-every", "0",
            "--keep-last", "1", "--log-every", "1", "--no-progress", "--device", args.device, "--precision",
            args.precision, "--data-workers", str(workers), "--out-dir", out_dir, "--optimizer", "lamb",
            "--lr", "1e-3", "--warmup-steps", "0", *(["--config", config] if config else []),
            *(["--cuda-graphs"] if args.cuda_graphs else []), *(["--padding-free"] if args.padding_free else [])]
    if litebert_main(argv) != 0:
        raise SystemExit(f"litebert {' '.join(argv)} failed")
    records = read_metrics(os.path.join(out_dir, "metrics.jsonl"))
    return [r["tokens_per_s"] for r in records if "tokens_per_s" in r and r["step"] > args.warmup]


def batch_build_ms(data: str, batch_size: int, batches: int = 8) -> float:
    """Host milliseconds to build one training batch as the loop asks for it (dynamic masking included): what a
    step waits for without workers. The median of `batches` batches after one untimed."""
    dataset = PretrainDataset(data)
    build = Batches(dataset, seed=0, task=sentence_task(dataset, "auto"))
    times = []
    for i in range(batches + 1):
        start = time.perf_counter()
        build([j % len(dataset) for j in range(i * batch_size, (i + 1) * batch_size)], i * batch_size)
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times[1:]), 2)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--data", required=True, help="a directory `litebert prepare` wrote")
    parser.add_argument("--gpu-scale", action="store_true", help="the gpu scale's model instead of --preset")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--cuda-graphs", action="store_true")
    parser.add_argument("--padding-free", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.batch_size, args.steps, args.precision, args.gpu_scale = "tiny", 32, 12, "fp32", False
    args.repeats = args.repeats or 2
    args.warmup = min(args.warmup + 3, args.steps - 2)  # the first steps build caches (and CUDA graphs)
    configure(args)
    rates: dict[int, list[float]] = {w: [] for w in args.workers}
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "model.toml") if args.gpu_scale else None
        if config:
            gpu_scale_model(config)
        for repeat, order in zip(range(args.repeats), itertools.cycle([args.workers, args.workers[::-1]])):
            for workers in order:
                rates[workers] += one_run(args, workers, os.path.join(tmp, f"run_{repeat}_{workers}"), config)
    first = statistics.median(rates[args.workers[0]])
    emit({"bench": "pretrain_loop", "model": "gpu scale" if args.gpu_scale else args.preset, "data": args.data,
          "batch": args.batch_size, "steps_per_run": args.steps, "runs_per_side": args.repeats,
          "precision": args.precision, "cuda_graphs": args.cuda_graphs, "padding_free": args.padding_free,
          "batch_build_ms": batch_build_ms(args.data, args.batch_size),
          "sides": {f"data_workers={w}": {"tokens_per_s": round(statistics.median(r)),
                                          "speedup": round(statistics.median(r) / first, 3)}
                    for w, r in rates.items()}, **machine()})


if __name__ == "__main__":
    main()
