"""Training a SentencePiece unigram tokenizer with ALBERT's flags and id layout (`litebert tokenizer`).

Encoding lives in litebert/tokenizer.py; this module only makes the spiece.model it loads. The sentences are
normalised with the tokenizer's own `preprocess_text` first, so the pieces match what encoding will see.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field

import sentencepiece as spm

from litebert.tokenizer import NormalizerOptions, Tokenizer, preprocess_text

# The flags google-research/albert trained its 30k-clean model with (README, "spm_train ..."); the vocab size,
# pad/unk/bos/eos ids and control symbols are set separately in train_tokenizer because they define the id layout.
ALBERT_SPM_FLAGS = dict(
    model_type="unigram",
    user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"],
    shuffle_input_sentence=True,  # kept as ALBERT's; train_tokenizer samples itself and hands spm no more
    input_sentence_size=10_000_000,  # than this many sentences (seeded: spm's own sampler is not)
    character_coverage=0.99995,
)
# sentencepiece reports a too-large vocabulary like this; we turn it into a one-line hint.
_VOCAB_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")


def train_tokenizer(files: list[str] | None, out_dir: str, vocab_size: int | None = None, do_lower_case=True,
                    keep_accents=False, remove_space=True, seed: int = 12345, **spm_options) -> Tokenizer:
    """Train a unigram spiece.model on text files with ALBERT's flags and id layout; save it with the HF files.

    files: text/JSONL/.gz files or globs, read like `litebert prepare` reads them; None -> the bundled corpus.
    vocab_size: None -> 30000 (ALBERT), or 4000 for the bundled corpus, which is too small for 30000 pieces.
    The text is normalised with `preprocess_text` before training, so the pieces match what encoding will see.
    spm_options override or extend ALBERT_SPM_FLAGS (e.g. input_sentence_size=1000, num_threads=1).
    seed: the sample of input_sentence_size sentences, drawn here: sentencepiece's own sampler is seeded from the
    OS in each process (spm.set_random_generator_seed does not reach it), so one command learned different pieces.
    """
    from litebert.corpus.documents import iter_documents, resolve_inputs

    paths = resolve_inputs(files)
    if vocab_size is None:
        vocab_size = 4000 if not files else 30000
    if vocab_size < 10:
        raise ValueError(f"vocab_size must be at least 10, got {vocab_size}")
    opts = NormalizerOptions(do_lower_case, keep_accents, remove_space)
    pp = {"lower": do_lower_case, "keep_accents": keep_accents, "remove_space": remove_space}
    count = [0]

    def sentences():
        for doc in iter_documents(paths):
            for sentence in doc:
                line = preprocess_text(sentence, **pp)
                if line:
                    count[0] += 1
                    yield line

    # ALBERT used character_coverage=0.99995 on English Wikipedia + books; on a small or non-Latin corpus that
    # drops rare characters (Korean syllables seen once) to <unk>, so full coverage is our default.
    flags = {**ALBERT_SPM_FLAGS, "character_coverage": 1.0, **spm_options}
    limit = flags.pop("input_sentence_size", 0)
    lines = iter(reservoir_sample(sentences(), limit, seed)) if limit else sentences()
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, "spiece")
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines, input_sentence_size=0, model_prefix=prefix, vocab_size=vocab_size,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
            minloglevel=flags.pop("minloglevel", 2), **flags)
    except RuntimeError as e:
        m = _VOCAB_TOO_HIGH.search(str(e))
        if count[0] == 0:
            raise ValueError(f"no text found in {', '.join(paths)}") from None
        if m:
            raise ValueError(f"vocab_size={m.group(1)} is too large for this corpus: sentencepiece can build at most "
                             f"{m.group(2)} pieces from it; pass a smaller --vocab-size or more text") from None
        raise ValueError(f"sentencepiece training failed: {str(e).strip().splitlines()[-1]}") from None
    os.remove(prefix + ".vocab")  # the .vocab listing is redundant with the model; HF never reads it
    tok = Tokenizer(prefix + ".model", **vars(opts))
    tok.save_pretrained(out_dir)
    return tok


def reservoir_sample(items, k: int, seed: int) -> list:
    """k items drawn uniformly from a stream of unknown length (Algorithm R), the same k for the same seed."""
    rng = random.Random(seed)
    kept: list = []
    for i, item in enumerate(items):
        if i < k:
            kept.append(item)
        elif (j := rng.randrange(i + 1)) < k:
            kept[j] = item
    return kept


# ----------------------------------------------------------------------------- CLI


@dataclass
class TokenizerConfig:
    """The options of `litebert tokenizer` (the [tokenizer] table of --config)."""

    inputs: list[str] = field(default_factory=list, metadata={
        "positional": True, "help": "text/JSONL/.gz files or globs (default: the bundled Persuasion corpus)"})
    out: str = field(default="out/tokenizer", metadata={
        "help": "output directory (spiece.model + HF tokenizer files); with --encode, the tokenizer to use",
        "metavar": "DIR"})
    vocab_size: int | None = field(default=None, metadata={
        "help": "pieces in the vocabulary (default: 30000 as ALBERT; 4000 for the bundled corpus)"})
    cased: bool = field(default=False, metadata={"help": "keep case (do_lower_case=False)"})
    keep_accents: bool = field(default=False, metadata={"help": "keep accents (no NFKD accent stripping)"})
    keep_space: bool = field(default=False, metadata={"help": "do not collapse whitespace (remove_space=False)"})
    input_sentence_size: int | None = field(default=None, metadata={
        "help": "sentences sampled for training (default: ALBERT's 10000000)"})
    encode: str | None = field(default=None, metadata={
        "help": "encode TEXT with the tokenizer in --out instead of training", "metavar": "TEXT"})


def cli(argv: list[str]) -> int:
    from litebert.runconfig import add_config_args, parse_verb, verb_parser

    parser = verb_parser("tokenizer", __doc__, epilog=(
        "ids: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, then the learned pieces (ALBERT's layout)\n"
        "examples:\n  litebert tokenizer corpus/*.txt --out out/tok --vocab-size 30000\n"
        "  litebert tokenizer --out out/tok --encode 'Hello world.'"))
    add_config_args(parser, TokenizerConfig, "training (or encoding)")
    (cfg,) = parse_verb(parser, argv, TokenizerConfig)
    if cfg.encode is not None:
        tok = Tokenizer.from_pretrained(cfg.out)
        ids = tok.encode(cfg.encode)
        print(json.dumps({"ids": ids, "pieces": [tok.pieces[i] for i in ids]}, ensure_ascii=False))
        return 0
    extra = {} if cfg.input_sentence_size is None else {"input_sentence_size": cfg.input_sentence_size}
    tok = train_tokenizer(cfg.inputs or None, cfg.out, cfg.vocab_size, do_lower_case=not cfg.cased,
                          keep_accents=cfg.keep_accents, remove_space=not cfg.keep_space, **extra)
    print(f"wrote {cfg.out}/spiece.model: {tok}")
    return 0
