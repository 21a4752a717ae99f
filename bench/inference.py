"""Inference, litebert vs transformers vs ONNX Runtime, in two suites.

--suite classifier (default): a random albert-base AlbertForSequenceClassification at 1x128 (latency) and
32x128 (throughput), every way to run it on a CPU side by side, interleaved, in one JSON line:
  litebert_fp32, litebert_bf16 (the faster of bf16 weights and autocast; autocast alone, timed with fewer
  repeats, on a CPU without bf16 kernels, where bf16 is several times slower), litebert_int8 (PyTorch dynamic
  int8, litebert.interop.quantize.quantize_model), litebert_onnx_fp32, litebert_onnx_int8 and
  litebert_onnx_int8_per_column (`litebert export --quantize int8` with --int8-weights per-tensor and
  per-column, run by ONNX Runtime; per-column weights stored as export stores them on this CPU, named in
  `per_column_storage`), transformers_fp32 (the faster of eager and sdpa), ort_fp32 and
  ort_int8 (ONNX Runtime on transformers' own export, plain or through ORT's BERT fusions, whichever is faster;
  int8 by ORT's quantize_dynamic with its defaults, the usual recipe).
Each side reports min/median/max seconds and its speedup over litebert_fp32 and over ort_fp32, and how often
its predictions differ from litebert fp32's on `--agreement-samples` random inputs of 8-128 tokens (padded to
128) with the largest logit difference; the ONNX files' sizes are in `files_mb`. Beside them, untimed,
`int8_weight_rounding_only`: the fp32 model with its weights rounded to int8 per row, computed in fp32, the
share of the differences no int8 path can avoid; and the quantiles of fp32's margin between its top two logits
(a random model's are tiny). --agreement-only skips the timing. The record names the CPU
(lscpu's "Model name") and the load average, since other processes on a shared machine move every figure.

--suite encoder: AlbertModel forward under torch.inference_mode, litebert vs transformers vs ONNX Runtime.
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

    .venv/bin/python bench/inference.py                   # the classifier suite, ~15 min quiet
    .venv/bin/python bench/inference.py --suite encoder   # ~4 min
    .venv/bin/python bench/inference.py --quick           # smoke run on a tiny model (either suite)
    python bench/inference.py --device cuda --shapes 256x128 --precisions bf16   # the encoder suite on a GPU
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import tempfile

import common
import numpy as np
import torch
from common import (
    base_parser,
    configure,
    emit,
    forward_flops,
    interleaved,
    load_pair,
    machine,
    ratio,
    save_random_model,
    stats,
    to_device,
)
from train_step import gemm_probe, mfu_fields

from litebert.config import AlbertConfig
from litebert.runtime import cpu


def forward_fn(model, inputs: dict, mode: str):
    """mode: "fp32", "bf16-cast" (bf16 weights) or "bf16-autocast"."""
    model = copy.deepcopy(model).eval()
    if mode == "bf16-cast":
        model = model.to(torch.bfloat16)
    ctx = (lambda: torch.autocast(common.DEVICE.type, dtype=torch.bfloat16)) if mode == "bf16-autocast" \
        else contextlib.nullcontext

    def run():
        with torch.inference_mode(), ctx():
            return model(**inputs)[0]
    return run


def transformers_onnx(model, inputs: dict, fuse: bool, workdir: str, output: str = "last_hidden_state") -> str:
    """transformers' model exported by torch.onnx (opset 17, dynamic batch), optionally through ORT's BERT
    fusion optimizer; the file's path."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "albert.onnx")
    if not os.path.exists(path):
        names = list(inputs)
        torch.onnx.export(model.eval(), (), path, kwargs=inputs, input_names=names, output_names=[output],
                          dynamic_axes={n: {0: "batch"} for n in names}, opset_version=17, dynamo=False)
    if fuse:
        from onnxruntime.transformers import optimizer
        config = model.config
        fused = optimizer.optimize_model(path, model_type="bert", num_heads=config.num_attention_heads,
                                         hidden_size=config.hidden_size)
        path = os.path.join(workdir, "albert-fused.onnx")
        fused.save_model_to_file(path)
    return path


def ort_session(model, inputs: dict, threads: int, fuse: bool, workdir: str):
    """An ONNX Runtime session for `model` (fp32), optionally after ORT's BERT fusion optimizer."""
    import onnxruntime as ort
    path = transformers_onnx(model, inputs, fuse, workdir)
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


# -- the classifier suite -----------------------------------------------------------------------------------

def torch_side(model, autocast: bool = False):
    """inputs -> logits (numpy) of a PyTorch classifier, under inference_mode (and bf16 autocast)."""
    def run(inputs: dict) -> np.ndarray:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return model(**inputs).logits.float().numpy()
    return run


def onnx_side(path: str, threads: int):
    from litebert.interop.quantize import onnx_session
    session = onnx_session(path, threads, spin=False)  # spinning threads would slow the sides timed after it
    names = [i.name for i in session.get_inputs()]

    def run(inputs: dict) -> np.ndarray:
        return session.run(None, {n: inputs[n].numpy() for n in names})[0]
    return run


def agreement_batches(config: AlbertConfig, n: int, T: int, seed: int) -> list[dict]:
    """`n` random inputs of 8-T tokens, right-padded to T (transformers' export has a fixed sequence axis)."""
    from litebert.interop.agreement import verification_batches
    batches, _ = verification_batches("", config, False, n=n, seed=seed)
    out = []
    for ids, mask, types in batches:
        pad = T - ids.shape[1]
        out.append(dict(input_ids=torch.nn.functional.pad(ids, (0, pad), value=config.pad_token_id or 0),
                        attention_mask=torch.nn.functional.pad(mask, (0, pad)),
                        token_type_ids=torch.nn.functional.pad(types, (0, pad))))
    return out


def weights_rounded_to_int8(model):
    """A copy of `model` with every linear weight rounded to int8 per output row and every embedding table per
    row (litebert's int8 schemes at their finest), run in fp32: what any int8 path loses to its weights alone.
    With ALBERT's shared layer the same rounding error enters all 12 layers."""
    from litebert.interop.quantize import per_row_int8
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for module in rounded.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                q, scale = per_row_int8(module.weight.detach().numpy())  # the export's embedding-table scheme
                module.weight.copy_(torch.from_numpy(q * scale))
    return rounded


def logit_margins(logits: np.ndarray) -> np.ndarray:
    """Per row, the top logit minus the runner-up: how far a prediction is from changing."""
    top2 = np.sort(logits, axis=-1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def margin_quantiles(reference: list[np.ndarray]) -> dict[str, float]:
    """The 1%, 5% and 50% quantiles of fp32's logit margins over batches of logits (a random model's are tiny)."""
    margins = np.concatenate([logit_margins(r) for r in reference])
    return {f"{q:g}": float(f"{np.quantile(margins, q):.3g}") for q in (0.01, 0.05, 0.5)}


def random_classifier(config: AlbertConfig, seed: int, workdir: str):
    """A random two-label classifier saved to workdir/model (for the exports and the peers) and read back."""
    from litebert.heads import AlbertForSequenceClassification
    directory = os.path.join(workdir, "model")
    torch.manual_seed(seed)
    AlbertForSequenceClassification(config.replace(num_labels=2)).save_pretrained(directory)
    return directory, AlbertForSequenceClassification.from_pretrained(directory).eval()


def classifier_suite(args) -> None:
    import transformers
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from litebert.interop.export import export_model
    from litebert.interop.quantize import initializer_bytes, per_column_storage, quantize_model, quantize_onnx

    transformers.utils.logging.disable_progress_bar()
    preset = "tiny" if args.quick else args.preset
    shapes = ["1x32", "4x32"] if args.quick else args.shapes.split(",")
    T_max = max(int(shape.split("x")[1]) for shape in shapes)
    samples = args.agreement_samples or (16 if args.quick else 256)
    config = AlbertConfig.from_preset(preset).replace(num_labels=2)
    workdir = tempfile.mkdtemp(prefix="litebert-bench-int8-")
    directory, ours = random_classifier(config, args.seed, workdir)
    theirs = {attn: transformers.AlbertForSequenceClassification.from_pretrained(
        directory, attn_implementation=attn).eval() for attn in ("sdpa", "eager")}
    bf16_kernels = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())

    exported = export_model(directory, os.path.join(workdir, "litebert-onnx"), quantize="int8", force=True,
                            verify_samples=16, int8_weights="per-tensor")
    per_column = os.path.join(workdir, "litebert-onnx", "model.int8-per-column.onnx")
    quantize_onnx(exported.path, per_column, weights="per-column", config=config)
    files = {"litebert_onnx_fp32": exported.path, "litebert_onnx_int8": exported.int8_path,
             "litebert_onnx_int8_per_column": per_column}
    sides = {"litebert_fp32": torch_side(ours), "litebert_int8": torch_side(quantize_model(ours)),
             **{name: onnx_side(path, args.threads) for name, path in files.items()}}

    # the peers' variants, each tried on the largest shape and the faster kept (named in `modes`)
    B, T = map(int, shapes[-1].split("x"))
    g = torch.Generator().manual_seed(args.seed)
    probe = dict(input_ids=torch.randint(5, config.vocab_size, (B, T), generator=g),
                 attention_mask=torch.ones(B, T, dtype=torch.long),
                 token_type_ids=(torch.arange(T) >= T // 2).long().expand(B, T).contiguous())
    modes = {}

    def pick(name: str, candidates: dict) -> None:
        modes[name] = fastest({k: (lambda run=run: run(probe)) for k, run in candidates.items()}) \
            if len(candidates) > 1 else next(iter(candidates))
        sides[name] = candidates[modes[name]]

    pick("transformers_fp32", {attn: torch_side(model) for attn, model in theirs.items()})
    pick("litebert_bf16", {"autocast": torch_side(ours, autocast=True)} if not bf16_kernels else
         {"autocast": torch_side(ours, autocast=True),
          "bf16 weights": torch_side(copy.deepcopy(ours).to(torch.bfloat16))})
    ort_files = {}
    for fuse in (False, True):
        fp32 = transformers_onnx(theirs["sdpa"], probe, fuse, os.path.join(workdir, "transformers-onnx"), "logits")
        int8 = fp32.replace(".onnx", "-int8.onnx")
        # DefaultTensorType: shape inference knows no types behind the fused (com.microsoft) ops
        quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": 1})
        ort_files[("fused" if fuse else "plain", "fp32")], ort_files[("fused" if fuse else "plain", "int8")] = fp32, int8
    for precision in ("fp32", "int8"):
        pick(f"ort_{precision}", {mode: onnx_side(ort_files[(mode, precision)], args.threads)
                                  for mode in ("plain", "fused")})
        files[f"ort_{precision}"] = ort_files[(modes[f"ort_{precision}"], precision)]

    # predictions against litebert fp32
    batches = agreement_batches(config, samples, T_max, args.seed + 1)
    reference = [sides["litebert_fp32"](b) for b in batches]
    agreement = {}
    untimed = {"int8_weight_rounding_only": torch_side(weights_rounded_to_int8(ours))}
    for name, run in {**sides, **untimed}.items():
        if name == "litebert_fp32":
            continue
        got = [run(b) for b in batches]
        if not all(np.isfinite(x).all() for x in got):
            raise SystemExit(f"{name} gave NaN/inf logits")
        differ = sum(int((e.argmax(-1) != x.argmax(-1)).sum()) for e, x in zip(reference, got))
        agreement[name] = {"differ_pct": round(100 * differ / samples, 2), "differ": differ,
                           "max_abs_logit_diff": float(f"{max(float(np.abs(e - x).max()) for e, x in zip(reference, got)):.3g}")}

    order = ["litebert_fp32", "litebert_bf16", "litebert_int8", "litebert_onnx_fp32", "litebert_onnx_int8",
             "litebert_onnx_int8_per_column", "transformers_fp32", "ort_fp32", "ort_int8"]
    result = {"bench": "inference", "suite": "classifier", "model": f"{preset} AlbertForSequenceClassification "
              "(random weights)", "modes": modes, "agreement_samples": samples, "shapes": {}}
    slow = [] if bf16_kernels else ["litebert_bf16"]  # tens of seconds a call: timed apart, fewer repeats
    for shape in ([] if args.agreement_only else shapes):
        B, T = map(int, shape.split("x"))
        g = torch.Generator().manual_seed(args.seed)
        inputs = to_device(dict(input_ids=torch.randint(5, config.vocab_size, (B, T), generator=g),
                                attention_mask=torch.ones(B, T, dtype=torch.long),
                                token_type_ids=(torch.arange(T) >= T // 2).long().expand(B, T).contiguous()))
        repeats = args.repeats or (2 if args.quick else (20 if B * T <= 256 else 5))
        calls = {name: (lambda run=sides[name]: run(inputs)) for name in order if name not in slow}
        times = interleaved(calls, args.warmup, repeats)
        for name in slow:  # interleaved with litebert fp32 again, so its ratio is of one moment
            extra = interleaved({name: lambda run=sides[name]: run(inputs), "litebert_fp32": calls["litebert_fp32"]},
                                1, 2 if not args.quick else 1)
            times[name] = extra[name]
            times[name + "_anchor"] = extra["litebert_fp32"]
        row = {"repeats": repeats}
        for name in order:
            row[name] = stats(times[name], B * T, "tokens")
            anchor = times.get(name + "_anchor", times["litebert_fp32"])
            row[name]["speedup_vs_litebert_fp32"] = round(statistics.median(anchor) / statistics.median(times[name]), 3)
            if name not in slow:
                row[name]["speedup_vs_ort_fp32"] = ratio(times, name, "ort_fp32")
        mine = [name for name in order if name.startswith("litebert") and name not in slow]
        best = max(mine, key=lambda name: row[name]["speedup_vs_ort_fp32"])
        row["best_litebert"] = {"side": best, "speedup_vs_ort_fp32": row[best]["speedup_vs_ort_fp32"]}
        result["shapes"][shape] = row
    result["agreement_vs_litebert_fp32"] = agreement
    result["fp32_logit_margin_quantiles"] = margin_quantiles(reference)
    result["files_mb"] = {name: round(os.path.getsize(path) / 1e6, 2) for name, path in files.items()}
    result["files_mb"]["parameters_fp32"] = round(sum(p.numel() * 4 for p in ours.parameters()) / 1e6, 2)
    for (mode, precision), path in ort_files.items():  # both of transformers' variants, chosen or not
        result["files_mb"][f"ort_{precision}_{mode}"] = round(os.path.getsize(path) / 1e6, 2)
    result["litebert_onnx_int8_size_ratio"] = round(os.path.getsize(files["litebert_onnx_int8"]) /
                                                    os.path.getsize(files["litebert_onnx_fp32"]), 3)
    result["litebert_onnx_int8_initializer_bytes"] = initializer_bytes(files["litebert_onnx_int8"])
    result["per_column_storage"] = per_column_storage()
    result["bf16_kernels"] = bf16_kernels
    result["cpu_model"] = cpu.cpu_model()
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    result["machine"] = machine()
    emit(result)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--suite", default=None, choices=["classifier", "encoder"],
                        help="default: classifier on cpu, encoder on cuda (the classifier suite's int8 and ONNX "
                             "Runtime sides run on the CPU only)")
    parser.add_argument("--shapes", default="1x128,32x128")
    parser.add_argument("--precisions", default="fp32,bf16", help="encoder suite only")
    parser.add_argument("--no-ort", action="store_true", help="encoder suite only")
    parser.add_argument("--agreement-samples", type=int, default=None,
                        help="classifier suite: random inputs the predictions are compared on (default 256)")
    parser.add_argument("--agreement-only", action="store_true",
                        help="classifier suite: compare the predictions, skip the timing")
    args = parser.parse_args()
    configure(args)
    args.suite = args.suite or ("encoder" if args.device == "cuda" else "classifier")
    if args.suite == "classifier":
        if args.device == "cuda":
            raise SystemExit("--suite classifier compares CPU paths (int8, ONNX Runtime): use --suite encoder on cuda")
        return classifier_suite(args)
    args.no_ort = args.no_ort or args.device == "cuda"  # ORT runs here on its CPU provider
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
        inputs = to_device(dict(input_ids=torch.randint(5, config.vocab_size, (B, T), generator=g),
                                attention_mask=torch.ones(B, T, dtype=torch.long),
                                token_type_ids=(torch.arange(T) >= T // 2).long().expand(B, T).contiguous()))
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
