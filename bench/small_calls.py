"""Two choices on the inference path of a short text, measured: how texts reach sentencepiece, and GELU's form.

* Encoding: sentencepiece's list encoding starts a thread pool on every call. For each batch size the script
  times the list call (num_threads=-1, every core) against a loop of one-text calls, per text; litebert's
  tokenizer switches to the list call at `THREADED_ENCODE_MIN_TEXTS` texts (litebert.tokenizer).
* GELU (tanh form, ALBERT's "gelu_new"): torch's fused kernel against the same function written as
  x * sigmoid(2u) in place (litebert.model.gelu_tanh, taken in fp32 CPU inference), on the FFN activations of a
  batch of 32 short texts (32 x 25 tokens x 4H), plus each one's largest error against fp64.
* The pipeline on short texts (the bundled corpus's sentences of 40-120 characters), one text per call against
  32 per call: what dynamic batching in `litebert serve` can at best gain per request, before HTTP. --model DIR,
  or a random classifier of the demo's size (bench/serve_load.py's).

Both sides of each comparison are interleaved in one run (common.interleaved); one JSON line on stdout.

    .venv/bin/python bench/small_calls.py --threads 1
"""

from __future__ import annotations

import tempfile

import torch
import torch.nn.functional as F
from common import base_parser, configure, emit, interleaved, machine, ratio, stats
from serve_load import random_classifier, short_texts

from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.model import gelu_tanh
from litebert.serving.pipeline import pipeline
from litebert.tokenizer import THREADED_ENCODE_MIN_TEXTS


def encoding(sizes: list[int], repeats: int, directory: str) -> list[dict]:
    """A 1000-piece tokenizer trained on 3000 short sentences, then the first of them encoded both ways."""
    lines = short_texts(3000)
    path = f"{directory}/corpus.txt"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    sp = train_tokenizer([path], f"{directory}/tok", vocab_size=1000).sp
    rows = []
    for n in sizes:
        texts, calls = lines[:n], max(1, 512 // n)  # a timed sample is `calls` batches: ~512 texts
        times = interleaved({
            "list_call": lambda: [sp.encode(texts, out_type=int, num_threads=-1) for _ in range(calls)],
            "one_by_one": lambda: [[sp.encode(t, out_type=int) for t in texts] for _ in range(calls)]}, 2, repeats)
        rows.append({"texts": n, "list_call": stats(times["list_call"], n * calls, "texts"),
                     "one_by_one": stats(times["one_by_one"], n * calls, "texts"),
                     "one_by_one_vs_list_call": ratio(times, "one_by_one", "list_call")})
    return rows


def gelu(repeats: int, shape: tuple[int, int]) -> dict:
    x = 4 * torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    exact = F.gelu(x.double(), approximate="tanh")
    with torch.no_grad():
        times = interleaved({"fused": lambda: F.gelu(x, approximate="tanh"), "sigmoid_form": lambda: gelu_tanh(x)},
                            3, repeats)
        errors = {"fused": F.gelu(x, approximate="tanh"), "sigmoid_form": gelu_tanh(x)}
    error = {side: float((y.double() - exact).abs().max()) for side, y in errors.items()}
    return {"elements": x.numel(),
            **{side: {**stats(times[side], x.numel() / 1e6, "melements"), "max_abs_error_vs_fp64": error[side]}
               for side in times},
            "sigmoid_form_vs_fused": ratio(times, "sigmoid_form", "fused")}


def pipeline_calls(model: str, repeats: int) -> dict:
    pipe, texts = pipeline(model=model), short_texts(32)
    times = interleaved({"one_per_call": lambda: [pipe(t) for t in texts], "32_per_call": lambda: pipe(texts)},
                        2, repeats)
    return {"model": model, "texts": len(texts), **{side: stats(times[side], len(texts), "texts") for side in times},
            "32_per_call_vs_one_per_call": ratio(times, "32_per_call", "one_per_call")}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--model", help="model directory for the pipeline part (default: a random classifier)")
    args = parser.parse_args()
    configure(args)
    sizes, repeats = ([1, 32], 3) if args.quick else ([1, 8, 32, 128, 512], args.repeats or 30)
    with tempfile.TemporaryDirectory(prefix="litebert-small-calls-") as tmp:
        encode = encoding(sizes, repeats, tmp)
        if not args.model:
            args.model = random_classifier("tiny", tmp)
        calls = pipeline_calls(args.model, repeats)
    emit({"bench": "small_calls", "threaded_encode_min_texts": THREADED_ENCODE_MIN_TEXTS, "encoding": encode,
          "gelu": gelu(repeats, (32 * 25, 512)), "pipeline": calls, "machine": machine()})


if __name__ == "__main__":
    main()
