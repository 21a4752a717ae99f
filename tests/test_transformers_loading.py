"""transformers' loading and saving habits on litebert models: sharded checkpoints either library writes,
`save_pretrained(max_shard_size=, safe_serialization=)` and `from_pretrained(output_loading_info=True)`, compared
with transformers on the same tiny weights (built here, nothing downloaded)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.heads import MODEL_CLASSES
from litebert.weight_shards import INDEX_NAME, shard_bytes

transformers = pytest.importorskip("transformers")


def tiny(name: str, **overrides):
    torch.manual_seed(0)
    base = dict(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, hidden_act="gelu_new", initializer_range=0.2,
                num_labels=3)
    return MODEL_CLASSES[name](AlbertConfig(**{**base, **overrides})).eval()


IDS = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(1))


def test_a_checkpoint_transformers_sharded_loads_and_litebert_shards_as_transformers(tmp_path):
    """transformers' save_pretrained(max_shard_size=) writes model-0000i-of-0000n.safetensors and an index, which
    litebert could not read ("no model.safetensors"); litebert now reads it and writes the same layout, which
    transformers reads back, and writing one layout over the other leaves no stale file to be read instead."""
    ours = tiny("AlbertForMaskedLM")
    ours.save_pretrained(tmp_path / "one")
    theirs = transformers.AlbertForMaskedLM.from_pretrained(str(tmp_path / "one")).eval()
    theirs.save_pretrained(tmp_path / "hf", max_shard_size="20KB")
    assert INDEX_NAME in os.listdir(tmp_path / "hf") and "model.safetensors" not in os.listdir(tmp_path / "hf")
    loaded = type(ours).from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        assert torch.allclose(loaded(IDS).logits, theirs(IDS).logits, atol=1e-5)
        ours.save_pretrained(tmp_path / "ours", max_shard_size="20KB")
        names = sorted(os.listdir(tmp_path / "ours"))
        shards = [n for n in names if n.startswith("model-")]
        assert INDEX_NAME in names and "model.safetensors" not in names and len(shards) > 1
        assert shards[-1] == f"model-{len(shards):05d}-of-{len(shards):05d}.safetensors"
        weight_map = json.loads((tmp_path / "ours" / INDEX_NAME).read_text())["weight_map"]
        state = ours.state_dict()
        for shard in shards:  # at most 20 KB, or one tensor larger than that alone
            keys = [k for k, v in weight_map.items() if v == shard]
            assert len(keys) == 1 or sum(state[k].numel() * 4 for k in keys) <= 20_000, shard
        back = transformers.AlbertForMaskedLM.from_pretrained(str(tmp_path / "ours")).eval()
        assert torch.allclose(back(IDS).logits, theirs(IDS).logits, atol=1e-5)
        ours.save_pretrained(tmp_path / "ours")  # one file again: the shards and index go
        assert not any(n.startswith("model-") or n == INDEX_NAME for n in os.listdir(tmp_path / "ours"))
        assert torch.allclose(type(ours).from_pretrained(tmp_path / "ours")(IDS).logits, theirs(IDS).logits, atol=1e-5)


def test_a_damaged_shard_index_is_a_one_line_error(tmp_path):
    tiny("AlbertModel").save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(n for n in os.listdir(tmp_path) if n.startswith("model-"))
    os.remove(tmp_path / shards[-1])
    with pytest.raises(CheckpointError, match=f"names {shards[-1]}, which the directory lacks"):
        MODEL_CLASSES["AlbertModel"].from_pretrained(tmp_path)
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    index["weight_map"]["extra.weight"] = shards[0]
    (tmp_path / INDEX_NAME).write_text(json.dumps({**index, "weight_map": {k: shards[0] for k in index["weight_map"]}}))
    with pytest.raises(CheckpointError, match="disagree about"):
        MODEL_CLASSES["AlbertModel"].from_pretrained(tmp_path)
    for damage in ('{"weight_map": ', '{"metadata": {}}', '{"weight_map": {"a.weight": 3}}'):
        (tmp_path / INDEX_NAME).write_text(damage)
        with pytest.raises(CheckpointError, match=INDEX_NAME) as raised:
            MODEL_CLASSES["AlbertModel"].from_pretrained(tmp_path)
        assert "\n" not in str(raised.value)


def test_shard_sizes_read_as_transformers_and_pickles_are_refused(tmp_path):
    from transformers.utils.hub import convert_file_size_to_int

    for size in ("5GB", "200MB", "20KB", "1GiB", "3MiB", "7KiB", "8Mb", 12345):
        assert shard_bytes(size) == convert_file_size_to_int(size), size
    for size in ("5 TB", "big", 0, -3, "1.5GB"):
        with pytest.raises(ConfigError, match="max_shard_size"):
            shard_bytes(size)
    model = tiny("AlbertModel")
    with pytest.raises(ConfigError, match="safe_serialization=False"):
        model.save_pretrained(tmp_path / "pickle", safe_serialization=False)
    with pytest.raises(ConfigError, match="max_shard_size"):
        model.save_pretrained(tmp_path / "bad", max_shard_size="lots")
    assert not (tmp_path / "bad").exists()
    model.save_pretrained(tmp_path / "safe", safe_serialization=True)
    assert "model.safetensors" in os.listdir(tmp_path / "safe")


@pytest.mark.parametrize("saved, loaded, overrides", [
    ("AlbertForMaskedLM", "AlbertForSequenceClassification", {}),
    ("AlbertForMaskedLM", "AlbertModel", {}),
    ("AlbertModel", "AlbertForMaskedLM", {}),  # a bare encoder's pooler: named as the checkpoint names it
    ("AlbertForSequenceClassification", "AlbertForSequenceClassification", dict(num_labels=5)),
    ("AlbertForSequenceClassification", "AlbertForSequenceClassification", {})])
def test_output_loading_info_equals_transformers(tmp_path, saved, loaded, overrides):
    """It was a ConfigError that wrongly said the flag belonged to the model's call (an `output_` name)."""
    tiny(saved).save_pretrained(tmp_path)
    kw = dict(output_loading_info=True, ignore_mismatched_sizes=bool(overrides), **overrides)
    model, ours = MODEL_CLASSES[loaded].from_pretrained(tmp_path, **kw)
    _, theirs = getattr(transformers, loaded).from_pretrained(str(tmp_path), **kw)
    assert isinstance(model, MODEL_CLASSES[loaded])

    def comparable(info: dict) -> dict:
        return {**info, "mismatched_keys": {(k, tuple(a), tuple(b)) for k, a, b in info["mismatched_keys"]}}

    assert comparable(ours) == comparable(theirs)


@pytest.mark.parametrize("first, second", [("20KB", "20KB"), (None, "20KB"), ("20KB", None)])
def test_a_save_that_fails_partway_leaves_the_old_weights_whole(first, second, tmp_path, monkeypatch):
    """Each shard used to replace its namesake in turn, the index last: a full disk at the third shard left the
    old index over a mix of old and new shards, which loaded without a word. New files are written beside, and go
    in around the file a reader takes first."""
    import errno

    from litebert import weight_shards

    old, new = tiny("AlbertForMaskedLM"), tiny("AlbertForMaskedLM", initializer_range=0.5)
    old.save_pretrained(tmp_path / "m", max_shard_size=first)
    error, load, save = weight_shards._safetensors_io()
    calls = []

    def full_disk_at_the_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == (3 if second else 1):
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(*args, **kwargs)

    monkeypatch.setattr(weight_shards, "_safetensors_io", lambda: (error, load, full_disk_at_the_third))
    with pytest.raises(OSError, match="No space left"):
        new.save_pretrained(tmp_path / "m", max_shard_size=second)
    monkeypatch.undo()
    loaded = MODEL_CLASSES["AlbertForMaskedLM"].from_pretrained(tmp_path / "m").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in old.state_dict().items())
    assert sorted(os.listdir(tmp_path)) == ["m"] and not [n for n in os.listdir(tmp_path / "m") if
                                                          n.startswith(".")]  # nothing staged is left
    (tmp_path / "m" / ".weights-killed").mkdir()  # what a save killed outright leaves: the next one removes it
    (tmp_path / "m" / ".weights-killed" / "model.safetensors").write_bytes(b"x" * 100)
    new.save_pretrained(tmp_path / "m", max_shard_size=second)  # and the save then goes through whole
    assert not [n for n in os.listdir(tmp_path / "m") if n.startswith(".")]
    loaded = MODEL_CLASSES["AlbertForMaskedLM"].from_pretrained(tmp_path / "m").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in new.state_dict().items())


def test_a_checkpoint_made_from_a_sharded_model_copies_its_tokenizer_not_its_shard_index(tmp_path):
    """Fine-tuning copies the tokenizer files of the model it started from into each checkpoint: from a sharded
    base model that took model.safetensors.index.json too, an index naming shards the checkpoint lacks."""
    from litebert.corpus.tokenizer_training import train_tokenizer
    from litebert.tokenizer import Tokenizer
    from litebert.training.checkpoint import save_checkpoint

    base = tmp_path / "base"
    train_tokenizer(None, str(base), vocab_size=500, input_sentence_size=20000)
    tiny("AlbertForMaskedLM").save_pretrained(base, max_shard_size="20KB")
    checkpoint = save_checkpoint(tmp_path / "run", 1, tiny("AlbertForMaskedLM"), {}, tokenizer=base)
    names = set(os.listdir(checkpoint))
    assert {"spiece.model", "model.safetensors"} <= names and INDEX_NAME not in names, names
    assert Tokenizer.from_pretrained(str(checkpoint)).vocab_size == 500
