"""Pretraining step, litebert vs transformers: forward, MLM + SOP loss, backward, optimizer step.

Both sides load the same saved albert-base directory and train on the same batch (full-length sequence
pairs, 15% of positions masked) with torch.optim.AdamW(fused=True) (one kernel; ~3x faster than foreach
here, and the same for both sides), fp32 or bf16 autocast. transformers runs
with whichever of its "eager" and "sdpa" attention is faster here (both are timed, the faster is kept and
named in the output). Steps are interleaved; `speedup` is peer median / litebert median from this one run.
MFU = model FLOPs (3x forward, see common.forward_flops) per second / the matmul ceiling of that precision,
measured by a GEMM burst on each backend's fastest path (bench/gemm.py), interleaved with the steps so under
the same load; each backend's ceiling is printed, MFU divides by the fastest. Each side names the precision
and the GEMM kernels it ran (litebert's fp32 backend is litebert.runtime.gemm's choice; transformers runs torch's).

Precision "auto": litebert runs what `--precision auto` picks (litebert.runtime.precision.choose_precision on this batch),
timed beside litebert in fp32 and in bf16 (`auto_vs_best`: the better of those two over auto's median, ~1 or
more when auto picked right); transformers runs the chosen precision. On a CPU without bf16 kernels the bf16
side is timed once (it is tens of times slower there).

    .venv/bin/python bench/train_step.py            # 8x128 and 2x512, fp32 and bf16 (~4 min)
    .venv/bin/python bench/train_step.py --preset tiny --shapes 32x64 --precisions fp32,bf16,auto  # the demo's
    .venv/bin/python bench/train_step.py --quick    # smoke run on a tiny model
    python bench/train_step.py --device cuda --preset albert-base-v2 --shapes 64x512 --precisions bf16  # a GPU:
        CUDA-synchronised timing, MFU against cuBLAS's 8192^3 GEMM burst of the same run, the card named
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time

import common
import torch
from common import (
    base_parser,
    configure,
    emit,
    forward_flops,
    gemm_used,
    interleaved,
    load_pair,
    machine,
    pretraining_batch,
    ratio,
    save_random_model,
    stats,
    to_device,
)
from gemm import BACKEND_OF, gflops, paths
from torch.nn.attention import SDPBackend, sdpa_kernel

from litebert.config import AlbertConfig
from litebert.model import compile_layers, packed_positions
from litebert.runtime import cpu
from litebert.runtime.precision import autocast, choose_precision
from litebert.training.data import holds_no_padding
from litebert.training.graphs import WARMUP_CALLS, micro_step
from litebert.training.optim import make_optimizer


def make_step(model, batch: dict, precision: str, optimizer: str = "adamw", cuda_graphs: bool = False):
    """One training step as a callable. AdamW is torch's fused kernel (one launch; 3x the foreach step here) on all
    parameters, for both sides; "lamb" is litebert's LAMB over ALBERT's two parameter groups, as pretraining runs it.
    cuda_graphs: forward and backward replayed as one captured CUDA graph, as `--cuda-graphs` trains (the update
    stays eager, after the graph); the first calls warm up and capture."""
    if optimizer == "lamb":
        optimizer = make_optimizer(model, "lamb", lr=1e-5)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    model.train()
    forward_backward = micro_step(model, lambda: autocast(precision, common.DEVICE.type), cuda_graphs)
    no_padding = holds_no_padding(batch)  # as the loop reads each batch on the host: no mask for full rows

    def step():
        loss = forward_backward(batch, 1.0, no_padding)
        optimizer.step()
        optimizer.zero_grad(set_to_none=not cuda_graphs)
        return loss
    if cuda_graphs:
        for _ in range(WARMUP_CALLS + 1):  # warm-up calls, then the capture (and its first replay)
            step()
    step.micro_step = forward_backward  # (a GraphedMicroStep with --cuda-graphs: its .graphs)
    return step


class GemmProbe:
    """A fixed burst of GEMMs at ALBERT's FFN shape on each GEMM backend's fastest path for this precision.

    It runs interleaved with the model steps as one more side, so the ceiling that MFU divides by is measured
    under the same machine load as the steps (this machine is shared; a ceiling taken a minute earlier can be
    2x off). Each call times every backend's part of the burst, so the ceiling of each backend is reported
    and MFU divides by the fastest."""

    M, K, N = 1024, 768, 3072

    def __init__(self, precision: str):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        fns, _ = paths(self.M, self.K, self.N, dtype)
        self.flops = 2 * self.M * self.K * self.N
        self.best: dict[str, tuple[callable, int]] = {}  # backend -> (its fastest path, calls per burst)
        for backend in sorted({BACKEND_OF[name] for name in fns}):
            mine = {name: fn for name, fn in fns.items() if BACKEND_OF[name] == backend}
            rates = {name: probe_rate(fn, self.flops) for name, fn in mine.items()}
            name = max(rates, key=rates.get)
            self.best[backend] = (mine[name], max(1, round(0.1 * rates[name] * 1e9 / self.flops)))  # ~0.1 s
        self.seconds: dict[str, list[float]] = {backend: [] for backend in self.best}

    def __call__(self) -> None:
        for backend, (fn, n) in self.best.items():
            start = time.perf_counter()
            for _ in range(n):
                fn()
            self.seconds[backend].append(time.perf_counter() - start)

    def ceilings(self) -> dict[str, float]:
        """GFLOP/s per backend at the median of this probe's bursts."""
        return {backend: round(n * self.flops / statistics.median(self.seconds[backend]) / 1e9, 1)
                for backend, (_, n) in self.best.items() if self.seconds[backend]}


def probe_rate(fn, flops: int) -> float:
    """GFLOP/s of one path: the median of 3 calls after a warm-up call, or the warm-up call alone where it took
    over a second. Such a path is a reference kernel (bf16 on a CPU without bf16 kernels: ~7 s a call for
    torch.mm here), far below any ceiling; one call tells it from the fast paths, three more only cost time."""
    first = gflops(fn, flops, 0, 1)[0]
    return first if flops / (first * 1e9) > 1.0 else statistics.median(gflops(fn, flops, 0, 3))


_probe: GemmProbe | None = None  # the last probe made, read by mfu_fields (inference.py calls both in turn)


def gemm_probe(precision: str) -> tuple[GemmProbe, int]:
    """A GemmProbe for this precision (a side to interleave with the steps) and the FLOPs of one burst: on a GPU
    cuBLAS's 8192^3 GEMM (common.CudaGemmProbe)."""
    global _probe
    _probe = common.CudaGemmProbe(precision) if common.DEVICE.type == "cuda" else GemmProbe(precision)
    return _probe, sum(n * _probe.flops for _, n in _probe.best.values())


def mfu_fields(result: dict, times: dict, flops: int, probe_flops: int) -> None:
    """Adds the ceiling of each GEMM backend (medians of the interleaved probe), the fastest of them as the
    ceiling, and every side's MFU against it."""
    times.pop("gemm_probe")
    by_backend = _probe.ceilings()
    peak = max(by_backend.values())
    result["ceiling_gflops"] = round(peak, 1)
    result["ceiling_gflops_by_backend"] = by_backend
    for side, seconds in times.items():
        # three significant digits: a tiny model on a GPU has an MFU of 2e-05, not 0.0
        result[side]["mfu"] = float(f"{flops / statistics.median(seconds) / 1e9 / peak:.3g}")


PADDING_FREE_SIDES = ("litebert_padding_free", "litebert_padding_free_graphed")


def padding_free_sides(ours, batch: dict, precision: str, cuda_graphs: bool) -> dict:
    """litebert's step as `pretrain --padding-free` runs it, on copies of the same weights: eager (the encoder on
    the real tokens, a host sync a step for their count), and captured (the count from `packed_positions`, made on
    the host as pretraining's batches make it)."""
    free = copy.deepcopy(ours)
    free.albert.padding_free = True
    sides = {"litebert_padding_free": make_step(free, batch, precision)}
    if cuda_graphs:
        packed = {**batch, "packed_positions": packed_positions(batch["attention_mask"].cpu()).to(common.DEVICE)}
        sides["litebert_padding_free_graphed"] = make_step(copy.deepcopy(ours), packed, precision, cuda_graphs=True)
    return sides


SDPA_FIRST = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}  # torch's order: flash first


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--shapes", default="8x128,2x512", help="comma-separated BxT")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--compile", action="store_true",
                        help="also time litebert under torch.compile, whole (litebert_compiled) and block by block "
                             "(litebert_compiled_layers, --compile-scope layers): sides of their own on copies of the "
                             "same weights; each side's compile time (its first two steps) is its compile_s")
    parser.add_argument("--compile-scopes", default="model,layers",
                        help="with --compile: which of model, layers to time (each side holds its own copy)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="cuda: also time litebert's step as `--cuda-graphs` trains it (forward and backward one "
                             "captured graph; a side of its own on a copy of the weights): graphed_vs_eager; with "
                             "--compile also with compiled blocks inside the graph: graphed_layers_vs_eager")
    parser.add_argument("--lamb", action="store_true",
                        help="also time litebert's step with LAMB, the paper's optimizer (a side of its own, a copy of "
                             "the same weights), and report lamb_vs_adamw: its speed relative to fused AdamW's "
                             "(1 = as fast)")
    parser.add_argument("--short-rows", type=float, default=0.0,
                        help="share of the batch's rows cut to a random length and padded, as real pretraining data "
                             "(ALBERT's short_seq_prob: 0.1); MFU then counts the real tokens' work")
    parser.add_argument("--padding-free", action="store_true",
                        help="also time litebert's step as `pretrain --padding-free` runs it (and, with --cuda-graphs, "
                             "captured with packed positions): padding_free_vs_eager, padding_free_graphed_vs_eager")
    parser.add_argument("--attn", default="auto", choices=["auto", "eager", "sdpa"],
                        help="transformers attention implementation (auto: time both, keep the faster)")
    parser.add_argument("--sdpa-first", default=None, choices=sorted(SDPA_FIRST),
                        help="the SDPA kernel both sides try first (torch's order after it): cudnn, flash, efficient "
                             "or math. Default: torch's own order (flash first on CUDA)")
    args = parser.parse_args()
    configure(args)
    first = SDPA_FIRST.get(args.sdpa_first)  # for the whole run: warm-ups, captures and timed steps alike
    sdpa_order = sdpa_kernel([first, *(b for b in SDPA_FIRST.values() if b != first)], set_priority=True) if first \
        else contextlib.nullcontext()
    sdpa_order.__enter__()  # held by this frame until the process ends
    if args.cuda_graphs and args.device != "cuda":
        raise SystemExit("--cuda-graphs needs --device cuda (CUDA graphs capture GPU kernels)")
    preset = "tiny" if args.quick else args.preset
    shapes = ["4x32"] if args.quick else args.shapes.split(",")
    repeats = args.repeats or (2 if args.quick else 4)
    config = AlbertConfig.from_preset(preset)
    directory = save_random_model(config, args.seed)

    for shape in shapes:
        B, T = map(int, shape.split("x"))
        batch = to_device(pretraining_batch(config, B, T, args.seed, short_rows=args.short_rows))
        masked = int((batch["labels"] != -100).sum())
        real_share = float(batch["attention_mask"].float().mean())  # the work on padding earns no credit
        flops = 3 * forward_flops(config, B, T, mlm_positions=masked, loss_rows=masked + B) * real_share
        for precision in args.precisions.split(","):
            ours, theirs = load_pair(directory, "AlbertForPreTraining", "sdpa")
            # as pretraining sets it from its data's masking: the graphed and compiled steps read that many positions
            ours.max_predictions_per_seq = int((batch["labels"] != -100).sum(1).max())
            extra, auto, extra_notes = {}, None, {}
            if precision == "auto":  # litebert as `--precision auto` runs it, beside its fp32 and bf16 selves
                auto = auto_precision(ours, batch)
                extra = {f"litebert_{p}": make_step(copy.deepcopy(ours), batch, p) for p in ("fp32", "bf16")}
            runs = auto.precision if auto else precision  # what the litebert and transformers sides run
            steps = {"litebert": make_step(ours, batch, runs)}
            candidates = {"sdpa": theirs}
            if args.attn in ("auto", "eager"):
                candidates["eager"] = load_pair(directory, "AlbertForPreTraining", "eager")[1]
            if args.attn == "eager":
                del candidates["sdpa"]
            trial = interleaved({k: make_step(m, batch, runs) for k, m in candidates.items()}, 1, 1)
            attn = min(trial, key=lambda k: trial[k][0])
            steps["transformers"] = make_step(candidates[attn], batch, runs)
            once = {}
            if "litebert_bf16" in extra and not cpu.bf16_supported(common.DEVICE):  # reference kernels: tens of
                once["litebert_bf16"] = timed_once(extra.pop("litebert_bf16"))  # times slower than fp32, far outside noise
            steps.update(extra)
            if args.lamb:
                steps["litebert_lamb"] = make_step(copy.deepcopy(ours), batch, runs, "lamb")
            if args.cuda_graphs:
                steps["litebert_graphed"] = make_step(copy.deepcopy(ours), batch, runs, cuda_graphs=True)
                if args.compile:  # the compiled blocks' kernels inside the captured graph
                    try:
                        steps["litebert_graphed_layers"] = make_step(compile_layers(copy.deepcopy(ours)), batch,
                                                                     runs, cuda_graphs=True)
                    except Exception as e:  # an experiment: report why it cannot be captured, time the rest
                        extra_notes["graphed_layers_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if args.padding_free:
                steps.update(padding_free_sides(ours, batch, runs, args.cuda_graphs))
            compile_s = {}
            if args.compile:  # the whole model as one graph, and each block alone (compile_layers)
                scopes = {"model": ("litebert_compiled", torch.compile),
                          "layers": ("litebert_compiled_layers", compile_layers)}
                for side, compiler in (scopes[scope] for scope in args.compile_scopes.split(",")):
                    compiled_model = compiler(copy.deepcopy(ours))
                    compiled = make_step(compiled_model, batch, runs)
                    start = time.perf_counter()
                    compiled(), compiled()
                    common.synchronize()
                    compile_s[side], steps[side] = round(time.perf_counter() - start, 1), compiled
            steps["gemm_probe"], probe_flops = gemm_probe(runs)
            times = interleaved(steps, args.warmup, repeats)
            result = {"bench": "train_step", "preset": preset, "shape": shape, "precision": precision,
                      "sdpa_first": args.sdpa_first or "torch's order",
                      "optimizer": "AdamW(fused)", "peer_attn": attn, "repeats": repeats,
                      "tokens": B * T, "real_tokens": round(B * T * real_share),
                      "model_gflop_per_step": round(flops / 1e9, 2)}
            for side in ("litebert", "transformers", *extra, *once, *compile_s):
                result[side] = stats(times[side] if side in times else once[side], B * T, "tokens")
                side_precision = side.removeprefix("litebert_") if side in extra or side in once else runs
                runner = "torch" if side in compile_s else side.split("_")[0]  # compiled: F.linear's
                result[side].update(precision=side_precision, gemm=gemm_used(side_precision, runner))
            for side in once:
                result[side]["timed_once"] = "no bf16 kernels on this CPU: one step, no warm-up"
            result["speedup"] = ratio(times, "litebert", "transformers")
            for side in ("litebert_graphed", "litebert_graphed_layers", *PADDING_FREE_SIDES):
                if side in times:
                    result[side] = stats(times[side], B * T, "tokens")
                    result[side].update(precision=runs, optimizer="AdamW(fused)" + (
                        ", eager after the graph" if side.endswith("graphed") or "graphed_" in side else ""))
                    result[side.removeprefix("litebert_") + "_vs_eager"] = ratio(times, side, "litebert")
            if args.lamb:
                result["litebert_lamb"] = stats(times["litebert_lamb"], B * T, "tokens")
                result["litebert_lamb"].update(precision=runs, optimizer="Lamb(foreach)")
                result["lamb_vs_adamw"] = ratio(times, "litebert_lamb", "litebert")  # speed; >= 0.91: within 10%
            for side, seconds in compile_s.items():  # compiled_vs_eager, compiled_layers_vs_eager: speed, 1 = same
                result[side]["compile_s"] = seconds
                result[side.removeprefix("litebert_") + "_vs_eager"] = ratio(times, side, "litebert")
            if auto:
                result["auto_choice"] = auto.record()
                best = min(statistics.median(times.get(s) or once[s]) for s in ("litebert_fp32", "litebert_bf16"))
                result["auto_vs_best"] = round(best / statistics.median(times["litebert"]), 3)  # >= ~1: as fast
            result.update(extra_notes)
            mfu_fields(result, times, flops, probe_flops)
            result["machine"] = machine()
            emit(result)


def auto_precision(model, batch: dict):
    """What `--precision auto` picks for this model and batch: litebert.runtime.precision.choose_precision over one forward
    and backward, as the training loop measures it."""
    def run(precision: str) -> None:
        with autocast(precision, common.DEVICE.type):
            model(**batch).loss.backward()
    choice = choose_precision(run, common.DEVICE, work=batch["input_ids"].numel(), unit="tokens")
    model.zero_grad(set_to_none=True)
    print(f"# {choice}", flush=True)
    return choice


def timed_once(step) -> list[float]:
    start = time.perf_counter()
    step()
    return [time.perf_counter() - start]


if __name__ == "__main__":
    main()
