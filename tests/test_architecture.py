"""The package's shape: imports point one way (verbs -> stages -> model core), and no module imports itself
back through another. Read from the source (ast), so a lazy import inside a function counts too."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "litebert"
RUNTIME = "litebert.runtime"  # how this machine runs the math: beneath the model core, importing only these two
CORE = {"litebert.config", "litebert.errors", "litebert.model", "litebert.heads", "litebert.weights",
        "litebert.tokenizer", "litebert.hub", "litebert.files", "litebert.sentence", "litebert.progress",
        "litebert.weight_shards"}
TEXT = "litebert.text"  # the tokenizer's parts: in the model core with it
STAGES = ("litebert.corpus", "litebert.tasks", "litebert.training", "litebert.interop", "litebert.paper",
          "litebert.serving", "litebert.sentences")
VERBS = {"litebert.pretrain", "litebert.finetune", "litebert.evaluate", "litebert.embed", "litebert.vocab",
         "litebert.demo", "litebert.cli", "litebert.ensemble"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The litebert modules `name` imports (the longest module each import statement names)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            for k in range(len(parts), 0, -1):
                candidate = ".".join(parts[:k])
                if candidate in MODULES and candidate not in (name, "litebert"):
                    found.add(candidate)
                    break
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def find_cycle() -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, stack.append(node)
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        state[node], _ = 2, stack.pop()
        return None

    for start in sorted(GRAPH):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycles():
    cycle = find_cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    GRAPH["litebert.config"].add("litebert.model")  # model imports config: a cycle once config imports model
    try:
        assert find_cycle() is not None
    finally:
        GRAPH["litebert.config"].discard("litebert.model")


def in_core(name: str) -> bool:
    return name in CORE or name.startswith((RUNTIME, TEXT))


def layer(name: str) -> int:
    if in_core(name):
        return 0
    if name.startswith(STAGES):
        return 1
    return 2  # verbs and the top-level helpers (runconfig, allocator, devdata) sit above the stages


@pytest.mark.parametrize("name", sorted(n for n in MODULES if in_core(n)))
def test_the_model_core_imports_no_stage_or_verb(name):
    outside = sorted(dep for dep in GRAPH[name] if not in_core(dep))
    assert not outside, f"{name} imports {outside}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(STAGES)))
def test_stages_import_no_verb(name):
    verbs = sorted(dep for dep in GRAPH[name] if dep in VERBS)
    assert not verbs, f"{name} imports the verb module(s) {verbs}"


def test_corpus_needs_no_task_training_or_network_code():
    for name in (n for n in MODULES if n.startswith("litebert.corpus")):
        bad = sorted(d for d in GRAPH[name] if d.startswith(("litebert.tasks", "litebert.training", "litebert.hub",
                                                              "litebert.interop")))
        assert not bad, f"{name} imports {bad}"


def test_training_a_tokenizer_and_preparing_data_never_load_torch(tmp_path):
    """Those two stages need only sentencepiece and numpy. torch alone holds about 200 MB resident, more than
    `prepare` itself on 2 MB of text, so one import of it through a shared constant doubled the data bench's peak
    (and each worker's start). Run as the verbs in a fresh interpreter, which reports what it loaded."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"Document {d} begins here. It has a second sentence about {d} cats. "
                                    f"And a third one, on day {d}." for d in range(60)), encoding="utf-8")
    script = ("import sys\nfrom litebert import cli\n"
              f"assert cli.main(['tokenizer', {str(corpus)!r}, '--out', {str(tmp_path / 'tok')!r}, '--vocab-size', '50']) == 0\n"
              f"assert cli.main(['prepare', {str(corpus)!r}, '--tokenizer', {str(tmp_path / 'tok')!r}, "
              f"'--out', {str(tmp_path / 'data')!r}, '--max-seq-length', '32', '--num-workers', '1']) == 0\n"
              "print('torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "data" / "meta.json").is_file()
    assert run.stdout.strip().splitlines()[-1] == "False", "training a tokenizer or preparing data loaded torch"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(RUNTIME)))
def test_the_runtime_sits_beneath_the_model_core(name):
    bad = sorted(d for d in GRAPH[name] if not d.startswith(RUNTIME) and d not in ("litebert.errors", "litebert.files"))
    assert not bad, f"{name} imports {bad}"


def test_serving_places_models_without_the_training_stage():
    for name in (n for n in MODULES if n.startswith("litebert.serving")):
        bad = sorted(d for d in GRAPH[name] if d.startswith("litebert.training"))
        assert not bad, f"{name} imports {bad}"


# A room holds one concern: past this many lines a module usually holds two. Those above it, with the reason.
MAX_LINES = 470
LARGER = {"litebert.model": "the whole network in one readable file, as nanoGPT's (design.md)"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_holds_several_concerns(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES or name in LARGER, f"{name}: {lines} lines; split it along its concerns"


def function_local_imports(name: str) -> list[str]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("litebert"):
                found.append(f"line {node.lineno}: from {node.module}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("litebert") for a in node.names):
                found.append(f"line {node.lineno}: import")
    return found


def test_litebert_imports_its_own_modules_at_the_top():
    """The import graph is visible at the top of each file: with no cycles left to break, a function-local import
    of litebert's own code only hides an edge (optional third-party dependencies stay local)."""
    hidden = {name: found for name in MODULES if (found := function_local_imports(name))}
    assert not hidden, hidden


def test_precision_names_are_spelled_in_one_place():
    """Backends and configs take subsets of litebert.runtime.precision's list, never a list of their own."""
    for name, path in MODULES.items():
        if name == "litebert.runtime.precision":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List)):
                values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                assert not {"fp32", "bf16"} <= values and not {"fp32", "int8"} <= values, \
                    f"{name}:{node.lineno} spells precision names; use litebert.runtime.precision"


def test_every_verb_builds_its_command_line_one_way():
    """Every verb's flags come from its config dataclasses through runconfig.verb_parser (help from the fields,
    --config FILE.toml, one precedence), never from a hand-made argparse parser."""
    from litebert.cli import VERBS as CLI_VERBS
    for target, _ in CLI_VERBS.values():
        module = target.split(":")[0]
        text = MODULES[module].read_text(encoding="utf-8")
        assert "verb_parser(" in text and "ArgumentParser(" not in text, module


def test_files_are_written_whole_or_not_at_all():
    """A file litebert writes is replaced atomically (litebert.files: a temporary beside it, then a rename), so a
    kill or a full disk leaves the old file or the new one, never a part. An open() for writing elsewhere is
    the class of bug this rules out (config.json and an extended spiece.model were written in place); appending
    to a log is the one exception, since an append keeps what was there."""
    offenders = []
    for name, path in MODULES.items():
        if name == "litebert.files":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open"):
                continue
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 None)
            if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wx+"):
                offenders.append(f"{name}:{node.lineno} open(..., {mode.value!r})")
    assert not offenders, f"write through litebert.files (atomic_open, write_json, ...): {offenders}"


def unpickling(source: str) -> list[str]:
    """Where `source` imports a pickle module, calls torch.load without weights_only=True, or np.load with
    allow_pickle set (line: what)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{node.lineno}: imports {m}" for m in mods if m.split(".")[0] in ("pickle", "dill", "joblib")]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        call = f"{getattr(node.func.value, 'id', '?')}.{node.func.attr}"
        kw = {k.arg: getattr(k.value, "value", None) for k in node.keywords}
        if call == "torch.load" and kw.get("weights_only") is not True:
            found.append(f"{node.lineno}: torch.load without weights_only=True")
        if call == "np.load" and kw.get("allow_pickle", False) is not False:
            found.append(f"{node.lineno}: np.load(allow_pickle=...)")
    return found


def test_nothing_litebert_reads_is_unpickled():
    """Checkpoints, weights and arrays come from users and the Hub: torch.load only with weights_only=True, np.load
    never with allow_pickle=True, and no pickle module at all."""
    assert unpickling("import pickle\nx = torch.load(p)\ny = np.load(p, allow_pickle=True)\n"
                      "z = torch.load(p, weights_only=True)\nw = np.load(p)\n") == [
        "1: imports pickle", "2: torch.load without weights_only=True", "3: np.load(allow_pickle=...)"]
    offenders = [f"{name}:{where}" for name, path in MODULES.items()
                 for where in unpickling(path.read_text(encoding="utf-8"))]
    assert not offenders, offenders


def swallowed(source: str) -> list[int]:
    """Lines of `except Exception`, `except BaseException` or a bare `except` whose body neither raises, nor
    uses the error it caught, nor says anything (a log call, a warning, a print)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler):
            continue
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        if not any(t is None or getattr(t, "id", None) in ("Exception", "BaseException") for t in caught):
            continue
        body = [n for stmt in node.body for n in ast.walk(stmt)]
        raises = any(isinstance(n, ast.Raise) for n in body)
        uses = node.name is not None and any(isinstance(n, ast.Name) and n.id == node.name for n in body)
        says = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in (
            "debug", "info", "warning", "error", "exception", "critical", "warn") or isinstance(n, ast.Call)
            and getattr(n.func, "id", None) == "print" for n in body)
        if not (raises or uses or says):
            found.append(node.lineno)
    return found


def test_no_error_is_caught_whole_and_dropped():
    """A handler for any exception that drops it turns a full disk, a network error or a bug into a wrong
    default without a word (a tokenizer's config that failed to download meant other normalisation). Catch
    what is expected by name, or say what was caught."""
    assert swallowed("try:\n    f()\nexcept Exception:\n    pass\ntry:\n    f()\nexcept Exception as e:\n"
                     "    note(e)\ntry:\n    f()\nexcept:\n    log.warning('x')\ntry:\n    f()\nexcept OSError:\n"
                     "    pass\n") == [3]
    offenders = [f"{name}:{line}" for name, path in MODULES.items()
                 for line in swallowed(path.read_text(encoding="utf-8"))]
    assert not offenders, offenders


PARSE_DAMAGE = {"JSONDecodeError", "TOMLDecodeError", "ValueError", "Exception", "BaseException"}


def unguarded_parses(source: str) -> list[int]:
    """Lines where json.load(s) or tomllib.load(s) parses outside a `try` that catches its damage (ValueError
    or above), in a function that is not a check_replaceable predicate (whose ValueError means "not ours").
    json.loads(json.dumps(...)) reads no file and is passed over."""
    tree = ast.parse(source)
    predicates = {n.args[1].id for n in ast.walk(tree) if isinstance(n, ast.Call) and len(n.args) > 1
                  and getattr(n.func, "id", None) == "check_replaceable" and isinstance(n.args[1], ast.Name)}
    found = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            guarded = node.name in predicates
        if isinstance(node, ast.Try):
            caught = {getattr(t, "id", getattr(t, "attr", None)) if t is not None else "BaseException"
                      for h in node.handlers for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
            for stmt in node.body:
                visit(stmt, guarded or bool(caught & PARSE_DAMAGE))
            for part in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(part, guarded)
            return
        parse = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and getattr(node.func.value, "id", None) in ("json", "tomllib") and node.func.attr in ("load", "loads")
        if parse and not guarded \
                and not (node.args and isinstance(node.args[0], ast.Call)
                         and getattr(node.args[0].func, "attr", None) == "dumps"):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def test_every_json_and_toml_file_is_parsed_where_damage_becomes_one_line():
    """A damaged grid.json, summary.json or cache key was a JSONDecodeError traceback (a ValueError, not a
    LitebertError): parse through files.read_json_object / read_json_as (or runconfig.load_toml), which name
    the file, or under a handler of the damage."""
    assert unguarded_parses("import json\nx = json.load(f)\ntry:\n    y = json.loads(s)\nexcept ValueError:\n"
                            "    y = None\nz = json.loads(json.dumps(v))\n") == [2]
    offenders = [f"{name}:{line}" for name, path in MODULES.items() if name != "litebert.files"
                 for line in unguarded_parses(path.read_text(encoding="utf-8"))]
    assert not offenders, f"parse with litebert.files.read_json_object / read_json_as: {offenders}"


def test_progress_is_shown_one_way():
    """litebert.progress draws a bar on a terminal and writes a line now and then in a log; a tqdm of a module's
    own drew nothing in a log (disable=None), so a teacher encoding a corpus for an hour said nothing there."""
    offenders = [f"{name}:{node.lineno}" for name, path in MODULES.items() if name != "litebert.progress"
                 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, (ast.Import, ast.ImportFrom))
                 and any(m.split(".")[0] == "tqdm" for m in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                                            else [node.module or ""]))]
    assert not offenders, f"show progress with litebert.progress.progress_bar: {offenders}"
