"""The class of "a flag the chosen mode silently ignores", checked for every verb and every mode at once.

Each verb is run here, in process, once per mode on tiny inputs, while a recorder notes which of the options the
user gave are read (`OptionReads`). Every option of the verb's parser must then be read in that mode, or refused
in it by `runconfig.refuse_flags_of_other_modes` (tried: the run again with the flag added must be a one-line
error naming it), or on ALLOWED below with its reason. A verb or mode that nobody audited by hand is caught here.

What counts as a read: an attribute of a config the command line made (`runconfig.resolve_config`), read by the
verb's code, of a field that still holds the user's value (`dataclasses.replace` hands on what it did not
change; a field it overwrote, as a grid's --resume, is no longer the user's). Reads made to validate, record or
compare a whole config (`__post_init__`, `dataclasses.asdict`/`replace`, `__eq__`/`__repr__`, runconfig's own
checks) are not reads: `dump_toml` would otherwise read every field of every config.

Its blind spot: a verb that reads an option at the top and hands its value to a function that ignores it in this
mode (`extend_vocab(..., cfg.max_pieces, ...)` with --words alone) has read it here. Such verbs keep their tables
by reading the code (extend-vocab's, serve's and export's were found so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import sys
import typing
from pathlib import Path

import pytest
import test_fault_classes
import test_faults
import test_pretrain
import test_reproduce

from litebert import demo, runconfig
from litebert.cli import VERBS
from litebert.cli import main as litebert_main
from litebert.paper import budgets, reproduce
from litebert.runconfig import _unwrap_optional, flag_name, parse_range
from litebert.serving import server

# the fixtures these runs share with the fault tests: a tokenizer, a tiny model, a finished fine-tuning run, ...
root, tok_dir, model_dir, finished_run, path_inputs = (
    test_faults.root, test_faults.tok_dir, test_faults.model_dir, test_faults.finished_run,
    test_fault_classes.path_inputs)


class OptionReads:
    """Records which fields of the configs that `resolve_config` made are read, and by whom (see the module's
    docstring). Each config is tagged with field -> the option whose value the field holds; `replace` hands the
    tags of the fields it keeps to the copy."""

    # frames whose reads are no use of an option: validating, recording, comparing, copying a whole config
    SKIP_FILES = {dataclasses.__file__, runconfig.__file__, "<string>"}
    SKIP_FUNCTIONS = {"__post_init__", "__init__", "__repr__", "__eq__", "__hash__"}

    def __init__(self, monkeypatch):
        self.tags: dict[int, tuple[object, dict[str, str]]] = {}
        self.read: set[tuple[type, str]] = set()  # (config class, option)
        self.patched: set[type] = set()
        self.monkeypatch = monkeypatch
        real_resolve, real_replace = runconfig.resolve_config, dataclasses.replace

        def resolve(cls, *a, **kw):
            config = real_resolve(cls, *a, **kw)
            self.tag(config, {f.name: f.name for f in dataclasses.fields(config)})
            return config

        def replace(obj, /, **changes):
            copy = real_replace(obj, **changes)
            entry = self.tags.get(id(obj))
            if entry is not None and entry[0] is obj:
                self.tag(copy, {k: v for k, v in entry[1].items() if k not in changes})
            return copy

        monkeypatch.setattr(runconfig, "resolve_config", resolve)
        monkeypatch.setattr(dataclasses, "replace", replace)

    def tag(self, config: object, fields: dict[str, str]) -> None:
        self.tags[id(config)] = (config, fields)  # the config is kept alive, so its id is not reused
        cls = type(config)
        if cls not in self.patched:
            self.patched.add(cls)
            self.monkeypatch.setattr(cls, "__getattribute__", self._reader(), raising=False)

    def _reader(self):
        tags, read, skip_files, skip_functions = self.tags, self.read, self.SKIP_FILES, self.SKIP_FUNCTIONS

        def getattribute(obj, name):
            entry = tags.get(id(obj))
            if entry is not None and entry[0] is obj and name in entry[1]:
                caller = sys._getframe(1).f_code
                if caller.co_filename not in skip_files and caller.co_name not in skip_functions:
                    read.add((type(obj), entry[1][name]))
            return object.__getattribute__(obj, name)
        return getattribute


@pytest.fixture(scope="module")
def verb_options() -> dict[str, dict[str, tuple[type, dataclasses.Field]]]:
    """Each verb's options: argparse dest -> (its config class, the field behind it). (--config, which
    `parse_verb` reads in every mode, is no field.)"""
    with pytest.MonkeyPatch.context() as mp:
        classes = test_fault_classes._verb_config_classes(mp)
    return {verb: {f.name: (cls, f) for cls in found for f in dataclasses.fields(cls)}
            for verb, found in classes.items()}


def a_value(cls: type, f: dataclasses.Field) -> list[str]:
    """Command-line words that give option `f` a value it accepts (its default where it has one), so that a
    refusal is about the flag being given, not about its value."""
    if f.metadata.get("positional"):
        return ["x"]
    name = flag_name(f.name)
    kind, _ = _unwrap_optional(typing.get_type_hints(cls)[f.name])
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if kind is bool:
        return [name]
    if typing.get_origin(kind) is list:
        return [name, *(map(str, default) if default else ["x"])]
    if default not in (None, ""):
        return [name, str(default)]
    if "choices" in f.metadata:
        return [name, str(f.metadata["choices"][0])]
    if kind in (int, float) and "range" in f.metadata:
        lo, hi, lo_in, _ = parse_range(f.metadata["range"])
        value = lo if lo_in else (lo + 1 if hi == float("inf") else (lo + hi) / 2)
        return [name, str(kind(value))]
    return [name, "x"]


# Every verb's modes, each a tiny but complete run: {name} is a path of `path_inputs`, {out} a fresh directory.
TABLE = ["--task", "table", "--text-columns", "text", "--max-length", "32"]
TRAIN = ["--max-steps", "2", "--batch-size", "4", "--eval-every", "2", "--save-every", "2", "--no-progress",
         "--optimizer", "adamw", "--device", "cpu"]
MODES = [
    ("finetune", "one run", ["--model", "{model}", "--data-dir", "{task}", *TABLE, *TRAIN, "--out-dir", "{out}/f"]),
    ("finetune", "a grid (--seeds)", ["--model", "{model}", "--data-dir", "{task}", *TABLE, *TRAIN,
                                      "--out-dir", "{out}/g", "--seeds", "1", "2"]),
    ("finetune", "a grid of swept flags", ["--model", "{model}", "--data-dir", "{task}", *TABLE, *TRAIN,
                                           "--out-dir", "{out}/g", "--lr", "1e-3", "2e-3"]),
    ("evaluate", "one", ["--model", "{best}", "--data-dir", "{task}", *TABLE, "--out", "{out}/m.json"]),
    ("predict", "raw text", ["--model", "{best}", "--text", "the sea", "--out", "{out}/p.jsonl"]),
    ("predict", "--data-dir", ["--model", "{best}", "--data-dir", "{task}", *TABLE, "--split", "dev",
                               "--out", "{out}/p.jsonl"]),
    ("ensemble", "--models", ["--models", "{best}", "{step}", "--data-dir", "{task}", *TABLE, "--split", "dev",
                              "--out", "{out}/e"]),
    ("ensemble", "--model", ["--model", "{best}", "--data-dir", "{task}", *TABLE, "--split", "dev",
                             "--out", "{out}/e"]),
    ("ensemble", "--from-grid", ["--from-grid", "{grid}", "--data-dir", "{task}", *TABLE, "--split", "dev",
                                 "--out", "{out}/e"]),
    ("embed", "--input", ["--model", "{model}", "--input", "{sentences}", "--out", "{out}/e.npy"]),
    ("embed", "--evaluate", ["--model", "{model}", "--evaluate", "{pairs}"]),
    ("embed", "--train", ["--model", "{model}", "--train", "{pairs}", "--batch-size", "4", "--max-steps", "2",
                          "--out-dir", "{out}/s"]),
    ("embed", "--train --eval", ["--model", "{model}", "--train", "{pairs}", "--eval", "{pairs}", "--batch-size",
                                 "4", "--max-steps", "2", "--eval-every", "2", "--out-dir", "{out}/s"]),
    ("embed", "--distill --eval", ["--model", "{model}", "--distill", "{model}", "--distill-text", "{sentences}",
                                   "--eval", "{pairs}", "--batch-size", "4", "--max-steps", "2", "--eval-every", "2",
                                   "--out-dir", "{out}/d"]),
    ("embed", "--distill", ["--model", "{model}", "--distill", "{model}", "--distill-text", "{sentences}",
                            "--batch-size", "4", "--max-steps", "2", "--out-dir", "{out}/d"]),
    ("embed", "--silver", ["--model", "{model}", "--silver", "{cross}", "--silver-text", "{sentences}",
                           "--silver-pairs", "9", "--out", "{out}/s.jsonl"]),
    ("export", "--quantize none", ["--model", "{best}", "--out", "{out}/x"]),
    ("export", "--quantize int8", ["--model", "{best}", "--out", "{out}/x", "--quantize", "int8", "--force"]),
    ("tokenizer", "--encode", ["--out", "{tok}", "--encode", "the sea"]),
    ("tokenizer", "training", ["{text}", "--out", "{out}/tok", "--vocab-size", "300"]),
    ("prepare", "one", ["{text}", "--out", "{out}/data", "--tokenizer", "{tok}", "--max-seq-length", "32",
                        "--num-workers", "1", "--no-progress"]),
    ("pretrain", "--held-out", ["--config", "{model_toml}", "--data", "{data}", "--held-out", "2", *TRAIN,
                                "--out-dir", "{out}/p"]),
    ("pretrain", "--init-from", ["--init-from", "{model}", "--data", "{data}", "--held-out", "2", *TRAIN,
                                 "--out-dir", "{out}/p"]),
    ("serve", "batching", ["--model", "{best}", "--port", "0"]),
    ("serve", "--no-batching", ["--model", "{best}", "--port", "0", "--no-batching"]),
    ("convert", "--from-hf", ["--from-hf", "{model}", "--out", "{out}/c"]),
    ("convert", "--from-tf", ["--from-tf", "{tf}", "--out", "{out}/c"]),
    ("extend-vocab", "--words", ["--model", "{model}", "--out", "{out}/v", "--words", "{sentences}"]),
    ("extend-vocab", "--corpus", ["--model", "{model}", "--out", "{out}/v", "--corpus", "{text}"]),
    ("analyze", "one", ["{model}", "--text", "{sentences}", "--out", "{out}/a.png"]),
    ("params", "one", []),
    ("reproduce", "--scale paper", ["sharing", "--scale", "paper", "--out", "{out}/p", "--corpus", "{text}"]),
    ("reproduce", "--scale paper --report-only", ["sharing", "--scale", "paper", "--out", "{out}/p", "--corpus",
                                                  "{text}", "--report-only"]),
    ("reproduce", "--scale tiny", ["width", "--scale", "tiny", "--out", "{out}/r", "--data-dir", "{reproduce_data}",
                                   "--extra-corpus", "{demo_corpus}", "--set", "train.max_steps=2"]),
    ("reproduce", "--scale tiny --report-only", ["width", "--scale", "tiny", "--out", "{out}/r", "--data-dir",
                                                 "{reproduce_data}", "--report-only"]),
    ("demo", "--quick", ["--quick", "--out", "{out}/d"]),
]


def _argv(template: list[str], inputs: dict[str, str], out: Path) -> list[str]:
    return [word.replace("{out}", str(out)) if word.startswith("{out}") else inputs.get(word, word)
            for word in template]


def _run(verb: str, argv: list[str]) -> tuple[int, str]:
    """The verb's exit code and stderr; `litebert serve` stops as soon as it has started."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err), \
            pytest.MonkeyPatch.context() as mp:
        real = server.uvicorn_server
        mp.setattr(server, "uvicorn_server", lambda app, cfg: _stopping(real(app, cfg)))
        for module, name, stand_in in STAND_INS.get(verb, []):
            mp.setattr(module, name, stand_in)
        code = litebert_main([verb, *argv])
    return code, err.getvalue()


# `litebert demo --quick` takes 80 s here: its main hands --out, --quick and --seed to `run` as they are (read
# there, which is what is checked), and `run` stands in for the life cycle it drives. reproduce's rows run in this
# process, as test_reproduce runs them (a child would start torch again, 4-5 s a row).
STAND_INS = {"demo": [(demo, "run", lambda out, quick, seed: {}), (demo, "format_demo", lambda summary: "")],
             "reproduce": [(reproduce, "run_verb", test_reproduce.run_verb_in_process),
                           (budgets, "run_verb", test_reproduce.run_verb_in_process)]}


def _stopping(uvicorn_server):
    uvicorn_server.should_exit = True  # its main loop ends at once; startup and shutdown run as they do in use
    return uvicorn_server


@pytest.fixture(scope="module")
def inputs(path_inputs, root, model_dir, finished_run) -> dict[str, str]:
    """path_inputs, a grid of two fine-tuning runs, and a TOML of pretrain's [model]: what MODES name."""
    data, _, _ = finished_run
    grid = root / "grid"
    code, err = _run("finetune", ["--model", str(model_dir), "--data-dir", str(data), *TABLE, *TRAIN, "--max-steps",
                                  "12", "--lr", "3e-3", "--out-dir", str(grid), "--seeds", "1", "2"])
    assert code == 0, err
    (root / "model.toml").write_text("[model]\n" + "".join(f"{k} = {v}\n" for k, v in test_pretrain.TINY.items()))
    return {**path_inputs, "{grid}": str(grid), "{model_toml}": str(root / "model.toml"),
            "{reproduce_data}": str(root / "reproduce_data"), "{demo_corpus}": test_reproduce.DEMO_CORPUS}


def _refused_or_read(verb: str, template: list[str], inputs: dict[str, str], out: Path, cls: type, name: str,
                     flag: list[str]) -> str | None:
    """None when the run with `flag` added refuses it by name before any work (nothing written to `out`), or
    reads it (an option read only when given, as predict's --task on raw text); else what happened."""
    with pytest.MonkeyPatch.context() as mp:
        reads = OptionReads(mp)
        code, err = _run(verb, _argv(template, inputs, out) + flag)
    shown = flag[0] if flag[0].startswith("--") else f"{name} (the positional arguments)"
    refused = code == 2 and f"{shown} is read with" in err and "would ignore it" in err and err.count("\n") == 1
    if refused and not out.exists() or (cls, name) in reads.read:
        return None
    return err.strip()[-200:] or f"exit {code}, not read"


@pytest.mark.slow  # 36 runs, about 20 s
@pytest.mark.parametrize("verb,mode,template", MODES, ids=[f"{v} {m}" for v, m, _ in MODES])
def test_every_option_is_read_or_refused_in_every_mode(verb, mode, template, verb_options, inputs, tmp_path,
                                                       monkeypatch):
    reads = OptionReads(monkeypatch)
    code, err = _run(verb, _argv(template, inputs, tmp_path / "run"))
    monkeypatch.undo()
    assert code == 0, f"litebert {verb} ({mode}) did not run: {err}"
    ignored = {}
    for name, (cls, f) in sorted(verb_options[verb].items()):
        if (cls, name) in reads.read or {name, f"{verb} {name}", f"{verb} ({mode}) {name}"} & set(ALLOWED):
            continue
        flag = a_value(cls, f)
        happened = _refused_or_read(verb, template, inputs, tmp_path / f"again-{name}", cls, name, flag)
        if happened:
            ignored[" ".join(flag)] = happened
    assert not ignored, f"litebert {verb} ({mode}) neither reads nor refuses: {json.dumps(ignored, indent=1)}"


# Options a mode may leave unread without a word, each with its reason: "option" in every verb, "verb option" in
# each of its modes, "verb (mode) option" in one.
ALLOWED: dict[str, str] = {
    "overwrite": "read when the output is there already; these runs write new ones",
    "find_unused_parameters": "read under torchrun, by DistributedDataParallel; one process has none",
    "serve max_text_chars": "read per request, each text held to it; this run serves none",
    "embed (--distill) text_columns": "read with --distill-pairs (the pairs files' columns), not given here",
}


def test_every_verb_has_its_modes_run_and_every_allowance_names_an_option(verb_options):
    """A new verb joins MODES (or the check above never sees it); an allowance outlives no option."""
    assert {verb for verb, _, _ in MODES} == set(VERBS)
    modes = {(verb, mode) for verb, mode, _ in MODES}
    for key in ALLOWED:
        verb, mode, name = re.fullmatch(r"(?:(\S+) )?(?:\((.+)\) )?(\w+)", key).groups()
        if verb is None:
            assert any(name in options for options in verb_options.values()), key
        else:
            assert name in verb_options[verb] and (mode is None or (verb, mode) in modes), key
