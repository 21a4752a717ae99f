"""int8 inference, two ways.

  * ONNX (`quantize_onnx`): ONNX Runtime's BERT fusions (SkipLayerNormalization, FastGelu), then its dynamic
    quantization of litebert's export (weights int8 once, activations quantized per call), plus the embedding
    tables as per-row int8. Two steps ORT does not do by itself on this graph:
      - the exporter writes each shared weight once and gives its other uses an Identity of it; ORT quantizes
        only a MatMul whose weight is an initializer, so it would quantize the first of ALBERT's 12 layer
        applications and leave the other 11 (and the fp32 weights) as they were. The Identities are
        bypassed first, so every application reads the one int8 weight;
      - the embedding lookups (Gather) are replaced by a lookup in an int8 table with one scale per row
        (Gather int8 rows, Gather their scales, Cast, Mul). ORT's own Gather quantization uses one uint8
        scale for the whole table, which a few large rows can stretch.
    Weights have one scale per matrix (ORT's dynamic quantization, the fastest kernels) or, closer to fp32,
    one per output column (`quantize_matmuls_per_column`, stored uint8 so that no CPU's kernel saturates).
  * PyTorch (`quantize_model`): torch.ao's dynamic quantization of every nn.Linear (fbgemm/x86 kernels,
    int8 weights per tensor, activations quantized per call). The packed QKV projection that the encoder
    shares across its layer applications becomes one int8 Linear too. torchao was measured and not used:
    its int8 dynamic Linear on the CPU without torch.compile ran a 4096x768x3072 GEMM in 20 s (fp32: 0.5 s).

Both are checked against fp32 by litebert.interop.agreement.
"""

from __future__ import annotations

import copy
import logging
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.heads import model_class
from litebert.interop.agreement import Agreement, QuantizeError, compare, verification_batches
from litebert.model import AlbertAttention
from litebert.runtime.cpu import int8_products_exact
from litebert.weights import resolve_model_dir

INT8_ONNX = "model.int8.onnx"  # beside model.onnx in an export directory


# -- PyTorch ----------------------------------------------------------------------------------------

class Int8Weight(torch.Tensor):
    """A stand-in for a packed QKV weight that runs `F.linear` as a dynamically quantized int8 Linear.

    The encoder packs each attention's Q, K and V weights once per forward and calls
    `F.linear(x, weight, bias)` with them at every application of the shared layer (litebert.model); handing
    it this tensor instead routes those calls to one int8 GEMM without another forward to maintain. Its dtype
    is int8, so litebert.runtime.gemm's fp32 kernel choice passes it to F.linear, where it is intercepted."""

    @staticmethod
    def __new__(cls, linear: nn.Module):
        self = torch.Tensor._make_subclass(cls, torch.empty(0, dtype=torch.int8), False)  # int8: no fp32 GEMM
        self.linear = linear
        return self

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (F.linear, torch._C._nn.linear):
            return args[1].linear(args[0])  # the bias is inside the quantized Linear
        return super().__torch_function__(func, types, args, kwargs or {})


def quantize_model(model: nn.Module) -> nn.Module:
    """An inference-only int8 copy of a litebert model: every nn.Linear dynamically quantized (int8 weights,
    activations quantized per call), the packed QKV included. The input model is left as it was."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    model = copy.deepcopy(model).eval()
    with warnings.catch_warnings(), torch.no_grad():  # torch.ao's deprecation notices, on every call
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        for attention in {id(m): m for m in model.modules() if isinstance(m, AlbertAttention)}.values():
            weight, bias = attention.packed_qkv()  # queries pre-scaled, as the fp32 path
            packed = nn.Linear(weight.shape[1], weight.shape[0])
            packed.weight.copy_(weight), packed.bias.copy_(bias)
            # a scale per output row: the query rows come pre-scaled by 1/sqrt(head size), and under one scale for
            # the whole matrix they used about 16 of int8's 127 levels (query error 8.9% against 1.1%, H 768)
            attention.qkv_int8 = quantize_dynamic(nn.Sequential(packed), {nn.Linear: per_channel_dynamic_qconfig},
                                                  dtype=torch.qint8)[0]
            # an instance attribute shadows the method: the encoder's packing now returns the int8 weight
            attention.packed_qkv = lambda w=Int8Weight(attention.qkv_int8), b=bias: (w, b)
            for name in ("query", "key", "value"):  # only the training path reads them
                setattr(attention, name, None)
        quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return model


def load_int8_model(model_dir: str | os.PathLike, check_samples: int = 256, min_agreement: float = 0.99
                    ) -> tuple[nn.Module, Agreement | None]:
    """The model in `model_dir` (its config.json's class) as int8, checked by `checked_int8`."""
    model_dir = resolve_model_dir(model_dir)
    model = model_class(AlbertConfig.load(model_dir)).from_pretrained(model_dir)
    return checked_int8(model, check_samples, min_agreement, model_dir)


def checked_int8(model: nn.Module, check_samples: int = 256, min_agreement: float = 0.99, source: str = "the model"
                 ) -> tuple[nn.Module, Agreement | None]:
    """`quantize_model(model)`, ready to call under torch.inference_mode, and its agreement with fp32 on
    `check_samples` random inputs (None with 0). Raises QuantizeError below `min_agreement` or on NaN/inf. The
    default is export's check, 256 inputs: at 0.99 they tolerate two changed predictions, where 64 would
    tolerate none (on an Intel CPU with AMX a classifier's int8 changed one prediction in 1024 random inputs, a
    near-tie, and 64 inputs refused what export accepted)."""
    if not 0.0 <= min_agreement <= 1.0:
        raise ConfigError(f"min_agreement is a fraction in [0, 1], got {min_agreement}")
    model = model.eval()
    int8 = quantize_model(model)
    if not check_samples:
        return int8, None
    choices = type(model).__name__ == "AlbertForMultipleChoice"
    batches, inputs = verification_batches("", model.config, choices, n=check_samples)
    with torch.inference_mode():
        out = model(*batches[0][:1], attention_mask=batches[0][1], token_type_ids=batches[0][2])
    names = [name for name in out._fields if isinstance(getattr(out, name), torch.Tensor)]

    def outputs(m):
        return lambda ids, mask, types: [getattr(m(ids, attention_mask=mask, token_type_ids=types), name)
                                         for name in names]
    found = compare(outputs(model), outputs(int8), names, batches, model.config.problem_type)
    if found.fraction < min_agreement:
        raise QuantizeError(f"{source}: int8 {found.summary()} against fp32 on {inputs}, below {min_agreement:g}")
    return int8, found


# -- ONNX -------------------------------------------------------------------------------------------

def bypass_identities(graph) -> int:
    """Point every reader of an Identity of an initializer at the initializer itself; returns how many."""
    initializers = {i.name for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    alias = {n.output[0]: n.input[0] for n in graph.node
             if n.op_type == "Identity" and n.input[0] in initializers and n.output[0] not in outputs}
    for node in graph.node:
        for j, name in enumerate(node.input):
            if name in alias:
                node.input[j] = alias[name]
    kept = [n for n in graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    del graph.node[:]
    graph.node.extend(kept)
    return len(alias)


def share_transposed_initializers(graph) -> list[str]:
    """Store a weight once when the exporter stored it twice: an initializer that is another's transpose (the
    MLM decoder's tied copy of the word embeddings, folded into a (E, V) constant for its MatMul) is replaced
    by a Transpose node of the other, which ONNX Runtime folds back when it loads the graph. Returns the names
    replaced. (albert-base's fill-mask model: 15.4 MB of 62 MB.)"""
    from onnx import TensorProto, helper, numpy_helper

    matrices = {i.name: i for i in graph.initializer if i.data_type == TensorProto.FLOAT and len(i.dims) == 2}
    by_shape: dict[tuple, list[str]] = {}
    for name, init in matrices.items():
        by_shape.setdefault(tuple(init.dims), []).append(name)
    replaced = []
    # the exporter's own constants (onnx::MatMul_N) go first, so the weight keeps the model's name
    for name, init in sorted(matrices.items(), key=lambda item: not item[0].startswith("onnx::")):
        rows, cols = init.dims
        if rows == cols or name in replaced:
            continue  # a square matrix's transpose has its own shape: not worth the search
        candidates = [c for c in by_shape.get((cols, rows), []) if c not in replaced]
        if not candidates:
            continue
        array = numpy_helper.to_array(init)
        for other in candidates:
            if np.array_equal(numpy_helper.to_array(matrices[other]).T, array):
                graph.initializer.remove(init)
                graph.node.insert(0, helper.make_node("Transpose", [other], [name], name=f"{name}_shared",
                                                      perm=[1, 0]))
                replaced.append(name)
                break
    return replaced


def fold_initializer_transposes(graph) -> int:
    """The inverse of share_transposed_initializers, for the int8 pass: ORT's quantizer quantizes a MatMul
    only when its weight is an initializer. Returns how many Transposes were folded."""
    from onnx import numpy_helper

    initializers = {i.name: i for i in graph.initializer}
    folds = [n for n in graph.node if n.op_type == "Transpose" and n.input[0] in initializers
             and [a.ints for a in n.attribute if a.name == "perm"] in ([[1, 0]], [])]
    for node in folds:
        array = numpy_helper.to_array(initializers[node.input[0]]).T.copy()
        graph.initializer.append(numpy_helper.from_array(array, node.output[0]))
        graph.node.remove(node)
    return len(folds)


def replace_node(graph, node, new: list) -> None:
    """Put the nodes `new` where `node` was (keeping the graph's topological order) and drop `node`."""
    at = list(graph.node).index(node)
    graph.node.remove(node)
    for j, n in enumerate(new):
        graph.node.insert(at + j, n)


def per_row_int8(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, fp32 scale per row) with matrix ~= rows * scale: symmetric, scale = max |row| / 127."""
    matrix = matrix.astype(np.float32)
    scale = np.abs(matrix).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0  # an all-zero row (padding) stays zero
    return np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8), scale


def quantize_embedding_tables(graph) -> list[str]:
    """Replace each Gather from a 2-D float initializer (an embedding table) by a per-row int8 lookup:
    int8 rows and one fp32 scale per row (symmetric, scale = max |row| / 127). Returns the tables' names."""
    from onnx import TensorProto, helper, numpy_helper

    tables = {i.name: i for i in graph.initializer if i.data_type == TensorProto.FLOAT and len(i.dims) == 2}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            if name in tables:
                readers.setdefault(name, []).append(node)
    done = []
    for name, nodes in readers.items():
        axis = [a.i for n in nodes for a in n.attribute if a.name == "axis"]
        if any(n.op_type != "Gather" or n.input[0] != name for n in nodes) or any(axis):
            continue  # also read as a matrix (a tied decoder) or along another axis: left to the MatMul pass
        q, scale = per_row_int8(numpy_helper.to_array(tables[name]))
        graph.initializer.remove(tables[name])
        graph.initializer.extend([numpy_helper.from_array(q, name + "_int8"),
                                  numpy_helper.from_array(scale.astype(np.float32), name + "_row_scale")])
        for k, node in enumerate(nodes):
            out, ids, tag = node.output[0], node.input[1], f"{name}_lookup{k}"
            new = [helper.make_node("Gather", [name + "_int8", ids], [tag + "_q"], name=tag + "_rows"),
                   helper.make_node("Gather", [name + "_row_scale", ids], [tag + "_s"], name=tag + "_scales"),
                   helper.make_node("Cast", [tag + "_q"], [tag + "_f"], name=tag + "_cast", to=TensorProto.FLOAT),
                   helper.make_node("Mul", [tag + "_f", tag + "_s"], [out], name=tag + "_dequantize")]
            replace_node(graph, node, new)
        done.append(name)
    return done


def per_column_storage() -> str:
    """How per-column int8 weights are stored for this CPU: int8 where it sums uint8 x int8 products exactly
    (VNNI, AMX, ARM: the same kernel as per-tensor weights, as fast), uint8 where it would saturate (x86 without
    VNNI: a slower kernel that cannot). See `quantize_matmuls_per_column`."""
    return "int8" if int8_products_exact() else "uint8"


def quantize_matmuls_per_column(graph, storage: str = "uint8") -> int:
    """Replace each MatMul by a 2-D float initializer, a weight, with ORT's dynamic int8 MatMul whose weight has
    one scale per output column instead of ORT's one per tensor: a column of small weights keeps its own
    resolution. The activations are quantized per call as ORT does (DynamicQuantizeLinear). Returns how many
    MatMuls were replaced.

    `storage` is how the rounded weights are kept (`per_column_storage` picks it for the CPU at hand). "int8":
    ORT's uint8 x int8 kernel, the one per-tensor weights run, as fast. "uint8" (int8 + 128, zero point 128):
    a uint8 x uint8 kernel that cannot saturate, for x86 CPUs without VNNI, where the int8 kernel multiplies
    with vpmaddubsw and saturates each pair of products at int16; weights scaled per column reach +-127 in
    every column, so pairs of large products saturate there. On a CPU with VNNI both storages compute the same
    products, and int8 storage is the faster (docs/benchmarks.md).

    Gemm nodes stay fp32: in litebert's graphs they are the pooler and the classifier over it, one vector per
    sequence, a negligible share of the work, and rounding them moves the logits directly (on a random
    albert-base, 13 of 1024 predictions changed with them in int8, 8 without; the file grows 0.256x -> 0.294x).

        x -> DynamicQuantizeLinear -> (q, s, zp) -> MatMulIntegerToFloat(q, W, s, w_scale, zp, w_zp)"""
    from onnx import TensorProto, helper, numpy_helper

    weights = {i.name: i for i in graph.initializer if i.data_type == TensorProto.FLOAT and len(i.dims) == 2}
    if storage not in ("int8", "uint8"):
        raise ConfigError(f"per-column int8 weights are stored int8 or uint8, not {storage!r}")
    offset = 128 if storage == "uint8" else 0
    zero_point = "per_column_weight_zero_point"
    graph.initializer.append(numpy_helper.from_array(np.array(offset, getattr(np, storage)), zero_point))
    stored: dict[str, tuple[str, str]] = {}  # weight -> (its stored copy, its column scales)
    replaced = 0
    for node in list(graph.node):
        if node.op_type != "MatMul" or node.input[1] not in weights:
            continue
        name = node.input[1]
        if name not in stored:
            columns, scale = per_row_int8(numpy_helper.to_array(weights[name]).T)  # one row per output column
            shifted = (columns.astype(np.int16) + offset).astype(getattr(np, storage))
            graph.initializer.extend([
                numpy_helper.from_array(np.ascontiguousarray(shifted.T), f"{name}_{storage}"),
                numpy_helper.from_array(scale.reshape(-1).astype(np.float32), name + "_column_scale")])
            stored[name] = (f"{name}_{storage}", name + "_column_scale")
        (w, w_scale), x, y = stored[name], node.input[0], node.output[0]
        t = f"{node.name or name}_{replaced}_int8"
        replace_node(graph, node, [
            helper.make_node("DynamicQuantizeLinear", [x], [t + "_q", t + "_s", t + "_zp"], name=t + "_quantize"),
            helper.make_node("MatMulIntegerToFloat", [t + "_q", w, t + "_s", w_scale, t + "_zp", zero_point], [y],
                             name=t + "_matmul", domain="com.microsoft")])
        replaced += 1
    used = {name for n in graph.node for name in n.input}
    for name in set(stored) - used:  # a weight also read by something else (a tied table's Gather) stays too
        graph.initializer.remove(weights[name])
    return replaced


def fuse_transformer_ops(model, config: AlbertConfig | None = None):
    """`model` through ONNX Runtime's BERT fusions: LayerNorm(x + y) becomes one SkipLayerNormalization and the
    GELU formula one FastGelu (tanh form) or BiasGelu (erf form, with the bias before it), each one pass over
    the activations instead of five to eight. The formulas are kept (no GELU approximation is introduced).
    ALBERT's packed QKV attention does not match ORT's attention patterns and stays as it is. int8's speed is
    in its GEMMs; these passes are much of what is left (albert-base 32x128: the int8 forward ~9% faster)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_gelu_approximation = False  # an erf GELU stays erf
    heads, hidden = (config.num_attention_heads, config.hidden_size) if config else (0, 0)  # 0: ORT detects
    return optimize_model(model, model_type="bert", num_heads=heads, hidden_size=hidden,
                          optimization_options=options).model


INT8_WEIGHTS = ("per-tensor", "per-column")  # the int8 weight schemes quantize_onnx writes


def int8_weight_order() -> tuple[str, ...]:
    """The schemes `--int8-weights auto` tries in turn, keeping the first that meets the agreement threshold.
    Where the CPU sums int8 products exactly, per-column weights are stored int8 and run per-tensor's kernel:
    as fast and closer to fp32, so they alone. Elsewhere per-tensor first (the fastest), then per-column
    (stored uint8: closer, slower)."""
    return ("per-column",) if per_column_storage() == "int8" else INT8_WEIGHTS


def quantize_onnx(src: str | os.PathLike, dst: str | os.PathLike, weights: str = "per-tensor",
                  config: AlbertConfig | None = None, fuse: bool = True, embedding_tables: bool = True,
                  per_channel: bool = False, reduce_range: bool = False, weight_type: str = "int8",
                  column_storage: str | None = None) -> list[str]:
    """Write an int8 copy of the ONNX model `src` to `dst`: ORT's BERT fusions (`fuse_transformer_ops`),
    embedding tables per-row int8, then every MatMul/Gemm with a constant weight as a dynamic int8 product
    (uint8 activations quantized per call; with per-column weights the head's Gemm stay fp32). Returns the
    embedding tables quantized.

    weights="per-tensor" is ORT's dynamic quantization (one scale per weight, int8: the fastest kernel on
    every x86 CPU); "per-column" is `quantize_matmuls_per_column` (one scale per output column: closer to fp32
    on every random albert-base measured; stored as `column_storage` says, by default what suits this CPU:
    as fast as per-tensor with VNNI, slower without). The other settings (unfused, tables left fp32, ORT's
    per-channel weights, 7-bit weights, uint8 weights) are there to be compared (bench/int8_error.py)."""
    import onnx
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise QuantizeError("int8 ONNX needs onnxruntime: pip install onnxruntime") from None
    if weights not in INT8_WEIGHTS:
        raise ConfigError(f"unknown int8 weights {weights!r}; choose from {', '.join(INT8_WEIGHTS)}")

    model = onnx.load(os.fspath(src))
    bypass_identities(model.graph)
    fold_initializer_transposes(model.graph)  # int8 stores the tied copy again, as int8: 2 x 1/4 of one fp32
    quiet = logging.getLogger()  # ORT's quantizer logs a pre-processing advice at WARNING on every call
    level, quiet.level = quiet.level, logging.ERROR
    try:
        if fuse:
            model = fuse_transformer_ops(model, config)
        tables = quantize_embedding_tables(model.graph) if embedding_tables else []
        if weights == "per-column":
            quantize_matmuls_per_column(model.graph, column_storage or per_column_storage())
            if not any(o.domain == "com.microsoft" for o in model.opset_import):  # unfused: no contrib op yet
                model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
            onnx.save(model, os.fspath(dst))
        else:
            quantize_dynamic(model, os.fspath(dst), op_types_to_quantize=["MatMul", "Gemm"],
                             per_channel=per_channel, reduce_range=reduce_range,
                             weight_type={"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[weight_type],
                             # ONNX's shape inference does not type the outputs of ORT's fused ops
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        quiet.setLevel(level)
    return tables


def onnx_session(path: str | os.PathLike, threads: int | None = None, spin: bool = True):
    """An ONNX Runtime CPU session for an exported model (fp32 or int8), all graph optimisations on. With
    spin=False its threads sleep between calls instead of spin-waiting (ORT's default), which would take the
    cores from whatever else runs in the process (a benchmark's other sides, PyTorch in a server)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def initializer_bytes(path: str | os.PathLike) -> dict[str, int]:
    """Bytes of the ONNX file's initializers by element type name ("FLOAT", "INT8", ...)."""
    import onnx
    sizes: dict[str, int] = {}
    for init in onnx.load(os.fspath(path)).graph.initializer:
        kind = onnx.TensorProto.DataType.Name(init.data_type)
        sizes[kind] = sizes.get(kind, 0) + onnx.numpy_helper.to_array(init).nbytes
    return sizes
