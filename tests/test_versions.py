"""The supported versions: pyproject.toml declares ranges (a GPU image keeps the CUDA torch it has), constraints.txt
pins this project's own machines inside them, what is installed here satisfies them, and the code calls no torch
API newer than the declared minimum (a table of the ones a contributor reaches for, checked in the source)."""

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)\s*(>=)\s*([0-9.]+)")

# torch APIs litebert could reach for, with the release that added them. A use below the declared minimum fails
# here; raise the minimum (and test there) or guard the call.
NEWER_TORCH_APIS = {
    "torch.accelerator": "2.6",
    "torch.compiler.set_stance": "2.6",
    "flex_attention": "2.5",
    "torch.get_autocast_dtype": "2.4",
    "torch.compiler.is_compiling": "2.3",
}


def as_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def declared() -> dict[str, str]:
    """package -> declared minimum, from the dependencies and every extra."""
    found = {}
    for req in PYPROJECT["project"]["dependencies"] + [
            r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra]:
        m = REQUIREMENT.match(req)
        if m:
            found[m.group(1).lower()] = m.group(3)
    return found


def test_torch_transformers_and_onnxruntime_are_ranges_not_pins():
    requirements = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["hf"] + \
        PYPROJECT["project"]["optional-dependencies"]["onnx"]
    for name in ("torch", "transformers", "onnxruntime"):
        (req,) = [r for r in requirements if re.match(rf"^{name}\b", r)]
        assert "==" not in req and ">=" in req, req


def test_the_constraints_pin_inside_the_declared_ranges():
    minimum = declared()
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#"))
    assert "torch" in pins and "-c constraints.txt" in (ROOT / "Makefile").read_text()
    for name, pinned in pins.items():
        assert as_tuple(pinned) >= as_tuple(minimum[name.lower()]), (name, pinned)


@pytest.mark.parametrize("name", ["torch", "transformers", "onnxruntime", "tokenizers", "numpy", "safetensors"])
def test_what_is_installed_here_is_in_the_declared_range(name):
    try:
        installed = version(name)
    except PackageNotFoundError:
        pytest.skip(f"{name} is not installed here")
    assert as_tuple(installed) >= as_tuple(declared()[name]), (name, installed)


def test_the_code_calls_no_torch_api_newer_than_the_declared_minimum():
    minimum = as_tuple(declared()["torch"])
    source = {p: p.read_text(encoding="utf-8") for p in (ROOT / "litebert").rglob("*.py")}
    too_new = [f"{p.relative_to(ROOT)}: {api} (torch {since})" for api, since in NEWER_TORCH_APIS.items()
               if as_tuple(since) > minimum for p, text in source.items() if api in text]
    assert not too_new, too_new
