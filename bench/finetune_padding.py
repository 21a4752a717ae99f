"""Fine-tuning steps, padded vs padding-free: sequence classification on real batches of novel_authorship.

The task is read and featurized as `litebert finetune` does (litebert.finetune.prepare, at --max-length), with a
randomly initialised model of --preset's shape carrying --tokenizer; batches of --batch-size in one fixed shuffled
order (as the training loop draws them: padded to their longest sequence, not to --max-length). Both sides are the
same weights, one with `AlbertModel.padding_free` on; each call is one step (forward, loss, backward, fused AdamW,
train_step.make_step) on the next batch, so the k-th call of every side sees the same batch, interleaved.

A first pass over the --repeats batches is the warm-up (--warmup is not used): there every batch length is new,
and on an H100 a padded step at a length seen for the first time took up to ~0.9 s against ~20 ms once seen (a
per-shape setup that a long run pays once per length; transformers' padded step alike). Its total is reported as
`first_pass_s`; the timed pass runs the same batches again. Reported: real (unpadded) tokens/s of each side, `padding_free_vs_padded` (padded
median / padding-free median), the share of padding in the batches and, on CUDA, each side's peak memory during
a step above what was allocated before it (torch.cuda.max_memory_allocated) and its CUDA kernel time in one more
profiled step (`kernel_ms`; `gpu_busy` = kernel time / median step: below 1 the step waits on the host launching
kernels). --peer adds transformers' padded step from the same directory. --cuda-graphs adds the padding-free step
as `finetune --cuda-graphs` runs it (`padding_free_graphed`): the same batches padded to --max-length with their
real tokens listed and rounded up to a multiple of it (collate's `static_length`), each such shape captured once
as a CUDA graph after two warm-up calls (two more untimed passes over the batches do that) and replayed.

    python bench/finetune_padding.py --device cuda --task ../shared/data/tasks/novel_authorship --tokenizer TOK
    python bench/finetune_padding.py --device cuda --cuda-graphs --task ... --tokenizer TOK
    .venv/bin/python bench/finetune_padding.py --quick --task ... --tokenizer ...   # smoke run on a tiny model
"""

from __future__ import annotations

import copy
import itertools
from functools import partial

import common
import torch
from common import base_parser, configure, emit, machine, ratio, save_random_model, stats, to_device
from profile_step import device_time_by_kind
from train_step import make_step

from litebert.config import AlbertConfig
from litebert.finetune import FinetuneConfig, load_model, prepare
from litebert.model import encoder_of
from litebert.tasks.features import collate
from litebert.tokenizer import Tokenizer


def batches_of(features: list, pad_id: int, batch_size: int, count: int, seed: int, static_length: int = 0
               ) -> list[dict]:
    """`count` batches in one seeded shuffled order (wrapping around the features when they run out)."""
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(seed)).tolist()
    order = list(itertools.islice(itertools.cycle(order), count * batch_size))
    return [to_device(collate([features[i] for i in order[k:k + batch_size]], pad_id, static_length))
            for k in range(0, len(order), batch_size)]


def cycling(step_of, model, batches: list[dict], precision: str, peaks: list[int]):
    """train_step.make_step over the next batch at each call; on CUDA each call's peak memory above what was
    allocated before it goes to `peaks`. `step_of(model, batch, precision)` makes the step."""
    batch = dict(batches[0])
    step, position = step_of(model, batch, precision), itertools.count()

    def run() -> None:
        batch.update(batches[next(position) % len(batches)])
        cuda = common.DEVICE.type == "cuda"
        if cuda:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        step()
        if cuda:
            peaks.append(torch.cuda.max_memory_allocated() - before)
    run.step = step
    return run


def kernel_ms(run) -> float:
    """CUDA kernel time of one call (torch.profiler). Beside the call's wall time it says how much of a step the
    GPU computes; the rest it waits for the host to launch kernels (a launch-bound step)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        run()
        common.synchronize()
    return device_time_by_kind(prof)["kernel_ms"]


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--task", required=True, help="a novel_authorship directory (train.jsonl, dev.jsonl)")
    parser.add_argument("--tokenizer", required=True, help="a litebert tokenizer directory")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per input (default: 512; quick: 64)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", default=None, choices=["fp32", "bf16"],
                        help="bf16 autocast or fp32 (default: bf16 on cuda, fp32 on cpu)")
    parser.add_argument("--peer", action="store_true", help="also time transformers' padded step")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="also time the padding-free step captured as CUDA graphs (finetune --cuda-graphs)")
    args = parser.parse_args()
    configure(args)
    if args.cuda_graphs and common.DEVICE.type != "cuda":
        parser.error("--cuda-graphs captures CUDA graphs: give --device cuda")
    preset = "tiny" if args.quick else args.preset
    max_length = args.max_length or (64 if args.quick else 512)
    repeats = args.repeats or (2 if args.quick else 10)
    precision = args.precision or ("bf16" if common.DEVICE.type == "cuda" else "fp32")

    directory = save_random_model(AlbertConfig.from_preset(preset), args.seed)
    Tokenizer.from_pretrained(args.tokenizer).save_pretrained(directory)  # the model's own tokenizer
    cfg = FinetuneConfig(model=directory, task="novel_authorship", data_dir=args.task, max_length=max_length,
                         max_train_examples=args.batch_size * 8 if args.quick else None, max_eval_examples=1)
    run = prepare(cfg)
    batches = batches_of(run.train_features, run.tokenizer.pad_id, args.batch_size, repeats, args.seed)

    torch.manual_seed(args.seed)
    padded = load_model(cfg, run.family, run.labels, run.model_dir).to(common.DEVICE)
    padding_free = copy.deepcopy(padded)
    encoder_of(padding_free).padding_free = True
    peaks: dict[str, list[int]] = {"padded": [], "padding_free": []}
    sides = {name: cycling(make_step, model, batches, precision, peaks[name])
             for name, model in (("padded", padded), ("padding_free", padding_free))}
    if args.cuda_graphs:
        graphed = copy.deepcopy(padded)  # padding-free from the batches' packed_positions
        static = batches_of(run.train_features, run.tokenizer.pad_id, args.batch_size, repeats, args.seed, max_length)
        peaks["padding_free_graphed"] = []
        sides["padding_free_graphed"] = cycling(partial(make_step, cuda_graphs=True), graphed, static, precision,
                                                peaks["padding_free_graphed"])
        token_counts = sorted({b["packed_positions"].numel() for b in static})
    if args.peer:
        import transformers
        peer = transformers.AlbertForSequenceClassification.from_pretrained(
            directory, num_labels=len(run.labels), attn_implementation="sdpa").to(common.DEVICE)
        peaks["transformers"] = []
        sides["transformers"] = cycling(make_step, peer, batches, precision, peaks["transformers"])
    first_pass = common.interleaved(sides, 0, repeats)
    if args.cuda_graphs:  # each shape's two warm-up calls and its capture, before the timed pass
        for _ in range(2 * repeats):
            sides["padding_free_graphed"]()
    times = common.interleaved(sides, 0, repeats)  # the same batches again, each side's k-th call on batches[k]
    kernels = {side: kernel_ms(run) for side, run in sides.items()} if common.DEVICE.type == "cuda" else {}

    real = sum(int(b["attention_mask"].sum()) for b in batches)
    slots = sum(b["attention_mask"].numel() for b in batches)
    result = {"bench": "finetune_padding", "preset": preset, "task": "novel_authorship", "max_length": max_length,
              "batch_size": args.batch_size, "precision": precision, "optimizer": "AdamW(fused)", "repeats": repeats,
              "real_tokens_per_step": round(real / len(batches), 1), "padding_share": round(1 - real / slots, 3)}
    for side in sides:
        result[side] = stats(times[side], real / len(batches), "real_tokens")
        result[side]["first_pass_s"] = round(sum(first_pass[side]), 3)
        if peaks[side]:
            result[side]["peak_step_mib"] = round(max(peaks[side]) / 2**20, 1)
        if side in kernels:  # one more step, profiled: the GPU's share of a step's wall time
            result[side]["kernel_ms"] = round(kernels[side], 2)
            result[side]["gpu_busy"] = round(kernels[side] / 1e3 / result[side]["s_median"], 3)
    result["padding_free_vs_padded"] = ratio(times, "padding_free", "padded")
    if args.cuda_graphs:
        result["padding_free_graphed"]["token_counts"] = token_counts  # the packed shapes, one graph each (up to 8:
        # the rest run eagerly, and graphs_captured says so)
        result["padding_free_graphed"]["graphs_captured"] = len(sides["padding_free_graphed"].step.micro_step.graphs)
        result["padding_free_graphed_vs_padded"] = ratio(times, "padding_free_graphed", "padded")
    if peaks["padded"]:
        result["memory_padding_free_vs_padded"] = round(max(peaks["padding_free"]) / max(peaks["padded"]), 3)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
