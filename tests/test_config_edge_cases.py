"""Config values that transformers writes or accepts and litebert once mishandled: each must either load
correctly or fail with a one-line ConfigError naming the file and the problem."""

import json
import logging

import pytest
import torch

from litebert.config import AlbertConfig, ConfigError
from litebert.heads import AlbertForSequenceClassification
from litebert.model import AlbertModel

SMALL = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=16)


def write_config(directory, **changes) -> str:
    """A valid config.json with `changes` applied, as a file edited by hand or written by another tool."""
    data = {**AlbertConfig(**SMALL).to_dict(), **changes}
    (directory / "config.json").write_text(json.dumps(data))
    return str(directory)


def test_untied_mlm_decoder_is_refused(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertForMaskedLM(transformers.AlbertConfig(**SMALL, tie_word_embeddings=False))
    hf.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"config\.json: .*tie_word_embeddings.*ties the MLM decoder"):
        AlbertConfig.load(tmp_path)


def test_head_weights_the_checkpoint_lacks_are_a_warning(tmp_path, caplog):
    AlbertModel(AlbertConfig(**SMALL)).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="litebert"):
        AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert any(r.levelno == logging.WARNING and "initialised fresh: classifier" in r.getMessage()
               for r in caplog.records)


def test_classifier_dropout_none_saves_the_rate_in_use(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = AlbertConfig(**SMALL, hidden_dropout_prob=0.2, classifier_dropout_prob=None)
    AlbertForSequenceClassification(config).save_pretrained(tmp_path)
    transformers.AlbertForSequenceClassification.from_pretrained(tmp_path)
    reloaded = AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert reloaded.dropout.p == AlbertForSequenceClassification(config).dropout.p == 0.2


def test_pad_token_id_none_loads_with_equal_outputs(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertModel(transformers.AlbertConfig(**SMALL, pad_token_id=None)).eval()
    hf.save_pretrained(tmp_path)
    ours = AlbertModel.from_pretrained(tmp_path).eval()
    assert ours.config.pad_token_id is None
    input_ids = torch.randint(0, SMALL["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(input_ids)[0], hf(input_ids).last_hidden_state)


def test_misspelt_problem_type_is_refused(tmp_path):
    for problem_type in (None, "regression", "single_label_classification", "multi_label_classification"):
        AlbertConfig(**SMALL, problem_type=problem_type)
    with pytest.raises(ConfigError, match=r"config\.json: .*unknown problem_type 'regresion'"):
        AlbertConfig.load(write_config(tmp_path, problem_type="regresion"))


def test_id2label_list_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"config\.json: .*id2label must map label ids to names.*list"):
        AlbertConfig.load(write_config(tmp_path, id2label=["a", "b"]))
