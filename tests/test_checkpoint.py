"""Checkpoints: exact resume (with accumulation and dropout), crash safety, keep-last, HF-loadable dirs."""

import random

import numpy as np
import pytest
import torch
from test_train import ToyModel, make_toy, toy_batches, toy_config

from litebert.training import checkpoint as ckpt
from litebert.training.loop import train
from litebert.training.metrics_log import read_metrics

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


class CountingBatches:
    """A batch_fn with state of its own (as a streaming dataset would have): the micro-batches it served."""

    def __init__(self):
        self.served = 0
        self.batches = toy_batches(8, 8)

    def __call__(self, step, micro, rank, world_size):
        self.served += 1
        return self.batches(step, micro, rank, world_size)

    def state_dict(self):
        return {"served": self.served}

    def load_state_dict(self, state):
        self.served = state["served"]


def assert_same_state(a, b, where=""):
    """Equal nested dicts/lists/tuples of tensors and primitives, compared exactly."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def make_train_state(seed):
    from litebert.training.distributed import Dist
    from litebert.training.optim import make_optimizer, make_schedule
    from litebert.training.state import TrainState
    torch.manual_seed(seed)
    model = ToyModel()
    optimizer = make_optimizer(model, "lamb", lr=0.01)
    schedule = make_schedule(optimizer, warmup_steps=2, total_steps=10)
    return TrainState(model, optimizer, schedule, CountingBatches(), Dist(0, 1, 0, torch.device("cpu"), False),
                      accumulation_steps=1)


def test_save_then_restore_round_trips_every_named_state_object(tmp_path):
    a = make_train_state(0)
    assert set(a.objects) == {"record", "optimizer", "schedule", "data", "progress"}
    for _ in range(3):  # optimizer moments, schedule position, data state and step all away from a fresh start
        optimizer, schedule, data = a.objects["optimizer"], a.objects["schedule"], a.objects["data"]
        a.model(**data.batch_fn(a.progress.step, 0, 0, 1)).loss.backward()
        optimizer.step(), schedule.step(), optimizer.zero_grad()
        a.progress.step += 1
    random.seed(5), np.random.seed(6), torch.rand(7)  # RNG streams away from the seed
    path = a.save(tmp_path)
    assert path.name == "step_3"
    saved = {name: obj.state_dict() for name, obj in a.objects.items()}
    assert saved["data"] == {"step": 3, "state": {"served": 3}} and saved["progress"]["step"] == 3
    expected_draws = (random.random(), np.random.rand(), torch.rand(3))

    b = make_train_state(1)  # a fresh process: other weights, no moments, step 0, other RNG state
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    b.restore(path)
    assert_same_state(b.model.state_dict(), a.model.state_dict(), "model")
    for name, obj in b.objects.items():
        assert_same_state(obj.state_dict(), saved[name], name)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    assert draws[:2] == expected_draws[:2] and torch.equal(draws[2], expected_draws[2])


def test_train_state_file_keeps_the_layout_of_every_checkpoint_so_far(tmp_path):
    """train_state.pt keys as the first checkpoints wrote them, so a run saved before the state objects resumes
    (and a checkpoint written now resumes in an older litebert)."""
    train(make_toy(), CountingBatches(), toy_config(tmp_path, max_steps=2))
    state = ckpt.load_train_state(tmp_path / "run" / "step_2")
    assert set(state) == {"step", "rng", "world_size", "accumulation_steps", "optimizer", "schedule", "data", "config",
                          "record", "log_window"}  # the last two added since (prerelease.OBJECTS_ADDED_SINCE)
    assert (state["step"], state["world_size"], state["accumulation_steps"]) == (2, 1, 1)
    assert state["data"] == {"step": 2, "state": {"served": 2}} and len(state["rng"]) == 1
    assert set(state["optimizer"]) == {"state", "param_groups"} and state["config"]["max_steps"] == 2


# -- resume robustness: damaged checkpoints, another run's checkpoint, evaluations owed -------------------------

@pytest.mark.parametrize("damaged", ["train_state.pt", "model.safetensors"])
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, damaged):
    """A truncated file in the newest checkpoint (a copy cut short, a full disk on another machine): the resume
    warns, moves it aside and continues from the one before, ending where an uninterrupted run ends."""
    kw = dict(save_every=4, keep_last=0, micro_batch_size=4)
    reference = make_toy()
    train(reference, toy_batches(8, 4), toy_config(tmp_path / "a", **kw))
    with pytest.raises(Crash):  # killed during step 9, after step_8 was saved
        train(make_toy(), crashing(toy_batches(8, 4), at_step=8), toy_config(tmp_path / "b", **kw))
    out = tmp_path / "b" / "run"
    victim = out / "step_8" / damaged
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    model = make_toy()
    with caplog.at_level("WARNING", logger="litebert"):
        result = train(model, toy_batches(8, 4), toy_config(tmp_path / "b", resume=True, **kw))
    assert result.losses.keys() == set(range(5, 13))  # resumed from step_4
    assert any("step_8" in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    assert (out / "step_8.damaged").is_dir()  # kept for inspection, never picked again
    assert_same_params(reference, model)


def test_a_resume_whose_every_checkpoint_is_damaged_is_refused_and_keeps_the_run(tmp_path):
    """The only checkpoint is damaged (keep_last=1): the resume is refused in one line, naming it, rather than
    training again from step 0 and dropping the metrics log; nothing is renamed, so a rerun is refused again."""
    from litebert.errors import CheckpointError
    kw = dict(save_every=4, keep_last=1, micro_batch_size=4, max_steps=8)
    train(make_toy(), toy_batches(8, 4), toy_config(tmp_path, **kw))
    out = tmp_path / "run"
    victim = out / "step_8" / "train_state.pt"
    victim.write_bytes(victim.read_bytes()[:100])
    logged = (out / "metrics.jsonl").read_text()
    for _ in range(2):
        with pytest.raises(CheckpointError, match="none of its checkpoints is intact.*step_8: train_state.pt"):
            train(make_toy(), toy_batches(8, 4), toy_config(tmp_path, resume=True, **{**kw, "max_steps": 12}))
        assert (out / "step_8").is_dir() and not (out / "step_8.damaged").exists()
        assert (out / "metrics.jsonl").read_text() == logged


def test_damaged_checkpoints_moved_aside_are_pruned_to_the_newest_few(tmp_path):
    """Each resume past damage kept its damaged checkpoints as step_N.damaged and nothing ever removed them: a
    disk that keeps damaging checkpoints filled up with dead ones. Only the newest KEEP_DAMAGED stay."""
    train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=1))
    out = tmp_path / "run"
    for step in (10, 20, 30, 40):  # one resume after each damage
        (out / f"step_{step}").mkdir()
        (out / f"step_{step}" / ckpt.MARKER).write_text("[]")
        assert ckpt.resume_point(out) == out / "step_1"
        aside = sorted(p.name for p in out.iterdir() if p.name.endswith(ckpt.DAMAGED_SUFFIX))
        assert aside == [f"step_{s}.damaged" for s in (10, 20, 30, 40) if s <= step][-ckpt.KEEP_DAMAGED:]
    for step in (50, 60, 70):  # several at once
        (out / f"step_{step}").mkdir()
        (out / f"step_{step}" / ckpt.MARKER).write_text("[]")
    assert ckpt.resume_point(out) == out / "step_1"
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(ckpt.DAMAGED_SUFFIX)) == [
        "step_60.damaged", "step_70.damaged"]
    assert ckpt.list_checkpoints(out) == [(1, out / "step_1")]


@pytest.mark.parametrize("marker", ["[]", "5", '{"files": [1]}', '{"files": {"model.safetensors": 3}}',
                                    '{"files": {"model.safetensors": {"size": 1}}}'])
def test_a_marker_that_is_json_but_no_file_list_is_damage_not_a_traceback(tmp_path, marker):
    """A marker that parses as JSON but is not the object the save wrote (a flipped byte can keep it JSON) is a
    damaged checkpoint, as a truncated one is: verify_checkpoint names it, and a resume moves on past it."""
    train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=2))
    path = tmp_path / "run" / "step_2"
    (path / ckpt.MARKER).write_text(marker)
    assert ckpt.MARKER in ckpt.verify_checkpoint(path)


def test_verify_checkpoint_reads_checkpoints_without_a_file_list(tmp_path):
    """Checkpoints written before the marker listed its files are checked by reading them."""
    import json
    train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, max_steps=2))
    path = tmp_path / "run" / "step_2"
    assert ckpt.verify_checkpoint(path) is None
    (path / ckpt.MARKER).write_text(json.dumps({"step": 2}))  # the old marker
    assert ckpt.verify_checkpoint(path) is None
    state = path / ckpt.STATE_NAME
    state.write_bytes(state.read_bytes()[:100])
    assert "train_state.pt" in ckpt.verify_checkpoint(path)


def _albert(**config):
    from litebert.config import AlbertConfig
    from litebert.heads import AlbertForSequenceClassification
    torch.manual_seed(0)
    tiny = dict(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=32, max_position_embeddings=16)
    return AlbertForSequenceClassification(AlbertConfig(**{**tiny, **config}))


def _class_batches(num_labels):
    def batch_fn(step, micro, rank, world_size):
        g = torch.Generator().manual_seed(step * 10 + micro * world_size + rank)
        return {"input_ids": torch.randint(5, 40, (4, 8), generator=g),
                "labels": torch.randint(0, num_labels, (4,), generator=g)}
    return batch_fn


@pytest.mark.parametrize("change, message", [
    (dict(config=dict(hidden_size=32, intermediate_size=64)), r"the model \(architecture\) differs \(.*hidden_size: 16 "
                                                               r"in the checkpoint, 32 now"),
    (dict(config=dict(num_hidden_layers=3)), r"the model \(architecture\) differs \(.*num_hidden_layers: 2"),
    (dict(config=dict(num_labels=3, id2label={0: "a", 1: "b", 2: "c"})), r"the label set differs \(\['a', 'b'\] in "
                                                                          r"the checkpoint, \['a', 'b', 'c'\] now"),
    (dict(config=dict(id2label={0: "b", 1: "a"})), r"the label set differs"),
    (dict(tokenizer=b"another vocabulary"), r"the tokenizer differs"),
    (dict(identity={"data": {"meta_sha256": "f" * 64}}), r"the data differs \(meta_sha256: "),
])
def test_a_resume_with_another_model_labels_tokenizer_or_data_is_refused_by_name(tmp_path, change, message):
    from litebert.errors import CheckpointError
    tok = tmp_path / "spiece.model"
    tok.write_bytes(b"a vocabulary")
    cfg = toy_config(tmp_path, max_steps=2, batch_size=4)
    labels2 = dict(num_labels=2, id2label={0: "a", 1: "b"})
    train(_albert(**labels2), _class_batches(2), cfg, tokenizer=tok, identity={"data": {"meta_sha256": "0" * 64}})
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    config = {**labels2, **change.get("config", {})}
    if "tokenizer" in change:
        tok.write_bytes(change["tokenizer"])
    resumed = toy_config(tmp_path, max_steps=4, batch_size=4, resume=True)
    with pytest.raises(CheckpointError, match=message) as info:
        train(_albert(**config), _class_batches(config["num_labels"]), resumed, tokenizer=tok,
              identity=change.get("identity", {"data": {"meta_sha256": "0" * 64}}))
    assert "step_2" in str(info.value) and "\n" not in str(info.value)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before  # nothing rewritten, not even the config


def test_a_resume_that_changes_only_dropout_is_accepted(tmp_path):
    cfg = toy_config(tmp_path, max_steps=2, batch_size=4)
    train(_albert(), _class_batches(2), cfg)
    result = train(_albert(hidden_dropout_prob=0.1), _class_batches(2),
                   toy_config(tmp_path, max_steps=3, batch_size=4, resume=True))
    assert list(result.losses) == [3]


def test_every_saved_step_is_evaluated_exactly_once(tmp_path):
    """A kill between saving step 4 and evaluating it: the resume evaluates step 4 first; a resume of the
    finished run evaluates nothing and returns the recorded final evaluation."""
    calls = []

    def evaluate(model, crash_at=None):
        calls.append(len(calls))
        if crash_at is not None and len(calls) == crash_at:
            raise Crash
        return {"acc": 0.25 * len(calls)}

    kw = dict(save_every=2, eval_every=2, max_steps=6, micro_batch_size=8, keep_last=0)
    with pytest.raises(Crash):  # the second evaluation is step 4's
        train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, **kw), lambda m: evaluate(m, crash_at=2))
    out = tmp_path / "run"
    assert ckpt.latest_checkpoint(out).name == "step_4" and ckpt.read_evaluation(out / "step_4") is None
    calls.clear()
    result = train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, resume=True, **kw), evaluate)
    assert len(calls) == 2 and result.eval == {"acc": 0.5}  # step 4's, then step 6's
    evals = [r["step"] for r in read_metrics(out / "metrics.jsonl") if "eval_acc" in r]
    assert evals == [2, 4, 6]
    assert ckpt.read_evaluation(out / "step_4") == {"acc": 0.25} and ckpt.read_evaluation(out / "step_6") == {"acc": 0.5}
    calls.clear()
    again = train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, resume=True, **kw), evaluate)
    assert calls == [] and again.eval == {"acc": 0.5} and again.losses == {}


def _scored_run(tmp_path, max_steps, resume=False, **kw):
    """A run evaluated every 2 steps whose score peaks at step 2 (early stopping, patience 2, stops at step 6)."""
    from litebert.training.state import EarlyStopping
    last = {}

    def batches(step, micro, rank, world_size):
        last["step"] = step + 1
        return toy_batches(8, 8)(step, micro, rank, world_size)

    stopping = EarlyStopping("score", patience=2)
    cfg = toy_config(tmp_path, max_steps=max_steps, eval_every=2, resume=resume, keep_last=0, **kw)
    result = train(make_toy(), batches, cfg, lambda m: {"score": float(last["step"] == 2)}, early_stopping=stopping)
    return result, stopping


@pytest.mark.parametrize("first_steps", [4, 5])
def test_a_resume_with_more_steps_stops_where_the_uninterrupted_run_stops(tmp_path, first_steps):
    """A run extended with a larger --max-steps carries its count of evaluations without improvement: it stops at
    step 6, as a run given the larger --max-steps from the start, whether the first run ended on an evaluation
    step (4: counted on resume, from the recorded evaluation) or off one (5: its final evaluation is one the
    longer run never makes, so it is not counted)."""
    straight, _ = _scored_run(tmp_path / "straight", 12, save_every=1)
    assert straight.step == 6
    first, _ = _scored_run(tmp_path / "extended", first_steps, save_every=1)
    assert first.step == first_steps
    resumed, stopping = _scored_run(tmp_path / "extended", 12, resume=True, save_every=1)
    assert resumed.step == 6 and list(resumed.losses) == list(range(first_steps + 1, 7))
    assert stopping.stale == 2


@pytest.mark.parametrize("save_every", [3, 4])
def test_a_resumed_early_stopped_run_counts_its_last_evaluation_once(tmp_path, save_every, caplog):
    """The run stops at step 6. Not a save step (save_every 4), its checkpoint was written after the count and the
    resume counted step 6's evaluation again: 3 evaluations without improvement where there were 2."""
    first, _ = _scored_run(tmp_path, 12, save_every=save_every)
    assert first.step == 6 and ckpt.latest_checkpoint(tmp_path / "run").name == "step_6"
    with caplog.at_level("INFO", logger="litebert"):
        resumed, stopping = _scored_run(tmp_path, 20, resume=True, save_every=save_every)
    assert resumed.step == 6 and resumed.losses == {}
    assert stopping.stale == 2
    assert any("2 evaluations without a better score" in r.getMessage() for r in caplog.records)


def test_a_kill_between_logging_and_recording_an_evaluation_leaves_it_logged_once(tmp_path, monkeypatch):
    """Step 4's evaluation reached metrics.jsonl, then the run died before the checkpoint recorded it: the
    resume evaluates step 4 again and metrics.jsonl keeps one evaluation of it, not two (CI caught the pair)."""
    from litebert.training import loop
    real = ckpt.write_evaluation

    def dies_at_step_4(checkpoint, metrics):
        if checkpoint.name == "step_4":
            raise Crash
        real(checkpoint, metrics)

    kw = dict(save_every=2, eval_every=2, max_steps=6, micro_batch_size=8, keep_last=0)
    monkeypatch.setattr(loop.ckpt, "write_evaluation", dies_at_step_4)
    with pytest.raises(Crash):
        train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, **kw), lambda m: {"acc": 0.5})
    out = tmp_path / "run"
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if "eval_acc" in r] == [2, 4]
    monkeypatch.setattr(loop.ckpt, "write_evaluation", real)
    train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, resume=True, **kw), lambda m: {"acc": 0.5})
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl") if "eval_acc" in r] == [2, 4, 6]
    logged = [r["step"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
    assert logged == sorted(set(logged))  # the training records, too, each once and in order


def test_the_initial_weights_are_evaluated_once_per_run(tmp_path):
    seen = []

    def evaluate(model):
        seen.append(model.training)
        return {"loss": float(len(seen))}

    kw = dict(save_every=2, max_steps=2, micro_batch_size=8)
    first = train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, **kw), evaluate, evaluate_start=True)
    assert first.start_eval == {"loss": 1.0} and first.eval == {"loss": 2.0} and seen == [False, False]
    resumed = train(make_toy(), toy_batches(8, 8), toy_config(tmp_path, resume=True, **{**kw, "max_steps": 4}),
                    evaluate, evaluate_start=True)
    assert resumed.start_eval == {"loss": 1.0} and len(seen) == 3  # step 4 only
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval_loss" in r]
    assert [r["step"] for r in records] == [0, 2, 4]


def test_a_missing_tokenizer_is_refused_before_training(tmp_path):
    """It was found missing only at the first save: with --save-every 0, after the whole run."""
    from litebert.errors import ConfigError
    calls = []
    batches = toy_batches(8, 8)
    with pytest.raises(ConfigError, match="tokenizer .*gone.* does not exist"):
        train(make_toy(), lambda *a: calls.append(a) or batches(*a), toy_config(tmp_path, max_steps=3),
              tokenizer=tmp_path / "gone")
    assert calls == []


def test_optimizer_state_is_matched_by_parameter_name_and_a_missing_one_is_named():
    """What lets an old MLM-only checkpoint resume (test_pretrain.py): saved state for parameters the run no
    longer trains is dropped, the rest lands on the same names; a parameter without saved state is refused."""
    from litebert.errors import CheckpointError
    from litebert.training.optim import make_optimizer
    from litebert.training.prerelease import optimizer_state_by_name
    model = make_toy()
    opt = make_optimizer(model, "adamw", lr=1e-2)
    model(**toy_batches(8, 8)(0, 0, 0, 1)).loss.backward()
    opt.step()
    saved = opt.state_dict()
    model.dense.requires_grad_(False)  # this run trains one layer fewer
    fewer = make_optimizer(model, "adamw", lr=1e-2)
    remapped = optimizer_state_by_name(fewer, saved, "step_1")
    fewer.load_state_dict(remapped)
    by_name = {n: fewer.state[p] for g in fewer.param_groups for n, p in zip(g["param_names"], g["params"])}
    old = {n: saved["state"][i] for g in saved["param_groups"] for n, i in zip(g["param_names"], g["params"])}
    assert set(by_name) == set(old) - {"dense.weight", "dense.bias"}
    assert all(torch.equal(by_name[n]["exp_avg"], old[n]["exp_avg"]) for n in by_name)
    for g in saved["param_groups"]:
        g["param_names"] = [n.replace("LayerNorm", "norm") for n in g["param_names"]]
    with pytest.raises(CheckpointError, match="no entry for LayerNorm"):
        optimizer_state_by_name(make_optimizer(make_toy(), "adamw", lr=1e-2), saved, "step_1")
