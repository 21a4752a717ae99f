"""Pretraining end to end: CLI, overfitting one batch, determinism, SIGKILL + resume, and learning above baselines."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.corpus.batches import make_batch
from litebert.corpus.dataset import PretrainDataset
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import CheckpointError, ConfigError
from litebert.model import AlbertForPreTraining
from litebert.pretrain import PretrainConfig, pretrain
from litebert.training import prerelease
from litebert.training.loop import train
from litebert.training.metrics_log import read_metrics
from litebert.training.train_config import TrainConfig

TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tokenizer and SOP pairs (seq 32) from the bundled corpus."""
    root = tmp_path_factory.mktemp("pretrain")
    train_tokenizer(None, str(root / "tok"), vocab_size=1000)
    prepare(None, str(root / "data"), str(root / "tok"), max_seq_length=32, num_workers=1, progress=False)
    return root


def model_toml(path, **model):
    lines = ["[model]"] + [f"{k} = {v}" for k, v in {**TINY, **model}.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_pretrain_cli_writes_a_transformers_loadable_run(prepared, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "run"
    code = litebert_main(["pretrain", "--config", model_toml(tmp_path / "m.toml"), "--data", str(prepared / "data"),
                          "--held-out", "64", "--max-steps", "6", "--batch-size", "8", "--eval-every", "3",
                          "--optimizer", "adamw", "--lr", "1e-3", "--out-dir", str(out), "--no-progress"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["objective"] == "sop"
    assert {"mlm_acc", "mlm_loss", "sop_acc"} <= set(summary["final"])
    assert 0 < summary["baselines"]["majority_token_acc"] < 1 and summary["baselines"]["unigram_loss"] > 0
    assert (out / "metrics.png").stat().st_size > 1000
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_sop_acc" in r for r in records) and any("loss" in r for r in records)

    checkpoint = out / "step_6"
    ours = AlbertForPreTraining.from_pretrained(checkpoint).eval()
    theirs = transformers.AlbertForPreTraining.from_pretrained(checkpoint).eval()
    ids = torch.randint(5, 1000, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).prediction_logits, theirs(ids).prediction_logits, atol=1e-5, rtol=0)
    assert (checkpoint / "spiece.model").exists()  # a complete model directory, tokenizer included


def test_bad_inputs_fail_with_one_line(prepared, tmp_path, capsys):
    assert litebert_main(["pretrain", "--data", str(tmp_path / "missing"), "--no-progress"]) == 2
    assert "no meta.json" in capsys.readouterr().err
    assert litebert_main(["pretrain", "--data", str(prepared / "data"), "--held-out", "100000", "--no-progress"]) == 2
    assert "leaves no document to train on" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nhidden_sise = 3\n")
    assert litebert_main(["pretrain", "--config", str(bad), "--data", str(prepared / "data")]) == 2
    assert "hidden_sise" in capsys.readouterr().err


def one_batch(prepared, n=8):
    data = PretrainDataset(str(prepared / "data"))
    meta = data.meta
    return make_batch(data, list(range(n)), seed=0, stream=0, position=0, vocab_size=meta["vocab_size"],
                      mask_id=meta["special_ids"]["mask"], max_seq_length=32)


def test_overfits_one_batch_to_zero_mlm_loss_and_perfect_sop(prepared, tmp_path):
    batch = one_batch(prepared)
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(vocab_size=1000, **TINY))
    cfg = TrainConfig(optimizer="adamw", lr=3e-3, batch_size=8, max_steps=300, warmup_steps=0, lr_decay_power=0.0,
                      weight_decay=0.0, out_dir=str(tmp_path / "o"), progress=False, log_every=50)
    train(model, lambda step, micro, rank, world: batch, cfg)  # device "auto": a GPU where there is one
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        out = model(**{k: v.to(device) for k, v in batch.items()})
    assert out.mlm_loss.item() < 0.05
    assert (out.sop_logits.argmax(-1).cpu() == batch["sentence_order_label"]).all()


def test_same_seed_gives_the_same_loss_sequence(prepared, tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = TrainConfig(optimizer="lamb", lr=1e-2, batch_size=8, max_steps=5, warmup_steps=2, log_every=1,
                          out_dir=str(tmp_path / name), progress=False, seed=7)
        summary = pretrain(PretrainConfig(data=str(prepared / "data"), held_out=64), cfg, TINY)
        runs.append([json.loads(line).get("loss") for line in open(tmp_path / name / "metrics.jsonl")])
        assert summary["steps"] == 5
    assert runs[0] == runs[1] and len([x for x in runs[0] if x is not None]) == 5


def test_a_runs_own_train_config_toml_repeats_and_resumes_it(prepared, tmp_path, capsys):
    """`--config OUT/train_config.toml` is the way to repeat or resume a run without retyping its flags (a resume
    refuses other settings). Its [model] table, written from the config's to_dict, held vocab_size (a TypeError
    against the data's) and, since configs carry transformers' derived keys, label2id and model_type (refused as
    unknown fields)."""
    out = tmp_path / "run"
    assert litebert_main(["pretrain", "--config", model_toml(tmp_path / "m.toml"), "--data", str(prepared / "data"),
                          "--held-out", "64", "--max-steps", "2", "--batch-size", "8", "--warmup-steps", "1",
                          "--out-dir", str(out), "--no-progress"]) == 0
    recorded = out / "train_config.toml"
    assert litebert_main(["pretrain", "--config", str(recorded), "--resume", "--max-steps", "3"]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    assert litebert_main(["pretrain", "--config", str(recorded), "--out-dir", str(tmp_path / "again")]) == 0
    capsys.readouterr()
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(re.sub(r"(?m)^vocab_size = \d+$", "vocab_size = 7", recorded.read_text()))
    assert litebert_main(["pretrain", "--config", str(wrong), "--out-dir", str(tmp_path / "w")]) == 2
    assert "[model] vocab_size 7 is not the data's tokenizer's 1000" in capsys.readouterr().err


def test_a_resume_with_another_dropout_is_refused(prepared, tmp_path):
    """Only [pretrain] and [train] were compared on resume: another [model] dropout went on silently, and the
    run's record then said the new rate for its whole length."""
    def run(steps, dropout, resume=False):
        cfg = TrainConfig(optimizer="lamb", lr=1e-2, batch_size=8, max_steps=steps, warmup_steps=1, save_every=1,
                          out_dir=str(tmp_path / "run"), progress=False, resume=resume)
        return pretrain(PretrainConfig(data=str(prepared / "data"), held_out=64), cfg,
                        {**TINY, "hidden_dropout_prob": dropout})
    run(1, 0.0)
    with pytest.raises(ConfigError, match=r"model.hidden_dropout_prob 0.5 \(was 0.0\)"):
        run(2, 0.5, resume=True)
    assert run(2, 0.0, resume=True)["steps"] == 2


def test_a_resume_reads_data_prepared_again_with_other_workers_but_refuses_other_examples(prepared, tmp_path):
    """The data fingerprint hashed all of meta.json, the workers and the shard layout too: the same corpus prepared
    again with 2 workers and smaller shards (the same examples in the same order) was refused as other data.
    Other chunks (--chunk-chars) cut other examples: still refused. A checkpoint that recorded the older
    fingerprint resumes on the same data, and is refused on other examples as before."""
    data = tmp_path / "data"

    def prep(**kw):
        prepare(None, str(data), str(prepared / "tok"), max_seq_length=32, progress=False, **{"num_workers": 1, **kw})
        return PretrainDataset(str(data))

    def run(steps, out="run"):
        cfg = TrainConfig(optimizer="lamb", lr=1e-2, batch_size=8, max_steps=steps, warmup_steps=1, save_every=1,
                          out_dir=str(tmp_path / out), progress=False, resume=steps > 1)
        return pretrain(PretrainConfig(data=str(data), held_out=64), cfg, TINY)

    first = prep()
    examples = [first[i] for i in range(len(first))]
    run(1)
    again = prep(num_workers=2, shard_size=500)
    assert len(again.shards) > 1 and len(again) == len(examples)
    assert all(all(np.array_equal(again[i][k], e[k]) for k in e) for i, e in enumerate(examples))
    assert run(2)["steps"] == 2
    prep(num_workers=2, shard_size=500, chunk_chars=1 << 16)
    with pytest.raises(CheckpointError, match="the data differs"):
        run(3)

    # a checkpoint of the older fingerprint (its record rewritten as such a run wrote it)
    meta = prep().meta
    run(1, "old")
    path = tmp_path / "old" / "step_1"
    state = torch.load(path / "train_state.pt", weights_only=True)
    state["record"]["identity"]["data"] = prerelease.meta_fingerprint(meta, state["record"]["identity"]["data"][
        "train_examples"])
    torch.save(state, path / "train_state.pt")
    marker = json.loads((path / "COMPLETE").read_text())
    written = (path / "train_state.pt").read_bytes()
    marker["files"]["train_state.pt"] = {"size": len(written), "sha256": hashlib.sha256(written).hexdigest()}
    (path / "COMPLETE").write_text(json.dumps(marker))
    assert run(2, "old")["steps"] == 2
    shutil.rmtree(tmp_path / "old" / "step_2")
    prep(chunk_chars=1 << 16)
    with pytest.raises(CheckpointError, match=r"the data differs \(meta_sha256: "):
        run(2, "old")


def _pretrain_cmd(prepared, out, toml, *extra):
    return [sys.executable, "-m", "litebert.cli", "pretrain", "--config", toml, "--data", str(prepared / "data"),
            "--held-out", "64", "--max-steps", "16", "--batch-size", "8", "--micro-batch-size", "4",
            "--save-every", "1", "--keep-last", "2", "--optimizer", "lamb", "--lr", "5e-3", "--out-dir", str(out),
            "--no-progress", *extra]


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_resumes_bit_identical(prepared, tmp_path):
    """Kill -9 a run that checkpoints every step (writes are a large share of its time) several times, resume
    each time; the final parameters equal an uninterrupted run's, bit for bit."""
    toml = model_toml(tmp_path / "m.toml")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(_pretrain_cmd(prepared, tmp_path / "straight", toml), check=True, env=env, capture_output=True)

    out = tmp_path / "killed"
    kills = 0
    for delay in (1.5, 2.5, 3.5):
        cmd = _pretrain_cmd(prepared, out, toml, *(["--resume"] if kills else []))
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    final = subprocess.run(_pretrain_cmd(prepared, out, toml, "--resume"), env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr[-3000:]
    assert kills >= 1
    assert not [p for p in os.listdir(out) if p.startswith(".tmp")]
    a = AlbertForPreTraining.from_pretrained(tmp_path / "straight" / "step_16").state_dict()
    b = AlbertForPreTraining.from_pretrained(out / "step_16").state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_held_out_examples_share_no_document_with_training(prepared, tmp_path):
    from litebert.pretrain import held_out_start
    prepare(None, str(tmp_path / "d3"), str(prepared / "tok"), max_seq_length=32, dupe_factor=3, num_workers=1,
            progress=False)
    data = PretrainDataset(str(tmp_path / "d3"))
    docs = data.document_ids()
    assert (docs[1:] >= docs[:-1]).all()  # stored document by document, all copies together
    cut = held_out_start(data, 100)
    assert len(data) - cut >= 100
    assert not set(docs[:cut]) & set(docs[cut:])


def test_a_continuation_at_another_length_holds_out_the_same_documents(prepared, tmp_path):
    """The demo's second phase (seq 128 after seq 64) must score only documents the first phase never saw."""
    from litebert.pretrain import held_out_cut, held_out_start
    short = PretrainDataset(str(prepared / "data"))
    prepare(None, str(tmp_path / "long"), str(prepared / "tok"), max_seq_length=64, num_workers=1, progress=False)
    long = PretrainDataset(str(tmp_path / "long"))
    assert len(long) != len(short)
    cut = held_out_cut(PretrainConfig(data=str(tmp_path / "long"), held_out=100,
                                      held_out_from=str(prepared / "data")), long)
    short_docs, long_docs = short.document_ids(), long.document_ids()
    held_short = set(short_docs[held_out_start(short, 100):])
    assert cut == held_out_start(long, len(long) - cut)  # on a document boundary
    assert set(long_docs[cut:]) <= held_short and min(long_docs[cut:]) == min(held_short)
    assert not set(long_docs[:cut]) & held_short  # phase 2 trains on no document phase 1 holds out


def test_held_out_from_refuses_unrelated_data(prepared, tmp_path):
    from litebert.pretrain import held_out_cut
    train_tokenizer(None, str(tmp_path / "tok2"), vocab_size=900)
    prepare(None, str(tmp_path / "other"), str(tmp_path / "tok2"), max_seq_length=32, num_workers=1, progress=False)
    data = PretrainDataset(str(prepared / "data"))
    with pytest.raises(ValueError, match="another tokenizer"):
        held_out_cut(PretrainConfig(data=str(prepared / "data"), held_out_from=str(tmp_path / "other")), data)


def test_an_mlm_only_checkpoint_of_the_old_layout_resumes_bit_identical(prepared, tmp_path, capsys):
    """Before the named-state layout and the frozen pooler and SOP head (which take no part in an MLM-only loss),
    checkpoints had no run record and their optimizer listed those two heads: resuming one raised torch's
    "loaded state dict contains a parameter group that doesn't match the size of optimizer's group". Such a
    checkpoint is made here from a current one (checked by hand against one the old code wrote: the same keys,
    and the resumed run bit-identical to the old code's own uninterrupted run); it resumes, matching the
    optimizer state by parameter name, to the uninterrupted run's weights."""
    from safetensors.torch import load_file
    toml = model_toml(tmp_path / "m.toml")

    def argv(out, *extra):
        return ["pretrain", "--config", toml, "--data", str(prepared / "data"), "--held-out", "64", "--objective",
                "mlm", "--max-steps", "4", "--save-every", "2", "--batch-size", "8", "--optimizer", "lamb",
                "--lr", "5e-3", "--out-dir", str(out), "--no-progress", *extra]

    assert litebert_main(argv(tmp_path / "whole")) == 0
    old = tmp_path / "old"
    (old / "step_2").mkdir(parents=True)
    for f in (tmp_path / "whole" / "step_2").iterdir():
        (old / "step_2" / f.name).write_bytes(f.read_bytes())
    state = torch.load(old / "step_2" / "train_state.pt", weights_only=True)
    del state["record"]  # the old layout: no run record (no untrained evaluation, no identity)
    names = [n for n, _ in AlbertForPreTraining(AlbertConfig(vocab_size=1000, **TINY)).named_parameters()
             if n.startswith(("albert.pooler", "sop_classifier"))]
    groups = state["optimizer"]["param_groups"]
    index = sum(len(g["params"]) for g in groups)
    for name in names:  # the old optimizer held the heads too (biases in the group without weight decay)
        group = groups[1] if name.endswith("bias") else groups[0]
        group["param_names"].append(name)
        group["params"].append(index)
        index += 1
    torch.save(state, old / "step_2" / "train_state.pt")
    marker = json.loads((old / "step_2" / "COMPLETE").read_text())  # its file list: train_state.pt's new bytes
    data = (old / "step_2" / "train_state.pt").read_bytes()
    marker["files"]["train_state.pt"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (old / "step_2" / "COMPLETE").write_text(json.dumps(marker))
    capsys.readouterr()
    assert litebert_main(argv(old, "--resume")) == 0
    assert "untrained not recorded" in capsys.readouterr().out  # resumed: the initial weights were not seen
    a = load_file(tmp_path / "whole" / "step_4" / "model.safetensors")
    b = load_file(old / "step_4" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_pretrain_padding_free_learns_as_the_padded_run(prepared, tmp_path, monkeypatch):
    """`pretrain --padding-free` changes where the encoder computes, not what the run learns: on the CPU in fp32
    its losses and held-out evaluation equal the padded run's, and its batches (the corpus's short sequences and
    document ends pad them) did run padding-free."""
    import litebert.model as model_module
    taken = []
    real_unpad = model_module.unpad
    monkeypatch.setattr(model_module, "unpad", lambda *a: taken.append(1) or real_unpad(*a))

    def run(flag: str) -> list[float]:
        out = tmp_path / flag
        assert litebert_main(["pretrain", "--config", model_toml(tmp_path / "m.toml", hidden_dropout_prob=0.0,
                                                                 attention_probs_dropout_prob=0.0),
                              "--data", str(prepared / "data"), "--held-out", "64", "--max-steps", "4",
                              "--batch-size", "8", "--eval-every", "4", "--log-every", "1", "--optimizer", "adamw",
                              "--lr", "1e-3", "--out-dir", str(out), "--no-progress", flag]) == 0
        records = read_metrics(out / "metrics.jsonl")
        assert f"padding_free = {str(flag == '--padding-free').lower()}" in (out / "train_config.toml").read_text()
        return [r["loss"] for r in records if "loss" in r] + [r["eval_mlm_loss"] for r in records
                                                             if "eval_mlm_loss" in r]
    padded = run("--no-padding-free")
    assert not taken
    free = run("--padding-free")
    assert len(free) == 6 and len(taken) >= 4 and free == pytest.approx(padded, rel=1e-5)


def test_packed_batches_pad_to_the_data_length_and_list_their_real_tokens(prepared):
    """What `pretrain --padding-free --cuda-graphs` trains on: every batch padded to max_seq_length (a shape a graph
    keeps) with its real tokens' flat positions, their count rounded up past a multiple of that length (-1)."""
    from litebert.pretrain import Batches
    data = PretrainDataset(str(prepared / "data"))
    plain = Batches(data, seed=1, task="sop")(list(range(6)), 0)
    packed = Batches(data, seed=1, task="sop", packed=True)(list(range(6)), 0)
    mask, positions = packed["attention_mask"], packed["packed_positions"]
    assert mask.shape == (6, 32) and "packed_positions" not in plain
    n = int(mask.sum())
    assert positions.numel() % 32 == 0 and positions.numel() > n
    assert positions[:n].tolist() == mask.flatten().nonzero().squeeze(1).tolist() and (positions[n:] == -1).all()
    width = plain["input_ids"].shape[1]  # the same examples and masks, padded further
    assert torch.equal(packed["labels"][:, :width], plain["labels"]) and (packed["labels"][:, width:] == -100).all()


@pytest.mark.parametrize("compile_blocks", [False, True])
def test_compiled_blocks_under_cuda_graphs_get_padded_batches(prepared, tmp_path, monkeypatch, compile_blocks):
    """`--padding-free --cuda-graphs --compile` says it trains on padded batches (so the compiled blocks keep their
    shapes) and leaves the model's padding_free off, but the batches still carried packed_positions, which turn the
    padding-free encoder on by themselves and run every compiled block eagerly: --compile did nothing. The train
    step is stubbed (a CUDA graph needs a GPU): only what it is handed is read."""
    import litebert.pretrain as pretrain_module

    handed = {}

    class Handed(Exception):
        pass

    def stop_at_train(model, data, *args, **kwargs):
        handed.update(padding_free=model.albert.padding_free, batch=data.collate([0, 1], 0))
        raise Handed
    monkeypatch.setattr(pretrain_module, "train", stop_at_train)
    cfg = TrainConfig(batch_size=2, max_steps=1, cuda_graphs=True, compile=compile_blocks, device="cpu",
                      out_dir=str(tmp_path / "run"), progress=False)
    with pytest.raises(Handed):
        pretrain(PretrainConfig(data=str(prepared / "data"), held_out=64, padding_free=True), cfg, TINY)
    assert handed["padding_free"] is not compile_blocks
    assert ("packed_positions" in handed["batch"]) is not compile_blocks
