"""int8 on a fine-tuned classifier: accuracy and unchanged predictions against fp32, on a real dev split.

Every path runs through `litebert.pipeline` on the same texts: PyTorch fp32 (the reference), PyTorch int8
(torch.ao dynamic quantization), ONNX Runtime fp32 and int8 (`litebert export --quantize int8`, with
--int8-weights per-tensor and per-column, each written with --force so that a low agreement is measured
rather than refused, and checked by export on the same texts, written one per line as --verify-text reads
them). Prints one JSON line: per path the
accuracy against the gold labels, the share of predictions equal to fp32's, the largest score difference,
the file size, and the machine.

    .venv/bin/python bench/int8_accuracy.py --model out/demo/finetune_pretrained/best \
        --data ../shared/data/tasks/novel_authorship/dev.jsonl
"""

from __future__ import annotations

import json
import os
import tempfile

from common import base_parser, configure, emit, machine

import litebert
from litebert.interop.export import export_model


def read_rows(path: str, limit: int | None) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.append(row["text"])
            labels.append(row["label"])
    return texts[:limit], labels[:limit]


def verify_text_file(texts: list[str], path: str) -> str:
    """`texts` as `export --verify-text` reads its inputs, one a line: the data file itself is JSONL, whose lines
    export would tokenize whole (braces, keys and the gold label). A tab in a line would make it a sentence pair
    and a newline two inputs, so each text's runs of whitespace become one space."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(" ".join(text.split()) + "\n" for text in texts)
    return path


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--model", required=True, help="a fine-tuned text-classification directory")
    parser.add_argument("--data", required=True, help="JSONL with text and label (the dev split)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N rows")
    args = parser.parse_args()
    configure(args)
    texts, gold = read_rows(args.data, args.limit)
    with tempfile.TemporaryDirectory(prefix="int8-bench-") as tmp:
        dev_text = verify_text_file(texts, os.path.join(tmp, "dev.txt"))
        exports = {weights: export_model(args.model, os.path.join(tmp, weights), "onnx", quantize="int8", force=True,
                                         verify_text=dev_text, verify_samples=len(texts), int8_weights=weights)
                   for weights in ("per-tensor", "per-column")}
        int8_sides = {w: f"onnx_int8_{w.replace('-', '_')}" for w in exports}
        paths = {"torch_fp32": ("torch", "fp32", args.model), "torch_int8": ("torch", "int8", args.model),
                 "onnx_fp32": ("onnx", "fp32", os.path.join(tmp, "per-tensor")),
                 **{side: ("onnx", "int8", os.path.join(tmp, w)) for w, side in int8_sides.items()}}
        # measured, not refused: the torch int8 pipeline's own check off, as the exports above were forced
        unchecked = {"torch_int8": {"min_agreement": 0}}
        answers = {name: litebert.pipeline("text-classification", directory, backend=backend, precision=precision,
                                           batch_size=32, **unchecked.get(name, {}))(texts)
                   for name, (backend, precision, directory) in paths.items()}
        sizes = {"onnx_fp32": os.path.getsize(exports["per-tensor"].path),
                 **{int8_sides[w]: os.path.getsize(e.int8_path) for w, e in exports.items()}}
    reference = answers["torch_fp32"]
    result = {"bench": "int8_accuracy", "model": args.model, "data": args.data, "rows": len(texts),
              "export_agreement_on_dev_text": {w: e.agreement.summary() for w, e in exports.items()}}
    for name, out in answers.items():
        result[name] = {
            "accuracy": round(sum(a["label"] == g for a, g in zip(out, gold)) / len(gold), 4),
            "unchanged_vs_torch_fp32": round(sum(a["label"] == r["label"] for a, r in zip(out, reference))
                                             / len(gold), 4),
            "max_score_diff": round(max(abs(a["score"] - r["score"]) for a, r in zip(out, reference)), 4)}
        if name in sizes:
            result[name]["file_mb"] = round(sizes[name] / 1e6, 2)
    result["machine"] = machine()
    emit(result)


if __name__ == "__main__":
    main()
