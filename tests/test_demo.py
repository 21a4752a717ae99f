"""The main job: the demo runs end to end, and pretraining really learns against the baselines it computes."""

import json
import os

import pytest

from litebert.cli import main as litebert_main
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.demo import (
    DEMO_MARKER,
    FEW_LABELS,
    QUICK_FEW_LABEL_SEEDS,
    TASK_DIR,
    TASK_MAX_LENGTH,
    UNSEEN_SENTENCES,
    start_clean,
)
from litebert.errors import ConfigError
from litebert.finetune import FinetuneConfig, evaluate_checkpoint
from litebert.pretrain import PretrainConfig, pretrain
from litebert.training.train_config import TrainConfig


@pytest.mark.slow
def test_quick_demo_runs_every_stage_and_prints_a_summary(tmp_path, capsys):
    assert litebert_main(["demo", "--quick", "--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    for line in ("held-out MLM accuracy", "held-out SOP accuracy", "from the pretrained model",
                 "from random initialisation", "majority class", "pretraining curves"):
        assert line in out, line
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["pretrain"]["steps"] == 40 and summary["pretrain"]["seq_length"] == 64
    # The second phase continues the first's model on 128-token pairs and scores the same held-out documents.
    assert summary["pretrain128"]["steps"] == 10 and summary["pretrain128"]["seq_length"] == 128
    assert summary["pretrain128"]["init_from"] == summary["pretrain"]["checkpoint"]
    assert "continued 0." in out and "at start" in out
    assert "--quick: a smoke run of every stage" in out and summary["quick"] is True  # its numbers say nothing
    assert set(summary["finetune"]) == set(summary["few_labels"]) == {"pretrained", "from_scratch"}
    # The few-label point: the same two inits on the task's first 54 training passages, the same dev split,
    # QUICK_FEW_LABEL_SEEDS seeds each (FEW_LABEL_SEEDS in a whole demo), their mean and every seed's score printed.
    few, full = summary["few_labels"], summary["finetune"]
    for name, runs in few.items():
        assert [r["from_scratch"] for r in runs] == [name == "from_scratch"] * QUICK_FEW_LABEL_SEEDS
        assert {(r["examples"]["train"], r["examples"]["dev"]) for r in runs} == {(FEW_LABELS, 746)}
        scores = [100 * r["best"]["accuracy"] for r in runs]
        assert f"{sum(scores) / len(scores):.1f}% ± " in out and ", ".join(f"{x:.1f}" for x in scores) in out
    assert full["pretrained"]["examples"]["dev"] == 746 and "1% of the labels" in out
    assert (tmp_path / "demo" / "finetune_pretrained" / "best" / "model.safetensors").exists()

    # It ends by using what it made, through the pipelines: masks filled in sentences no corpus holds, the
    # test split classified (exactly as `litebert evaluate` predicts it), and the command that serves it.
    use, best = summary["use"], summary["finetune"]["pretrained"]["best_dir"]
    assert [s["text"] for s in use["fill_mask"]] == [text for text, _ in UNSEEN_SENTENCES]
    for s in use["fill_mask"]:
        assert len(s["top"]) == 3 and s["top"][0]["score"] >= s["top"][1]["score"] >= s["top"][2]["score"]
        assert 1 <= s["rank"] <= use["vocab_size"] and 1 <= s["rank_alone"] <= use["vocab_size"], s
        assert f"{s['hidden']!r} ranks {s['rank']} (alone: {s['rank_alone']})" in out
    cfg = FinetuneConfig(model=best, task="novel_authorship", data_dir=TASK_DIR, max_length=TASK_MAX_LENGTH)
    scored, _, examples = evaluate_checkpoint(best, cfg, "test")
    assert use["predictions"] == scored.predictions and use["test"]["passages"] == len(examples) == 767
    assert use["test"]["accuracy"] == pytest.approx(scored.metrics["accuracy"])
    assert sorted(s["author"] for s in use["shown"]) == sorted(set(e.label for e in examples))
    assert f"767 test passages: accuracy {scored.metrics['accuracy']:.1%}" in out
    assert f"serve the classifier:  litebert serve --model {best}" in out


@pytest.mark.slow
def test_pretraining_learns_beyond_the_commonest_token_and_unigram_baselines(tmp_path):
    """600 steps of the demo's architecture on the bundled Persuasion: held-out (unseen chapters) MLM beats
    always predicting the commonest masked token, and its loss beats the unigram distribution's."""
    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=4000)
    prepare(None, str(tmp_path / "data"), str(tmp_path / "tok"), max_seq_length=64, dupe_factor=5, num_workers=1,
            progress=False)
    model = dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=512, max_position_embeddings=64)
    cfg = TrainConfig(optimizer="adamw", lr=2e-3, batch_size=32, max_steps=600, warmup_steps=60, log_every=50,
                      out_dir=str(tmp_path / "run"), progress=False)
    summary = pretrain(PretrainConfig(data=str(tmp_path / "data"), held_out=600, eval_batch_size=256), cfg, model)
    final, base = summary["final"], summary["baselines"]
    assert final["mlm_acc"] > 1.3 * base["majority_token_acc"], (final, base)
    assert final["mlm_loss"] < base["unigram_loss"] - 0.2, (final, base)
    assert final["mlm_loss"] < summary["untrained"]["mlm_loss"] - 2.0


def test_the_demo_replaces_only_a_previous_demo_run(tmp_path, capsys, monkeypatch):
    """--out pointing at someone's files must not wipe them; a directory the demo made is started afresh."""
    precious = tmp_path / "runs" / "mine" / "notes.txt"
    precious.parent.mkdir(parents=True)
    precious.write_text("x")
    assert litebert_main(["demo", "--quick", "--out", str(tmp_path / "runs")]) == 2
    assert "it holds mine" in capsys.readouterr().err and precious.read_text() == "x"
    (tmp_path / "file").write_text("y")
    with pytest.raises(ConfigError, match="is a file"):
        start_clean(str(tmp_path / "file"))

    demo = tmp_path / "demo"
    start_clean(str(demo))  # new: created with its marker
    (demo / "tokenizer").mkdir()
    start_clean(str(demo))  # a demo's own directory: replaced
    assert sorted(p.name for p in demo.iterdir()) == [DEMO_MARKER]
    legacy = tmp_path / "legacy"  # a demo from before the marker: its summary and nothing foreign
    (legacy / "data").mkdir(parents=True)
    (legacy / "summary.json").write_text("{}")
    start_clean(str(legacy))
    assert sorted(p.name for p in legacy.iterdir()) == [DEMO_MARKER]
    (legacy / "pretrain").mkdir()  # demo-like entries without marker or summary: not known to be a demo's
    os.remove(legacy / DEMO_MARKER)
    with pytest.raises(ConfigError, match="not a previous demo run"):
        start_clean(str(legacy))

    # A demo run once into a project directory (--out .) marks it; later work put there is never deleted.
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    start_clean(".")
    (project / "pretrain").mkdir()
    (project / "thesis.tex").write_text("z")
    with pytest.raises(ConfigError, match="it holds thesis.tex"):
        start_clean(".")
    assert (project / "thesis.tex").read_text() == "z" and (project / "pretrain").is_dir()
    os.remove(project / "thesis.tex")
    start_clean(".")  # only the demo's own entries left: they go, the directory stays
    assert project.is_dir() and sorted(p.name for p in project.iterdir()) == [DEMO_MARKER]
