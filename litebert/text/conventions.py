"""ALBERT's text conventions, shared by the tokenizer, tokenizer training and whole-word masking: the special
pieces and their ids' order, the normalisation before sentencepiece (`preprocess_text`, and the same with each
output character's source for offsets), and which pieces start a word.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

SPIECE_UNDERLINE = "▁"


SPECIALS = {"pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}


def preprocess_text(text: str, lower: bool = True, keep_accents: bool = False, remove_space: bool = True) -> str:
    """ALBERT's `preprocess_text` (tokenization.py of google-research/albert; HF's slow AlbertTokenizer)."""
    out = " ".join(text.strip().split()) if remove_space else text
    out = out.replace("``", '"').replace("''", '"')
    if not keep_accents and not out.isascii():  # ASCII has nothing to decompose: the fast path for English
        out = unicodedata.normalize("NFKD", out)
        out = "".join(c for c in out if not unicodedata.combining(c))
    # Σ first: str.lower() writes a word-final capital sigma as "ς" (a rule that looks at context); transformers'
    # tokenizers lowercase one character at a time ("σ"), and the files we write are read there.
    return out.replace("Σ", "σ").lower() if lower else out


def preprocess_with_alignment(text: str, lower=True, keep_accents=False, remove_space=True) -> tuple[str, list[int]]:
    """`preprocess_text` done character by character, also returning, for each output char, its source char index.

    Only used for offsets (span tasks). The string equals `preprocess_text(text)`; should a rule ever look at
    context (NFKD's reordering of marks), the whole-string result wins when it has the same length.
    """
    chars: list[str] = []
    src: list[int] = []
    n, i = len(text), 0
    if remove_space:  # strip() + split() + " ".join(): whitespace runs become one space mapped to the run's first char
        start, end = 0, n
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        i, n = start, end
    while i < n:
        c = text[i]
        if remove_space and c.isspace():
            j = i
            while j < n and text[j].isspace():
                j += 1
            chars.append(" ")
            src.append(i)
            i = j
            continue
        if text.startswith(("``", "''"), i):
            chars.append('"')
            src.append(i + 1)  # map to the pair's second char, so a span ending here covers both
            i += 2
            continue
        piece = c
        if not keep_accents:
            piece = "".join(d for d in unicodedata.normalize("NFKD", c) if not unicodedata.combining(d))
        if lower:
            piece = piece.lower()
        chars.extend(piece)
        src.extend([i] * len(piece))
        i += 1
    out = "".join(chars)
    exact = preprocess_text(text, lower, keep_accents, remove_space)
    if exact != out and len(exact) == len(out):
        out = exact
    return out, src


def vanishes(ch: str, sp_normalize, lower=True, keep_accents=False, remove_space=True) -> bool:
    """Whether ALBERT's normalisation leaves nothing of `ch` (not whitespace): a combining mark it strips, or a
    zero-width space or control character that sentencepiece's normaliser (`sp_normalize`) drops.

    Offsets give such a character to the one before it, as a mark belongs to its letter: a span ending there
    ends after it (an answer "Cafe" + U+0301 keeps its accent), and the next token's span does not start on it.
    """
    if ch.isspace() or ch.isascii() and ch.isprintable():
        return False
    return not sp_normalize(preprocess_text(ch, lower, keep_accents, remove_space))


def is_word_start_piece(piece: str) -> bool:
    """Whether a piece begins a new word for whole-word masking (the original `_is_start_piece_sp`).

    A piece continues the previous word only if it has no "▁" and is made of ASCII letters (plus punctuation);
    non-Latin scripts (Korean, Chinese, ...), digits and lone punctuation always start their own unit.
    """
    punct = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    if piece.startswith((SPIECE_UNDERLINE, "<")) or piece in punct or piece in ("€", "£"):
        return True
    return not all(ch.lower() in "abcdefghijklmnopqrstuvwxyz" or ch in punct for ch in piece)


@dataclass
class NormalizerOptions:
    """How raw text is normalised before sentencepiece; saved in tokenizer_config.json beside spiece.model."""

    do_lower_case: bool = True
    keep_accents: bool = False
    remove_space: bool = True
