"""TrainConfig: the options of one run of the training loop, shared by every training verb's [train] table.

Each numeric option declares its valid range where it is defined (runconfig: the command line, TOML tables and a
config built in code are all held to it); options that must agree with each other are checked in __post_init__.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litebert.errors import ConfigError
from litebert.runconfig import check_declared
from litebert.runtime.device import resolve_device
from litebert.runtime.precision import TRAINING_PRECISIONS

CONFIG_NAME = "train_config.toml"


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass
class TrainConfig:
    """One run of the training loop. Defaults suit fine-tuning; pretraining recipes set lamb and its lr."""

    toml_section = "train"  # every training verb's recipe has a [train] table

    lr: float = field(default=1e-4, metadata=_help(
        "peak learning rate (ALBERT pretraining: 0.00176 at batch 4096)", range="[0, inf)"))
    batch_size: int = field(default=32, metadata=_help(
        "global batch size: examples per optimizer step, all ranks", range="[1, inf)"))
    micro_batch_size: int | None = field(default=None, metadata=_help(
        "examples per forward pass and rank; batch_size / (micro_batch_size * world_size) micro-batches are "
        "accumulated per step (default: batch_size / world_size, no accumulation)", range="[1, inf)"))
    max_steps: int = field(default=1000, metadata=_help(
        "optimizer steps; the lr decays to 0 at this step", range="[1, inf)"))
    warmup_steps: int = field(default=0, metadata=_help("linear warmup steps (ALBERT: 3125)", range="[0, inf)"))
    lr_decay_power: float = field(default=1.0, metadata=_help(
        "power of the polynomial decay (1 = linear)", range="[0, inf)"))
    optimizer: str = field(default="lamb", metadata=_help("optimizer", choices=("lamb", "adamw")))
    weight_decay: float = field(default=0.01, metadata=_help(
        "decoupled weight decay (not on LayerNorm or biases)", range="[0, inf)"))
    beta1: float = field(default=0.9, metadata=_help("first-moment decay", range="[0, 1)"))
    beta2: float = field(default=0.999, metadata=_help("second-moment decay", range="[0, 1)"))
    eps: float = field(default=1e-6, metadata=_help("optimizer epsilon", range="(0, inf)"))
    clip_norm: float = field(default=1.0, metadata=_help(
        "clip gradients to this global norm; 0 disables", range="[0, inf)"))
    precision: str = field(default="fp32", metadata=_help(
        "fp32, bf16 autocast (weights, gradients and optimizer state stay fp32), or auto: bf16 where this CPU/GPU "
        "has bf16 kernels and a timed step of this run measures it faster, else fp32 (the choice and the rates go "
        "to train_config.toml [precision])", choices=TRAINING_PRECISIONS))
    compile: bool = field(default=False, metadata=_help(
        "torch.compile the training step's transformer blocks (--compile-scope layers) or whole model, compiled "
        "again for each new batch shape. Measured on an H100 (albert-base 64x512 bf16, docs/gpu.md): blocks 8 s to "
        "compile, then 1.06x eager (53.5 vs 56.6 ms), so it pays after ~2,700 steps; the whole model 34 s, then "
        "1.02x (while it computed every position's MLM logits; it now reads the data's max_predictions_per_seq "
        "a row). On a CPU it rarely pays"))
    compile_scope: str = field(default="layers", metadata=_help(
        "what --compile compiles: layers (each transformer block, the rest eager: the MLM loss keeps reading only "
        "the labelled positions, and a shared block compiles once) or model (the whole step as one graph, every "
        "position's MLM logits; see --compile)", choices=("layers", "model"), read_with="compile"))
    cuda_graphs: bool = field(default=False, metadata=_help(
        "CUDA, one process: capture each batch shape's forward and backward once as a CUDA graph and replay it, "
        "for small models whose step is spent launching kernels (the demo's 0.8M model on an H200: 4.1x the steps/s, "
        "docs/gpu.md). Static shapes, as --compile-scope model: the MLM loss reads the data's max_predictions_per_seq "
        "positions a row; padding-free fine-tuning pads each batch to --max-length and runs on its real tokens, "
        "their count rounded up to a multiple of that length (QA batches keep their length: its loss reads padding). "
        "With --compile (blocks) the compiled kernels run inside the graph: albert-base 64x512 bf16 on an H100 "
        "1.16x eager's steps/s, the graph alone 1.06x"))
    find_unused_parameters: bool = field(default=False, metadata=_help(
        "DDP only: allow trainable parameters outside the loss in a model of your own (litebert's verbs freeze "
        "what their objective leaves out, so they never need it)"))
    gradient_checkpointing: bool = field(default=False, metadata=_help(
        "recompute each layer's activations in the backward pass instead of storing them: less memory (xxlarge "
        "on one GPU), about a third more compute"))
    device: str = field(default="auto", metadata=_help("auto (cuda:LOCAL_RANK if available, else cpu), cpu or cuda"))
    data_workers: int | None = field(default=None, metadata=_help(
        "processes that build the next batches (masking, tokenizing) while the device computes this step: the "
        "same batches, only sooner (default: 2 on a CUDA GPU; 0 on a CPU, whose cores run the step)",
        range="[0, inf)"))
    tf32: bool = field(default=True, metadata=_help(
        "CUDA only: TF32 float32 matmuls (Ampere and later; fp32 accumulation); never changes CPU math"))
    dist_timeout_minutes: float = field(default=60.0, metadata=_help(
        "torchrun: how long a rank waits in a collective (e.g. while rank 0 evaluates and saves) before the "
        "run fails", range="(0, inf)"))
    seed: int = field(default=12345, metadata=_help(
        "seed for python/numpy/torch RNGs (dropout), offset by rank", range="[0, 4294967295]"))
    log_every: int = field(default=10, metadata=_help(
        "write loss, lr and tokens/s to metrics.jsonl every N steps", range="[1, inf)"))
    eval_every: int = field(default=0, metadata=_help("evaluate every N steps (0: only at the end)", range="[0, inf)"))
    save_every: int = field(default=0, metadata=_help(
        "checkpoint every N steps (0: only at the end)", range="[0, inf)"))
    keep_last: int = field(default=3, metadata=_help("keep the newest N checkpoints (0: keep all)", range="[0, inf)"))
    out_dir: str = field(default="out/run", metadata=_help("run directory: checkpoints, metrics, plot, config"))
    resume: bool = field(default=False, metadata=_help("continue from the latest complete checkpoint in out_dir"))
    progress: bool = field(default=True, metadata=_help("show a progress bar (rank 0, when stderr is a terminal)"))

    def __post_init__(self) -> None:
        check_declared(self)  # a TrainConfig built in code is held to the ranges the command line is
        # A warmup longer than the run never reaches its peak learning rate, nor decays: the options must agree.
        if self.warmup_steps > self.max_steps:
            raise ConfigError(f"--warmup-steps {self.warmup_steps} exceeds --max-steps {self.max_steps}: the "
                              "learning rate would never reach its peak, nor decay")
        resolve_device(self.device)  # a bad --device is refused here, before a run reads or writes anything

    def accumulation(self, world_size: int) -> tuple[int, int]:
        """(micro_batch_size, accumulation steps) for this world size."""
        micro = self.micro_batch_size or self.batch_size // world_size
        if micro == 0 or self.batch_size % (micro * world_size):
            raise ConfigError(f"batch_size {self.batch_size} is not a multiple of micro_batch_size {micro} x "
                             f"world_size {world_size}")
        return micro, self.batch_size // (micro * world_size)
