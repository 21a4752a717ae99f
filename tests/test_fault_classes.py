"""Issue 33: one guard per class of failure, and a harness that tries every verb with every class.

The classes (docs/faults.md, "Classes of bad input"): numeric options outside their meaning, non-finite outputs,
line-oriented input (row i = line i), training data a model cannot learn from, resuming with other settings,
a full disk in any library's writer. Each part below runs the verbs on generated bad inputs of one class and
asserts the class's invariant: a one-line refusal (exit 2) or a counted skip, rows aligned, no NaN in any
output, no earlier result changed by a refused run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import importlib
import io
import json
import os
import pkgutil
import re
import shutil
import typing
from pathlib import Path

import pytest
import test_faults
import torch
from test_faults import debris

import litebert
from litebert import evaluate, files
from litebert.cli import VERBS
from litebert.cli import main as litebert_main
from litebert.errors import ConfigError, LitebertError, NonFiniteError
from litebert.files import atomic_open, write_dir_atomically
from litebert.finetune import FinetuneConfig, check_out_dir
from litebert.runconfig import _unwrap_optional, dump_toml, parse_range, resolve_config
from litebert.training import sweep
from litebert.training.train_config import CONFIG_NAME, TrainConfig

# test_faults' module fixtures, built once for this module too: a tokenizer, a tiny model, a finished 4-step run
root, tok_dir, model_dir, finished_run = (test_faults.root, test_faults.tok_dir, test_faults.model_dir,
                                          test_faults.finished_run)


def one_line(argv, capsys) -> str:
    """Run a verb that must be refused with one line (exit 2); return the line."""
    code = litebert_main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err.strip()


# ============================================================================ options outside their meaning

# Config classes whose numeric fields may go without a declared range: none left.
RANGES_OPEN: set[str] = set()


def config_classes() -> list[type]:
    """Every dataclass in litebert whose fields carry help text: the verbs' option classes."""
    found = {}
    for info in pkgutil.walk_packages(litebert.__path__, "litebert."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == info.name \
                    and any("help" in f.metadata for f in dataclasses.fields(obj)):
                found[obj.__qualname__] = obj
    return list(found.values())


def numeric_fields(cls: type):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, _ = _unwrap_optional(hints[f.name])
        if typing.get_origin(kind) is list:
            kind = (typing.get_args(kind) or (None,))[0]
        if kind in (int, float):
            yield f


def test_every_numeric_option_declares_its_valid_range():
    classes = config_classes()
    assert len(classes) >= 15, [c.__name__ for c in classes]
    missing = [f"{cls.__name__}.{f.name}" for cls in classes if cls.__name__ not in RANGES_OPEN
               for f in numeric_fields(cls) if "range" not in f.metadata]
    assert not missing, f"numeric options without a declared range: {missing}"
    for cls in classes:  # every declared range parses, and every default is inside it
        for f in numeric_fields(cls):
            if "range" in f.metadata:
                parse_range(f.metadata["range"])
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                resolve_config(cls, {}, {f.name: default}) if default is not None else None


BAD_FLAGS = [  # (argv, what the one line must say); each refused before any file is read
    (["finetune", "--beta1", "1.5"], "--beta1 must be in [0, 1), got 1.5"),
    (["finetune", "--beta2", "nan"], "--beta2 must be in [0, 1), got nan"),
    (["finetune", "--lr", "inf"], "--lr must be in [0, inf), got inf"),
    (["finetune", "--doc-stride", "0"], "--doc-stride must be in [1, inf), got 0"),
    (["finetune", "--max-train-examples", "-3"], "--max-train-examples must be in [1, inf), got -3"),
    (["finetune", "--dropout", "1.0"], "--dropout must be in [0, 1), got 1.0"),
    (["finetune", "--warmup-steps", "50", "--max-steps", "10"], "--warmup-steps 50 exceeds --max-steps 10"),
    (["finetune", "--task", "wordnet_qa", "--max-length", "64"], "--max-query-length 64 + 3 special tokens"),
    (["evaluate", "--eval-batch-size", "0"], "--eval-batch-size must be in [1, inf), got 0"),
    (["predict", "--top-k", "0"], "--top-k must be in [1, inf), got 0"),
    (["export", "--verify-samples", "0"], "--verify-samples must be in [1, inf), got 0"),
    (["export", "--min-agreement", "1.5"], "--min-agreement must be in [0, 1], got 1.5"),
    (["pretrain", "--held-out", "-1"], "--held-out must be in [1, inf), got -1"),
    (["prepare", "--masked-lm-prob", "2"], "--masked-lm-prob must be in (0, 1], got 2.0"),
    (["prepare", "--max-seq-length", "2"], "--max-seq-length must be in [4, 65536], got 2"),
    (["tokenizer", "--vocab-size", "3"], "--vocab-size must be in [6, inf), got 3"),
    (["embed", "--scale", "0"], "--scale must be in (0, inf), got 0.0"),
    (["ensemble", "--top", "0"], "--top must be in [1, inf), got 0"),
    (["analyze", "--max-sentences", "0"], "--max-sentences must be in [1, inf), got 0"),
    (["reproduce", "--seeds", "0"], "--seeds must be in [1, inf), got 0"),
    (["extend-vocab", "--max-pieces", "0"], "--max-pieces must be in [1, inf), got 0"),
    (["demo", "--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
    (["serve", "--model", "m", "--port", "70000"], "--port must be in [0, 65535], got 70000"),
    (["serve", "--model", "m", "--max-wait-ms", "nan"], "--max-wait-ms must be in [0, inf), got nan"),
]


@pytest.mark.parametrize("argv,words", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_a_numeric_flag_outside_its_range_is_one_line_before_any_work(argv, words, capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = one_line(argv, capsys)
    assert words in line, line
    assert list(tmp_path.iterdir()) == [], "a refused run wrote something"


def test_the_same_ranges_hold_for_values_read_from_toml(tmp_path, capsys):
    toml = tmp_path / "r.toml"
    toml.write_text("[train]\nbeta1 = 1.5\n")
    line = one_line(["finetune", "--config", str(toml)], capsys)
    assert "[train]: beta1 must be in [0, 1), got 1.5" in line
    with pytest.raises(ConfigError, match="warmup_steps must be in"):
        resolve_config(TrainConfig, {"warmup_steps": -1})


def test_a_recipe_warmup_is_scaled_to_a_shorter_run_not_refused():
    from litebert.finetune import parse_args
    _, train = parse_args(["--task", "novel_authorship", "--max-steps", "20"])
    assert 0 < train.warmup_steps < 20  # the recipe's share of warmup (60 of 600), not its 60 steps
    _, train = parse_args(["--task", "novel_authorship"])
    assert (train.max_steps, train.warmup_steps) == (600, 60)



def test_the_recipe_warmup_follows_max_steps_from_a_toml_a_resume_keeps_its_own_and_a_swept_one_is_refused(
        tmp_path):
    """The recipe's warmup was scaled only for a --max-steps flag: [train] max_steps = 20 in a TOML was refused
    over a warmup of 60 nobody set; a resume extending --max-steps was refused for the warmup that rescaling
    changed; and each run of a grid over --max-steps got the first value's warmup (now refused without a warmup
    of the user's: a flag, or --config's [train], which the check once missed)."""
    from litebert.finetune import cli, parse_args
    toml = tmp_path / "run.toml"
    toml.write_text("[train]\nmax_steps = 20\n")
    _, train = parse_args(["--task", "novel_authorship", "--config", str(toml)])
    assert train.warmup_steps == parse_args(["--task", "novel_authorship", "--max-steps", "20"])[1].warmup_steps
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train_config.toml").write_text("[train]\nmax_steps = 2\nwarmup_steps = 0\n")
    _, train = parse_args(["--task", "novel_authorship", "--max-steps", "30", "--resume", "--out-dir",
                           str(tmp_path / "run")])
    assert (train.max_steps, train.warmup_steps) == (30, 0)
    with pytest.raises(ConfigError, match="sweeping --max-steps needs --warmup-steps"):
        cli(["--task", "novel_authorship", "--max-steps", "600", "20", "--out-dir", str(tmp_path / "grid")])
    toml.write_text("[train]\nwarmup_steps = 5\n")  # a warmup in --config's [train] is one the user set
    with pytest.raises(LitebertError) as refused:  # past that check, to the next thing missing
        cli(["--task", "novel_authorship", "--config", str(toml), "--max-steps", "600", "20", "--out-dir",
             str(tmp_path / "grid")])
    assert str(refused.value).startswith("--model is required")


# ================================================================================ resuming with other settings

def _grid_dir(tmp_path, lr=1e-3, seeds=(1,)):
    """A grid whose every run finished (train_config.toml and summary.json as `litebert finetune` leaves them)."""
    cfg = FinetuneConfig(model="m", data_dir="d", task="table", text_columns=["text"])
    train_cfg = TrainConfig(out_dir=str(tmp_path / "grid"), progress=False, lr=lr)
    runs = sweep.grid_runs(cfg, train_cfg, {}, list(seeds))
    for run in runs:
        os.makedirs(run.train_cfg.out_dir)
        Path(run.train_cfg.out_dir, CONFIG_NAME).write_text(
            dump_toml({"train": run.train_cfg, "finetune": dataclasses.asdict(run.cfg)}))
        Path(run.train_cfg.out_dir, "summary.json").write_text(json.dumps({"primary_metric": "accuracy"}))
    return cfg, train_cfg


def test_a_finished_grid_rerun_with_other_settings_is_refused_by_name(tmp_path):
    cfg, train_cfg = _grid_dir(tmp_path)
    trained = []
    train = lambda c, t: trained.append(t) or {}  # noqa: E731
    run = sweep.grid_runs(cfg, train_cfg, {}, [1])[0]
    assert sweep.run_once(run, train)[1] == "kept"  # the same settings: kept
    for change, words in [(dict(lr=2e-3), "--lr 0.002 (was 0.001)"), (dict(max_steps=7), "--max-steps 7 (was 1000)")]:
        other = sweep.grid_runs(cfg, dataclasses.replace(train_cfg, **change), {}, [1])[0]
        with pytest.raises(ConfigError, match="made with other settings") as e:
            sweep.run_once(other, train)
        assert words in str(e.value)
    other = sweep.grid_runs(dataclasses.replace(cfg, max_length=16), train_cfg, {}, [1])[0]
    with pytest.raises(ConfigError, match=r"--max-length 16 \(was none\)"):
        sweep.run_once(other, train)
    # what does not decide the result (where it runs, how often it logs or saves) does not matter
    same = sweep.grid_runs(cfg, dataclasses.replace(train_cfg, log_every=1, keep_last=9, device="cpu"), {}, [1])[0]
    assert sweep.run_once(same, train)[1] == "kept" and trained == []


@pytest.mark.parametrize("argv,words", [
    (["--seeds", "1", "1"], "--seeds gives 1 more than once"),
    (["--seeds", "1", "--lr", "1e-3", "1e-3"], "--lr gives 1e-3 more than once"),
])
def test_a_seed_or_swept_value_given_twice_is_refused(argv, words):
    with pytest.raises(ConfigError, match=words):
        sweep.split_argv(argv, sweep.sweepable_fields(FinetuneConfig, TrainConfig))
    cfg = FinetuneConfig(model="m", data_dir="d")
    with pytest.raises(ConfigError, match="more than once"):  # 1e-3 and 0.001 are one run
        sweep.grid_runs(cfg, TrainConfig(progress=False), {"lr": [1e-3, 0.001]}, [1])


def test_resume_into_a_directory_holding_only_a_best_is_refused(tmp_path):
    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    cfg = FinetuneConfig(model="m", data_dir="d", task="table", text_columns=["text"])
    train_cfg = TrainConfig(out_dir=str(out), resume=True, progress=False)
    with pytest.raises(ConfigError, match="holds a best/ but no checkpoint"):
        check_out_dir(cfg, train_cfg)
    (out / CONFIG_NAME).write_text(dump_toml({"train": dataclasses.replace(train_cfg, lr=0.5),
                                              "finetune": dataclasses.asdict(cfg)}))
    with pytest.raises(ConfigError, match=r"--lr 0.0001 \(was 0.5\)"):
        check_out_dir(cfg, train_cfg)
    (out / CONFIG_NAME).write_text(dump_toml({"train": train_cfg, "finetune": dataclasses.asdict(cfg)}))
    check_out_dir(cfg, train_cfg)  # the same run, killed before its first checkpoint: resumed
    check_out_dir(dataclasses.replace(cfg, overwrite=True), dataclasses.replace(train_cfg, lr=0.5))


def test_a_single_run_resumed_with_other_settings_is_refused_by_name_but_may_be_extended(finished_run, model_dir,
                                                                                          capsys, tmp_path):
    """finetune --resume from checkpoints made with another --lr would go on as a run of neither: refused by
    name before any work; a higher --max-steps extends the run (the one setting a single run's resume may
    change)."""
    data, run, _ = finished_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    before = test_faults.tree(out)
    argv = ["finetune", "--model", str(model_dir), "--task", "table", "--data-dir", str(data), "--text-columns",
            "text", "--max-length", "32", "--eval-batch-size", "8", "--max-steps", "4", "--batch-size", "4",
            "--eval-every", "2", "--save-every", "2", "--optimizer", "adamw", "--lr", "0.002", "--device", "cpu",
            "--out-dir", str(out), "--resume", "--no-progress"]
    line = one_line(argv, capsys)
    assert "--lr 0.002 (was 0.001)" in line and "only --max-steps may change" in line, line
    assert test_faults.tree(out) == before
    line = one_line([a if a != "0.002" else "0.001" for a in argv] + ["--seed", "7"], capsys)
    assert "--seed 7 (was 12345)" in line, line
    from litebert.finetune import finetune
    summary = finetune(*test_faults.finetune_configs(model_dir, data, out, resume=True, max_steps=6))
    assert summary["steps"] == 6 and (out / "step_6").is_dir()


def test_a_pretraining_run_resumed_with_other_settings_is_refused_before_its_data_is_read(tmp_path):
    from litebert.pretrain import PretrainConfig, pretrain
    out = tmp_path / "pre"
    (out / "step_2").mkdir(parents=True)
    (out / "step_2" / "COMPLETE").write_text("{}")
    cfg, train_cfg = PretrainConfig(data=str(tmp_path / "no-data")), TrainConfig(out_dir=str(out), lr=1e-3,
                                                                                   resume=True, progress=False)
    (out / CONFIG_NAME).write_text(dump_toml({"train": train_cfg, "pretrain": dataclasses.asdict(cfg)}))
    for change, words in [(dict(lr=2e-3), "--lr 0.002 (was 0.001)"), (dict(batch_size=7), "--batch-size 7 (was")]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            pretrain(cfg, dataclasses.replace(train_cfg, **change))
    with pytest.raises(ConfigError, match=re.escape("--held-out 5 (was 1000)")):
        pretrain(dataclasses.replace(cfg, held_out=5), train_cfg)
    sweep.refuse_changed_resume(cfg, dataclasses.replace(train_cfg, max_steps=10 ** 6), "pretrain")  # extended
    sweep.refuse_changed_resume(cfg, dataclasses.replace(train_cfg, lr=0.5, resume=False), "pretrain")  # no resume


def test_sentence_encoder_and_distillation_runs_resumed_with_other_settings_are_refused(tmp_path):
    """embed --train and embed --distill resume through the same check, before the model or data is read."""
    from litebert.embed import SentenceConfig, train_sentence_encoder
    from litebert.sentences.distill import DistillConfig, train_distilled
    out = tmp_path / "s"
    (out / "step_2").mkdir(parents=True)
    (out / "step_2" / "COMPLETE").write_text("{}")
    sentence = SentenceConfig(model=str(tmp_path / "no-model"), train=str(tmp_path / "no-pairs"), scale=20.0)
    distill = DistillConfig(distill=str(tmp_path / "no-teacher"))
    train_cfg = TrainConfig(out_dir=str(out), lr=1e-3, resume=True, progress=False)
    (out / CONFIG_NAME).write_text(dump_toml({"train": train_cfg, "sentence": dataclasses.asdict(sentence),
                                              "distill": dataclasses.asdict(distill)}))
    with pytest.raises(ConfigError, match=re.escape("--scale 5.0 (was 20.0)")):
        train_sentence_encoder(dataclasses.replace(sentence, scale=5.0), train_cfg)
    with pytest.raises(ConfigError, match=re.escape("--lr 0.002 (was 0.001)")):
        train_distilled(sentence, distill, dataclasses.replace(train_cfg, lr=2e-3))
    with pytest.raises(ConfigError, match=re.escape("--distill")):
        train_distilled(sentence, dataclasses.replace(distill, distill=str(tmp_path / "other")), train_cfg)


# ====================================================================================== non-finite outputs

def overflowing(best: Path, dst: Path) -> Path:
    """A copy of a fine-tuned model whose weights are finite but whose outputs overflow to inf/NaN."""
    from safetensors.torch import load_file, save_file
    shutil.copytree(best, dst)
    state = load_file(dst / "model.safetensors")
    state["albert.embeddings.word_embeddings.weight"].fill_(3e38)
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@pytest.fixture(scope="module")
def nan_best(finished_run, tmp_path_factory) -> Path:
    return overflowing(finished_run[1] / "best", tmp_path_factory.mktemp("nan") / "best")


def test_predict_on_raw_text_refuses_nan_outputs_instead_of_writing_them(nan_best, finished_run, capsys, tmp_path):
    out = tmp_path / "p.jsonl"
    line = one_line(["predict", "--model", str(nan_best), "--text", "the sea was calm", "--out", str(out)], capsys)
    assert "NaN or infinite for 1 of 1 inputs" in line and str(nan_best) in line
    assert not out.exists() or "NaN" not in out.read_text()
    from litebert.serving.pipeline import pipeline  # the library's pipeline (and serve, which calls it) too
    with pytest.raises(NonFiniteError):
        pipeline("text-classification", str(nan_best))(["a", "b"])


def test_an_ensemble_refuses_a_member_with_nan_outputs_by_name(nan_best, finished_run, capsys, tmp_path):
    data, run, _ = finished_run
    line = one_line(["ensemble", "--models", str(run / "best"), str(nan_best), "--task", "table", "--data-dir",
                     str(data), "--text-columns", "text", "--max-length", "32", "--split", "none", "--out",
                     str(tmp_path / "ens")], capsys)
    assert "NaN or infinite" in line and str(nan_best) in line
    assert not (tmp_path / "ens" / "ensemble.json").exists()


def test_evaluate_and_predict_on_a_split_refuse_nan_outputs(nan_best, finished_run, capsys, tmp_path):
    data = finished_run[0]
    common = ["--model", str(nan_best), "--task", "table", "--data-dir", str(data), "--text-columns", "text",
              "--max-length", "32"]
    assert "NaN or infinite" in one_line(["evaluate", *common, "--split", "dev"], capsys)
    out = tmp_path / "pred.jsonl"
    assert "NaN or infinite" in one_line(["predict", *common, "--split", "dev", "--out", str(out)], capsys)
    assert not out.exists()


# ================================================================================================ a full disk

def _library_errors():
    """What each library that writes for litebert raises on a full disk (messages as they give them)."""
    from safetensors import SafetensorError
    return {
        "torch.save": RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing "
                                   "file data/0: file write failed"),
        "safetensors": SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                       'message: "No space left on device" })'),
        "tokenizers": Exception("No space left on device (os error 28)"),
        "numpy": OSError("4096 requested and 1024 written"),
        "sentencepiece": OSError("Permission denied: \"x.model\": No space left on device Error #28"),
        "os": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    }


@pytest.mark.parametrize("library", list(_library_errors()))
def test_a_full_disk_in_any_library_is_one_oserror_naming_the_destination(library, tmp_path):
    error = _library_errors()[library]
    final = tmp_path / "result"
    write_dir_atomically(final, lambda d: (d / "old.bin").write_bytes(b"x" * 100))

    def fill(directory):
        (directory / "part.bin").write_bytes(b"y" * 10)
        raise error

    with pytest.raises(OSError) as e:
        write_dir_atomically(final, fill)
    assert e.value.errno == errno.ENOSPC and str(final) in str(e.value), e.value
    assert "bytes free there" in str(e.value) and "100 needed as before" in str(e.value), e.value
    assert "nothing replaced" in str(e.value)
    assert [p.name for p in final.iterdir()] == ["old.bin"] and not debris(tmp_path)
    with pytest.raises(OSError) as e:  # a single file too
        with atomic_open(tmp_path / "one.json") as f:
            f.write("{}")
            raise error
    assert e.value.errno == errno.ENOSPC and str(tmp_path / "one.json") in str(e.value)
    assert not (tmp_path / "one.json").exists()


@pytest.mark.parametrize("library", list(_library_errors()))
def test_a_full_disk_on_a_first_write_names_the_destination_and_the_bytes_it_got_to(library, tmp_path):
    """No earlier result to measure: the bytes staged before the disk filled are what is known to be needed."""
    error = _library_errors()[library]
    final = tmp_path / "first"

    def fill(directory):
        (directory / "part.bin").write_bytes(b"y" * 300)
        raise error

    with pytest.raises(OSError) as e:
        write_dir_atomically(final, fill)
    assert str(final) in str(e.value) and "more than 300 needed (300 written when it filled)" in str(e.value)
    assert "nothing written" in str(e.value) and not final.exists() and not debris(tmp_path)
    with pytest.raises(OSError) as e:
        with atomic_open(tmp_path / "one.bin", "wb") as f:
            f.write(b"z" * 5000)
            f.flush()
            raise error
    assert str(tmp_path / "one.bin") in str(e.value) and "more than 5000 needed" in str(e.value), e.value
    assert not (tmp_path / "one.bin").exists() and not debris(tmp_path)


def test_a_bug_that_is_not_a_full_disk_keeps_its_own_exception(tmp_path):
    with pytest.raises(KeyError):
        write_dir_atomically(tmp_path / "r", lambda d: {}["missing"])
    with pytest.raises(RuntimeError, match="shape mismatch"):
        write_dir_atomically(tmp_path / "r", lambda d: (_ for _ in ()).throw(RuntimeError("shape mismatch")))


def test_a_copy_onto_a_full_disk_names_the_destination_not_the_source(tmp_path, monkeypatch):
    src, dst = tmp_path / "src.bin", tmp_path / "out" / "dst.bin"
    src.write_bytes(b"z" * 10)
    dst.parent.mkdir()

    def full(a, b, *args, **kwargs):  # as shutil's sendfile copy raises it: the source first
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(a), None, str(b))

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(OSError) as e:
        files.copy_file(src, dst)
    assert e.value.filename == str(dst) and "bytes free there, 10 needed" in str(e.value)  # the source's size


def test_a_full_disk_while_a_verb_writes_is_one_line_and_the_old_result_stays(finished_run, monkeypatch, capsys,
                                                                              tmp_path):
    """embed writes its .npy through atomic_open: numpy's own way of failing is one line naming --out."""
    import numpy as np
    model = finished_run[1] / "best"
    sentences = tmp_path / "s.txt"
    sentences.write_text("one sentence.\nanother one.\n")
    out = tmp_path / "e.npy"
    assert litebert_main(["embed", "--model", str(model), "--input", str(sentences), "--out", str(out)]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    monkeypatch.setattr(np, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("4096 requested and 0 written")))
    line = one_line(["embed", "--model", str(model), "--input", str(sentences), "--out", str(out)], capsys)
    assert "No space left on device" in line and str(out) in line and out.read_bytes() == before


# ================================================================== training data a model cannot learn from

@pytest.mark.parametrize("rows,words", [
    ([("the sea was calm", "a")] * 8, "every training example of task table has the label 'a'"),
    ([("the sea was calm", "a"), ("   ", "b")] * 4, "every training text of class(es) ['b'] is empty or blank"),
    ([("the sea was calm", "neg"), ("the sky was blue", "pos")] * 4 + [("a ship", 1)],
     "train.jsonl: training label(s) ['1'] are numbers among the names ['neg', 'pos'] (first: row 8)"),
], ids=["one class", "a class of blank texts", "a number among names"])
def test_training_data_that_cannot_be_learned_from_is_refused_before_training(rows, words, model_dir, capsys,
                                                                             tmp_path):
    data = tmp_path / "task"
    data.mkdir()
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    out = tmp_path / "run"
    line = one_line(["finetune", "--model", str(model_dir), "--task", "table", "--data-dir", str(data),
                     "--text-columns", "text", "--max-length", "32", "--max-steps", "2", "--out-dir", str(out),
                     "--no-progress"], capsys)
    assert words in line and not out.exists()


def test_a_slice_of_the_training_file_missing_a_named_class_is_refused_as_such(model_dir, capsys, tmp_path):
    """SST-2 names its classes "0" and "1"; --max-train-examples 4 of a file whose first rows are all "0" has
    no "1" to learn: the error says so (not that the class's texts are blank)."""
    data = tmp_path / "SST-2"
    data.mkdir()
    rows = [("the sea was calm", "0")] * 4 + [("the sky was blue", "1")] * 4
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    out = tmp_path / "run"
    line = one_line(["finetune", "--model", str(model_dir), "--task", "SST-2", "--data-dir", str(data),
                     "--max-train-examples", "4", "--max-length", "32", "--max-steps", "2", "--out-dir", str(out),
                     "--no-progress"], capsys)
    assert "class(es) ['1'] of task SST-2 have no example among the 4 training examples read" in line
    assert not out.exists()


def test_a_training_label_outside_a_fixed_label_set_is_refused_naming_it_and_the_file(model_dir, capsys, tmp_path):
    """SST-2's labels are "0" and "1": a 3 in its training file is a typo to fix, not a third class (nor a row
    to drop without a word)."""
    data = tmp_path / "SST-2"
    data.mkdir()
    rows = [("the sea was calm", "0"), ("the sky was blue", "1")] * 4
    (data / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows + [("a ship", "3")]))
    (data / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    out = tmp_path / "run"
    line = one_line(["finetune", "--model", str(model_dir), "--task", "SST-2", "--data-dir", str(data),
                     "--max-length", "32", "--max-steps", "2", "--out-dir", str(out), "--no-progress"], capsys)
    assert f"{data / 'train.tsv'}:10: label '3' is not one of ['0', '1']" in line and "fixed label set" in line
    assert not out.exists()


def test_blank_training_texts_are_counted_in_the_summary(model_dir, capsys, tmp_path):
    data = tmp_path / "task"
    data.mkdir()
    rows = [("the sea was calm", "a"), ("the sky was blue", "b"), ("", "a"), ("  ", "b")] * 2
    for split in ("train", "dev"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                                                     for t, y in rows[:6 if split == "dev" else 8]))
    out = tmp_path / "run"
    assert litebert_main(["finetune", "--model", str(model_dir), "--task", "table", "--data-dir", str(data),
                          "--text-columns", "text", "--max-length", "32", "--max-steps", "2", "--batch-size", "4",
                          "--eval-every", "2", "--out-dir", str(out), "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["examples"]["blank_text"] == {"train": 4, "dev": 2}
    assert json.loads((out / "summary.json").read_text())["examples"]["blank_text"] == {"train": 4, "dev": 2}


# ======================================================================== line-oriented input: row i = line i

@pytest.mark.parametrize("text,lines", [("one.\n\ntwo.\n", "line 2"), ("one.\n  \ntwo.\n\nthree.\n\n", "line 2, 4")],
                         ids=["blank", "blank and spaces"])
def test_embed_refuses_blank_lines_by_number_so_rows_stay_aligned(text, lines, finished_run, capsys, tmp_path):
    sentences, out = tmp_path / "s.txt", tmp_path / "e.npy"
    sentences.write_text(text)
    line = one_line(["embed", "--model", str(finished_run[1] / "best"), "--input", str(sentences), "--out",
                     str(out)], capsys)
    assert f"blank sentence(s) at {lines}" in line and not out.exists()
    sentences.write_text(text.replace("\n\n", "\n").replace("  \n", "four.\n") + "\n\n")  # trailing: fine
    assert litebert_main(["embed", "--model", str(finished_run[1] / "best"), "--input", str(sentences), "--out",
                          str(out)]) == 0
    import numpy as np
    assert np.load(out).shape[0] == len(sentences.read_text().strip().splitlines())


LINE_INPUTS = [  # (file name, content, the one line's words); each line is one input, output row i is line i
    ("in.txt", "the sea.\n\nthe sky.\n", "in.txt: blank input(s) at line 2"),
    ("in.txt", "\nthe sea.\n", "in.txt: blank input(s) at line 1"),
    ("in.jsonl", '"the sea."\n  \n\n"the sky."\n', "in.jsonl: blank input(s) at line 2, 3"),
    ("in.csv", 'text\nthe sea.\n\nthe sky.\n', "in.csv: blank row(s) at line 3"),
    ("in.tsv", 'text\nthe sea.\n\t\nthe sky.\n', "in.tsv: blank row(s) at line 3"),
    ("in.txt", b"the sea.\nthe \xff sky.\n", "in.txt:2: not UTF-8 text"),
]


@pytest.mark.parametrize("name,content,words", LINE_INPUTS,
                         ids=[w.split(": ", 1)[1] + " " + n for n, _, w in LINE_INPUTS])
def test_predict_input_refuses_a_blank_or_undecodable_line_by_number_before_any_work(name, content, words,
                                                                                   finished_run, capsys, tmp_path,
                                                                                   monkeypatch):
    source, out = tmp_path / name, tmp_path / "p.jsonl"
    source.write_bytes(content if isinstance(content, bytes) else content.encode())
    out.write_text('{"input": "earlier", "output": 1}\n')
    loaded = []
    monkeypatch.setattr(evaluate, "pipeline", lambda *a, **k: loaded.append(1))  # the model is never loaded
    line = one_line(["predict", "--model", str(finished_run[1] / "best"), "--input", str(source), "--out",
                     str(out)], capsys)
    assert words in line and not loaded and out.read_text() == '{"input": "earlier", "output": 1}\n'


def test_predict_input_keeps_row_i_at_line_i_and_standard_input_is_held_to_the_same(finished_run, capsys,
                                                                                  tmp_path, monkeypatch):
    model = str(finished_run[1] / "best")
    source = tmp_path / "in.txt"
    source.write_text("the sea.\nthe sky.\n\n\n")  # blank lines at the end shift nothing
    assert litebert_main(["predict", "--model", model, "--input", str(source)]) == 0
    assert [json.loads(r)["input"] for r in capsys.readouterr().out.splitlines()] == ["the sea.", "the sky."]
    monkeypatch.setattr("sys.stdin", io.StringIO("the sea.\n\nthe sky.\n"))
    assert "stdin: blank input(s) at line 2" in one_line(["predict", "--model", model], capsys)


def test_extend_vocab_words_and_analyze_text_count_what_they_skip(model_dir, capsys, tmp_path):
    """Neither is row-aligned (a word list; sentences averaged into one figure): blank lines are passed over and
    counted in the printed summary; a line that is not UTF-8 is refused by number (words) or counted (analyze,
    whose corpus reader is prepare's)."""
    words = tmp_path / "words.txt"
    words.write_text("zeitgeist\n\n  \nquixotic\n\n")
    assert litebert_main(["extend-vocab", "--model", str(model_dir), "--out", str(tmp_path / "ext"), "--words",
                          str(words)]) == 0
    printed = capsys.readouterr().out
    assert f"--words: 2 words read from {words}, 2 blank line(s) skipped" in printed, printed
    words.write_bytes(b"zeitgeist\nqui\xffxotic\n")
    line = one_line(["extend-vocab", "--model", str(model_dir), "--out", str(tmp_path / "ext2"), "--words",
                     str(words)], capsys)
    assert "words.txt:2: not UTF-8 text" in line and not (tmp_path / "ext2").exists()
    text = tmp_path / "text.txt"
    text.write_bytes(b"the sea was calm.\nthe \xff sky.\n\nthe ship sailed on.\n")
    assert litebert_main(["analyze", str(model_dir), "--text", str(text), "--max-length", "32", "--out",
                          str(tmp_path / "t.png")]) == 0
    assert f"2 sentences of {text}, 1 non utf8 lines skipped" in capsys.readouterr().out


# ======================================================================= a bare name that is not on the Hub

@pytest.fixture
def hub_online(monkeypatch, tmp_path):
    """huggingface_hub as it is online, with an empty cache of its own, and every connection refused: no test
    touches the network."""
    import socket

    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))

    def refused(*args, **kwargs):
        raise OSError(errno.ENETUNREACH, "Network is unreachable (blocked by the test)")

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    monkeypatch.setattr(socket.socket, "connect", refused)
    return constants


def _timed(fn, *args) -> tuple[str, float]:
    import time
    start = time.monotonic()
    with pytest.raises(FileNotFoundError) as e:
        fn(*args)
    return str(e.value), time.monotonic() - start


def test_a_mistyped_hub_name_fails_in_one_line_within_seconds(hub_online, monkeypatch, capsys, tmp_path):
    import time

    import huggingface_hub

    from litebert.tokenizer import Tokenizer
    from litebert.weights import resolve_model_dir
    monkeypatch.chdir(tmp_path)
    for load in (Tokenizer.from_pretrained, resolve_model_dir):  # no network: fast, and one line
        message, took = _timed(load, "albrt-base-v2")
        assert took < 3.5 and "no such directory: albrt-base-v2 (the Hub could not be asked" in message, message
        assert "the Hugging Face cache holds no copy" in message and "\n" not in message
    line = one_line(["predict", "--model", "albrt-base-v2", "--text", "x"], capsys)
    assert "no such directory: albrt-base-v2" in line

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, **kw: _not_found(repo_id))
    message, took = _timed(Tokenizer.from_pretrained, "albrt-base-v2")
    assert "(the Hub has no model of that name either)" in message and took < 1, message

    def hangs(self, repo_id, timeout=None, **kw):  # a name lookup that hangs, not bounded by the request timeout
        time.sleep(30)

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", hangs)
    message, took = _timed(resolve_model_dir, "albrt-base-v2")
    assert "the Hub did not answer within 3 s" in message and took < 4.5, (message, took)


def _not_found(repo_id):
    """The Hub's answer for a name it does not have (built without the HTTP response it would carry)."""
    from huggingface_hub.errors import RepositoryNotFoundError
    error = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
    Exception.__init__(error, f"404 Client Error. Repository Not Found for url: {repo_id}")
    raise error


def test_a_hub_name_still_goes_to_the_hub_when_online_and_to_the_cache_offline(hub_online, tok_dir, monkeypatch,
                                                                               tmp_path):
    import huggingface_hub

    from litebert.tokenizer import Tokenizer
    monkeypatch.chdir(tmp_path)
    spiece = tok_dir / "spiece.model"
    asked = []
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo_id, timeout=None, **kw:
                        asked.append(("info", repo_id, timeout)))

    def download(repo_id, filename, local_files_only=False, **kw):
        asked.append(("download", filename, local_files_only))
        if filename != "spiece.model" or (local_files_only and not cached):
            raise huggingface_hub.errors.LocalEntryNotFoundError("not here")
        return str(spiece)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    cached = False
    assert Tokenizer.from_pretrained("albert/albert-base-v2").vocab_size > 0  # online: the Hub, as before
    assert asked[0] == ("info", "albert/albert-base-v2", 3.0) and ("download", "spiece.model", False) in asked
    hub_online.HF_HUB_OFFLINE = True  # offline: the cache alone, nothing asked
    asked.clear()
    cached = True
    assert Tokenizer.from_pretrained("albert/albert-base-v2").vocab_size > 0
    assert [a[0] for a in asked] == ["download", "download"] and all(a[2] for a in asked)
    cached = False
    message, _ = _timed(Tokenizer.from_pretrained, "albert/albert-base-v2")
    assert "(HF_HUB_OFFLINE is set, and the Hugging Face cache holds no copy)" in message, message


def test_revision_cache_dir_and_token_go_to_the_hub_for_models_and_tokenizers(hub_online, tok_dir, monkeypatch,
                                                                               tmp_path):
    """transformers' download keywords reach huggingface_hub (the lookup and the download) for both loaders; a
    revision the Hub lacks is one line, without a fall back to a cached copy of another revision."""
    import huggingface_hub
    from huggingface_hub.errors import RevisionNotFoundError

    from litebert.tokenizer import Tokenizer
    from litebert.weights import resolve_model_dir
    monkeypatch.chdir(tmp_path)
    asked = []

    def info(self, repo_id, timeout=None, **kw):
        asked.append(("info", kw))
        if kw.get("revision") == "nope":
            error = RevisionNotFoundError.__new__(RevisionNotFoundError)
            Exception.__init__(error, "404 Client Error. Revision Not Found")
            raise error

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", info)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo_id, filename, **kw: asked.append(
        ("download", kw)) or str(tok_dir / "spiece.model"))
    model_dir = tmp_path / "snapshot"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: asked.append(
        ("snapshot", kw)) or str(model_dir))
    given = dict(revision="v2", cache_dir=str(tmp_path / "cache"), token="hf_x")
    assert Tokenizer.from_pretrained("albert/albert-base-v2", **given).vocab_size > 0
    assert resolve_model_dir("albert/albert-base-v2", **given) == str(model_dir)
    lookups = [kw for what, kw in asked if what == "info"]
    assert lookups == [{"revision": "v2", "token": "hf_x"}] * 2
    assert all({**given, "local_files_only": False}.items() <= kw.items() for what, kw in asked if what != "info")
    message, _ = _timed(resolve_model_dir, "albert/albert-base-v2", False, "nope")
    assert "(the Hub has no revision 'nope' of it)" in message and "\n" not in message, message
    with pytest.raises(ConfigError, match="token= chooses what to download from the Hub"):
        Tokenizer.from_pretrained(str(tok_dir), token="hf_x")


# ================================================= generated bad files, through the verbs that read them
# Each generator damages a valid file of one format in the ways such files come damaged. Whatever the damage, the
# verb either refuses in one line (exit 2, no traceback) and leaves an earlier result as it was, or scores what it
# could read, says over which rows (`scored_on`), and writes no NaN.

TABLE_ROWS = [("the sea was calm and the ship sailed on", "a"), ("she wrote a letter to her sister", "b")] * 3


def _table(fmt: str, rows=TABLE_ROWS, header="text,label") -> str:
    sep = "\t" if fmt == "tsv" else ","
    return header.replace(",", sep) + "\n" + "".join(f"{t}{sep}{y}\n" for t, y in rows)


def table_damage(fmt: str) -> dict[str, bytes]:
    good = _table(fmt)
    sep = "\t" if fmt == "tsv" else ","
    cases = {
        "a row of one cell": _table(fmt, TABLE_ROWS[:2]) + "a lone cell\n" + _table(fmt, TABLE_ROWS[2:], "")[1:],
        "a row of three cells": good + f"x{sep}a{sep}extra\n",
        "a label training never had": good + f"the sea{sep}zz\n",
        "no label column": _table(fmt, header="text,gold"),
        "no text column": _table(fmt, header="body,label"),
        "header only": _table(fmt, []),
        "blank rows": good.replace("\n", "\n\n", 3),
        "an empty text": good + f"{sep}a\n",
    }
    if fmt == "csv":
        cases["an unclosed quote"] = good + '"the sea,a\nmore,b\n'
        cases["a NUL byte"] = good + "the\0sea,a\n"
    return {name: text.encode() for name, text in cases.items()} | _bytes_damage(good.encode())


def _bytes_damage(good: bytes) -> dict[str, bytes]:
    """What any file suffers: cut short, a byte that is not UTF-8, emptied."""
    middle, cut = len(good) // 2, good.rfind(b"\n", 0, len(good) * 2 // 3) + 3  # cut inside a line
    return {"truncated": good[:cut], "not UTF-8": good[:middle] + b"\xff" + good[middle:], "empty": b""}


def _squad(paragraphs) -> str:
    return json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]})


SQUAD_CONTEXT = "the sea was calm and the ship sailed on to the town"


def _qa(ident, question="what sailed on?", text="the ship", start=21):
    return {"id": ident, "question": question, "answers": [{"text": text, "answer_start": start}],
            "is_impossible": False}


def squad_damage() -> dict[str, bytes]:
    good = _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q2", "what was calm?", "the sea", 0)]}])
    cases = {
        "an answer not at its offset": _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q2", start=3)]}]),
        "a question that is not a string": _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q2", 7)]}]),
        "a duplicate id": _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q1")]}]),
        "no data key": json.dumps({"version": "v2.0"}),
        "data not a list": json.dumps({"data": {"paragraphs": []}}),
        "a paragraph without qas": _squad([{"context": SQUAD_CONTEXT}]),
        "an empty question": _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q2", "  ")]}]),
        "a negative offset": _squad([{"context": SQUAD_CONTEXT, "qas": [_qa("q1"), _qa("q2", start=-5)]}]),
    }
    return {name: text.encode() for name, text in cases.items()} | _bytes_damage(good.encode())


CONLL_GOOD = "-DOCSTART- O\n\nAnna B-PER\nsailed O\non O\n\nthe O\nship O\nof O\nAnna B-PER\nLee I-PER\n"


def conll_damage() -> dict[str, bytes]:
    cases = {
        "a word without a tag": CONLL_GOOD + "\nlone\n",
        "a tag the model does not have": CONLL_GOOD + "\nParis B-LOC\n",
        "a BILOU tag": CONLL_GOOD + "\nAnna U-PER\n",
        "tabs and spaces": CONLL_GOOD.replace(" ", "\t", 2) + "\nAnna   B-PER\n",
        "only a DOCSTART": "-DOCSTART- O\n",
        "blank lines only": "\n\n\n",
    }
    return {name: text.encode() for name, text in cases.items()} | _bytes_damage(CONLL_GOOD.encode())


def _tiny_head(head: str, tok_dir: Path, directory: Path, **config) -> Path:
    from litebert import heads
    from litebert.config import AlbertConfig
    from litebert.tokenizer import Tokenizer
    tok = Tokenizer.from_pretrained(str(tok_dir))
    torch.manual_seed(0)
    getattr(heads, head)(AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32,
                                      num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                      max_position_embeddings=64, **config)).save_pretrained(directory)
    tok.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def damaged_inputs_models(finished_run, tok_dir, tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Per format: a model of its family, and the task flags that read the format's dev file."""
    root = tmp_path_factory.mktemp("damaged")
    labels = {0: "O", 1: "B-PER", 2: "I-PER"}
    return {
        "csv": (finished_run[1] / "best", ["--task", "table", "--text-columns", "text", "--dev-file", "dev.csv"]),
        "tsv": (finished_run[1] / "best", ["--task", "table", "--text-columns", "text", "--dev-file", "dev.tsv"]),
        "squad": (_tiny_head("AlbertForQuestionAnswering", tok_dir, root / "qa"),
                  ["--task", "squad-v2.0", "--max-query-length", "8"]),
        "conll": (_tiny_head("AlbertForTokenClassification", tok_dir, root / "tag", num_labels=3, id2label=labels),
                  ["--task", "conll2003"]),
    }


DEV_FILE = {"csv": "dev.csv", "tsv": "dev.tsv", "squad": "dev-v2.0.json", "conll": "valid.txt"}
DAMAGE = [(fmt, name, content) for fmt, cases in
          [("csv", table_damage("csv")), ("tsv", table_damage("tsv")), ("squad", squad_damage()),
           ("conll", conll_damage())] for name, content in cases.items()]
# What each damage must come to, by the name of the damage (the same for every format that has it); any other
# damage loses the records it hits: "left out", and said beside the score.
REFUSED = {"no label column", "no text column", "header only", "not UTF-8", "empty", "no data key",
           "data not a list", "a paragraph without qas", "only a DOCSTART", "blank lines only"}
READ = {"blank rows",  # a blank row of a task file is no record: ids are data rows, not lines
        "an empty text", "an empty question",  # a text, empty: read (counted in fine-tuning's summary)
        "a NUL byte",  # a character like any other inside a CSV cell
        "tabs and spaces"}  # CoNLL columns are split on any whitespace


def _no_nan(value) -> bool:
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return all(_no_nan(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nan(v) for v in value)
    return True


@pytest.mark.parametrize("fmt,damage,content", DAMAGE, ids=[f"{f}: {d}" for f, d, _ in DAMAGE])
def test_a_damaged_task_file_is_refused_in_one_line_or_scored_on_what_could_be_read(fmt, damage, content,
                                                                                   damaged_inputs_models, capsys,
                                                                                   tmp_path):
    model, flags = damaged_inputs_models[fmt]
    expected = "refused" if damage in REFUSED else "read" if damage in READ else "left out"
    if (fmt, damage) == ("squad", "truncated"):
        expected = "refused"  # one JSON document: cut short, none of it reads
    data = tmp_path / "task"
    data.mkdir()
    (data / DEV_FILE[fmt]).write_bytes(content)
    out = tmp_path / "metrics.json"
    earlier = '{\n "accuracy": 0.5\n}\n'
    out.write_text(earlier)
    code = litebert_main(["evaluate", "--model", str(model), "--data-dir", str(data), *flags, "--max-length", "32",
                          "--split", "dev", "--out", str(out)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    if code == 2:
        assert captured.err.count("\n") == 1 and captured.err.startswith("litebert evaluate: error: "), captured.err
        assert out.read_text() == earlier, "a refused run changed the earlier result"
        assert expected == "refused", captured.err
        if damage in ("header only", "blank lines only"):  # not "has no labels": it has no rows
            assert "no usable dev rows" in captured.err and "(none there)" in captured.err, captured.err
        return
    assert code == 0 and expected != "refused", (code, captured.err)
    metrics = json.loads(out.read_text())
    assert _no_nan(metrics), metrics
    assert ("left out" in metrics.get("scored_on", "")) == (expected == "left out"), (expected, metrics)


def _damage_model(directory: Path, damage: str) -> None:
    config, weights = directory / "config.json", directory / "model.safetensors"
    if damage == "no config.json":
        config.unlink()
    elif damage == "config.json not JSON":
        config.write_text(config.read_text()[:20])
    elif damage in ("config of another width", "config of another vocabulary", "config with fewer labels"):
        values = json.loads(config.read_text())
        key, value = {"config of another width": ("hidden_size", values["hidden_size"] * 2),
                      "config of another vocabulary": ("vocab_size", values["vocab_size"] + 10),
                      "config with fewer labels": ("id2label", {"0": "a"})}[damage]
        values[key] = value
        values.pop("label2id", None) if key == "id2label" else None
        config.write_text(json.dumps(values))
    elif damage == "truncated model.safetensors":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "no model.safetensors":
        weights.unlink()
    elif damage == "no spiece.model":
        (directory / "spiece.model").unlink()


MODEL_DAMAGE = ["no config.json", "config.json not JSON", "config of another width", "config of another vocabulary",
                "config with fewer labels", "truncated model.safetensors", "no model.safetensors", "no spiece.model"]


@pytest.mark.parametrize("damage", MODEL_DAMAGE)
def test_a_damaged_model_directory_is_one_line_at_evaluate_and_predict(damage, finished_run, capsys, tmp_path):
    data, run, _ = finished_run
    model = tmp_path / "best"
    shutil.copytree(run / "best", model)
    _damage_model(model, damage)
    metrics, predictions = tmp_path / "m.json", tmp_path / "p.jsonl"
    metrics.write_text('{\n "accuracy": 0.5\n}\n')
    predictions.write_text('{"input": "earlier", "output": 1}\n')
    task = ["--task", "table", "--data-dir", str(data), "--text-columns", "text", "--max-length", "32"]
    for argv in (["evaluate", "--model", str(model), *task, "--out", str(metrics)],
                 ["predict", "--model", str(model), "--text", "the sea was calm", "--out", str(predictions)]):
        line = one_line(argv, capsys)
        assert "Traceback" not in line and (str(model) in line or "model.safetensors" in line), line
    assert metrics.read_text() == '{\n "accuracy": 0.5\n}\n'
    assert predictions.read_text() == '{"input": "earlier", "output": 1}\n'


# ====================================================================================== a path that is not there
# Every path a verb reads, given as one that does not exist: one line naming it (exit 2), before the verb loads a
# model, reads other data or writes anything (a typo is no reason to wait for a model, nor to leave an out dir).

MISSING = "no-such-path"
PATH_RUNS = [  # (verb, the option that names MISSING, argv with the other paths real)
    ("tokenizer", "inputs", [MISSING, "--out", "o"]),
    ("tokenizer", "out", ["--out", MISSING, "--encode", "the sea"]),  # --encode reads the tokenizer in --out
    ("prepare", "inputs", [MISSING, "--tokenizer", "{tok}", "--out", "o", "--no-progress"]),
    ("prepare", "tokenizer", ["{text}", "--tokenizer", MISSING, "--out", "o", "--no-progress"]),
    ("pretrain", "data", ["--data", MISSING, "--out-dir", "o", "--no-progress"]),
    ("pretrain", "model", ["--data", "{data}", "--held-out", "2", "--model", MISSING + ".json", "--out-dir", "o"]),
    ("pretrain", "init_from", ["--data", "{data}", "--held-out", "2", "--init-from", MISSING, "--out-dir", "o"]),
    ("pretrain", "held_out_from", ["--data", "{data}", "--held-out", "2", "--held-out-from", MISSING, "--out-dir",
                                   "o"]),
    ("pretrain", "eval_data", ["--data", "{data}", "--held-out", "2", "--eval-data", MISSING, "--out-dir", "o"]),
    ("finetune", "model", ["--model", MISSING, "--data-dir", "{task}", "{table}", "--out-dir", "o"]),
    ("finetune", "data_dir", ["--model", "{model}", "--data-dir", MISSING, "{table}", "--out-dir", "o"]),
    ("finetune", "tokenizer", ["--model", "{model}", "--tokenizer", MISSING, "--data-dir", "{task}", "{table}",
                               "--out-dir", "o"]),
    ("finetune", "train_file", ["--model", "{model}", "--data-dir", "{task}", "{table}", "--train-file",
                                MISSING + ".jsonl", "--out-dir", "o"]),
    ("finetune", "dev_file", ["--model", "{model}", "--data-dir", "{task}", "{table}", "--dev-file",
                              MISSING + ".jsonl", "--out-dir", "o"]),
    ("evaluate", "model", ["--model", MISSING, "--data-dir", "{task}", "{table}", "--out", "m.json"]),
    ("evaluate", "data_dir", ["--model", "{best}", "--data-dir", MISSING, "{table}", "--out", "m.json"]),
    ("evaluate", "tokenizer", ["--model", "{best}", "--tokenizer", MISSING, "--data-dir", "{task}", "{table}",
                               "--out", "m.json"]),
    ("evaluate", "dev_file", ["--model", "{best}", "--data-dir", "{task}", "{table}", "--dev-file",
                              MISSING + ".jsonl", "--out", "m.json"]),
    ("predict", "model", ["--model", MISSING, "--text", "the sea", "--out", "p.jsonl"]),
    ("predict", "tokenizer", ["--model", "{best}", "--tokenizer", MISSING, "--text", "the sea", "--out", "p.jsonl"]),
    ("predict", "input", ["--model", "{best}", "--input", MISSING, "--out", "p.jsonl"]),
    ("predict", "data_dir", ["--model", "{best}", "--data-dir", MISSING, "{table}", "--out", "p.jsonl"]),
    ("predict", "test_file", ["--model", "{best}", "--data-dir", "{task}", "{table}", "--test-file",
                              MISSING + ".jsonl", "--split", "test", "--out", "p.jsonl"]),
    ("ensemble", "models", ["--models", "{best}", MISSING, "--data-dir", "{task}", "{table}", "--out", "e"]),
    ("ensemble", "model", ["--model", MISSING, "--data-dir", "{task}", "{table}", "--out", "e"]),
    ("ensemble", "dev_file", ["--models", "{best}", "{step}", "--data-dir", "{task}", "{table}", "--dev-file",
                              MISSING + ".jsonl", "--out", "e"]),
    ("ensemble", "from_grid", ["--from-grid", MISSING, "--data-dir", "{task}", "{table}", "--out", "e"]),
    ("ensemble", "data_dir", ["--models", "{best}", "{step}", "--data-dir", MISSING, "{table}", "--out", "e"]),
    ("ensemble", "tokenizer", ["--models", "{best}", "{step}", "--tokenizer", MISSING, "--data-dir", "{task}",
                               "{table}", "--out", "e"]),
    ("embed", "model", ["--model", MISSING, "--input", "{sentences}", "--out", "e.npy"]),
    ("embed", "input", ["--model", "{model}", "--input", MISSING, "--out", "e.npy"]),
    ("embed", "evaluate", ["--model", "{model}", "--evaluate", MISSING + ".jsonl"]),
    ("embed", "compare", ["--model", "{model}", "--evaluate", "{pairs}", "--compare", MISSING]),
    ("embed", "train", ["--model", "{model}", "--train", MISSING + ".jsonl", "--out-dir", "o"]),
    ("embed", "eval", ["--model", "{model}", "--train", "{pairs}", "--eval", MISSING + ".jsonl", "--out-dir", "o"]),
    ("embed", "model@distill", ["--model", MISSING, "--distill", "{model}", "--distill-text", "{sentences}",
                                "--out-dir", "o"]),
    ("embed", "model@silver", ["--model", MISSING, "--silver", "{cross}", "--silver-text", "{sentences}",
                               "--silver-pairs", "9", "--out", "s.jsonl"]),
    ("embed", "model@train", ["--model", MISSING, "--train", "{pairs}", "--batch-size", "4", "--out-dir", "o"]),
    ("embed", "model@evaluate", ["--model", MISSING, "--evaluate", "{pairs}"]),
    ("embed", "distill", ["--model", "{model}", "--distill", MISSING, "--distill-text", "{sentences}", "--out-dir",
                          "o"]),
    ("embed", "distill_text", ["--model", "{model}", "--distill", "{model}", "--distill-text", MISSING,
                               "--out-dir", "o"]),
    ("embed", "distill_pairs", ["--model", "{model}", "--distill", "{model}", "--distill-pairs", MISSING + ".jsonl",
                                "--out-dir", "o"]),
    ("embed", "silver", ["--model", "{model}", "--silver", MISSING, "--silver-text", "{sentences}", "--silver-pairs",
                         "9", "--out", "s.jsonl"]),
    ("embed", "silver_text", ["--model", "{model}", "--silver", "{cross}", "--silver-text", MISSING, "--out",
                              "s.jsonl"]),
    ("convert", "from_hf", ["--from-hf", MISSING, "--out", "c"]),
    ("convert", "from_tf", ["--from-tf", MISSING, "--out", "c"]),
    ("convert", "albert_config", ["--from-tf", "{tf}", "--albert-config", MISSING + ".json", "--out", "c"]),
    ("export", "model", ["--model", MISSING, "--out", "x"]),
    ("export", "verify_text", ["--model", "{best}", "--quantize", "int8", "--verify-text", MISSING, "--out", "x"]),
    ("serve", "model", ["--model", MISSING, "--port", "0"]),
    ("analyze", "models", [MISSING, "--text", "{sentences}", "--out", "a.png"]),
    ("analyze", "text", ["{model}", "--text", MISSING, "--out", "a.png"]),
    ("reproduce", "corpus", ["objective", "--out", "g", "--scale", "tiny", "--corpus", MISSING]),
    ("reproduce", "extra_corpus", ["data", "--out", "g", "--scale", "tiny", "--corpus", "{text}", "--extra-corpus",
                                   MISSING]),
    ("reproduce", "reuse", ["objective", "--out", "g", "--scale", "tiny", "--corpus", "{text}", "--reuse", MISSING]),
    ("extend-vocab", "model", ["--model", MISSING, "--out", "e", "--words", "{sentences}"]),
    ("extend-vocab", "words", ["--model", "{model}", "--out", "e", "--words", MISSING]),
    ("extend-vocab", "corpus", ["--model", "{model}", "--out", "e", "--corpus", MISSING]),
] + [(verb, "config", ["--config", MISSING + ".toml"]) for verb in sorted(VERBS)]
# Options of the verbs' config classes that name something but are not read here: where results go, and names
# that are not paths. A new option that names a file or directory must be in PATH_RUNS or here, with its reason.
NOT_READ = {
    "out": "where results go", "out_dir": "where a run goes", "report_dir": "where a report goes",
    "data_dir": "reproduce: where its tokenizer and data are made (the verbs that read one are in PATH_RUNS)",
    "task": "a task's name", "split": "a split's name", "pooling": "a pooling's name", "precision": "a name",
    "text_columns": "column names", "head": "a head's name", "scale": "a scale's name", "parameters": "JSON text",
    "pre_tokenize": "a segmenter's name", "eval_split": "a split's name", "text": "predict: raw text",
    # a task's files: each verb reads the split it works on, through one reader (tried above with that split)
    "finetune test_file": "finetune reads train and dev", "evaluate train_file": "read with --split train",
    "evaluate test_file": "read with --split test", "predict train_file": "read with --split train",
    "predict dev_file": "read with --split dev", "ensemble train_file": "an ensemble reads dev and --split",
    "ensemble test_file": "read with --split test (its default; tried as data_dir above)",
}


def _verb_config_classes(monkeypatch) -> dict[str, list[type]]:
    """Each verb's config classes, as its verb_parser is given them (the verb run with --help)."""
    from litebert import runconfig
    found: dict[str, list[type]] = {}

    def recording(verb, description, groups, **kw):
        found[verb] = list(groups.values())
        return real(verb, description, groups, **kw)

    real = runconfig.verb_parser
    for verb, (target, _) in VERBS.items():
        module = importlib.import_module(target.split(":")[0])
        monkeypatch.setattr(module, "verb_parser", recording)
        with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()):
            getattr(module, target.split(":")[1])(["--help"])
    return found


PATH_WORDS = re.compile(r"\b(files?|director(y|ies)|globs?|config\.json|\.jsonl)\b|\bJSON\b", re.I)


def test_every_option_that_names_a_path_is_tried_missing(monkeypatch):
    tried = {(verb, option.split("@")[0]) for verb, option, _ in PATH_RUNS}  # model@distill: --model, in a mode
    untried = []
    for verb, classes in _verb_config_classes(monkeypatch).items():
        for cls in classes:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                names_a_path = PATH_WORDS.search(f.metadata.get("help", "")) or f.metadata.get("metavar") in (
                    "DIR", "FILE", "JSON", "CKPT_PREFIX", "DIR_OR_HUB_ID", "TEACHER", "CROSS_ENCODER")
                if "str" in str(hints[f.name]) and names_a_path and (verb, f.name) not in tried \
                        and f.name not in NOT_READ and f"{verb} {f.name}" not in NOT_READ:
                    untried.append(f"{verb} --{f.name.replace('_', '-')}")
    assert not untried, f"options naming a path that no PATH_RUNS case gives missing: {untried}"


@pytest.fixture(scope="module")
def path_inputs(root, tok_dir, model_dir, finished_run) -> dict[str, str]:
    """The real paths PATH_RUNS' argv name: a tokenizer, a model, a fine-tuned run, a cross-encoder, prepared
    data of several documents, a sentence file and a pairs file."""
    from litebert.corpus.shards import prepare
    lines = (root / "text.txt").read_text().splitlines()
    docs = root / "docs.txt"
    docs.write_text("\n".join(line if i % 8 else "" for i, line in enumerate(lines, 1)) + "\n")
    prepare([str(docs)], str(root / "missing_data"), str(tok_dir), max_seq_length=32, num_workers=1, progress=False)
    sentences = [f"the sea was calm on day {i} and the ship sailed on" for i in range(40)]
    (root / "sentences.txt").write_text("\n".join(sentences) + "\n")
    (root / "pairs.jsonl").write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "label": 1}) + "\n"
                                              for a, b in zip(sentences[::2], sentences[1::2])))
    data, run, _ = finished_run
    cross = _tiny_head("AlbertForSequenceClassification", tok_dir, root / "cross", num_labels=1)
    return {"{cross}": str(cross), "{tok}": str(tok_dir), "{model}": str(model_dir), "{best}": str(run / "best"),
            "{step}": str(run / "step_4"), "{task}": str(data), "{data}": str(root / "missing_data"),
            "{text}": str(docs), "{sentences}": str(root / "sentences.txt"), "{pairs}": str(root / "pairs.jsonl"),
            "{tf}": str(Path(__file__).parent / "fixtures" / "tf_albert_tiny" / "model.ckpt-7")}


@pytest.mark.parametrize("verb,option,argv", PATH_RUNS, ids=[f"{v} {o}" for v, o, _ in PATH_RUNS])
def test_a_path_that_does_not_exist_is_one_line_naming_it_before_any_work(verb, option, argv, path_inputs, capsys,
                                                                          tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative outputs land here, and MISSING is missing here
    import safetensors.torch

    def no_weights_yet(path, *a, **kw):
        raise AssertionError(f"{path} was read before {MISSING} was noticed")

    monkeypatch.setattr(safetensors.torch, "load_file", no_weights_yet)
    argv = [a for arg in argv for a in (["--task", "table", "--text-columns", "text"] if arg == "{table}"
                                        else [path_inputs.get(arg, arg)])]
    code = litebert_main([verb, *argv])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err, (code, err)
    assert err.count("\n") == 1 and err.startswith(f"litebert {verb}: error: ") and MISSING in err, \
        f"not one line naming {MISSING}: {err}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refused run wrote something"


# -- a flag the chosen mode would ignore (runconfig.refuse_flags_of_other_modes; embed's in test_embed.py) ---------

@pytest.mark.parametrize("argv, words", [
    (["--task", "novel_authorship", "--data-dir", "d", "--out", "o.jsonl", "--top-k", "2"],
     "--top-k is read with raw inputs (--text, --input, standard input), not with --data-dir"),
    (["--text", "A sentence.", "--split", "test"], "--split is read with --data-dir, not with raw inputs"),
    (["--text", "A sentence.", "--text-columns", "a", "b"], "--text-columns is read with --data-dir"),
    (["--task", "novel_authorship", "--data-dir", "d", "--min-agreement", "0.5"],
     "--min-agreement is read with raw inputs (--text, --input, standard input), not with --data-dir"),
])
def test_predict_refuses_a_flag_its_mode_would_ignore(argv, words, tmp_path, capsys):
    """predict's two modes: a split of a task's files (--data-dir), or raw inputs through the pipeline; each read
    options the other ignored without a word (--top-k on a split, a split's columns on raw text)."""
    assert litebert_main(["predict", "--model", str(tmp_path / "m"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "1", "2", "--resume"], "--resume is read with one run, not with a grid with --seeds"),
    (["--lr", "1e-3", "2e-3", "--resume"], "--resume is read with one run, not with a grid without --seeds"),
    (["--seed", "5", "--seeds", "1", "2"], "--seed is read with one run or a grid without --seeds, not with a grid "
                                           "with --seeds"),
])
def test_a_finetune_grid_refuses_the_flags_it_would_ignore(argv, words, tmp_path, capsys):
    """A grid resumes each of its runs itself and takes its seeds from --seeds: --resume and --seed were ignored
    without a word (found by test_mode_flags)."""
    assert litebert_main(["finetune", "--model", str(tmp_path / "m"), "--out-dir", str(tmp_path / "g"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not (tmp_path / "g").exists(), err


@pytest.mark.parametrize("argv, words", [
    (["--models", "a", "b", "--dropout", "0.1"], "--dropout is read with `litebert finetune`, not with --models"),
    (["--model", "a", "--padding-free"], "--padding-free is read with `litebert finetune`, not with --model (one"),
    (["--models", "a", "b", "--model", "c"], "--model is read with --model (one member), not with --models"),
    (["--models", "a", "b", "--top", "2"], "--top is read with --from-grid, not with --models"),
])
def test_ensemble_refuses_what_its_way_of_choosing_members_would_ignore(argv, words, tmp_path, capsys):
    """FinetuneConfig's training options (an ensemble trains nothing), --model beside --models, --top without
    --from-grid: each was ignored without a word (found by test_mode_flags)."""
    assert litebert_main(["ensemble", "--task", "table", "--data-dir", str(tmp_path), "--out", str(tmp_path / "e"),
                          *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not (tmp_path / "e").exists(), err


def test_pretrain_refuses_a_model_preset_beside_init_from(tmp_path, capsys):
    """--init-from's checkpoint has its own architecture: --model was ignored without a word."""
    assert litebert_main(["pretrain", "--init-from", str(tmp_path / "m"), "--model", "base", "--data", str(tmp_path),
                          "--out-dir", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "--model is read with a new model (no --init-from), not with --init-from" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "p").exists()


@pytest.mark.parametrize("option", [["--max-pieces", "5"], ["--domain-vocab-size", "100"]])
def test_extend_vocab_refuses_the_corpus_options_without_a_corpus(option, tmp_path, capsys):
    """Pieces are learned from --corpus only; with --words alone these were ignored without a word (passed on
    to extend_vocab unread, which the recorder of test_mode_flags cannot see)."""
    assert litebert_main(["extend-vocab", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "e"),
                          "--words", str(tmp_path / "w.txt"), *option]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} is read with --corpus, not with --words alone" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, words", [
    (["--vocab-size", "300"], "--vocab-size is read with training (no --encode), not with --encode"),
    (["--cased"], "--cased is read with training (no --encode)"),
    (["corpus.txt"], "inputs (the positional arguments) is read with training (no --encode), not with --encode"),
])
def test_tokenizer_encode_refuses_the_training_options(argv, words, tmp_path, capsys):
    """--encode encodes with the tokenizer in --out: a training option beside it was ignored without a word
    (found by test_mode_flags)."""
    assert litebert_main(["tokenizer", "--out", str(tmp_path / "tok"), "--encode", "the sea", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_serve_refuses_max_wait_ms_without_batching(tmp_path, capsys):
    """--no-batching runs one model call per request: how long to wait for more was ignored without a word."""
    assert litebert_main(["serve", "--model", str(tmp_path / "m"), "--no-batching", "--max-wait-ms", "20"]) == 2
    err = capsys.readouterr().err
    assert "--max-wait-ms is read with --batching, not with --no-batching" in err and err.count("\n") == 1, err


def test_export_refuses_the_int8_checks_options_without_int8(tmp_path, capsys):
    """--force, --min-agreement, --verify-text ... decide what happens to an int8 model; without --quantize int8
    there is none, and they were ignored without a word."""
    assert litebert_main(["export", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o"),
                          "--min-agreement", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--min-agreement is read with --quantize int8, not with --quantize none" in err and err.count("\n") == 1


@pytest.mark.parametrize("option", [["--jobs", "2"], ["--nproc-per-node", "2"]])
def test_reproduce_report_only_refuses_the_options_of_running_rows(option, tmp_path, capsys):
    """--report-only writes the report from the finished rows and runs none: how many at once and with how many
    processes were ignored without a word (found by test_mode_flags)."""
    assert litebert_main(["reproduce", "width", "--scale", "tiny", "--report-only", "--out", str(tmp_path / "r"),
                          *option]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} is read with --scale cpu or --scale gpu or --scale tiny" in err, err
    assert "not with --report-only" in err and err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_reproduce_refuses_jobs_at_the_paper_scale_which_runs_nothing(tmp_path, capsys):
    assert litebert_main(["reproduce", "sharing", "--scale", "paper", "--out", str(tmp_path / "p"), "--jobs", "3",
                          "--corpus", str(tmp_path / "c.txt")]) == 2
    err = capsys.readouterr().err
    assert "--jobs is read with --scale cpu or --scale gpu or --scale tiny, not with --scale paper" in err
    assert err.count("\n") == 1 and not (tmp_path / "p").exists()


def test_a_flag_read_only_with_its_switch_is_refused_without_it(tmp_path, capsys):
    """--compile-scope chooses what --compile compiles: without --compile it was ignored without a word."""
    assert litebert_main(["finetune", "--task", "novel_authorship", "--compile-scope", "model",
                          "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--compile-scope is read with --compile only" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()
