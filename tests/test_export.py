"""Exports compute what the PyTorch model computes, on batch shapes other than the traced one, for every head.

The ONNX tests run the file with onnxruntime (skipped cleanly when it is not installed); the TorchScript
tests load the saved file back. Each reference is the litebert model loaded from the directory, run here.
"""

import os
import sys

import numpy as np
import pytest
import torch

import litebert.interop.export as export
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.heads import MODEL_CLASSES
from litebert.interop.export import ExportError, export_model, sample_batch

HEADS = list(MODEL_CLASSES)
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
    return [t.numpy() for t in out if isinstance(t, torch.Tensor)]


def fresh_batch(model_dir: str, padded: bool):
    config = AlbertConfig.load(model_dir)
    shape = (5, 2, 9) if config.architectures == ["AlbertForMultipleChoice"] else (5, 9)
    return sample_batch(config, shape, padded=padded, seed=42)


@pytest.mark.parametrize("class_name", HEADS)
def test_torchscript_export_matches_pytorch(tmp_path, class_name):
    model_dir = save_tiny(tmp_path / "model", class_name)
    result = export_model(model_dir, tmp_path / "ts", "torchscript")
    assert result.model_class == class_name and result.verified_with == "torch.jit"
    assert sorted(os.listdir(tmp_path / "ts")) == ["config.json", "model.pt", "spiece.model"]
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

    monkeypatch.setattr(export, "sample_batch", unpadded_first)
    with pytest.raises(ExportError, match="differs from PyTorch"):
        export_model(model_dir, tmp_path / "ts", "torchscript")


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
    assert sorted(os.listdir(model_dir)) == sorted([*before, "model.pt"])
    assert {name: (tmp_path / "model" / name).read_bytes() for name in before} == before
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what `import onnxruntime` sees when it is missing
    result = export_model(model_dir, tmp_path / "onnx", "onnx")
    assert result.verified_with is None and "not verified (onnxruntime is not installed" in result.summary()
