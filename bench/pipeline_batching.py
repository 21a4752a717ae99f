"""Padding-aware batches in the pipelines: texts per second with and without the padding cut, in one run.

`litebert.pipeline` sorts its inputs by length and cuts them into batches of at most batch_size; a batch also
ends where padding it to its next (longest) feature would add more than PADDING_SLACK of padding
(litebert.tasks.inference.length_batches). This compares that rule with cutting at batch_size alone (the
slack set to infinity), interleaved on the same model and texts: calls of `--per-call` sentences drawn at
random from the bundled corpus (mixed lengths, as real requests come), and of sentences of 40-120 characters
(near-equal lengths, where the cut should cost nothing). Prints one JSON line per text set.

    .venv/bin/python bench/pipeline_batching.py --model out/demo/finetune_pretrained/best --threads 1
"""

from __future__ import annotations

import gzip
import math
import random
import tempfile

from common import base_parser, configure, emit, interleaved, machine, ratio, stats
from serve_load import random_classifier

import litebert
from litebert.corpus.documents import BUNDLED_CORPUS
from litebert.tasks import inference


def corpus_sentences(limit: int = 20000) -> list[str]:
    with gzip.open(BUNDLED_CORPUS, "rt", encoding="utf-8") as f:
        return [s for s in (line.strip() for line, _ in zip(f, range(limit))) if s]


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--model", default=None, help="a text-classification directory (default: a random "
                        "classifier of --preset)")
    parser.add_argument("--per-call", type=int, default=32, help="texts per pipeline call (and its batch_size)")
    parser.add_argument("--calls", type=int, default=10, help="pipeline calls per timed repeat")
    args = parser.parse_args()
    configure(args)
    repeats = args.repeats or (2 if args.quick else 5)
    preset = "tiny" if args.quick else args.preset
    model = args.model or random_classifier(preset, tempfile.mkdtemp(prefix="litebert-bench-"), args.seed)
    model_name = args.model or f"random {preset} classifier"
    pipe = litebert.pipeline("text-classification", model, batch_size=args.per_call)
    sentences = corpus_sentences(2000 if args.quick else 20000)
    rng = random.Random(args.seed)
    sets = {"corpus_sentences": rng.sample(sentences, args.per_call * args.calls),
            "sentences_40_120_chars": [s for s in sentences if 40 <= len(s) <= 120][:args.per_call * args.calls]}
    cut = inference.PADDING_SLACK
    for name, texts in sets.items():
        calls = [texts[i:i + args.per_call] for i in range(0, len(texts), args.per_call)]

        def run(slack: float) -> list:
            inference.PADDING_SLACK = slack
            return [pipe(c) for c in calls]

        times = interleaved({"padding_cut": lambda: run(cut), "batch_size_only": lambda: run(math.inf)},
                            args.warmup, repeats)
        ours, theirs = [x for c in run(cut) for x in c], [x for c in run(math.inf) for x in c]
        inference.PADDING_SLACK = cut
        emit({"bench": "pipeline_batching", "model": model_name, "texts": name,
              "per_call": args.per_call, "calls": len(calls), "padding_slack": cut,
              "padding_cut": stats(times["padding_cut"], len(texts), "texts"),
              "batch_size_only": stats(times["batch_size_only"], len(texts), "texts"),
              "speedup": ratio(times, "padding_cut", "batch_size_only"),
              "labels_unchanged": round(sum(a["label"] == b["label"] for a, b in zip(ours, theirs)) / len(ours), 4),
              "max_score_diff": max(abs(a["score"] - b["score"]) for a, b in zip(ours, theirs)),
              "machine": machine()})


if __name__ == "__main__":
    main()
