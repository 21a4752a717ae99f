"""A sentence-transformers user's habits on litebert's SentenceModel: the same calls on SentenceTransformer and on
litebert, on the same tiny S-ALBERT directory (built here, nothing downloaded), give the same results."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import ConfigError
from litebert.model import AlbertModel
from litebert.sentence import SentenceEncoder
from litebert.sentences.directories import SentenceModel, load_sentence_model

st = pytest.importorskip("sentence_transformers")

TEXTS = ["Anne Elliot walked along the shore.", "hello world", "The wind was cold at Lyme, and nobody came."]


@pytest.fixture(scope="module")
def sentence_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sentence")
    train_tokenizer(None, str(out), vocab_size=500, input_sentence_size=20000)
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=32,
                          hidden_act="gelu_new", initializer_range=0.2)
    SentenceEncoder(AlbertModel(config), max_length=24).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def both(sentence_dir):
    return load_sentence_model(sentence_dir), st.SentenceTransformer(str(sentence_dir), device="cpu")


def test_encode_takes_sentence_transformers_keywords_with_its_results(both):
    """One string is one (D,) vector (it was read as a list of characters: (35, D)); convert_to_tensor,
    convert_to_numpy=False, normalize_embeddings and show_progress_bar give sentence-transformers' types and values."""
    ours, theirs = both
    for kw in ({}, dict(normalize_embeddings=True), dict(batch_size=1, show_progress_bar=False)):
        a, b = ours.encode(TEXTS, **kw), theirs.encode(TEXTS, **kw)
        assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, atol=1e-5)
    a, b = ours.encode(TEXTS[0]), theirs.encode(TEXTS[0])
    assert a.shape == b.shape == (32,) and np.allclose(a, b, atol=1e-5)
    for text in (TEXTS, TEXTS[0]):
        a, b = ours.encode(text, convert_to_tensor=True), theirs.encode(text, convert_to_tensor=True)
        assert torch.is_tensor(a) and a.shape == b.shape and torch.allclose(a, b.cpu(), atol=1e-5)
    a, b = ours.encode(TEXTS, convert_to_numpy=False), theirs.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(a, list) and [t.shape for t in a] == [t.shape for t in b]
    assert all(torch.allclose(x, y.cpu(), atol=1e-5) for x, y in zip(a, b))


def test_similarity_dimension_and_max_seq_length_as_sentence_transformers(both, sentence_dir):
    ours, theirs = both
    a, b = ours.encode(TEXTS), theirs.encode(TEXTS)
    assert torch.allclose(ours.similarity(a, a[:2]), theirs.similarity(b, b[:2]), atol=1e-5)
    assert ours.similarity(a[0], a).shape == theirs.similarity(b[0], b).shape == (1, 3)
    assert ours.similarity_fn_name == theirs.similarity_fn_name == "cosine"
    assert ours.get_sentence_embedding_dimension() == ours.get_embedding_dimension() == theirs.get_embedding_dimension()
    assert ours.max_seq_length == theirs.max_seq_length == 24
    ours.max_seq_length = 16  # shorter inputs from here on, as sentence-transformers' setter
    assert ours.max_seq_length == 16 and ours.encode(TEXTS).shape == a.shape
    positions = ours.encoder.config.max_position_embeddings
    with pytest.raises(ConfigError, match=f"max_seq_length {positions + 1}: this encoder has {positions} positions"):
        ours.max_seq_length = positions + 1  # it was cut to fit without a word
    ours.max_seq_length = 24
    assert ours.device == theirs.device
    assert json.loads((sentence_dir / "config_sentence_transformers.json").read_text())["similarity_fn_name"] == "cosine"
    assert isinstance(SentenceModel.from_pretrained(sentence_dir), SentenceModel)


def test_a_directory_sentence_transformers_wrote_reads_its_similarity_function(both, sentence_dir, tmp_path):
    """SentenceTransformer.save of an ALBERT with Normalize and a dot-product similarity: litebert reads the
    modules and the similarity function it names, and scores as it does."""
    _, theirs = both
    from sentence_transformers import models

    modules = [theirs[0], theirs[1], models.Normalize()]
    written = st.SentenceTransformer(modules=modules, device="cpu", similarity_fn_name="dot")
    written.save(str(tmp_path))
    assert {"modules.json", "config_sentence_transformers.json", "2_Normalize"} <= set(os.listdir(tmp_path))
    ours = load_sentence_model(tmp_path)
    a, b = ours.encode(TEXTS), written.encode(TEXTS)
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert ours.similarity_fn_name == "dot"
    assert torch.allclose(ours.similarity(a, a), written.similarity(b, b), atol=1e-5)


@pytest.mark.parametrize("kw, name", [(dict(output_value="token_embeddings"), "output_value"),
                                      (dict(precision="int8"), "precision")])
def test_encode_refuses_what_it_does_not_compute_by_name(both, kw, name):
    with pytest.raises(ConfigError, match=name):
        both[0].encode(TEXTS, **kw)
    with pytest.raises(TypeError, match="prompt_name"):
        both[0].encode(TEXTS, prompt_name="query")

