"""The benchmarks run (each script at its smoke size, as a user would start it) and their JSON is consistent:
every ratio is the ratio of the figures printed beside it, so a bench that rots or misreports fails here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_bench(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=600, cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def records(script: str, *args: str) -> list[dict]:
    lines = [json.loads(line) for line in run_bench(script, *args).splitlines() if line.startswith("{")]
    assert lines and all(r["bench"] == script.removesuffix(".py") for r in lines)
    return lines


def ratio_of(num: float, den: float) -> pytest.approx:
    """num / den, within what the printed rounding allows (times to 5 decimals, the ratio to 3)."""
    ratio = num / den
    return pytest.approx(ratio, abs=ratio * (5e-6 / num + 5e-6 / den) + 6e-4)


def timed(side: dict) -> float:
    assert 0 < side["s_min"] <= side["s_median"] <= side["s_max"]
    return side["s_median"]


@pytest.mark.slow
def test_train_step_and_inference_ratios_are_those_of_their_timings():
    for r in records("train_step.py", "--quick"):
        ours, theirs = timed(r["litebert"]), timed(r["transformers"])
        assert r["speedup"] == ratio_of(theirs, ours)
        rounding = 5e-6 / ours + 1e-3  # the median is printed to 5 decimals
        assert r["litebert"]["tokens_per_s"] == pytest.approx(r["tokens"] / ours, rel=rounding)
        mfu = r["litebert"]["mfu"], r["transformers"]["mfu"]  # same FLOPs and ceiling: their ratio is the speedup
        assert mfu[0] / mfu[1] == pytest.approx(theirs / ours, rel=5e-4 / mfu[0] + 5e-4 / mfu[1] + rounding)
    for r in records("inference.py", "--quick"):
        ours = timed(r["litebert"])
        assert r["speedup_vs_transformers"] == ratio_of(timed(r["transformers"]), ours)
        if r.get("onnxruntime"):
            assert r["speedup_vs_onnxruntime"] == ratio_of(timed(r["onnxruntime"]), ours)


@pytest.mark.slow
def test_memory_gemm_data_prep_and_profile_report_what_they_measured():
    for r in records("memory.py", "--quick"):
        deltas = {side: r[side]["peak_delta_mib"] for side in ("litebert", "litebert_checkpointing", "transformers")}
        assert all(d > 0 for d in deltas.values())
        assert r["ratio"] == pytest.approx(deltas["litebert"] / deltas["transformers"], abs=2e-3)
    (gemm,) = records("gemm.py", "--quick")
    assert gemm["results"] and all(0 < v["gflops_median"] <= v["gflops_max"] for v in gemm["results"].values())
    (prep,) = records("data_prep.py", "--mb", "0.2")
    assert prep["examples"] > 0 and prep["mb_per_s"] == pytest.approx(prep["mb"] / prep["seconds"], rel=0.02)
    assert "aten::mm" in run_bench("profile_step.py", "--quick")
