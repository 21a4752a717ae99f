"""Inference, litebert vs transformers vs ONNX Runtime: AlbertModel forward under torch.inference_mode.

Shapes: 1x128 (latency) and 32x128 (throughput), full-length sequences. Precisions:
  * fp32: all three. ONNX Runtime runs transformers' model exported with torch.onnx (opset 17, dynamic
    batch), session graph optimisations at ORT_ENABLE_ALL, and, if it is faster, additionally through
    onnxruntime.transformers' BERT fusion optimizer (fused attention / LayerNorm / GELU), the setup people
    reach for. The faster ORT variant is kept and named.
  * bf16: litebert and transformers, each run both ways (weights cast with `.to(torch.bfloat16)`, or fp32
    weights under autocast) and credited with its faster way (named in the output). ORT's CPU provider
    has no bf16 kernels for this graph, so it is not in the bf16 rows.
transformers runs with the faster of its "eager" and "sdpa" attention. Calls are interleaved; `speedup_vs_*`
is the peer's median / litebert's median from this one run.

    .venv/bin/python bench/inference.py          # ~4 min
    .venv/bin/python bench/inference.py --quick
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile

import torch

from common import (base_parser, configure, emit, forward_flops, interleaved, load_pair, machine, ratio,
                    save_random_model, stats)
from train_step import gemm_probe, mfu_fields

from litebert.config import AlbertConfig


def forward_fn(model, inputs: dict, mode: str):
    """mode: "fp32", "bf16-cast" (bf16 weights) or "bf16-autocast"."""
    model = copy.deepcopy(model).eval()
    if mode == "bf16-cast":
        model = model.to(torch.bfloat16)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mode == "bf16-autocast" else contextlib.nullcontext

    def run():
        with torch.inference_mode(), ctx():
            return model(**inputs)[0]
    return run


def ort_session(model, inputs: dict, threads: int, fuse: bool, workdir: str):
    """An ONNX Runtime session for `model` (fp32), optionally after ORT's BERT fusion optimizer."""
    import onnxruntime as ort
    path = os.path.join(workdir, "albert.onnx")
    if not os.path.exists(path):
        names = list(inputs)
        torch.onnx.export(model.eval(), (), path, kwargs=inputs, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch"} for n in names}, opset_version=17, dynamo=False)
    if fuse:
        from onnxruntime.transformers import optimizer
        config = model.config
        fused = optimizer.optimize_model(path, model_type="bert", num_heads=config.num_attention_heads,
                                         hidden_size=config.hidden_size)
        path = os.path.join(workdir, "albert-fused.onnx")
        fused.save_model_to_file(path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {k: v.numpy() for k, v in inputs.items()}
    return lambda: session.run(None, feed)[0]


def fastest(candidates: dict, trials: int = 2) -> str:
    """Name of the fastest callable, by interleaved trial runs."""
    times = interleaved(candidates, 1, trials)
    return min(times, key=lambda k: min(times[k]))


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--shapes", default="1x128,32x128")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--no-ort", action="store_true")
    args = parser.parse_args()
    configure(args)
    preset = "tiny" if args.quick else args.preset
    shapes = ["2x32"] if args.quick else args.shapes.split(",")
    config = AlbertConfig.from_preset(preset)
    directory = save_random_model(config, args.seed)
    ours, theirs_sdpa = load_pair(directory, "AlbertModel", "sdpa")
    theirs_eager = load_pair(directory, "AlbertModel", "eager")[1]
    workdir = tempfile.mkdtemp(prefix="litebert-onnx-")

    for shape in shapes:
        B, T = map(int, shape.split("x"))
        g = torch.Generator().manual_seed(args.seed)
        inputs = dict(input_ids=torch.randint(5, config.vocab_size, (B, T), generator=g),
                      attention_mask=torch.ones(B, T, dtype=torch.long),
                      token_type_ids=(torch.arange(T) >= T // 2).long().expand(B, T).contiguous())
        flops = forward_flops(config, B, T)
        repeats = args.repeats or (2 if args.quick else (30 if B * T <= 256 else 5))
        for precision in args.precisions.split(","):
            modes = ["fp32"] if precision == "fp32" else ["bf16-cast", "bf16-autocast"]
            mine = {m: forward_fn(ours, inputs, m) for m in modes}
            peer = {f"{attn} {m}": forward_fn(model, inputs, m)
                    for attn, model in (("sdpa", theirs_sdpa), ("eager", theirs_eager)) for m in modes}
            my_mode, peer_mode = fastest(mine), fastest(peer)
            sides = {"litebert": mine[my_mode], "transformers": peer[peer_mode]}
            ort_mode = None
            if precision == "fp32" and not args.no_ort:
                orts = {("ort-fused" if fuse else "ort"): ort_session(theirs_sdpa, inputs, args.threads, fuse, workdir)
                        for fuse in (False, True)}
                ort_mode = fastest(orts)
                sides["onnxruntime"] = orts[ort_mode]
            sides["gemm_probe"], probe_flops = gemm_probe(precision)
            times = interleaved(sides, args.warmup, repeats)
            result = {"bench": "inference", "preset": preset, "shape": shape, "precision": precision,
                      "litebert_mode": my_mode, "peer_mode": peer_mode, "ort_mode": ort_mode, "repeats": repeats,
                      "model_gflop_per_call": round(flops / 1e9, 2)}
            for side in sides:
                if side != "gemm_probe":
                    result[side] = stats(times[side], B * T, "tokens")
            result["speedup_vs_transformers"] = ratio(times, "litebert", "transformers")
            if "onnxruntime" in times:
                result["speedup_vs_onnxruntime"] = ratio(times, "litebert", "onnxruntime")
            mfu_fields(result, times, flops, probe_flops)
            result["machine"] = machine()
            emit(result)


if __name__ == "__main__":
    main()
