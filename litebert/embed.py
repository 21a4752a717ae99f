"""Sentence embeddings from an ALBERT encoder, and S-ALBERT: training it siamese-style to make them useful.

`embed(model, tokenizer, sentences)` pools the last hidden states into one vector per sentence: the mean over the
non-pad tokens ([CLS] and [SEP] included, as sentence-transformers does) or the [CLS] vector. A pretrained MLM
encoder's raw embeddings are a weak similarity measure; S-ALBERT (Sentence-BERT's recipe on ALBERT) fine-tunes
the encoder through the one training loop on sentence pairs, both sides through the same weights:
  * objective "cosine": regression of cos(u, v) on a similarity score (MSE), for scored pairs such as STS;
    scores are divided by the training set's largest score when it exceeds 1 (STS's 0-5 scale -> 0-1);
  * objective "contrastive": in-batch negatives (InfoNCE / "multiple negatives ranking"): for a batch of
    paraphrase pairs (u_i, v_i), cross-entropy of scale * cos(u_i, v_j) over j with target i (scale 20, a
    temperature of 0.05). Only positive pairs are used (label > 0, or every pair of an unlabelled file).
Evaluation: Spearman correlation between cosine similarity and gold scores (STS), and retrieval recall@1 (for
each sentence1 of the positive pairs, is its own sentence2 the nearest of all their sentence2s?).

A trained model is saved as a plain HF AlbertModel directory (config.json, model.safetensors, the tokenizer
files), which transformers and litebert load as they are, plus the pooling description:
  sentence_config.json           litebert's: {"pooling", "max_length", "objective", "scale"}, read back by
                                 `SentenceEncoder.from_pretrained`
  modules.json, sentence_bert_config.json, 1_Pooling/config.json
                                 the sentence-transformers layout (Transformer module at the root, then a
                                 Pooling module), so `SentenceTransformer(dir)` users get the same vectors.
The weights carry the "albert." prefix of the wrapper's attribute; transformers and litebert strip it when
loading an AlbertModel, and it lets a run resume into the wrapper unchanged.

    litebert embed --model DIR --input sentences.txt --out emb.npy [--pooling mean]
    litebert embed --model DIR --train pairs.jsonl --eval dev.jsonl --out-dir out/salbert [training flags]
    litebert embed --model DIR --evaluate test.jsonl [--compare TEACHER_DIR PLAIN_ENCODER_DIR ...]
    litebert embed --model DIR --evaluate gensim:lee       (human judgments from the gensim wheel: litebert/sentences/sts.py)
    litebert embed --model DIR --distill TEACHER --distill-text corpus.txt --out-dir out/distill (litebert/sentences/distill.py)
    litebert embed --model DIR --silver CROSS_ENCODER --silver-text corpus.txt --out silver.jsonl
                                                           (silver pairs to train on: litebert/sentences/silver.py)
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from litebert.errors import ConfigError, DataError
from litebert.files import atomic_open, check_replaceable, read_npy_header, write_json
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.runtime.device import resolve_device
from litebert.sentence import OBJECTIVES, POOLING, SentenceEncoder, embed
from litebert.sentences.directories import load_sentence_model, read_modules
from litebert.sentences.distill import DistillConfig, train_distilled
from litebert.sentences.silver import SilverConfig, make_silver
from litebert.sentences.sts import (
    is_benchmark,
    pair_scores,  # each distinct text embedded once (Lee: 50 documents, 2,450 sides)
    read_benchmark,
    read_scored_pairs,
    score_models,
)
from litebert.tasks.records import read_rows
from litebert.tokenizer import Tokenizer
from litebert.training import sweep
from litebert.training.checkpoint import fingerprint
from litebert.training.data import ShuffledData
from litebert.training.distributed import is_main_process
from litebert.training.loop import train
from litebert.training.train_config import TrainConfig

# ----------------------------------------------------------------------------- evaluation


def evaluate_pairs(model: nn.Module, tokenizer, pairs: Sequence[tuple[str, str]], labels: Sequence[float] | None,
                   pooling: str = "mean", batch_size: int = 64, max_length: int = 128, recall: bool = True
                   ) -> dict[str, float]:
    """Spearman and Pearson of cosine vs gold score over all pairs (when labelled), and recall@1 over the
    positive pairs (label > 0; all pairs when unlabelled) unless `recall` is False (sts.pair_scores)."""

    return pair_scores(lambda texts: embed(model, tokenizer, texts, pooling, batch_size, max_length), pairs, labels,
                       recall)


# ----------------------------------------------------------------------------- training


@dataclass
class SentenceConfig:
    """What S-ALBERT trains on and how it pools. Optimizer, steps and batch size are TrainConfig's (the
    in-batch negatives of the contrastive objective are the micro-batch's other pairs)."""

    model: str = field(default="", metadata={
        "help": "required: an ALBERT model directory with its tokenizer (spiece.model), e.g. a checkpoint "
                "`litebert pretrain` wrote (OUT_DIR/step_N), a `litebert convert` output or a saved S-ALBERT"})
    train: str | None = field(default=None, metadata={
        "help": "sentence pairs to train on (.jsonl/.tsv/.csv with two text columns and a label or score)"})
    eval: str | None = field(default=None, metadata={
        "help": "pairs to score before, during and after training (recall@1 of positives; Spearman when scored)"})
    objective: str = field(default="contrastive", metadata={
        "help": "contrastive (in-batch negatives on positive pairs) or cosine (MSE of cosine on scores)",
        "choices": OBJECTIVES})
    pooling: str | None = field(default=None, metadata={
        "help": "mean or cls (default: the model's sentence_config.json, else mean)", "choices": (*POOLING, None)})
    scale: float = field(default=20.0, metadata={"range": "(0, inf)",
        "help": "contrastive: cosine scale (1 / temperature)"})
    max_length: int | None = field(default=None, metadata={"range": "[4, inf)",
        "help": "tokens per sentence, [CLS] and [SEP] included (default: what the model directory says, else 128)"})
    text_columns: list[str] = field(default_factory=lambda: ["sentence1", "sentence2"], metadata={
        "help": "the two text columns of the pairs files"})
    label_column: str = field(default="label", metadata={"help": "the label / score column ('' for none)"})
    max_train_examples: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "use only the first N training pairs"})
    max_eval_examples: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "score only the first N eval pairs"})
    eval_batch_size: int = field(default=64, metadata={"range": "[1, inf)", "help": "sentences per embedding forward"})


def read_pairs(path: str, cfg: SentenceConfig, limit: int | None = None
               ) -> tuple[list[tuple[str, str]], list[float] | None]:
    """Sentence pairs and their float labels (None when cfg.label_column is empty): sts.read_scored_pairs, or
    a benchmark named gensim:lee, gensim:wordsim353 or gensim:simlex999."""

    if is_benchmark(path):
        pairs, labels = read_benchmark(path)
        return (pairs[:limit], labels[:limit]) if limit is not None else (pairs, labels)
    return read_scored_pairs(path, cfg.text_columns, cfg.label_column, limit)


def train_sentence_encoder(cfg: SentenceConfig, train_cfg) -> dict:
    """S-ALBERT training through the one loop; returns the summary also written to <out_dir>/summary.json."""

    if not cfg.train:
        raise ConfigError("no training pairs: pass --train FILE")
    sweep.refuse_changed_resume(cfg, train_cfg, "sentence")
    after_pooling = [os.path.basename(m["path"]) for m in read_modules(cfg.model) if m["kind"] not in ("Transformer",
                                                                                                   "Pooling")]
    if after_pooling:  # a distilled student's projection: its vectors are not the pooled ones --train trains
        raise ConfigError(f"{cfg.model} has {', '.join(after_pooling)} after its pooling, which --train would drop "
                          "(it trains the pooled encoder): distil it further with --distill TEACHER, or train the "
                          "encoder it was made from")
    pairs, labels = read_pairs(cfg.train, cfg, cfg.max_train_examples)  # before the model loads
    eval_pairs, eval_labels = read_pairs(cfg.eval, cfg, cfg.max_eval_examples) if cfg.eval else (None, None)
    if cfg.objective == "contrastive":  # negatives come from the batch, so only the positive pairs are used
        keep = [i for i in range(len(pairs)) if labels is None or labels[i] > 0]
        pairs, labels = [pairs[i] for i in keep], None
    elif labels is None:
        raise ConfigError("the cosine objective needs scored pairs: set --label-column")
    else:
        top = max(labels)
        labels = [x / top for x in labels] if top > 1 else labels  # STS 0-5 -> 0-1, the range of a cosine
    if len(pairs) < train_cfg.batch_size:
        raise DataError(f"{cfg.train}: {len(pairs)} usable pairs, fewer than batch_size {train_cfg.batch_size}")
    tokenizer = Tokenizer.from_pretrained(cfg.model)
    model = SentenceEncoder.from_pretrained(cfg.model, pooling=cfg.pooling, objective=cfg.objective,
                                            scale=cfg.scale, max_length=cfg.max_length)

    def collate(indices: list[int], position: int) -> dict[str, torch.Tensor]:
        a, b = (tokenizer([pairs[i][side] for i in indices], padding=True, truncation=True,
                          max_length=model.max_length, return_tensors="pt") for side in (0, 1))
        batch = {"input_ids": a["input_ids"], "attention_mask": a["attention_mask"], "input_ids_b": b["input_ids"],
                 "attention_mask_b": b["attention_mask"]}
        if labels is not None:
            batch["labels"] = torch.tensor([labels[i] for i in indices], dtype=torch.float32)
        return batch

    def evaluate(m: SentenceEncoder) -> dict[str, float]:
        return evaluate_pairs(m, tokenizer, eval_pairs, eval_labels, m.pooling, cfg.eval_batch_size, m.max_length,
                              recall=not is_benchmark(cfg.eval))  # a benchmark scores every pair: no recall@1

    tokenizer_dir = os.path.join(train_cfg.out_dir, "tokenizer")  # only the tokenizer's files go into checkpoints
    tokenizer.save_pretrained(tokenizer_dir)
    # "before" is the loop's evaluation of the initial weights: on the training device, on rank 0, once per run.
    result = train(model, ShuffledData(len(pairs), collate), train_cfg, evaluate if cfg.eval else None,
                   tokenizer=tokenizer_dir,
                   configs={"sentence": {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}},
                   evaluate_start=True, identity={"data": {"train_sha256": fingerprint(cfg.train),
                                                           "pairs": len(pairs), "objective": cfg.objective}})
    summary = {"objective": cfg.objective, "pooling": model.pooling, "train_pairs": len(pairs), "steps": result.step,
               "before": result.start_eval, "after": dict(result.eval), "checkpoint": str(result.checkpoint)}
    if is_main_process():
        write_json(os.path.join(train_cfg.out_dir, "summary.json"), summary)
    return summary


# ----------------------------------------------------------------------------- CLI


@dataclass
class EmbedFiles:
    """What `litebert embed` reads and writes when it is not training (one mode per call)."""

    input: str = field(default="", metadata={"help": "embed: a text file, one sentence per line"})
    out: str = field(default="", metadata={"help": (
        "embed: where to write the (N, H) float32 .npy array; --silver: the JSONL of labelled pairs")})
    evaluate: str = field(default="", metadata={"help": (
        "score --model on a pairs file (recall@1, Spearman, Pearson), or on gensim:lee, gensim:wordsim353 or "
        "gensim:simlex999 (human judgments read from the gensim wheel; litebert.sentences.sts)")})
    compare: list[str] = field(default_factory=list, metadata={"help": (
        "with --evaluate: also score these directories on the same pairs (sentence-transformers models such as "
        "a --distill teacher, plain encoders with mean pooling, other litebert models); prints {dir: metrics}"),
        "metavar": "DIR"})
    overwrite: bool = field(default=False, metadata={"help": (
        "embed: replace --out even when it is not a 2-D float32 .npy (by default only such an array is replaced)")})


def _is_embeddings(path) -> bool:
    """What `litebert embed --out` writes: a 2-D float32 array in .npy (its header read; nothing unpickled)."""
    with open(path, "rb") as f:
        shape, dtype = read_npy_header(f)
    return len(shape) == 2 and dtype == np.float32


# The options only some modes read (the others read by all): typed for another mode, they are refused. --train
# and --distill are two modes each, with --eval (scored while training) and without.
TRAINING = ("--train", "--train --eval", "--distill", "--distill --eval")
SCORED = ("--train --eval", "--distill --eval")
MODE_READERS = {**{f.name: ("--distill", "--distill --eval") for f in dataclasses.fields(DistillConfig)
                   if f.name != "distill"},
                **{f.name: ("--silver",) for f in dataclasses.fields(SilverConfig) if f.name != "silver"},
                **{f.name: TRAINING for f in dataclasses.fields(TrainConfig)
                   if f.name not in ("device", "seed", "progress", "eval_every")},
                "eval_every": SCORED, "seed": (*TRAINING, "--silver"), "progress": ("--input", *TRAINING),
                "compare": ("--evaluate",), "overwrite": ("--input",), "out": ("--input", "--silver"),
                **{name: TRAINING[:2] for name in ("objective", "scale", "max_train_examples")}, "eval": TRAINING,
                "text_columns": ("--evaluate", *TRAINING),  # the pairs files' (--distill's with --distill-pairs)
                "label_column": ("--evaluate", *TRAINING[:2], SCORED[1]),  # --distill-pairs have no label
                "max_eval_examples": ("--evaluate", *SCORED),
                "eval_batch_size": ("--input", "--evaluate", "--silver", *SCORED)}


def cli(argv: list[str]) -> int:
    parser = verb_parser("embed", __doc__, {"files": EmbedFiles, "model, data and pooling": SentenceConfig,
                                            "distillation (with --distill; litebert/sentences/distill.py)": DistillConfig,
                                            "silver pairs (with --silver; litebert/sentences/silver.py)": SilverConfig,
                                            "training (with --train or --distill; --device in every mode, "
                                            "--seed also with --silver)": TrainConfig})
    args = parser.parse_args(argv)
    files, cfg, distill_cfg, silver_cfg, train_cfg = parse_verb(parser, args)
    if not cfg.model:
        raise ConfigError("--model is required: an ALBERT model directory with its tokenizer (see --help)")
    modes = [name for name, value in (("input", files.input), ("evaluate", files.evaluate), ("train", cfg.train),
                                      ("distill", distill_cfg.distill), ("silver", silver_cfg.silver)) if value]
    if len(modes) != 1:
        raise ConfigError("give exactly one of --input (embed), --evaluate PAIRS, --train PAIRS, --distill TEACHER "
                          "or --silver CROSS_ENCODER")
    scored = " --eval" if cfg.eval and modes[0] in ("train", "distill") else ""
    refuse_flags_of_other_modes(args, "--" + modes[0] + scored, MODE_READERS, "embed")
    if silver_cfg.silver:
        made = make_silver(silver_cfg, cfg.model, files.out, train_cfg.seed, resolve_device(train_cfg.device),
                           cfg.eval_batch_size, cfg.pooling, cfg.max_length)  # --model's, as in the other modes
        print(f"wrote {made['out']}: {made['pairs']} pairs, mean score {made['mean_score']:.3f} ({made['clipped']} "
              f"clipped to {made['score_range'][0]:g}-{made['score_range'][1]:g})")
        return 0
    if distill_cfg.distill:
        print(json.dumps(train_distilled(cfg, distill_cfg, train_cfg), indent=2))
        return 0
    if files.input:
        if not files.out:
            raise ConfigError("--input needs --out FILE.npy")
        out = files.out if files.out.endswith(".npy") else files.out + ".npy"  # what np.save would have written
        check_replaceable(out, _is_embeddings, "an embeddings array (.npy)", files.overwrite)
    if cfg.train:
        summary = train_sentence_encoder(cfg, train_cfg)
        print(json.dumps(summary, indent=2))
        return 0

    batch_size = cfg.eval_batch_size
    if files.evaluate:  # any kind of sentence model directory (litebert.sentences.directories), scored on the same pairs
        benchmark = is_benchmark(files.evaluate)
        pairs, labels = read_pairs(files.evaluate, cfg, cfg.max_eval_examples)
        for directory in files.compare:  # a mistyped one is refused before --model is scored, not after
            if not os.path.isdir(directory):
                raise FileNotFoundError(f"--compare: no such directory: {directory}")
        # --pooling and --max-length are --model's; the --compare directories are scored as they were saved
        scores = score_models([cfg.model, *files.compare], pairs, labels, cfg.pooling, cfg.max_length, batch_size,
                              resolve_device(train_cfg.device), recall=not benchmark)
        print(json.dumps(scores[cfg.model] if not files.compare else scores))
        return 0
    sentences = read_rows(Path(files.input), "sentence")  # row i of the .npy is line i; read before the model
    if not sentences:
        raise DataError(f"{files.input}: no sentences")
    model = load_sentence_model(cfg.model, cfg.pooling, cfg.max_length)
    model.encoder.to(resolve_device(train_cfg.device))  # --device: auto is the GPU when there is one
    vectors = model.encode(sentences, batch_size, show_progress_bar=train_cfg.progress)
    with atomic_open(out, "wb") as f:
        np.save(f, vectors)
    print(f"wrote {out}: {vectors.shape[0]} x {vectors.shape[1]} ({model.pooling} pooling)")
    return 0
