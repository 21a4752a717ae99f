"""The ALBERT network, in one file: embeddings -> shared encoder -> pretraining heads.

ALBERT is BERT with three changes (Lan et al., 2019), all visible here:
  1. factorized embeddings: tokens live in a small E-dim space, projected to H once (`embedding_hidden_mapping_in`);
  2. cross-layer sharing: L layer applications reuse G parameter groups (`layer_to_group`), or, for the paper's
     Table 5, share only attention or only the feed-forward;
  3. sentence-order prediction: a binary head on the pooled [CLS] (`sop_classifier`).

Attribute names are HuggingFace's state-dict names on purpose (the checkpoint is the API): an HF ALBERT
checkpoint loads with `load_state_dict`, and every litebert checkpoint loads in transformers unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from litebert.config import IGNORE_INDEX, AlbertConfig
from litebert.errors import ConfigError, DataError
from litebert.runtime.gemm import dense, eager_fp32_on_cpu, linear, plain_module
from litebert.weights import PretrainedMixin


@functools.cache
def varlen_attention():
    """torch's variable-length flash attention (torch >= 2.9), for the padding-free encoder on CUDA in bf16/fp16,
    or None where this torch lacks it. Imported at its first use: the import loads torch._dynamo, about 3 s that
    every process reading a model (`litebert finetune --help` included) would otherwise pay."""
    try:
        return importlib.import_module("torch.nn.attention.varlen").varlen_attn
    except ImportError:
        return None


SQRT_2_OVER_PI = 0.7978845608028654


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """ALBERT's GELU, 0.5x(1 + tanh(u)) with u = sqrt(2/pi)(x + 0.044715x^3): torch's one fused kernel (HF runs
    eight), except in fp32 inference on a CPU, where the same function written as x * sigmoid(2u) in place is
    1.5-2x faster (torch's vectorised tanh is slow; bench/small_calls.py) and as exact (both within 6e-7 of fp64)."""
    if x.requires_grad or not eager_fp32_on_cpu(x):
        return F.gelu(x, approximate="tanh")  # autograd, other dtypes and devices, and graphs keep the fused op
    two_u = x * x
    two_u.mul_(2 * SQRT_2_OVER_PI * 0.044715).add_(2 * SQRT_2_OVER_PI).mul_(x)
    return two_u.sigmoid_().mul_(x)


def activation_fn(name: str):
    """Activations by their config.json names. TF ALBERT's "gelu" is the tanh form, which HF calls "gelu_new"."""
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return gelu_tanh
    return {
        "gelu": F.gelu,
        "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
        "relu": F.relu,
        "silu": F.silu,
        "swish": F.silu,
        "tanh": torch.tanh,
    }[name]


_forced_static_shapes = False  # set by forced_static_shapes()
_batch_without_padding = False  # set by batch_without_padding()


def static_shapes() -> bool:
    """Whether the forward must keep every shape independent of the data and never wait for the GPU: under
    torch.compile (a data-dependent width is a graph break and a graph per width) and while a CUDA graph is
    captured (litebert.training.graphs; a host sync there is an error). Eager mode selects the ~15% labelled
    positions and skips an all-ones mask; these paths compute every position and always build the mask."""
    return (_forced_static_shapes or torch.compiler.is_compiling()
            or (torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()))


@contextmanager
def forced_static_shapes():
    """The static-shape path in eager mode: a CUDA graph's warm-up runs the kernels its capture will record."""
    global _forced_static_shapes
    before, _forced_static_shapes = _forced_static_shapes, True
    try:
        yield
    finally:
        _forced_static_shapes = before


@contextmanager
def batch_without_padding(known: bool = True):
    """Forward passes of a batch whose attention_mask the caller read on the host and found all ones: the encoder
    builds no padding mask and unpads nothing. The model cannot look for itself where it keeps static shapes (a
    captured CUDA graph, a compiled model: the mask is then always built, and SDPA leaves flash attention for a
    masked kernel), and where it can, the look is a device-to-host sync on a GPU. The training loop reads each
    micro-batch before it moves (training.data.holds_no_padding); a captured graph is keyed by it."""
    global _batch_without_padding
    before, _batch_without_padding = _batch_without_padding, known
    try:
        yield
    finally:
        _batch_without_padding = before


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm that, under autocast, reads and writes the autocast dtype (statistics still in fp32 inside
    the kernel). Autocast runs LayerNorm in fp32, so the residual stream of a post-LN network (every block ends
    in one) would be fp32: a cast before each GEMM, twice the memory traffic of every add and norm, and a slow
    fp32 weight-gradient reduction. On an H100 (albert-base 64 x 512, bf16) this took the step from 65.1 to
    58.5 ms and its memory from 11.4 to 10.2 GB (docs/gpu.md). Outside autocast it is nn.LayerNorm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if not torch.is_autocast_enabled(device):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return F.layer_norm(x.to(dtype), self.normalized_shape, self.weight.to(dtype), self.bias.to(dtype),
                                self.eps)


class AlbertEmbeddings(nn.Module):
    def __init__(self, config: AlbertConfig):
        super().__init__()
        E = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.LayerNorm = LayerNorm(E, eps=config.layer_norm_eps)  # capitalised: TF/HF checkpoint name
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """`inputs_embeds` (B, T, E): word embeddings given in place of `input_ids`' (transformers' argument)."""
        words = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        T = words.shape[1]
        if T > self.position_embeddings.num_embeddings and position_ids is None:  # given: packed documents
            raise ConfigError(f"sequence length {T} exceeds max_position_embeddings "
                             f"{self.position_embeddings.num_embeddings}; truncate the input")
        if position_ids is None:
            position_ids = torch.arange(T, device=words.device)[None]
        x = words + self.position_embeddings(position_ids)
        if token_type_ids is None and plain_module(self.token_type_embeddings, nn.Embedding):
            x = x + self.token_type_embeddings.weight[0]  # type 0 everywhere: its row, without a lookup
        else:  # given, or a wrapped or hooked table, which runs as itself
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(position_ids)
            x = x + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))  # (B, T, E)


# Up to this length, training on CPU uses attention written as two matmuls and a softmax instead of SDPA: on
# CPU, SDPA's flash kernel has a slow backward at short lengths, while at 512 it wins and saves no (T, T)
# probabilities. Without gradients SDPA is as fast or faster at every length (docs/benchmarks.md).
# On CUDA SDPA's fused kernels win at every length, and the explicit form would store every (T, T)
# probability matrix for the backward (~9.7 GB at xxlarge, batch 32 x 256): never there.
EXPLICIT_ATTENTION_MAX_LEN = 256


def explicit_attention(device_type: str, length: int, needs_grad: bool) -> bool:
    """Whether `attention` computes the explicit form (True) or calls SDPA (False)."""
    return device_type == "cpu" and needs_grad and length <= EXPLICIT_ATTENTION_MAX_LEN


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
              dropout_p: float, probs_out: list | None = None) -> torch.Tensor:
    """softmax(q k^T + mask) v for (B, nh, T, hs) inputs whose queries already carry 1/sqrt(hs): SDPA, or the
    explicit form where it is faster (short sequences with gradients, on CPU) or where the probabilities are
    asked for (appended to `probs_out`: SDPA does not return them). The softmax accumulates in fp32 either way
    (PyTorch's bf16 softmax kernels compute in fp32 and round once, bitwise equal to an fp32 softmax rounded to
    bf16, without the two casts and their backward)."""
    explicit = explicit_attention(q.device.type, k.shape[-2], torch.is_grad_enabled() and q.requires_grad)
    if probs_out is None and not explicit:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=1.0)
    scores = q @ k.transpose(-1, -2)  # (B, nh, Tq, T)
    if attn_mask is not None:
        scores = scores + attn_mask
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    if probs_out is not None:
        probs_out.append(probs)  # (B, nh, Tq, T), after dropout: transformers' `attentions`
    return probs @ v  # (B, nh, Tq, hs)


@dataclass
class Unpadded:
    """Where a padded (B, T) batch's N real tokens sit once gathered into rows of their own (mosaicml BERT's
    unpadding): the per-token layers (projections, FFN, LayerNorm) run on (N, H) as they run on (B, T, H), with
    no work spent on padding, and `unpadded_attention` keeps each sequence to itself. Passed to the layers in
    place of the additive mask."""

    index: torch.Tensor  # (N,) the real tokens' positions in the flattened (B*T,) batch, row by row
    cu_seqlens: torch.Tensor  # (B + 1,) int32: sequence b is rows cu_seqlens[b]:cu_seqlens[b + 1]
    max_len: int  # the longest sequence's real tokens (at least)
    real: torch.Tensor  # (B, T) bool: which positions hold real tokens
    dtype: torch.dtype  # of the additive mask
    # With spare rows (a token count the host chose, `packed_positions`): cu_seqlens has one more entry, the spare
    # rows' own sequence (flash attention then writes finite values there: left unwritten, a NaN in them would
    # reach the weight gradients as NaN * 0), `index` points them at position 0 and `scatter` at a discarded row.
    scatter: torch.Tensor | None = None

    @functools.cached_property
    def attn_mask(self) -> torch.Tensor:
        """(B, 1, 1, T) additive padding mask: built once, and only where the re-padded fallback runs."""
        return additive_mask(self.real, self.dtype)

    def pad(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at padding."""
        B, T = self.real.shape
        spare = self.scatter is not None
        out = rows.new_zeros(B * T + spare, *rows.shape[1:]).index_copy(0, self.scatter if spare else self.index, rows)
        return out[:B * T].view(B, T, *rows.shape[1:])


def packed_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """The flat positions (b * T + t) of a (B, T) batch's real tokens, row by row, then -1 (spare rows) up to the
    next multiple of T above their count: AlbertModel's `packed_positions`. Made on the host from the batch, it
    tells the padding-free encoder its token count without a host sync, and the rounding keeps a run to a handful
    of shapes (at most B + 1), so that each can be captured once as a CUDA graph (`--cuda-graphs`)."""
    real = attention_mask.flatten().nonzero().squeeze(1)
    T = attention_mask.shape[-1]
    return F.pad(real, (0, T - real.numel() % T), value=-1)


def unpadded_from_positions(positions: torch.Tensor, attention_mask: torch.Tensor, dtype: torch.dtype) -> Unpadded:
    """The Unpadded that `packed_positions` describes, built on the device without reading anything back."""
    B, T = attention_mask.shape
    real = attention_mask.ne(0)
    spare = positions < 0
    ends = real.sum(1).cumsum(0)
    cu_seqlens = torch.cat([ends.new_zeros(1), ends, ends.new_full((1,), positions.numel())]).to(torch.int32)
    return Unpadded(positions.clamp(min=0), cu_seqlens, T, real, dtype, scatter=positions.masked_fill(spare, B * T))


def unpad(attention_mask: torch.Tensor, output_positions: torch.Tensor | None, dtype: torch.dtype,
          loss_reads: torch.Tensor | None = None) -> Unpadded | None:
    """The batch's real tokens as an Unpadded, or None where the padded path must run (nothing is padded, or an
    output position, or a position in the (B, T) bool `loss_reads`, falls on padding: the padding-free states
    are zeros there, the padded path's are not). What the shapes need (how many real tokens, the longest
    sequence, whether every position read is real) is read in one host sync: on a GPU each sync stops the CPU
    from queueing kernels ahead, and a fine-tuning step of albert-base is short enough for that to show."""
    B, T = attention_mask.shape
    real = attention_mask.ne(0)
    lengths = real.sum(1)  # (B,)
    outputs_real = real.gather(1, output_positions).all() if output_positions is not None else real.new_ones(())
    if loss_reads is not None:
        outputs_real = outputs_real & (real | ~loss_reads).all()
    n, longest, usable = torch.stack([lengths.sum(), lengths.max(), outputs_real.long()]).tolist()
    if n == B * T or not usable:
        return None
    cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    return Unpadded(real.flatten().nonzero_static(size=n).squeeze(1), cu_seqlens, longest, real, dtype)


def unpadded_attention(qkv: torch.Tensor, unpadded: Unpadded, query_rows: torch.Tensor | None,
                       dropout_p: float) -> torch.Tensor:
    """Attention within each sequence for (N, 3, nh, hs) packed rows (queries pre-scaled), queries only at
    `query_rows` (B*Tq,) when given. varlen_attn (flash) where it runs: CUDA, bf16/fp16, no dropout (it has
    none); elsewhere the rows are re-padded for `attention` with the padding mask, the padded path's math.
    Returns (N or B*Tq, nh, hs)."""
    B = unpadded.real.shape[0]
    Tq = None if query_rows is None else query_rows.numel() // B
    varlen_attn = varlen_attention() if qkv.is_cuda and qkv.dtype in (torch.float16, torch.bfloat16) else None
    if varlen_attn is not None and dropout_p == 0:
        q, k, v = qkv.unbind(1)  # (N, nh, hs) each
        if query_rows is None:
            return varlen_attn(q, k, v, unpadded.cu_seqlens, unpadded.cu_seqlens, unpadded.max_len,
                               unpadded.max_len, scale=1.0)
        cu_q = torch.arange(0, B * Tq + 1, Tq, dtype=torch.int32, device=qkv.device)  # Tq queries per sequence
        if unpadded.scatter is not None:  # no query reads the spare rows here, so flash leaves their key and
            # value gradients unwritten (uninitialised memory): select them away, NaN-safe, before they reach QKV
            spare = unpadded.scatter.eq(B * unpadded.real.shape[1])[:, None, None]
            k, v = torch.where(spare, k.detach(), k), torch.where(spare, v.detach(), v)
        cu_k = unpadded.cu_seqlens[:B + 1]  # the real sequences' keys
        return varlen_attn(q[query_rows], k, v, cu_q, cu_k, Tq, unpadded.max_len, scale=1.0)
    q, k, v = (t.transpose(1, 2) for t in unpadded.pad(qkv).unbind(2))  # (B, nh, T, hs) x 3
    if query_rows is not None:
        q = qkv[query_rows, 0].view(B, Tq, *qkv.shape[2:]).transpose(1, 2)  # (B, nh, Tq, hs)
    y = attention(q, k, v, unpadded.attn_mask, dropout_p).transpose(1, 2).flatten(0, 1)  # (B*T or B*Tq, nh, hs)
    return y if query_rows is not None else y[unpadded.index]


class AlbertAttention(nn.Module):
    """Post-LN multi-head self-attention: LayerNorm(x + dense(attention(x)))."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        self.dense = nn.Linear(H, H)
        self.LayerNorm = LayerNorm(H, eps=config.layer_norm_eps)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    @property
    def query_scale(self) -> float:
        """Attention's 1/sqrt(head_size), applied to the query projection's weights rather than to every
        query (exact when the head size is a power of 4, as ALBERT's 64 is)."""
        return (self.query.out_features // self.num_heads) ** -0.5

    def packable(self) -> bool:
        """Whether Q, K and V may run as one GEMM of their packed weights: when each is a plain nn.Linear (or
        quantize_model packed them in int8). A projection wrapped by an adapter (PEFT's LoRA on query and value)
        or hooked runs as itself, or its adapter would be left out without a word."""
        return "packed_qkv" in self.__dict__ or all(plain_module(m) for m in (self.query, self.key, self.value))

    def own_projections(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q (scaled), K and V of x (..., H), each module called as itself (see `packable`)."""
        return dense(self.query, x) * self.query_scale, dense(self.key, x), dense(self.value, x)

    def packed_qkv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Q, K, V weights as one (3H, H) matrix: one GEMM instead of three, queries pre-scaled. The encoder
        packs once per forward and reuses the result for every application of a shared layer."""
        s = self.query_scale
        weight = torch.cat([self.query.weight * s, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias * s, self.key.bias, self.value.bias])
        return weight, bias

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | Unpadded | None,
                qkv: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_positions: torch.Tensor | None = None, probs_out: list | None = None) -> torch.Tensor:
        """(B, T, H) -> (B, T, H), or (B, Tq, H) at `output_positions` (B, Tq): then keys and values are still
        computed for every token, but queries and everything after attention only at those positions.
        `probs_out`, a list, receives the attention probabilities (B, nh, Tq, T). With an Unpadded for a mask,
        x is the (N, H) real tokens and `output_positions` their rows (B*Tq,): (N, H) or (B*Tq, H) out."""
        if isinstance(attn_mask, Unpadded):
            N, H = x.shape
            if qkv is None and not self.packable():
                rows = torch.stack(self.own_projections(x), 1).view(N, 3, self.num_heads, H // self.num_heads)
            else:
                weight, bias = qkv if qkv is not None else self.packed_qkv()
                rows = linear(x, weight, bias).view(N, 3, self.num_heads, H // self.num_heads)
            dropout_p = self.attention_dropout if self.training else 0.0
            y = unpadded_attention(rows, attn_mask, output_positions, dropout_p).flatten(1)  # (N or B*Tq, H)
            x = x if output_positions is None else x[output_positions]
        else:
            x, y = self.attend(x, attn_mask, qkv, output_positions, probs_out)
        return self.LayerNorm(x + self.output_dropout(dense(self.dense, y)))

    def attend(self, x: torch.Tensor, attn_mask: torch.Tensor | None, qkv: tuple[torch.Tensor, torch.Tensor] | None,
               output_positions: torch.Tensor | None, probs_out: list | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The padded path: (x at the output positions (B, Tq, H), attention's output there (B, Tq, H))."""
        B, T, H = x.shape
        nh, hs = self.num_heads, H // self.num_heads
        no_grad = qkv is not None and not qkv[0].requires_grad
        if (output_positions is None or no_grad) and (qkv is not None or self.packable()):
            weight, bias = qkv if qkv is not None else self.packed_qkv()
            q, k, v = linear(x, weight, bias).view(B, T, 3, nh, hs).unbind(2)
            if output_positions is not None:  # without gradients, the packed QKV for every token and then the
                # queries at the positions: ~1% more work, but an export then holds each weight once (a
                # second weight form here would be traced and saved as a second copy of Q, K and V)
                x = x.gather(1, output_positions[..., None].expand(-1, -1, H))  # (B, Tq, H)
                q = q.gather(1, output_positions[..., None, None].expand(-1, -1, nh, hs))  # (B, Tq, nh, hs)
        else:  # the modules' own projections (not packable; or slicing the packed weight would cost its gradient
            # a zero-fill): queries only where they are read
            k, v = dense(self.key, x).view(B, T, nh, hs), dense(self.value, x).view(B, T, nh, hs)
            if output_positions is not None:
                x = x.gather(1, output_positions[..., None].expand(-1, -1, H))  # (B, Tq, H)
            q = (dense(self.query, x) * self.query_scale).view(B, -1, nh, hs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, nh, Tq, hs), (B, nh, T, hs) x 2
        y = attention(q, k, v, attn_mask, self.attention_dropout if self.training else 0.0, probs_out)
        return x, y.transpose(1, 2).reshape(B, -1, H)  # (B, Tq, H) x 2


class AlbertLayer(nn.Module):
    """One transformer block: attention, then LayerNorm(a + ffn_output(act(ffn(a))))."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H, I = config.hidden_size, config.intermediate_size
        self.full_layer_layer_norm = LayerNorm(H, eps=config.layer_norm_eps)  # HF's name for the FFN's LN
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(H, I)
        self.ffn_output = nn.Linear(I, H)
        self.activation = activation_fn(config.hidden_act)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                qkv: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_positions: torch.Tensor | None = None, probs_out: list | None = None) -> torch.Tensor:
        a = self.attention(x, attn_mask, qkv, output_positions, probs_out)
        # Dropout on the FFN output as in TF ALBERT (HF omits it; identical in eval mode and for v2's p=0).
        h = dense(self.ffn_output, self.activation(dense(self.ffn, a)))  # dense(m, x): m(x) on litebert.runtime.gemm
        return self.full_layer_layer_norm(self.dropout(h) + a)


def compile_layers(model: nn.Module, **options) -> nn.Module:
    """torch.compile each transformer block in place (regional compilation); the rest of the step stays eager.
    The block holds most of a step's memory-bound work (bias + GELU, residual + LayerNorm, casts), which inductor
    fuses, and its shapes never depend on the data: the eager MLM loss keeps reading only the labelled positions
    (a whole compiled model reads a fixed width, or every position: loss_positions), and a shared block compiles
    once however often it is applied. Padding-free batches (a token count per batch) run the blocks eager.
    `options` go to torch.compile (tests pass a backend)."""
    for module in model.modules():
        if isinstance(module, AlbertLayer):
            module.compile(**options)
    return model


class AlbertLayerGroup(nn.Module):
    """`inner_group_num` distinct blocks, all run each time the group is applied."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.albert_layers = nn.ModuleList([AlbertLayer(config) for _ in range(config.inner_group_num)])


class AlbertTransformer(nn.Module):
    """E -> H projection, then L layer applications over G shared groups."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList([AlbertLayerGroup(config) for _ in range(config.num_hidden_groups)])
        self.layer_to_group = config.layer_to_group  # layer l runs group l * G // L
        self.gradient_checkpointing = False
        # Table 5's partial sharing: each layer has its own group, and one sub-layer is the *same module*
        # in all of them. The state dict still lists it under every group (as HF expects), with equal values.
        first = self.albert_layer_groups[0].albert_layers[0]
        for group in self.albert_layer_groups[1:]:
            layer = group.albert_layers[0]
            if config.sharing == "attention":
                layer.attention = first.attention
            elif config.sharing == "ffn":
                layer.ffn, layer.ffn_output = first.ffn, first.ffn_output
                layer.full_layer_layer_norm = first.full_layer_layer_norm

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None,
                output_positions: torch.Tensor | None = None, hidden_out: list | None = None,
                probs_out: list | None = None) -> torch.Tensor:
        """(B, T, E) -> (B, T, H); with `output_positions` (B, Tq), the last layer computes only those rows.
        `hidden_out` receives the projected embeddings and each block's output, `probs_out` each block's
        attention probabilities (transformers' hidden_states and attentions: one per block, L x inner_group_num).
        With an Unpadded for `attn_mask`: (N, E) real tokens -> (N, H), or (B*Tq, H) at rows `output_positions`."""
        x = dense(self.embedding_hidden_mapping_in, x)  # (B, T, E) -> (B, T, H)
        if hidden_out is not None:
            hidden_out.append(x)
        layers = [layer for g in self.layer_to_group for layer in self.albert_layer_groups[g].albert_layers]
        packed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(attention) -> its QKV, packed once
        for i, layer in enumerate(layers):
            key = id(layer.attention)
            if key not in packed:  # None: the projections run as themselves (AlbertAttention.packable)
                packed[key] = cast_for_autocast(*layer.attention.packed_qkv()) if layer.attention.packable() else None
            positions = output_positions if i == len(layers) - 1 else None
            block = layer
            if isinstance(attn_mask, Unpadded) and layer._compiled_call_impl is not None:  # see compile_layers
                block = layer.forward  # the token count changes every batch: eager
            if self.gradient_checkpointing and self.training and probs_out is None:
                x = torch.utils.checkpoint.checkpoint(block, x, attn_mask, packed[key], positions, use_reentrant=False)
            else:
                x = block(x, attn_mask, packed[key], positions, probs_out)
            if hidden_out is not None:
                hidden_out.append(x)
        return x


def cast_for_autocast(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Under autocast, cast once to the autocast dtype. Autocast caches its casts of leaf parameters only, so
    a packed (non-leaf) weight would otherwise be cast again at each of the L applications, and its gradient
    cast back L times; cast once, it behaves like a parameter (gradients summed in the low dtype, as HF's)."""
    device = tensors[0].device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t.to(dtype) for t in tensors)


class ModelOutput(Mapping):
    """A model's outputs as transformers' ModelOutput: every field by name (`out.logits`), and a mapping of the
    fields that are not None: `out["logits"]`, `out.keys()`, `**out`, and `out[0]`, `out.to_tuple()` in field
    order, so `model(**batch)[0]` is the logits when no labels were given (the loss, None, is skipped)."""

    _fields: tuple[str, ...] = ()  # every field, None or not (set by @model_output)

    def to_tuple(self) -> tuple:
        return tuple(v for v in (getattr(self, f) for f in self._fields) if v is not None)

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self._fields or getattr(self, key) is None:
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __iter__(self):
        return (f for f in self._fields if getattr(self, f) is not None)

    def __len__(self) -> int:
        return len(self.to_tuple())


def model_output(cls):
    """Make a ModelOutput subclass a dataclass and register it with torch's pytree, so that DDP, torch.compile
    and torch.export find its tensors as they find a tuple's."""
    cls = dataclass(eq=False)(cls)
    cls._fields = tuple(f.name for f in dataclasses.fields(cls))
    torch.utils._pytree.register_dataclass(cls)
    return cls


@model_output
class BaseOutput(ModelOutput):
    last_hidden_state: torch.Tensor  # (B, T, H)
    pooler_output: torch.Tensor | None = None  # (B, H): tanh(W h_[CLS])
    hidden_states: tuple[torch.Tensor, ...] | None = None  # (B, T, H) x (1 + blocks), when asked
    attentions: tuple[torch.Tensor, ...] | None = None  # (B, nh, T, T) x blocks, when asked


def padding_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """(B, T) 1/0 mask -> additive (B, 1, 1, T) mask for SDPA; None when nothing is padded (faster kernel), a
    test of the data that torch.compile cannot trace: compiled, the mask is always built."""
    if attention_mask is None or (not static_shapes() and bool(attention_mask.all())):
        return None
    return additive_mask(attention_mask, dtype)


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) 1/0 -> (B, 1, 1, T): 0 where attended, the dtype's lowest value at padding."""
    return torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device).masked_fill(
        attention_mask == 0, torch.finfo(dtype).min)[:, None, None, :]


class AlbertModel(PretrainedMixin, nn.Module):
    """The encoder: what every head builds on. `add_pooling_layer=False` matches HF's MLM/QA/token models."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertTransformer(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.pooler_activation = nn.Tanh() if add_pooling_layer else None
        self.padding_free = False  # run the encoder on a padded batch's real tokens alone (`Unpadded`)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_positions: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                output_attentions: bool | None = None, packed_positions: torch.Tensor | None = None,
                loss_reads: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> BaseOutput:
        """`output_positions` (B, Tq): compute the final hidden states only there (a head that reads few
        positions saves most of the last layer); last_hidden_state is then (B, Tq, H), and the pooler reads
        its first column, which must be position 0 ([CLS]). output_hidden_states / output_attentions: also
        return them, as transformers does (None: as the config says; attention probabilities are then computed
        explicitly, not by SDPA).
        `loss_reads` (B, T) bool: the positions of last_hidden_state a head's loss reads; where one is padding,
        `padding_free` stands aside (its states there are zeros, transformers' are not, and the loss would differ).
        `packed_positions` (from litebert.model.packed_positions, with `attention_mask`): run padding-free with the
        token count the host chose, whatever `padding_free` says; output positions and `loss_reads` must then be
        real tokens (not checked: that would read the device). `inputs_embeds` (B, T, E): the word embeddings,
        given instead of `input_ids` (attributions and adversarial training differentiate with respect to them)."""
        output_hidden_states, output_attentions = self.config.outputs_asked(output_hidden_states, output_attentions)
        given_inputs(input_ids, inputs_embeds, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     position_ids=position_ids)
        if attention_mask is not None and attention_mask.dim() != 2:  # transformers also takes (B, 1, T, T)
            raise ConfigError(f"attention_mask must be (batch, length) 1/0, got shape {tuple(attention_mask.shape)}")
        if _batch_without_padding and packed_positions is None:
            attention_mask = None  # all ones, as the caller read it on the host (batch_without_padding)
        x = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        hidden, probs = ([] if output_hidden_states else None), ([] if output_attentions else None)
        unpadded = None
        if attention_mask is not None and not (output_hidden_states or output_attentions):  # (those: padded)
            if packed_positions is not None:  # a token count the host chose: no sync, a shape a graph can keep
                unpadded = unpadded_from_positions(packed_positions, attention_mask, x.dtype)
            elif self.padding_free and not static_shapes():  # N real tokens: a shape from the data, a host sync
                # the pooler reads position 0: it must be a real token too (left padding: the padded path)
                read = output_positions if output_positions is not None or self.pooler is None else \
                    attention_mask.new_zeros((attention_mask.shape[0], 1), dtype=torch.long)
                unpadded = unpad(attention_mask, read, x.dtype, loss_reads)
        if unpadded is not None:
            h = self.unpadded_encoder(x, attention_mask, unpadded, output_positions)
        else:  # no padding, or states asked for at every position or at padding: the padded encoder
            h = self.encoder(x, padding_mask(attention_mask, x.dtype), output_positions, hidden, probs)
        pooled = self.pooler_activation(self.pooler(h[:, 0])) if self.pooler is not None else None
        return BaseOutput(h, pooled, None if hidden is None else tuple(hidden), None if probs is None else tuple(probs))

    def unpadded_encoder(self, x: torch.Tensor, attention_mask: torch.Tensor, unpadded: Unpadded,
                         output_positions: torch.Tensor | None) -> torch.Tensor:
        """The encoder on the real tokens alone, its output laid out as the padded encoder's: (B, Tq, H) at
        `output_positions` (all real tokens), else (B, T, H) with zeros at padding, so every head reads it as before."""
        B, T = attention_mask.shape
        rows = None
        if output_positions is not None:  # each output position's row among the N real tokens
            row_of = unpadded.real.flatten().cumsum(0) - 1  # (B*T,)
            rows = row_of[(output_positions + torch.arange(B, device=x.device)[:, None] * T).flatten()]  # (B*Tq,)
        h = self.encoder(x.flatten(0, 1)[unpadded.index], unpadded, rows)  # (N, E) -> (N or B*Tq, H)
        return unpadded.pad(h) if rows is None else h.view(B, -1, h.shape[-1])


class AlbertMLMHead(nn.Module):
    """H -> E, activation, LayerNorm, then the decoder whose weight *is* the V x E word embedding."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.LayerNorm = LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size)
        self.decoder.bias = self.bias  # one bias, two names, as in HF
        self.activation = activation_fn(config.hidden_act)

    def init_own_parameters(self) -> None:  # called by init_weights (litebert.weights.init_module_weights)
        nn.init.zeros_(self.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return dense(self.decoder, self.LayerNorm(self.activation(dense(self.dense, h))))  # (..., V)


def classifier_dropout(config: AlbertConfig) -> nn.Dropout:
    """Every classifier's dropout: classifier_dropout_prob, or hidden_dropout_prob where it is None (the rate a
    saved config.json then records, so a head trains alike before and after a save)."""
    p = config.classifier_dropout_prob
    return nn.Dropout(config.hidden_dropout_prob if p is None else p)


class AlbertSOPHead(nn.Module):
    """Binary classifier on the pooled [CLS]. The same head serves NSP: the objective is in the data
    (label 0 = B follows A; 1 = swapped for SOP, random document for NSP)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled))  # (B, 2)


def loss_positions(labels: torch.Tensor, with_cls: bool, max_predictions: int | None = None,
                   attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The positions whose final hidden states the pretraining losses read, for AlbertModel's
    `output_positions`: the labelled ones, and position 0 for the SOP head's pooler.

    Returns (positions (B, Tq), their labels (B, Tq)): each row lists its needed positions in ascending order
    (so the MLM logits keep the row-major order of the full computation), then fills up to the width with
    unneeded positions (label -100: computed, never read). At 15% masking Tq is ~1/5 of T, so the last layer
    costs ~1/3 of a full one (its keys and values still need every token). Returns (None, labels) when every
    position is needed.

    The width is the longest row's count, a number that depends on the data: a host sync, which the static-shape
    path (torch.compile, CUDA graph capture: see static_shapes) cannot have. There the width is the data's bound
    (`max_predictions`: litebert's masking labels at most max_predictions_per_seq tokens a row), checked on the
    device; without one, that path reads every position, unlabelled ones weighted 0 in masked_lm. A row over the
    bound is an error in either path.

    With `attention_mask`, the fillers are real tokens (a row shorter than the width repeats its first position,
    label -100): the padding-free encoder computes outputs only at real tokens, and one filler on padding would
    send the whole batch down the padded path."""
    T, static = labels.shape[1], static_shapes()
    if static and max_predictions is None:
        return None, labels
    needed = labels != IGNORE_INDEX
    if with_cls:
        needed[:, 0] = True
    if static:
        width = min(T, max_predictions + int(with_cls))
        torch._assert_async(needed.sum(1).max() <= width, "a row has more MLM labels than max_predictions_per_seq")
    else:
        width = max(1, int(needed.sum(1).max()))
        if max_predictions is not None and width > max_predictions + int(with_cls):
            raise DataError(f"a row has {width - int(with_cls)} MLM labels, more than the data's "
                            f"max_predictions_per_seq ({max_predictions}) that this model reads")
    if width == T:
        return None, labels
    order = (~needed).to(torch.uint8)  # needed first; with a mask, then the real tokens, then padding
    if attention_mask is not None:
        order *= 1 + attention_mask.eq(0).to(torch.uint8)
    positions = torch.sort(order, dim=1, stable=True).indices[:, :width]
    selected = labels.gather(1, positions)
    if attention_mask is not None:  # (a label on padding stays: transformers' loss reads it too)
        filler_on_padding = attention_mask.gather(1, positions).eq(0) & ~needed.gather(1, positions)
        positions = torch.where(filler_on_padding, positions[:, :1], positions)
        selected = selected.masked_fill(filler_on_padding, IGNORE_INDEX)
    return positions, selected


def given_inputs(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                 **others: torch.Tensor | None) -> torch.Tensor:
    """The batch's inputs, ids or embeddings (transformers' inputs_embeds), whichever was given: exactly one. It
    and `others` (the masks and ids beside it) must be tensors: a tokenizer's lists (its default, as
    transformers') would otherwise fail deep inside as "'list' object has no attribute ...", naming nothing."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ConfigError("give input_ids or inputs_embeds (one of them)")
    named = {"input_ids": input_ids, "inputs_embeds": inputs_embeds, **others}
    for name, value in named.items():
        if value is not None and not isinstance(value, torch.Tensor):
            raise ConfigError(f"{name} is a {type(value).__name__}, not a tensor: encode with "
                              "return_tensors=\"pt\" (and padding=True for a batch of several texts)")
    return input_ids if input_ids is not None else inputs_embeds


def cls_position(inputs: torch.Tensor) -> torch.Tensor:
    """`output_positions` for a head that reads only the pooled [CLS]: the last layer runs one query. `inputs`:
    the batch's input_ids (B, T) or inputs_embeds (B, T, E)."""
    return torch.zeros(inputs.shape[0], 1, dtype=torch.long, device=inputs.device)


def masked_lm(head: AlbertMLMHead, h: torch.Tensor, labels: torch.Tensor | None
              ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """MLM loss and logits. With labels, logits are computed only at the labelled positions (~15% of
    tokens): the same loss as HF's full (B, T, V) computation, for a fraction of the work and memory.
    Returns (loss, logits) with logits (M, V) for the M labelled positions in row-major order, or (B, T, V)."""
    if labels is None:
        return None, head(h)
    if static_shapes():  # every position's logits (B, T, V), or a bounded width's (loss_positions); unlabelled weigh 0
        logits = head(h)
        flat = labels.reshape(-1)
        losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), flat, ignore_index=IGNORE_INDEX,
                                 reduction="none")
        return losses.sum() / (flat != IGNORE_INDEX).sum().clamp(min=1), logits  # the mean; 0 with no labels
    selected = labels != IGNORE_INDEX
    logits = head(h[selected])  # (M, V)
    if logits.shape[0] == 0:  # nothing to predict in this batch: zero loss, not HF's NaN
        return logits.sum() * 0.0, logits
    return F.cross_entropy(logits.float(), labels[selected]), logits


@model_output
class PreTrainingOutput(ModelOutput):
    loss: torch.Tensor | None  # mlm_loss + sop_loss (whichever are given)
    prediction_logits: torch.Tensor  # (B, T, V), or (M, V) at labelled positions when labels are given
    sop_logits: torch.Tensor  # (B, 2)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    mlm_loss: torch.Tensor | None = None  # after transformers' fields, so that positions agree with theirs
    sop_loss: torch.Tensor | None = None


class AlbertForPreTraining(PretrainedMixin, nn.Module):
    """MLM + sentence-order prediction (paper section 3.1). Pass no `sentence_order_label` for MLM alone."""

    tied_weights = {"predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
                    "predictions.decoder.bias": "predictions.bias"}

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config = config if config.num_labels == 2 else config.replace(num_labels=2)  # HF sizes the
        self.albert = AlbertModel(config)                                                         # SOP head so
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        self.max_predictions_per_seq: int | None = None  # the data's bound on labels a row (loss_positions)
        self.init_weights()
        self.predictions.decoder.weight = self.albert.embeddings.word_embeddings.weight  # weight tying

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, sentence_order_label: torch.Tensor | None = None,
                output_hidden_states: bool | None = None, output_attentions: bool | None = None,
                packed_positions: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None
                ) -> PreTrainingOutput:
        """`packed_positions`: as AlbertModel's (pretraining's padding-free batches under --cuda-graphs)."""
        output_hidden_states, output_attentions = self.config.outputs_asked(output_hidden_states, output_attentions)
        positions = None
        if labels is not None and not (output_hidden_states or output_attentions):  # those need every position
            positions, labels = loss_positions(labels, with_cls=True, max_predictions=self.max_predictions_per_seq,
                                               attention_mask=attention_mask)
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, positions, output_hidden_states,
                          output_attentions, packed_positions, inputs_embeds=inputs_embeds)
        mlm_loss, prediction_logits = masked_lm(self.predictions, out.last_hidden_state, labels)
        sop_logits = self.sop_classifier(out.pooler_output)
        sop_loss = None if sentence_order_label is None else F.cross_entropy(sop_logits.float(),
                                                                             sentence_order_label.view(-1))
        losses = [loss for loss in (mlm_loss, sop_loss) if loss is not None]
        return PreTrainingOutput(sum(losses) if losses else None, prediction_logits, sop_logits, out.hidden_states,
                                 out.attentions, mlm_loss, sop_loss)


@model_output
class MaskedLMOutput(ModelOutput):
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, T, V), or (M, V) at labelled positions when labels are given
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class AlbertForMaskedLM(PretrainedMixin, nn.Module):
    tied_weights = AlbertForPreTraining.tied_weights

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.predictions = AlbertMLMHead(config)
        self.max_predictions_per_seq: int | None = None  # the data's bound on labels a row (loss_positions)
        self.init_weights()
        self.predictions.decoder.weight = self.albert.embeddings.word_embeddings.weight  # weight tying

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                output_attentions: bool | None = None, inputs_embeds: torch.Tensor | None = None) -> MaskedLMOutput:
        output_hidden_states, output_attentions = self.config.outputs_asked(output_hidden_states, output_attentions)
        positions = None
        if labels is not None and not (output_hidden_states or output_attentions):  # those need every position
            positions, labels = loss_positions(labels, with_cls=False, max_predictions=self.max_predictions_per_seq,
                                               attention_mask=attention_mask)
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, positions, output_hidden_states,
                          output_attentions, inputs_embeds=inputs_embeds)
        return MaskedLMOutput(*masked_lm(self.predictions, out.last_hidden_state, labels), out.hidden_states,
                              out.attentions)


def encoder_of(model: nn.Module) -> AlbertModel:
    """The AlbertModel inside any litebert model (every head keeps it as `.albert`), or the model itself."""
    return model if isinstance(model, AlbertModel) else model.albert


__all__ = ["compile_layers", "forced_static_shapes", "static_shapes", "AlbertModel", "ModelOutput", "model_output",
           "packed_positions", "encoder_of", "AlbertForPreTraining", "AlbertForMaskedLM", "activation_fn", "cls_position",
           "given_inputs", "loss_positions", "masked_lm"]
