"""`litebert reproduce`: every experiment runs end to end at the tiny scale, a killed grid resumes (finished rows
kept, the killed row from its checkpoint) to the same results.json as an uninterrupted one, the paper-scale
recipes are accepted by `litebert pretrain --config`, the paper's numbers are the ones in the shared tables,
and the verdicts follow the rule the report states."""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib

import numpy as np
import pytest
import torch
from fixtures.runs import gpu_scale_in_seconds
from paths import SHARED_DATA

import litebert.finetune
import litebert.pretrain
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.errors import ConfigError, LitebertError
from litebert.files import write_json
from litebert.paper import budgets, children, stats
from litebert.paper import grid as G
from litebert.paper import reproduce as R
from litebert.paper.experiments import DATA, EXPERIMENTS, SCALES, Claim, scale_model, split_task
from litebert.paper.grid import slug
from litebert.paper.recipes import finetune_recipe, finished_elsewhere, train_table
from litebert.paper.record import kept_record, restore_runs
from litebert.paper.report import judge
from litebert.runtime.cpu import cpu_model

DEMO_CORPUS = str(DATA) + "/demo_corpus.txt.gz"
VERDICTS = ("reproduced", "contradicted", "inconclusive", "not measured")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One tokenizer and one set of prepared pairs for all the tiny grids (made by the first that needs them)."""
    return str(tmp_path_factory.mktemp("reproduce_data"))


def argv_for(out, experiment, data_dir, *extra, steps=2):
    return ["reproduce", experiment, "--out", str(out), "--scale", "tiny", "--data-dir", data_dir,
            "--extra-corpus", DEMO_CORPUS, "--set", f"train.max_steps={steps}", *extra]


def run(out, experiment, data_dir, *extra, steps=2):
    assert litebert_main(argv_for(out, experiment, data_dir, *extra, steps=steps)) == 0
    return json.loads((out / "results.json").read_text())


# Each row is a `litebert pretrain` child process (~5 s of imports and plotting on 2 cores): the two 8-row grids
# are left to the slow suite.
EIGHT_ROWS = {"embedding", "sharing"}


def run_verb_in_process(verb, args, log_path, nproc=1, progress=None, lane=R.ALONE):
    """R.run_verb by `litebert VERB` in this process rather than a child: the same verb and recipe without a
    child's start (importing torch, then torch._dynamo for the optimizer: 4-5 s a row here)."""
    assert nproc == 1
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        code = litebert_main([verb, *args])
    assert code == 0, f"litebert {verb} exited with {code}: {log_path}"


@pytest.fixture
def rows_in_process(monkeypatch):
    """Rows run in this process (run_verb_in_process). Starting rows as children, their logs and a child's death
    are the kill and torchrun tests' to check."""
    monkeypatch.setattr(R, "run_verb", run_verb_in_process)
    monkeypatch.setattr(budgets, "run_verb", run_verb_in_process)  # the speed probes


@pytest.mark.parametrize("experiment", [pytest.param(e, marks=pytest.mark.slow) if e in EIGHT_ROWS else e
                                        for e in EXPERIMENTS])
def test_every_experiment_runs_end_to_end_at_the_tiny_scale(experiment, data_dir, tmp_path, capsys,
                                                             rows_in_process):
    exp = EXPERIMENTS[experiment]
    extra = ["--downstream"] if experiment == "data" else []  # one grid fine-tunes too (the Avg column)
    results = run(tmp_path, experiment, data_dir, *extra)
    out = capsys.readouterr().out
    assert f"[1/{len(exp.rows)}] {experiment}: {exp.rows[0].name}" in out and "left" in out
    assert list(results["rows"]) == [r.name for r in exp.rows]
    for name, entry in results["rows"].items():
        run_ = entry["runs"]["12345"]
        assert 0 <= run_["mlm_acc"] <= 1 and 0 <= run_["sop_acc"] <= 1 and run_["parameters"] > 0
        assert run_["curve"][-1] == [run_["steps"], run_["mlm_acc"]]
        assert entry["stats"]["mlm_acc"]["sd"] is None  # one seed: no spread
    assert [c["claim"] for c in results["claims"]] == [c.text for c in exp.claims]
    assert all(c["verdict"].split(" (")[0] in VERDICTS for c in results["claims"])
    report = (tmp_path / "report.md").read_text()
    assert report.startswith(f"# {exp.table}: ") and "litebert reproduce " + experiment in report
    assert "## The paper's comparisons" in report and (tmp_path / "curves.png").stat().st_size > 1000
    if exp.columns:  # the paper's table, quoted, beside ours
        first = exp.rows[0].paper[exp.columns[-1]]
        assert f"## The paper ({exp.table}" in report and str(first) in report
    if experiment == "objective":
        assert {"nsp_acc", "sop_acc"} <= set(results["rows"]["NSP"]["runs"]["12345"]) and results["chance"]
        assert "; paper 86.5 vs 52.0" in report  # the paper's SOP accuracies as it prints them (not "52")
    if experiment == "transitions":
        layers = results["rows"]["ALBERT-large"]["model"]["num_hidden_layers"]
        assert len(results["rows"]["BERT-large"]["runs"]["12345"]["angle"]) == layers
        assert (tmp_path / "transitions.png").stat().st_size > 1000
    if experiment == "depth":  # each depth continues the shallower one
        runs = {name: e["runs"]["12345"] for name, e in results["rows"].items()}
        assert runs["L=1"]["init_from"] is None and runs["L=3"]["init_from"] == runs["L=1"]["checkpoint"]
    if experiment == "same-time":  # one wall-clock budget, measured into steps per row
        state = json.loads((tmp_path / "grid.json").read_text())
        assert set(state["steps"]) == {"BERT-large", "ALBERT-xxlarge"}
        for name, probes in state["probes"].items():  # interleaved rounds, their median the speed
            assert len(probes) == budgets.PROBE_ROUNDS and state["seconds_per_step"][name] == sorted(probes)[1]
        assert "seconds a step, the median of 3 probes each: BERT-large" in out
        timing = json.loads((tmp_path / "rows" / "BERT-large" / "seed12345" / "timing.json").read_text())
        assert 0 < timing["pretrain_minutes"] < 1
        assert re.search(r"spent in training steps .* against the budget of [\d.]+: BERT-large [\d.]+-[\d.]+, "
                         r"ALBERT-xxlarge [\d.]+-[\d.]+\. A step, the median of each row's speed probes", report)
    if experiment == "data":
        runs = results["rows"]["with additional data"]["runs"]["12345"]
        assert set(runs["downstream"]) == {"novel_authorship", "novel_authorship@16"} and 0 <= runs["avg"] <= 1
        assert "downstream avg" in report and "NAME@N: on its first N training examples" in report
        row = tmp_path / "rows" / "with_additional_data" / "seed12345"
        few = json.loads((row / "finetune_novel_authorship_16" / "summary.json").read_text())
        assert few["examples"]["train"] == 16  # the suite's few-label task
        assert json.loads((row / "finetune_novel_authorship" / "summary.json").read_text())["examples"]["train"] == 32


# The rows' child processes run `litebert` through this: it writes down each training step it starts (row, step)
# and dies (os._exit, as a kill would) at the step named by $REPRODUCE_KILL_AT, after the checkpoint before it.
CHILD = """
import os, sys
import litebert.training.loop as loop
real_step = loop.train_step
def step(run, n):
    row = run.cfg.out_dir.split(os.sep + "rows" + os.sep)[1].split(os.sep)[0]
    if os.environ.get("REPRODUCE_KILL_AT") == f"{row}:{n}":
        os._exit(9)
    with open(os.environ["REPRODUCE_STEPS"], "a") as f:
        f.write(f"{row}:{n}\\n")
    return real_step(run, n)
loop.train_step = step
from litebert.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_grid_resumes_to_the_same_results(data_dir, tmp_path, monkeypatch, capsys):
    """The second row's process dies in its step 3, after its step-2 checkpoint: the rerun keeps the first
    row's result, resumes the second at step 3, runs the third, and results.json equals an uninterrupted
    grid's; --rows then reruns one row from scratch."""
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", CHILD])
    steps_file = tmp_path / "steps.txt"
    monkeypatch.setenv("REPRODUCE_STEPS", str(steps_file))

    def ran():
        lines = steps_file.read_text().split() if steps_file.exists() else []
        steps_file.unlink(missing_ok=True)
        return lines

    every = [f"{row}:{n}" for row in ("None", "NSP", "SOP") for n in (1, 2, 3, 4)]
    extra = ("--set", "train.save_every=2")
    with monkeypatch.context() as patched:  # the uninterrupted reference, its rows in this process (faster)
        patched.setattr(R, "run_verb", run_verb_in_process)
        whole = run(tmp_path / "whole", "objective", data_dir, *extra, steps=4)

    monkeypatch.setenv("REPRODUCE_KILL_AT", "NSP:3")
    assert litebert_main(argv_for(tmp_path / "killed", "objective", data_dir, *extra, steps=4)) == 2
    assert "litebert pretrain exited with 9" in capsys.readouterr().err
    assert ran() == every[:6]
    killed_row = tmp_path / "killed" / "rows" / "NSP" / "seed12345"
    assert (killed_row / "pretrain" / "step_2").is_dir() and not (killed_row / "result.json").exists()
    first = (tmp_path / "killed" / "rows" / "None" / "seed12345" / "result.json").stat().st_mtime_ns
    first_attempt = json.loads((killed_row / "spent.json").read_text())

    monkeypatch.delenv("REPRODUCE_KILL_AT")
    resumed = run(tmp_path / "killed", "objective", data_dir, *extra, steps=4)
    assert ran() == every[6:]  # NSP from step 3, then SOP; None not rerun
    timing = json.loads((killed_row / "timing.json").read_text())  # the killed attempt's time is counted too
    assert first_attempt["attempts"] == 1 and first_attempt["seconds"] > 0
    assert timing["attempts"] == 2 and timing["seconds"] > first_attempt["seconds"]
    assert (tmp_path / "killed" / "rows" / "None" / "seed12345" / "result.json").stat().st_mtime_ns == first
    assert resumed == whole
    assert "objective: 1 finished row run(s) kept" in capsys.readouterr().out

    assert run(tmp_path / "killed", "objective", data_dir, *extra, "--rows", "SOP", steps=4) == whole
    assert ran() == every[8:]


# A row's child that writes down its verb, when it ran (start, end) and its OMP_NUM_THREADS to $REPRODUCE_SPANS.
TIMED_CHILD = """
import os, sys, time
from litebert.cli import main
start = time.time()
code = main(sys.argv[1:])
with open(os.environ["REPRODUCE_SPANS"], "a") as f:
    f.write(f"{sys.argv[1]} {start} {time.time()} {os.environ.get('OMP_NUM_THREADS')}\\n")
sys.exit(code)
"""


def test_jobs_train_rows_at_once_to_the_results_of_one_at_a_time(data_dir, tmp_path, monkeypatch, capsys):
    """--jobs 2: the three rows train two at a time (their children's spans overlap), each child on the threads
    it was given, and results.json is the one-at-a-time grid's."""
    micro = ("--set", "train.max_steps=3")
    with monkeypatch.context() as patched:  # the reference: rows in this process, on one thread
        patched.setattr(R, "run_verb", run_verb_in_process)
        one = run(tmp_path / "one", "objective", data_dir, *micro)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a child's thread count can only come from its lane:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # two cores, one each
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", TIMED_CHILD])
    monkeypatch.setenv("REPRODUCE_SPANS", str(tmp_path / "spans.txt"))
    capsys.readouterr()
    assert run(tmp_path / "two", "objective", data_dir, *micro, "--jobs", "2") == one
    spans = [line.split() for line in (tmp_path / "spans.txt").read_text().splitlines()]
    assert len(spans) == 3 and {threads for *_, threads in spans} == {"1"}
    overlaps = [(a, b) for a in spans for b in spans if a is not b and float(a[1]) < float(b[1]) < float(a[2])]
    assert overlaps, spans
    printed = capsys.readouterr().out
    assert "[3/3] objective:" in printed and re.search(r"(None|NSP|SOP), seed 12345: done in", printed)


def test_jobs_keep_warm_starts_in_order_and_stop_starting_rows_after_a_failure(tmp_path, monkeypatch):
    """With warm starts each seed's rows run in order, two seeds at once; a failing row starts no new row, lets
    the running one finish, and its error is raised."""
    events, lock = [], threading.Lock()

    def fake_row(grid, row, seed, steps, lane):
        with lock:
            events.append(("start", row.name, seed))
        time.sleep(0.2)  # long enough that the other chain starts meanwhile, on a loaded machine too
        if (row.name, seed) == fail_at:
            raise LitebertError(f"row {row.name} failed")
        with lock:
            events.append(("end", row.name, seed))
        return {"row": row.name, "mlm_acc": 0.5, "sop_acc": 0.5, "nsp_acc": 0.5}  # every held-out task of both grids

    monkeypatch.setattr(R, "run_row", fake_row)
    monkeypatch.setattr(R, "prepare_row_data", lambda grid, row: None)
    monkeypatch.setattr(R, "_cost", lambda grid, row, steps: 1.0)  # no tokenizer to read the vocabulary of
    grid = R.make_grid(R.ReproduceConfig(experiment=["depth"], out=str(tmp_path), scale="tiny", seeds=2, jobs=2))
    todo = [(r, s) for r in grid.exp.rows for s in grid.seeds]
    fail_at = None
    R.run_rows(grid, todo, {r.name: 2 for r in grid.exp.rows})
    names = [r.name for r in grid.exp.rows]
    for seed in grid.seeds:
        mine = [(kind, name) for kind, name, s in events if s == seed]
        assert mine == [(kind, name) for name in names for kind in ("start", "end")]  # a chain, in row order
    assert {s for kind, _, s in events[:2]} == set(grid.seeds)  # the two seeds' chains ran at once

    events.clear()
    fail_at = ("L=3", grid.seeds[0])
    with pytest.raises(LitebertError, match="row L=3 failed"):
        R.run_rows(grid, todo, {r.name: 2 for r in grid.exp.rows})
    failed_at = events.index(("start", "L=3", grid.seeds[0]))
    assert len([e for e in events[failed_at + 1:] if e[0] == "start"]) <= 1  # at most the other chain's next row
    assert not [e for e in events if e[0] == "start" and e[1] == "L=24"]

    events.clear()  # without warm starts every run is its own chain: the same rule
    grid = R.make_grid(R.ReproduceConfig(experiment=["objective"], out=str(tmp_path), scale="tiny", seeds=2,
                                         jobs=2))
    fail_at = ("None", grid.seeds[0])
    with pytest.raises(LitebertError, match="row None failed"):
        R.run_rows(grid, [(r, s) for r in grid.exp.rows for s in grid.seeds], {r.name: 2 for r in grid.exp.rows})
    assert len([e for e in events if e[0] == "start"]) <= 3 and ("end", "None", grid.seeds[1]) in events


def test_an_interrupt_while_jobs_run_kills_their_children_and_starts_no_more(tmp_path, monkeypatch):
    """Ctrl-C sent to the grid's process alone (not its children's group): the two children running are
    killed, the third run never starts, and the interrupt reaches the caller."""
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", "import time; time.sleep(60)"])
    started, real_popen = [], subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(children.subprocess, "Popen", popen)

    def interrupt_once_both_run():
        deadline = time.time() + 30
        while len(started) < 2 and time.time() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_both_run, daemon=True).start()
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        children.run_chains([["a"], ["b"], ["c"]], lambda name: children.run_verb(
            "pretrain", [], str(tmp_path / name / "log.txt")), 2)
    assert time.time() - t0 < 30 and len(started) == 2 and all(p.poll() is not None for p in started)


def test_each_job_gets_its_share_of_the_cores_unless_threads_are_set(tmp_path, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def lane(jobs, nproc=1):
        cfg = R.ReproduceConfig(experiment=["objective"], out=str(tmp_path), scale="tiny", jobs=jobs,
                                nproc_per_node=nproc)
        grid = R.make_grid(cfg)
        return R.lane_for(grid, jobs, grid.exp.rows[0], 7)

    assert lane(1) == R.ALONE and lane(1).env() is None
    assert lane(2) == R.Lane("None, seed 7: ", max(1, cores // 2)) and lane(2).env()["OMP_NUM_THREADS"] == str(
        max(1, cores // 2))
    assert lane(2, nproc=2).threads == max(1, cores // 4)
    assert lane(1, nproc=2) == R.Lane("", max(1, cores // 2))  # one run, two torchrun processes: half each
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    assert lane(2).threads is None and lane(2).env() is None


def test_a_speed_probe_gives_the_mean_time_of_its_steps_not_the_time_of_its_mean_rate(tmp_path, monkeypatch):
    """A step three times slower among six takes 8/6 of a step's time on average; the mean of the logged rates
    (tokens/s) said 1.125: a minutes budget then gave a row more steps than fit its time."""
    grid = R.make_grid(R.ReproduceConfig(experiment=["same-time"], out=str(tmp_path), scale="tiny"))
    tokens = budgets.tokens_per_step(grid)

    def fake_probe(verb, args, log_path, nproc=1, progress=None, lane=R.ALONE):  # a step of 1 s, one of 3 s
        rates = [tokens / s for s in (1, 1, 1, 1, 1, 1, 1, 3)]
        probe = os.path.dirname(log_path)
        with open(os.path.join(probe, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps({"step": n + 1, "loss": 1.0, "tokens_per_s": r}) + "\n" for n, r in enumerate(rates))

    monkeypatch.setattr(budgets, "run_verb", fake_probe)
    monkeypatch.setattr(budgets, "prepare_row_data", lambda grid, row: None)
    monkeypatch.setattr(grid.data, "vocab_size", lambda: 400)
    monkeypatch.setattr(grid.data, "path", lambda *a, **k: str(tmp_path / "data"))
    assert budgets.seconds_per_step(grid, grid.exp.rows[0]) == pytest.approx(8 / 6)  # steps 3-8


def test_a_grid_warns_when_its_threads_do_not_fit_beside_the_machines_other_work(monkeypatch):
    """OpenMP threads that outnumber the free cores wait on each other (a row 8x slower, with nothing to show
    it): the grid says so before it starts."""
    monkeypatch.setattr(children, "usable_cores", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.1, 1.0, 1.0))  # one core busy elsewhere
    assert children.crowding(1) is None
    assert "load is 1.1 on 2 core(s) before this grid's 2 thread(s)" in children.crowding(2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 1.0, 1.0))  # idle (the last minute of another run)
    assert children.crowding(2) is None


# What a row's verb under torchrun leaves in its log when it fails (torch 2.x, one worker, a missing recipe).
TORCHRUN_FAILURE = """litebert pretrain: error: /tmp/recipe.toml: No such file or directory
E1128 02:20:46.098000 30758 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0
Traceback (most recent call last):
  File "torch/distributed/run.py", line 1032, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
litebert.cli FAILED
------------------------------------------------------------
  exitcode  : 2 (pid: 31368)
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_failed_row_says_why_its_verb_failed_not_the_last_line_of_torchruns_report(tmp_path, monkeypatch):
    """The error names the verb's own error line, or its exception's, of this attempt: not torchrun's closing
    "=====", nor an earlier attempt's error in the same log."""
    script = "import sys; sys.stdout.write(sys.argv[1]); sys.exit(1)"
    log = str(tmp_path / "pretrain.log")
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", script, TORCHRUN_FAILURE])
    with pytest.raises(LitebertError, match=r"exited with 1: litebert pretrain: error: /tmp/recipe.toml: No such"):
        children.run_verb("pretrain", [], log)
    worker_exception = "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n" + \
        TORCHRUN_FAILURE.split("\n", 1)[1]  # a worker's exception, then torchrun's report
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", script, worker_exception])
    with pytest.raises(LitebertError, match=r"exited with 1: RuntimeError: CUDA out of memory \(log: "):
        children.run_verb("pretrain", [], log)


def test_a_runs_time_is_written_down_while_it_goes_and_summed_over_its_attempts(tmp_path, monkeypatch):
    """A grid killed outright (no handler runs) must not lose its run's first attempt from the time it reports."""
    monkeypatch.setattr(children, "LEDGER_SECONDS", 0.02)
    path = str(tmp_path / "spent.json")
    with children.TimeLedger(path):
        time.sleep(0.2)
        while_running = json.loads(open(path).read())  # what a kill at this moment would leave
    assert while_running["attempts"] == 1 and 0.1 < while_running["seconds"] < 0.4
    with children.TimeLedger(path) as second:
        time.sleep(0.05)
    assert second.attempts == 2 and second.seconds >= while_running["seconds"] + 0.05
    assert json.loads(open(path).read()) == {"seconds": second.seconds, "attempts": 2}


@pytest.mark.slow
def test_rows_train_under_torchrun(data_dir, tmp_path, monkeypatch):
    """--nproc-per-node 2: every row's pretraining (MLM only, NSP, SOP) and fine-tuning runs as two gloo
    processes under torchrun. The batch sizes are global, so with the same micro-batches pretraining ends where
    the one-process grid (run in this process: its rows' children are not what is tested here) does (up to the
    order of the gradient sums). Dropout draws its masks per rank, so these rows have none, the sentence head's
    included (its 0.1 made the NSP and SOP rows differ from the first step, within the tolerance only by luck).
    Fine-tuning's scores are only checked to exist."""
    micro = ("--set", "train.max_steps=3", "train.micro_batch_size=4", "finetune.micro_batch_size=4",
             "model.classifier_dropout_prob=0",
             'finetune.tasks=["novel_authorship"]')  # one task: each fine-tuning under torchrun starts 2 processes
    with monkeypatch.context() as patched:
        patched.setattr(R, "run_verb", run_verb_in_process)
        one = run(tmp_path / "one", "objective", data_dir, "--downstream", *micro)
    two = run(tmp_path / "two", "objective", data_dir, "--downstream", "--nproc-per-node", "2", *micro)
    for name in ("None", "NSP", "SOP"):
        row = tmp_path / "two" / "rows" / name / "seed12345"
        for checkpoint in (row / "pretrain" / "step_3", row / "finetune_novel_authorship" / "step_2"):
            assert torch.load(checkpoint / "train_state.pt", weights_only=True)["world_size"] == 2
        a, b = one["rows"][name]["runs"]["12345"], two["rows"][name]["runs"]["12345"]
        assert b["steps"] == a["steps"] == 3
        for key in ("mlm_loss", "mlm_acc", "sop_acc", "nsp_acc"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), key
        assert 0 <= b["downstream"]["novel_authorship"]["score"] <= 1


def test_a_report_dir_holding_another_report_md_is_refused_before_any_row_runs(data_dir, tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "report.md").write_text("# my own notes\n")
    code = litebert_main([*argv_for(tmp_path / "g", "dropout", data_dir), "--report-dir", str(tmp_path / "docs")])
    assert code == 2 and "is not a report of litebert reproduce: choose another --report-dir" in capsys.readouterr().err
    assert (tmp_path / "docs" / "report.md").read_text() == "# my own notes\n" and not (tmp_path / "g").exists()


@pytest.fixture
def counted_rows(monkeypatch, rows_in_process):
    """The (row, seed) runs trained, in order; a run fails when its row and seed are in `counted_rows.fail`."""
    trained, real_run_row = [], R.run_row

    def run_row(grid, row, seed, *args):
        if (row.name, seed) in run_row.fail:
            raise LitebertError("the machine went away")
        trained.append((row.name, seed))
        return real_run_row(grid, row, seed, *args)
    run_row.trained, run_row.fail = trained, set()
    monkeypatch.setattr(R, "run_row", run_row)
    return run_row


def test_a_grid_whose_out_was_lost_goes_on_from_the_runs_its_report_keeps(data_dir, tmp_path, capsys, counted_rows):
    """The report is rewritten after every finished run (saying it is in progress), and it is enough to go on
    from: with --out gone, the rerun restores the report's finished runs and their times, trains only the
    others, and ends with the uninterrupted grid's results.json; --report-only rewrites the same report; --rows
    reruns the rows it names and restores the others."""
    docs, seeds = tmp_path / "docs", ("--seeds", "2")
    lost = [*argv_for(tmp_path / "lost", "dropout", data_dir), *seeds, "--report-dir", str(docs)]
    whole = run(tmp_path / "whole", "dropout", data_dir, *seeds)
    trained = counted_rows.trained
    trained.clear()
    first = EXPERIMENTS["dropout"].rows[0].name
    counted_rows.fail = {(first, 12346)}
    assert litebert_main(lost) == 2
    assert "In progress: 1 of 4 row runs finished." in (docs / "report.md").read_text()
    assert list(json.loads((docs / "results.json").read_text())["rows"][first]["runs"]) == ["12345"]

    shutil.rmtree(tmp_path / "lost")
    trained.clear()
    counted_rows.fail = set()
    capsys.readouterr()
    assert litebert_main(lost) == 0
    assert "dropout: 1 finished row run(s) restored from" in capsys.readouterr().out and len(trained) == 3
    assert json.loads((docs / "results.json").read_text()) == whole
    page = (docs / "report.md").read_text()
    assert "In progress" not in page and "**Time spent.** 4 row runs" in page  # the restored run's time kept
    timing = json.loads((docs / "timing.json").read_text())
    assert {t["machine"] for seeds in timing.values() for t in seeds.values()} == {cpu_model()}

    for keep in ("grid.json", "nothing"):  # --report-only: the same report, from a record with or without grid.json
        shutil.rmtree(tmp_path / "lost")
        (docs / keep).unlink(missing_ok=True)
        assert litebert_main([*lost, "--report-only"]) == 0
        assert (docs / "report.md").read_text() == page and json.loads((docs / "results.json").read_text()) == whole

    shutil.rmtree(tmp_path / "lost")
    trained.clear()
    assert litebert_main([*lost, "--rows", "with dropout"]) == 0
    assert sorted(trained) == [("with dropout", 12345), ("with dropout", 12346)]
    assert json.loads((docs / "results.json").read_text()) == whole


def test_a_kept_out_is_not_restored_into_and_a_report_that_cannot_be_written_stops_no_run(
        data_dir, tmp_path, monkeypatch, capsys, counted_rows):
    """With --out there, a result.json deleted to rerun a run is rerun, not brought back from the report; a
    report rewrite that fails after a run says so and the grid goes on to its last run and report."""
    docs = tmp_path / "docs"
    argv = [*argv_for(tmp_path / "g", "dropout", data_dir), "--report-dir", str(docs)]
    real_write = R.write_report
    monkeypatch.setattr(R, "write_report", lambda *a, quiet=False: real_write(*a, quiet=quiet) if not quiet
                        else (_ for _ in ()).throw(OSError("No space left on device")))
    assert litebert_main(argv) == 0
    assert capsys.readouterr().out.count("the report could not be written (No space left on device)") == 2
    assert json.loads((docs / "results.json").read_text())["rows"]["with dropout"]["runs"]
    (tmp_path / "g" / "rows" / "with_dropout" / "seed12345" / "result.json").unlink()
    counted_rows.trained.clear()
    assert litebert_main(argv) == 0 and counted_rows.trained == [("with dropout", 12345)]


def test_a_report_dir_of_another_grid_is_refused_before_anything_is_written(data_dir, tmp_path, capsys,
                                                                          rows_in_process):
    """Another experiment's report, one of other settings, and one holding seeds that --seeds leaves out (its
    rewrite would drop their runs): each refused in one line, the report and --out untouched."""
    docs = tmp_path / "docs"
    assert litebert_main([*argv_for(tmp_path / "g", "dropout", data_dir), "--seeds", "2", "--report-dir", str(docs)]) == 0
    kept = {p.name: p.read_bytes() for p in docs.iterdir()}
    for argv, message in [
            (argv_for(tmp_path / "a", "objective", data_dir), "holds the report of another grid ('dropout'"),
            (argv_for(tmp_path / "b", "dropout", data_dir, "--seeds", "2", steps=3),
             "holds the report of a grid made with other settings (set)"),
            (argv_for(tmp_path / "c", "dropout", data_dir), "holds runs of seed(s) 12346, which --seeds 1 leaves "
                                                            "out and this report would drop: give --seeds 2")]:
        assert litebert_main([*argv, "--report-dir", str(docs)]) == 2
        assert message in capsys.readouterr().err
        assert not os.path.exists(argv[3])  # --out
        assert {p.name: p.read_bytes() for p in docs.iterdir()} == kept
    own = tmp_path / "own"  # a grid whose report is in its --out: a smaller --seeds would drop runs there too
    assert litebert_main([*argv_for(own, "dropout", data_dir), "--seeds", "2"]) == 0
    results = (own / "results.json").read_bytes()
    for extra in ([], ["--report-only"]):
        assert litebert_main([*argv_for(own, "dropout", data_dir), *extra]) == 2
        assert "holds runs of seed(s) 12346, which --seeds 1 leaves out" in capsys.readouterr().err
        assert (own / "results.json").read_bytes() == results


def test_a_warm_started_chain_is_restored_only_where_its_report_finished_it(tmp_path):
    """Checkpoints are not in a report: a seed whose depth chain the report holds whole is restored, a seed with
    a row missing reruns its chain from the first row (each row warm-starts from the one before)."""
    cfg = R.ReproduceConfig(experiment=["depth"], out=str(tmp_path / "out"), scale="tiny", seeds=2,
                            report_dir=str(tmp_path / "docs"))
    grid = R.make_grid(cfg)
    names = [r.name for r in grid.exp.rows]
    runs = {name: {"12345": {"row": name, "seed": 12345, "checkpoint": f"rows/{name}/seed12345/pretrain/step_2"}}
            for name in names}
    for name in names[:-1]:
        runs[name]["12346"] = {"row": name, "seed": 12346}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.json").write_text(json.dumps(
        {"experiment": "depth", "settings": G.grid_settings(grid), "rows": {n: {"runs": r} for n, r in runs.items()}}))
    record = kept_record(grid, cfg.report_dir, G.grid_settings(grid))
    restore_runs(grid, record, list(grid.exp.rows))
    restored = {(r.name, s) for r in grid.exp.rows for s in grid.seeds if os.path.isfile(grid.result_path(r, s))}
    assert restored == {(name, 12345) for name in names}
    with pytest.raises(ConfigError, match="warm-starts from 'L=1''s checkpoint, which is not in"):
        R.run_row(grid, grid.row("L=3"), 12345, 2)


def test_rerunning_a_row_reruns_the_rows_that_warm_start_from_it(tmp_path, monkeypatch, capsys):
    """--rows L=3 replaces the checkpoint L=6 continued from, and L=12 and L=24 from that: all four rerun (their
    old results removed), L=1 is kept. Both seeds' chains, in row order."""
    grid = R.make_grid(R.ReproduceConfig(experiment=["depth"], out=str(tmp_path), scale="tiny", seeds=2,
                                         rows=["L=3"]))
    assert [r.name for r in R.with_warm_started(grid, [grid.row("L=24")])] == ["L=24"]
    for row in grid.exp.rows:
        for seed in grid.seeds:
            write_json(grid.result_path(row, seed), {"row": row.name, "seed": seed})
    ran = []
    monkeypatch.setattr(R, "run_rows", lambda grid, todo, steps, after_each: ran.extend(todo))
    monkeypatch.setattr(R, "write_report", lambda *args, **kwargs: {})
    monkeypatch.setattr(G.GridData, "check", lambda self, extra: None)
    R.run_grid(grid)
    assert [(r.name, s) for r, s in ran] == [(n, s) for n in ("L=3", "L=6", "L=12", "L=24") for s in grid.seeds]
    assert all(os.path.isfile(grid.result_path(grid.row("L=1"), s)) for s in grid.seeds)
    assert "L=6, L=12, L=24 warm-start from the rows named, and rerun with them" in capsys.readouterr().out


def test_a_run_started_or_finished_under_other_settings_is_not_continued_or_kept(tmp_path, monkeypatch):
    """A run records what it starts with; changing the recipe (here the scale's lr, as an edit of the code or
    demo.toml would) between a kill and the rerun is refused rather than resumed under the new recipe, and a
    finished run whose identity is not the row's now is not kept as this grid's."""
    def grid_with(lr):
        monkeypatch.setitem(SCALES["tiny"].train, "lr", lr)
        return R.make_grid(R.ReproduceConfig(experiment=["objective"], out=str(tmp_path), scale="tiny"))

    from litebert.paper.recipes import check_started
    before = grid_with(1e-3)
    row = before.row("SOP")
    check_started(before, row, 12345, 2)
    check_started(before, row, 12345, 2)  # the same settings: continues
    after = grid_with(2e-3)
    with pytest.raises(ConfigError, match="row 'SOP', seed 12345 was started with other settings"):
        check_started(after, row, 12345, 2)
    write_json(after.result_path(row, 12345), {"row": "SOP", "identity": R.row_identity(before, row, 2)})
    monkeypatch.setattr(G.GridData, "check", lambda self, extra: None)
    with pytest.raises(ConfigError, match=r"1 finished run\(s\) were made with other settings than this grid's now "
                                          r"\(SOP \(seed 12345\)\)"):
        R.run_grid(after)


def test_a_grid_made_before_recipes_were_recorded_continues_only_with_the_recipe_it_had(tmp_path):
    """grid.json files written before 2026-11-27 record no fine-tuning recipe (and keep --set finetune.X among
    "set"); their cpu grids were fine-tuned at lr 3e-4 for 300 steps. Continuing one under today's default recipe
    would mix two recipes in one table: refused; given its recipe back with --set, it continues."""
    def settings(*sets):
        cfg = R.ReproduceConfig(experiment=["dropout"], out=str(tmp_path), seeds=5, finetune_seeds=4,
                                set=["model.hidden_size=128", "train.max_steps=1000", *sets])
        return R.grid_settings(R.make_grid(cfg))
    old = {**settings(), "set": ["finetune.tasks=novel_authorship", "model.hidden_size=128", "train.max_steps=1000"],
           "downstream_tasks": ["novel_authorship"]}
    del old["finetune_recipe"]  # as an old grid.json has it
    assert G.recorded_settings(old)["finetune_recipe"]["lr"] == 3e-4
    assert G.recorded_settings(old) != settings("finetune.tasks=novel_authorship")  # today's default: refused
    continued = settings("finetune.tasks=novel_authorship", "finetune.lr=3e-4", "finetune.max_steps=300",
                         "finetune.warmup_steps=30")
    assert G.recorded_settings(old) == continued and continued["set"] == ["model.hidden_size=128",
                                                                          "train.max_steps=1000"]
    assert G.recorded_settings(continued) == continued  # a recorded recipe is read as it is
    assert settings()["finetune_recipe"]["lr"] == 1e-3 and settings()["finetune_recipe"]["max_steps"] == 1000


def test_the_grid_refuses_to_run_under_torchrun(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert litebert_main(["reproduce", "objective", "--out", str(tmp_path), "--scale", "tiny"]) == 2
    assert "--nproc-per-node 2" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_a_grid_refuses_other_settings_in_its_directory(data_dir, tmp_path, capsys, rows_in_process):
    run(tmp_path, "dropout", data_dir)
    code = litebert_main(["reproduce", "dropout", "--out", str(tmp_path), "--scale", "tiny", "--data-dir", data_dir,
                          "--extra-corpus", DEMO_CORPUS, "--set", "train.max_steps=3"])
    assert code == 2 and "other settings (set)" in capsys.readouterr().err


def test_paper_scale_writes_recipes_that_pretrain_accepts(tmp_path, monkeypatch, capsys):
    """Each recipe goes through `litebert pretrain --config` (its own parser and loader; pretrain itself is
    stubbed): the paper's recipe, the row's change, warm starts pointing at the shallower row's last step."""
    seen = []

    class Loaded(Exception):
        pass

    def fake_pretrain(cfg, train_cfg, overrides):
        seen.append((cfg, train_cfg, overrides))
        raise Loaded

    monkeypatch.setattr(litebert.pretrain, "pretrain", fake_pretrain)
    for experiment in ("embedding", "depth", "objective"):
        out = tmp_path / experiment
        assert litebert_main(["reproduce", experiment, "--out", str(out), "--scale", "paper", "--seeds", "2",
                              "--corpus", "books_wiki.txt"]) == 0
        recipes = sorted((out / "recipes").glob("*.toml"))
        rows = EXPERIMENTS[experiment].rows
        assert len(recipes) == 2 * len(rows)
        commands = (out / "commands.sh").read_text()
        assert commands.count("torchrun --nproc-per-node $NPROC -m litebert.cli pretrain --config") == len(recipes)
        assert "litebert tokenizer" in commands and "--vocab-size 30000" in commands and "books_wiki.txt" in commands
        assert commands.rstrip().endswith(f"litebert reproduce {experiment} --scale paper --out {out} --report-only "
                                          "--seeds 2 --corpus books_wiki.txt")  # the runs come back as a report
        by_name = {}
        for path in recipes:
            seen.clear()
            with pytest.raises(Loaded):
                litebert.pretrain.cli(["--config", str(path)])
            (cfg, train_cfg, overrides), = seen
            config = AlbertConfig.from_preset(cfg.model, vocab_size=30000, **overrides)
            assert (train_cfg.max_steps, train_cfg.batch_size, train_cfg.lr, train_cfg.optimizer) == \
                (125000, 4096, 0.00176, "lamb")
            assert config.max_position_embeddings == 512 and cfg.eval_data
            by_name[path.stem] = (cfg, train_cfg, config)
        for row in rows:
            cfg, train_cfg, config = by_name[slug(row.name) + "-seed12346"]
            assert train_cfg.seed == 12346
            for key, value in row.model.items():
                assert getattr(config, key) == value, (row.name, key)
            if row.warm_start:
                assert cfg.init_from.endswith(f"rows/{slug(row.warm_start)}/seed12346/pretrain/step_125000")
        if experiment == "objective":
            assert by_name["None-seed12345"][0].objective == "mlm"
            assert by_name["NSP-seed12345"][0].data.endswith("train_nsp")
    assert "nothing was run" in capsys.readouterr().out


def test_paper_scale_commands_make_every_run_their_report_reads(tmp_path, capsys):
    """commands.sh fine-tunes each checkpoint with every fine-tuning seed (--finetune-seeds), in the directories a
    row's runs use, and a paper-scale report waits for all of them; its last line repeats the options that say
    which runs the report reads (--seed, --seeds, --finetune-seeds, --set, --data-dir)."""
    out, data = tmp_path / "grid", tmp_path / "data"
    argv = ["dropout", "--out", str(out), "--scale", "paper", "--seed", "7", "--seeds", "2", "--finetune-seeds", "2",
            "--set", 'finetune.tasks=["SST-2"]', "--data-dir", str(data)]
    assert litebert_main(["reproduce", *argv]) == 0
    commands = (out / "commands.sh").read_text()
    recipes = re.findall(r"litebert finetune --config (\S+)", commands)
    assert len(recipes) == 2 * 2 * 2  # rows x pretraining seeds x fine-tuning seeds
    made = set()
    for path in recipes:
        train = tomllib.loads(open(path).read())["train"]
        made.add((os.path.relpath(train["out_dir"], out), train["seed"]))
    row = os.path.join("rows", "with_dropout", "seed8")
    assert {m for m in made if m[0].startswith(row)} == {(os.path.join(row, "finetune_SST-2"), 7),
                                                         (os.path.join(row, "finetune_SST-2_seed8"), 8)}
    report = commands.rstrip().splitlines()[-1]
    assert report.startswith(f"litebert reproduce dropout --scale paper --out {out} --report-only ")
    for option in ("--seed 7", "--seeds 2", "--finetune-seeds 2", f"--data-dir {data}",
                   "--set 'finetune.tasks=[\"SST-2\"]'"):
        assert option in report, option
    assert "--jobs" not in report and "--nproc-per-node" not in report  # how to run, not what to read
    grid = R.make_grid(R.ReproduceConfig(experiment=["dropout"], out=str(out), scale="paper", seed=7, seeds=2,
                                         finetune_seeds=2, set=['finetune.tasks=["SST-2"]'], data_dir=str(data)))
    by_name = {r.name: r for r in grid.exp.rows}
    for part in ("pretrain", "finetune_SST-2"):
        write_json(os.path.join(grid.row_dir(by_name["with dropout"], 8), part, "summary.json"), {})
    assert not finished_elsewhere(grid, by_name["with dropout"], 8)  # the second fine-tuning seed is not back
    write_json(os.path.join(grid.row_dir(by_name["with dropout"], 8), "finetune_SST-2_seed8", "summary.json"), {})
    assert finished_elsewhere(grid, by_name["with dropout"], 8)


def test_rows_map_the_papers_sizes_onto_a_scale():
    emb = EXPERIMENTS["embedding"]
    cpu = SCALES["cpu"]
    shared = scale_model(emb, emb.rows[5], cpu, 8000)  # all-shared E=128: the demo's shape
    assert (shared["hidden_size"], shared["embedding_size"], shared["num_hidden_layers"], shared["num_hidden_groups"],
            shared["num_attention_heads"], shared["intermediate_size"]) == (128, 64, 4, 1, 4, 512)
    bert = scale_model(emb, emb.rows[3], cpu, 8000)  # not-shared E=768 = H: E follows H, every layer its own
    assert (bert["embedding_size"], bert["num_hidden_groups"], bert["sharing"]) == (128, 4, "none")
    width = EXPERIMENTS["width"]
    wide = scale_model(width, width.rows[2], cpu, 8000)  # H=4096, 3 layers
    assert (wide["hidden_size"], wide["num_attention_heads"], wide["intermediate_size"], wide["num_hidden_layers"]) \
        == (512, 16, 2048, 2)
    paper = scale_model(emb, emb.rows[0], SCALES["paper"], 30000)  # the paper's scale changes nothing
    assert (paper["hidden_size"], paper["embedding_size"], paper["num_hidden_layers"]) == (768, 64, 12)
    with pytest.raises(ConfigError, match="varies embedding_size"):
        scale_model(emb, emb.rows[0], cpu, 8000, {"embedding_size": 32})
    assert scale_model(emb, emb.rows[0], cpu, 8000, {"hidden_dropout_prob": 0.1})["hidden_dropout_prob"] == 0.1


@pytest.mark.slow
def test_the_gpu_scale_runs_its_own_models_and_recipe_when_pointed_at_the_cpu(tmp_path, rows_in_process):
    """The gpu scale's sizes (ALBERT-base's H 768 -> 256, heads of 64) and recipe (LAMB 4e-3, bf16 on CUDA), run
    end to end with fine-tuning with only the device and precision pointed at the CPU: what a GPU session then
    finds wrong is the GPU's, not the scale's."""
    assert litebert_main(gpu_scale_in_seconds(tmp_path, "objective", "cpu")) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    sop = results["rows"]["SOP"]
    assert (sop["model"]["hidden_size"], sop["model"]["embedding_size"], sop["model"]["num_attention_heads"],
            sop["model"]["intermediate_size"], sop["model"]["num_hidden_layers"]) == (256, 128, 4, 1024, 4)
    assert list(sop["runs"]["12345"]["downstream"]) == list(SCALES["gpu"].finetune["tasks"]) == ["novel_authorship"]
    recipe = tmp_path / "rows" / slug("SOP") / "seed12345" / "pretrain.toml"
    train = tomllib.loads(recipe.read_text())["train"]
    assert (train["optimizer"], train["lr"], train["device"], train["precision"]) == ("lamb", 4e-3, "cpu", "fp32")
    assert "## The paper's comparisons" in (tmp_path / "report.md").read_text()


def test_verdicts_are_welch_tests_with_the_smallest_detectable_gap():
    """Checked against scipy's own Welch test, and against the three outcomes on hand-made seeds."""
    from scipy.stats import ttest_ind
    a, b = [0.31, 0.30, 0.33, 0.29, 0.32], [0.28, 0.27, 0.30, 0.29, 0.26]
    g = stats.gap([(1, stats.cell(a)), (-1, stats.cell(b))])
    assert stats.order_verdict(g)[1] == pytest.approx(ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    assert stats.order_verdict(g)[0] == "reproduced"
    # the smallest detectable gap: a true gap of that size is found with power 0.8 (simulated)
    rng = np.random.default_rng(0)
    sd, n = 0.02, 5
    mde = stats.detectable(stats.gap([(1, stats.Cell(0.0, sd, n)), (-1, stats.Cell(0.0, sd, n))]))
    found = np.mean([stats.order_verdict(stats.gap([(1, stats.cell(list(rng.normal(mde, sd, n)))),
                                                     (-1, stats.cell(list(rng.normal(0.0, sd, n))))]))[0]
                     == "reproduced" for _ in range(2000)])
    assert 0.74 < found < 0.86
    cell = stats.Cell(0.30, 0.01, 5)
    assert cell.half_width == pytest.approx(2.776 * 0.01 / 5 ** 0.5, rel=1e-3)  # t(0.975, 4)

    def results(values):  # row -> per-seed values of mlm_acc
        return {"rows": {name: {"paper": {}, "stats": {"mlm_acc": dataclasses.asdict(stats.cell(vs))}}
                         for name, vs in values.items()}, "chance": {}}

    claim = Claim("a > b", (("a", "b"),), "mlm_acc")
    assert judge(claim, results({"a": [0.30, 0.31, 0.32], "b": [0.20, 0.21, 0.22]}))["verdict"] == "reproduced"
    assert judge(claim, results({"a": [0.30, 0.20, 0.25], "b": [0.21, 0.25, 0.27]}))["verdict"] == "inconclusive"
    assert judge(claim, results({"a": [0.10, 0.11, 0.12], "b": [0.20, 0.21, 0.22]}))["verdict"] == "contradicted"
    one = judge(claim, results({"a": [0.3], "b": [0.2]}))
    assert one["verdict"] == "inconclusive" and one["pairs"][0]["verdict"] == "inconclusive (one seed)"
    assert judge(claim, results({"a": [0.3]}))["verdict"] == "not measured"
    pair = judge(claim, results({"a": [0.30, 0.20, 0.25], "b": [0.21, 0.25, 0.27]}))["pairs"][0]
    assert pair["detectable"] > abs(pair["ours"][0] - pair["ours"][1])  # why it is inconclusive
    near = Claim("a ~ b", (("a", "b"),), "mlm_acc", kind="near", tol=0.05)
    assert judge(near, results({"a": [0.30, 0.31, 0.30], "b": [0.30, 0.29, 0.31]}))["verdict"] == "reproduced"
    assert judge(near, results({"a": [0.50, 0.51, 0.50], "b": [0.30, 0.29, 0.31]}))["verdict"] == "contradicted"
    diff = Claim("a - b > c - d", (("a - b", "c - d"),), "mlm_acc")  # a difference adds the rows' variances
    judged = judge(diff, results({"a": [0.5, 0.6, 0.55], "b": [0.1, 0.1, 0.1], "c": [0.3, 0.3, 0.3],
                                  "d": [0.2, 0.2, 0.2]}))
    assert judged["pairs"][0]["ours"] == pytest.approx([0.45, 0.1]) and judged["verdict"] == "reproduced"
    three = Claim("a - b - c > d", (("a - b - c", "d"),), "mlm_acc")  # every term counted, none dropped
    judged = judge(three, results({"a": [0.5, 0.6, 0.55], "b": [0.1, 0.1, 0.1], "c": [0.3, 0.3, 0.3],
                                   "d": [0.2, 0.2, 0.2]}))
    assert judged["pairs"][0]["ours"] == pytest.approx([0.15, 0.2])


def test_the_spread_splits_into_pretraining_and_finetuning_seeds():
    rng = np.random.default_rng(1)
    groups = {str(p): list(0.5 + 0.05 * rng.normal() + 0.005 * rng.normal(size=4)) for p in range(6)}
    share = stats.spread_sources(groups)["pretraining_share"]
    assert share > 0.8  # the pretraining seed moves the score ten times more than the fine-tuning seed
    flat = {str(p): list(0.5 + 0.05 * rng.normal(size=4)) for p in range(6)}
    assert stats.spread_sources(flat)["pretraining_share"] < 0.5


def test_the_spread_reads_the_fine_tuning_seeds_as_crossed_not_nested():
    """Every checkpoint is fine-tuned with the same seeds, so a seed that helps helps each checkpoint alike. The
    one-way analysis took that shared effect for within-checkpoint noise and subtracted its share / r from the
    pretraining variance: here 0 where the pretraining seeds' variance is 2e-4 (a tenth of the total)."""
    pretrain = [0.0, 0.01, -0.01, 0.02, -0.02, 0.0]
    seed = [0.03, -0.03]  # fine-tuning seed 0 is better for every checkpoint
    groups = {str(i): [0.8 + p + s for s in seed] for i, p in enumerate(pretrain)}
    got = stats.spread_sources(groups)
    assert got["pretraining_variance"] == pytest.approx(np.var(pretrain, ddof=1), abs=1e-12)
    assert got["finetuning_seed_variance"] == pytest.approx(np.var(seed, ddof=1), abs=1e-12)
    assert got["residual_variance"] == pytest.approx(0.0, abs=1e-12)
    assert got["pretraining_share"] == pytest.approx(np.var(pretrain, ddof=1) / (np.var(pretrain, ddof=1)
                                                                                  + np.var(seed, ddof=1)))


def test_a_seed_that_scored_nan_splits_no_spread():
    """max(0, NaN) is 0: one NaN score made the pretraining and fine-tuning-seed variances a confident 0.0 (the
    report's "SD 0.0"), beside a NaN residual and share. Like one seed, it leaves nothing to split."""
    groups = {"1": [0.8, float("nan")], "2": [0.7, 0.75], "3": [0.9, 0.85]}
    assert stats.spread_sources(groups) is None
    assert stats.spread_sources({"1": [0.8, float("inf")], "2": [0.7, 0.75]}) is None
    assert stats.spread_sources({"1": [0.8, 0.8], "2": [0.8, 0.8]})["pretraining_share"] == 0.0  # constant: no spread


PAPER_TABLES = SHARED_DATA.parent / "paper" / "albert_tables.md"


@pytest.mark.skipif(not PAPER_TABLES.is_file(), reason="the shared paper tables are not on this machine")
def test_the_papers_numbers_are_quoted_as_printed():
    text = PAPER_TABLES.read_text()

    def table(number):  # the rows of "**Table N ..." as lists of cells
        block = text.split(f"**Table {number} ")[1].split("\n\n")[0]
        return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()
                if line.startswith("|") and not line.startswith("|---")][1:]

    def same(ours, theirs):
        return [str(ours.get(c)) if not isinstance(ours.get(c), float) else f"{ours[c]:g}" for c in ours] == \
            [t if not re.fullmatch(r"[\d.]+", t) else f"{float(t):g}" for t in theirs]

    for number, experiment, skip in ((3, "embedding", 2), (4, "sharing", 2), (5, "objective", 1), (11, "depth", 1),
                                     (12, "width", 1)):
        rows = EXPERIMENTS[experiment].rows
        printed = table(number)[:len(rows)]
        assert len(printed) == len(rows)
        for row, line in zip(rows, printed):
            assert same(dict(row.paper), line[skip:]), (experiment, row.name, line)
    for experiment in ("same-time", "data", "dropout"):  # quoted in prose: "..., 64.0, Avg 80.1"
        for row in EXPERIMENTS[experiment].rows:
            cells = [f"{v:g}" if isinstance(v, float) and v != int(v) else (f"{v:.1f}" if isinstance(v, float) else v)
                     for v in row.paper.values()]
            assert ", ".join(cells[:-1]) + ", Avg " + cells[-1] in text, (experiment, row.name)


def test_the_verb_takes_its_options_from_a_toml_table(tmp_path, capsys):
    toml = tmp_path / "run.toml"
    toml.write_text('[reproduce]\ncorpus = "no-such-corpus"\n')
    code = litebert_main(["reproduce", "objective", "--out", str(tmp_path / "g"), "--scale", "tiny",
                          "--config", str(toml)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no-such-corpus" in err and not (tmp_path / "g").exists()
    code = litebert_main(["reproduce", "objectives", "--out", str(tmp_path / "g")])
    assert code == 2 and "one of: embedding, sharing, objective" in capsys.readouterr().err


def test_set_derives_heads_ffn_and_a_tied_embedding_or_refuses():
    """--set model.hidden_size brings what depends on it (heads = H / head size, FFN = 4H as the paper's
    ratio, E = H in the rows that tie them), so an "E = H" row stays one."""
    exp, cpu = EXPERIMENTS["embedding"], SCALES["cpu"]
    tied = [r for r in exp.rows if AlbertConfig.from_preset(r.base or exp.base, **r.model).embedding_size ==
            AlbertConfig.from_preset(r.base or exp.base, **r.model).hidden_size]
    assert tied
    for row in exp.rows:
        m = scale_model(exp, row, cpu, 8000, {"hidden_size": 256})
        assert m["num_attention_heads"] == 256 // cpu.head_size and m["intermediate_size"] == 4 * 256
        if row in tied:
            assert m["embedding_size"] == 256
        else:
            assert m["embedding_size"] < 256
    layers = EXPERIMENTS["sharing"]
    with pytest.raises(ConfigError, match="varies embedding_size"):
        scale_model(exp, exp.rows[0], cpu, 8000, {"embedding_size": 64})
    by_name = {r.name: r for r in layers.rows}  # a layer count keeps each row's sharing: one group per layer
    assert scale_model(layers, by_name["E=128 not-shared"], cpu, 8000, {"num_hidden_layers": 6})["num_hidden_groups"] == 6
    assert scale_model(layers, by_name["E=128 all-shared"], cpu, 8000, {"num_hidden_layers": 6})["num_hidden_groups"] == 1


def test_set_cannot_unfactorize_a_row_that_factorizes_its_embedding():
    """--set model.hidden_size=64 at cpu would give Table 3's E=256 row E 96 > H 64, and its E=128 row E 64 = H,
    the E = H row's shape: the rows the table compares by E would collapse or invert without a word."""
    exp, cpu = EXPERIMENTS["embedding"], SCALES["cpu"]
    row = next(r for r in exp.rows if r.name == "all-shared E=256")
    with pytest.raises(ConfigError, match=r"row 'all-shared E=256' factorizes E below H .* E 96 >= H 64"):
        scale_model(exp, row, cpu, 8000, {"hidden_size": 64})
    depth = EXPERIMENTS["depth"]  # E set directly, at or above H
    with pytest.raises(ConfigError, match="E 128 >= H 128"):
        scale_model(depth, depth.rows[0], cpu, 8000, {"embedding_size": 128})
    assert scale_model(depth, depth.rows[0], cpu, 8000, {"embedding_size": 96})["embedding_size"] == 96


def test_a_suite_names_its_tasks_and_their_label_counts_or_is_refused(tmp_path, monkeypatch):
    """`name@N` fine-tunes on the task's first N training examples; a task the project does not bundle, or a
    count that is not one, is refused when the grid is made, before any row runs."""
    assert split_task("novel_authorship@539") == ("novel_authorship", 539) and split_task("x") == ("x", None)
    for bad in ("novel_authorship@0", "novel_authorship@ten"):
        with pytest.raises(ConfigError, match="NAME@N"):
            split_task(bad)
    grid = R.make_grid(R.ReproduceConfig(experiment=["data"], out=str(tmp_path)))
    assert grid.scale.finetune["tasks"] == ("novel_authorship",) and grid.finetune_seed_count == 2
    recipe = finetune_recipe(grid, "ckpt", "novel_authorship@539", "ft", 1)["finetune"]
    assert (recipe["task"], recipe["max_train_examples"]) == ("novel_authorship", 539)
    assert "max_train_examples" not in finetune_recipe(grid, "ckpt", "novel_authorship", "ft", 1)["finetune"]
    with pytest.raises(ConfigError, match="no bundled task 'novel_author'"):
        R.make_grid(R.ReproduceConfig(experiment=["data"], out=str(tmp_path), set=["finetune.tasks=novel_author@5"]))
    one = R.make_grid(R.ReproduceConfig(experiment=["data"], out=str(tmp_path), set=["finetune.tasks=novel_characters"]))
    assert one.scale.finetune["tasks"] == ("novel_characters",)  # a bare word is one task, not its letters
    R.reproduce(R.ReproduceConfig(experiment=["data"], out=str(tmp_path / "paper"), scale="paper",
                                  set=["finetune.tasks=SST-2@670"]))
    commands = (tmp_path / "paper" / "commands.sh").read_text()
    recipe = sorted((tmp_path / "paper" / "recipes" / "finetune").glob("*-seed12345-finetune_SST-2_670.toml"))[0]
    assert f"litebert finetune --config {recipe} --data-dir $GLUE_DIR/SST-2" in commands
    seen = []

    class Loaded(Exception):
        pass

    def fake_finetune(cfg, train_cfg):
        seen.append((cfg, train_cfg))
        raise Loaded
    monkeypatch.setattr(litebert.finetune, "finetune", fake_finetune)
    with pytest.raises(Loaded):  # the recipe as `litebert finetune` reads it, the directory from the command line
        litebert.finetune.cli(["--config", str(recipe), "--data-dir", "glue/SST-2"])
    (cfg, train_cfg), = seen
    assert (cfg.task, cfg.data_dir, cfg.max_train_examples, train_cfg.seed) == ("SST-2", "glue/SST-2", 670, 12345)
    assert train_cfg.out_dir.endswith("/seed12345/finetune_SST-2_670")


def test_a_fine_tuning_that_never_evaluated_stops_the_row_rather_than_scoring_nan(tmp_path):
    """A NaN score would average into the row and pass as an inconclusive verdict."""
    grid = R.make_grid(R.ReproduceConfig(experiment=["data"], out=str(tmp_path), scale="tiny", downstream=True))
    task = grid.scale.finetune["tasks"][0]
    ft_dir = tmp_path / "row" / G.finetune_dir_name(task)
    write_json(str(ft_dir / "summary.json"), {"primary_metric": "accuracy", "best": {}})
    with pytest.raises(LitebertError, match=r"summary.json has no best accuracy \(the run never evaluated"):
        R.downstream(grid, "checkpoint", str(tmp_path / "row"), 12345)


def test_a_row_says_where_it_is_while_it_runs(tmp_path, monkeypatch, capsys):
    """A row's child runs for minutes: its last log line is printed every HEARTBEAT_SECONDS."""
    monkeypatch.setattr(children, "HEARTBEAT_SECONDS", 0.2)
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c",
                                            "import time; print('step 5/10 loss 3.2', flush=True); time.sleep(1.0)"])
    children.run_verb("pretrain", [], str(tmp_path / "row" / "pretrain.log"))
    beats = [line for line in capsys.readouterr().out.splitlines() if "pretrain, " in line]
    assert len(beats) >= 2 and all(line.endswith("step 5/10 loss 3.2") for line in beats[1:])


def test_a_training_row_says_its_step_and_the_time_left(tmp_path, monkeypatch, capsys):
    """With the child's run directory the heartbeat reads its metrics log: the step reached, of how many, and
    the time left at the pace seen so far (the child logs nothing else while it trains)."""
    monkeypatch.setattr(children, "HEARTBEAT_SECONDS", 0.3)
    run_dir = tmp_path / "row" / "pretrain"
    run_dir.mkdir(parents=True)
    child = ("import json, sys, time\n"
             "for step in range(10, 210, 10):\n"
             "    with open(sys.argv[-1], 'a') as f: f.write(json.dumps({'step': step, 'loss': 1.0}) + '\\n')\n"
             "    time.sleep(0.1)\n")
    monkeypatch.setattr(children, "VERB_COMMAND", [sys.executable, "-c", child])
    children.run_verb("pretrain", [str(run_dir / "metrics.jsonl")], str(tmp_path / "row" / "pretrain.log"),
               progress=(str(run_dir), 1000))
    beats = [line for line in capsys.readouterr().out.splitlines() if "pretrain, " in line and " of 1000" in line]
    assert len(beats) >= 2, beats  # (a beat before the child's first step shows its log's last line instead)
    first, later = re.search(r"step (\d+) of 1000$", beats[0]), re.search(r"step (\d+) of 1000, ~(.+) left$", beats[-1])
    assert first and later and int(later.group(1)) > int(first.group(1)), beats
    assert later.group(2).endswith((" s", " min"))  # ~(1000 - step) steps at ~100 steps a second


@pytest.mark.slow
def test_pretraining_and_finetuning_seeds_are_varied_separately(data_dir, tmp_path, capsys, rows_in_process):
    """--seeds 2 --finetune-seeds 2: each checkpoint is fine-tuned with the same two seeds, and the report says
    how much of each task's spread comes from pretraining."""
    results = run(tmp_path, "data", data_dir, "--downstream", "--seeds", "2", "--finetune-seeds", "2")
    for entry in results["rows"].values():
        scores = [r["downstream"]["novel_authorship"]["scores"] for r in entry["runs"].values()]
        assert len(scores) == 2 and all(len(s) == 2 for s in scores)
        assert set(entry["spread_sources"]["novel_authorship"]) >= {"pretraining_share", "finetuning_variance"}
    assert "Where the downstream spread comes from" in (tmp_path / "report.md").read_text()
    assert len(list(tmp_path.rglob("finetune_novel_authorship_seed12346/summary.json"))) == 4  # 2 rows x 2 seeds


def test_a_row_on_both_sides_of_a_comparison_counts_its_variance_once():
    """'L12 - L6 vs L24 - L12' is 2 L12 - L6 - L24: L12's variance enters with coefficient 2^2."""
    l6, l12, l24 = stats.Cell(0.30, 0.02, 4), stats.Cell(0.33, 0.02, 4), stats.Cell(0.34, 0.02, 4)
    g = stats.gap([(1, l12), (-1, l6), (-1, l24), (1, l12)])
    assert g.value == pytest.approx(2 * 0.33 - 0.30 - 0.34)
    assert g.se == pytest.approx((6 * 0.02 ** 2 / 4) ** 0.5)


def test_a_claim_of_many_comparisons_is_not_decided_by_chance():
    """Contradicting one of a claim's k comparisons takes alpha / k (Bonferroni); reproducing the claim takes all
    k (intersection-union). Each comparison's two p-values are scipy's Welch tests both ways, and its two-way p
    is below 2 alpha exactly when it decides."""
    from scipy.stats import ttest_ind
    a, b = [0.30, 0.32, 0.31, 0.29, 0.33], [0.31, 0.33, 0.34, 0.32, 0.35]
    d = stats.order_verdict(stats.gap([(1, stats.cell(a)), (-1, stats.cell(b))]))
    assert d.p_against == pytest.approx(ttest_ind(a, b, equal_var=False, alternative="less").pvalue)
    assert d.verdict == "contradicted" and stats.ALPHA / 3 < d.p_against < stats.ALPHA  # p_against ~ 0.04

    def results(values):
        return {"rows": {name: {"paper": {}, "stats": {"mlm_acc": dataclasses.asdict(stats.cell(vs))}}
                         for name, vs in values.items()}, "chance": {}}

    level = {"c": [0.5, 0.6, 0.55], "d": [0.5, 0.6, 0.55], "e": [0.5, 0.6, 0.55], "f": [0.5, 0.6, 0.55]}
    three = Claim("a > b, c > d, e > f", (("a", "b"), ("c", "d"), ("e", "f")), "mlm_acc")
    judged = judge(three, results({"a": a, "b": b, **level}))
    assert [p["verdict"] for p in judged["pairs"]] == ["contradicted", "inconclusive", "inconclusive"]
    assert judged["verdict"] == "inconclusive"  # 0.04 is not below 0.05 / 3
    far = [v + 0.05 for v in b]
    assert judge(three, results({"a": a, "b": far, **level}))["verdict"] == "contradicted"
    ahead = {"a": far, "b": a, "c": far, "d": a, "e": far, "f": a}
    assert judge(three, results(ahead))["verdict"] == "reproduced"
    assert judge(three, results({**ahead, "f": far}))["verdict"] == "inconclusive"  # one of three short
    # near: against it, the one-sided test that the gap lies beyond the tolerance on its side
    near = stats.near_verdict(stats.gap([(1, stats.cell([0.50, 0.51, 0.50])), (-1, stats.cell([0.30, 0.29, 0.31]))]),
                              0.05)
    assert near.verdict == "contradicted" and near.p_against < stats.ALPHA < near.p
    rng = np.random.default_rng(2)
    for _ in range(200):
        g = stats.gap([(1, stats.cell(list(rng.normal(rng.normal(0, 0.02), 0.02, 4)))),
                       (-1, stats.cell(list(rng.normal(0, 0.02, 4))))])
        for d in (stats.order_verdict(g), stats.near_verdict(g, 0.01)):
            assert (stats.decision_p(d) < 2 * stats.ALPHA) == (d.verdict != "inconclusive")
    # Benjamini-Hochberg: the i-th smallest of m p-values times m / i, made monotone; Benjamini-Yekutieli pays more
    ps = [0.01, 0.04, 0.03, 0.20]
    assert stats.false_discovery_q(ps) == pytest.approx([0.01 * 4, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.20])
    assert all(y > h for y, h in zip(stats.false_discovery_q(ps, "by"), stats.false_discovery_q(ps)))


def test_the_summary_page_judges_finished_grids_and_names_those_in_progress(tmp_path, monkeypatch):
    """scripts/paper_verdicts.py: an unfinished grid is listed with its count of finished runs, and each of its
    verdicts says so; a grid with runs taken from another names it."""
    import runpy
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    finished = json.loads(open(os.path.join(repo, "docs", "paper", "dropout", "results.json")).read())
    partial = json.loads(json.dumps(finished))
    partial["rows"]["with dropout"]["runs"].popitem()
    shared = json.loads(json.dumps(finished))
    shared["rows"]["with dropout"]["runs"]["12345"]["reused"] = {"grid": "docs/paper/dropout", "row": "with dropout"}
    for name, results in (("dropout", finished), ("dropout_more", partial), ("dropout_shared", shared)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    monkeypatch.setattr(sys, "argv", ["paper_verdicts.py", "--docs", str(tmp_path)])
    runpy.run_path(os.path.join(repo, "scripts", "paper_verdicts.py"), run_name="__main__")
    page = (tmp_path / "verdicts.md").read_text()
    assert "judged on the runs finished so far (a comparison with a row not run is not measured): dropout_more/ " \
           "(9 of 10 row runs)." in page
    assert "| Table 8 | removing dropout helps |" in page
    assert "| Table 8 (dropout_more/) (unfinished: 9 of 10 row runs) | removing dropout helps |" in page
    assert "| Table 8 (dropout_shared/) (rows shared with dropout/) | removing dropout helps |" in page
    tested, distinct, decided = map(int, re.search(
        r"(\d+) comparisons were tested, (\d+) of them distinct .*?; (\d+) of the distinct decided", page).groups())
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in page.split("## Comparisons")[1].splitlines()
            if line.startswith("| Table")]
    assert tested == sum(re.fullmatch(r"[\d.]+", row[8]) is not None for row in rows) > 0  # a measured one's q
    # dropout_shared/ repeats dropout/'s comparisons on the same runs: one piece of evidence each, one q
    assert distinct == len({tuple(row[3:]) for row in rows if row[8] != "-"}) < tested
    assert decided == len({tuple(row[3:]) for row in rows if row[4] in ("**reproduced**", "**contradicted**")})
    claims = page.split("## Claims")[1].split("## Comparisons")[0]
    assert "| Table 8 (dropout_more/) (unfinished: 9 of 10 row runs) | removing dropout helps | avg |" in claims


def test_the_time_spent_names_where_runs_were_made_and_counts_those_without_a_record():
    from litebert.paper.report import _time_spent
    spent = {"A": {"1": {"seconds": 1800}, "2": {"seconds": 1800, "machine": "CPU X", "threads": 1, "at_once": 2}}}
    line = _time_spent(spent, finished=3)
    assert line.startswith("**Time spent.** 2 row runs, 1.0 hours of row time")
    assert "1 thread(s) each, 2 at once, on CPU X" in line
    assert "1 of them recorded their time alone" in line and "1 finished run(s) recorded no time" in line
    assert _time_spent({}, finished=2) == ""
    torchrun = {"A": {"1": {"seconds": 60, "machine": "CPU X", "threads": 1, "at_once": 1, "processes": 2}}}
    assert "2 processes of 1 thread(s) each, 1 at once, on CPU X" in _time_spent(torchrun, finished=1)


def test_the_time_left_weighs_the_runs_to_come_by_their_models_arithmetic(tmp_path, monkeypatch, capsys):
    """Table 12's widths differ tenfold in cost: after the narrowest row's run, the time left is the runs to
    come at their own cost, not the first run's duration times their count."""
    grid = R.make_grid(R.ReproduceConfig(experiment=["width"], out=str(tmp_path)))
    monkeypatch.setattr(grid.data, "vocab_size", lambda: 8000)
    rows = list(grid.exp.rows)
    tally = R._Tally(grid, [(r, 1) for r in rows], {r.name: 2000 for r in rows}, 1)
    costs = [R._cost(grid, r, 2000) for r in rows]
    assert costs == sorted(costs) and costs[-1] > 8 * costs[0]
    tally.start(rows[0], 1, 2000)
    tally.done(R.ALONE, 60.0, {"row": rows[0].name, "mlm_acc": 0.1, "sop_acc": 0.5})
    capsys.readouterr()
    tally.start(rows[1], 1, 2000)
    assert f"~{children.minutes(60 * sum(costs[1:]) / costs[0])} left)" in capsys.readouterr().out


def test_a_grid_takes_the_runs_another_grid_already_made_and_says_so(data_dir, tmp_path, capsys, counted_rows):
    """Figure 2's baseline and its added-data curve are Table 7's two rows (the same recipe, data and seeds):
    with --reuse, the curves grid trains only its dropout row, its other cells are Table 7's runs to the digit,
    and its report names where they came from and counts only its own run's time. A grid of other settings
    takes nothing; a directory that holds no grid, the grid's own, or runs that recorded no identity, is refused
    before anything is written, as is --reuse at the paper scale."""
    seeds = ("--seeds", "2")
    data = run(tmp_path / "data", "data", data_dir, *seeds)
    source = os.path.relpath(tmp_path / "data")
    counted_rows.trained.clear()
    curves = run(tmp_path / "curves", "curves", data_dir, *seeds, "--reuse", str(tmp_path / "data"))
    assert sorted(counted_rows.trained) == [("with dropout", 12345), ("with dropout", 12346)]
    out = capsys.readouterr().out
    assert f"curves: 4 finished row run(s) taken from {source}" in out and "kept (their result.json)" not in out
    for ours, theirs in [("baseline", "no additional data"), ("with additional data", "with additional data")]:
        for seed, taken in curves["rows"][ours]["runs"].items():
            original = data["rows"][theirs]["runs"][seed]
            assert taken.pop("reused") == {"grid": source, "row": theirs, "checkpoint": original["checkpoint"]}
            assert taken.pop("row") == ours and taken.pop("checkpoint") is None
            assert taken == {k: v for k, v in original.items() if k not in ("row", "checkpoint")}
    assert {r["identity"] for r in curves["rows"]["with dropout"]["runs"].values()}.isdisjoint(
        r["identity"] for e in data["rows"].values() for r in e["runs"].values())
    page = (tmp_path / "curves" / "report.md").read_text()
    assert f"baseline: 2 run(s) of `{source}` row 'no additional data'" in page
    assert "**Time spent.** 2 row runs" in page and "recorded no time" not in page

    counted_rows.trained.clear()
    run(tmp_path / "longer", "curves", data_dir, "--reuse", str(tmp_path / "data"), steps=3)
    assert len(counted_rows.trained) == 3  # other steps: another recipe, nothing taken

    old = tmp_path / "old"
    shutil.copytree(tmp_path / "data", old)
    results = json.loads((old / "results.json").read_text())
    for entry in results["rows"].values():
        for run_ in entry["runs"].values():
            del run_["identity"]
    (old / "results.json").write_text(json.dumps(results))
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "results.json").write_text("{")
    refused = tmp_path / "refused"
    for argv, message in [
            (["--reuse", str(tmp_path / "nothing")], "no results.json of a litebert reproduce grid there"),
            (["--reuse", str(tmp_path / "corrupt")], "its results.json cannot be read"),
            (["--reuse", str(old)], "none of its runs records the identity a run is matched by"),
            (["--reuse", str(refused)], "that is this grid's own directory"),
            (["--scale", "paper", "--reuse", str(tmp_path / "data")], "the paper scale's runs are made by its")]:
        assert litebert_main([*argv_for(refused, "curves", data_dir), *argv]) == 2
        assert message in capsys.readouterr().err and not refused.exists()


def test_a_data_dir_made_from_other_text_or_settings_is_refused(data_dir, tmp_path, capsys, rows_in_process):
    """Grids share a --data-dir only where their corpus, data settings and seed agree: a grid of another seed, or
    another additional text, would otherwise train on the first grid's tokenizer and pairs unseen."""
    run(tmp_path / "first", "data", data_dir)
    for argv, what in [(argv_for(tmp_path / "a", "data", data_dir, "--seed", "7"), "another seed"),
                       ([*argv_for(tmp_path / "b", "data", data_dir)[:-2], "--extra-corpus",
                         str(DATA) + "/en_small.txt.gz", "--set", "train.max_steps=2"], "another extra")]:
        assert litebert_main(argv) == 2
        assert f"{data_dir} holds data made with {what} than this grid's; give another --data-dir" in \
            capsys.readouterr().err and not os.path.exists(argv[3])  # nothing in --out
    no_extra = ["reproduce", "data", "--out", str(tmp_path / "c"), "--scale", "tiny", "--data-dir", data_dir]
    assert litebert_main(no_extra) == 2
    assert "this experiment adds text: give it with --extra-corpus" in capsys.readouterr().err


def test_the_gpu_scale_replays_cuda_graphs_in_one_process_and_not_under_torchrun(tmp_path):
    """The gpu scale's steps are launch-bound (a row's run took 2.4 min on an H100, four at once), so both of its
    recipes capture CUDA graphs; with --nproc-per-node N > 1 they cannot (DDP's all-reduce), and run eager."""
    def recipes(nproc: int) -> tuple[dict, dict]:
        grid = R.make_grid(R.ReproduceConfig(experiment=["sharing"], out=str(tmp_path), scale="gpu",
                                             nproc_per_node=nproc))
        return train_table(grid, "run", 1), finetune_recipe(grid, "ckpt", "novel_authorship", "ft", 1)["train"]
    pretrain, finetune = recipes(1)
    assert pretrain["cuda_graphs"] is finetune["cuda_graphs"] is True
    assert (pretrain["device"], finetune["precision"]) == ("cuda", "bf16")
    pretrain, finetune = recipes(2)
    assert pretrain["cuda_graphs"] is finetune["cuda_graphs"] is False


def test_a_seed_that_scored_nan_decides_nothing_whatever_the_order_of_the_comparisons():
    """A NaN score made every p-value NaN: the comparison passed as "inconclusive" and its claim's verdict hung
    on the order of its comparisons (min() over [nan, 0.001] is nan, over [0.001, nan] 0.001)."""
    nan = float("nan")
    broken = stats.gap([(1, stats.cell([0.5, nan])), (-1, stats.cell([0.40, 0.41]))])
    against = stats.order_verdict(stats.gap([(1, stats.cell([0.10, 0.11, 0.12])), (-1, stats.cell([0.30, 0.31, 0.32]))]))
    for decision in (stats.order_verdict(broken), stats.near_verdict(broken, 0.05)):
        assert decision == ("inconclusive (not a number)", None, None)
        assert stats.claim_verdict([decision, against], 2) == stats.claim_verdict([against, decision], 2) \
            == "contradicted"
    assert stats.detectable(broken) is None and stats.decision_p(stats.order_verdict(broken)) is None

    def results(values):
        return {"rows": {name: {"paper": {}, "stats": {"mlm_acc": dataclasses.asdict(stats.cell(vs))}}
                         for name, vs in values.items()}, "chance": {}}

    from litebert.paper.report import _pair_text
    judged = judge(Claim("a > b", (("a", "b"),), "mlm_acc"), results({"a": [0.5, nan], "b": [0.40, 0.41]}))
    assert judged["verdict"] == "inconclusive"
    assert _pair_text("mlm_acc", judged["pairs"][0], "order").endswith("-> inconclusive (not a number)")


def test_a_contradicted_comparison_prints_the_p_that_contradicts_it():
    """A contradicted pair's line printed the p of the paper's ordering (about 1) beside "contradicted"; the p that
    decided is the opposite ordering's."""
    from litebert.paper.report import _pair_text

    def results(values):
        return {"rows": {name: {"paper": {}, "stats": {"mlm_acc": dataclasses.asdict(stats.cell(vs))}}
                         for name, vs in values.items()}, "chance": {}}

    pair = judge(Claim("a > b", (("a", "b"),), "mlm_acc"),
                 results({"a": [0.10, 0.11, 0.12], "b": [0.30, 0.31, 0.32]}))["pairs"][0]
    assert pair["verdict"] == "contradicted" and pair["p"] > 0.99 and pair["p_against"] < 0.001
    line = _pair_text("mlm_acc", pair, "order")
    assert f"p against {pair['p_against']:.3g}," in line and f"p {pair['p']:.3g}" not in line
    reproduced = judge(Claim("b > a", (("b", "a"),), "mlm_acc"),
                       results({"a": [0.10, 0.11, 0.12], "b": [0.30, 0.31, 0.32]}))["pairs"][0]
    assert f", p {reproduced['p']:.3g}," in _pair_text("mlm_acc", reproduced, "order")


def test_no_proxy_stands_in_for_a_claim_the_papers_own_mlm_accuracy_orders_the_other_way():
    """Table 5's "SOP gives the best downstream average" was also judged on held-out MLM accuracy as a proxy, SOP
    > NSP and SOP > None, beside the paper's own MLM accuracy of those rows (54.0 vs 54.5, 54.0 vs 54.9) and the
    same report's claim that None > SOP on it: a result against the paper counted for it, and the other way."""

    def results(experiment):
        seeds = {"avg": [0.80, 0.81, 0.82], "mlm_acc": [0.50, 0.51, 0.52]}
        return {"rows": {row.name: {"paper": dict(row.paper), "stats": {
            m: dataclasses.asdict(stats.cell([v + 0.01 * i for v in vs])) for m, vs in seeds.items()}}
            for i, row in enumerate(EXPERIMENTS[experiment].rows)}, "chance": {}}

    best = next(c for c in EXPERIMENTS["objective"].claims if c.metric == "avg")
    judged = judge(best, results("objective"))
    assert "proxy" not in judged and "SOP 54.0 vs NSP 54.5, SOP 54.0 vs None 54.9" in judged["no_proxy"]
    from litebert.paper.report import _claim_lines
    assert any(line.startswith("  - no proxy on held-out MLM accuracy: the paper's own") for line in _claim_lines(judged))
    for experiment in ("embedding", "depth"):  # the paper prints no MLM accuracy there: the proxy stays
        assert all("proxy" in judge(c, results(experiment)) for c in EXPERIMENTS[experiment].claims if c.metric == "avg")
