"""Korean morphemes before SentencePiece (`litebert tokenizer --pre-tokenize kiwi|mecab`), each segmenter alike:
the segmentation only inserts spaces, it is recorded with its version, every path that encodes (encode,
batches, offsets, a reloaded checkpoint's tokenizer, prepare's worker processes, fine-tuning features, the
pipelines) gives the same ids, and transformers' AutoTokenizer says the directory holds custom code, which
with trust_remote_code=True gives litebert's ids, instead of encoding unsegmented text."""

import importlib.util
import json
import os
import shutil
import sys
import unicodedata

import numpy as np
import pytest
from paths import SHARED_DATA

PACKAGES = {"kiwi": "kiwipiepy", "mecab": "mecab"}  # each segmenter's tests skip where its package is missing
SEGMENTED = [pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(package) is None,
                                                         reason=f"{package} not installed"))
             for name, package in PACKAGES.items()]
KO = os.path.join(str(SHARED_DATA), "pretrain", "ko_small.txt")
TEXTS = ["대한민국은 민주공화국이다.", "학교에서 공부했습니다", "국회의원은 법률안을 제출할 수 있다. 9894발의연월일",
         "Korean and 한국어 mixed, 1990년에"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not os.path.isfile(KO):
        pytest.skip("shared data not available")
    return KO


@pytest.fixture(scope="module", params=SEGMENTED)
def tokenizers(request, corpus, tmp_path_factory):
    from litebert.corpus.tokenizer_training import train_tokenizer

    root = tmp_path_factory.mktemp(f"ko_{request.param}")
    morph = train_tokenizer([corpus], str(root / "morph"), vocab_size=800, pre_tokenize=request.param)
    plain = train_tokenizer([corpus], str(root / "plain"), vocab_size=800)
    return root, morph, plain


@pytest.mark.parametrize("name", SEGMENTED)
def test_segmentation_only_inserts_spaces_at_morpheme_boundaries(name):
    from litebert.text.pretokenize import make_segmenter

    segmenter = make_segmenter(name)
    assert segmenter.segment("학교에서 공부했습니다") == "학교 에서 공부 했 습니다"  # 했 = 하 + 었 keeps its one span
    assert segmenter.segment("  앞 공백에서") == "  앞 공백 에서"  # leading spaces (mecab-ko's own spans shift there)
    for text in TEXTS + ["  앞 공백", "\t학교에서\n", "😀학교에서", ""]:
        segmented, source = segmenter.segment_aligned(text)
        assert segmented.replace(" ", "") == text.replace(" ", "") and len(source) == len(segmented)
        assert all(text[source[i]] == c for i, c in enumerate(segmented) if c != " " or text[source[i]] == " ")
    assert segmenter.record["name"] == name and segmenter.record["version"] and segmenter.record["model_version"]


@pytest.mark.parametrize("name", SEGMENTED)
def test_decomposed_text_is_segmented_as_composed_and_a_mark_stays_with_its_letter(name):
    """Both analysers took decomposed Hangul (NFD, as macOS writes it) for one unknown word and left it whole,
    and cut a combining accent off its letter: the same text then gave other ids by its normal form."""
    from litebert.text.pretokenize import make_segmenter

    segmenter = make_segmenter(name)
    for text in TEXTS + ["Cafe\u0301 학교에서", "👨\u200d👩\u200d👧 가족이"]:
        decomposed = unicodedata.normalize("NFD", text)
        assert segmenter.segment(decomposed) == unicodedata.normalize("NFD", segmenter.segment(text)), text
    assert segmenter.segment("Cafe\u0301 학교에서") == "Cafe\u0301 학교 에서"


def test_decomposed_text_gets_the_ids_of_composed_text(tokenizers):
    _, morph, _ = tokenizers
    for text in TEXTS:
        assert morph.encode(unicodedata.normalize("NFD", text)) == morph.encode(text), text


def test_a_missing_segmenter_package_names_its_extra(monkeypatch):
    from litebert.errors import ConfigError
    from litebert.text.pretokenize import MecabSegmenter

    monkeypatch.setitem(sys.modules, "mecab", None)  # as if python-mecab-ko were not installed
    with pytest.raises(ConfigError, match=r"litebert\[korean-mecab\]"):
        MecabSegmenter()


def test_the_segmenter_is_recorded_and_every_path_gives_the_same_ids(tokenizers, tmp_path):
    from litebert.tokenizer import Tokenizer

    root, morph, plain = tokenizers
    config = json.loads((root / "morph" / "tokenizer_config.json").read_text())
    assert config["pre_tokenizer"] == morph.pre_tokenizer and config["pre_tokenizer"]["version"]
    assert json.loads((root / "morph" / "tokenizer_summary.json").read_text())["pre_tokenizer"] == config["pre_tokenizer"]
    assert "pre_tokenizer" not in json.loads((root / "plain" / "tokenizer_config.json").read_text())
    assert morph.sha256 != plain.sha256  # prepared shards know which one made them

    reloaded = Tokenizer.from_pretrained(str(root / "morph"))
    assert reloaded.pre_tokenizer == config["pre_tokenizer"]
    batch = reloaded(TEXTS, return_tensors=None, padding=False)["input_ids"]
    single = [reloaded.encode(t) for t in TEXTS]
    plain_rows = [reloaded.encode_batch([t])[0] for t in TEXTS]
    assert batch == single == [[reloaded.cls_id, *row, reloaded.sep_id] for row in reloaded.encode_batch(TEXTS)]
    assert [[reloaded.cls_id, *row, reloaded.sep_id] for row in plain_rows] == single
    assert reloaded.encode_batch(TEXTS * 20) == reloaded.encode_batch(TEXTS) * 20  # the threaded sentencepiece path
    pieces = reloaded.tokenize("학교에서 공부했습니다")
    assert "▁에서" in pieces or "▁에" in pieces  # the particle starts its own piece

    for text in TEXTS:  # offsets come back on the raw text, through the inserted spaces
        ids, spans = reloaded.encode_with_offsets(text)
        assert ids == reloaded.encode_batch([text])[0]
        assert all(0 <= s <= e <= len(text) for s, e in spans) and spans == sorted(spans)
        for i, (s, e) in zip(ids, spans):  # each piece is the raw text under its span
            if i != reloaded.unk_id and e > s:
                assert unicodedata.normalize("NFC", text[s:e].lower()) == reloaded.pieces[i].lstrip("▁"), (text, s, e)

    # a model checkpoint carries the tokenizer files: the copy encodes alike
    copy = tmp_path / "checkpoint"
    shutil.copytree(root / "morph", copy)
    assert Tokenizer.from_pretrained(str(copy)).encode_batch(TEXTS) == reloaded.encode_batch(TEXTS)


def test_prepare_workers_and_finetune_features_segment_too(tokenizers, tmp_path):
    from litebert.corpus.dataset import PretrainDataset
    from litebert.corpus.shards import prepare
    from litebert.tasks.features import featurize_classification
    from litebert.tasks.records import TextExample
    from litebert.tokenizer import Tokenizer

    root, morph, _ = tokenizers
    with open(KO, encoding="utf-8") as f:
        docs = f.read().strip().split("\n\n")[:3]
    (tmp_path / "ko.txt").write_text("\n\n".join(docs) + "\n")
    prepare([str(tmp_path / "ko.txt")], str(tmp_path / "data"), str(root / "morph"), max_seq_length=256,
            num_workers=2, progress=False, pair_task="none")
    tok = Tokenizer.from_pretrained(str(root / "morph"))
    data = PretrainDataset(str(tmp_path / "data"), tok)
    streams = [sum(tok.encode_batch(doc.split("\n")), []) for doc in docs]
    checked = 0
    for i in range(len(data)):
        item = data[i]
        body = [int(x) for x in item["input_ids"] if not tok.special_table[int(x)]]
        if body:
            assert any(_contains(stream, body) for stream in streams), i  # the workers segmented as the parent
            checked += 1
    assert checked > 0
    features = featurize_classification([TextExample("0", TEXTS[0], TEXTS[1], None)], tok, 64, None)
    assert features[0].input_ids == tok.encode(TEXTS[0], pair=TEXTS[1], max_length=64)


def _contains(stream: list[int], part: list[int]) -> bool:
    n = len(part)
    return any(stream[i:i + n] == part for i in range(len(stream) - n + 1))


def test_transformers_says_it_needs_the_remote_code_which_gives_litebert_ids(tokenizers, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from transformers import AlbertConfig, AutoTokenizer

    from litebert.tokenizer import Tokenizer

    root, _, _ = tokenizers
    morph = str(root / "morph")
    assert not (root / "morph" / "tokenizer.json").exists()  # nothing transformers could run on unsegmented text
    with pytest.raises(ValueError, match="contains custom code"):
        AutoTokenizer.from_pretrained(morph)
    ours, hf = Tokenizer.from_pretrained(morph), AutoTokenizer.from_pretrained(morph, trust_remote_code=True)
    with open(KO, encoding="utf-8") as f:
        texts = TEXTS + ["[MASK] 대한민국은 [SEP]민주공화국", "9,000원, 1,234개"] + f.read().split("\n")[:200:7]
    for a, b in zip(texts, texts[1:]):
        assert hf(a)["input_ids"] == ours.encode(a)
        row = hf(a, b)
        assert row["input_ids"] == ours.encode(a, pair=b)
        assert row["token_type_ids"] == ours(a, b, return_tensors=None, padding=False)["token_type_ids"]
        assert hf(a, b, truncation=True, max_length=24)["input_ids"] == ours.encode(a, pair=b, max_length=24)
    assert hf.decode(hf(TEXTS[1])["input_ids"], skip_special_tokens=True) == ours.decode(ours.encode(TEXTS[1]), True)

    # beside an ALBERT's config.json transformers prefers its own class unless trusted: it still refuses
    model = tmp_path / "model"
    shutil.copytree(morph, model)
    AlbertConfig(vocab_size=ours.vocab_size, max_position_embeddings=128).save_pretrained(str(model))
    with pytest.raises((ValueError, OSError)):
        AutoTokenizer.from_pretrained(str(model))
    trusted = AutoTokenizer.from_pretrained(str(model), trust_remote_code=True)
    assert trusted(TEXTS[0])["input_ids"] == ours.encode(TEXTS[0])
    assert AutoTokenizer.from_pretrained(str(root / "plain"))("대한민국")["input_ids"]  # the plain one still loads

    # without litebert, the class names the segmenter and litebert's loader instead of encoding
    for name in ("litebert.tokenizer", "litebert.text.encoding"):
        monkeypatch.setitem(sys.modules, name, None)
    spec = importlib.util.spec_from_file_location("remote_copy", root / "morph" / "litebert_pretokenized.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ImportError, match=rf"{ours.pre_tokenizer['name']} .*litebert\.Tokenizer\.from_pretrained"):
        module.LitebertPreTokenizedTokenizer(str(root / "morph" / "spiece.model"), pre_tokenizer=ours.pre_tokenizer)


def test_saving_over_another_tokenizer_leaves_none_of_its_transformers_files(tokenizers, tmp_path):
    from litebert.tokenizer import Tokenizer

    root, morph, plain = tokenizers
    plain.save_pretrained(str(tmp_path))
    had_fast = (tmp_path / "tokenizer.json").exists()
    morph.save_pretrained(str(tmp_path))  # a tokenizer.json left here would encode unsegmented text
    assert not (tmp_path / "tokenizer.json").exists() and (tmp_path / "litebert_pretokenized.py").exists()
    plain.save_pretrained(str(tmp_path))
    assert not (tmp_path / "litebert_pretokenized.py").exists()
    assert (tmp_path / "tokenizer.json").exists() == had_fast
    assert Tokenizer.from_pretrained(str(tmp_path)).pre_tokenizer is None


def test_another_segmenter_version_warns(tokenizers, tmp_path):
    from litebert.tokenizer import Tokenizer

    root, _, _ = tokenizers
    other = tmp_path / "other"
    shutil.copytree(root / "morph", other)
    config = json.loads((other / "tokenizer_config.json").read_text())
    config["pre_tokenizer"]["version"] = "0.0.1"
    (other / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match="0.0.1"):
        Tokenizer.from_pretrained(str(other))
    config["pre_tokenizer"]["name"] = "nope"
    (other / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unknown pre-tokenizer"):
        Tokenizer.from_pretrained(str(other))
    assert np.all(Tokenizer.from_pretrained(str(root / "morph")).special_table[:5])
