"""litebert.runtime.gemm: the fp32 GEMM backend (torch's default or oneDNN) gives the plain results, forward and backward,
in every module that uses it; the choice can be forced, is recorded and cached atomically; --precision auto."""

import dataclasses
import json
import os
import shutil
import time

import pytest
import torch

from litebert.config import AlbertConfig
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertMLMHead, AlbertTransformer
from litebert.runtime import cpu, gemm, precision
from litebert.runtime.precision import choose_precision

pytestmark = pytest.mark.skipif(not gemm.onednn_available(), reason="torch built without oneDNN")
TOL = dict(atol=1e-5, rtol=1e-5)  # fp32: the two libraries sum in different orders, nothing more


@pytest.fixture(autouse=True)
def fresh_choice(monkeypatch, tmp_path):
    """Every test starts unforced, with its own cache directory and nothing chosen yet in this process."""
    monkeypatch.setattr(gemm, "_forced", None)
    monkeypatch.setattr(gemm, "_chosen", {})
    monkeypatch.setenv(gemm.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(gemm.ENV, raising=False)


@pytest.fixture
def onednn_calls(monkeypatch):
    """Counts the oneDNN kernel's calls."""
    calls = []
    real = gemm._onednn_linear

    def counting(*args):
        calls.append(args[0].shape)
        return real(*args)
    monkeypatch.setattr(gemm, "_onednn_linear", counting)
    return calls


def choice(forward: str, backward: str):
    """Context: this process's choice is (forward, backward), as a measurement may pick them."""
    fixed = gemm.GemmChoice(forward, backward, "test")
    original = gemm.backend

    class Ctx:
        def __enter__(self):
            gemm.backend = lambda: fixed

        def __exit__(self, *exc):
            gemm.backend = original
    return Ctx()


CHOICES = [("mkl", "mkl"), ("onednn", "onednn"), ("onednn", "mkl"), ("mkl", "onednn")]


def tiny(**overrides) -> AlbertConfig:
    base = dict(vocab_size=101, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    return AlbertConfig(**{**base, **overrides})


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():  # random LayerNorms and biases too, so nothing hides behind its init
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module


def run(fn, inputs: list[torch.Tensor], params) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fn's output and the gradients of a random projection of it w.r.t. inputs and parameters."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    for p in params:
        p.grad = None
    out = fn(*inputs)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7)))
    grads = [t.grad for t in inputs if t.is_floating_point()] + [p.grad for p in params]
    return out.detach(), [g.clone() for g in grads]


def assert_same(fn, inputs, params, forward, backward, calls) -> None:
    with choice("mkl", "mkl"):
        ref_out, ref_grads = run(fn, inputs, params)
    assert not calls
    with choice(forward, backward):
        out, grads = run(fn, inputs, params)
    torch.testing.assert_close(out, ref_out, **TOL)
    assert len(grads) == len(ref_grads)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, **TOL)
    assert bool(calls) == ("onednn" in (forward, backward))  # the fast path ran (or stayed out of the way)


@pytest.mark.parametrize("forward,backward", CHOICES)
@pytest.mark.parametrize("case", ["2d", "3d", "no_bias", "strided_input", "packed_weight"])
def test_linear_equals_f_linear(forward, backward, case, onednn_calls):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 24, generator=g) if case != "2d" else torch.randn(7, 24, generator=g)
    w, b = torch.randn(40, 24, generator=g, requires_grad=True), torch.randn(40, generator=g, requires_grad=True)
    if case == "strided_input":
        x = torch.randn(2, 24, 5, generator=g)  # used transposed: (2, 5, 24), not contiguous

    def fn(x):
        xx = x.transpose(1, 2) if case == "strided_input" else x
        weight = torch.cat([w[:20] * 0.5, w[20:]]) if case == "packed_weight" else w  # a non-leaf, as QKV
        return gemm.linear(xx, weight, None if case == "no_bias" else b)
    assert_same(fn, [x], [w] if case == "no_bias" else [w, b], forward, backward, onednn_calls)


# Every module whose linear layers go through litebert.runtime.gemm, each on its own.
def attention_full(config):
    layer = randomized(AlbertTransformer(config)).albert_layer_groups[0].albert_layers[0]
    att = layer.attention
    return (lambda x: att(x, None, att.packed_qkv())), [torch.randn(2, 6, 32)], list(att.parameters())


def attention_at_positions(config):
    att = randomized(AlbertTransformer(config)).albert_layer_groups[0].albert_layers[0].attention
    positions = torch.tensor([[0, 3], [0, 5]])
    return (lambda x: att(x, None, None, positions)), [torch.randn(2, 6, 32)], list(att.parameters())


def ffn_layer(config):
    layer = randomized(AlbertTransformer(config)).albert_layer_groups[0].albert_layers[0]
    return (lambda x: layer(x, None)), [torch.randn(2, 6, 32)], list(layer.parameters())


def encoder_with_projection(config):
    enc = randomized(AlbertTransformer(config))
    return (lambda x: enc(x, None)), [torch.randn(2, 6, 16)], list(enc.parameters())


def mlm_head(config):
    head = randomized(AlbertMLMHead(config))
    return head, [torch.randn(5, 32)], list(head.parameters())


MODULES = [attention_full, attention_at_positions, ffn_layer, encoder_with_projection, mlm_head]


@pytest.mark.parametrize("forward,backward", CHOICES[1:])
@pytest.mark.parametrize("build", MODULES, ids=lambda f: f.__name__)
def test_every_module_equals_the_plain_path(build, forward, backward, onednn_calls):
    torch.manual_seed(0)
    fn, inputs, params = build(tiny())
    assert_same(fn, inputs, params, forward, backward, onednn_calls)


@pytest.mark.parametrize("cls", [AlbertForPreTraining, AlbertForMaskedLM], ids=lambda c: c.__name__)
def test_whole_model_loss_logits_and_gradients_with_onednn_forced(cls, onednn_calls):
    config = tiny(num_hidden_groups=1)
    torch.manual_seed(0)
    model = randomized(cls(config))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 101, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, -4:] = 0
    labels = torch.full((3, 12), -100)
    labels[:, 2::3] = ids[:, 2::3]
    batch = dict(input_ids=ids, attention_mask=mask, labels=labels)
    if cls is AlbertForPreTraining:
        batch["sentence_order_label"] = torch.tensor([0, 1, 0])

    def loss_and_grads(name):
        model.zero_grad(set_to_none=True)
        with gemm.forced_backend(name):
            out = model(**batch)
            out.loss.backward()
            with torch.inference_mode():
                hidden = model.albert(ids, mask).last_hidden_state
        return out.loss.detach(), out[1].detach(), hidden, {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = loss_and_grads("mkl")
    assert not onednn_calls
    fast = loss_and_grads("onednn")
    assert len(onednn_calls) >= 4 * config.num_hidden_layers  # QKV, attention output, FFN in, FFN out per layer
    for a, b in zip(fast[:3], plain[:3]):
        torch.testing.assert_close(a, b, **TOL)
    for name in plain[3]:
        torch.testing.assert_close(fast[3][name], plain[3][name], **TOL, msg=name)


def test_plain_f_linear_under_autocast_and_for_other_dtypes(onednn_calls):
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    with gemm.forced_backend("onednn"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert gemm.linear(x, w).dtype == torch.bfloat16  # autocast's own cast: never a silent bf16 path
        gemm.linear(x.double(), w.double())
        assert not onednn_calls
        gemm.linear(x, w)
        assert onednn_calls


def test_a_gemm_off_the_cpu_never_measures_the_cpus_backends(monkeypatch):
    """A GPU run's first linear() timed the CPU's GEMMs (~0.5 s, every rank of a node at once) and wrote the
    cache, for kernels it never calls: off the CPU (here the meta device stands in for CUDA) it is F.linear."""
    def no_measuring():
        raise AssertionError("measured the CPU's GEMMs for a tensor off the CPU")
    monkeypatch.setattr(gemm, "backend", no_measuring)
    x, w = torch.empty(4, 8, device="meta"), torch.empty(6, 8, device="meta")
    assert gemm.linear(x, w).shape == (4, 6) and gemm.linear(x, w).device.type == "meta"


def test_a_measured_onednn_choice_leaves_tiny_gemms_to_f_linear(monkeypatch, onednn_calls):
    monkeypatch.setattr(gemm, "backend", lambda: gemm.GemmChoice("onednn", "onednn", "cache", {}, gemm.ONEDNN_MIN_MACS))
    gemm.linear(torch.randn(4, 8), torch.randn(6, 8))  # 192 multiply-adds: oneDNN's fixed cost would dominate
    assert not onednn_calls
    gemm.linear(torch.randn(256, 128), torch.randn(128, 128))
    assert onednn_calls


def test_hooked_and_swapped_modules_are_called_as_themselves(onednn_calls):
    seen = []
    layer = torch.nn.Linear(8, 4)
    layer.register_forward_hook(lambda m, i, o: seen.append(o))
    with gemm.forced_backend("onednn"):
        out = gemm.dense(layer, torch.randn(3, 8))
    assert seen and seen[0] is out and not onednn_calls  # the hook saw it: the module's own call



@pytest.mark.parametrize("hook", ["full backward", "backward pre", "global backward"])
def test_backward_hooks_run_as_in_the_modules_own_call(hook, onednn_calls):
    """A backward hook (gradient attribution, gradient logging) must fire as it does in `layer(x)`."""
    fired = []
    layer = torch.nn.Linear(8, 4)
    handle = {"full backward": lambda: layer.register_full_backward_hook(lambda m, gi, go: fired.append(go)),
              "backward pre": lambda: layer.register_full_backward_pre_hook(lambda m, go: fired.append(go)),
              "global backward": lambda: torch.nn.modules.module.register_module_full_backward_hook(
                  lambda m, gi, go: fired.append(go))}[hook]()
    try:
        with gemm.forced_backend("onednn"):
            gemm.dense(layer, torch.randn(3, 8, requires_grad=True)).sum().backward()
    finally:
        handle.remove()
    assert fired and not onednn_calls

# -- forcing and recording the choice -----------------------------------------------------------------------------

def fake_measurement(monkeypatch, forward="onednn", backward="mkl"):
    calls = []

    def measure():
        calls.append(1)
        return gemm.GemmChoice(forward, backward, "measured", {"mkl": {"forward": 1.0}, "onednn": {"forward": 2.0}})
    monkeypatch.setattr(gemm, "measure_backends", measure)
    return calls


def test_backend_forced_by_env_and_by_function(monkeypatch):
    measured = fake_measurement(monkeypatch)
    monkeypatch.setenv(gemm.ENV, "onednn")
    assert (gemm.backend().name, gemm.backend().source) == ("onednn", "env")
    monkeypatch.setenv(gemm.ENV, "mkl")
    assert (gemm.backend().name, gemm.backend().source) == ("mkl", "env")
    gemm.set_backend("onednn")  # the function wins over the environment
    assert gemm.backend().record() == {"backend": "onednn", "forward": "onednn", "backward": "onednn",
                                       "source": "set_backend", "gflops": {}}
    with gemm.forced_backend("mkl"):
        assert gemm.backend().name == "mkl"
    assert gemm.backend().name == "onednn"
    gemm.set_backend("auto")
    monkeypatch.setenv(gemm.ENV, "auto")
    assert gemm.backend().name == "onednn forward, mkl backward" and gemm.backend().source == "measured"
    assert measured == [1]
    with pytest.raises(ValueError, match="GEMM backend"):
        gemm.set_backend("blas")
    monkeypatch.setenv(gemm.ENV, "blas")
    with pytest.warns(UserWarning, match="LITEBERT_GEMM"):
        assert gemm.backend().source == "cache"  # auto: read back from the cache the measurement wrote


def test_auto_measures_once_and_caches_per_machine(monkeypatch):
    measured = fake_measurement(monkeypatch)
    first = gemm.backend()
    assert first.source == "measured" and measured == [1]
    data = json.loads(gemm.cache_path().read_text())
    entry = data[gemm.cache_key()]
    assert (entry["forward"], entry["backward"]) == ("onednn", "mkl") and "loadavg_1min" in entry
    assert cpu.cpu_model() in gemm.cache_key() and torch.__version__ in gemm.cache_key()
    monkeypatch.setattr(gemm, "_chosen", {})  # a new process
    again = gemm.backend()
    assert again.source == "cache" and (again.forward, again.backward) == ("onednn", "mkl") and measured == [1]
    threads = torch.get_num_threads()
    try:  # another thread count is another key
        torch.set_num_threads(threads + 1)
        assert gemm.backend().source == "measured" and measured == [1, 1]
    finally:
        torch.set_num_threads(threads)
    assert len(json.loads(gemm.cache_path().read_text())) == 2


def test_a_choice_measured_under_load_is_measured_again_when_quiet(monkeypatch):
    measured = fake_measurement(monkeypatch)
    cores = os.cpu_count()
    gemm.cache_path().parent.mkdir(parents=True)
    gemm.cache_path().write_text(json.dumps({gemm.cache_key(): {"forward": "mkl", "backward": "mkl",
                                                                "loadavg_1min": cores + 3.0}}))
    monkeypatch.setattr(gemm.os, "getloadavg", lambda: (cores + 1.0, 0.0, 0.0))
    assert gemm.backend().source == "cache" and not measured  # still loaded: keep it
    monkeypatch.setattr(gemm, "_chosen", {})
    monkeypatch.setattr(gemm.os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert gemm.backend().source == "measured" and measured == [1]


def test_cache_written_atomically(monkeypatch):
    fake_measurement(monkeypatch)
    path = gemm.cache_path()
    path.parent.mkdir(parents=True)
    old = {"some other machine": {"forward": "mkl", "backward": "mkl"}}
    path.write_text(json.dumps(old))
    real_replace, seen = os.replace, []

    def checking_replace(src, dst):
        assert os.path.dirname(src) == os.path.dirname(dst) == str(path.parent)  # a rename, not a copy
        assert json.loads(path.read_text()) == old  # the old file untouched until the rename
        staged = json.loads(open(src).read())  # the new one complete before it
        assert staged["some other machine"] == old["some other machine"] and gemm.cache_key() in staged
        seen.append(src)
        real_replace(src, dst)
    monkeypatch.setattr(gemm.os, "replace", checking_replace)
    gemm.backend()
    assert seen and os.listdir(path.parent) == ["gemm.json"]  # no temporary file left behind

    monkeypatch.setattr(gemm, "_chosen", {})
    before = path.read_text()

    def failing_dump(*args, **kwargs):
        raise OSError("No space left on device")
    monkeypatch.setattr(gemm.json, "dump", failing_dump)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)  # a key not cached yet: it measures and writes
    with pytest.warns(UserWarning, match="could not write the GEMM cache"):
        assert gemm.backend().source == "measured"
    assert path.read_text() == before and os.listdir(path.parent) == ["gemm.json"]


@pytest.mark.parametrize("garbage", [b"{\"AMD EPYC\": {\"forward\": \"mk", b"\xff\xfe\x00", b"[1, 2]"],
                         ids=["truncated", "binary", "not_a_table"])
def test_corrupt_cache_is_ignored_with_a_warning_and_replaced(monkeypatch, garbage):
    measured = fake_measurement(monkeypatch)
    path = gemm.cache_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(garbage)
    with pytest.warns(UserWarning, match="ignoring the unreadable GEMM cache"):
        assert gemm.backend().source == "measured"
    assert measured == [1]
    assert json.loads(path.read_text())[gemm.cache_key()]["forward"] == "onednn"  # a good file again


def test_measurement_reports_rates_for_both_backends():
    result = gemm.measure_backends(shapes=((64, 32, 48),), repeats=1)
    assert result.source == "measured" and result.forward in gemm.BACKENDS and result.backward in gemm.BACKENDS
    assert all(result.gflops[k][d] > 0 for k in gemm.BACKENDS for d in ("forward", "backward"))


@pytest.mark.parametrize("context", ["bf16 autocast", "bf16 matmul precision"])
def test_measurement_times_fp32_kernels_whatever_the_callers_context(monkeypatch, context):
    """The first backend() may run inside a bf16 run's autocast, or after set_float32_matmul_precision("medium"):
    the kernels timed must still be the fp32 ones the cache stands for, and the caller's context comes back."""
    seen = []
    real = gemm._forward

    def recording(kernel, x, w, b):
        out = real(kernel, x, w, b)
        seen.append((kernel, out.dtype, gemm._onednn_is_strict_fp32()))
        return out
    monkeypatch.setattr(gemm, "_forward", recording)
    precision_before = torch.get_float32_matmul_precision()
    try:
        if context == "bf16 autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                gemm.measure_backends(shapes=((64, 32, 48),), repeats=1)
                assert torch.is_autocast_enabled("cpu")
        else:
            torch.set_float32_matmul_precision("medium")
            gemm.measure_backends(shapes=((64, 32, 48),), repeats=1)
            assert not gemm._onednn_is_strict_fp32()
    finally:
        torch.set_float32_matmul_precision(precision_before)
    assert {k for k, *_ in seen} == set(gemm.BACKENDS)
    assert all(dtype == torch.float32 and strict for _, dtype, strict in seen), seen


# -- --precision auto -------------------------------------------------------------------------------------------

def test_auto_precision_is_fp32_without_bf16_kernels(monkeypatch):
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": False)

    def never(precision):
        raise AssertionError("nothing is measured on a CPU without bf16 kernels")
    picked = choose_precision(never)
    assert picked.precision == "fp32" and "no bf16" in picked.reason
    assert picked.record()["chosen"] == "fp32" and picked.record()["requested"] == "auto"


@pytest.mark.parametrize("faster", ["fp32", "bf16"])
def test_auto_precision_takes_the_faster_when_bf16_runs(monkeypatch, faster):
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": True)
    calls = []

    def fake(precision):
        calls.append(precision)
        time.sleep(0.002 if precision == faster else 0.02)
    picked = choose_precision(fake, work=100, unit="tokens", repeats=2)
    assert picked.precision == faster and sorted(set(calls)) == ["bf16", "fp32"]
    assert picked.rates[faster] > picked.rates["fp32" if faster == "bf16" else "bf16"]
    assert f"{faster}_tokens_per_s" in picked.record()


@pytest.mark.parametrize("tf32", [False, True])
def test_auto_precision_on_a_gpu_names_the_card_and_cublas_not_the_cpu_gemm(monkeypatch, tf32):
    """On CUDA the comparison is bf16 autocast against cuBLAS's fp32 (TF32 or not), on a named card: never the
    CPU's GEMM backend, which that run does not use (faked here: no GPU is needed to check the words)."""
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(precision, "tf32_allowed", lambda: tf32)
    picked = choose_precision(lambda p: time.sleep(0.001 if p == "bf16" else 0.01), device="cuda:0", repeats=2)
    assert picked.precision == "bf16"
    assert "on cuda:0 (NVIDIA H100 80GB HBM3)" in picked.reason and "cuBLAS" in picked.reason
    assert ("TF32 off" not in picked.reason) == tf32
    assert not {"mkl", "onednn"} & set(picked.reason.replace("(", " ").replace(")", " ").split())
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": False)
    assert "NVIDIA H100" in choose_precision(lambda p: None, device="cuda:0").reason


@pytest.mark.parametrize("has_bf16", [False, True])
def test_training_with_precision_auto_records_the_choice(monkeypatch, tmp_path, has_bf16, capsys):
    from litebert.runconfig import load_toml
    from litebert.training import loop
    from litebert.training.loop import train
    from litebert.training.train_config import TrainConfig
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": has_bf16)
    config = tiny()
    torch.manual_seed(0)
    model = AlbertForMaskedLM(config)
    ids = torch.randint(5, 101, (4, 8), generator=torch.Generator().manual_seed(0))

    def batch_fn(step, micro, rank, world_size):
        return {"input_ids": ids, "labels": ids.masked_fill(torch.rand(ids.shape) > 0.3, -100)}
    cfg = TrainConfig(precision="auto", batch_size=4, max_steps=1, optimizer="adamw", out_dir=str(tmp_path / "run"),
                      progress=False, device="cpu")
    train(model, batch_fn, cfg)
    saved = load_toml(tmp_path / "run" / "train_config.toml")
    assert saved["train"]["precision"] == "auto"
    record = saved["precision"]
    assert record["requested"] == "auto" and record["gemm_backend"] == gemm.backend().name
    assert record["fp32_kernels"] == f"fp32 GEMMs on {gemm.backend().name}" and record["device"].startswith("cpu (")
    if has_bf16:  # measured: both rates recorded (tokens per second), the faster chosen
        rates = {p: record[f"{p}_tokens_per_s"] for p in ("fp32", "bf16")}
        assert record["chosen"] == max(rates, key=rates.get)
    else:
        assert record["chosen"] == "fp32" and "fp32_tokens_per_s" not in record
    assert f"precision auto -> {record['chosen']}" in capsys.readouterr().out
    # a resume keeps the start's choice (measured again, a near tie could switch precision mid-run)
    monkeypatch.setattr(loop, "_auto_precision", lambda *a: pytest.fail("measured again on resume"))
    train(model, batch_fn, dataclasses.replace(cfg, max_steps=2, resume=True))
    assert load_toml(tmp_path / "run" / "train_config.toml")["precision"] == record
    assert f"precision auto -> {record['chosen']}, as chosen when this run started" in capsys.readouterr().out


def test_a_resumed_run_keeps_the_gemm_choice_its_start_made(monkeypatch, tmp_path, onednn_calls, caplog):
    """The choice was in no checkpoint: a resume that chose again (here the cache is gone and a new measurement
    ranks torch's default first, as a near tie or a loaded machine can) ran its steps on the other backend, which
    rounds otherwise: not the uninterrupted run's weights. A backend named on resume still wins, with a warning."""
    from litebert.training.loop import train
    from litebert.training.state import RunRecord
    from litebert.training.train_config import TrainConfig
    config = tiny(hidden_size=128, num_attention_heads=2, intermediate_size=512, max_position_embeddings=64)
    ids = torch.randint(5, 101, (4, 64), generator=torch.Generator().manual_seed(0))  # FFN GEMMs of 16M MACs

    def batch_fn(step, micro, rank, world_size):
        g = torch.Generator().manual_seed(step)
        return {"input_ids": ids, "labels": ids.masked_fill(torch.rand(ids.shape, generator=g) > 0.3, -100)}

    def run(out, max_steps, resume=False):
        torch.manual_seed(0)
        model = AlbertForMaskedLM(config)
        cfg = TrainConfig(batch_size=4, max_steps=max_steps, warmup_steps=1, optimizer="adamw", lr=1e-2,
                          save_every=2, out_dir=str(tmp_path / out), progress=False, device="cpu", resume=resume)
        onednn_calls.clear()
        train(model, batch_fn, cfg)
        return model.state_dict()

    fake_measurement(monkeypatch, "onednn", "onednn")
    straight = run("straight", 4)
    assert onednn_calls
    shutil.copytree(tmp_path / "straight", tmp_path / "killed")  # killed after step 2: step_4 never written
    shutil.rmtree(tmp_path / "killed" / "step_4")
    recorded = torch.load(tmp_path / "killed" / "step_2" / "train_state.pt", weights_only=True)["record"]["gemm"]
    assert (recorded["forward"], recorded["backward"], recorded["source"]) == ("onednn", "onednn", "measured")

    monkeypatch.setattr(gemm, "_chosen", {})  # a new process, and the cache gone: chosen again
    gemm.cache_path().unlink()
    fake_measurement(monkeypatch, "mkl", "mkl")
    resumed = run("killed", 4, resume=True)
    assert onednn_calls and gemm.backend().name == "mkl"  # the run's pin is put back at its end
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)

    shutil.rmtree(tmp_path / "killed" / "step_4")
    monkeypatch.setenv(gemm.ENV, "mkl")
    with caplog.at_level("WARNING", logger="litebert"):
        run("killed", 4, resume=True)
    assert not onednn_calls and "started with fp32 GEMMs on onednn, it goes on with mkl" in caplog.text
    assert RunRecord({}).gemm is None


def test_auto_precision_over_ranks_records_one_micro_batchs_seconds_and_rate(monkeypatch):
    """Ranks agree on the timings by a collective; what is recorded stays one micro-batch's seconds on one rank,
    and its tokens per second (a sum over two ranks recorded twice the seconds, half the rate)."""
    from litebert.training import loop
    from litebert.training.distributed import Dist
    monkeypatch.setattr(precision, "bf16_supported", lambda device="cpu": True)
    monkeypatch.setattr(loop, "all_reduce_sum", lambda t: t * 2)  # two ranks that measured the same
    local = {}

    def spying(run, device, combine):
        def recording(medians):
            local.update(zip(("fp32", "bf16"), medians))
            return combine(medians)
        return choose_precision(run, device, combine=recording, repeats=1)
    monkeypatch.setattr(loop, "choose_precision", spying)
    model = AlbertForMaskedLM(tiny())
    ids = torch.randint(5, 101, (4, 8), generator=torch.Generator().manual_seed(0))
    two_ranks = Dist(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"), owns_group=False)
    picked = loop._auto_precision(model, lambda *a: {"input_ids": ids, "labels": ids}, two_ranks, 0)
    for p in ("fp32", "bf16"):
        assert picked.seconds[p] == pytest.approx(local[p], abs=1e-5)
        assert picked.rates[p] == pytest.approx(ids.numel() / picked.seconds[p], rel=1e-3)
