"""Checkpoints: exact resume (with accumulation and dropout), crash safety, keep-last, HF-loadable dirs."""

import random

import numpy as np
import pytest
import torch

from litebert.training import checkpoint as ckpt
from litebert.training.loop import read_metrics, train
from test_train import ToyModel, make_toy, toy_batches, toy_config

torch.set_num_threads(1)


class Crash(Exception):
    pass


def crashing(batch_fn, at_step):
    """The same data, but the process 'dies' when it reaches `at_step` (mid-step, during accumulation)."""
    def fn(step, micro, rank, world_size):
        if step == at_step and micro == 1:
            raise Crash
        return batch_fn(step, micro, rank, world_size)
    return fn


def assert_same_params(a, b):
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name


def test_resume_is_bit_identical_with_accumulation_and_dropout(tmp_path):
    kw = dict(micro_batch_size=2, save_every=4, optimizer="lamb")
    reference = make_toy()
    full = train(reference, toy_batches(8, 2), toy_config(tmp_path / "a", **kw))

    interrupted = make_toy()
    with pytest.raises(Crash):
        train(interrupted, crashing(toy_batches(8, 2), at_step=6), toy_config(tmp_path / "b", **kw))
    assert ckpt.latest_checkpoint(tmp_path / "b" / "run").name == "step_4"
    resumed_model = make_toy()  # a fresh process: new model, state comes from the checkpoint only
    torch.manual_seed(999), random.seed(999), np.random.seed(999)  # and unrelated RNG state
    resumed = train(resumed_model, toy_batches(8, 2), toy_config(tmp_path / "b", resume=True, **kw))
    assert_same_params(reference, resumed_model)
    assert {s: full.losses[s] for s in range(5, 13)} == resumed.losses
    # the metrics log holds each step once: what the crashed run wrote after step 4 was dropped
    steps = [r["step"] for r in read_metrics(tmp_path / "b" / "run" / "metrics.jsonl") if "loss" in r]
    assert steps == list(range(1, 13))


def test_resume_with_adamw_is_bit_identical(tmp_path):
    kw = dict(save_every=5, optimizer="adamw", lr=0.01, max_steps=8, micro_batch_size=4)
    reference = make_toy()
    train(reference, toy_batches(8, 4), toy_config(tmp_path / "a", **kw))
    with pytest.raises(Crash):
        train(make_toy(), crashing(toy_batches(8, 4), at_step=6), toy_config(tmp_path / "b", **kw))
    model = make_toy()
    train(model, toy_batches(8, 4), toy_config(tmp_path / "b", resume=True, **kw))
    assert_same_params(reference, model)


def test_resume_with_another_accumulation_reads_the_same_data(tmp_path):
    """Without dropout, changing micro_batch_size on resume changes only float summation order."""
    kw = dict(save_every=3, max_steps=6)
    reference = make_toy(0.0)
    train(reference, toy_batches(8, 8), toy_config(tmp_path / "a", **kw))
    with pytest.raises(Crash):
        train(make_toy(0.0), crashing(toy_batches(8, 4), at_step=4),
              toy_config(tmp_path / "b", micro_batch_size=4, **kw))
    model = make_toy(0.0)
    train(model, toy_batches(8, 2), toy_config(tmp_path / "b", micro_batch_size=2, resume=True, **kw))
    for pa, pb in zip(reference.parameters(), model.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-4, atol=1e-5)


def test_crash_mid_write_resumes_from_last_complete_checkpoint(tmp_path, monkeypatch):
    kw = dict(save_every=4)
    reference = make_toy()
    train(reference, toy_batches(8, 8), toy_config(tmp_path / "a", **kw))

    cfg = toy_config(tmp_path / "b", **kw)
    real_save = torch.save

    def dying_save(obj, path, *a, **k):  # the process dies while writing step 8's train_state.pt
        if str(path).endswith("train_state.pt") and obj["step"] == 8:
            real_save({"half": torch.zeros(3)}, path)
            raise Crash
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(Crash):
        train(make_toy(), toy_batches(8, 8), cfg)
    monkeypatch.setattr(torch, "save", real_save)
    run = tmp_path / "b" / "run"
    assert not (run / "step_8").exists()  # the writer removed its half-written .tmp-step_8 on the way out
    (run / ".tmp-step_8").mkdir()  # what a killed process (no exception handler runs) leaves behind
    (run / ".tmp-step_8" / "train_state.pt").write_bytes(b"half")
    # debris of another kind: a step dir without the marker (e.g. copied by hand, or an old writer)
    (run / "step_12").mkdir()
    (run / "step_12" / "model.safetensors").write_bytes(b"garbage")
    assert ckpt.latest_checkpoint(run).name == "step_4"

    model = make_toy()
    train(model, toy_batches(8, 8), toy_config(tmp_path / "b", resume=True, **kw))
    assert_same_params(reference, model)
    assert not (run / ".tmp-step_8").exists()
    assert [p.name for _, p in ckpt.list_checkpoints(run)] == ["step_4", "step_8", "step_12"]


def test_keep_last_and_refusing_to_overwrite(tmp_path):
    cfg = toy_config(tmp_path, save_every=2, keep_last=2, max_steps=9)
    train(make_toy(), toy_batches(8, 8), cfg)
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(("step_", "."))) == ["step_8", "step_9"]
    assert ckpt.load_train_state(run / "step_9")["step"] == 9
    with pytest.raises(ValueError, match="--resume"):
        train(make_toy(), toy_batches(8, 8), cfg)


def test_train_state_loads_weights_only_and_restores_rng(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = ckpt.rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(2))
    model = make_toy()
    path = ckpt.save_checkpoint(tmp_path, 7, model, {"step": 7, "rng": [state]}, tokenizer=None)
    loaded = ckpt.load_train_state(path)  # weights_only=True inside
    ckpt.set_rng_state(loaded["rng"][0])
    got = (random.random(), np.random.rand(), torch.rand(2))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])
    other = ToyModel.from_pretrained(path)  # tied decoder restored from the embedding
    assert_same_params(model, other)
    assert other.decoder.weight is other.embed.weight


def test_real_tiny_albert_checkpoint_is_a_model_dir_and_resumes_exactly(tmp_path):
    model_mod = pytest.importorskip("litebert.model")
    from litebert.config import AlbertConfig

    config = AlbertConfig.from_preset("tiny", vocab_size=64, num_hidden_layers=2, max_position_embeddings=32)

    def batch_fn(step, micro, rank, world_size):
        g = torch.Generator().manual_seed(step * 100 + micro * world_size + rank)
        ids = torch.randint(5, 64, (2, 16), generator=g)
        labels = torch.full_like(ids, -100)
        labels[:, 3:6] = ids[:, 3:6]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
                "labels": labels, "sentence_order_label": torch.randint(0, 2, (2,), generator=g)}

    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "spiece.model").write_bytes(b"not really a sentencepiece model")

    def run(out, crash=False, resume=False):
        torch.manual_seed(0)
        model = model_mod.AlbertForPreTraining(config)
        cfg = toy_config(out, max_steps=4, batch_size=4, micro_batch_size=2, save_every=2, lr=1e-3,
                         resume=resume)
        train(model, crashing(batch_fn, 3) if crash else batch_fn, cfg, tokenizer=tok)
        return model

    reference = run(tmp_path / "a")
    with pytest.raises(Crash):
        run(tmp_path / "b", crash=True)
    resumed = run(tmp_path / "b", resume=True)
    assert_same_params(reference, resumed)
    last = ckpt.latest_checkpoint(tmp_path / "b" / "run")
    assert (last / "spiece.model").is_file() and (last / "config.json").is_file()
    loaded = model_mod.AlbertForPreTraining.from_pretrained(last)
    assert_same_params(reference, loaded)
