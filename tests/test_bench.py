"""The benchmarks run (each script at its smoke size, as a user would start it) and their JSON is consistent:
every ratio is the ratio of the figures printed beside it, so a bench that rots or misreports fails here."""

import contextlib
import io
import json
import math
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from fixtures.tokenizers import train_tiny_tokenizer
from paths import SHARED_DATA

from litebert.config import AlbertConfig

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


def help_of(script: str) -> str:
    """`script --help`'s output, run in this process: argparse prints it and exits before anything is built, so a
    child would only add its imports (torch, litebert, transformers: seconds each)."""
    if str(BENCH) not in sys.path:  # the scripts import their neighbours (common, gemm)
        sys.path.insert(0, str(BENCH))
    with mock.patch.object(sys, "argv", [script, "--help"]), contextlib.redirect_stdout(io.StringIO()) as out, \
            pytest.raises(SystemExit) as done:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    assert done.value.code == 0
    return out.getvalue()


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
    for r in records("inference.py", "--quick", "--suite", "encoder"):
        ours = timed(r["litebert"])
        assert r["speedup_vs_transformers"] == ratio_of(timed(r["transformers"]), ours)
        if r.get("onnxruntime"):
            assert r["speedup_vs_onnxruntime"] == ratio_of(timed(r["onnxruntime"]), ours)


@pytest.mark.slow
def test_inference_classifier_suite_reports_every_side_its_agreement_and_the_machine():
    pytest.importorskip("onnxruntime")
    (r,) = records("inference.py", "--quick")
    sides = ["litebert_fp32", "litebert_bf16", "litebert_int8", "litebert_onnx_fp32", "litebert_onnx_int8",
             "litebert_onnx_int8_per_column", "transformers_fp32", "ort_fp32", "ort_int8"]
    for shape, row in r["shapes"].items():
        B, T = map(int, shape.split("x"))
        for side in sides:
            seconds = timed(row[side])
            assert row[side]["tokens_per_s"] == pytest.approx(B * T / seconds, rel=5e-6 / seconds + 1e-3)
            if side != "litebert_bf16":  # timed apart when the CPU has no bf16 kernels, against its own anchor
                assert row[side]["speedup_vs_litebert_fp32"] == ratio_of(timed(row["litebert_fp32"]), seconds)
                assert row[side]["speedup_vs_ort_fp32"] == ratio_of(timed(row["ort_fp32"]), seconds)
        best = row["best_litebert"]
        assert best["side"].startswith("litebert") and best["speedup_vs_ort_fp32"] == max(
            row[s]["speedup_vs_ort_fp32"] for s in sides if s.startswith("litebert") and "speedup_vs_ort_fp32" in row[s])
    agreement = r["agreement_vs_litebert_fp32"]
    assert sorted(agreement) == sorted(sides[1:] + ["int8_weight_rounding_only"])
    assert agreement["int8_weight_rounding_only"]["max_abs_logit_diff"] > 0  # the weights were rounded
    margins = r["fp32_logit_margin_quantiles"]
    assert 0 <= margins["0.01"] <= margins["0.05"] <= margins["0.5"]
    for side, found in agreement.items():
        assert 0 <= found["differ"] <= r["agreement_samples"] and found["max_abs_logit_diff"] >= 0
        assert found["differ_pct"] == pytest.approx(100 * found["differ"] / r["agreement_samples"], abs=0.01)
    assert agreement["litebert_onnx_fp32"]["max_abs_logit_diff"] < 1e-4  # the same model, exported
    assert agreement["transformers_fp32"]["max_abs_logit_diff"] < 1e-4  # the same weights
    files = r["files_mb"]
    assert r["litebert_onnx_int8_size_ratio"] == pytest.approx(files["litebert_onnx_int8"] / files["litebert_onnx_fp32"],
                                                               abs=0.01)
    assert files["litebert_onnx_fp32"] == pytest.approx(files["parameters_fp32"], rel=0.05)  # each weight once
    assert r["litebert_onnx_int8_initializer_bytes"]["INT8"] > 10 * r["litebert_onnx_int8_initializer_bytes"]["FLOAT"]
    assert r["cpu_model"] and len(r["loadavg"]) == 3 and set(r["modes"]) >= {"transformers_fp32", "ort_fp32"}
    assert r["per_column_storage"] in ("int8", "uint8")
    (only,) = records("inference.py", "--quick", "--agreement-only")
    assert only["shapes"] == {}
    for side in ("litebert_int8", "litebert_onnx_int8", "int8_weight_rounding_only"):  # no variant picked by speed
        assert only["agreement_vs_litebert_fp32"][side]["differ"] == agreement[side]["differ"]  # the same seeds


def test_int8_gemm_bound_follows_from_the_times_it_prints():
    pytest.importorskip("onnxruntime")
    (r,) = records("int8_gemm.py", "--quick")
    assert set(r["gemms"]) == {"qkv", "attention_output", "ffn", "ffn_output", "embedding_projection"}
    # counted as the classifier's forward runs them at every row: the last layer computes its attention output
    # and FFN at the [CLS] rows only, so those run once fewer than the packed QKV (keys and values need all rows)
    layers = AlbertConfig.from_preset("tiny").num_hidden_layers
    assert {name: gemm["per_forward"] for name, gemm in r["gemms"].items()} == {
        "qkv": layers, "attention_output": layers - 1, "ffn": layers - 1, "ffn_output": layers - 1,
        "embedding_projection": 1}
    summed = {side: 0.0 for side in r["gemm_ms_per_forward"]}
    for gemm in r["gemms"].values():
        assert gemm["ort_int8_vs_fp32"] == pytest.approx(gemm["ort_fp32_ms"] / gemm["ort_int8_ms"], rel=0.01)
        for side in summed:
            summed[side] += gemm["per_forward"] * gemm[f"{side}_ms"]
    for side, ms in summed.items():  # the per-forward GEMM time is the layer's GEMMs times the layer count
        assert r["gemm_ms_per_forward"][side] == pytest.approx(ms, rel=0.002)
    # The bound forward / (rest + int8 GEMMs) from the printed times, each printed to 4 significant digits: where
    # the GEMMs are most of the forward and int8 is fast (a VNNI/AMX CPU), `rest` is a small difference of
    # rounded numbers and the bound a large ratio, so it is checked against every value the printed inputs allow.
    def allowed(v):
        half = 0.5 * 10 ** (math.floor(math.log10(abs(v))) - 3) if v else 0.0
        return (v - half, v, v + half)

    forward, fp32 = r["forward_fp32_ms"], r["gemm_ms_per_forward"]["torch_fp32"]
    for side in ("ort_int8", "torch_int8"):
        bounds = [f / (max(f - g, 0.0) + i) for f in allowed(forward) for g in allowed(fp32)
                  for i in allowed(r["gemm_ms_per_forward"][side])]
        assert min(bounds) - 0.006 <= r["int8_bound_vs_litebert_fp32"][side] <= max(bounds) + 0.006, (side, bounds)
    assert 0 < r["gemm_share_of_fp32_forward"] and r["machine"]["cpu"]


@pytest.mark.slow
def test_int8_error_scores_every_variant_against_fp32():
    pytest.importorskip("onnxruntime")
    (r,) = records("int8_error.py", "--quick")
    variants = ["weights_only", "shipped", "per_column_uint8", "per_column_int8", "unfused", "tables_fp32",
                "per_channel", "reduce_range", "uint8_weights"]
    for name in variants:
        found = r[name]
        assert 0 <= found["changed"] <= r["samples"]
        assert found["unchanged_pct"] == pytest.approx(100 * (1 - found["changed"] / r["samples"]), abs=0.01)
        assert 0 < found["margin_change_mean"] <= found["margin_change_max"]  # every variant moves the logits
    assert r["weights_only"]["size_vs_fp32"] is None
    assert max(r["shipped"]["size_vs_fp32"], r["per_column_uint8"]["size_vs_fp32"]) < 0.35  # the table is most of it:
    assert 0.35 < r["tables_fp32"]["size_vs_fp32"] < 1
    assert 0 <= r["fp32_margin_quantiles"]["0.01"] <= r["fp32_margin_quantiles"]["0.5"]


@pytest.mark.slow
def test_memory_gemm_data_prep_and_profile_report_what_they_measured():
    # fp32 only: a child runs the same code in either precision (train_step.make_step, whose bf16 step the
    # train_step check above runs), and each precision costs three children's imports
    for r in records("memory.py", "--quick", "--precisions", "fp32"):
        deltas = {side: r[side]["peak_delta_mib"] for side in ("litebert", "litebert_checkpointing", "transformers")}
        assert all(d > 0 for d in deltas.values())
        assert r["ratio"] == pytest.approx(deltas["litebert"] / deltas["transformers"], abs=2e-3)
    (gemm,) = records("gemm.py", "--quick")
    assert gemm["results"] and all(0 < v["gflops_median"] <= v["gflops_max"] for v in gemm["results"].values())
    (prep,) = records("data_prep.py", "--mb", "0.2")
    assert prep["examples"] > 0 and prep["mb_per_s"] == pytest.approx(prep["mb"] / prep["seconds"], rel=0.02)
    table = run_bench("profile_step.py", "--quick")
    # the GEMMs, by the name of the kernels litebert.runtime.gemm chose on this CPU (torch's, or oneDNN's where faster)
    assert "aten::mm" in table or "mkldnn::_linear_pointwise" in table, table[:2000]


@pytest.mark.slow
def test_pipeline_batching_wait_policy_and_int8_accuracy_report_what_they_measured(tmp_path):
    for r in records("pipeline_batching.py", "--quick", "--calls", "3"):  # 96 texts a set: 1/3 of the smoke size
        cut, plain = timed(r["padding_cut"]), timed(r["batch_size_only"])
        assert r["speedup"] == ratio_of(plain, cut)
        assert r["labels_unchanged"] == 1.0 and r["max_score_diff"] < 1e-4  # padding is masked: same answers
    (w,) = records("wait_policy.py", "--steps", "2")
    res = w["results"]
    assert set(res) == {f"{p}, {load}" for p in ("default", "PASSIVE") for load in ("alone", "beside one busy process")}
    assert w["passive_vs_default_alone"] == pytest.approx(res["default, alone"] / res["PASSIVE, alone"], abs=2e-3)
    # int8 against fp32 on a labelled file: a random classifier, its own tokenizer, texts of the bundled corpus
    sys.path.insert(0, str(BENCH))
    from serve_load import random_classifier, short_texts
    model = random_classifier("tiny", str(tmp_path))
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": "negative" if i % 2 else "positive"}) + "\n"
                            for i, t in enumerate(short_texts(16))))
    (q,) = records("int8_accuracy.py", "--model", model, "--data", str(data))
    assert q["rows"] == 16 and q["torch_fp32"]["unchanged_vs_torch_fp32"] == 1.0
    for name in ("torch_int8", "onnx_fp32", "onnx_int8_per_tensor", "onnx_int8_per_column"):
        assert 0 <= q[name]["accuracy"] <= 1 and 0 <= q[name]["unchanged_vs_torch_fp32"] <= 1
    assert max(q["onnx_int8_per_tensor"]["file_mb"], q["onnx_int8_per_column"]["file_mb"]) < q["onnx_fp32"]["file_mb"]
    assert set(q["export_agreement_on_dev_text"]) == {"per-tensor", "per-column"}


def test_int8_accuracy_has_export_check_its_int8_on_the_dev_texts_not_on_the_jsonl_lines(tmp_path):
    """export --verify-text reads one input a line: given the JSONL data file itself, it scored the agreement it
    reports as export_agreement_on_dev_text on lines of braces, keys and gold labels."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import int8_accuracy
    texts = ["It was a dark night.", "A passage\twith a tab\nand a line break."]
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": "austen"}) + "\n" for t in texts), encoding="utf-8")
    checked_on = []

    class Asked(Exception):
        """What export was asked is all this test needs: the bench stops there."""

    def export_model(model, out, fmt, verify_text, verify_samples=256, **options):
        checked_on.append((Path(verify_text).read_text(encoding="utf-8").splitlines(), verify_samples))
        raise Asked

    argv = ["int8_accuracy.py", "--model", str(tmp_path), "--data", str(data)]
    with mock.patch.object(sys, "argv", argv), mock.patch.object(int8_accuracy, "export_model", export_model), \
            pytest.raises(Asked):
        int8_accuracy.main()
    assert checked_on == [(["It was a dark night.", "A passage with a tab and a line break."], 2)]


def test_data_prep_peak_rss_is_prepares_not_the_tokenizer_trainings(tmp_path, capfd):
    """Without --tokenizer the bench trains one first; a process's peak never comes down, so prepare's peak RSS
    must come from a process that did not hold that training. Here the training holds 256 MB of ballast."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import data_prep
    train_tiny_tokenizer(tmp_path)  # into tmp_path/tok

    def train_tokenizer(texts, out_dir, vocab_size):
        ballast = bytearray(b"x") * (256 << 20)  # written, so resident
        shutil.copytree(tmp_path / "tok", out_dir)
        return len(ballast)

    argv = ["data_prep.py", "--corpus", str(SHARED_DATA / "pretrain" / "en_small.txt"), "--mb", "0.05",
            "--workers", "1"]
    with mock.patch.object(sys, "argv", argv), mock.patch.object(data_prep, "train_tokenizer", train_tokenizer):
        data_prep.main()
    (line,) = [line for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    record = json.loads(line)
    assert record["examples"] > 0 and 0 < record["peak_rss_mb"] < 256


def test_small_calls_reports_encoding_and_gelu_ratios_of_its_timings():
    (r,) = records("small_calls.py", "--quick")
    assert [row["texts"] for row in r["encoding"]] == [1, 32]
    for row in r["encoding"]:
        # texts/s were taken at the medians, so their ratio is the speedup (the times alone are too coarse)
        assert row["one_by_one_vs_list_call"] == pytest.approx(
            row["one_by_one"]["texts_per_s"] / row["list_call"]["texts_per_s"], rel=2e-2)
    g = r["gelu"]
    assert g["sigmoid_form_vs_fused"] == ratio_of(timed(g["fused"]), timed(g["sigmoid_form"]))
    assert g["sigmoid_form"]["max_abs_error_vs_fp64"] < 1e-6 and g["fused"]["max_abs_error_vs_fp64"] < 1e-6
    p = r["pipeline"]
    assert p["32_per_call_vs_one_per_call"] == ratio_of(timed(p["one_per_call"]), timed(p["32_per_call"]))


def test_table2_throughput_is_relative_to_bert_large_measured_in_the_same_run():
    (record,) = records("table2_throughput.py", "--quick", "--presets", "bert-large,albert-base-v2",
                        "--repeats", "3", "--warmup", "1", "--threads", "1", "--length", "32")
    models = record["models"]
    assert models["bert-large"]["speedup_vs_bert_large"] == 1.0 and models["albert-base-v2"]["paper"] == 5.6
    ours = models["albert-base-v2"]["speedup_vs_bert_large"]
    assert ours == pytest.approx(timed(models["bert-large"]) / timed(models["albert-base-v2"]), abs=0.006)
    assert models["albert-base-v2"]["parameters"] < models["bert-large"]["parameters"]


def test_table2_speedups_are_the_ratio_of_the_medians_printed_even_with_an_even_count_of_repeats():
    """With an even number of repeats the median is the mean of the middle two: the speedup must be taken from
    that median, the one printed beside it, not from the upper middle time. The steps' times are fixed here."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import table2_throughput
    fixed = {"bert-large": [2.0, 4.0], "albert-base-v2": [1.0, 3.0]}  # medians 3 and 2: 1.5x (upper middles: 1.33x)
    argv = ["table2_throughput.py", "--quick", "--presets", "bert-large,albert-base-v2", "--threads", "1"]
    with mock.patch.object(sys, "argv", argv), mock.patch.object(table2_throughput, "interleaved",
                                                                 lambda steps, warmup, repeats: fixed), \
            contextlib.redirect_stdout(io.StringIO()) as out:
        table2_throughput.main()
    models = json.loads(out.getvalue())["models"]
    assert models["albert-base-v2"]["s_median"] == 2.0 and models["bert-large"]["s_median"] == 3.0
    assert models["albert-base-v2"]["speedup_vs_bert_large"] == 1.5


@pytest.mark.parametrize("script", ["train_step.py", "inference.py", "memory.py"])
def test_the_step_inference_and_memory_benches_take_a_cuda_device(script):
    """--device cuda (CUDA-synchronised timing, MFU against a cuBLAS burst of the same run, the card named) is
    offered by each; on a machine without a GPU it is refused in one line before anything is built."""
    usage = help_of(script)
    assert "--device {cpu,cuda}" in usage and "--tf32" in usage
    if not torch.cuda.is_available():
        done = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--device", "cuda"],
                              capture_output=True, text=True, timeout=120, cwd=BENCH.parent)
        assert done.returncode != 0 and "no CUDA GPU is available" in done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_finetune_padding_reports_the_ratio_of_its_medians_on_real_batches(tmp_path):
    train_tiny_tokenizer(tmp_path)  # into tmp_path/tok
    (r,) = records("finetune_padding.py", "--quick", "--task", str(SHARED_DATA / "tasks" / "novel_authorship"),
                   "--tokenizer", str(tmp_path / "tok"))
    padded, free = timed(r["padded"]), timed(r["padding_free"])
    assert r["padding_free_vs_padded"] == ratio_of(padded, free)
    assert 0 < r["padding_share"] < 1 and r["real_tokens_per_step"] > 0
    for side, seconds in (("padded", padded), ("padding_free", free)):
        assert r[side]["real_tokens_per_s"] == pytest.approx(r["real_tokens_per_step"] / seconds, rel=1e-3)


def test_the_train_step_bench_on_the_cpu_still_prints_its_json():
    (r,) = records("train_step.py", "--quick", "--device", "cpu", "--precisions", "fp32", "--repeats", "1",
                   "--warmup", "0", "--sdpa-first", "math")
    assert r["litebert"]["mfu"] > 0 and "gpu" not in r["machine"] and r["litebert"]["gemm"] != "cuBLAS bf16"
    assert r["sdpa_first"] == "math"


def test_train_step_times_the_padding_free_step_on_padded_rows_and_credits_only_real_tokens():
    """--short-rows pads part of the batch as real pretraining data is; --padding-free times `pretrain
    --padding-free` beside the padded step; MFU counts the real tokens' work (padding earns no credit)."""
    (r,) = records("train_step.py", "--quick", "--device", "cpu", "--precisions", "fp32", "--repeats", "1",
                   "--warmup", "0", "--short-rows", "0.5", "--padding-free")
    assert 0 < r["real_tokens"] < r["tokens"]
    assert r["padding_free_vs_eager"] == pytest.approx(
        r["litebert"]["s_median"] / r["litebert_padding_free"]["s_median"], rel=0.02)
    gflop = r["model_gflop_per_step"]
    (full,) = records("train_step.py", "--quick", "--device", "cpu", "--precisions", "fp32", "--repeats", "1",
                      "--warmup", "0")
    assert gflop < full["model_gflop_per_step"]


@pytest.mark.gpu
def test_the_benches_on_a_gpu_name_the_card_and_divide_by_its_measured_ceiling():
    for r in records("train_step.py", "--quick", "--device", "cuda", "--precisions", "bf16,fp32"):
        assert r["machine"]["gpu"] and set(r["ceiling_gflops_by_backend"]) == {"cublas"}
        assert 0 < r["litebert"]["mfu"] < 1 and r["litebert"]["gemm"].startswith("cuBLAS")
    for r in records("inference.py", "--quick", "--device", "cuda", "--precisions", "bf16"):
        assert r["machine"]["gpu"] and 0 < r["litebert"]["mfu"] < 1 and "onnxruntime" not in r
    for r in records("memory.py", "--quick", "--device", "cuda", "--precisions", "bf16"):
        assert r["litebert"]["peak_delta_mib"] > 0 and r["machine"]["gpu"]


@pytest.mark.slow
def test_train_step_times_both_compile_scopes_beside_eager():
    """--compile: the whole model and compile_layers, each a side with its compile time and its speed relative
    to eager, on the same weights and batch."""
    pytest.importorskip("torch._inductor")
    (r,) = records("train_step.py", "--quick", "--compile", "--precisions", "fp32")
    for side in ("litebert_compiled", "litebert_compiled_layers"):
        assert r[side]["compile_s"] > 0 and r[side]["s_median"] > 0
        scope = side.removeprefix("litebert_")
        assert r[f"{scope}_vs_eager"] == pytest.approx(r["litebert"]["s_median"] / r[side]["s_median"], rel=0.02)


@pytest.mark.slow
def test_pretrain_loop_times_real_runs_with_and_without_data_workers(tmp_path):
    from fixtures.runs import prepare_tiny_pretraining
    prepared = prepare_tiny_pretraining(tmp_path, {})
    (r,) = records("pretrain_loop.py", "--quick", "--data", str(prepared / "data"), "--threads", "1",
                   "--workers", "0", "1")
    inline, ahead = r["sides"]["data_workers=0"], r["sides"]["data_workers=1"]
    assert inline["speedup"] == 1.0 and inline["tokens_per_s"] > 0 and ahead["tokens_per_s"] > 0
    assert ahead["speedup"] == pytest.approx(ahead["tokens_per_s"] / inline["tokens_per_s"], abs=2e-3)
    assert r["runs_per_side"] == 2 and "cpu" in r and r["model"] == "tiny" and r["batch_build_ms"] > 0
