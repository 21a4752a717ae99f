"""Config validation, config.json round trips, checkpoint safety, tying, and the paper's parameter counts."""

import json
import os
import re

import pytest
import torch

from litebert.cli import main as litebert_main
from litebert.config import PRESETS, AlbertConfig, ConfigError
from litebert.heads import AlbertForSequenceClassification
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel
from litebert.paper.params import table
from litebert.weights import CheckpointError


def tiny(**kw) -> AlbertConfig:
    return AlbertConfig(**{**dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=16), **kw})


@pytest.mark.parametrize("overrides, message", [
    (dict(hidden_size=30, num_attention_heads=4), "not divisible by num_attention_heads"),
    (dict(num_hidden_layers=3, num_hidden_groups=2), "not divisible by num_hidden_groups"),
    (dict(hidden_act="gelu2"), "unknown hidden_act"),
    (dict(sharing="half"), "unknown sharing"),
    (dict(sharing="attention"), "own group"),
    (dict(hidden_size=0), "positive integer"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
])
def test_bad_values_fail_at_construction(overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny(**overrides)


def test_unknown_preset_is_named():
    with pytest.raises(ConfigError, match="unknown preset 'albert-huge'"):
        AlbertConfig.from_preset("albert-huge")


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip_through_config_json(tmp_path, name):
    config = AlbertConfig.from_preset(name)
    config.save(tmp_path)
    assert AlbertConfig.load(tmp_path) == config


def test_released_albert_config_json_reads_and_round_trips(tmp_path):
    released = {"architectures": ["AlbertForMaskedLM"], "attention_probs_dropout_prob": 0, "bos_token_id": 2,
                "classifier_dropout_prob": 0.1, "down_scale_factor": 1, "embedding_size": 128, "eos_token_id": 3,
                "gap_size": 0, "hidden_act": "gelu_new", "hidden_dropout_prob": 0, "hidden_size": 768,
                "initializer_range": 0.02, "inner_group_num": 1, "intermediate_size": 3072, "layer_norm_eps": 1e-12,
                "max_position_embeddings": 512, "model_type": "albert", "net_structure_type": 0,
                "num_attention_heads": 12, "num_hidden_groups": 1, "num_hidden_layers": 12, "num_memory_blocks": 0,
                "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30000}
    (tmp_path / "config.json").write_text(json.dumps(released))
    config = AlbertConfig.load(tmp_path)
    assert config.replace(architectures=None, extra={}) == AlbertConfig.from_preset("albert-base-v2")
    out = tmp_path / "again"
    config.save(out)
    assert {k: v for k, v in json.loads((out / "config.json").read_text()).items() if k in released} == released
    released["net_structure_type"] = 1
    (tmp_path / "config.json").write_text(json.dumps(released))
    with pytest.raises(ConfigError, match="net_structure_type"):
        AlbertConfig.load(tmp_path)


def test_transformers_reads_litebert_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = tiny(num_hidden_groups=2, inner_group_num=2, hidden_act="relu", num_labels=5)
    config.save(tmp_path)
    theirs = transformers.AlbertConfig.from_pretrained(tmp_path)
    for key in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_groups", "inner_group_num", "hidden_act",
                "num_labels", "layer_norm_eps", "intermediate_size"):
        assert getattr(theirs, key) == getattr(config, key), key


def test_tying_survives_save_and_load(tmp_path):
    model = AlbertForPreTraining(tiny())
    assert model.predictions.decoder.weight is model.albert.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file
    stored = load_file(tmp_path / "model.safetensors")
    assert "predictions.decoder.weight" not in stored and "predictions.decoder.bias" not in stored  # stored once
    loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert loaded.predictions.decoder.weight is loaded.albert.embeddings.word_embeddings.weight
    assert loaded.predictions.decoder.bias is loaded.predictions.bias
    with torch.no_grad():
        loaded.albert.embeddings.word_embeddings.weight[7] += 1.0
    assert torch.equal(loaded.predictions.decoder.weight[7], loaded.albert.embeddings.word_embeddings.weight[7])


def test_partial_sharing_is_one_tensor_and_loads_back(tmp_path):
    model = AlbertModel(tiny(num_hidden_groups=2, sharing="attention"))
    groups = model.encoder.albert_layer_groups
    assert groups[0].albert_layers[0].attention is groups[1].albert_layers[0].attention
    assert groups[0].albert_layers[0].ffn is not groups[1].albert_layers[0].ffn
    model.save_pretrained(tmp_path)
    loaded = AlbertModel.from_pretrained(tmp_path)
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name
    # A checkpoint whose copies differ cannot be loaded as shared: it would silently keep one of them.
    from safetensors.torch import load_file, save_file
    state = load_file(tmp_path / "model.safetensors")
    state["encoder.albert_layer_groups.1.albert_layers.0.attention.query.weight"] += 1
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="differs from"):
        AlbertModel.from_pretrained(tmp_path)


def test_head_from_pretrained_encoder_reports_fresh_head(tmp_path, caplog):
    pretrained = AlbertForPreTraining(tiny())
    pretrained.save_pretrained(tmp_path)
    with caplog.at_level("INFO", logger="litebert"):
        classifier = AlbertForSequenceClassification.from_pretrained(tmp_path, num_labels=4)
    assert classifier.classifier.out_features == 4
    assert "initialised fresh: classifier" in caplog.text and "predictions" in caplog.text
    torch.testing.assert_close(classifier.albert.embeddings.word_embeddings.weight,
                               pretrained.albert.embeddings.word_embeddings.weight)


def _one_line_error(argv) -> str:
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = litebert_main(argv)
    assert code == 2
    text = err.getvalue().strip()
    assert "\n" not in text and "Traceback" not in text
    return text


def test_corrupt_truncated_and_mismatched_checkpoints_fail_with_one_line(tmp_path):
    model = AlbertForMaskedLM(tiny())
    good = tmp_path / "good"
    model.save_pretrained(good)
    weights = (good / "model.safetensors").read_bytes()

    truncated = tmp_path / "truncated"
    model.save_pretrained(truncated)
    (truncated / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    garbage = tmp_path / "garbage"
    model.save_pretrained(garbage)
    (garbage / "model.safetensors").write_bytes(b"\x00" * 100)
    mismatched = tmp_path / "mismatched"
    AlbertForMaskedLM(tiny(hidden_size=32, num_attention_heads=2)).save_pretrained(mismatched)
    (mismatched / "config.json").write_text((good / "config.json").read_text())
    wrong_layout = tmp_path / "layout"
    AlbertForMaskedLM(tiny(num_hidden_groups=2)).save_pretrained(wrong_layout)
    (wrong_layout / "config.json").write_text((good / "config.json").read_text())
    bad_json = tmp_path / "badjson"
    model.save_pretrained(bad_json)
    (bad_json / "config.json").write_text("{not json")

    for directory, error, message in [
        (truncated, CheckpointError, r"truncated/model.safetensors: corrupt or truncated"),
        (garbage, CheckpointError, "corrupt or truncated"),
        (mismatched, CheckpointError, r"has shape .* the config expects"),
        (wrong_layout, CheckpointError, "unexpected encoder weights"),
        (tmp_path / "nowhere", FileNotFoundError, "no such directory: .*nowhere$"),
        (bad_json, ConfigError, "not valid JSON, damaged or truncated"),
    ]:
        with pytest.raises(error, match=message):
            AlbertForMaskedLM.from_pretrained(directory)
        # A verb that loads the directory says the same as one line, and writes nothing.
        out = tmp_path / "out"
        assert re.search(message, _one_line_error(["convert", "--from-hf", str(directory), "--out", str(out)]))
        assert not out.exists()


def test_legacy_bin_is_read_without_unpickling_code(tmp_path):
    model = AlbertModel(tiny())
    model.config.save(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    loaded = AlbertModel.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight)

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    torch.save({"x": Evil()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="unreadable or unsafe"):
        AlbertModel.from_pretrained(tmp_path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu", "silu", "quick_gelu", "tanh"])
def test_activations_match_transformers(act):
    transformers = pytest.importorskip("transformers")
    from litebert.model import activation_fn
    x = torch.linspace(-5, 5, 101)
    torch.testing.assert_close(activation_fn(act)(x), transformers.activations.ACT2FN[act](x), atol=1e-6, rtol=0)


def test_parameter_counts_match_the_paper():
    rows = {r["model"]: r for r in table()}
    matched = [name for name, r in rows.items() if r["verdict"].startswith("matches")]
    # Every Table 1 and Table 4 figure is reached, except the two the described architecture cannot reach.
    assert sorted(set(r["model"] for r in rows.values() if r["paper_millions"]) - set(matched)) == \
        ["albert-xlarge-v2", "albert-xxlarge-v2"]
    assert round(rows["albert-base-v2"]["counts"]["as built"] / 1e6, 2) == 11.68
    assert rows["base E=128 sharing=all"]["counts"] == rows["albert-base-v2"]["counts"]


def test_a_head_initialises_the_encoder_it_wraps_once(monkeypatch):
    """AlbertModel initialises itself; the head around it initialises only its own modules (an xxlarge
    encoder was drawn twice)."""
    import litebert.weights
    from litebert.heads import AlbertForSequenceClassification

    seen = []
    real = litebert.weights.init_module_weights
    monkeypatch.setattr(litebert.weights, "init_module_weights", lambda m, std: (seen.append(id(m)), real(m, std)))
    model = AlbertForSequenceClassification(AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16,
                                                         num_hidden_layers=2, num_attention_heads=2,
                                                         intermediate_size=32, num_labels=3))
    assert len(seen) == len(set(seen)) == len(list(model.modules()))
