"""Export a model directory for inference, as ONNX or TorchScript, and check the export computes what PyTorch does.

The exported graph takes (input_ids, attention_mask, token_type_ids), int64, with dynamic batch and sequence
axes (and a choices axis for AlbertForMultipleChoice), and returns the model's tensor outputs by name
(e.g. last_hidden_state + pooler_output, or logits). The model class is the one config.json's
`architectures` names, so a fine-tuned classifier exports with its head.

Both formats are made by tracing, which records the path the sample batch takes. Two choices follow:
  * the sample batch has a padded row: `padding_mask` skips the mask when nothing is padded, and a trace of
    an unpadded batch would bake that shortcut in and ignore padding forever after; a trace of the masked
    path is right for every input (an all-ones mask adds zeros);
  * the export is then run on batches of other shapes, padded and not, and compared with PyTorch, so a
    shape frozen into the graph shows up here rather than in production.
The sequence-length check against max_position_embeddings is a Python `if`, so it is not in the graph:
longer inputs fail inside the position-embedding lookup instead of with litebert's message.

`--quantize int8` also writes model.int8.onnx (litebert.interop.quantize: ONNX Runtime's dynamic int8 of
every weight matrix, embedding tables per-row int8) and checks it against PyTorch fp32 on sample inputs
(random token ids, or the lines of `--verify-text`): the share of predictions unchanged and the largest
logit difference are printed, and an int8 model below `--min-agreement` is not kept unless `--force`.
Weights are first quantized with one scale per matrix (the fastest kernels); when that falls below
`--min-agreement`, with one scale per output column (`--int8-weights` chooses one scheme outright).
NaN or inf in any output, fp32 or int8, fails an export whatever the flags.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from litebert.config import AlbertConfig
from litebert.errors import ConfigError, LitebertError
from litebert.files import copy_file, write_files_atomically, write_json
from litebert.heads import model_class
from litebert.interop import agreement as agree
from litebert.interop import quantize as q
from litebert.interop.quantize import share_transposed_initializers
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.text.transformers_files import TOKENIZER_FILES
from litebert.weights import resolve_model_dir, weights_digest

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
FORMATS = {"onnx": "model.onnx", "torchscript": "model.pt"}
QUANTIZATIONS = ("none", "int8")
INT8_WEIGHT_CHOICES = ("auto", *q.INT8_WEIGHTS)
COPIED_FILES = ("config.json", *TOKENIZER_FILES)
# Beside the graphs: the sha256 of the weights they were exported from (a graph exported into its model's own
# directory goes stale when the model is trained again there; the onnxruntime backend then refuses it).
EXPORT_RECORD = "export.json"
ONNX_OPSET = 17  # SDPA and LayerNorm export as single ops from 17 on; onnxruntime >= 1.14 runs it
# The file-format version of graphs litebert builds itself. onnx's helper writes its newest (14 with onnx 1.23),
# which an onnxruntime older than that onnx refuses ("Unsupported model IR version: 14, max supported IR version:
# 13", onnxruntime 1.30 on a GPU image); 10 is what onnxruntime >= 1.18, this project's minimum, reads.
ONNX_IR_VERSION = 10


@contextlib.contextmanager
def _quiet_tracing():
    """Silence what the tracers say about every export: a TracerWarning per Python `if` on a tensor (the module
    docstring says why ours are safe) and torch 2.13's deprecation notices for TorchScript."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        for message in (r"`torch\.jit\.\w+` is deprecated", ".*legacy TorchScript-based ONNX export",
                        "The feature will be removed"):
            warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
        yield


class ExportError(LitebertError):
    """An export that failed or does not reproduce the PyTorch outputs."""


class InferenceModule(nn.Module):
    """The model with positional inputs and tensor-only outputs: what tracers and ONNX can represent
    (litebert models return NamedTuples holding None for the loss)."""

    def __init__(self, model: nn.Module, output_names: list[str]):
        super().__init__()
        self.model = model
        self.output_names = output_names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.output_names)


def sample_batch(config: AlbertConfig, shape: tuple[int, ...], padded: bool, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random (input_ids, attention_mask, token_type_ids) of `shape`; with `padded`, the last row's tail is padding."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(min(5, config.vocab_size - 1), config.vocab_size, shape, generator=generator)
    attention_mask = torch.ones(shape, dtype=torch.long)
    T = shape[-1]
    if padded:
        attention_mask.view(-1, T)[-1, T // 2:] = 0
        pad = config.pad_token_id if config.pad_token_id is not None else 0  # HF configs may leave it unset
        input_ids = input_ids.masked_fill(attention_mask == 0, pad)
    token_type_ids = (torch.arange(T) >= T // 2).long().expand(shape).clone()
    if config.type_vocab_size < 2:
        token_type_ids.zero_()
    return input_ids, attention_mask, token_type_ids


@dataclass
class ExportResult:
    path: str
    model_class: str
    output_names: list[str]
    max_abs_diff: float | None  # over the verification batches; None when not verified
    verified_with: str | None  # "onnxruntime" | "torch.jit" | None
    not_verified_because: str | None = None  # why verified_with is None
    int8_path: str | None = None  # model.int8.onnx, with --quantize int8
    agreement: agree.Agreement | None = None  # int8 against PyTorch fp32
    agreement_inputs: str = ""  # what the agreement was measured on
    int8_weights: str | None = None  # the weight scheme kept: "per-tensor" | "per-column"
    column_storage: str | None = None  # per-column weights stored "int8" | "uint8" (q.per_column_storage)
    int8_tried: list = field(default_factory=list)  # (scheme, Agreement) of the schemes tried and not kept

    def summary(self) -> str:
        line = f"wrote {self.path} ({self.model_class}; inputs {', '.join(INPUT_NAMES)}; outputs {', '.join(self.output_names)})"
        if self.verified_with is None:
            line += f"\n  not verified ({self.not_verified_because})"
        else:
            line += f"\n  verified with {self.verified_with} on other batch shapes: max |diff| {self.max_abs_diff:.2e}"
        if self.int8_path is not None:
            fp32, int8 = os.path.getsize(self.path), os.path.getsize(self.int8_path)
            stored = f", stored {self.column_storage}" if self.int8_weights == "per-column" else ""
            line += (f"\nwrote {self.int8_path} ({int8 / 1e6:.1f} MB, {int8 / fp32:.2f}x of the fp32 file's "
                     f"{fp32 / 1e6:.1f} MB; int8 weights {self.int8_weights}{stored})\n  against PyTorch fp32 on "
                     f"{self.agreement_inputs}: {self.agreement.summary()}")
            for scheme, agreement in self.int8_tried:
                line += f"\n  ({scheme} weights, not kept: {agreement.summary()})"
        return line


def export_model(model_dir: str | os.PathLike, out_dir: str | os.PathLike, fmt: str = "onnx",
                 verify: bool = True, atol: float = 1e-4, quantize: str = "none", min_agreement: float = 0.99,
                 force: bool = False, verify_text: str | None = None, verify_samples: int = 256,
                 int8_weights: str = "auto") -> ExportResult:
    """Export the model in `model_dir` (litebert or HF layout) to `out_dir/model.onnx|model.pt`, copy its
    config and tokenizer beside it, and check the export against PyTorch on fresh batch shapes. With
    quantize="int8" (ONNX only), also write out_dir/model.int8.onnx, checked against PyTorch fp32 on
    `verify_samples` random inputs or the lines of `verify_text`, and refused (ExportError) when fewer than
    `min_agreement` of its predictions are unchanged, unless `force`. int8_weights "auto" tries the schemes
    of `q.int8_weight_order` for this CPU ("per-tensor" / "per-column": that scheme only).

    Each file is written and checked beside out_dir and moved in only when it passed: a failed export (a
    check, a full disk) leaves what out_dir held before. A new fp32 ONNX export removes an older
    model.int8.onnx there (it was quantized from another graph)."""

    _check_options(fmt, quantize, min_agreement, int8_weights)
    model_dir = resolve_model_dir(model_dir)
    config = AlbertConfig.load(model_dir)
    cls = model_class(config)
    choices = cls.__name__ == "AlbertForMultipleChoice"
    if quantize == "int8":  # before the model loads, so that a bad --verify-text fails fast
        batches, agreement_inputs = agree.verification_batches(model_dir, config, choices, verify_text, verify_samples)
    model = cls.from_pretrained(model_dir).eval()
    config = model.config
    T = min(11, config.max_position_embeddings)
    sample = sample_batch(config, (2, 3, T) if choices else (2, T), padded=True)
    with torch.no_grad():
        reference = model(*sample[:1], attention_mask=sample[1], token_type_ids=sample[2])
    output_names = [name for name in reference._fields if isinstance(getattr(reference, name), torch.Tensor)]
    module = InferenceModule(model, output_names).eval()
    result = ExportResult(os.path.join(os.fspath(out_dir), FORMATS[fmt]), cls.__name__, output_names, None, None)

    def fill(tmp: Path) -> None:
        staged = os.path.join(tmp, FORMATS[fmt])
        _write_graph(module, sample, staged, fmt, choices)
        for name in COPIED_FILES:  # out_dir may be the model directory: these copies then change nothing
            if os.path.isfile(os.path.join(model_dir, name)):
                copy_file(os.path.join(model_dir, name), os.path.join(tmp, name))
        _check_graph(result, module, staged, fmt, config, choices, atol, verify)
        write_json(os.path.join(tmp, EXPORT_RECORD), {"weights_sha256": weights_digest(model_dir)})

    owned = (FORMATS[fmt], *([q.INT8_ONNX] if fmt == "onnx" else []), *COPIED_FILES, EXPORT_RECORD)
    write_files_atomically(out_dir, fill, owned=owned, last=("config.json",))
    if quantize == "int8":
        result.agreement_inputs = agreement_inputs
        _write_int8(result, module, config, batches, min_agreement, force, int8_weights, random_ids=not verify_text)
    return result


def _check_options(fmt: str, quantize: str, min_agreement: float, int8_weights: str) -> None:
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if quantize not in QUANTIZATIONS:
        raise ConfigError(f"unknown --quantize {quantize!r}; choose from {', '.join(QUANTIZATIONS)}")
    if quantize == "int8" and fmt != "onnx":
        raise ConfigError("--quantize int8 writes ONNX (--format onnx); for int8 in PyTorch call "
                          "litebert.interop.quantize.quantize_model")
    if not 0.0 <= min_agreement <= 1.0:
        raise ConfigError(f"--min-agreement is a fraction in [0, 1], got {min_agreement}")
    if int8_weights not in INT8_WEIGHT_CHOICES:
        raise ConfigError(f"unknown --int8-weights {int8_weights!r}; choose from {', '.join(INT8_WEIGHT_CHOICES)}")


def _write_graph(module: InferenceModule, sample: tuple[torch.Tensor, ...], path: str, fmt: str,
                 choices: bool) -> None:
    axes = ("batch", "choices", "sequence") if choices else ("batch", "sequence")
    with _quiet_tracing(), torch.no_grad():
        if fmt == "torchscript":
            torch.jit.trace(module, sample).save(path)
        else:
            # The TorchScript-based exporter: torch.export would need the padding shortcut as torch.cond.
            torch.onnx.export(module, sample, path, input_names=list(INPUT_NAMES), output_names=module.output_names,
                              dynamic_axes={name: dict(enumerate(axes)) for name in INPUT_NAMES},
                              opset_version=ONNX_OPSET, dynamo=False)
            _share_weights(path)


def _share_weights(path: str) -> None:
    """Rewrite the exported graph with each weight stored once (a tied decoder was stored twice)."""
    import onnx

    model = onnx.load(path)
    if share_transposed_initializers(model.graph):
        onnx.save(model, path)


def _check_graph(result: ExportResult, module: InferenceModule, path: str, fmt: str, config: AlbertConfig,
                 choices: bool, atol: float, verify: bool) -> None:
    """Runs the written graph at `path` against PyTorch (errors name result.path, where it is going)."""
    run = _runner(path, fmt) if verify else None
    if run is not None:
        result.verified_with = "torch.jit" if fmt == "torchscript" else "onnxruntime"
        result.max_abs_diff = _verify(module, run, config, choices, atol, result.path)
    else:  # _runner gives None only for ONNX without onnxruntime
        result.not_verified_because = ("onnxruntime is not installed: pip install onnxruntime" if verify
                                       else "skipped on request: --no-verify")


def _write_int8(result: ExportResult, module: InferenceModule, config: AlbertConfig, batches: list,
                min_agreement: float, force: bool, weights: str, random_ids: bool) -> None:
    """model.int8.onnx from result.path, kept only when it agrees with PyTorch fp32 (or `force`). weights
    "auto" tries `q.int8_weight_order()` until one meets min_agreement, else keeps the closest if forced.
    `random_ids`: the batches are random token ids, harder than real text for a fine-tuned model (its near-ties
    are many more), so a refusal names --verify-text beside --force."""
    final = os.path.join(os.path.dirname(result.path), q.INT8_ONNX)
    tried, staged_files, storage = [], [], q.per_column_storage()
    try:
        for scheme in q.int8_weight_order() if weights == "auto" else (weights,):
            staged_files.append(os.path.join(os.path.dirname(result.path), f".tmp-{scheme}-{q.INT8_ONNX}"))
            q.quantize_onnx(result.path, staged_files[-1], weights=scheme, config=config, column_storage=storage)
            run = _runner(staged_files[-1], "onnx")
            tried.append((agree.compare(module, lambda *batch: run(batch), result.output_names, batches,
                                    config.problem_type), scheme, staged_files[-1]))
            if tried[-1][0].fraction >= min_agreement:
                break
        # the one that passed (always the last tried), else the closest, kept only if forced
        agreement, scheme, staged = max(tried, key=lambda t: t[0].fraction)
        if agreement.fraction < min_agreement and not force:
            found = "; ".join(f"{s} weights {a.summary()}" for a, s, _ in tried)
            way_out = "--verify-text FILE checks on real inputs, --force keeps it" if random_ids else "--force keeps it"
            raise ExportError(f"int8 model not kept: {found} against PyTorch fp32 on {result.agreement_inputs}, "
                              f"below --min-agreement {min_agreement:g} ({way_out})")
        os.replace(staged, final)
    except agree.QuantizeError as e:
        raise ExportError(f"int8 model not kept: {e}") from None
    finally:
        for path in staged_files:
            if os.path.exists(path):
                os.remove(path)
    result.int8_path, result.agreement, result.int8_weights = final, agreement, scheme
    result.column_storage = storage if scheme == "per-column" else None
    result.int8_tried = [(s, a) for a, s, _ in tried if s != scheme]


def _runner(path: str, fmt: str):
    """A function batch -> list of numpy outputs that runs the exported file, or None if it cannot be run here."""
    if fmt == "torchscript":
        with _quiet_tracing():
            loaded = torch.jit.load(path)

        def run(batch):
            with torch.no_grad():
                return [t.numpy() for t in loaded(*batch)]
        return run
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return lambda batch: session.run(None, {name: t.numpy() for name, t in zip(INPUT_NAMES, batch)})


def _verify(module: InferenceModule, run, config: AlbertConfig, choices: bool, atol: float, path: str) -> float:
    """Max |exported - PyTorch| over batches whose shapes differ from the traced one; raises beyond atol."""
    T = config.max_position_embeddings
    shapes = [(3, min(T, 7)), (1, min(T, 16))]
    if choices:
        shapes = [(3, 2, min(T, 7)), (1, 4, min(T, 16))]
    worst = 0.0
    for seed, (shape, padded) in enumerate(zip(shapes, (True, False)), start=1):
        batch = sample_batch(config, shape, padded=padded, seed=seed)
        with torch.no_grad():
            expected = [t.numpy() for t in module(*batch)]
        got = run(batch)
        for name, e, g in zip(module.output_names, expected, got):
            problem = agree.nonfinite(name, e, "the PyTorch model's") or agree.nonfinite(name, g, f"{path}'s")
            if problem:
                raise ExportError(problem)
            if e.shape != g.shape:
                raise ExportError(f"{path}: output {name} has shape {g.shape} for input {shape}, PyTorch gives "
                                  f"{e.shape} (a shape was frozen into the graph)")
            diff = float(np.max(np.abs(e - g))) if e.size else 0.0
            worst = max(worst, diff)
            if diff > atol * max(1.0, float(np.max(np.abs(e))) if e.size else 1.0):
                raise ExportError(f"{path}: output {name} differs from PyTorch by {diff:.2e} on input {shape}")
    return worst


@dataclass
class ExportConfig:
    """The options of `litebert export` (the [export] table of --config)."""

    model: str = field(default="", metadata={
        "help": "model directory (litebert or HF) or Hub id (required)", "metavar": "DIR", "required": True})
    out: str = field(default="", metadata={"help": "output directory (required)", "metavar": "DIR",
                                           "required": True})
    format: str = field(default="onnx", metadata={"help": "what to write: model.onnx or model.pt",
                                                  "choices": tuple(FORMATS)})
    verify: bool = field(default=True, metadata={
        "help": "run the export on batches of other shapes and compare it with PyTorch (--no-verify: skip)"})
    quantize: str = field(default="none", metadata={
        "help": "int8: also write model.int8.onnx (ONNX Runtime dynamic int8, embeddings per-row int8), "
                "always checked against PyTorch fp32", "choices": QUANTIZATIONS})
    min_agreement: float = field(default=0.99, metadata={"range": "[0, 1]",
        "help": "the share of predictions the int8 model must leave unchanged, else it is not kept",
        "metavar": "FRACTION"})
    force: bool = field(default=False, metadata={"help": "keep the int8 model below --min-agreement"})
    verify_text: str = field(default="", metadata={
        "help": "check int8 on these inputs: a text file, one input per line, a tab before a sentence pair "
                "(default: random token ids)", "metavar": "FILE"})
    verify_samples: int = field(default=256, metadata={"range": "[1, inf)",
        "help": "how many inputs check int8 (random ones, or the first lines of --verify-text)", "metavar": "N"})
    int8_weights: str = field(default="auto", metadata={
        "help": "int8 weight scales: per-tensor (ORT's), per-column (closer to fp32; as fast on CPUs with "
                "VNNI or AMX, slower without), or auto: per-column with VNNI/AMX, else per-tensor when it meets "
                "--min-agreement and per-column when not",
        "choices": INT8_WEIGHT_CHOICES})


def cli(argv: list[str]) -> int:

    parser = verb_parser("export", __doc__, {"export": ExportConfig}, epilog=(
        "example:\n  litebert export --model out/sst2/best --out out/sst2-onnx --format onnx\n"
        "  litebert export --model out/sst2/best --out out/sst2-onnx --quantize int8 --verify-text dev.txt\n"
        "inputs: input_ids, attention_mask, token_type_ids (int64); ONNX verification needs onnxruntime"))
    args = parser.parse_args(argv)
    (cfg,) = parse_verb(parser, args)
    int8_only = ("--quantize int8",)  # the int8 check's options: without it there is no int8 model to check
    refuse_flags_of_other_modes(args, f"--quantize {cfg.quantize}", dict.fromkeys(
        ("min_agreement", "force", "verify_text", "verify_samples", "int8_weights"), int8_only), "export")
    print(export_model(cfg.model, cfg.out, cfg.format, verify=cfg.verify, quantize=cfg.quantize,
                       min_agreement=cfg.min_agreement, force=cfg.force, verify_text=cfg.verify_text or None,
                       verify_samples=cfg.verify_samples, int8_weights=cfg.int8_weights).summary())
    return 0
