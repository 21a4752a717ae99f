"""Silver pairs (augmented SBERT; Thakur et al., 2021): a cross-encoder labels sampled unlabelled sentence pairs,
and the bi-encoder (S-ALBERT, cosine objective) trains on gold and silver pairs together.

The cross-encoder reads both sentences at once, so it learns from few gold pairs what a bi-encoder, which
encodes each side alone, learns only from many. The recipe, in three commands:

    litebert finetune --task table --regression --data-dir GOLD_DIR --text-columns sentence1 sentence2 \\
        --model ALBERT_DIR --out-dir out/cross                             # 1. the cross-encoder, on gold scores
    litebert embed --model BI_DIR --silver out/cross/best --silver-text corpus.txt --silver-pairs 3000 \\
        --out silver.jsonl                                                 # 2. sample pairs and label them
    cat GOLD_DIR/train.jsonl silver.jsonl > both.jsonl
    litebert embed --model ALBERT_DIR --train both.jsonl --objective cosine --out-dir out/bi   # 3. the bi-encoder

Sampling (step 2), as the paper's "semantic search" strategy: half of the pairs join a sampled sentence to its
nearest other sentence by the bi-encoder's cosine (so the silver set holds similar pairs, which random pairs
almost never are), half join two random sentences (the dissimilar end). Scores are clipped to --score-range,
the gold scores' range that the cross-encoder learned ([0, 1] by default; `--score-range 0 5` for STS), so the
silver pairs join the gold ones on one scale, which `litebert embed --train` maps to the cosine's [0, 1] for both
alike. scripts/sentence_distill.py measures the recipe (docs/sentence.md).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.files import atomic_open, check_replaceable, same_path
from litebert.heads import AlbertForSequenceClassification
from litebert.runconfig import check_declared
from litebert.sentences.directories import load_sentence_model
from litebert.sentences.distill import monolingual_texts
from litebert.tokenizer import Tokenizer
from litebert.weights import resolve_model_dir


@dataclass
class SilverConfig:
    """What `litebert embed --silver CROSS_ENCODER` samples and labels (--model is the bi-encoder that samples,
    --out the JSONL it writes, --seed and --device the training group's)."""

    silver: str = field(default="", metadata={
        "help": "label sampled pairs with this cross-encoder (a regression model of `litebert finetune "
                "--regression` on gold pairs) and write them to --out; --model picks the nearest neighbours",
        "metavar": "CROSS_ENCODER"})
    silver_text: list[str] = field(default_factory=list, metadata={
        "help": "unlabelled text to pair (text/JSONL/.gz files or globs, one sentence per text)", "metavar": "FILE"})
    silver_pairs: int = field(default=3000, metadata={"range": "[1, inf)", "help": "pairs to write"})
    max_silver_texts: int = field(default=20000, metadata={"range": "[3, inf)",
        "help": "a seeded sample of this many sentences to pair"})
    silver_max_length: int = field(default=128, metadata={"range": "[4, inf)",
        "help": "tokens per pair for the cross-encoder"})
    score_range: list[float] = field(default_factory=lambda: [0.0, 1.0], metadata={"range": "(-inf, inf)",
        "help": "the gold scores' range, which the cross-encoder learned (0 5 for STS): scores are clipped to it",
        "metavar": "BOUND"})

    def __post_init__(self) -> None:
        check_declared(self)
        if len(self.score_range) != 2 or not self.score_range[0] < self.score_range[1]:
            raise ConfigError(f"--score-range takes LOW HIGH with LOW < HIGH, not {self.score_range}")


def sample_pairs(texts: Sequence[str], bi_encoder: str, n: int, seed: int, pool: int = 5000,
                 batch_size: int = 64, device: torch.device | str = "cpu", pooling: str | None = None,
                 max_length: int | None = None) -> list[tuple[str, str]]:
    """n distinct pairs from `texts` (a pair and its reverse are one): up to n // 2 nearest-neighbour pairs by
    `bi_encoder` among a seeded pool, each sentence of the pool asked once, and random pairs for the rest.
    `pooling` and `max_length` override the bi-encoder directory's, as `litebert embed` does for its --model."""

    texts = list(dict.fromkeys(t for t in texts if t.strip()))
    if len(texts) < 3 or n > len(texts) * (len(texts) - 1) // 2:
        raise ConfigError(f"{n} distinct silver pairs need more distinct texts than {len(texts)}")
    rng = random.Random(seed)
    pool_texts = rng.sample(texts, min(pool, len(texts)))
    vectors = load_sentence_model(bi_encoder, pooling, max_length, device=device).encode(pool_texts, batch_size)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    queries = rng.sample(range(len(pool_texts)), min(n // 2, len(pool_texts)))
    similarity = vectors[queries] @ vectors.T  # (n/2, P)
    similarity[np.arange(len(queries)), queries] = -np.inf  # not itself
    pairs, seen = [], set()

    def add(a: str, b: str) -> None:
        if frozenset((a, b)) not in seen:  # two sentences each other's nearest: one pair
            seen.add(frozenset((a, b)))
            pairs.append((a, b))

    for q, j in zip(queries, similarity.argmax(1)):
        add(pool_texts[q], pool_texts[int(j)])
    while len(pairs) < n:
        i, j = rng.sample(range(len(texts)), 2)
        add(texts[i], texts[j])
    return pairs


def check_cross_encoder(cross_encoder: str) -> None:
    """From its config alone, so that a wrong or mistyped --silver is refused before the bi-encoder's work."""
    config = AlbertConfig.load(resolve_model_dir(cross_encoder))
    if config.num_labels != 1:
        raise ConfigError(f"{cross_encoder} has {config.num_labels} outputs; a cross-encoder for silver "
                          "pairs is a regression model (litebert finetune --regression)")


@torch.no_grad()
def label_pairs(cross_encoder: str, pairs: Sequence[tuple[str, str]], max_length: int = 128,
                batch_size: int = 64, device: torch.device | str = "cpu") -> list[float]:
    """The cross-encoder's score (a regression head: `litebert finetune --regression`) of each pair, on the scale
    of the gold scores it was fine-tuned on."""

    check_cross_encoder(cross_encoder)
    model = AlbertForSequenceClassification.from_pretrained(cross_encoder).eval().to(device)
    tokenizer = Tokenizer.from_pretrained(cross_encoder)
    scores: list[float] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        batch = tokenizer([p[0] for p in chunk], [p[1] for p in chunk], padding=True, truncation=True,
                          max_length=max_length, return_tensors="pt")
        logits = model(*(batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids"))).logits
        scores.extend(logits[:, 0].float().tolist())  # (B, 1) -> B scores
    return scores


def clip_to_gold_range(scores: Sequence[float], low: float, high: float) -> tuple[list[float], int]:
    """Scores clipped to the gold range [low, high], and how many lay outside it. Most of them outside means the
    range is not the one the cross-encoder learned (STS 0-5 read as 0-1 would label every similar pair 1): an
    error, not a silver set."""
    outside = sum(1 for x in scores if not low <= x <= high)
    if outside > len(scores) / 2:
        raise ConfigError(f"{outside} of {len(scores)} cross-encoder scores lie outside --score-range {low:g} "
                          f"{high:g} (they span {min(scores):.3g} to {max(scores):.3g}): give the range of the gold "
                          "scores it was fine-tuned on")
    return [min(max(x, low), high) for x in scores], outside


def write_pairs(path: str, pairs: Sequence[tuple[str, str]], scores: Sequence[float]) -> None:
    """JSONL {sentence1, sentence2, label}, written atomically: what `litebert embed --train` reads."""
    with atomic_open(path) as f:
        for (a, b), score in zip(pairs, scores):
            f.write(json.dumps({"sentence1": a, "sentence2": b, "label": float(score)}, ensure_ascii=False) + "\n")


def _is_pairs_file(path: str) -> bool:
    """What write_pairs writes (its first line read): --out may replace such a file, never the text it reads."""
    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            first = json.loads(f.readline())
        except ValueError:
            return False
    return isinstance(first, dict) and set(first) == {"sentence1", "sentence2", "label"}


def make_silver(cfg: SilverConfig, bi_encoder: str, out: str, seed: int, device: torch.device | str = "cpu",
                batch_size: int = 64, pooling: str | None = None, max_length: int | None = None) -> dict:
    """Sample cfg.silver_pairs pairs of cfg.silver_text with `bi_encoder`, label them with the cross-encoder and
    write them to `out`; returns what was written (the line `litebert embed --silver` prints)."""
    if not cfg.silver_text:
        raise ConfigError("--silver needs --silver-text FILE: the unlabelled sentences to pair")
    if not out:
        raise ConfigError("--silver needs --out FILE.jsonl: where the labelled pairs go")
    if any(same_path(t, out) for t in cfg.silver_text):
        raise ConfigError(f"--out {out} is one of the --silver-text files it would be made from: choose another --out")
    check_replaceable(out, _is_pairs_file, "a silver pairs file (JSONL of sentence1, sentence2, label)",
                      hint="choose another --out")
    check_cross_encoder(cfg.silver)
    texts = monolingual_texts(cfg.silver_text, span=1, seed=seed, limit=cfg.max_silver_texts)
    pairs = sample_pairs(texts, bi_encoder, cfg.silver_pairs, seed, batch_size=batch_size, device=device,
                         pooling=pooling, max_length=max_length)
    low, high = cfg.score_range
    scores, clipped = clip_to_gold_range(label_pairs(cfg.silver, pairs, cfg.silver_max_length, batch_size, device),
                                         low, high)
    write_pairs(out, pairs, scores)
    return {"out": out, "pairs": len(pairs), "mean_score": float(np.mean(scores)), "clipped": clipped,
            "score_range": [low, high]}
