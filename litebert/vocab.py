"""Vocabulary extension: add pieces to a trained spiece.model and grow a model's embeddings to match.

Domain text (law, medicine, another script) often splits into many short pieces under a general tokenizer.
Adding whole pieces for its frequent words shortens sequences and gives each word its own embedding, without
retraining: every existing id keeps its piece, its embedding row and its MLM bias, so the extended model computes
exactly what it did on text that does not use the new pieces.

How, and why:
  * pieces come from a word list, or are *learned* from a domain corpus: train a fresh SentencePiece model on it
    (same normalisation) and keep the NORMAL pieces the old vocabulary lacks, most probable first;
  * they are appended to the ModelProto as NORMAL pieces (ids V, V+1, ...). A unigram tokenizer picks the
    segmentation with the highest total score, so a new piece's score is set just above the best score the
    vocabulary (old pieces plus the new ones already placed, shortest first) gives its string: the piece then
    wins for its own string, and is as likely as the split it replaces, not more (so it does not swallow longer
    words' better segmentations);
  * the new embedding row (and MLM bias) is the mean of the rows of the old pieces the old tokenizer splits it
    into: the model's first guess for the word is what it saw for its parts, instead of noise.

The extended directory (spiece.model, tokenizer.json, config.json, model.safetensors) loads in transformers'
AlbertTokenizer / AlbertTokenizerFast / AlbertFor* and in litebert, with the same ids and outputs.
"""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import CheckpointError, ConfigError
from litebert.files import atomic_open, same_path, write_dir_atomically
from litebert.heads import model_class
from litebert.model import encoder_of
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.sentence import SentenceEncoder, sentence_settings
from litebert.tasks.records import open_text  # a file that is not UTF-8 is an error naming it
from litebert.text.conventions import SPECIALS, SPIECE_UNDERLINE
from litebert.text.transformers_files import SPIECE_FILE
from litebert.tokenizer import Tokenizer
from litebert.weights import resolve_model_dir

log = logging.getLogger("litebert")

SCORE_MARGIN = 0.1  # how far above its best split a new piece scores: enough to win, small enough to stay modest
# Plus a per-piece jitter in [0, TIE_BREAK): with one fixed margin, two overlapping new pieces ("▁1" and "19" over
# "▁1990") give two segmentations with exactly the same score, and sentencepiece (float32 sums) and HF's
# tokenizers (float64 sums) then break the tie differently. Jitter far above float32 rounding (~1e-5) makes the
# best segmentation unique, so both libraries agree.
TIE_BREAK = 0.05


@dataclass
class Extension:
    """What `extend_tokenizer` did: the new tokenizer and, per new piece, the old ids it replaces."""

    tokenizer: Tokenizer
    pieces: list[str]  # appended, in id order (ids old_vocab_size, old_vocab_size + 1, ...)
    old_ids: list[list[int]]  # the old tokenizer's ids for each new piece's string
    skipped: dict[str, str]  # requested piece -> why it was not added


# ----------------------------------------------------------------------------- choosing pieces


def pieces_from_words(tokenizer: Tokenizer, words: list[str]) -> list[str]:
    """The pieces that whole words become: ALBERT's normalisation, then sentencepiece's, then "▁" in front."""
    out = []
    for word in words:
        if any(special in word for special in SPECIALS.values()):
            out.append(SPIECE_UNDERLINE + word)  # kept as typed, for extend_tokenizer to refuse (and report)
            continue
        text = tokenizer.preprocess(word)
        if text:
            out.append(tokenizer.sp.normalize(text))  # NFKC + the dummy-prefix "▁", as encoding will see it
    return out


def learn_pieces(tokenizer: Tokenizer, files: list[str], max_pieces: int, vocab_size: int = 8000,
                 **spm_options) -> list[str]:
    """Up to `max_pieces` pieces that a SentencePiece model trained on `files` has and `tokenizer` lacks,
    most probable first. `vocab_size` is the size of that domain model (it shrinks to what the corpus
    supports when too large)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    known = set(tokenizer.pieces)
    with tempfile.TemporaryDirectory() as tmp:
        options = vars(tokenizer.options)
        try:
            domain = train_tokenizer(files, tmp, vocab_size, **options, **spm_options)
        except ValueError as e:
            if "too large for this corpus" not in str(e):
                raise
            limit = int(str(e).split("at most ")[1].split()[0])
            domain = train_tokenizer(files, tmp, limit, **options, **spm_options)
    proto = pb.ModelProto.FromString(domain.model_proto)
    normal = pb.ModelProto.SentencePiece.NORMAL
    fresh = [p for p in proto.pieces if p.type == normal and p.piece not in known and p.piece != SPIECE_UNDERLINE]
    fresh.sort(key=lambda p: -p.score)
    return [p.piece for p in fresh[:max_pieces]]


# ----------------------------------------------------------------------------- extending the tokenizer


def best_split(text: str, scores: dict[str, float], max_len: int, unk_score: float) -> tuple[float, list[str]]:
    """The unigram Viterbi over `scores` (piece -> log probability): the highest-scoring segmentation of `text`
    and its score. A character no piece covers is a one-character <unk> scoring `unk_score`, as in
    sentencepiece (whose unknown penalty is the lowest piece score minus 10)."""
    n = len(text)
    best = [0.0] + [-math.inf] * n  # best[i]: score of the best segmentation of text[:i]
    back = [0] * (n + 1)
    for end in range(1, n + 1):
        for start in range(max(0, end - max_len), end):
            score = scores.get(text[start:end], unk_score if end - start == 1 else None)
            if score is not None and best[start] + score > best[end]:
                best[end], back[end] = best[start] + score, start
    pieces, end = [], n
    while end > 0:
        pieces.append(text[back[end]:end])
        end = back[end]
    return best[n], pieces[::-1]


def extend_tokenizer(tokenizer: Tokenizer, pieces: list[str], out_dir: str) -> Extension:
    """Append `pieces` (in the given order, duplicates and known pieces skipped) to the tokenizer's
    ModelProto as NORMAL pieces, save the result (spiece.model + HF files) in `out_dir` and load it."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto.FromString(tokenizer.model_proto)
    normal = pb.ModelProto.SentencePiece.NORMAL
    old_scores = {p.piece: p.score for p in proto.pieces if p.type == normal}
    scores = dict(old_scores)
    max_len = max(map(len, scores), default=1)
    unk_score = min(scores.values(), default=0.0) - 10.0
    known = set(tokenizer.pieces)
    user_defined = [p.piece for p in proto.pieces if p.type == pb.ModelProto.SentencePiece.USER_DEFINED]
    skipped: dict[str, str] = {}
    chosen: list[str] = []
    for piece in pieces:
        why = _unusable(piece, known, user_defined)
        if why:
            skipped[piece] = why
        else:
            chosen.append(piece)
            known.add(piece)

    # Shortest first: a piece's best split may use new shorter pieces, never new longer ones.
    new_scores: dict[str, float] = {}
    for piece in sorted(chosen, key=len):
        split_score, _ = best_split(piece, scores, max(max_len, len(piece)), unk_score)
        margin = SCORE_MARGIN + TIE_BREAK * random.Random(piece).random()  # seeded by the piece: reproducible
        new_scores[piece] = scores[piece] = split_score + margin
    for piece in chosen:
        proto.pieces.add(piece=piece, score=new_scores[piece], type=normal)
    proto.trainer_spec.vocab_size = len(proto.pieces)

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, SPIECE_FILE)
    with atomic_open(path, "wb") as f:
        f.write(proto.SerializeToString())
    new = Tokenizer(path, **vars(tokenizer.options), pre_tokenizer=tokenizer.pre_tokenizer)
    new.save_pretrained(out_dir)
    old_ids = [piece_ids_in(tokenizer, piece, old_scores, unk_score) for piece in chosen]
    return Extension(new, chosen, old_ids, skipped)


def _unusable(piece: str, known: set[str], user_defined: list[str]) -> str | None:
    """Why `piece` cannot be added as one id, or None."""
    if not piece or piece == SPIECE_UNDERLINE:
        return "empty"
    if piece in known:
        return "already in the vocabulary"
    if SPIECE_UNDERLINE in piece[1:] or any(c.isspace() for c in piece):
        return "spans several words"
    if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
        return "ends in digit + comma, which ALBERT's tokenizer always splits"
    if any(special in piece for special in SPECIALS.values()):
        return "contains a special token"
    for symbol in user_defined:
        if symbol in piece:  # sentencepiece cuts user-defined symbols out of the text before anything else
            return f"contains the user-defined symbol {symbol!r}, which is always its own piece"
    return None


def piece_ids_in(tokenizer: Tokenizer, piece: str, scores: dict[str, float], unk_score: float) -> list[int]:
    """The old ids of `piece`'s string: the tokenizer's own split of the word for a word-initial "▁" piece;
    for a piece inside a word (no "▁", so no dummy prefix may be added), the same unigram Viterbi over the old
    pieces' `scores`, <unk> where no piece covers it."""
    if piece.startswith(SPIECE_UNDERLINE):
        return tokenizer.sp.encode(piece[1:], out_type=int)
    _, parts = best_split(piece, scores, max(map(len, scores), default=1), unk_score)
    return [tokenizer.sp.piece_to_id(p) for p in parts]  # piece_to_id gives <unk> for an uncovered character


# ----------------------------------------------------------------------------- extending the model


def extend_embeddings(model: nn.Module, old_ids: list[list[int]]) -> None:
    """Grow the word embeddings by one row per entry of `old_ids`, in place: row V + i is the mean of the old
    rows `old_ids[i]`. An MLM head's bias grows the same way, and its decoder stays tied to the embeddings."""
    encoder = encoder_of(model)
    old = encoder.embeddings.word_embeddings
    V, E = old.weight.shape
    if not old_ids:
        return
    with torch.no_grad():
        rows = torch.stack([old.weight[ids].mean(0) for ids in old_ids])  # (n, E)
        grown = nn.Embedding(V + len(old_ids), E, padding_idx=old.padding_idx, device=old.weight.device,
                             dtype=old.weight.dtype)
        grown.weight.copy_(torch.cat([old.weight, rows]))
    encoder.embeddings.word_embeddings = grown
    head = getattr(model, "predictions", None)
    if head is not None:
        with torch.no_grad():
            bias = torch.cat([head.bias, torch.stack([head.bias[ids].mean() for ids in old_ids])])
        head.bias = nn.Parameter(bias)
        head.decoder.weight, head.decoder.bias = grown.weight, head.bias  # still tied, as in model.py
        head.decoder.out_features = V + len(old_ids)
    for config in {id(c): c for c in (model.config, encoder.config)}.values():
        config.vocab_size = V + len(old_ids)


def extend_vocab(model_dir: str, out_dir: str, words: list[str] | None = None, corpus: list[str] | None = None,
                 max_pieces: int = 1000, domain_vocab_size: int = 8000, overwrite: bool = False,
                 **spm_options) -> Extension:
    """Add pieces for `words` and/or up to `max_pieces` learned from the `corpus` files to the model directory's
    tokenizer, grow its model to match, and save both in `out_dir` (the model keeps its class). An S-ALBERT
    directory (sentence_config.json, see litebert/embed.py) is loaded and saved as a SentenceEncoder, so its
    pooling description comes along instead of silently reverting to the default.

    out_dir is written whole or not at all (staged beside it, then renamed); an existing non-empty out_dir is
    refused before any work unless overwrite=True, which replaces it."""

    if not words and not corpus:
        raise ConfigError("nothing to add: give words and/or a domain corpus")
    if max_pieces < 1:
        raise ConfigError(f"max_pieces must be >= 1, got {max_pieces}")
    model_dir = resolve_model_dir(model_dir)
    if same_path(model_dir, out_dir):
        raise ConfigError(f"{out_dir}: write the extended model to a new directory, not over {model_dir}")
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not overwrite:
        raise ConfigError(f"{out_dir} exists and is not empty: choose a new directory for the extended model, or "
                          "pass --overwrite to replace it")
    tokenizer = Tokenizer.from_pretrained(model_dir)
    config = AlbertConfig.load(model_dir)
    if config.vocab_size != tokenizer.vocab_size:
        raise CheckpointError(f"{model_dir}: config.json has vocab_size {config.vocab_size} but spiece.model "
                         f"{tokenizer.vocab_size} pieces")
    pieces = pieces_from_words(tokenizer, words or [])
    if corpus:
        pieces += learn_pieces(tokenizer, corpus, max_pieces, domain_vocab_size, **spm_options)
    model = (SentenceEncoder if sentence_settings(model_dir) else model_class(config)).from_pretrained(model_dir)
    made: list[Extension] = []

    def fill(tmp) -> None:
        made.append(extend_tokenizer(tokenizer, pieces, str(tmp)))
        extend_embeddings(model, made[0].old_ids)
        model.save_pretrained(tmp)

    write_dir_atomically(out_dir, fill)
    extension = made[0]
    log.info("%s: added %d pieces (vocabulary %d -> %d), skipped %d", out_dir, len(extension.pieces),
             tokenizer.vocab_size, extension.tokenizer.vocab_size, len(extension.skipped))
    return extension


@dataclass
class ExtendVocabConfig:
    """The options of `litebert extend-vocab` (the [extend-vocab] table of --config)."""

    model: str = field(default="", metadata={
        "help": "model directory with spiece.model (litebert or HF) (required)", "metavar": "DIR", "required": True})
    out: str = field(default="", metadata={
        "help": "new directory for the extended tokenizer and model (required)", "metavar": "DIR", "required": True})
    words: str | None = field(default=None, metadata={"help": "file of words to add, one per line",
                                                      "metavar": "FILE"})
    corpus: list[str] = field(default_factory=list, metadata={
        "help": "domain text files to learn new pieces from", "metavar": "FILE"})
    max_pieces: int = field(default=1000, metadata={"range": "[1, inf)",
        "help": "at most this many learned pieces, >= 1"})
    domain_vocab_size: int = field(default=8000, metadata={"range": "[6, inf)",
        "help": "vocabulary of the SentencePiece model trained on the corpus"})
    overwrite: bool = field(default=False, metadata={"help": "replace --out if it exists and is not empty"})


def cli(argv: list[str]) -> int:

    parser = verb_parser("extend-vocab", __doc__, {"extension": ExtendVocabConfig})
    args = parser.parse_args(argv)
    (cfg,) = parse_verb(parser, args)
    # pieces are learned from --corpus only: with --words alone, its options would go unread
    refuse_flags_of_other_modes(args, "--corpus" if cfg.corpus else "--words alone",
                                dict.fromkeys(("max_pieces", "domain_vocab_size"), ("--corpus",)), "extend-vocab")
    words, blank = None, 0
    if cfg.words:  # a list, not rows: a blank line adds nothing and is counted; a line not UTF-8 is refused
        with open_text(Path(cfg.words)) as f:
            lines = [line.strip() for line in f]
        while lines and not lines[-1]:
            lines.pop()
        words, blank = [w for w in lines if w], lines.count("")
    ext = extend_vocab(cfg.model, cfg.out, words, cfg.corpus, cfg.max_pieces, cfg.domain_vocab_size,
                       overwrite=cfg.overwrite)
    old = ext.tokenizer.vocab_size - len(ext.pieces)
    ids = f" (ids {old}..{ext.tokenizer.vocab_size - 1})" if ext.pieces else ""
    print(f"added {len(ext.pieces)} pieces{ids}, vocabulary {old} -> {ext.tokenizer.vocab_size}; wrote {cfg.out}")
    if cfg.words:
        print(f"  --words: {len(words)} words read from {cfg.words}" + (f", {blank} blank line(s) skipped" if blank
                                                                        else ""))
    if ext.pieces:
        print("  first: " + " ".join(ext.pieces[:20]))
    for piece, why in list(ext.skipped.items())[:10]:
        print(f"  skipped {piece!r}: {why}")
    return 0
