"""A tokenizer directory in transformers' layout, both ways: which files it holds, what tokenizer_config.json says
(normaliser flags, model_max_length, a pre-tokenizer), where its model's positions bound the length, and the
`tokenizers` conversion that makes AutoTokenizer give litebert's ids, with the test of when transformers' own
AlbertTokenizer agrees instead.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
import warnings
from dataclasses import fields
from functools import cache
from typing import Any

from litebert.errors import CheckpointError
from litebert.files import atomic_open, read_json_object, write_json, write_text_atomically
from litebert.hub import fetch_from_hub
from litebert.text.conventions import SPECIALS, SPIECE_UNDERLINE, NormalizerOptions

UNREPRODUCIBLE_CLASS = "LitebertPreTokenizedTokenizer"  # tokenizer_config.json of a pre-tokenized tokenizer
# ... and the transformers module defining that class, copied beside it (litebert_pretokenized.py says why)
REMOTE_CODE_FILE = "litebert_pretokenized.py"
MODEL_MAX_LENGTH = 512  # ALBERT's positions: model_max_length when neither tokenizer_config.json nor a model says
# A tokenizer directory, in transformers' layout: the SentencePiece model, then the files transformers reads
SPIECE_FILE, CONFIG_FILE, SPECIAL_TOKENS_FILE, FAST_FILE = (
    "spiece.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")


TOKENIZER_FILES = (SPIECE_FILE, CONFIG_FILE, SPECIAL_TOKENS_FILE, FAST_FILE, REMOTE_CODE_FILE)


@cache
def hf_strips_differently(ch: str) -> bool:
    """Whether transformers' AlbertTokenizer strips accents from `ch` otherwise than ALBERT (keep_accents=False).

    ALBERT: NFKD, drop what has a combining class, and sentencepiece's NFKC recomposes what is left.
    transformers (tokenizers' StripAccents, then Precompiled): NFKD, drop every Unicode mark, and no recomposition
    of a sequence of 6 bytes or more. They part where a mark without combining class survives ALBERT (Indic and
    Thai vowel signs, emoji variation selectors: transformers deletes them) or where what is left recomposes
    (Hangul: transformers keeps the jamo, which no Korean vocabulary holds). Checked against tokenizers 0.23 on
    every assigned character: of the 12,364 that differ this misses 104, 98 that ALBERT strips (so no vocabulary
    holds them) and 6 that Unicode decomposes since tokenizers' tables were made.
    """
    s = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    return s != unicodedata.normalize("NFC", s) or any(unicodedata.category(c)[0] == "M" for c in s)


@cache
def combining_class_regex() -> str:
    """A regex character class of the characters with a nonzero canonical combining class (what ALBERT strips)."""
    ranges: list[list[int]] = []
    for cp in range(0x110000):
        if unicodedata.combining(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges) + "]"


def model_positions(directory: str) -> int | None:
    """max_position_embeddings of the model saved in `directory` (its config.json), or None when there is none."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return None
    positions = read_json_object(path, CheckpointError).get("max_position_embeddings")
    return positions if isinstance(positions, int) and not isinstance(positions, bool) else None


def match_model_max_length(directory: str) -> None:
    """Make tokenizer_config.json's model_max_length the positions of the model beside it, when `directory` holds
    both: transformers' pipelines cut their input to model_max_length, and a longer cut crashes the model.
    Called by every writer of a model directory, whichever of model and tokenizer it saves last."""
    path, positions = os.path.join(directory, CONFIG_FILE), model_positions(directory)
    if positions is None or not os.path.isfile(path):
        return
    config = read_json_object(path, CheckpointError)
    if config.get("model_max_length") != positions:
        write_json(path, {**config, "model_max_length": positions})


def save_tokenizer(tok, out_dir: str) -> None:
    """Write spiece.model and what transformers reads, so that `AutoTokenizer.from_pretrained(out_dir)` gives
    our ids: tokenizer_config.json, special_tokens_map.json and (when `tokenizers` is installed) tokenizer.json.

    The class named in tokenizer_config.json matters. transformers 5's AlbertTokenizer takes the vocabulary from
    tokenizer.json but rebuilds the normaliser from do_lower_case/keep_accents, and that normaliser is not
    ALBERT's (see `hf_albert_agrees`): on ko_small.txt, a Korean vocabulary trained with ALBERT's default
    keep_accents=False came out with 12,622 <unk> there against our 0. Where it would differ we name the
    generic PreTrainedTokenizerFast, which runs tokenizer.json as written (our normaliser, exact in every
    script we measured); elsewhere the familiar AlbertTokenizer. model_max_length is the positions of the model
    saved in `out_dir` when there is one (`match_model_max_length` keeps them equal whichever is saved last):
    transformers' pipelines cut their input to it. model_input_names puts token_type_ids back
    into transformers 5's output: its AlbertTokenizer leaves them out, and ALBERT's sentence pairs need them.
    """
    os.makedirs(out_dir, exist_ok=True)
    with atomic_open(os.path.join(out_dir, SPIECE_FILE), "wb") as f:
        f.write(tok.model_proto)
    try:
        fast = None if tok.pre_tokenizer else fast_tokenizer(tok)
    except ImportError:  # `tokenizers` is optional; HF can still convert spiece.model itself
        fast = None
    albert_agrees = albert_tokenizer_agrees(tok)
    if fast is None and not albert_agrees and not tok.pre_tokenizer:
        warnings.warn("the `tokenizers` package is not installed, so no tokenizer.json was written, and "
                      "transformers' AlbertTokenizer will not encode all text as litebert does (see "
                      "Tokenizer.hf_albert_agrees): install tokenizers and save again", stacklevel=2)
    added = {str(tok.special_ids[p]): {"content": p, "lstrip": False, "normalized": False, "rstrip": False,
                                         "single_word": False, "special": True} for p in SPECIALS.values()}
    config = {"tokenizer_class": "AlbertTokenizer" if albert_agrees or fast is None else "PreTrainedTokenizerFast",
              **vars(tok.options), **SPECIALS, "bos_token": "[CLS]", "eos_token": "[SEP]",
              "model_max_length": model_positions(out_dir) or tok.model_max_length, "added_tokens_decoder": added,
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}
    if tok.pre_tokenizer:  # transformers cannot segment morphemes: its class for them is remote code
        # (litebert_pretokenized.py) that delegates to litebert, and no tokenizer.json gives unsegmented ids
        module = REMOTE_CODE_FILE.removesuffix(".py")
        config.update(tokenizer_class=UNREPRODUCIBLE_CLASS, pre_tokenizer=tok.pre_tokenizer,
                      auto_map={"AutoTokenizer": [f"{module}.{UNREPRODUCIBLE_CLASS}", None]})
        shutil.copyfile(os.path.join(os.path.dirname(__file__), REMOTE_CODE_FILE),
                        os.path.join(out_dir, REMOTE_CODE_FILE))
    # another tokenizer's files, which transformers would read before spiece.model: gone unless written anew
    for stale in ([FAST_FILE] if fast is None else []) + ([] if tok.pre_tokenizer else [REMOTE_CODE_FILE]):
        if os.path.isfile(os.path.join(out_dir, stale)):
            os.remove(os.path.join(out_dir, stale))
    write_json(os.path.join(out_dir, CONFIG_FILE), config)
    write_json(os.path.join(out_dir, SPECIAL_TOKENS_FILE),
                {**SPECIALS, "bos_token": "[CLS]", "eos_token": "[SEP]"})
    if fast is not None:
        write_text_atomically(os.path.join(out_dir, FAST_FILE), fast.to_str(pretty=True))


def albert_tokenizer_agrees(tok) -> bool:
    """Whether transformers' AlbertTokenizer, which rebuilds its normaliser from our flags, encodes as we do.

    Only when it strips accents and this vocabulary has no character its stripping mangles (Hangul, Indic and
    Thai vowel signs: `hf_strips_differently`): NFKD then makes every form of the input alike. Without
    stripping, each precomposed character still agrees (all 139,402 assigned ones), but its Precompiled map
    works one grapheme at a time and never composes one of 6+ bytes, so decomposed text (NFD, as macOS
    writes Hangul) does not: 12,622 <unk> on ko_small.txt in NFD, against our 0.
    """
    if tok.options.keep_accents:
        return False
    chars = {c for i, piece in enumerate(tok.pieces) if not tok.special_table[i] for c in piece}
    return not tok.pre_tokenizer and not any(hf_strips_differently(c) for c in chars)


def fast_tokenizer(ours):
    """A `tokenizers.Tokenizer` that encodes like `ours` (HF's AlbertTokenizerFast conversion, with ALBERT's
    accent stripping made exact).

    It approximates two sentencepiece behaviours: the digit-comma rule (pieces like "9," get their score
    lowered by 100, as HF's converter does) and user-defined symbols (ordinary vocab entries there). Expect
    rare id differences on such text; `Tokenizer.encode` is the reference.
    """
    from sentencepiece import sentencepiece_model_pb2 as pb
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import Unigram

    proto = pb.ModelProto.FromString(ours.model_proto)
    vocab = [(p.piece, p.score - 100.0 if i in ours.comma_ids else p.score) for i, p in enumerate(proto.pieces)]
    tok = HFTokenizer(Unigram(vocab, unk_id=ours.unk_id, byte_fallback=False))
    norm = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not ours.options.keep_accents:
        # ALBERT's stripping exactly: drop what has a combining class (tokenizers' StripAccents drops every
        # Unicode mark, Indic vowel signs included).
        norm += [normalizers.NFKD(), normalizers.Replace(Regex(combining_class_regex()), "")]
    # NFC: sentencepiece's NFKC composes, tokenizers' Precompiled map does not always. It leaves the jamo
    # NFKD makes of a Hangul syllable, and it loses a mark of decomposed input ("e" + U+0323 + U+0302 -> "ẹ").
    norm.append(normalizers.NFC())
    if ours.options.do_lower_case:
        norm.append(normalizers.Lowercase())
    if proto.normalizer_spec.precompiled_charsmap:
        # NFC after: Precompiled maps one grapheme at a time and leaves one of 6+ bytes decomposed
        # (halfwidth "ｶﾞ" -> "カ" + U+3099), where sentencepiece composes ("ガ").
        norm += [normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap), normalizers.NFC()]
    norm.append(normalizers.Replace(Regex(" {2,}"), " "))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ours.cls_id), ("[SEP]", ours.sep_id)])
    # normalized=False: "[MASK]" is matched in the raw text, before lowercasing could turn it into "[mask]".
    tok.add_special_tokens([AddedToken(p, normalized=False, special=True) for p in SPECIALS.values()])
    return tok


def read_tokenizer_config(config_dir: str) -> tuple[dict, int, dict | None]:
    """(normaliser flags, model_max_length, pre-tokenizer record) from tokenizer_config.json in `config_dir`, with
    ALBERT's defaults where it is missing. Beside a model, the model's positions bound the length too
    (directories written before tokenizer_config.json carried them say 512 for every model)."""
    options, limits, pre_tokenizer = {}, [MODEL_MAX_LENGTH], None
    config_file = os.path.join(config_dir, CONFIG_FILE)
    if os.path.isfile(config_file):
        config = read_json_object(config_file, CheckpointError)
        options = {k: config[k] for k in (f.name for f in fields(NormalizerOptions)) if k in config}
        if isinstance(config.get("model_max_length"), int):
            limits = [config["model_max_length"]]
        pre_tokenizer = config.get("pre_tokenizer")
    positions = model_positions(config_dir)
    return options, min(limits + ([positions] if positions else [])), pre_tokenizer


def download_tokenizer(repo_id: str, local_files_only: bool = False, **options: Any) -> str:
    """spiece.model of a Hub repo, and its tokenizer_config.json (the normalisation flags) when it has one.
    `options`: hub.HUB_OPTIONS (revision, cache_dir, token), as given."""
    def fetch(hub, local: bool) -> str:
        from huggingface_hub.errors import EntryNotFoundError
        path = hub.hf_hub_download(repo_id, SPIECE_FILE, local_files_only=local, **options)
        try:
            hub.hf_hub_download(repo_id, CONFIG_FILE, local_files_only=local, **options)
        except EntryNotFoundError:  # the repo has none: the defaults are its flags
            pass  # any other failure goes up: a tokenizer loaded with flags not its own would go unnoticed
        return path
    return fetch_from_hub(repo_id, fetch, local_files_only, options)
