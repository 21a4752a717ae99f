"""Exports compute what the PyTorch model computes, on batch shapes other than the traced one, for every head.

The ONNX tests run the file with onnxruntime (skipped cleanly when it is not installed); the TorchScript
tests load the saved file back. Each reference is the litebert model loaded from the directory, run here.
"""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import litebert.interop.agreement as agreement
import litebert.interop.export as export
import litebert.interop.quantize as quantize
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.heads import MODEL_CLASSES
from litebert.interop.export import ONNX_IR_VERSION, ExportError, export_model, sample_batch

HEADS = list(MODEL_CLASSES)
FIXTURES = Path(__file__).parent / "fixtures" / "albert_spiece"
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")


def save_tiny(directory, class_name: str) -> str:
    two_labels = class_name in ("AlbertForPreTraining", "AlbertForQuestionAnswering")
    config = AlbertConfig(vocab_size=61, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_hidden_groups=2,
                          num_attention_heads=2, intermediate_size=24, max_position_embeddings=24,
                          num_labels=2 if two_labels else 3)
    model = MODEL_CLASSES[class_name](config)
    model.save_pretrained(directory)
    (directory / "spiece.model").write_bytes(b"spm")
    return str(directory)


def reference_outputs(model_dir: str, batch) -> list[np.ndarray]:
    config = AlbertConfig.load(model_dir)
    model = MODEL_CLASSES[config.architectures[0]].from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model(batch[0], attention_mask=batch[1], token_type_ids=batch[2])
    return [t.numpy() for t in out.to_tuple()]


def fresh_batch(model_dir: str, padded: bool):
    config = AlbertConfig.load(model_dir)
    shape = (5, 2, 9) if config.architectures == ["AlbertForMultipleChoice"] else (5, 9)
    return sample_batch(config, shape, padded=padded, seed=42)


@pytest.mark.parametrize("class_name", HEADS)
def test_torchscript_export_matches_pytorch(tmp_path, class_name):
    model_dir = save_tiny(tmp_path / "model", class_name)
    result = export_model(model_dir, tmp_path / "ts", "torchscript")
    assert result.model_class == class_name and result.verified_with == "torch.jit"
    assert sorted(os.listdir(tmp_path / "ts")) == ["config.json", "export.json", "model.pt", "spiece.model"]
    loaded = torch.jit.load(result.path)
    for padded in (True, False):
        batch = fresh_batch(model_dir, padded)
        with torch.no_grad():
            got = [t.numpy() for t in loaded(*batch)]
        for g, e in zip(got, reference_outputs(model_dir, batch), strict=True):
            np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("class_name", HEADS)
def test_onnx_export_matches_pytorch(tmp_path, class_name):
    onnxruntime = pytest.importorskip("onnxruntime")
    model_dir = save_tiny(tmp_path / "model", class_name)
    result = export_model(model_dir, tmp_path / "onnx", "onnx")
    assert result.verified_with == "onnxruntime" and result.max_abs_diff < 1e-4
    session = onnxruntime.InferenceSession(result.path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in session.get_outputs()] == result.output_names
    ops = {node.op_type for node in pytest.importorskip("onnx").load(result.path).graph.node}
    assert "Sigmoid" not in ops  # the graph holds the fused GELU, not model.gelu_tanh's CPU inference form
    for padded in (True, False):
        batch = fresh_batch(model_dir, padded)
        got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), batch)})
        for g, e in zip(got, reference_outputs(model_dir, batch), strict=True):
            np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def test_verification_catches_a_trace_that_ignores_padding(tmp_path, monkeypatch):
    """Why the traced batch is padded: tracing an unpadded one bakes in padding_mask's no-mask shortcut,
    and the verification batch with padding must expose it."""
    model_dir = save_tiny(tmp_path / "model", "AlbertModel")
    traced_unpadded = []

    def unpadded_first(config, shape, padded, seed=0):
        if not traced_unpadded:
            traced_unpadded.append(shape)
            padded = False
        return sample_batch(config, shape, padded, seed)

    export_model(model_dir, tmp_path / "ts", "torchscript")
    before = (tmp_path / "ts" / "model.pt").read_bytes()
    monkeypatch.setattr(export, "sample_batch", unpadded_first)
    with pytest.raises(ExportError, match="differs from PyTorch"):
        export_model(model_dir, tmp_path / "ts", "torchscript")
    # the failed export was written and checked beside ts/, never in it: the good one is still there, alone
    assert (tmp_path / "ts" / "model.pt").read_bytes() == before and sorted(os.listdir(tmp_path)) == ["model", "ts"]


def test_cli(tmp_path, capsys):
    model_dir = save_tiny(tmp_path / "model", "AlbertForSequenceClassification")
    assert litebert_main(["export", "--model", model_dir, "--out", str(tmp_path / "ts"), "--format", "torchscript"]) == 0
    printed = capsys.readouterr().out
    assert str(tmp_path / "ts" / "model.pt") in printed and "AlbertForSequenceClassification" in printed
    assert "verified with torch.jit" in printed
    with pytest.raises(SystemExit) as exit_:
        litebert_main(["export", "--help"])
    assert exit_.value.code == 0 and "--format" in capsys.readouterr().out
    assert litebert_main(["export", "--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no such directory: " in err and err.count("\n") == 1


def test_cli_exports_into_the_model_directory_and_says_why_it_did_not_verify(tmp_path, capsys, monkeypatch):
    model_dir = save_tiny(tmp_path / "model", "AlbertModel")
    before = {name: (tmp_path / "model" / name).read_bytes() for name in os.listdir(model_dir)}
    assert litebert_main(["export", "--model", model_dir, "--out", model_dir, "--format", "torchscript",
                          "--no-verify"]) == 0
    printed = capsys.readouterr().out
    assert "not verified (skipped on request: --no-verify)" in printed and "onnxruntime" not in printed
    assert sorted(os.listdir(model_dir)) == sorted([*before, "export.json", "model.pt"])
    assert {name: (tmp_path / "model" / name).read_bytes() for name in before} == before
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what `import onnxruntime` sees when it is missing
    result = export_model(model_dir, tmp_path / "onnx", "onnx")
    assert result.verified_with is None and "not verified (onnxruntime is not installed" in result.summary()


# -- int8 and the size of the export ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained_classifier(tmp_path_factory) -> str:
    """A tiny classifier trained for a few seconds (label = first token mod 3, 100% accuracy), so that its
    predictions have margins as a fine-tuned model's do; a random model's logits are near ties that any
    rounding flips, which measures nothing."""
    directory = tmp_path_factory.mktemp("trained") / "model"
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=61, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_hidden_groups=1,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, num_labels=3)
    model = MODEL_CLASSES["AlbertForSequenceClassification"](config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        ids = torch.randint(5, config.vocab_size, (16, 12))
        model(ids, labels=ids[:, 0] % 3).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    ids = torch.randint(5, config.vocab_size, (256, 16))
    with torch.no_grad():
        assert (model(ids).logits.argmax(-1) == ids[:, 0] % 3).float().mean() > 0.95
    model.save_pretrained(directory)
    return str(directory)


def initializers(path: str) -> dict[str, np.ndarray]:
    import onnx
    return {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def test_int8_onnx_and_pytorch_agree_with_fp32_on_a_trained_classifier(tmp_path, trained_classifier, capsys):
    pytest.importorskip("onnxruntime")
    assert litebert_main(["export", "--model", trained_classifier, "--out", str(tmp_path / "onnx"),
                          "--quantize", "int8"]) == 0
    printed = capsys.readouterr().out
    assert "model.int8.onnx" in printed and "% of predictions unchanged" in printed and "max |diff|" in printed
    result = export_model(trained_classifier, tmp_path / "again", quantize="int8")
    assert result.agreement.total == 256 and result.agreement.fraction >= 0.99
    assert 0 < result.agreement.max_abs_diff < 1.0
    # the PyTorch path, checked the same way
    model = MODEL_CLASSES["AlbertForSequenceClassification"].from_pretrained(trained_classifier).eval()
    int8 = quantize.quantize_model(model)
    assert type(model.classifier) is torch.nn.Linear  # the fp32 model is left as it was
    batches, _ = agreement.verification_batches(trained_classifier, model.config, False)
    found = agreement.compare(export.InferenceModule(model, ["logits"]), export.InferenceModule(int8, ["logits"]),
                             ["logits"], batches)
    assert found.total == 256 and found.fraction >= 0.99 and 0 < found.max_abs_diff < 1.0
    loaded, checked = quantize.load_int8_model(trained_classifier)
    assert checked.fraction >= 0.99 and "quantized" in type(loaded.classifier).__module__


@pytest.mark.parametrize("class_name", HEADS)
def test_int8_pytorch_runs_every_head(tmp_path, class_name):
    model_dir = save_tiny(tmp_path / "model", class_name)
    model = MODEL_CLASSES[class_name].from_pretrained(model_dir).eval()
    batch = fresh_batch(model_dir, padded=True)
    with torch.inference_mode():
        expected = model(batch[0], attention_mask=batch[1], token_type_ids=batch[2])
        got = quantize.quantize_model(model)(batch[0], attention_mask=batch[1], token_type_ids=batch[2])
    assert list(expected.keys()) == list(got.keys())
    for e, g in zip(expected.to_tuple(), got.to_tuple(), strict=True):
        assert e.shape == g.shape and torch.isfinite(g).all()


def test_int8_quantizes_the_prescaled_query_rows_as_finely_as_key_and_value():
    """The packed QKV had one scale: its query rows, pre-scaled by 1/sqrt(head size), used about 16 of int8's
    levels, and their error was ~8x the keys' and values'. Each output row now has its own scale."""
    from litebert.config import AlbertConfig
    from litebert.model import AlbertAttention, AlbertModel
    torch.manual_seed(0)
    model = AlbertModel(AlbertConfig(vocab_size=100, embedding_size=32, hidden_size=256, num_attention_heads=4,
                                     intermediate_size=512, num_hidden_layers=1)).eval()
    attention = next(m for m in model.modules() if isinstance(m, AlbertAttention))
    weight, bias = attention.packed_qkv()
    int8 = next(m for m in quantize.quantize_model(model).modules() if isinstance(m, AlbertAttention))
    x = torch.randn(64, 256)
    with torch.inference_mode():
        exact, got = F.linear(x, weight, bias), int8.qkv_int8(x)
    errors = [(got[:, k * 256:(k + 1) * 256] - exact[:, k * 256:(k + 1) * 256]).norm()
              / exact[:, k * 256:(k + 1) * 256].norm() for k in range(3)]  # query, key, value
    assert errors[0] < 2 * min(errors[1:]), [float(e) for e in errors]


@pytest.mark.parametrize("weights, exact, stored", [("per-tensor", False, np.int8), ("per-column", False, np.uint8),
                                                    ("per-column", True, np.int8)])
def test_int8_onnx_holds_every_weight_and_the_embedding_tables_in_int8(tmp_path, trained_classifier, monkeypatch,
                                                                       weights, exact, stored):
    """Per-column weights are stored for the CPU that exports: int8 where its int8 products are exact (VNNI,
    AMX), uint8 where they would saturate."""
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(quantize, "int8_products_exact", lambda: exact)
    result = export_model(trained_classifier, tmp_path / "onnx", quantize="int8", int8_weights=weights, force=True)
    assert result.int8_weights == weights
    assert result.column_storage == (np.dtype(stored).name if weights == "per-column" else None)
    assert (f"stored {result.column_storage}" in result.summary()) == (weights == "per-column")
    config = AlbertConfig.load(trained_classifier)
    found = initializers(result.int8_path)
    table = found["model.albert.embeddings.word_embeddings.weight_int8"]
    assert table.dtype == np.int8 and table.shape == (config.vocab_size, config.embedding_size)
    assert found["model.albert.embeddings.word_embeddings.weight_row_scale"].shape == (config.vocab_size, 1)
    H, I, E = config.hidden_size, config.intermediate_size, config.embedding_size
    head = [(H, H), (3, H)]  # the pooler and the classifier, over one vector per sequence
    # what stays fp32 is vectors (biases, LayerNorm, scales) and, with per-column weights, the head
    fp32 = sorted(a.shape for a in found.values() if a.dtype == np.float32 and a.ndim == 2 and min(a.shape) > 1)
    assert fp32 == (sorted(head) if weights == "per-column" else [])
    matrices = sorted(a.shape for a in found.values() if a.dtype in (np.int8, np.uint8) and a.ndim == 2)
    encoder = [(E, H), (H, 3 * H), (H, H), (H, I), (I, H)]  # each weight once: E->H, packed QKV, ...
    tables = [(config.vocab_size, E), (config.max_position_embeddings, E), (config.type_vocab_size, E)]
    transposed_head = [(H, H), (H, 3)]  # ORT's per-tensor int8 stores the head's Gemm weights as (K, N)
    assert matrices == sorted(encoder + tables + (transposed_head if weights == "per-tensor" else []))
    weights_found = [name for name in found if name.endswith(("_quantized", "_uint8")) or (
        name.endswith("_int8") and "embeddings" not in name)]
    assert weights_found and all(found[name].dtype == stored for name in weights_found)


def _one_product_graph(weight: np.ndarray):
    """x (B, T, K) @ weight (K, N) as one MatMul."""
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="product")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [None, None, weight.shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=ONNX_IR_VERSION)


@pytest.mark.parametrize("storage", ["uint8", "int8"])
def test_per_column_int8_weights_compute_exactly_what_their_rounding_says(storage):
    """One scale per output column: the product equals the arithmetic of the rounded operands, and a column of
    small weights keeps its resolution. Stored uint8 on every CPU; stored int8 only where this CPU's int8
    products are exact (on AVX2 without VNNI uint8 x int8 saturates pairs of products at int16, and per-column
    int8 weights reach +-127 in every column: that is why `per_column_storage` picks uint8 there)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import numpy_helper
    if storage == "int8" and not quantize.int8_products_exact():
        pytest.skip("this CPU's uint8 x int8 products saturate (x86 without VNNI): int8 storage is not exact here")
    rng = np.random.default_rng(0)
    K, N = 64, 24
    weight = (rng.standard_normal((K, N)) * np.geomspace(1.0, 1e-3, N)).astype(np.float32)  # columns 1000x apart
    x = rng.standard_normal((3, 5, K)).astype(np.float32)
    model = _one_product_graph(weight)
    assert quantize.quantize_matmuls_per_column(model.graph, storage) == 1
    stored = {i.name: i for i in model.graph.initializer}
    assert {f"w_{storage}", "w_column_scale"} <= set(stored) and "w" not in stored
    assert numpy_helper.to_array(stored[f"w_{storage}"]).dtype == np.dtype(storage)
    from onnx import TensorProto, helper
    quantized = [o for n in model.graph.node if n.op_type == "DynamicQuantizeLinear" for o in n.output]
    model.graph.output.extend(helper.make_tensor_value_info(name, kind, None) for name, kind in
                              zip(quantized, (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8)))
    got, q, q_scale, q_zero = ort.InferenceSession(model.SerializeToString(),
                                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    columns, scale = quantize.per_row_int8(weight.T)  # what the file holds, one row per output column
    lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)  # DynamicQuantizeLinear: uint8, 0 exactly representable
    step = (hi - lo) / 255
    zero = np.clip(np.rint(-lo / step), 0, 255)
    # ORT rounds x as the formula says, but a vectorised kernel (x * (1 / step) in float32, e.g. on AVX-512) may
    # land on the other side of a .5 tie: one unit at most. The product is then checked on ORT's own rounding.
    assert np.abs(q.astype(np.int32) - np.clip(np.rint(x / step) + zero, 0, 255)).max() <= 1
    assert q_zero == zero and q_scale == pytest.approx(step, rel=1e-6)
    x_rounded = (q.astype(np.float64) - float(q_zero)) * float(q_scale)
    expected = x_rounded.astype(np.float64) @ (columns.astype(np.float64) * scale).T
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
    exact = x.astype(np.float64) @ weight
    small = slice(N - 4, N)  # the smallest columns: per-tensor int8 would round most of them to 0
    assert np.abs(got - exact)[..., small].max() < 0.02 * np.abs(exact[..., small]).max()


@pytest.mark.parametrize("act, gelu_op", [("gelu_new", "FastGelu"), ("gelu", "BiasGelu")])
def test_int8_export_fuses_layernorm_and_gelu_keeping_their_formulas(tmp_path, act, gelu_op):
    pytest.importorskip("onnxruntime")
    from collections import Counter

    import onnx
    config = AlbertConfig(vocab_size=61, embedding_size=8, hidden_size=16, num_hidden_layers=3, num_hidden_groups=1,
                          num_attention_heads=2, intermediate_size=24, max_position_embeddings=24, num_labels=3,
                          hidden_act=act)
    torch.manual_seed(0)
    MODEL_CLASSES["AlbertForSequenceClassification"](config).save_pretrained(tmp_path / "model")
    fp32 = export_model(tmp_path / "model", tmp_path / "onnx").path
    fused = str(tmp_path / "fused.onnx")
    onnx.save(quantize.fuse_transformer_ops(onnx.load(fp32), config), fused)
    ops = Counter(node.op_type for node in onnx.load(fused).graph.node)
    # every layer application: two LayerNorm(x + y) and one GELU, each one op; nothing of the formulas left
    assert ops["SkipLayerNormalization"] >= 2 * config.num_hidden_layers and ops[gelu_op] == config.num_hidden_layers
    other_form = {"FastGelu"} if act == "gelu" else {"Gelu", "BiasGelu"}  # erf stays erf, tanh stays tanh
    assert not ({"Pow", "Erf"} | other_form) & set(ops)
    batch = fresh_batch(str(tmp_path / "model"), padded=True)
    for e, g in zip(export._runner(fp32, "onnx")(batch), export._runner(fused, "onnx")(batch), strict=True):
        np.testing.assert_allclose(g, e, atol=2e-5)  # the same function, fewer passes
    quantize.quantize_onnx(fp32, tmp_path / "int8.onnx", config=config)
    int8_ops = Counter(node.op_type for node in onnx.load(tmp_path / "int8.onnx").graph.node)
    assert int8_ops["SkipLayerNormalization"] == ops["SkipLayerNormalization"] and int8_ops[gelu_op] == ops[gelu_op]
    # every graph written here is one the oldest supported onnxruntime reads (a GPU image's 1.30 refused IR 14)
    assert max(onnx.load(p).ir_version for p in (fp32, fused, tmp_path / "int8.onnx")) <= ONNX_IR_VERSION


def test_classifier_export_holds_each_weight_once(tmp_path, trained_classifier):
    """The last layer's [CLS]-only path used to read Q, K and V through the modules while the other layers
    read the packed QKV, so the export stored both: 3 H^2 floats too many."""
    pytest.importorskip("onnxruntime")
    result = export_model(trained_classifier, tmp_path / "onnx")
    model = MODEL_CLASSES["AlbertForSequenceClassification"].from_pretrained(trained_classifier)
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    stored = sum(a.nbytes for a in initializers(result.path).values())
    H = model.config.hidden_size
    assert abs(stored - parameter_bytes) < 0.1 * 3 * H * H * 4, (stored, parameter_bytes)


def test_fill_mask_export_holds_the_tied_decoder_once(tmp_path):
    """The MLM decoder is the word embeddings (tied); the exporter folded its transpose into a second (E, V)
    constant, 15.4 MB of albert-base's fill-mask file. Stored once, read through a Transpose that ONNX Runtime
    folds at load; the int8 file quantizes both uses."""
    pytest.importorskip("onnxruntime")
    model_dir = save_tiny(tmp_path / "model", "AlbertForPreTraining")
    result = export_model(model_dir, tmp_path / "onnx", quantize="int8", force=True)
    model = MODEL_CLASSES["AlbertForPreTraining"].from_pretrained(model_dir)
    V, E = model.config.vocab_size, model.config.embedding_size
    found = initializers(result.path)
    assert found["model.albert.embeddings.word_embeddings.weight"].shape == (V, E)
    assert [a.shape for a in found.values() if a.shape in ((V, E), (E, V))] == [(V, E)]
    assert result.max_abs_diff < 1e-4
    int8 = sorted(a.shape for a in initializers(result.int8_path).values()
                  if a.dtype in (np.int8, np.uint8) and a.ndim == 2)
    assert (V, E) in int8 and (E, V) in int8  # the table for the lookup, its transpose for the decoder


def test_a_model_with_nan_outputs_is_refused(tmp_path):
    """Finite weights that overflow fp32 in the forward (inf, then NaN after a LayerNorm): NaN compares false
    with everything, so a tolerance check alone passed such an export."""
    model_dir = save_tiny(tmp_path / "model", "AlbertForSequenceClassification")
    model = MODEL_CLASSES["AlbertForSequenceClassification"].from_pretrained(model_dir)
    with torch.no_grad():
        model.albert.encoder.albert_layer_groups[1].albert_layers[0].ffn.weight.fill_(3e38)
    model.save_pretrained(model_dir)
    with pytest.raises(ExportError, match="PyTorch model's output logits has 9 NaN/inf values of 9"):
        export_model(model_dir, tmp_path / "ts", "torchscript")
    if importlib.util.find_spec("onnxruntime"):
        with pytest.raises(ExportError, match="NaN/inf"):
            export_model(model_dir, tmp_path / "onnx", "onnx", quantize="int8")
        assert not os.path.exists(tmp_path / "onnx" / "model.int8.onnx")


def test_agreement_counts_predictions_and_refuses_nan():
    mask = np.array([[1, 1, 0]])
    fp32 = np.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])  # (B=1, T=3, 2) token logits
    int8 = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])  # one real token flipped, the padding too
    found = agreement.agreement(["logits"], [fp32], [int8], mask)
    assert (found.unchanged, found.total, found.max_abs_diff) == (1, 2, 1.0)  # padding not counted
    labels = np.array([[2.0, -1.0, 0.5]])
    assert agreement.agreement(["logits"], [labels], [labels * [1, 1, -1]], mask[:, :1],
                              "multi_label_classification").fraction == 0.0
    broken = int8.copy()
    broken[0, 2, 1] = np.nan  # even at a padded position
    with pytest.raises(agreement.QuantizeError, match="int8 model's output logits has 1 NaN/inf"):
        agreement.agreement(["logits"], [fp32], [broken], mask)
    with pytest.raises(agreement.QuantizeError, match="fp32 model's output logits has 1 NaN/inf"):
        agreement.agreement(["logits"], [broken], [fp32], mask)


def test_min_agreement_refuses_and_force_keeps(tmp_path, capsys):
    """A random tiny QA model: its start/end logits are near ties across positions, so int8 moves many argmaxes."""
    pytest.importorskip("onnxruntime")
    model_dir = save_tiny(tmp_path / "model", "AlbertForQuestionAnswering")
    out = tmp_path / "onnx"
    assert litebert_main(["export", "--model", model_dir, "--out", str(out), "--quantize", "int8"]) == 2
    err = capsys.readouterr().err
    assert "int8 model not kept:" in err and "below --min-agreement 0.99" in err
    assert err.rstrip().endswith("(--verify-text FILE checks on real inputs, --force keeps it)")
    assert err.count("\n") == 1 and not (out / "model.int8.onnx").exists() and (out / "model.onnx").exists()
    assert litebert_main(["export", "--model", model_dir, "--out", str(out), "--quantize", "int8", "--force"]) == 0
    assert (out / "model.int8.onnx").exists() and "% of predictions unchanged" in capsys.readouterr().out
    assert litebert_main(["export", "--model", model_dir, "--out", str(out), "--quantize", "int8",
                          "--min-agreement", "0.5"]) == 0
    assert litebert_main(["export", "--model", model_dir, "--out", str(out), "--quantize", "int8",
                          "--format", "torchscript"]) == 2
    assert "--quantize int8 writes ONNX" in capsys.readouterr().err


def test_per_column_storage_follows_the_cpu(monkeypatch):
    """int8 products are exact with VNNI (AVX-512 or AVX), AMX, and off x86; x86 flags unread count as inexact."""
    from litebert.runtime import cpu
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    for flags, storage in [({"avx2", "fma"}, "uint8"), ({"avx2", "avx512f", "avx512_vnni"}, "int8"),
                           ({"avx2", "avx_vnni"}, "int8"), ({"amx_tile", "amx_int8"}, "int8"), (set(), "uint8")]:
        monkeypatch.setattr(cpu, "cpu_flags", lambda flags=flags: flags)
        assert quantize.per_column_storage() == storage, flags
        assert quantize.int8_weight_order() == (("per-column",) if storage == "int8" else ("per-tensor", "per-column"))
    monkeypatch.setattr(cpu.platform, "machine", lambda: "aarch64")
    assert quantize.per_column_storage() == "int8"
    with pytest.raises(ConfigError, match="stored int8 or uint8, not 'int4'"):
        quantize.quantize_matmuls_per_column(_one_product_graph(np.ones((4, 2), np.float32)).graph, "int4")


def test_auto_int8_weights_try_per_tensor_then_per_column(tmp_path, monkeypatch, capsys):
    """auto keeps the fastest scheme that meets --min-agreement; when none does, the refusal names each one's
    agreement, and --force keeps the closest. On a CPU without VNNI: per-tensor first; with it, per-column only
    (stored int8 it runs per-tensor's kernel)."""
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(quantize, "int8_products_exact", lambda: False)
    model_dir = save_tiny(tmp_path / "model", "AlbertForSequenceClassification")
    out = tmp_path / "onnx"
    scores = {"per-tensor": 97, "per-column": 99}
    tried = []
    real_quantize = quantize.quantize_onnx

    def quantize_onnx(src, dst, weights="per-tensor", **kwargs):
        tried.append(weights)
        return real_quantize(src, dst, weights=weights, **kwargs)

    def compare(*args, **kwargs):  # the agreement this test says each scheme has
        return agreement.Agreement(scores[tried[-1]], 100, 0.1, "predictions")

    monkeypatch.setattr(quantize, "quantize_onnx", quantize_onnx)
    monkeypatch.setattr(agreement, "compare", compare)
    result = export_model(model_dir, out, quantize="int8")
    assert tried == ["per-tensor", "per-column"] and result.int8_weights == "per-column"
    assert "int8 weights per-column" in result.summary() and "(per-tensor weights, not kept: 97.00%" in result.summary()
    assert sorted(os.listdir(out)).count("model.int8.onnx") == 1 and not [f for f in os.listdir(out) if ".tmp" in f]

    tried.clear()
    scores["per-tensor"] = 99
    assert export_model(model_dir, out, quantize="int8").int8_weights == "per-tensor" and tried == ["per-tensor"]

    scores.update({"per-tensor": 95, "per-column": 97})
    assert litebert_main(["export", "--model", model_dir, "--out", str(out), "--quantize", "int8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "per-tensor weights 95.00%" in err and "per-column weights 97.00%" in err
    assert not (out / "model.int8.onnx").exists()  # the new fp32 graph removed the older int8 file
    assert export_model(model_dir, out, quantize="int8", force=True).int8_weights == "per-column"  # the closest
    tried.clear()
    assert export_model(model_dir, out, quantize="int8", int8_weights="per-tensor", force=True).int8_weights \
        == "per-tensor" and tried == ["per-tensor"]
    monkeypatch.setattr(quantize, "int8_products_exact", lambda: True)
    tried.clear()
    result = export_model(model_dir, out, quantize="int8", force=True)
    assert tried == ["per-column"] and result.int8_weights == "per-column" and result.column_storage == "int8"
    with pytest.raises(ConfigError, match="unknown --int8-weights 'per-row'"):
        export_model(model_dir, out, quantize="int8", int8_weights="per-row")


def test_int8_checked_on_text_lines(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    config = AlbertConfig(vocab_size=8000, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=24, max_position_embeddings=64, num_labels=2)
    model_dir = tmp_path / "model"
    MODEL_CLASSES["AlbertForSequenceClassification"](config).save_pretrained(model_dir)
    (model_dir / "spiece.model").write_bytes((FIXTURES / "spiece.model").read_bytes())
    text = tmp_path / "dev.txt"
    text.write_text("A first sentence.\nAnother one, longer than the first\tand its pair.\n\nThird.\n")
    result = export_model(model_dir, tmp_path / "onnx", quantize="int8", force=True, verify_text=str(text))
    assert result.agreement.total == 3 and f"3 lines of {text}" in result.summary()

    # refused on the user's own text, the way out is --force alone (random ids would also name --verify-text)
    monkeypatch.setattr(agreement, "compare", lambda *args, **kwargs: agreement.Agreement(2, 3, 0.1, "predictions"))
    assert litebert_main(["export", "--model", str(model_dir), "--out", str(tmp_path / "refused"), "--quantize",
                          "int8", "--int8-weights", "per-tensor", "--verify-text", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"on 3 lines of {text} (1 blank skipped), below --min-agreement 0.99 "
                                 "(--force keeps it)")
