"""Backends: what runs a pipeline's model, as a callable from one padded batch (collate's tensors) to the
model's outputs by name, so that other engines plug in beside these:
  TorchBackend   PyTorch, precision "fp32", "bf16" (autocast), "int8" (dynamic quantization of every Linear) or
                 "auto" (bf16 where the first batch runs measurably faster in it on this machine, else fp32)
  OnnxBackend    ONNX Runtime on the directory's model.onnx ("fp32") or model.int8.onnx ("int8"), or on
                 litebert's own export (and quantization) made on the fly
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, Protocol

import torch

from litebert.errors import ConfigError
from litebert.files import read_json_object
from litebert.interop.agreement import QuantizeError
from litebert.interop.export import EXPORT_RECORD, ExportError, export_model
from litebert.interop.quantize import INT8_ONNX, checked_int8
from litebert.runtime.device import resolve_device
from litebert.runtime.precision import (
    EXPORTED_PRECISIONS,
    INFERENCE_PRECISIONS,
    PrecisionChoice,
    autocast,
    choose_inference_precision,
)
from litebert.tasks.families import Family
from litebert.tasks.inference import MODEL_INPUTS
from litebert.weights import weights_digest


class Backend(Protocol):
    """What runs the model: one padded batch (collate's int64 input_ids, attention_mask, token_type_ids) -> the
    model's outputs, read by name as attributes (logits, start_logits, last_hidden_state, ...). `load` builds
    one for a family's model in a checkpoint directory. Another engine or precision (int8) is another class in
    BACKENDS."""

    name: str
    PRECISIONS: tuple[str, ...]
    precision: str

    @classmethod
    def load(cls, family: Family, directory: str, precision: str, device: str = "cpu",
             min_agreement: float | None = None) -> "Backend": ...

    def __call__(self, batch: dict[str, torch.Tensor]) -> Any: ...


def check_precision(backend: type, precision: str) -> None:
    if precision not in backend.PRECISIONS:
        raise ConfigError(f"the {backend.name} backend runs in {' or '.join(backend.PRECISIONS)}, not "
                          f"{precision!r}")


class TorchBackend:
    """PyTorch on the CPU or a GPU: fp32, bf16 autocast, int8 (torch.ao dynamic quantization of every
    nn.Linear, see litebert.interop.quantize; CPU only), or auto: fp32 or bf16, whichever runs the first batch
    faster there. Batches go to the model's device; the families take what they decode from there."""

    name, PRECISIONS, DEVICES = "torch", INFERENCE_PRECISIONS, ("cpu", "cuda")

    def __init__(self, model: torch.nn.Module, precision: str = "fp32", device: str | torch.device = "cpu",
                 min_agreement: float | None = None, source: str = "the model"):
        check_precision(TorchBackend, precision)
        self.device = torch.device(device)
        self.agreement = None  # int8's with fp32, when it was checked
        if precision == "int8" and self.device.type != "cpu":
            raise ConfigError(f"int8 runs on the CPU (torch.ao dynamic quantization), not on {self.device}: use "
                              "fp32 or bf16 there")
        if precision == "int8":  # checked against fp32 as export checks its int8
            model, self.agreement = int8_or_why_not(model, INT8_MIN_AGREEMENT if min_agreement is None
                                                    else min_agreement, source)
        self.model, self.precision = model.eval().to(self.device), precision
        self.choice: PrecisionChoice | None = None  # what "auto" measured, after the first batch

    @classmethod
    def load(cls, family: Family, directory: str, precision: str, device: str = "cpu",
             min_agreement: float | None = None) -> "TorchBackend":
        check_precision(cls, precision)  # before the weights are read
        return cls(family.load(directory), precision, device, min_agreement, directory)

    def __call__(self, batch: dict[str, torch.Tensor]):
        inputs = {k: batch[k].to(self.device, non_blocking=True) for k in MODEL_INPUTS}
        if self.precision == "auto":
            self.choice = choose_inference_precision(self.model, inputs)
            self.precision = self.choice.precision
            logging.getLogger("litebert").info("pipeline: %s", self.choice)
        with torch.inference_mode(), autocast(self.precision, self.device.type):
            return self.model(**inputs)  # on the device: each family takes to the CPU only what it reads


# The bar for int8 made here, on random token ids: below export's 0.99 for files it writes, because a fine-tuned
# model has many near-ties on random ids that real text does not (the demo's classifier: 250/256 unchanged in
# torch int8 and 252/256 in ONNX on random ids, 744/746 on its dev texts in ONNX), while an int8 path that is
# broken (a saturating kernel) changes far more. At 0.99 the README's `predict --precision int8` was refused.
INT8_MIN_AGREEMENT = 0.95


def int8_or_why_not(model: torch.nn.Module, min_agreement: float, source: str):
    """(int8 model, its Agreement with fp32; None when unchecked), or a QuantizeError that says how to go on."""
    try:
        int8, found = checked_int8(model, 256 if min_agreement else 0, min_agreement, source)
        logging.getLogger("litebert").info("pipeline: int8 %s", found.summary() if found else "unchecked")
        return int8, found
    except QuantizeError as e:
        raise QuantizeError(f"{e}: serve it in fp32 or bf16, try the onnxruntime backend's int8, or keep this one "
                            "anyway with min_agreement=0 (--min-agreement 0 of litebert serve and predict)") from None


class MissingOutput(ConfigError, AttributeError):
    """A graph without the output a task reads (an AttributeError too, so that hasattr works)."""


class GraphOutputs(dict):
    """An ONNX graph's outputs by name, read as attributes the way families read a PyTorch model's output."""

    def __getattr__(self, name: str) -> torch.Tensor:
        if name not in self:
            raise MissingOutput(f"the ONNX graph has no output {name!r} (it has {', '.join(self)}): export the "
                                "model class this task reads")
        return self[name]


class OnnxBackend:
    """ONNX Runtime on the CPU: the directory's model.onnx (a `litebert export` output), else litebert's export
    of the checkpoint (its config.json's class) into a temporary directory, checked against PyTorch as every
    export is."""

    name, PRECISIONS, DEVICES = "onnxruntime", EXPORTED_PRECISIONS, ("cpu",)
    FILES = {"fp32": "model.onnx", "int8": INT8_ONNX}  # a `litebert export [--quantize int8]` directory

    def __init__(self, path: str, precision: str = "fp32", keep: Any = None):
        check_precision(OnnxBackend, precision)
        try:
            import onnxruntime
        except ImportError:
            raise ConfigError("the onnxruntime backend needs onnxruntime: pip install onnxruntime") from None
        self.precision, self.path, self._keep = precision, path, keep  # keep: a temporary export's directory
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    @classmethod
    def load(cls, family: Family, directory: str, precision: str, device: str = "cpu",
             min_agreement: float | None = None) -> "OnnxBackend":
        check_precision(cls, precision)
        path = os.path.join(directory, cls.FILES[precision])
        if os.path.isfile(path):
            if min_agreement is not None:
                raise ConfigError(f"min_agreement checks an int8 model made here; {path} was checked when it was "
                                  "exported (litebert export --min-agreement)")
            refuse_stale_export(directory, path)
            return cls(path, precision)
        tmp = tempfile.TemporaryDirectory(prefix="litebert-onnx-")
        if precision != "int8":
            export_model(directory, tmp.name, "onnx")
        else:  # export's schemes are tried toward its own 0.99 and the closest kept; this backend's bar decides
            made = export_model(directory, tmp.name, "onnx", quantize="int8", force=True)
            bar = INT8_MIN_AGREEMENT if min_agreement is None else min_agreement
            logging.getLogger("litebert").info("pipeline: int8 %s", made.agreement.summary())
            if made.agreement.fraction < bar:
                found = "; ".join(f"{scheme} weights {a.summary()}" for scheme, a in
                                  [(made.int8_weights, made.agreement), *made.int8_tried])
                raise ExportError(f"int8 model not kept: {found} against PyTorch fp32 on {made.agreement_inputs}, "
                                  f"below {bar:g}. To use it anyway, pass min_agreement=0 (--min-agreement 0 of "
                                  f"litebert serve and predict), or export it once (`litebert export --model "
                                  f"{directory} --out DIR --quantize int8 --force`, or --verify-text with your own "
                                  "inputs) and give DIR as the model")
        return cls(os.path.join(tmp.name, cls.FILES[precision]), precision, keep=tmp)

    def __call__(self, batch: dict[str, torch.Tensor]) -> GraphOutputs:
        outputs = self.session.run(None, {k: batch[k].numpy() for k in self.input_names})
        return GraphOutputs(zip(self.output_names, map(torch.from_numpy, outputs)))


def refuse_stale_export(directory: str, graph: str) -> None:
    """A graph exported into its model's own directory serves the weights of its export: when the directory's
    weights differ from those the export recorded (trained again since), serving it would answer with the old
    model, silently. Exports without a record (before 2026-11-28) or without weights beside them are taken."""
    record = os.path.join(directory, EXPORT_RECORD)
    if not os.path.isfile(record):
        return
    exported = read_json_object(record, ConfigError).get("weights_sha256")
    current = weights_digest(directory)
    if exported and current and exported != current:
        raise ConfigError(f"{graph} was exported from other weights than those in {directory} (trained again "
                          f"since?): export again (litebert export --model {directory} --out {directory}), or "
                          "use --backend torch")


BACKENDS: dict[str, type] = {"torch": TorchBackend, "pytorch": TorchBackend, "onnxruntime": OnnxBackend,
                             "onnx": OnnxBackend, "ort": OnnxBackend}


def backend_device(cls: type, device: str, precision: str) -> torch.device:
    """Where a backend runs: `device` ("auto": a GPU when there is one and the backend runs there at this
    precision; int8 is the CPU's), refused in one line when the backend has no kernels there or this machine
    lacks it."""
    device = str(device)
    if device == "auto" and ("cuda" not in cls.DEVICES or precision == "int8"):
        device = "cpu"
    if device != "auto" and device.split(":")[0] not in cls.DEVICES:
        raise ConfigError(f"the {cls.name} backend runs on {' or '.join(cls.DEVICES)}, not on {device!r}")
    return resolve_device(device)
