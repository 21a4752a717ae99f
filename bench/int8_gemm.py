"""How fast int8 can make a forward pass on this CPU: int8 GEMMs against fp32 ones, and the bound they set.

int8 speeds up the GEMMs only; softmax, LayerNorm, GELU and the attention products stay fp32. This measures,
at the throughput shape (32 x 128 = 4096 rows), each GEMM of one albert-base layer application (QKV 768->2304,
attention output 768->768, FFN 768->3072 and 3072->768), interleaved on the same thread(s):
  torch_fp32   litebert.runtime.gemm.linear (the kernels litebert's fp32 forward runs)
  ort_fp32     an ONNX Runtime session holding one MatMul + Add
  ort_int8     the same graph after ORT's dynamic quantization (litebert's int8 export: the activations
               quantized per call, u8 x s8 GEMM, dequantized to fp32), so the quantization is in its time
  torch_int8   torch.ao's dynamically quantized Linear (litebert's PyTorch int8 path)
Then the whole fp32 forward of a random albert-base classifier at 32 x 128 (litebert PyTorch), and Amdahl's
bound: the forward's time with every full-width GEMM replaced by its int8 time, which no int8 path that keeps
the rest in fp32 can beat. Each GEMM counts as often as the forward runs it at all 32 x 128 rows, recorded at
torch's dispatcher (`per_forward`), not as the layer count: the classifier's last layer computes its attention
output and FFN at the [CLS] rows only (litebert.model.cls_position), so those three run L - 1 times, the packed
QKV L times. The GEMMs at a few rows (those [CLS] rows, the pooler, the classifier: under 1% of the FLOPs) stay
in the fp32 rest.

One thread by default: with more, the two libraries' thread pools alternate, and OpenMP's threads spin on
after torch's turn into ORT's (2 threads on 2 cores: the GEMMs summed to 1.1x the whole forward).

    .venv/bin/python bench/int8_gemm.py     # ~2 min alone
    .venv/bin/python bench/int8_gemm.py --quick
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
from collections import Counter

import numpy as np
import torch
from common import base_parser, configure, emit, interleaved, machine
from torch.utils._python_dispatch import TorchDispatchMode

from litebert.config import AlbertConfig
from litebert.interop.export import ONNX_IR_VERSION
from litebert.runtime.gemm import linear


def onnx_linear(K: int, N: int, seed: int, workdir: str, threads: int) -> tuple:
    """(fp32 session, int8 session) computing x @ W + b for one random (K, N) weight."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from litebert.interop.quantize import onnx_session

    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array((rng.standard_normal((K, N)) * 0.02).astype(np.float32), "W")
    bias = numpy_helper.from_array(np.zeros(N, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", N])], [weight, bias])
    fp32 = os.path.join(workdir, f"linear_{K}x{N}.onnx")
    int8 = os.path.join(workdir, f"linear_{K}x{N}.int8.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ONNX_IR_VERSION), fp32)
    quantize_dynamic(fp32, int8, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    return onnx_session(fp32, threads, spin=False), onnx_session(int8, threads, spin=False)


def gemm_sides(M: int, K: int, N: int, seed: int, workdir: str, threads: int) -> dict:
    from litebert.interop.quantize import quantize_model
    x = torch.randn(M, K, generator=torch.Generator().manual_seed(seed))
    module = torch.nn.Linear(K, N).eval()
    int8_module = quantize_model(torch.nn.Sequential(module))[0]  # torch.ao's dynamic int8, as litebert calls it
    ort_fp32, ort_int8 = onnx_linear(K, N, seed, workdir, threads)
    feed = {"x": x.numpy()}
    return {"torch_fp32": lambda: linear(x, module.weight, module.bias),
            "ort_fp32": lambda: ort_fp32.run(None, feed),
            "ort_int8": lambda: ort_int8.run(None, feed),
            "torch_int8": lambda: int8_module(x)}


class _GemmRecorder(TorchDispatchMode):
    """Counts (rows, K, N) of every x @ W^T a forward runs, at the dispatcher: torch's linear, addmm and mm,
    and oneDNN's linear (the kernels litebert.runtime.gemm may pick); attention's batched products are not GEMMs
    with a weight and are not counted."""

    OPS = ("aten.linear", "aten.addmm", "aten.mm", "mkldnn._linear_pointwise", "aten.mkldnn_linear")

    def __init__(self):
        super().__init__()
        self.gemms: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        if name in self.OPS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            x, w = tensors[1:3] if name == "aten.addmm" else tensors[:2]  # addmm(bias, x, W^T)
            K = x.shape[-1]
            N = w.shape[-1] if name in ("aten.addmm", "aten.mm") else w.shape[0]  # mm: x @ W^T, (K, N)
            self.gemms[(x.numel() // K, K, N)] += 1
        return func(*args, **(kwargs or {}))


def forward_gemms(model: torch.nn.Module, inputs: dict) -> Counter:
    """{(rows, K, N): how often one forward of `model` on `inputs` runs that GEMM}, under inference_mode."""
    recorder = _GemmRecorder()
    with torch.inference_mode(), recorder:
        model(**inputs)
    return recorder.gemms


def ms(seconds: float) -> float:
    """Milliseconds to 4 significant digits: the --quick GEMMs take ~0.1 ms, where 2 decimals lose the ratio."""
    return float(f"{1e3 * seconds:.4g}")


def main() -> None:
    parser = base_parser(__doc__)
    parser.set_defaults(threads=1)
    args = parser.parse_args()
    configure(args)
    logging.getLogger().setLevel(logging.ERROR)  # ORT's quantizer logs a pre-processing advice on every call
    preset = "tiny" if args.quick else args.preset
    repeats = args.repeats or (2 if args.quick else 7)
    config = AlbertConfig.from_preset(preset).replace(num_labels=2)
    B, T = (4, 32) if args.quick else (32, 128)
    H, I, E = config.hidden_size, config.intermediate_size, config.embedding_size
    names = {"qkv": (H, 3 * H), "attention_output": (H, H), "ffn": (H, I), "ffn_output": (I, H),
             "embedding_projection": (E, H)}
    workdir = tempfile.mkdtemp(prefix="litebert-int8-gemm-")
    from inference import random_classifier
    _, model = random_classifier(config, args.seed, workdir)
    g = torch.Generator().manual_seed(args.seed)
    inputs = dict(input_ids=torch.randint(5, config.vocab_size, (B, T), generator=g),
                  attention_mask=torch.ones(B, T, dtype=torch.long))
    full_width = {(K, N): count for (rows, K, N), count in forward_gemms(model, inputs).items() if rows == B * T}

    per_forward = {name: 0.0 for name in ("torch_fp32", "ort_fp32", "ort_int8", "torch_int8")}
    gemms = {}
    for i, ((K, N), count) in enumerate(full_width.items()):
        label = "/".join(name for name, shape in names.items() if shape == (K, N)) or f"{K}x{N}"
        with torch.inference_mode():
            times = interleaved(gemm_sides(B * T, K, N, args.seed + i, workdir, args.threads), args.warmup, repeats)
        medians = {side: statistics.median(t) for side, t in times.items()}
        for side in per_forward:
            per_forward[side] += count * medians[side]
        gemms[label] = {"shape": [B * T, K, N], "per_forward": count,
                        **{f"{side}_ms": ms(s) for side, s in medians.items()},
                        # 3 significant digits: under load a tiny --quick GEMM's ratio can be 0.096
                        "ort_int8_vs_fp32": float(f"{medians['ort_fp32'] / medians['ort_int8']:.3g}"),
                        "torch_int8_vs_fp32": float(f"{medians['torch_fp32'] / medians['torch_int8']:.3g}")}

    with torch.inference_mode():
        forward = statistics.median(interleaved({"fp32": lambda: model(**inputs)}, args.warmup, repeats)["fp32"])
    gemm_share = per_forward["torch_fp32"] / forward
    rest = max(forward - per_forward["torch_fp32"], 0.0)
    emit({"bench": "int8_gemm", "model": f"{preset} (random weights)", "shape": [B, T], "gemms": gemms,
          "forward_fp32_ms": ms(forward), "gemm_ms_per_forward": {k: ms(v) for k, v in per_forward.items()},
          "gemm_share_of_fp32_forward": round(gemm_share, 3),
          "int8_bound_vs_litebert_fp32": {side: round(forward / (rest + per_forward[side]), 2)
                                          for side in ("ort_int8", "torch_int8")},
          "machine": machine()})


if __name__ == "__main__":
    main()
