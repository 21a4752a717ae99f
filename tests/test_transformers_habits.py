"""A transformers user's habits work in litebert, and litebert's files work in transformers.

Each test makes the same call on transformers and on litebert, on the same tiny model or tokenizer directory (built
here, nothing downloaded), and compares the results.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.heads import AlbertForSequenceClassification
from litebert.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

POSITIONS = 32  # a model with fewer positions than the 512 tokenizers used to claim
LONG = "Anne Elliot walked along the shore at Lyme, and the wind was cold. " * 8  # ~130 tokens


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(None, str(out), vocab_size=500, input_sentence_size=20000)
    return out


def tiny_config(**overrides) -> AlbertConfig:
    base = dict(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=POSITIONS, hidden_act="gelu_new",
                classifier_dropout_prob=0.0, initializer_range=0.2)
    return AlbertConfig(**{**base, **overrides})


def saved_classifier(tok_dir, out, tokenizer_first: bool):
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, id2label={0: "austen", 1: "dickens", 2: "eliot"})
    model = AlbertForSequenceClassification(config).eval()
    tok = Tokenizer.from_pretrained(str(tok_dir))
    if tokenizer_first:  # as `litebert extend-vocab` writes
        tok.save_pretrained(str(out))
        model.save_pretrained(out)
    else:  # as fine-tuning's best/ and ensembles write
        model.save_pretrained(out)
        tok.save_pretrained(str(out))
    return model


# ----------------------------------------------------------------------------- model_max_length


@pytest.mark.parametrize("tokenizer_first", [False, True])
def test_transformers_pipeline_truncates_to_the_models_positions(tok_dir, tmp_path, tokenizer_first):
    """tokenizer_config.json names the model's positions, so transformers' pipeline with truncation=True cuts a
    passage longer than the model to them (it crashed with 512) and scores what litebert's pipeline scores."""
    from litebert import pipeline

    saved_classifier(tok_dir, tmp_path, tokenizer_first)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["model_max_length"] == POSITIONS
    assert Tokenizer.from_pretrained(str(tmp_path)).model_max_length == POSITIONS
    assert len(Tokenizer.from_pretrained(str(tmp_path)).encode(LONG)) > 4 * POSITIONS
    theirs = transformers.pipeline("text-classification", model=str(tmp_path), top_k=None)(LONG, truncation=True)
    ours = pipeline("text-classification", model=str(tmp_path), top_k=None)(LONG)
    theirs = theirs[0]  # transformers 5 nests one text's top_k=None ranking in a list (litebert: not)
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    assert [r["score"] for r in ours] == pytest.approx([r["score"] for r in theirs], abs=1e-5)


def test_checkpoints_and_old_directories_carry_the_models_positions(tok_dir, tmp_path):
    """A training checkpoint copies the tokenizer's files beside the model; a directory written before the fix
    (512 in tokenizer_config.json) still gives litebert's tokenizer the model's positions."""
    from litebert.training.checkpoint import save_checkpoint

    model = AlbertForSequenceClassification(tiny_config())
    step = save_checkpoint(tmp_path / "run", 1, model, {}, tokenizer=tok_dir)
    assert json.loads((step / "tokenizer_config.json").read_text())["model_max_length"] == POSITIONS
    assert json.loads((tok_dir / "tokenizer_config.json").read_text())["model_max_length"] == 512  # the source
    old = json.loads((step / "tokenizer_config.json").read_text())
    (step / "tokenizer_config.json").write_text(json.dumps({**old, "model_max_length": 512}))
    assert Tokenizer.from_pretrained(str(step)).model_max_length == POSITIONS


# ----------------------------------------------------------------------------- the tokenizer object

TEXTS = ["Anne Elliot's [MASK] was there, at 1,000 o'clock!", "hello , world . don ' t", "Café déjà vu 1990,"]
PAIRS = ["She smiled.", "No.", "Mary went to Uppercross, and Charles too."]


@pytest.fixture(scope="module")
def both(tok_dir):
    """litebert's Tokenizer and transformers' AutoTokenizer on the same directory."""
    return Tokenizer.from_pretrained(str(tok_dir)), transformers.AutoTokenizer.from_pretrained(str(tok_dir))


def lists(encoding) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in encoding.items()}


def test_call_shapes_equal_transformers(both):
    """text_pair=, is_split_into_words, the return_* flags and word_ids() give transformers' results."""
    ours, theirs = both
    flags = dict(return_offsets_mapping=True, return_special_tokens_mask=True, return_length=True)
    for text, pair in zip(TEXTS, PAIRS):
        for kw in ({}, flags, dict(return_token_type_ids=False, return_attention_mask=False)):
            a = ours(text, text_pair=pair, padding=False, return_tensors=None, **kw)
            b = theirs(text, text_pair=pair, **kw)
            assert dict(a) == dict(b), (text, kw)
            assert a.word_ids() == b.word_ids() and a.input_ids == b["input_ids"]
    words = [["Anne", "Elliot's", "1,000", "Café", "[MASK]"], ["x"]]
    a = ours(words, is_split_into_words=True, return_tensors=None, return_offsets_mapping=True)
    b = theirs(words, is_split_into_words=True, padding=True, return_offsets_mapping=True)
    assert dict(a) == dict(b) and [a.word_ids(i) for i in (0, 1)] == [b.word_ids(i) for i in (0, 1)]
    kw = dict(padding=True, truncation=True, max_length=12, return_tensors="pt")
    a, b = ours(TEXTS, PAIRS, **kw), theirs(TEXTS, PAIRS, **kw)
    assert lists(a) == lists(b) and a.to("cpu").input_ids.dtype == torch.int64


def test_special_ids_vocab_and_conversions_equal_transformers(both):
    ours, theirs = both
    for name in ("pad", "unk", "cls", "sep", "mask", "bos", "eos"):
        assert getattr(ours, f"{name}_token") == getattr(theirs, f"{name}_token")
        assert getattr(ours, f"{name}_token_id") == getattr(theirs, f"{name}_token_id"), name
    assert ours.all_special_ids == theirs.all_special_ids and ours.all_special_tokens == theirs.all_special_tokens
    assert ours.get_vocab() == theirs.get_vocab() and len(ours) == len(theirs)
    ids = theirs(TEXTS[0], TEXTS[1])["input_ids"]
    assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
    assert ours.convert_ids_to_tokens(ids[3]) == theirs.convert_ids_to_tokens(ids[3])
    assert ours.convert_ids_to_tokens(ids, skip_special_tokens=True) == theirs.convert_ids_to_tokens(
        ids, skip_special_tokens=True)
    tokens = ["▁anne", "zzzq", "[MASK]", ","]
    assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
    assert ours.convert_tokens_to_ids("▁anne") == theirs.convert_tokens_to_ids("▁anne")


def test_decode_and_batch_decode_equal_transformers(both):
    ours, theirs = both
    batch = theirs(TEXTS, PAIRS, padding=True, return_tensors="pt")["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(batch, skip_special_tokens=skip) == theirs.batch_decode(batch, skip_special_tokens=skip)
        for row in [batch[0], batch[1].tolist(), [1, 46, 0, 4], [5, 6, 7, 13, 8]]:
            assert ours.decode(row, skip_special_tokens=skip) == theirs.decode(row, skip_special_tokens=skip)


def test_no_silent_cut_without_truncation(both):
    """As transformers: without truncation or max_length nothing is cut, and a row over model_max_length warns;
    truncation=True cuts to model_max_length."""
    ours, theirs = both
    text = "word " * 600
    with pytest.warns(UserWarning, match="more than model_max_length 512"):
        uncut = ours(text, padding=False, return_tensors=None)
    assert uncut == dict(theirs(text)) and len(uncut["input_ids"]) > 512
    cut = ours(text, truncation=True, padding=False, return_tensors=None)
    assert cut == dict(theirs(text, truncation=True)) and len(cut["input_ids"]) == 512
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours(text, max_length=64)  # an explicit max_length cuts, as litebert's own callers ask

