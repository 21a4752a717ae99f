"""Grids of fine-tuning runs (`litebert finetune --seeds ... --lr ...`): the command line, a tiny grid that runs
and resumes, diverged runs, the summary over seeds, and early stopping."""

import json
import os
import shutil

import pytest
from test_ensemble import tiny_task
from test_finetune import tiny_model_dir

import litebert.training.sweep as sweep
from litebert.cli import main as litebert_main
from litebert.errors import ConfigError
from litebert.finetune import FinetuneConfig, finetune
from litebert.tasks.loading import evaluate_checkpoint
from litebert.training.sweep import diverged, summarize, sweepable_fields, trivial_score
from litebert.training.train_config import TrainConfig


def split_argv(argv):
    return sweep.split_argv(argv, sweepable_fields(FinetuneConfig, TrainConfig))


def test_the_command_line_names_its_grid():
    grid = split_argv(["--model", "m", "--lr", "1e-5", "2e-5", "--seeds", "1", "2", "3", "--max-steps", "9",
                       "--dropout", "0", "0.1", "--score-test"])
    assert grid.axes == {"lr": ["1e-5", "2e-5"], "dropout": ["0", "0.1"]} and grid.seeds == ["1", "2", "3"]
    assert grid.base == ["--model", "m", "--lr", "1e-5", "--max-steps", "9", "--dropout", "0"] and grid.score_test
    assert split_argv(["--model", "m", "--lr", "1e-5", "--seed", "3"]) is None  # one run
    assert split_argv(["--seed", "1", "2"]).seeds == ["1", "2"]
    assert split_argv(["--text-columns", "a", "b"]) is None  # a list option is not swept
    assert sweep.run_name({"lr": 1e-05, "batch_size": 8, "dropout": None, "seed": 2}) == \
        "lr=1e-05_batch_size=8_dropout=none_seed=2"


def test_flags_written_with_an_equals_sign_sweep_as_their_spaced_form():
    """argparse reads `--lr=1e-5` as `--lr 1e-5`: so does the grid, and a first value like -1 stays the flag's."""
    grid = split_argv(["--seeds=1", "2", "--lr=1e-5", "2e-5", "--warmup-steps=-1", "0", "--max-steps=9"])
    assert grid.seeds == ["1", "2"] and grid.axes == {"lr": ["1e-5", "2e-5"], "warmup_steps": ["-1", "0"]}
    assert grid.base == ["--lr=1e-5", "--warmup-steps=-1", "--max-steps=9"]
    assert split_argv(["--seed=3", "--lr=1e-5"]) is None
    with pytest.raises(ConfigError, match="--seeds needs at least one seed"):
        split_argv(["--seeds", "--lr", "1e-5", "2e-5"])


@pytest.mark.parametrize("argv", [["--lr", "1e-5", "2e-5", "--lr", "3e-5"],
                                  ["--lr", "1e-5", "2e-5", "--lr=3e-5", "4e-5"],
                                  ["--lr", "3e-5", "--seeds", "1", "--lr", "1e-5", "2e-5"]])
def test_a_swept_flag_given_twice_is_refused_not_half_dropped(argv):
    with pytest.raises(ConfigError, match="--lr is given more than once"):
        split_argv(argv)


def test_score_test_takes_no_value():
    with pytest.raises(ConfigError, match="--score-test takes no value"):
        split_argv(["--seeds", "1", "2", "--score-test", "false"])

def test_a_grid_is_every_seed_of_every_combination_each_in_its_own_directory():
    cfg = FinetuneConfig(model="m", data_dir="d")
    runs = sweep.grid_runs(cfg, TrainConfig(out_dir="g", progress=False),
                           {"lr": [1e-5, 2e-5], "dropout": [0.0, 0.1]}, [1, 2])
    assert len(runs) == 8 and len({r.train_cfg.out_dir for r in runs}) == 8
    run = runs[-1]
    assert run.name == "dropout=0.1_lr=2e-05_seed=2" and run.configuration == "dropout=0.1_lr=2e-05"
    assert (run.cfg.dropout, run.train_cfg.lr, run.train_cfg.seed) == (0.1, 2e-5, 2)
    assert run.train_cfg.out_dir == os.path.join("g", run.name) and run.train_cfg.resume  # a rerun resumes
    with pytest.raises(ValueError, match="cannot sweep"):
        sweep.grid_runs(cfg, TrainConfig(progress=False), {"task": ["a", "b"]}, [1])


def summary(score, primary="accuracy", baseline=None, **extra):
    return {"primary_metric": primary, "best": {primary: score} if score is not None else {},
            "baseline": baseline if baseline is not None else {"method": "majority class", "accuracy": 0.4},
            **extra}


def test_a_run_that_does_not_beat_the_trivial_baseline_is_diverged():
    assert diverged(summary(0.41)) is None
    assert "does not beat majority class (0.4000)" in diverged(summary(0.4))
    assert diverged(summary(None)) == "no dev score"
    assert diverged({"error": "non-finite loss at step 3"}) == "non-finite loss at step 3"
    # a constant predicts no correlation; multi-label: the better of its trivial rules
    assert diverged(summary(0.0, "pearson", {"method": "training mean", "mse": 1.0})) is not None
    assert trivial_score({"all negative": {"micro_f1": 0.0}, "label prior": {"micro_f1": 0.2}}, "micro_f1") == 0.2
    assert trivial_score({"method": "every word O", "f1": 0.0}, "f1") == 0.0


def test_the_summary_leaves_diverged_runs_out_of_the_spread_and_selects_the_best_mean():
    runs = [sweep.Run({"lr": lr, "seed": s}, None, TrainConfig(out_dir=f"g/{lr}_{s}", progress=False))
            for lr in (1e-3, 1e-2, 1e-1) for s in (1, 2, 3)]
    scores = [0.6, 0.7, 0.8,  # lr 1e-3: all work
              0.9, 0.4, 0.7,  # lr 1e-2: one diverged (at the majority class): the mean of the others, 0.8
              0.95, 0.3, None]  # lr 1e-1: below the baseline, no score: two of three diverged
    report = summarize(runs, [summary(x) for x in scores])
    by = {c["configuration"]: c for c in report["configurations"]}
    assert by["lr=0.001"]["mean"] == pytest.approx(0.7) and by["lr=0.001"]["std"] == pytest.approx(0.1)
    assert (by["lr=0.01"]["runs"], by["lr=0.01"]["diverged"]) == (3, 1)
    assert by["lr=0.01"]["mean"] == pytest.approx(0.8) and (by["lr=0.01"]["min"], by["lr=0.01"]["max"]) == (0.7, 0.9)
    assert by["lr=0.1"]["diverged"] == 2 and by["lr=0.1"]["mean"] == 0.95 and by["lr=0.1"]["std"] is None
    # the best mean among configurations where at most half the runs diverged: lr=0.1 is not eligible
    assert report["selected"] == "lr=0.01"
    table = sweep.table(report)
    assert "| lr=0.01 (selected) | 3 | 1 | 0.8000 | 0.1414 | 0.7000 | 0.9000 |" in table
    assert "- diverged: lr=0.01_seed=2: best dev accuracy 0.4000 does not beat majority class" in table


def test_score_test_scores_the_selected_runs_once_each_when_a_configuration_is_selected(tmp_path):
    """run_grid reused the name of its scoring function for a run's dev score, and called the float once a
    configuration beat its baseline (the tiny grid above never does): a TypeError after the whole grid."""
    from types import SimpleNamespace

    from litebert.finetune import FinetuneConfig

    def train(cfg, train_cfg):  # a run that beats its baseline
        return {"primary_metric": "accuracy", "best": {"accuracy": 0.9}, "steps": 2,
                "baseline": {"method": "majority class", "accuracy": 0.3}}

    scored = []

    def score(model_dir, cfg, split):
        scored.append((os.path.basename(os.path.dirname(model_dir)), split))
        return [SimpleNamespace(metrics={"accuracy": 0.8})]

    report = sweep.run_grid(FinetuneConfig(model="m", data_dir="d"), TrainConfig(out_dir=str(tmp_path)), {}, [1, 2],
                            train=train, score=score, test=True, echo=lambda *_: None)
    assert report["selected"] and sorted(scored) == [("seed=1", "test"), ("seed=2", "test")]
    assert report["test"]["mean"] == pytest.approx(0.8) and (tmp_path / "grid.json").is_file()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    return tiny_model_dir(root), tiny_task(root, n=24)


def test_a_tiny_grid_runs_writes_its_table_and_resumes(setup, tmp_path, capsys, monkeypatch):
    model, data = setup
    grid = tmp_path / "grid"
    argv = ["finetune", "--model", str(model), "--task", "novel_authorship", "--data-dir", str(data),
            "--max-length", "32", "--max-steps", "2", "--batch-size", "8", "--eval-every", "2", "--save-every", "1",
            "--keep-last", "2", "--out-dir", str(grid), "--no-progress", "--seeds", "1", "--lr", "1e-3", "3e-3",
            "--score-test"]
    assert litebert_main(argv) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in grid.iterdir() if p.is_dir())
    assert names == ["lr=0.001_seed=1", "lr=0.003_seed=1"]
    report = json.loads((grid / "grid.json").read_text())
    assert [c["configuration"] for c in report["configurations"]] == ["lr=0.001", "lr=0.003"]
    assert all(c["runs"] == 1 for c in report["configurations"]) and report["seeds"] == [1]
    assert "| configuration | runs | diverged | dev accuracy mean |" in (grid / "grid.md").read_text()
    assert (grid / "grid.md").read_text() in out
    for run in report["runs"]:  # each an ordinary run directory
        assert (grid / run["name"] / "summary.json").is_file() and (grid / run["name"] / "best").is_dir()
        assert json.loads((grid / run["name"] / "summary.json").read_text())["steps"] == 2
    if report["selected"]:  # the selected configuration's runs were scored on test, once each
        assert report["test"]["configuration"] == report["selected"]
        tested = [r for r in report["runs"] if r["configuration"] == report["selected"] and not r["diverged"]]
        assert all((grid / r["name"] / "scored_test.json").is_file() for r in tested)

    calls = []
    import litebert.finetune as ft
    real = ft.finetune

    def counting(cfg, train_cfg):
        calls.append((os.path.basename(train_cfg.out_dir), train_cfg.resume,
                      sorted(p.name for p in (grid / os.path.basename(train_cfg.out_dir)).glob("step_*"))))
        return real(cfg, train_cfg)

    monkeypatch.setattr(ft, "finetune", counting)
    mtimes = {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")}
    assert litebert_main(argv) == 0
    assert calls == [] and {p: p.stat().st_mtime_ns for p in grid.glob("*/summary.json")} == mtimes
    assert json.loads((grid / "grid.json").read_text())["configurations"] == report["configurations"]

    # an interrupted run (no summary.json, its step-2 checkpoint never written) resumes from step 1
    victim = grid / "lr=0.003_seed=1"
    before = json.loads((victim / "summary.json").read_text())
    (victim / "summary.json").unlink()
    shutil.rmtree(victim / "step_2")
    assert litebert_main(argv) == 0
    assert calls == [("lr=0.003_seed=1", True, ["step_1"])]
    after = json.loads((victim / "summary.json").read_text())
    assert after["steps"] == 2 and after["best"] == before["best"] and (victim / "step_2").is_dir()


def test_a_run_whose_loss_goes_non_finite_is_recorded_as_diverged_and_not_retried(setup, tmp_path):
    model, data = setup
    cfg = FinetuneConfig(model=str(model), task="novel_authorship", data_dir=str(data), max_length=32)
    train_cfg = TrainConfig(optimizer="adamw", lr=1e30, batch_size=8, max_steps=4, out_dir=str(tmp_path / "g"),
                            progress=False)
    report = sweep.run_grid(cfg, train_cfg, {}, [7], train=finetune, score=evaluate_checkpoint, echo=lambda *_: None)
    (run,) = report["runs"]
    assert run["name"] == "seed=7" and "non-finite" in run["diverged"]
    assert report["configurations"][0]["diverged"] == 1 and report["selected"] is None
    assert (tmp_path / "g" / "seed=7" / "failed.json").is_file()


def test_early_stopping_ends_the_run_after_patience_evaluations_without_improvement(setup, tmp_path):
    model, data = setup
    cfg = FinetuneConfig(model=str(model), task="novel_authorship", data_dir=str(data), max_length=32,
                         early_stopping_patience=2)
    train_cfg = TrainConfig(optimizer="adamw", lr=0.0, batch_size=8, max_steps=50, eval_every=1,
                            out_dir=str(tmp_path / "run"), progress=False)
    result = finetune(cfg, train_cfg)  # lr 0: the first evaluation is the best, the next two do not beat it
    assert result["steps"] == 3 and result["early_stopped"]
    assert result["best"]["accuracy"] == result["final"]["accuracy"]
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in evals if "eval_accuracy" in r] == [1, 2, 3]
    assert (tmp_path / "run" / "step_3").is_dir()  # the step it stopped at is kept, as a finished run's last
    with pytest.raises(ValueError, match=r"needs evaluations every N steps \(--eval-every N\)"):
        finetune(cfg, TrainConfig(eval_every=0, out_dir=str(tmp_path / "other"), progress=False))


def test_early_stopping_counts_on_across_a_resume(setup, tmp_path):
    """The patience count is checkpointed: a run interrupted after step 2 (one evaluation without improvement)
    stops at step 3 on resume, as the uninterrupted run does, not at step 4."""
    model, data = setup
    cfg = FinetuneConfig(model=str(model), task="novel_authorship", data_dir=str(data), max_length=32,
                         early_stopping_patience=2)

    def train_cfg(max_steps: int, resume: bool) -> TrainConfig:
        return TrainConfig(optimizer="adamw", lr=0.0, batch_size=8, max_steps=max_steps, eval_every=1,
                           save_every=1, out_dir=str(tmp_path / "run"), resume=resume, progress=False)
    first = finetune(cfg, train_cfg(2, False))
    assert first["steps"] == 2 and not first["early_stopped"]
    resumed = finetune(cfg, train_cfg(50, True))
    assert resumed["steps"] == 3 and resumed["early_stopped"]
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["step"] for r in evals if "eval_accuracy" in r] == [1, 2, 3]  # step 2's evaluation read back, not redone
