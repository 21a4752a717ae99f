"""Distilling a sentence-transformers teacher into S-ALBERT (`litebert embed --distill TEACHER`).

Reimers & Gurevych (2020), "Making Monolingual Sentence Embeddings Multilingual using Knowledge Distillation":
the student learns to put each text where the teacher puts it, by mean squared error between vectors:
  * monolingual text s:     MSE(student(s), teacher(s))
  * parallel pairs (s, t):  MSE(student(s), teacher(s)) + MSE(student(t), teacher(s)): a translation, or any
                            paraphrase, is pulled onto the teacher's vector of its source side.
Both reduce to one list of (text, target row) items, shuffled and batched by the one training loop, so
distillation is resumable, atomic, torchrun-aware and plotted like every other training verb.

The teacher is any directory litebert.sentences.directories reads (a sentence-transformers model such as all-MiniLM-L6-v2,
a plain encoder with mean pooling, another litebert S-ALBERT). Its vectors are computed once, before
training, and cached in OUT_DIR/teacher_vectors.npy (with the texts' and the teacher's fingerprint beside it in
teacher_vectors.json), so a resume does not recompute them and training runs the student alone. Under
torchrun every rank computes them (the same numbers; rank 0 writes the cache).

Where the student's hidden size differs from the teacher's dimension, a linear projection (sentence-
transformers' Dense module, identity activation) maps the pooled vector to the teacher's space. It is trained
with the student and saved as 2_Dense/ and listed in modules.json, so `SentenceTransformer(dir)` and
`litebert embed` give the same vectors; its weights also sit in the root model.safetensors as
`projection.linear.*`, where the loop's resume reads them (transformers' AlbertModel ignores them, as it
ignores a pretraining checkpoint's heads).

    litebert embed --model ALBERT_DIR --distill TEACHER --distill-text corpus/*.txt \\
        [--distill-pairs parallel.jsonl] --eval gensim:lee --out-dir out/distill [training flags]
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import random
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from litebert.corpus.documents import iter_documents, resolve_inputs
from litebert.errors import ConfigError, DataError
from litebert.files import atomic_open, read_json_object, sha256_named_files, write_json
from litebert.model import AlbertModel
from litebert.progress import progress_bar
from litebert.runconfig import check_declared
from litebert.sentence import SentenceEncoder, embed, sentence_settings
from litebert.sentences.directories import Dense, SentenceModel, add_dense, load_sentence_model
from litebert.sentences.sts import is_benchmark, pair_scores, read_benchmark, read_scored_pairs
from litebert.tokenizer import Tokenizer
from litebert.training import sweep
from litebert.training.data import ShuffledData
from litebert.training.distributed import is_main_process, process_device
from litebert.training.loop import train
from litebert.weights import resolve_model_dir

CACHE = "teacher_vectors"


@dataclass
class DistillConfig:
    """What `litebert embed --distill` learns from (the [embed] table of --config holds these too)."""

    distill: str = field(default="", metadata={
        "help": "teacher: a sentence-transformers directory (e.g. all-MiniLM-L6-v2), a plain encoder (mean "
                "pooling) or a litebert S-ALBERT; the student (--model) learns its vectors by MSE",
        "metavar": "TEACHER"})
    distill_text: list[str] = field(default_factory=list, metadata={
        "help": "monolingual text: student(s) -> teacher(s); text/JSONL/.gz files or globs, read as `litebert "
                "prepare` reads them", "metavar": "FILE"})
    distill_pairs: list[str] = field(default_factory=list, metadata={
        "help": "parallel pairs (.jsonl/.tsv/.csv with --text-columns, source first): student(s) and student(t) "
                "-> teacher(s)", "metavar": "FILE"})
    distill_span: int = field(default=1, metadata={"range": "[1, inf)",
        "help": "join 1 to N consecutive sentences of a document into one training text (seeded), so the student "
                "also sees paragraphs"})
    max_distill_texts: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "use a seeded random sample of N monolingual texts (parallel pairs are all used)"})
    teacher_max_length: int | None = field(default=None, metadata={"range": "[4, inf)",
        "help": "tokens per text for the teacher (default: its max_seq_length)"})
    teacher_batch_size: int = field(default=64, metadata={"range": "[1, inf)", "help": "texts per teacher forward"})

    def __post_init__(self) -> None:
        check_declared(self)  # built in code, held to the ranges above as the command line is


class DistillOutput(NamedTuple):
    loss: torch.Tensor
    vectors: torch.Tensor  # (B, D) the student's, in the teacher's space


class DistillStudent(SentenceEncoder):
    """S-ALBERT whose pooled vector (through `projection` where dimensions differ) is regressed onto a teacher's."""

    def __init__(self, albert, teacher_dim: int, pooling: str = "mean", max_length: int = 128,
                 projection: Dense | None = None, **settings):
        super().__init__(albert, pooling=pooling, max_length=max_length, **settings)
        hidden = albert.config.hidden_size
        teacher_dim = teacher_dim or (projection.linear.out_features if projection is not None else hidden)  # 0: as saved
        if projection is None and teacher_dim != hidden:
            projection = Dense(hidden, teacher_dim)
            projection.linear.weight.data.normal_(0.0, albert.config.initializer_range)
            projection.linear.bias.data.zero_()
        if projection is not None and (projection.linear.in_features, projection.linear.out_features) != \
                (hidden, teacher_dim):
            raise ConfigError(f"the student's projection maps {projection.linear.in_features} -> "
                              f"{projection.linear.out_features}, not hidden size {hidden} -> teacher {teacher_dim}")
        self.projection = projection

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        pooled = self.encode(input_ids, attention_mask)  # (B, H)
        return pooled if self.projection is None else self.projection(pooled)  # (B, D)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, target: torch.Tensor) -> DistillOutput:
        vectors = self.vectors(input_ids, attention_mask).float()
        return DistillOutput(F.mse_loss(vectors, target.float()), vectors)

    def save_pretrained(self, directory: str | os.PathLike, **kwargs) -> None:
        super().save_pretrained(directory, **kwargs)
        if self.projection is not None:
            add_dense(os.fspath(directory), self.projection)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, teacher_dim: int = 0, **overrides) -> "DistillStudent":
        """Any ALBERT directory; a distilled student's 2_Dense projection is read back."""

        directory = os.fspath(name_or_path)
        settings = {k: v for k, v in sentence_settings(directory).items() if k in ("pooling", "max_length")}
        settings.update({k: v for k, v in overrides.items() if v is not None})
        dense_dir = os.path.join(directory, "2_Dense")
        projection = Dense.load(dense_dir) if os.path.isdir(dense_dir) else None
        return cls(AlbertModel.from_pretrained(directory), teacher_dim, projection=projection, **settings)


# ----------------------------------------------------------------------------- data


def monolingual_texts(paths: list[str], span: int, seed: int, limit: int | None) -> list[str]:
    """Texts of 1 to `span` consecutive sentences (lengths drawn with `seed`) from documents, in order; with
    `limit`, a seeded random sample of that many, in corpus order."""

    rng = random.Random(seed)
    texts: list[str] = []
    for doc in iter_documents(resolve_inputs(paths)):
        sentences = [s.strip() for s in doc if s.strip()]
        i = 0
        while i < len(sentences):
            n = rng.randint(1, span)
            texts.append(" ".join(sentences[i:i + n]))
            i += n
    if limit is not None and len(texts) > limit:
        keep = sorted(random.Random(seed + 1).sample(range(len(texts)), limit))
        texts = [texts[i] for i in keep]
    return texts


def distill_items(cfg: DistillConfig, pairs_reader, seed: int) -> tuple[list[str], list[tuple[str, int]]]:
    """(teacher texts, student items): each item is (text for the student, row of its target in the teacher's
    vectors). Monolingual s gives (s, row(s)); a parallel pair (s, t) gives (s, row(s)) and (t, row(s))."""
    sources: dict[str, int] = {}
    items: list[tuple[str, int]] = []

    def row(text: str) -> int:
        return sources.setdefault(text, len(sources))

    if cfg.distill_text:
        for text in monolingual_texts(cfg.distill_text, cfg.distill_span, seed, cfg.max_distill_texts):
            items.append((text, row(text)))
    for path in cfg.distill_pairs:
        for s, t in pairs_reader(path):
            items += [(s, row(s)), (t, row(s))]
    if not items:
        given = [*cfg.distill_text, *cfg.distill_pairs]
        raise ConfigError(f"nothing to distill on: {', '.join(given)} held no sentences" if given else
                          "nothing to distill on: pass --distill-text FILES and/or --distill-pairs FILES")
    return list(sources), items


def _cached_key(meta: str) -> dict | None:
    """The key the cached vectors were made for; None for a damaged one, so they are made again."""
    try:
        return read_json_object(meta, DataError)
    except DataError:
        return None


def teacher_vectors(teacher: str, texts: list[str], cfg: DistillConfig, out_dir: str, write: bool,
                    progress: bool = True, device: torch.device | str = "cpu",
                    load: Callable[[], SentenceModel] | None = None) -> np.ndarray:
    """The teacher's (N, D) float32 vectors of `texts`, read from OUT_DIR's cache when it was made from the same
    texts by the same teacher at the same length, else computed on `device` (and cached when `write`). `load`:
    the teacher already loaded (or loaded once for several uses) by the caller."""
    key = {"teacher": os.path.abspath(teacher), "teacher_sha256": _directory_sha256(teacher),
           "teacher_max_length": cfg.teacher_max_length, "texts": len(texts),
           "texts_sha256": hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()}
    npy, meta = os.path.join(out_dir, CACHE + ".npy"), os.path.join(out_dir, CACHE + ".json")
    if os.path.isfile(npy) and os.path.isfile(meta) and _cached_key(meta) == key:
        cached = np.load(npy)  # allow_pickle is False by default: nothing is unpickled
        if cached.ndim == 2 and len(cached) == len(texts):
            return cached
    model = load() if load else load_sentence_model(teacher, max_length=cfg.teacher_max_length, device=device)
    chunk = 16 * cfg.teacher_batch_size
    parts = []
    with progress_bar(len(texts), "teacher", enabled=progress) as bar:
        for start in range(0, len(texts), chunk):
            parts.append(model.encode(texts[start:start + chunk], cfg.teacher_batch_size))
            bar.update(len(parts[-1]))
    vectors = np.concatenate(parts).astype(np.float32)
    if write:  # the key goes last and is removed first: a kill in between leaves no key to match the new array
        if os.path.isfile(meta):
            os.remove(meta)
        with atomic_open(npy, "wb") as f:
            np.save(f, vectors)
        write_json(meta, key)
    return vectors


def _directory_sha256(directory: str) -> str:
    """sha256 over every file of a model directory (relative path and content): retrained weights, another
    pooling or tokenizer saved at the same path make another teacher."""
    paths = sorted(os.path.join(root, name) for root, _, names in os.walk(directory) for name in names)
    return sha256_named_files((os.path.relpath(path, directory), path) for path in paths)


# ----------------------------------------------------------------------------- training


def student_vectors(model: DistillStudent, tokenizer, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """(N, D) vectors of `texts` as the saved student gives them (pooled, then projected)."""

    vectors = embed(model, tokenizer, texts, model.pooling, batch_size, model.max_length)
    if model.projection is None:
        return vectors
    device = next(model.parameters()).device
    with torch.no_grad():
        return model.projection(torch.from_numpy(vectors).to(device)).float().cpu().numpy()


def train_distilled(sentence_cfg, cfg: DistillConfig, train_cfg) -> dict:
    """Distil cfg.distill into sentence_cfg.model through the one loop; returns the summary, also written to
    OUT_DIR/summary.json. The teacher is scored on sentence_cfg.eval at the start, beside the student."""

    if not sentence_cfg.model:
        raise ConfigError("--model is required: the student, an ALBERT model directory with its tokenizer")
    for section, settings in (("sentence", sentence_cfg), ("distill", cfg)):
        sweep.refuse_changed_resume(settings, train_cfg, section)
    main = is_main_process()
    resolve_model_dir(sentence_cfg.model)  # both models found before any text is read or encoded
    if not os.path.isdir(cfg.distill):
        raise FileNotFoundError(f"--distill: no such directory: {cfg.distill}")

    def pairs_reader(path: str):
        return read_scored_pairs(path, sentence_cfg.text_columns, "")[0]

    texts, items = distill_items(cfg, pairs_reader, train_cfg.seed)
    if len(items) < train_cfg.batch_size:
        raise DataError(f"{len(items)} distillation texts, fewer than batch_size {train_cfg.batch_size}")
    os.makedirs(train_cfg.out_dir, exist_ok=True)
    device = process_device(train_cfg.device)  # the teacher encodes where the student trains
    # Loaded at most once, for its vectors (unless cached) and its scores on --eval, and let go before training
    load_teacher = functools.cache(lambda: load_sentence_model(cfg.distill, max_length=cfg.teacher_max_length,
                                                               device=device))
    targets = teacher_vectors(cfg.distill, texts, cfg, train_cfg.out_dir, write=main,
                              progress=train_cfg.progress and main, load=load_teacher)
    tokenizer = Tokenizer.from_pretrained(sentence_cfg.model)
    model = DistillStudent.from_pretrained(sentence_cfg.model, targets.shape[1], pooling=sentence_cfg.pooling,
                                           max_length=sentence_cfg.max_length)
    target_tensor = torch.from_numpy(targets)

    def collate(indices: list[int], position: int) -> dict[str, torch.Tensor]:
        batch = tokenizer([items[i][0] for i in indices], padding=True, truncation=True,
                          max_length=model.max_length, return_tensors="pt")
        return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                "target": target_tensor[[items[i][1] for i in indices]]}

    evaluate, teacher_scores = None, {}
    if sentence_cfg.eval:
        recall = not is_benchmark(sentence_cfg.eval)
        eval_pairs, eval_labels = read_scored_pairs(
            sentence_cfg.eval, sentence_cfg.text_columns, sentence_cfg.label_column, sentence_cfg.max_eval_examples
        ) if recall else read_benchmark(sentence_cfg.eval)

        def evaluate(m: DistillStudent) -> dict[str, float]:  # noqa: F811  (None above: no --eval)
            return pair_scores(lambda t: student_vectors(m, tokenizer, t, sentence_cfg.eval_batch_size),
                               eval_pairs, eval_labels, recall)

        if main:
            teacher_scores = pair_scores(lambda t: load_teacher().encode(t, cfg.teacher_batch_size), eval_pairs,
                                         eval_labels, recall)
    load_teacher.cache_clear()  # the teacher's memory (on a GPU, the card's) goes back before the student trains

    tokenizer_dir = os.path.join(train_cfg.out_dir, "tokenizer")
    tokenizer.save_pretrained(tokenizer_dir)
    result = train(model, ShuffledData(len(items), collate), train_cfg, evaluate, tokenizer=tokenizer_dir,
                   configs={"sentence": {k: v for k, v in dataclasses.asdict(sentence_cfg).items() if v is not None},
                            "distill": {k: v for k, v in dataclasses.asdict(cfg).items() if v is not None}},
                   evaluate_start=evaluate is not None,
                   identity={"data": {"teacher": os.path.abspath(cfg.distill), "items": len(items),
                                      "targets_sha256": hashlib.sha256(targets.tobytes()).hexdigest()}})
    summary = {"teacher": cfg.distill, "teacher_dim": int(targets.shape[1]), "teacher_texts": len(texts),
               "items": len(items), "projection": model.projection is not None, "pooling": model.pooling,
               "steps": result.step, "teacher_eval": teacher_scores, "before": result.start_eval,
               "after": dict(result.eval), "checkpoint": str(result.checkpoint)}
    if main:
        write_json(os.path.join(train_cfg.out_dir, "summary.json"), summary)
    return summary
