"""Morpheme segmentation before SentencePiece, for agglutinative scripts (Korean): `litebert tokenizer
--pre-tokenize kiwi`.

A Korean word glues a stem to particles and endings (학교에서 = 학교 "school" + 에서 "at"), so a unigram
vocabulary learnt on raw words spends pieces on stem+particle combinations. Segmenting into morphemes first
(Park et al., 2020, "An Empirical Study of Tokenization Strategies for Various Korean NLP Tasks": morpheme-aware
subwords) lets pieces align with morphemes. The segmenter only inserts spaces: at every morpheme boundary the
analyser reports inside a word, on the surface text (학교에서 -> 학교 에서; a contraction such as 했 = 하 + 었
stays whole, its morphemes share one span). The characters themselves are never changed, so offsets map back
to the raw text exactly and decoding gives the text with its morphemes spaced.

The segmenter, its package version and its model's version are recorded in tokenizer_config.json
("pre_tokenizer"), so every verb that loads the tokenizer (prepare, pretrain, finetune, embed, predict, serve)
segments the same way; loading with another installed version warns, since its analysis may differ.

Two segmenters, compared in docs/sentence.md ("Korean morphemes"): kiwi, the default choice (`litebert[korean]`),
scored best downstream there and has wheels for every CPython; mecab-ko (`litebert[korean-mecab]`) starts at once where
kiwi takes seconds, and segments faster.
"""

from __future__ import annotations

import importlib
import unicodedata
import warnings
from functools import cache

from litebert.errors import ConfigError

ZWJ = "\u200d"  # joins emoji into one (a family): never cut beside it


class Segmenter:
    """Spaces inserted at an analyser's morpheme boundaries (module docstring); a subclass says where they are."""

    name = ""
    record: dict

    def boundaries(self, text: str) -> set[int]:
        """Character positions where a morpheme starts or ends."""
        raise NotImplementedError

    def segment_aligned(self, text: str) -> tuple[str, list[int]]:
        """(segmented text, for each of its characters the index of the raw character it stands for; an inserted
        space stands for the character after it).

        The analyser reads the text composed (NFC), and a cut falls only where a unit of `composed_units` starts:
        decomposed Hangul (NFD, as macOS writes it) is one unknown word to both analysers, and they cut a
        combining accent off its letter, where sentencepiece's NFKC would have composed them.
        """
        composed, unit_start = composed_units(text)
        cuts = {unit_start[p] for p in self.boundaries(composed) if p < len(composed)} - {-1} if text.strip() else set()
        out: list[str] = []
        source: list[int] = []
        for i, ch in enumerate(text):
            if i in cuts and i > 0 and not ch.isspace() and not text[i - 1].isspace():
                out.append(" ")
                source.append(i)
            out.append(ch)
            source.append(i)
        return "".join(out), source

    def segment(self, text: str) -> str:
        return self.segment_aligned(text)[0]


def composed_units(text: str) -> tuple[str, list[int]]:
    """(NFC of `text`, for each of its characters the raw index of the unit it starts, -1 inside a unit). A unit
    is what normalisation may compose into one character: a character with the marks after it, a Hangul leading
    jamo with its vowel and final jamo, and emoji joined by U+200D."""
    composed: list[str] = []
    unit_start: list[int] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i < len(text) and (unicodedata.category(text[i])[0] == "M" or "\u1160" <= text[i] <= "\u11ff"
                              or "\ud7b0" <= text[i] <= "\ud7ff" or ZWJ in (text[i], text[i - 1])):
            continue  # inside the unit that started at `start`
        unit = unicodedata.normalize("NFC", text[start:i])
        composed.append(unit)
        unit_start += [start] + [-1] * (len(unit) - 1)
        start = i
    return "".join(composed), unit_start


class KiwiSegmenter(Segmenter):
    """kiwipiepy's morphological analyser (its model ships in the kiwipiepy_model wheel)."""

    name = "kiwi"

    def __init__(self):
        try:
            import kiwipiepy
            from kiwipiepy import Kiwi
        except ImportError:
            raise ConfigError("this tokenizer segments Korean morphemes with kiwipiepy first: pip install "
                              "'litebert[korean]' (kiwipiepy and kiwipiepy_model)") from None
        self.kiwi = Kiwi(num_workers=0)
        self.record = {"name": self.name, "package": "kiwipiepy", "version": kiwipiepy.__version__,
                       "model_version": _version("kiwipiepy_model")}

    def boundaries(self, text: str) -> set[int]:
        cuts: set[int] = set()
        for token in self.kiwi.tokenize(text):
            cuts.update((token.start, token.start + token.len))
        return cuts


class MecabSegmenter(Segmenter):
    """mecab-ko (python-mecab-ko) with the mecab-ko-dic dictionary of the python-mecab-ko-dic wheel; the record's
    model_version is the dictionary's.

    A node of mecab-ko is a surface span: an inflected form (했 = 하 + 았) or a dictionary compound (대한민국 =
    대한 + 민국) stays one morpheme, as kiwi keeps a contraction whole. Spans are found by the surfaces in the
    text, in order: python-mecab-ko's own spans are shifted by leading whitespace ("  앞" gives 앞 at 0).
    """

    name = "mecab"

    def __init__(self):
        try:
            import mecab
            import mecab_ko_dic
        except ImportError:
            raise ConfigError("this tokenizer segments Korean morphemes with mecab-ko first: pip install "
                              "'litebert[korean-mecab]' (python-mecab-ko and python-mecab-ko-dic)") from None
        self.mecab = mecab.MeCab()
        self.record = {"name": self.name, "package": "python-mecab-ko", "version": mecab.__version__,
                       "model_version": mecab_ko_dic.__version__}

    def boundaries(self, text: str) -> set[int]:
        cuts: set[int] = set()
        at = 0
        for morpheme in self.mecab.parse(text):
            start = text.find(morpheme.surface, at)
            if start < 0 or not morpheme.surface:  # never seen; a surface not in the text cuts nothing
                continue
            at = start + len(morpheme.surface)
            cuts.update((start, at))
        return cuts


SEGMENTERS = {"kiwi": KiwiSegmenter, "mecab": MecabSegmenter}  # --pre-tokenize NAME


def _version(package: str) -> str | None:
    try:
        return importlib.import_module(package).__version__
    except (ImportError, AttributeError):
        return None


@cache
def _segmenter(name: str) -> Segmenter:
    if name not in SEGMENTERS:
        raise ConfigError(f"unknown pre-tokenizer {name!r}; known: {', '.join(SEGMENTERS)}")
    return SEGMENTERS[name]()


def make_segmenter(name: str) -> Segmenter:
    """The segmenter called `name` (one per process: kiwi takes seconds to be ready)."""
    return _segmenter(name)


def segmenter_for(record: dict, where: str = "tokenizer_config.json") -> Segmenter:
    """The segmenter a saved tokenizer names; a warning when the installed version is not the recorded one."""
    segmenter = make_segmenter(str(record.get("name")))
    now = segmenter.record
    if (now["version"], now["model_version"]) != (record.get("version"), record.get("model_version")):
        warnings.warn(f"{where}: the tokenizer was made with {record.get('package')} {record.get('version')} (model "
                      f"{record.get('model_version')}), {now['package']} {now['version']} (model "
                      f"{now['model_version']}) is installed: its morphemes, and so the ids, may differ", stacklevel=3)
    return segmenter
