"""Ensembles: the average of the members' family scores (checked against a hand computation for every family),
an ensemble of one is its model, greedy selection on dev, `litebert ensemble`, and checkpoint averaging."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from paths import SHARED_DATA

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.ensemble import Ensemble, average_checkpoints, build_ensemble, greedy_select
from litebert.finetune import FinetuneConfig, evaluate_checkpoint
from litebert.tasks import TASKS
from litebert.tasks.ensembles import average_scores
from litebert.tasks.families import FAMILIES
from litebert.tasks.inference import model_scores
from litebert.training.checkpoint import save_checkpoint
from litebert.weights import read_state_dict

TINY = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
LABELS = ["a", "b", "c"]


def tiny_head(kind: str, seed: int):
    family = FAMILIES[kind]
    torch.manual_seed(seed)
    return family.head(TINY.replace(**family.config_overrides(None if kind in ("regression", "multiple_choice", "qa")
                                                              else LABELS))).eval()


def features(kind: str, lengths=(5, 9, 3)):
    """Hand-made features of different lengths (multiple choice: 2 options each)."""
    rng = np.random.default_rng(0)
    out = []
    for n in lengths:
        ids = [int(x) for x in rng.integers(5, TINY.vocab_size, n)]
        if kind == "multiple_choice":
            out.append(SimpleNamespace(input_ids=[ids, ids[::-1]], token_type_ids=[[0] * n, [1] * n]))
        else:
            out.append(SimpleNamespace(input_ids=ids, token_type_ids=[0] * n))
    return out


def by_hand(model, kind: str, feature) -> np.ndarray:
    """What the family averages for one feature, computed from one unpadded forward pass."""
    ids = torch.tensor([feature.input_ids])
    with torch.no_grad():
        out = model(ids, token_type_ids=torch.tensor([feature.token_type_ids]))
    if kind == "qa":
        return torch.stack([out.start_logits[0], out.end_logits[0]]).numpy()  # (2, T)
    logits = out.logits[0]
    if kind == "regression":
        return logits.numpy()
    if kind == "multi_label":
        return torch.sigmoid(logits).numpy()
    return torch.softmax(logits, -1).numpy()  # classes, options, or (T, tags)


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_the_ensemble_averages_what_each_family_averages(kind):
    members = [tiny_head(kind, seed) for seed in (1, 2, 3)]
    feats = features(kind)
    family = FAMILIES[kind]
    got = Ensemble(members).scores(family, feats, batch_size=2, pad_id=0)  # batches pad: the hand path does not
    for j, f in enumerate(feats):
        expected = np.mean([by_hand(m, kind, f) for m in members], axis=0)
        np.testing.assert_allclose(got[j], expected, atol=1e-5, rtol=0)
    weighted = Ensemble(members, weights=[2, 1, 1]).scores(family, feats, batch_size=3)
    for j, f in enumerate(feats):
        hand = [by_hand(m, kind, f) for m in members]
        np.testing.assert_allclose(weighted[j], (2 * hand[0] + hand[1] + hand[2]) / 4, atol=1e-5, rtol=0)


def test_an_ensemble_of_one_is_its_model_exactly():
    model = tiny_head("qa", 0)
    feats = features("qa")
    alone = model_scores(model, FAMILIES["qa"], feats, 2, 0)
    for a, b in zip(Ensemble([model]).scores(FAMILIES["qa"], feats, batch_size=2), alone):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_average_scores_refuses_members_that_do_not_line_up():
    with pytest.raises(ValueError, match="numbers of features"):
        average_scores([[np.zeros(2)], [np.zeros(2), np.zeros(2)]])
    with pytest.raises(ValueError, match="shape"):
        average_scores([[np.zeros(2)], [np.zeros(3)]])


def test_greedy_selection_starts_from_the_best_and_adds_while_dev_improves():
    candidates = {"a": [np.array([1.0])], "b": [np.array([0.0])], "c": [np.array([0.6])]}

    def metric(scores):  # closeness of the average to 0.35
        return -abs(float(scores[0][0]) - 0.35)

    chosen, steps = greedy_select(candidates, metric)
    assert chosen == ["c", "b"]  # c alone: 0.6; c+b: 0.3 (better); c+b+a: 0.53 (worse): stop
    assert [s["added"] for s in steps] == ["c", "b"] and steps[-1]["dev"] == pytest.approx(-0.05)


# -- real members: random classification heads on the tiny pretrained model -------------------------------------

def tiny_task(root: Path, task: str = "novel_authorship", n: int = 24) -> Path:
    directory = root / task
    directory.mkdir()
    for split in ("train", "dev", "test"):
        lines = (SHARED_DATA / "tasks" / task / f"{split}.jsonl").read_text().splitlines()[:n]
        (directory / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """Three 'fine-tuned' novel_authorship models (random heads on one tiny pretrained body) and the task."""
    from test_finetune import tiny_model_dir

    from litebert.tokenizer import Tokenizer
    root = tmp_path_factory.mktemp("ens")
    body = tiny_model_dir(root)
    family = FAMILIES["classification"]
    labels = list(TASKS["novel_authorship"].labels)
    dirs = []
    for seed in range(3):
        torch.manual_seed(seed)
        model = family.head.from_pretrained(body, **family.config_overrides(labels))
        model.save_pretrained(root / f"m{seed}")
        Tokenizer.from_pretrained(str(body)).save_pretrained(str(root / f"m{seed}"))
        dirs.append(str(root / f"m{seed}"))
    return SimpleNamespace(root=root, body=body, dirs=dirs, data=tiny_task(root))


def test_an_ensemble_of_one_scores_as_the_model_on_dev_and_test(members, tmp_path):
    cfg = FinetuneConfig(task="novel_authorship", data_dir=str(members.data), max_length=32, eval_batch_size=8)
    report = build_ensemble(cfg, members.dirs[:1], split="test", out=tmp_path / "one", echo=lambda *_: None)
    alone_dev = evaluate_checkpoint(members.dirs[0], cfg, "dev")[0]
    alone_test = evaluate_checkpoint(members.dirs[0], cfg, "test")[0]
    assert report["dev"] == alone_dev.metrics and report["test"] == alone_test.metrics
    assert report["members"] == [{"dir": members.dirs[0], "weight": 1.0, "dev": alone_dev.metrics["accuracy"],
                                  "test": alone_test.metrics["accuracy"]}]
    written = [json.loads(line)["prediction"] for line in (tmp_path / "one" / "test_predictions.jsonl").open()]
    assert written == alone_test.predictions


def test_the_ensemble_cli_selects_on_dev_scores_test_once_and_records_members(members, tmp_path, capsys):
    grid = tmp_path / "grid"  # a grid's record, as litebert finetune --seeds writes it: the runs' dirs hold best/
    runs = []
    for i, d in enumerate(members.dirs):
        (grid / f"seed={i}").mkdir(parents=True)
        (grid / f"seed={i}" / "best").symlink_to(d)
        runs.append({"dir": str(grid / f"seed={i}"), "dev": 0.5 - i / 10, "diverged": None})
    runs.append({"dir": str(grid / "nan"), "dev": None, "diverged": "non-finite loss"})
    (grid / "grid.json").write_text(json.dumps({"runs": runs}))
    out = tmp_path / "ens"
    assert litebert_main(["ensemble", "--from-grid", str(grid), "--top", "3", "--task", "novel_authorship",
                          "--data-dir", str(members.data), "--max-length", "32", "--out", str(out)]) == 0
    report = json.loads((out / "ensemble.json").read_text())
    assert [c["dir"] for c in report["candidates"]] == [r["dir"] + "/best" for r in runs[:3]]
    best_single = max(c["dev"] for c in report["candidates"])
    assert report["dev"]["accuracy"] >= best_single  # greedy on dev never ends below its start
    assert report["steps"][0]["dev"] == best_single and len(report["members"]) == len(report["steps"])
    assert sum(m["weight"] for m in report["members"]) == pytest.approx(1.0)
    assert "accuracy" in report["test"] and all("test" in m for m in report["members"])
    single = report["single"]  # what the ensemble is compared with: the best run on dev, scored once on test
    assert single["dev"]["best"] == best_single and isinstance(single["test"]["best_on_dev"], float)
    assert len((out / "test_predictions.jsonl").read_text().splitlines()) == 24
    # the recorded ensemble through the Python API gives the scores the CLI scored
    ens = Ensemble.load(out)
    assert len(ens.models) == len(report["members"])


def test_checkpoint_averaging_is_the_mean_of_the_last_k_weights(members, tmp_path):
    run = tmp_path / "run"
    for step, d in enumerate(members.dirs, 1):
        model = FAMILIES["classification"].head.from_pretrained(d)
        save_checkpoint(run, step, model, {}, tokenizer=d)
    out = average_checkpoints(run, 2, tmp_path / "avg")
    got = read_state_dict(str(out))[0]
    a, b = read_state_dict(members.dirs[1])[0], read_state_dict(members.dirs[2])[0]
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, (a[name] + b[name]) / 2)
    cfg = FinetuneConfig(task="novel_authorship", data_dir=str(members.data), max_length=32)
    assert evaluate_checkpoint(str(out), cfg, "dev")[0].metrics["accuracy"] >= 0  # a complete model directory
    with pytest.raises(ValueError, match="cannot average the last 4"):
        average_checkpoints(run, 4, tmp_path / "avg4")


def test_averaged_members_of_one_name_stay_two_members_and_the_task_is_required(members, tmp_path, capsys):
    """--average-last wrote each member to averaged/<its dir's name>: runs/seed1/ft and runs/seed2/ft overwrote
    each other and the ensemble silently had one member. Without --task the data was read with another task's
    reader."""
    runs = []
    for seed, d in enumerate(members.dirs[:2]):
        run = tmp_path / "runs" / f"seed{seed}" / "ft"
        for step in (1, 2):
            save_checkpoint(run, step, FAMILIES["classification"].head.from_pretrained(d), {}, tokenizer=d)
        runs.append(str(run))
    common = ["--data-dir", str(members.data), "--max-length", "32", "--no-select", "--split", "none"]
    out = tmp_path / "ens"
    assert litebert_main(["ensemble", "--models", *runs, "--average-last", "2", "--task", "novel_authorship",
                          *common, "--out", str(out)]) == 0
    assert len(json.loads((out / "ensemble.json").read_text())["members"]) == 2
    assert litebert_main(["ensemble", "--models", *runs, *common, "--out", str(tmp_path / "e2")]) == 2
    assert "--task is required with --data-dir" in capsys.readouterr().err


def test_an_ensemble_directory_is_a_pipeline_model_averaging_its_members(members, tmp_path):
    """litebert.pipeline(model=<litebert ensemble --out DIR>): every member runs, their class probabilities
    are averaged with the recorded weights, as the ensemble verb scored them."""
    import litebert
    out = tmp_path / "ens"
    (out).mkdir()
    weights = [0.5, 0.3, 0.2]
    (out / "ensemble.json").write_text(json.dumps({"members": [{"dir": d, "weight": w}
                                                               for d, w in zip(members.dirs, weights)]}))
    texts = [json.loads(line)["text"] for line in (members.data / "dev.jsonl").read_text().splitlines()[:6]]
    ensemble = litebert.pipeline(model=out, top_k=None)
    assert ensemble.task == "text-classification" and len(ensemble.backends) == 3
    singles = [litebert.pipeline(model=d, top_k=None)(texts) for d in members.dirs]
    for i, answer in enumerate(ensemble(texts)):
        expected = {label: sum(w * next(x["score"] for x in single[i] if x["label"] == label)
                               for w, single in zip(weights, singles)) for label in TASKS["novel_authorship"].labels}
        assert {x["label"]: x["score"] for x in answer} == pytest.approx(expected, abs=1e-6)
        assert answer[0]["label"] == max(expected, key=expected.get)
    other = tmp_path / "other"  # a member with other labels cannot be averaged: refused by name
    from litebert.config import AlbertConfig as Config
    shutil.copytree(members.dirs[0], other)
    config = Config.load(other)
    config.id2label = {i: f"L{i}" for i in range(config.num_labels)}
    config.save(other)
    (out / "ensemble.json").write_text(json.dumps({"members": [{"dir": members.dirs[0], "weight": 1},
                                                               {"dir": str(other), "weight": 1}]}))
    with pytest.raises(ValueError, match="members must share their labels"):
        litebert.pipeline(model=out)


def test_an_ensemble_built_with_relative_paths_loads_from_another_directory(members, tmp_path, monkeypatch):
    """ensemble.json recorded each member as typed, relative to the directory the CLI ran in: loaded from any
    other (litebert serve, pipeline(model=...)) a member was 'no such directory', or a name looked up on the Hub."""
    import litebert
    work = tmp_path / "work"
    shutil.copytree(members.root / "m0", work / "m0")
    shutil.copytree(members.root / "m1", work / "m1")
    monkeypatch.chdir(work)
    assert litebert_main(["ensemble", "--models", "m0", "m1", "--task", "novel_authorship", "--data-dir",
                          str(members.data), "--max-length", "32", "--no-select", "--split", "none",
                          "--out", "ens"]) == 0
    monkeypatch.chdir(tmp_path)
    assert len(Ensemble.load(work / "ens").models) == 2
    assert len(litebert.pipeline(model=str(work / "ens")).backends) == 2
