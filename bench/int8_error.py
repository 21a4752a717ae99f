"""Where int8's disagreement with fp32 comes from, on a random-weight classifier (albert-base by default).

Each variant is scored against PyTorch fp32 on the same random inputs as inference.py's agreement (8-128
tokens): predictions changed, the mean and largest change of the margin between the two logits, and the file
size against the fp32 export's.
  shipped        `litebert export --quantize int8 --int8-weights per-tensor`: ORT's BERT fusions
                 (SkipLayerNormalization, FastGelu), embedding tables int8 per row, ORT's dynamic int8 MatMuls
  per_column_uint8, per_column_int8
                 the same with --int8-weights per-column: one scale per output column, stored uint8 (what
                 export writes on x86 without VNNI) or int8 (with VNNI/AMX; on other x86 CPUs its products
                 saturate, which is what this row shows there)
  unfused        the same without the fusions
  tables_fp32    the same with the embedding tables left in fp32 (ORT's default)
  per_channel, reduce_range, uint8_weights
                 ORT's other settings (the last two its advice for AVX2 CPUs without VNNI, whose 16-bit
                 multiply-adds can saturate)
  weights_only   PyTorch fp32 with every linear weight and embedding table rounded to int8 per row: what
                 rounding the weights costs when no activation is quantized
A random model's two logits are near ties, the worst case for unchanged predictions: the quantiles of fp32's
margin are printed beside.

    .venv/bin/python bench/int8_error.py --threads 1     # albert-base, 1024 inputs, ~25 min on one loaded core
    .venv/bin/python bench/int8_error.py --quick
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from common import base_parser, configure, emit, machine
from inference import (
    agreement_batches,
    logit_margins,
    margin_quantiles,
    onnx_side,
    random_classifier,
    torch_side,
    weights_rounded_to_int8,
)

from litebert.config import AlbertConfig
from litebert.interop.export import export_model
from litebert.interop.quantize import quantize_onnx

ONNX_VARIANTS = {"shipped": {}, "per_column_uint8": {"weights": "per-column", "column_storage": "uint8"},
                 "per_column_int8": {"weights": "per-column", "column_storage": "int8"}, "unfused": {"fuse": False},
                 "tables_fp32": {"embedding_tables": False},
                 "per_channel": {"per_channel": True}, "reduce_range": {"reduce_range": True},
                 "uint8_weights": {"weight_type": "uint8"}}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--samples", type=int, default=None, help="random inputs compared on (default 1024)")
    args = parser.parse_args()
    configure(args)
    preset = "tiny" if args.quick else args.preset
    samples = args.samples or (32 if args.quick else 1024)
    config = AlbertConfig.from_preset(preset).replace(num_labels=2)
    workdir = tempfile.mkdtemp(prefix="litebert-int8-error-")
    directory, model = random_classifier(config, args.seed, workdir)
    fp32_path = export_model(directory, os.path.join(workdir, "onnx"), verify_samples=16).path

    sides = {"weights_only": torch_side(weights_rounded_to_int8(model))}
    sizes = {}
    for name, options in ONNX_VARIANTS.items():
        path = os.path.join(workdir, f"{name}.onnx")
        quantize_onnx(fp32_path, path, config=config, **options)
        sides[name] = onnx_side(path, args.threads)
        sizes[name] = round(os.path.getsize(path) / os.path.getsize(fp32_path), 3)

    batches = agreement_batches(config, samples, min(128, config.max_position_embeddings), args.seed + 1)
    fp32 = torch_side(model)
    reference = [fp32(b) for b in batches]
    result = {"bench": "int8_error", "model": f"{preset} AlbertForSequenceClassification (random weights)",
              "samples": samples, "fp32_margin_quantiles": margin_quantiles(reference)}
    for name, run in sides.items():
        got = [run(b) for b in batches]
        changed = sum(int((r.argmax(-1) != g.argmax(-1)).sum()) for r, g in zip(reference, got))
        shift = np.concatenate([np.abs(logit_margins(r) - logit_margins(g)) for r, g in zip(reference, got)])
        result[name] = {"changed": changed, "unchanged_pct": round(100 * (1 - changed / samples), 2),
                        "margin_change_mean": float(f"{shift.mean():.3g}"),
                        "margin_change_max": float(f"{shift.max():.3g}"),
                        "size_vs_fp32": sizes.get(name)}
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
