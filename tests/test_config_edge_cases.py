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


# -- from a review of the model core (each of these passed silently before) -------------------------------------

def test_a_decoder_weight_that_differs_from_the_embeddings_it_is_tied_to_is_refused(tmp_path):
    """Both names were loaded into the one shared parameter, the decoder's last: the encoder's word embeddings
    silently became the file's decoder matrix."""
    from safetensors.torch import load_file, save_file

    from litebert.errors import CheckpointError
    from litebert.model import AlbertForMaskedLM
    AlbertForMaskedLM(AlbertConfig(**SMALL)).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    decoder = "predictions.decoder.weight"
    save_file({**state, decoder: torch.randn_like(state["albert.embeddings.word_embeddings.weight"])},
              tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="predictions.decoder.weight differs from .*word_embeddings"):
        AlbertForMaskedLM.from_pretrained(tmp_path)
    save_file({**state, decoder: state["albert.embeddings.word_embeddings.weight"].clone()},
              tmp_path / "model.safetensors")  # a tied copy written out (transformers 4 did): fine
    AlbertForMaskedLM.from_pretrained(tmp_path)


def test_head_weights_a_bare_encoder_leaves_out_are_reported(tmp_path, caplog):
    AlbertForSequenceClassification(AlbertConfig(**SMALL, num_labels=3)).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="litebert"):
        AlbertModel.from_pretrained(tmp_path)
    assert any("not used by AlbertModel: classifier" in r.getMessage() for r in caplog.records)


def test_padding_free_pools_position_zero_as_the_padded_path_when_it_is_padding():
    torch.manual_seed(0)
    model = AlbertModel(AlbertConfig(**SMALL)).eval()
    ids = torch.randint(5, 50, (2, 7))
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]])  # left padding: position 0 is padding in row 1
    padded = model(ids, mask).pooler_output
    model.padding_free = True
    torch.testing.assert_close(model(ids, mask).pooler_output, padded)


def test_position_ids_may_run_past_the_sequence_length_check_and_masks_must_be_2d():
    """Packed documents (positions restarting) longer than max_position_embeddings in total were refused; a
    4-D mask failed deep inside attention."""
    model = AlbertModel(AlbertConfig(**SMALL)).eval()
    ids = torch.randint(5, 50, (1, 24))
    positions = torch.cat([torch.arange(12), torch.arange(12)])[None]
    assert model(ids, position_ids=positions).last_hidden_state.shape == (1, 24, 16)
    with pytest.raises(ConfigError, match=r"attention_mask must be \(batch, length\)"):
        model(ids[:, :8], torch.ones(1, 1, 8, 8))


def test_the_sentence_order_head_drops_out_as_every_classifier_does(tmp_path):
    from litebert.model import AlbertForPreTraining
    config = AlbertConfig(**SMALL, hidden_dropout_prob=0.1, classifier_dropout_prob=None)
    assert AlbertForPreTraining(config).sop_classifier.dropout.p == 0.1  # was 0.0, and 0.1 once saved and loaded
    AlbertForPreTraining(config).save_pretrained(tmp_path)
    assert AlbertForPreTraining.from_pretrained(tmp_path).sop_classifier.dropout.p == 0.1


def test_id2label_ids_must_be_the_outputs_0_to_n_minus_1(tmp_path):
    """id2label {0: neg, 2: pos} (a hand-edited config.json, or label2id={"neg": 0, "pos": 2}) loaded as a
    2-label model whose output 1 had no name: label_names and the pipeline then failed with KeyError: 1."""
    from litebert.weights import _id2label

    with pytest.raises(ConfigError, match=r"config\.json: .*id2label's ids must be 0\.\.1, one per label, got \[0, 2\]"):
        AlbertConfig.load(write_config(tmp_path, id2label={"0": "neg", "2": "pos"}))
    with pytest.raises(ConfigError, match=r"config\.json: .*id2label's keys must be label ids"):
        AlbertConfig.load(write_config(tmp_path, id2label={"neg": "0"}))
    with pytest.raises(ConfigError, match="ids must be 0..1"):
        AlbertConfig(**SMALL, id2label=_id2label({"neg": 0, "pos": 2}, None))
    assert AlbertConfig(**SMALL, id2label={"1": "pos", "0": "neg"}).label_names == ["neg", "pos"]


@pytest.mark.parametrize("field, value, message", [
    ("hidden_dropout_prob", "0.1", "hidden_dropout_prob must be a number, got '0.1'"),
    ("layer_norm_eps", "1e-12", "layer_norm_eps must be a number, got '1e-12'"),
    ("initializer_range", "0.02", "initializer_range must be a number, got '0.02'"),
    ("initializer_range", -0.02, r"initializer_range must be >= 0, got -0.02"),
    ("pad_token_id", "0", "pad_token_id must be an integer, got '0'"),
    ("num_labels", "3", "num_labels must be a positive integer, got '3'"),
])
def test_a_number_field_of_another_type_is_named(tmp_path, field, value, message):
    """A string where config.json should hold a number gave "'<=' not supported between instances of 'float' and
    'str'" (no field named) or, for initializer_range, loaded and failed at the first weight initialisation."""
    data = {k: v for k, v in AlbertConfig(**SMALL).to_dict().items() if k not in ("id2label", "label2id")}
    (tmp_path / "config.json").write_text(json.dumps({**data, field: value}))
    with pytest.raises(ConfigError, match=rf"config\.json: invalid AlbertConfig: {message}"):
        AlbertConfig.load(tmp_path)


def test_an_override_that_is_no_config_field_is_a_config_error(tmp_path):
    """A keyword that is no config field raised a TypeError from the dataclass's __init__ (a traceback, not a
    one-line error); a flag of the wrong type is named too."""
    AlbertModel(AlbertConfig(**SMALL)).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="AlbertConfig has no field 'output_hiden_states'; its fields"):
        AlbertModel.from_pretrained(tmp_path, output_hiden_states=True)
    with pytest.raises(ConfigError, match="output_hidden_states must be true or false, got 'yes'"):
        AlbertModel.from_pretrained(tmp_path, output_hidden_states="yes")
    with pytest.raises(ConfigError, match="AlbertConfig has no field 'hidden_sise'; its fields: vocab_size"):
        AlbertConfig(**SMALL).replace(hidden_sise=32)
    assert AlbertModel.from_pretrained(tmp_path, hidden_dropout_prob=0.1).config.hidden_dropout_prob == 0.1
