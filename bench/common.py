"""What every benchmark shares: identical models on both sides, interleaved timing, FLOP counts, JSON output.

Fairness rules, in code rather than in prose:
  * both sides load the *same saved directory* (litebert writes it, transformers reads it), so weights and
    config are identical;
  * timings are interleaved (litebert, peer, litebert, peer, ... with the order flipped every repeat), so
    the load other processes put on this shared machine lands on both sides alike; the ratio of medians
    taken in one run is the figure to trust, not an absolute throughput;
  * every side gets the same warm-up before anything is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from litebert.config import AlbertConfig  # noqa: E402


def base_parser(doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--preset", default="albert-base-v2")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per side (after warm-up)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny preset, one short shape, 2 repeats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where both sides run; on cuda every timed call is bracketed by torch.cuda.synchronize "
                             "and the card is named in the output. Default: %(default)s")
    parser.add_argument("--tf32", action="store_true", help="cuda: fp32 matmuls in TF32 (both sides)")
    parser.add_argument("--malloc", default="glibc", choices=["glibc", "retain"],
                        help="glibc: the C library's defaults, what either library gets when imported; retain: "
                             "freed memory kept in the process, for both sides (what `litebert` commands do: "
                             "litebert.runtime.allocator). Default: %(default)s")
    return parser


MALLOC = "glibc"
DEVICE = torch.device("cpu")  # where both sides run (--device)


def configure(args: argparse.Namespace) -> None:
    """Threads, the device and the allocator policy, process-wide, before anything is built."""
    global MALLOC, DEVICE
    torch.set_num_threads(args.threads)
    DEVICE = torch.device(getattr(args, "device", "cpu"))
    if DEVICE.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"--device cuda: no CUDA GPU is available to this torch ({torch.__version__})")
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    if args.malloc == "retain":
        from litebert.runtime.allocator import retain_freed_memory
        if not retain_freed_memory():
            raise SystemExit("--malloc retain needs glibc's mallopt")
    MALLOC = args.malloc


def machine() -> dict:
    """Where the figures were taken, so that runs on different machines can be read side by side: the CPU
    model, the ISA extensions that decide which GEMM kernels exist, whether it has bf16 kernels, the fp32 GEMM
    backend litebert chose (litebert.runtime.gemm; transformers always runs torch's default, MKL), threads, versions
    and the load average (other processes on a shared machine move every absolute figure)."""
    from litebert.runtime import cpu, gemm
    load = os.getloadavg()
    gpu = {} if DEVICE.type != "cuda" else {
        "device": "cuda", "gpu": torch.cuda.get_device_name(DEVICE), "cuda": torch.version.cuda,
        "tf32": torch.backends.cuda.matmul.allow_tf32, "gpu_memory_GiB": round(
            torch.cuda.get_device_properties(DEVICE).total_memory / 2**30, 1)}
    return {**gpu, "cpu": cpu.cpu_model(), "isa": cpu.isa(), "bf16_kernels": cpu.bf16_supported(),
            "litebert_gemm": gemm.backend().record(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "malloc": MALLOC,
            "loadavg_1min": round(load[0], 2), "loadavg_5_15min": [round(load[1], 2), round(load[2], 2)]}


def gemm_used(precision: str, side: str) -> str:
    """The GEMM kernels behind a side's linear layers at `precision` ("litebert", or a peer that calls
    torch's F.linear): fp32 on litebert.runtime.gemm's choice or torch's default (MKL); bf16 autocast on oneDNN where
    the CPU has bf16 kernels, else torch's reference fallback."""
    from litebert.runtime import cpu, gemm
    if DEVICE.type == "cuda":
        return "cuBLAS bf16" if precision == "bf16" else \
            f"cuBLAS fp32 ({'TF32' if torch.backends.cuda.matmul.allow_tf32 else 'IEEE'})"
    if precision == "fp32":
        return gemm.backend().name if side == "litebert" else "mkl"
    return "onednn" if cpu.bf16_supported() else "torch reference (no bf16 kernels)"


def emit(record: dict) -> None:
    """The one JSON line a benchmark prints."""
    print(json.dumps(record, sort_keys=False), flush=True)


# -- models ------------------------------------------------------------------------------------------

def save_random_model(config: AlbertConfig, seed: int, directory: str | None = None) -> str:
    """A randomly initialised litebert AlbertForPreTraining written as an HF directory both sides load."""
    from litebert.model import AlbertForPreTraining
    torch.manual_seed(seed)
    directory = directory or tempfile.mkdtemp(prefix="litebert-bench-")
    AlbertForPreTraining(config).save_pretrained(directory)
    return directory


def load_pair(directory: str, class_name: str, attn_implementation: str = "sdpa"):
    """(litebert model, transformers model) of the same class from the same directory."""
    import transformers

    import litebert.model
    transformers.utils.logging.disable_progress_bar()
    ours = getattr(litebert.model, class_name).from_pretrained(directory)
    theirs = getattr(transformers, class_name).from_pretrained(directory, attn_implementation=attn_implementation)
    return ours.to(DEVICE), theirs.to(DEVICE)


def pretraining_batch(config: AlbertConfig, B: int, T: int, seed: int, mask_prob: float = 0.15,
                      short_rows: float = 0.0) -> dict:
    """Full-length sequence pairs (as pretraining packs them) with 15% of positions labelled and an SOP label.
    `short_rows`: that share of the rows cut to a length drawn from [2, T] and padded, as ALBERT's data makes 10%
    of its sequences (short_seq_prob 0.1) and documents' ends add more: what real pretraining batches hold."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (B, T), generator=g)
    ids[:, 0] = 2  # [CLS]
    token_type_ids = (torch.arange(T) >= T // 2).long().expand(B, T).contiguous()
    mask = torch.ones(B, T, dtype=torch.long)
    if short_rows:  # (drawn only then: the full-length batch stays the one earlier figures were measured on)
        cut = torch.rand(B, generator=g) < short_rows
        mask = (torch.arange(T)[None] < torch.where(cut, torch.randint(2, T + 1, (B,), generator=g), T)[:, None]).long()
    labels = torch.full((B, T), -100)
    chosen = (torch.rand(B, T, generator=g) < mask_prob) & (mask == 1)
    chosen[:, 0] = False
    labels[chosen] = ids[chosen]
    ids = ids.masked_fill(chosen, 4).masked_fill(mask == 0, 0)  # [MASK]; <pad>
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=token_type_ids * mask,
                labels=labels, sentence_order_label=torch.randint(0, 2, (B,), generator=g))


# -- FLOPs -------------------------------------------------------------------------------------------

def forward_flops(config: AlbertConfig, B: int, T: int, mlm_positions: int = 0, pooler: bool = True,
                  loss_rows: int | None = None) -> int:
    """Multiply-adds x 2 of one forward pass, counting all L applications of the shared layer.

    Per token: E->H projection 2EH; per layer application QKV 6H^2, attention scores and their use 4TH,
    output projection 2H^2, FFN 4HI. The MLM head (2HE + 2EV) is counted only at the `mlm_positions`
    labelled positions, the work the loss needs: an implementation that computes logits everywhere
    (transformers does) does extra work that earns it no credit. By the same rule, with `loss_rows` (the
    positions whose final hidden state a loss reads: the labelled ones and each [CLS]) the last layer is
    counted as keys and values for every token (4H^2) and the rest only at those rows. Embedding gathers,
    LayerNorms, softmax and activations are not counted (the usual convention: they are not matmuls)."""
    E, H, I, L, V = (config.embedding_size, config.hidden_size, config.intermediate_size,
                     config.num_hidden_layers * config.inner_group_num, config.vocab_size)
    layer = 8 * H * H + 4 * H * I + 4 * T * H  # per token, one layer application
    flops = B * T * (2 * E * H + L * layer) + (B * 2 * H * H if pooler else 0)
    if loss_rows is not None:
        flops -= B * T * layer - (B * T * 4 * H * H + loss_rows * (layer - 4 * H * H))
    return flops + mlm_positions * (2 * H * E + 2 * E * V) + B * 2 * H * 2


# -- timing ------------------------------------------------------------------------------------------

def interleaved(sides: dict[str, Callable[[], object]], warmup: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per call for each side, run alternately (order flipped every repeat) after `warmup` calls each."""
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            synchronize()  # on a GPU a call returns once its kernels are queued: time them, and only them
            start = time.perf_counter()
            sides[name]()
            synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def synchronize() -> None:
    """Wait for the GPU's queued kernels (--device cuda); nothing on the CPU."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def to_device(batch: dict) -> dict:
    return {k: v.to(DEVICE) for k, v in batch.items()}


class CudaGemmProbe:
    """The GPU's matmul ceiling for a precision: a burst of n x n x n GEMMs on cuBLAS (bf16, or fp32 as TF32 or
    IEEE per --tf32), timed as one more interleaved side, so MFU divides by what the card did in the same run.
    The same interface as train_step.GemmProbe (best, seconds, ceilings)."""

    def __init__(self, precision: str, n: int = 8192, seconds: float = 0.1):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        g = torch.Generator(DEVICE).manual_seed(0)
        a, b = (torch.randn(n, n, device=DEVICE, dtype=dtype, generator=g) for _ in range(2))
        self.flops = 2 * n ** 3
        fn = lambda: a @ b  # noqa: E731
        for _ in range(3):
            fn()
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        calls = max(1, round(seconds / max(time.perf_counter() - start, 1e-6)))
        self.best = {"cublas": (fn, calls)}
        self.seconds: dict[str, list[float]] = {"cublas": []}

    def __call__(self) -> None:
        fn, n = self.best["cublas"]
        synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        synchronize()
        self.seconds["cublas"].append(time.perf_counter() - start)

    def ceilings(self) -> dict[str, float]:
        return {"cublas": round(self.best["cublas"][1] * self.flops / statistics.median(self.seconds["cublas"]) / 1e9,
                                1)} if self.seconds["cublas"] else {}


def stats(seconds: list[float], work: float, unit: str) -> dict:
    """min/median/max seconds and the throughput (`work` per second) at the median."""
    med = statistics.median(seconds)
    return {"s_min": round(min(seconds), 5), "s_median": round(med, 5), "s_max": round(max(seconds), 5),
            f"{unit}_per_s": round(work / med, 2)}


def ratio(times: dict[str, list[float]], ours: str, peer: str) -> float:
    """Speed of `ours` relative to `peer` (>1: ours is faster), from the medians measured in the same run."""
    return round(statistics.median(times[peer]) / statistics.median(times[ours]), 3)
