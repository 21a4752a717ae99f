"""Training a SentencePiece unigram tokenizer with ALBERT's flags and id layout (`litebert tokenizer`).

Encoding lives in litebert/tokenizer.py; this module only makes the spiece.model it loads. The sentences are
normalised with the tokenizer's own `preprocess_text` first, so the pieces match what encoding will see.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import random
import re
from dataclasses import dataclass, field

import sentencepiece as spm

from litebert.corpus.documents import iter_documents, resolve_inputs
from litebert.errors import ConfigError, DataError
from litebert.files import read_json_object, write_files_atomically, write_json
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.text.conventions import NormalizerOptions, preprocess_text
from litebert.text.pretokenize import SEGMENTERS, make_segmenter
from litebert.text.transformers_files import SPIECE_FILE, TOKENIZER_FILES
from litebert.tokenizer import Tokenizer
from litebert.weight_shards import INDEX_NAME

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
_VOCAB_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")
# "INTERNAL: src/trainer_interface.cc(638) [(static_cast<int>(...)) <= (...)] message": the source location and
# the failed C++ condition mean nothing to a user; the message after them is what we keep.
_SPM_INTERNALS = re.compile(r"^(?:[A-Z_]+: )?\S+\.(?:cc|h)\(\d+\)\s*(?:\[[^\]]*\]\s*)?")
# sentencepiece's own default: longer sentences are skipped by its trainer, with a log line at most.
SPM_MAX_SENTENCE_LENGTH = 4192
SUMMARY_NAME = "tokenizer_summary.json"  # beside spiece.model: what was read, used and skipped
# The files `litebert tokenizer` makes: a directory holding only these (and its summary) is its own result.
OWNED_FILES = (*TOKENIZER_FILES, SUMMARY_NAME)
_MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", INDEX_NAME)


def check_out_dir(out_dir: str, overwrite: bool) -> None:
    """Refuse (ConfigError) to replace a tokenizer `litebert tokenizer` did not make, or one inside a model
    directory (whose weights would no longer match its spiece.model), unless `overwrite`."""
    if overwrite or not os.path.isdir(out_dir):
        return
    names = set(os.listdir(out_dir))
    model = sorted(names & set(_MODEL_FILES))
    if model:
        raise ConfigError(f"{out_dir} holds a model ({', '.join(model)}): a new tokenizer there would no longer "
                          "match its weights; choose another --out, or pass --overwrite")
    ours = names & set(TOKENIZER_FILES)
    if ours and SUMMARY_NAME not in names:
        raise ConfigError(f"{out_dir} holds a tokenizer that `litebert tokenizer` did not make "
                          f"({', '.join(sorted(ours))}); choose another --out, or pass --overwrite to replace it")


def spm_message(error: Exception) -> str:
    """sentencepiece's error in plain words: without its source location and failed C++ condition."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return _SPM_INTERNALS.sub("", lines[-1]).strip()


def _training_sentences(paths: list[str], pp: dict, max_bytes: int, stats: collections.Counter, segment=None):
    """The corpus's sentences normalised as encoding will see them (`preprocess_text` with `pp`), counted in
    `stats` (morphemes spaced first by `segment`, when given); empty ones are dropped, and ones over `max_bytes` are skipped and counted here because
    sentencepiece's trainer would drop them without a word."""

    for doc in iter_documents(paths, stats=stats):
        for sentence in doc:
            line = preprocess_text(segment(sentence) if segment else sentence, **pp)
            if not line:
                continue
            if len(line.encode("utf-8")) > max_bytes:
                stats["skipped_too_long_sentences"] += 1  # sentencepiece would drop it without a word
                continue
            stats["sentences"] += 1
            yield line


def _training_error(error: RuntimeError, paths: list[str], stats: collections.Counter) -> Exception:
    """The error to raise for sentencepiece's failed training, in the user's terms: no text at all, a vocab_size
    the corpus cannot fill or hold (with the size that would work), or sentencepiece's own message cleaned."""
    if stats["sentences"] == 0:
        return DataError(f"no text found in {', '.join(paths)}{_skipped_words(stats, ' (', ')')}")
    if m := _VOCAB_TOO_HIGH.search(str(error)):
        return ConfigError(f"vocab_size={m.group(1)} is too large for this corpus: sentencepiece can build "
                           f"at most {m.group(2)} pieces from it; pass a smaller --vocab-size or more text")
    if m := _VOCAB_TOO_LOW.search(str(error)):
        return ConfigError(f"vocab_size={m.group(1)} is too small for this corpus: its characters and the "
                           f"special pieces need {m.group(2)} ids; pass --vocab-size {m.group(2)} or more")
    return DataError(f"sentencepiece could not train on {', '.join(paths)}: {spm_message(error)}")


def train_tokenizer(files: list[str] | None, out_dir: str, vocab_size: int | None = None, do_lower_case=True,
                    keep_accents=False, remove_space=True, seed: int = 12345, overwrite: bool = False,
                    pre_tokenize: str | None = None, **spm_options) -> Tokenizer:
    """Train a unigram spiece.model on text files with ALBERT's flags and id layout; save it with the HF files.

    files: text/JSONL/.gz files or globs, read like `litebert prepare` reads them; None -> the bundled corpus.
    vocab_size: None -> 30000 (ALBERT), or 4000 for the bundled corpus, which is too small for 30000 pieces.
    The text is normalised with `preprocess_text` before training, so the pieces match what encoding will see.
    pre_tokenize: a segmenter of litebert.text.pretokenize ("kiwi", "mecab": Korean morphemes) run on the text before
    normalisation, here and whenever the tokenizer encodes (it is recorded in tokenizer_config.json).
    spm_options override or extend ALBERT_SPM_FLAGS (e.g. input_sentence_size=1000, num_threads=1).
    seed: the sample of input_sentence_size sentences, drawn here: sentencepiece's own sampler is seeded from the
    OS in each process (spm.set_random_generator_seed does not reach it), so one command learned different pieces.

    Nothing is dropped without a count: lines that are not UTF-8, JSONL records without text and sentences over
    sentencepiece's max_sentence_length (which its trainer skips) are counted in SUMMARY_NAME beside the model.
    The result is written beside the old one and swapped in whole (files.write_files_atomically), so a failed
    run (a full disk, a kill) leaves the previous tokenizer in out_dir as it was. A tokenizer this function did
    not make (no summary file), or one inside a model directory, is replaced only with overwrite=True.
    """

    paths = resolve_inputs(files)
    if vocab_size is None:
        vocab_size = 4000 if not files else 30000
    if vocab_size < 10:
        raise ConfigError(f"vocab_size must be at least 10, got {vocab_size}")
    check_out_dir(out_dir, overwrite)
    opts = NormalizerOptions(do_lower_case, keep_accents, remove_space)
    pp = {"lower": do_lower_case, "keep_accents": keep_accents, "remove_space": remove_space}
    # ALBERT used character_coverage=0.99995 on English Wikipedia + books; on a small or non-Latin corpus that
    # drops rare characters (Korean syllables seen once) to <unk>, so full coverage is our default.
    flags = {**ALBERT_SPM_FLAGS, "character_coverage": 1.0, **spm_options}
    limit = flags.pop("input_sentence_size", 0)
    max_bytes = flags.pop("max_sentence_length", SPM_MAX_SENTENCE_LENGTH)
    stats: collections.Counter = collections.Counter()
    segmenter = None
    if pre_tokenize:
        segmenter = make_segmenter(pre_tokenize)

    def fill(tmp) -> Tokenizer:
        prefix = os.path.join(tmp, "spiece")
        lines = _training_sentences(paths, pp, max_bytes, stats, segmenter.segment if segmenter else None)
        if limit:
            lines = iter(reservoir_sample(lines, limit, seed))
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=lines, input_sentence_size=0, model_prefix=prefix, vocab_size=vocab_size,
                pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
                max_sentence_length=max_bytes, minloglevel=flags.pop("minloglevel", 2), **flags)
        except RuntimeError as e:
            raise _training_error(e, paths, stats) from None
        os.remove(prefix + ".vocab")  # the .vocab listing is redundant with the model; HF never reads it
        tok = Tokenizer(prefix + ".model", **vars(opts), pre_tokenizer=segmenter.record if segmenter else None)
        tok.save_pretrained(str(tmp))
        write_json(os.path.join(tmp, SUMMARY_NAME), {
            "inputs": [os.path.abspath(p) for p in paths], "vocab_size": tok.vocab_size,
            "sentences": stats["sentences"], "sentences_sampled": min(stats["sentences"], limit or stats["sentences"]),
            "skipped": skipped_counts(stats), "bytes_read": stats["bytes"], "seed": seed, "normalizer": vars(opts),
            "max_sentence_length": max_bytes, "pre_tokenizer": segmenter.record if segmenter else None})
        built.append(tok)

    built: list[Tokenizer] = []
    write_files_atomically(out_dir, fill, owned=OWNED_FILES, last=(SPIECE_FILE,))
    return built[0]


def skipped_counts(stats) -> dict[str, int]:
    """{"non_utf8_lines": 3, ...}: the skip counters of iter_documents and train_tokenizer, nonzero ones."""
    return {k.removeprefix("skipped_"): int(v) for k, v in sorted(stats.items()) if k.startswith("skipped_") and v}


_SKIP_WORDS = {"non_utf8_lines": "lines not in UTF-8", "bad_json_lines": "unreadable JSONL records",
               "missing_text_field": "JSONL records without the text field",
               "too_long_sentences": "sentences longer than sentencepiece's max_sentence_length"}


def skipped_words(skipped: dict[str, int]) -> str:
    """"3 lines not in UTF-8, 1 unreadable JSONL record(s)" for skipped_counts' dict."""
    return ", ".join(f"{v} {_SKIP_WORDS.get(k, k.replace('_', ' '))}" for k, v in skipped.items())


def _skipped_words(stats, before: str = "", after: str = "") -> str:
    skipped = skipped_counts(stats)
    return before + "skipped " + skipped_words(skipped) + after if skipped else ""


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
    vocab_size: int | None = field(default=None, metadata={"range": "[6, inf)",
        "help": "pieces in the vocabulary (default: 30000 as ALBERT; 4000 for the bundled corpus)"})
    cased: bool = field(default=False, metadata={"help": "keep case (do_lower_case=False)"})
    keep_accents: bool = field(default=False, metadata={"help": "keep accents (no NFKD accent stripping)"})
    keep_space: bool = field(default=False, metadata={"help": "do not collapse whitespace (remove_space=False)"})
    input_sentence_size: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "sentences sampled for training (default: ALBERT's 10000000)"})
    pre_tokenize: str | None = field(default=None, metadata={
        "help": "segment the text into morphemes before SentencePiece, here and whenever the tokenizer encodes "
                "(Korean: kiwi, the usual choice, needs litebert[korean]; mecab, quicker to start, needs "
                "litebert[korean-mecab]; recorded in tokenizer_config.json)", "choices": (*SEGMENTERS, None)})
    encode: str | None = field(default=None, metadata={
        "help": "encode TEXT with the tokenizer in --out instead of training", "metavar": "TEXT"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace a tokenizer in --out that `litebert tokenizer` did not make, or one inside a model "
                "directory (a rerun replaces its own result without this)"})


def cli(argv: list[str]) -> int:

    parser = verb_parser("tokenizer", __doc__, {"training (or encoding)": TokenizerConfig}, epilog=(
        "ids: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, then the learned pieces (ALBERT's layout)\n"
        "examples:\n  litebert tokenizer corpus/*.txt --out out/tok --vocab-size 30000\n"
        "  litebert tokenizer --out out/tok --encode 'Hello world.'"))
    args = parser.parse_args(argv)
    (cfg,) = parse_verb(parser, args)
    training = "training (no --encode)"  # --encode reads the tokenizer in --out and nothing else
    refuse_flags_of_other_modes(args, "--encode" if cfg.encode is not None else training, {
        f.name: (training,) for f in dataclasses.fields(TokenizerConfig) if f.name not in ("out", "encode")},
        "tokenizer")
    if cfg.encode is not None:
        tok = Tokenizer.from_pretrained(cfg.out)
        ids = tok.encode(cfg.encode)
        print(json.dumps({"ids": ids, "pieces": [tok.pieces[i] for i in ids]}, ensure_ascii=False))
        return 0
    extra = {} if cfg.input_sentence_size is None else {"input_sentence_size": cfg.input_sentence_size}
    tok = train_tokenizer(cfg.inputs or None, cfg.out, cfg.vocab_size, do_lower_case=not cfg.cased,
                          keep_accents=cfg.keep_accents, remove_space=not cfg.keep_space, overwrite=cfg.overwrite,
                          pre_tokenize=cfg.pre_tokenize, **extra)
    summary = read_json_object(os.path.join(cfg.out, SUMMARY_NAME), DataError)
    print(f"wrote {cfg.out}/spiece.model: {tok}; trained on {summary['sentences_sampled']} of "
          f"{summary['sentences']} sentences"
          + (f"; skipped {skipped_words(summary['skipped'])} (counted in {cfg.out}/{SUMMARY_NAME})"
             if summary["skipped"] else ""))
    return 0
