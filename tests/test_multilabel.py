"""Multi-label classification, added through its task family alone: reading label sets, the metrics, the
per-label thresholds, and a checkpoint transformers loads as a multi-label classifier with equal logits."""

from pathlib import Path

import numpy as np
import pytest
import torch

from litebert import tasks as T
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.heads import AlbertForSequenceClassification
from litebert.tasks import metrics as M
from litebert.tasks.families import FAMILIES, FeatureSettings
from litebert.tasks.features import collate
from litebert.tasks.fine_tuned import family_for_config

BUNDLED = Path(T.__file__).parents[1] / "data" / "novel_characters"
FAMILY = FAMILIES["multi_label"]


def test_label_sets_are_read_from_jsonl_lists_and_csv_cells(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"t": "x", "y": ["b", "a", "b"]}\n{"t": "z", "y": []}\n'
                                      '{"t": "w", "y": "a|c"}\n{"t": "v", "y": [1, true]}\n')
    rows = T.read_table(tmp_path / "a.jsonl", ["t"], "y", multi_label=True, errors="skip")
    assert [ex.label for ex in rows] == [["a", "b"], [], ["a", "c"]]
    assert "labels should be a list of strings" in rows.skipped[0]
    (tmp_path / "a.csv").write_text('t,y\n"x, y",a|b\nz,\n')
    assert [ex.label for ex in T.read_table(tmp_path / "a.csv", ["t"], "y", multi_label=True)] == [["a", "b"], []]
    with pytest.raises(T.DataError, match=r"a.csv:2: label\(s\) \['b'\] not among \['a'\]"):
        T.read_table(tmp_path / "a.csv", ["t"], "y", multi_label=True, labels=["a"])
    assert T.label_list(T.read_table(tmp_path / "a.csv", ["t"], "y", multi_label=True)) == ["a", "b"]


def test_metrics_by_hand():
    gold = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=bool)
    pred = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 1]], dtype=bool)
    scores = M.multi_label_scores(gold, pred)
    # micro: tp 3, fp 1, fn 1 -> 2*3 / (2*3 + 1 + 1); macro: labels F1 1, 1, 0; exact: row 2 only
    assert scores["micro_f1"] == pytest.approx(6 / 8)
    assert scores["macro_f1"] == pytest.approx(2 / 3)
    assert scores["exact_match"] == pytest.approx(1 / 3)


def test_thresholds_maximise_each_labels_f1_and_sit_between_scores():
    probs = np.array([[0.9, 0.2], [0.6, 0.1], [0.4, 0.3], [0.3, 0.05]])
    gold = np.array([[1, 0], [1, 0], [0, 0], [1, 0]], dtype=bool)
    thresholds = M.tune_thresholds(probs, gold)
    # label 0: top-2 (F1 0.8) ties with top-4 (F1 6/7 = 0.857): all four positive wins; below 0.3, above 0
    assert 0 < thresholds[0] < 0.3 and thresholds[1] == 0.5  # label 1 never present: left at 0.5
    f1_at = lambda t: M.multi_label_scores(gold[:, :1], probs[:, :1] >= t)["micro_f1"]  # noqa: E731
    assert f1_at(thresholds[0]) == max(f1_at(t) for t in np.linspace(0, 1, 101))


def test_scores_apply_a_given_calibration_and_tune_only_without_one():
    examples = [T.TextExample("0", "a", label=["x"]), T.TextExample("1", "b", label=[])]
    scores = [np.array([0.3, 0.1]), np.array([0.2, 0.4])]
    tuned = FAMILY.score(None, examples, [], scores, ["x", "y"], FeatureSettings())
    assert tuned.predictions == [["x"], []] and tuned.metrics["exact_match"] == 1.0
    assert tuned.calibration["labels"] == ["x", "y"] and len(tuned.calibration["thresholds"]) == 2
    fixed = FAMILY.score(None, examples, [], scores, ["x", "y"], FeatureSettings(),
                         calibration={"thresholds": [0.5, 0.5]})
    assert fixed.predictions == [[], []] and fixed.calibration == {} and fixed.metrics["exact_match"] == 0.5
    unlabelled = FAMILY.score(None, [T.TextExample("2", "c")], [], scores[:1], ["x", "y"], FeatureSettings(),
                              calibration={"thresholds": [0.25, 0.5]})
    assert unlabelled.metrics == {} and unlabelled.predictions == [["x"]]


def test_baselines_all_negative_and_label_prior():
    train = [T.TextExample(str(i), "t", label=["a"] if i % 4 == 0 else []) for i in range(8)]
    dev = [T.TextExample("d0", "t", label=["a"]), T.TextExample("d1", "t", label=[])]
    baseline = FAMILY.baseline(None, train, dev)
    assert baseline["all negative"] == {"micro_f1": 0.0, "macro_f1": 0.0, "exact_match": 0.5}
    assert set(baseline["label prior"]) == {"micro_f1", "macro_f1", "exact_match"}


def test_features_are_multi_hot_and_collate_as_floats():
    class Tok:
        cls_id, sep_id, pad_id = 2, 3, 0

        def encode(self, a, pair=None, max_length=None):
            return [2, 7, 8, 3][:max_length]

    feats = FAMILY.featurize([T.TextExample("0", "a", label=["c", "a"]), T.TextExample("1", "b", label=[])],
                             Tok(), ["a", "b", "c"], FeatureSettings(max_length=8))
    batch = collate(feats)
    assert batch["labels"].dtype == torch.float32
    assert batch["labels"].tolist() == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


def test_the_bundled_task_holds_exactly_the_characters_its_rule_names():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make", Path(__file__).parents[1] / "scripts" /
                                                  "make_novel_characters.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    train = T.read_task("novel_characters", BUNDLED, "train")
    assert len(train) == 5386 and sum(bool(ex.label) for ex in train) == 1430
    for ex in train:
        assert ex.label == make.characters_named(ex.id.split("/")[1], ex.text_a), ex.id
    assert make.characters_named("pride-and-prejudice", "Lizzy and Catherine met Darcy.") == ["Elizabeth Bennet",
                                                                                            "Mr. Darcy"]


def test_checkpoint_is_a_transformers_multi_label_classifier(tmp_path):
    transformers = pytest.importorskip("transformers")
    labels = ["a", "b", "c"]
    config = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = AlbertForSequenceClassification(config.replace(**FAMILY.config_overrides(labels))).eval()
    model.save_pretrained(tmp_path)
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path).eval()
    assert theirs.config.problem_type == "multi_label_classification"
    assert family_for_config(AlbertConfig.load(tmp_path)) is FAMILY
    one_tag = config.replace(**FAMILY.config_overrides(["a"]), architectures=["AlbertForSequenceClassification"])
    assert family_for_config(one_tag) is FAMILY  # one label, still multi-label (not regression)
    ids = torch.randint(5, 100, (3, 12))
    target = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    with torch.no_grad():
        a, b = model(ids, labels=target), theirs(ids, labels=target)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=0)  # both BCE-with-logits over the label set


def passage_properties(text: str, characters: list[str]) -> list[str]:
    """Three labels any passage has or lacks by a stated rule: it names a main character, it holds dialogue,
    it asks a question. Frequent enough (26-48% of passages each) for a tiny model to learn in a test."""
    return (["character"] if characters else []) + (["dialogue"] if '"' in text else []) + \
        (["question"] if "?" in text else [])


@pytest.mark.slow
def test_multi_label_fine_tunes_beats_both_baselines_evaluates_predicts_and_loads_in_transformers(tmp_path, capsys):
    import json

    from test_finetune import tiny_model_dir

    transformers = pytest.importorskip("transformers")
    data = tmp_path / "data"
    data.mkdir()
    for split, limit in (("train", None), ("dev", 300), ("test", 200)):
        rows = T.read_table(BUNDLED / f"{split}.jsonl.gz", ["text"], "characters", multi_label=True)[:limit]
        with open(data / f"{split}.jsonl", "w") as f:
            for ex in rows:
                f.write(json.dumps({"id": ex.id, "text": ex.text_a,
                                    "labels": passage_properties(ex.text_a, ex.label)}) + "\n")
    model = tiny_model_dir(tmp_path, hidden_size=64)
    table = ["--task", "table", "--multi-label", "--text-columns", "text", "--label-column", "labels",
             "--data-dir", str(data)]
    out = tmp_path / "run"
    assert litebert_main(["finetune", "--model", str(model), *table, "--max-length", "48", "--from-scratch",
                          "--optimizer", "adamw", "--lr", "2e-3", "--batch-size", "16", "--max-steps", "150",
                          "--warmup-steps", "15", "--eval-every", "75", "--out-dir", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    best, baseline = summary["best"], summary["baseline"]
    assert summary["primary_metric"] == "micro_f1"
    for rule in ("all negative", "label prior"):  # the primary metric and macro-F1 beat both rules clearly
        assert best["micro_f1"] > baseline[rule]["micro_f1"] + 0.1, (best, baseline)
        assert best["macro_f1"] > baseline[rule]["macro_f1"] + 0.1, (best, baseline)
    calibration = json.loads((out / "best" / "calibration.json").read_text())
    assert calibration["split"] == "dev" and len(calibration["thresholds"]) == 3
    capsys.readouterr()
    assert litebert_main(["evaluate", "--model", str(out / "best"), *table, "--split", "test"]) == 0
    test_metrics = json.loads(capsys.readouterr().out)
    assert test_metrics["micro_f1"] > 0.3 and set(test_metrics) >= {"micro_f1", "macro_f1", "exact_match"}
    assert litebert_main(["predict", "--model", str(out / "best"), *table, "--split", "test",
                          "--out", str(tmp_path / "pred.jsonl")]) == 0
    predictions = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert len(predictions) == 200 and all(set(p["prediction"]) <= {"character", "dialogue", "question"}
                                           for p in predictions)
    ours = AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(out / "best").eval()
    assert theirs.config.problem_type == "multi_label_classification"
    ids = torch.randint(5, ours.config.vocab_size, (4, 24))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, theirs(ids).logits, atol=1e-5, rtol=0)
