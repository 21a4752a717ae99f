"""litebert on a CUDA GPU, every verb at tiny size: pretraining in bf16, fp32 and TF32 with evaluation, saving and
resume; torchrun on NCCL; fine-tuning, evaluate, predict, embed and serve; outputs equal to transformers' on the
GPU; torch.compile; `--precision auto` naming the card. Marked `gpu`: skipped without one ("needs a CUDA GPU").

Exact where CUDA allows it: the same batches at every step (data position and RNG are checkpointed, whatever the
device). The weights themselves are compared within a tolerance: CUDA's embedding and SDPA backward passes add with
atomics, whose order (so fp32 rounding) changes from run to run; bf16 autocast turns such 1e-7 differences into
bf16 roundings now and then. The tolerances below are those of a few steps of that, far below a wrong resume (a
repeated or skipped batch moves the weights by ~lr).

LITEBERT_GPU_TESTS_DEVICE=cpu runs this file on the CPU: a check of the tests' own code where no GPU is.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.runs import free_ports, gpu_scale_in_seconds, prepare_tiny_pretraining
from safetensors.torch import load_file

import litebert
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.demo import TASK_DIR
from litebert.model import AlbertForPreTraining, compile_layers
from litebert.paper.experiments import SCALES
from litebert.runtime.precision import device_name
from litebert.training.graphs import GraphedMicroStep
from litebert.training.metrics_log import read_metrics

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("LITEBERT_GPU_TESTS_DEVICE", "cuda")
# CUDA graphs capture on a CUDA device only (the verbs refuse them elsewhere, tested on every machine): these
# tests have nothing to check under LITEBERT_GPU_TESTS_DEVICE=cpu.
captures_on_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="--cuda-graphs captures on a CUDA GPU only")
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
       "OMP_NUM_THREADS": "1"}
# per-parameter tolerance of a resumed or distributed run against the uninterrupted one-process run
TOLERANCE = {"fp32": dict(rtol=1e-4, atol=1e-5), "tf32": dict(rtol=1e-2, atol=1e-3), "bf16": dict(rtol=2e-2, atol=2e-3)}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tokenizer and sentence-order pairs (seq 32) from the bundled corpus; a TOML with the tiny model."""
    return prepare_tiny_pretraining(tmp_path_factory.mktemp("gpu"), TINY)


def pretrain_args(prepared, out, *extra):
    return ["pretrain", "--config", str(prepared / "m.toml"), "--data", str(prepared / "data"), "--held-out", "64",
            "--batch-size", "16", "--optimizer", "lamb", "--lr", "5e-3", "--device", DEVICE, "--out-dir", str(out),
            "--no-progress", "--log-every", "1", *extra]


def precision_args(precision: str) -> list[str]:
    """bf16 autocast; fp32 with TF32 off (IEEE); fp32 with TF32 matmuls ("tf32")."""
    return {"bf16": ["--precision", "bf16"], "fp32": ["--precision", "fp32", "--no-tf32"],
            "tf32": ["--precision", "fp32", "--tf32"]}[precision]


def assert_close_weights(a: Path, b: Path, **tolerance):
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], msg=lambda m, key=key: f"{key}: {m}", **tolerance)


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run / "metrics.jsonl") if "loss" in r}


@pytest.fixture(scope="module")
def pretrained(prepared):
    """A tiny model pretrained on the GPU in bf16 for a few steps: the starting point of the other verbs."""
    out = prepared / "pretrained"
    assert litebert_main(pretrain_args(prepared, out, "--precision", "bf16", "--max-steps", "8")) == 0
    return out / "step_8"


# -- training --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["bf16", "fp32", "tf32"])
def test_pretraining_evaluates_saves_and_resumes_on_the_gpu(prepared, tmp_path, precision):
    """6 steps uninterrupted against 3 steps, then a resume to 6: the same steps, losses and weights (within the
    tolerance of CUDA's atomics); evaluation at 3 and 6; every checkpoint a model directory. A constant learning
    rate, so that the schedule does not depend on where a run ends."""
    run = lambda out, steps, *more: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args(precision), "--max-steps", str(steps), "--eval-every", "3", "--save-every",
        "3", "--warmup-steps", "0", "--lr-decay-power", "0", *more))
    assert run(tmp_path / "whole", 6) == 0
    assert run(tmp_path / "halves", 3) == 0
    assert run(tmp_path / "halves", 6, "--resume") == 0
    whole, halves = losses(tmp_path / "whole"), losses(tmp_path / "halves")
    assert sorted(whole) == sorted(halves) == list(range(1, 7))
    assert whole[1] == halves[1]  # the same first batch on the same weights: one run's kernels, bit for bit
    tol = TOLERANCE[precision]
    assert [halves[s] for s in range(4, 7)] == pytest.approx([whole[s] for s in range(4, 7)], rel=tol["rtol"] * 10)
    assert_close_weights(tmp_path / "whole" / "step_6", tmp_path / "halves" / "step_6", **tol)
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert summary["steps"] == 6 and np.isfinite(summary["final"]["mlm_loss"]) and 0 <= summary["final"]["mlm_acc"]
    evaluated = [r["step"] for r in read_metrics(tmp_path / "whole" / "metrics.jsonl") if "eval_mlm_acc" in r]
    assert evaluated[-2:] == [3, 6]
    model = AlbertForPreTraining.from_pretrained(tmp_path / "whole" / "step_6")  # loads where no GPU is
    assert next(model.parameters()).device.type == "cpu"


def test_batches_built_ahead_by_workers_train_as_built_in_step_on_the_gpu(prepared, tmp_path):
    """On CUDA the loop asks two worker processes (forked after CUDA is up) for the next batches by default; the
    same batches as built in step, so the same first loss bit for bit and the rest within CUDA's atomics."""
    run = lambda out, workers: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args("fp32"), "--max-steps", "6", "--warmup-steps", "0", "--data-workers",
        str(workers)))
    assert run(tmp_path / "inline", 0) == 0 and run(tmp_path / "ahead", 2) == 0
    inline, ahead = losses(tmp_path / "inline"), losses(tmp_path / "ahead")
    assert sorted(inline) == sorted(ahead) == list(range(1, 7)) and inline[1] == ahead[1]
    assert [ahead[s] for s in range(2, 7)] == pytest.approx([inline[s] for s in range(2, 7)], rel=1e-3)


@pytest.mark.parametrize("scope", ["layers", "model"])
def test_pretrain_compile_trains_as_eager(prepared, tmp_path, scope):
    """`pretrain --compile` (inductor) against eager, fp32 with TF32 off, SOP dropout as configured: each scope's
    losses within the tolerance of inductor's own reductions and dropout masks."""
    run = lambda out, *more: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args("fp32"), "--max-steps", "4", *more))
    assert run(tmp_path / "eager") == 0
    assert run(tmp_path / "compiled", "--compile", "--compile-scope", scope) == 0
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert sorted(compiled) == sorted(eager) == [1, 2, 3, 4]
    assert [compiled[s] for s in eager] == pytest.approx(list(eager.values()), rel=1e-2)


def test_precision_auto_names_the_card_it_compared_on(prepared, tmp_path, capsys):
    assert litebert_main(pretrain_args(prepared, tmp_path / "auto", "--precision", "auto", "--max-steps", "2")) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if "precision auto ->" in x)
    assert device_name(DEVICE) in line or "no bf16 matmul kernels" in line, line
    if DEVICE == "cuda":
        assert "cuBLAS" in line and "mkl" not in line and "onednn" not in line, line


def test_torchrun_on_nccl_equals_one_process(prepared, tmp_path):
    """torchrun with one process per GPU (at most 2) on NCCL: the same losses and weights as one process with the
    same global batch, to fp32 tolerance (the all-reduce sums in another order). MLM alone: with SOP, the SOP
    head's dropout draws other masks on each rank (tests/test_distributed.py shows SOP equal without it)."""
    nproc = max(1, min(2, torch.cuda.device_count())) if DEVICE == "cuda" else 2
    extra = ("--objective", "mlm", "--precision", "fp32", "--no-tf32", "--max-steps", "4", "--micro-batch-size",
             str(16 // nproc))
    assert litebert_main(pretrain_args(prepared, tmp_path / "one", *extra)) == 0
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                           "--master-port", str(free_ports(1)[0]), "-m", "litebert.cli",
                           *pretrain_args(prepared, tmp_path / "many", *extra)],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert losses(tmp_path / "many") == pytest.approx(losses(tmp_path / "one"), rel=1e-4)
    assert_close_weights(tmp_path / "one" / "step_4", tmp_path / "many" / "step_4", **TOLERANCE["fp32"])


# -- fine-tuning and the inference verbs -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def finetuned(pretrained, prepared):
    out = prepared / "finetuned"
    assert litebert_main(["finetune", "--model", str(pretrained), "--task", "novel_authorship", "--data-dir", TASK_DIR,
                          "--max-train-examples", "128", "--max-eval-examples", "64", "--max-length", "64",
                          "--max-steps", "6", "--eval-every", "3", "--batch-size", "16", "--optimizer", "adamw",
                          "--lr", "1e-3", "--precision", "bf16", "--device", DEVICE, "--out-dir", str(out),
                          "--no-progress"]) == 0
    return out


def test_finetune_on_the_gpu_writes_its_best_and_summary(finetuned):
    summary = json.loads((finetuned / "summary.json").read_text())
    assert (finetuned / "best" / "model.safetensors").is_file()
    assert json.dumps(summary) and "best" in json.dumps(summary)


def test_evaluate_and_predict_on_the_gpu_agree_with_the_cpu(finetuned, tmp_path, capsys):
    scores = {}
    for device in (DEVICE, "cpu"):
        out = tmp_path / f"metrics_{device}.json"
        assert litebert_main(["evaluate", "--model", str(finetuned / "best"), "--task", "novel_authorship",
                              "--data-dir", TASK_DIR, "--max-eval-examples", "64", "--max-length", "64", "--device", device,
                              "--out", str(out)]) == 0
        scores[device] = json.loads(out.read_text())
    numbers = {k: v for k, v in scores["cpu"].items() if isinstance(v, float)}
    assert numbers and all(scores[DEVICE][k] == pytest.approx(v, abs=1 / 64 + 1e-6) for k, v in numbers.items())
    predictions = tmp_path / "pred.jsonl"
    assert litebert_main(["predict", "--model", str(finetuned / "best"), "--task", "novel_authorship",
                          "--data-dir", TASK_DIR, "--device", DEVICE,
                          "--max-length", "64", "--out", str(predictions)]) == 0
    assert len(predictions.read_text().splitlines()) > 0
    capsys.readouterr()
    assert litebert_main(["predict", "--model", str(finetuned / "best"), "--device", DEVICE, "--precision", "bf16",
                          "--text", "It is a truth universally acknowledged.", "--text", "The sea was calm."]) == 0
    assert capsys.readouterr().out.strip()


def test_embed_on_the_gpu_equals_the_cpu(pretrained, tmp_path):
    sentences = tmp_path / "s.txt"
    sentences.write_text("It is a truth universally acknowledged.\nThe sea was calm.\nCall me Ishmael.\n")
    for device in (DEVICE, "cpu"):
        assert litebert_main(["embed", "--model", str(pretrained), "--input", str(sentences), "--device", device,
                              "--out", str(tmp_path / f"{device}.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / f"{DEVICE}.npy"), np.load(tmp_path / "cpu.npy"), atol=1e-4)


def test_distillation_encodes_its_teacher_on_the_gpu(pretrained, tmp_path):
    """The teacher's vectors (a corpus' worth, before training starts) are computed on the run's device: they
    were on the CPU whatever --device said."""
    from litebert.sentences.distill import DistillConfig, teacher_vectors
    texts = ["It is a truth universally acknowledged.", "The sea was calm.", "Call me Ishmael."] * 8
    cfg = DistillConfig(distill=str(pretrained))
    on = {device: teacher_vectors(str(pretrained), texts, cfg, str(tmp_path), write=False, progress=False,
                                  device=device) for device in (DEVICE, "cpu")}
    np.testing.assert_allclose(on[DEVICE], on["cpu"], atol=1e-4)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(texts) + "\n")
    assert litebert_main(["embed", "--model", str(pretrained), "--distill", str(pretrained), "--distill-text",
                          str(corpus), "--device", DEVICE, "--max-steps", "2", "--batch-size", "4",
                          "--out-dir", str(tmp_path / "distill"), "--no-progress"]) == 0


def test_serve_on_the_gpu_answers_as_the_cpu_pipeline(finetuned):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    texts = ["It is a truth universally acknowledged.", "The sea was calm.", "Call me Ishmael."]
    port = free_ports(1)[0]
    server = subprocess.Popen([sys.executable, "-m", "litebert.cli", "serve", "--model", str(finetuned / "best"),
                               "--device", DEVICE, "--port", str(port), "--host", "127.0.0.1"],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None and time.monotonic() < deadline, server.communicate(timeout=5)[0][-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        served = httpx.post(f"http://127.0.0.1:{port}/predict", json={"inputs": texts}, timeout=60).json()["outputs"]
    finally:
        server.terminate()
        server.communicate(timeout=30)
    expected = litebert.pipeline(model=str(finetuned / "best"), device="cpu")(texts)
    assert [o["label"] for o in served] == [o["label"] for o in expected]
    assert [o["score"] for o in served] == pytest.approx([o["score"] for o in expected], abs=1e-4)


# -- parity and compile ----------------------------------------------------------------------------------------

def test_outputs_equal_transformers_on_the_gpu(tmp_path):
    """fp32 with TF32 off on both sides: the same weights give the same logits (1.2e-6 measured on an H100)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=300, **TINY)
    AlbertForPreTraining(config).save_pretrained(tmp_path / "m")
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "m").eval().to(DEVICE)
    theirs = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "m").eval().to(DEVICE)
    ids = torch.randint(5, 300, (4, 40), device=DEVICE)
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0  # one padded row
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.no_grad():
            a, b = ours(ids, attention_mask=mask), theirs(input_ids=ids, attention_mask=mask)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scope", ["model", "layers"])
def test_a_compiled_training_step_equals_eager_on_the_gpu(scope):
    """Inductor's kernels for the whole step (one graph: tests/test_compile.py checks that on any machine), or
    for each block (compile_layers, --compile-scope layers). No SOP head dropout: inductor draws its own masks
    (philox), so with dropout the two losses differ by the masks alone (5e-4 relative on the H100 and H200)."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(vocab_size=300, **TINY, classifier_dropout_prob=0.0)).to(DEVICE)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (8, 32), generator=g)
    batch = {"input_ids": ids, "labels": ids.masked_fill(torch.rand(8, 32, generator=g) > 0.15, -100),
             "sentence_order_label": torch.randint(0, 2, (8,), generator=g)}
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    eager = model(**batch).loss
    eager.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = (torch.compile(model) if scope == "model" else compile_layers(model))(**batch).loss
    compiled.backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    for g_eager, p in zip(grads, model.parameters()):
        torch.testing.assert_close(p.grad, g_eager, rtol=1e-3, atol=1e-5)


@captures_on_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graphs_train_as_eager_and_resume(prepared, tmp_path, precision):
    """--cuda-graphs: the first micro-steps of a batch shape run eagerly (warm-up), the rest replay one captured
    graph. Its losses and weights equal an eager run's within the precision's tolerance (its MLM loss sums every
    position's, weighted, instead of the selected positions': another order of the same sum), and a resumed run
    captures again and continues."""
    run = lambda out, steps, *more: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args(precision), "--max-steps", str(steps), "--save-every", "3",
        "--warmup-steps", "0", "--lr-decay-power", "0", *more))
    assert run(tmp_path / "eager", 6) == 0
    assert run(tmp_path / "graphed", 3, "--cuda-graphs") == 0  # steps 1-2 warm up, step 3 is captured and replayed
    assert run(tmp_path / "graphed", 6, "--cuda-graphs", "--resume") == 0
    eager, graphed = losses(tmp_path / "eager"), losses(tmp_path / "graphed")
    assert sorted(graphed) == list(range(1, 7))
    tol = TOLERANCE[precision]
    assert [graphed[s] for s in range(1, 7)] == pytest.approx([eager[s] for s in range(1, 7)], rel=tol["rtol"] * 10)
    assert_close_weights(tmp_path / "eager" / "step_6", tmp_path / "graphed" / "step_6", **tol)


@pytest.mark.parametrize("graphs", [False, pytest.param(True, marks=captures_on_cuda)])
def test_pretrain_padding_free_on_the_gpu_learns_as_the_padded_run(prepared, tmp_path, graphs):
    """`pretrain --padding-free` in bf16 (varlen flash attention), eager and captured (batches padded to the data's
    length with their real tokens' places): its losses within bf16 tolerance of the padded run's."""
    run = lambda out, *more: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args("bf16"), "--max-steps", "5", "--warmup-steps", "0", *more))
    assert run(tmp_path / "padded") == 0
    assert run(tmp_path / "free", "--padding-free", *(["--cuda-graphs"] if graphs else [])) == 0
    padded, free = losses(tmp_path / "padded"), losses(tmp_path / "free")
    assert sorted(free) == sorted(padded) == [1, 2, 3, 4, 5]
    assert [free[s] for s in padded] == pytest.approx(list(padded.values()), rel=TOLERANCE["bf16"]["rtol"] * 10)


@captures_on_cuda
def test_cuda_graphs_with_compiled_blocks_train_as_eager(prepared, tmp_path):
    """--cuda-graphs --compile (the fastest albert-base step on an H100, docs/gpu.md): inductor's block kernels are
    compiled in the eager warm-up and run inside the captured graph; fp32 with TF32 off, its losses within the
    tolerance of inductor's own reductions and dropout masks, as `--compile` alone."""
    run = lambda out, *more: litebert_main(pretrain_args(  # noqa: E731
        prepared, out, *precision_args("fp32"), "--max-steps", "5", "--warmup-steps", "0", *more))
    assert run(tmp_path / "eager") == 0
    assert run(tmp_path / "graphed", "--cuda-graphs", "--compile", "--compile-scope", "layers") == 0
    eager, graphed = losses(tmp_path / "eager"), losses(tmp_path / "graphed")
    assert sorted(graphed) == sorted(eager) == [1, 2, 3, 4, 5]  # steps 3-5 replay the capture
    assert [graphed[s] for s in eager] == pytest.approx(list(eager.values()), rel=1e-2)


@captures_on_cuda
def test_finetune_cuda_graphs_capture_the_padding_free_step_and_learn_as_eager(pretrained, tmp_path, monkeypatch):
    """finetune --cuda-graphs pads each batch to --max-length and rounds its real tokens up to a multiple of it, so
    the padding-free step (varlen flash attention) meets a few shapes and each is captured once; the run's losses
    equal an eager padding-free run's within bf16's tolerance (no dropout: a graph draws its own masks)."""
    captured = []
    capture = GraphedMicroStep._capture
    monkeypatch.setattr(GraphedMicroStep, "_capture", lambda self, key, batch, scale, no_padding: (
        captured.append(batch["packed_positions"].numel()), capture(self, key, batch, scale, no_padding)))
    run = lambda out, *more: litebert_main([  # noqa: E731
        "finetune", "--model", str(pretrained), "--task", "novel_authorship", "--data-dir", TASK_DIR,
        "--max-train-examples", "64", "--max-eval-examples", "32", "--max-length", "64", "--max-steps", "12",
        "--eval-every", "12", "--batch-size", "16", "--optimizer", "adamw", "--lr", "1e-3", "--dropout", "0",
        "--precision", "bf16", "--device", DEVICE, "--log-every", "1", "--out-dir", str(out), "--no-progress", *more])
    assert run(tmp_path / "eager") == 0 and not captured
    assert run(tmp_path / "graphed", "--cuda-graphs") == 0
    assert captured and all(n % 64 == 0 for n in captured), captured
    eager, graphed = losses(tmp_path / "eager"), losses(tmp_path / "graphed")
    assert sorted(graphed) == sorted(eager) == list(range(1, 13))
    assert [graphed[s] for s in eager] == pytest.approx(list(eager.values()), rel=TOLERANCE["bf16"]["rtol"] * 10)


def test_the_paper_gpu_scale_runs_a_grid_with_fine_tuning(tmp_path):
    """`litebert reproduce --scale gpu` as it runs on the card (bf16, LAMB, its own model sizes), seconds of work a
    row: every row pretrains, fine-tunes on both suite tasks and reaches the report."""
    assert litebert_main(gpu_scale_in_seconds(tmp_path, "objective", DEVICE)) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["rows"]) == ["None", "NSP", "SOP"]
    for row in results["rows"].values():
        assert list(row["runs"]["12345"]["downstream"]) == list(SCALES["gpu"].finetune["tasks"])
    recipe = (tmp_path / "rows" / "SOP" / "seed12345" / "pretrain.toml").read_text()
    assert f'device = "{DEVICE}"' in recipe and ('precision = "bf16"' in recipe) == (DEVICE == "cuda")
    assert "## The paper's comparisons" in (tmp_path / "report.md").read_text()
