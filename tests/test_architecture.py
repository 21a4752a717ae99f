"""The package's shape: imports point one way (verbs -> stages -> model core), and no module imports itself
back through another. Read from the source (ast), so a lazy import inside a function counts too."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "litebert"
CORE = {"litebert.config", "litebert.errors", "litebert.model", "litebert.heads", "litebert.weights",
        "litebert.tokenizer", "litebert.hub", "litebert.files", "litebert.gemm", "litebert.sentence",
        "litebert.pretokenize"}
STAGES = ("litebert.corpus", "litebert.tasks", "litebert.training", "litebert.interop", "litebert.paper",
          "litebert.serving")
VERBS = {"litebert.pretrain", "litebert.finetune", "litebert.embed", "litebert.vocab", "litebert.demo",
         "litebert.cli", "litebert.ensemble", "litebert.reproduce"}


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


def layer(name: str) -> int:
    if name in CORE:
        return 0
    if name.startswith(STAGES):
        return 1
    return 2  # verbs and the top-level helpers (runconfig, allocator, devdata) sit above the stages


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n in CORE))
def test_the_model_core_imports_no_stage_or_verb(name):
    outside = sorted(dep for dep in GRAPH[name] if dep not in CORE)
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
