"""Every fast path computes what the plain path computes.

litebert picks some paths by itself (explicit attention for short sequences with gradients, packed QKV cast
once under autocast) and offers others (gradient checkpointing, compiling the shared layer). Each is compared
with the plain computation on a tiny random model: same outputs, same gradients.
"""

import pytest
import torch
import torch.nn.functional as F

import litebert.model as model_module
from litebert.config import AlbertConfig
from litebert.model import (
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertModel,
    LayerNorm,
    attention,
    forced_static_shapes,
    loss_positions,
)

B, T = 3, 16


def tiny(**overrides) -> AlbertConfig:
    base = dict(vocab_size=101, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, classifier_dropout_prob=0.0)  # deterministic
    return AlbertConfig(**{**base, **overrides})


def batch(config: AlbertConfig, padded: bool = True) -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    if padded:
        mask[0, -5:] = 0
        ids = ids.masked_fill(mask == 0, 0)
    labels = torch.full((B, T), -100)
    labels[:, 2::4] = ids[:, 2::4]
    return dict(input_ids=ids, attention_mask=mask, labels=labels, sentence_order_label=torch.tensor([0, 1, 0]))


def model_pair(config: AlbertConfig) -> tuple[AlbertForPreTraining, AlbertForPreTraining]:
    torch.manual_seed(0)
    a = AlbertForPreTraining(config)
    with torch.no_grad():  # random LayerNorms and biases too, so nothing hides behind its init
        for p in a.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    b = AlbertForPreTraining(config)
    b.load_state_dict(a.state_dict())
    return a, b


def loss_and_grads(model: torch.nn.Module, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def assert_same_training(a, b, inputs, atol=1e-5, rtol=1e-5) -> None:
    loss_a, grads_a = loss_and_grads(a, inputs)
    loss_b, grads_b = loss_and_grads(b, inputs)
    torch.testing.assert_close(loss_a, loss_b, atol=atol, rtol=rtol)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=atol, rtol=rtol, msg=name)


@pytest.mark.parametrize("masked", [False, True])
def test_explicit_attention_equals_sdpa(masked):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 10, 8, generator=g, requires_grad=True) for _ in range(3))
    mask = None
    if masked:
        keep = torch.ones(2, 10, dtype=torch.bool)
        keep[1, 7:] = False
        mask = torch.zeros(2, 10).masked_fill(~keep, torch.finfo(torch.float32).min)[:, None, None, :]
    out = torch.randn(2, 4, 10, 8, generator=g)
    explicit = attention(q, k, v, mask, 0.0)  # grad enabled, short: the explicit path
    grads = torch.autograd.grad((explicit * out).sum(), (q, k, v))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)  # q carries the scale
    ref_grads = torch.autograd.grad((reference * out).sum(), (q, k, v))
    torch.testing.assert_close(explicit, reference, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_model_trains_the_same_with_sdpa_everywhere(monkeypatch):
    config = tiny()
    a, b = model_pair(config)
    inputs = batch(config)
    loss_explicit, grads_explicit = loss_and_grads(a, inputs)
    monkeypatch.setattr(model_module, "EXPLICIT_ATTENTION_MAX_LEN", 0)  # force SDPA
    loss_sdpa, grads_sdpa = loss_and_grads(b, inputs)
    torch.testing.assert_close(loss_explicit, loss_sdpa, atol=1e-5, rtol=1e-5)
    for name in grads_explicit:
        torch.testing.assert_close(grads_explicit[name], grads_sdpa[name], atol=1e-5, rtol=1e-5, msg=name)


def test_bf16_explicit_attention_rounds_an_fp32_softmax_once():
    """The explicit path's bf16 softmax (no casts) gives exactly what softmax in fp32 rounded to bf16 gives."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g).mul(3).bfloat16().requires_grad_() for _ in range(3))
    got = attention(q, k, v, None, 0.0)
    probs = torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1).bfloat16()
    torch.testing.assert_close(got, probs @ v, atol=0, rtol=0)


@pytest.mark.parametrize("layout", [dict(), dict(num_hidden_groups=2, inner_group_num=2)])
def test_gradient_checkpointing_same_loss_and_grads(layout):
    config = tiny(**layout)
    plain, ckpt = model_pair(config)
    ckpt.albert.encoder.gradient_checkpointing = True
    assert_same_training(plain, ckpt, batch(config))


def test_packed_qkv_cast_once_under_autocast(monkeypatch):
    """Casting the packed QKV once (what litebert does) gives the same forward as casting it at every
    application (what autocast would do): the same bf16 values. Gradients differ only in where the L
    per-application gradients are summed (bf16 vs fp32), so they agree to bf16 precision."""
    config = tiny()
    once, every = model_pair(config)
    inputs = batch(config)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_once = once(**inputs).loss
    monkeypatch.setattr(model_module, "cast_for_autocast", lambda *tensors: tensors)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_every = every(**inputs).loss
    torch.testing.assert_close(loss_once, loss_every, atol=0, rtol=0)
    loss_once.backward()
    loss_every.backward()
    for (name, p), q in zip(once.named_parameters(), every.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-2, rtol=2e-2, msg=name)


def test_inference_uses_sdpa_and_matches_training_path():
    config = tiny()
    model, _ = model_pair(config)
    model.eval()
    inputs = {k: v for k, v in batch(config).items() if k in ("input_ids", "attention_mask")}
    with torch.inference_mode():
        fast = model.albert(**inputs).last_hidden_state
    with_grad = model.albert(**inputs).last_hidden_state  # parameters require grad: explicit attention
    keep = inputs["attention_mask"].bool()
    torch.testing.assert_close(fast[keep], with_grad.detach()[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_compiled_layers_same_loss_and_grads():
    """torch.compile on the shared layer (opt-in: `layer.compile()`; measured not to pay on CPU, see
    bench/README.md) computes the same thing."""
    pytest.importorskip("torch._inductor")
    config = tiny()
    plain, compiled = model_pair(config)
    for group in compiled.albert.encoder.albert_layer_groups:
        for layer in group.albert_layers:
            layer.compile()
    assert_same_training(plain, compiled, batch(config), atol=1e-4, rtol=1e-4)


def test_loss_positions_lists_the_needed_positions_first_in_order():
    labels = torch.tensor([[-100, 5, -100, 7, -100],
                           [-100, -100, -100, -100, -100],
                           [-100, -100, 9, -100, -100]])
    positions, selected = loss_positions(labels, with_cls=True)
    assert positions.tolist() == [[0, 1, 3], [0, 1, 2], [0, 2, 1]]  # needed ascending, then filler
    assert selected.tolist() == [[-100, 5, 7], [-100, -100, -100], [-100, 9, -100]]
    positions, selected = loss_positions(labels, with_cls=False)
    assert positions.tolist() == [[1, 3], [0, 1], [2, 0]]
    assert selected.tolist() == [[5, 7], [-100, -100], [9, -100]]
    everything = torch.arange(10).view(2, 5)
    assert loss_positions(everything, with_cls=True)[0] is None  # nothing to skip: the plain path


def test_loss_positions_with_a_mask_fill_on_real_tokens_and_keep_labels_on_padding():
    """With the attention mask the fillers are real tokens, so that the padding-free encoder can compute them: a row
    with fewer real tokens than the width repeats its first position (label -100). A label on padding (transformers'
    loss reads it) stays where it is, needed like any other."""
    labels = torch.tensor([[-100, -100, -100, 7, 8],
                           [-100, -100, -100, -100, -100],
                           [-100, -100, -100, -100, 4]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    positions, selected = loss_positions(labels, with_cls=True, attention_mask=mask)
    assert positions.tolist() == [[0, 3, 4], [0, 1, 0], [0, 4, 1]]
    assert selected.tolist() == [[-100, 7, 8], [-100, -100, -100], [-100, 4, -100]]
    assert loss_positions(labels, with_cls=True)[0].tolist() == [[0, 3, 4], [0, 1, 2], [0, 4, 1]]  # no mask: as before


@pytest.mark.parametrize("cls", [AlbertForPreTraining, AlbertForMaskedLM], ids=lambda c: c.__name__)
@pytest.mark.parametrize("layout", [dict(), dict(num_hidden_groups=2, inner_group_num=2), dict(checkpointing=True)],
                         ids=["shared", "groups", "checkpointing"])
def test_last_layer_at_loss_positions_trains_like_the_full_layer(monkeypatch, cls, layout):
    """The last layer computed only where the losses read it: the same losses and gradients as computing it
    everywhere, with padding and a different number of labels per sequence."""
    layout = dict(layout)
    checkpointing = layout.pop("checkpointing", False)
    config = tiny(**layout)
    torch.manual_seed(0)
    a = cls(config)
    with torch.no_grad():
        for p in a.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    b = cls(config)
    b.load_state_dict(a.state_dict())
    for model in (a, b):
        model.albert.encoder.gradient_checkpointing = checkpointing
    inputs = batch(config)
    inputs["labels"][1, 3:6] = inputs["input_ids"][1, 3:6]  # rows with 4, 7 and 4 labels
    if cls is AlbertForMaskedLM:
        del inputs["sentence_order_label"]
    logits_selected = a(**inputs)[1]  # (M, V) at the labelled positions, row-major
    loss_selected, grads_selected = loss_and_grads(a, inputs)
    monkeypatch.setattr(model_module, "loss_positions", lambda labels, *_, **__: (None, labels))
    logits_full = b(**inputs)[1]
    loss_full, grads_full = loss_and_grads(b, inputs)
    torch.testing.assert_close(logits_selected, logits_full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss_selected, loss_full, atol=1e-5, rtol=1e-5)
    for name in grads_full:
        torch.testing.assert_close(grads_selected[name], grads_full[name], atol=1e-5, rtol=1e-5, msg=name)


def test_output_positions_give_the_full_hidden_states_there():
    config = tiny()
    model, _ = model_pair(config)
    inputs = {k: v for k, v in batch(config).items() if k in ("input_ids", "attention_mask")}
    positions = torch.tensor([[0, 4, 9], [0, 1, 15], [0, 2, 3]])
    for grad in (True, False):  # explicit attention with gradients, SDPA without
        with torch.set_grad_enabled(grad):
            full = model.albert(**inputs)
            part = model.albert(**inputs, output_positions=positions)
        expected = full.last_hidden_state.gather(1, positions[..., None].expand(-1, -1, config.hidden_size))
        torch.testing.assert_close(part.last_hidden_state, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(part.pooler_output, full.pooler_output, atol=1e-5, rtol=1e-5)


def test_layernorm_under_autocast_keeps_the_autocast_dtype():
    """Autocast runs LayerNorm in fp32; litebert's keeps the residual stream in bf16 (docs/gpu.md: 10% of an H100
    step). Outside autocast it is nn.LayerNorm; inside, torch's result within bf16 rounding, gradients fp32."""
    torch.manual_seed(0)
    ln = LayerNorm(16)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    x = torch.randn(4, 16)
    torch.testing.assert_close(ln(x), F.layer_norm(x, (16,), ln.weight, ln.bias, ln.eps), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, reference = ln(x), torch.nn.LayerNorm.forward(ln, x)
    assert y.dtype == torch.bfloat16 and reference.dtype == torch.float32
    torch.testing.assert_close(y.float(), reference, rtol=2e-2, atol=4e-2)
    y.float().sum().backward()
    assert ln.weight.grad.dtype == torch.float32 and ln.weight.grad.abs().sum() > 0
    config = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = AlbertModel(config)(torch.randint(0, 50, (2, 8))).last_hidden_state
    assert hidden.dtype == torch.bfloat16


def test_the_static_shape_path_computes_the_eager_loss_and_gradients():
    """What torch.compile and a CUDA graph run (every position's MLM logits, the mask always built) is the
    eager loss, summed in another order."""
    config = AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    torch.manual_seed(0)
    model = AlbertForPreTraining(config).eval()  # no dropout: the same function twice (gradients still flow)
    ids = torch.randint(5, 60, (3, 12))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:] = 0
    labels = ids.masked_fill(torch.rand(3, 12) > 0.3, -100)
    batch = dict(input_ids=ids, attention_mask=mask, labels=labels, sentence_order_label=torch.tensor([0, 1, 1]))
    results = []
    for static in (False, True):
        model.zero_grad()
        with forced_static_shapes() if static else torch.enable_grad():
            loss = model(**batch).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-6, atol=1e-6)
    for eager, static in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(static, eager, rtol=1e-5, atol=1e-6)


def test_a_batch_read_on_the_host_as_unpadded_builds_no_mask_even_on_the_static_path(monkeypatch):
    """Under static shapes (a captured CUDA graph, a compiled model) the model cannot look at its mask and built it
    always, so full rows took SDPA's masked kernel instead of flash. The loop reads each micro-batch on the host
    (holds_no_padding) and says so: no mask then, the same loss and gradients; a padded batch keeps its mask."""
    from litebert.model import batch_without_padding
    from litebert.training.data import holds_no_padding
    from litebert.training.graphs import forward_backward
    seen = []
    real_attention = model_module.attention
    monkeypatch.setattr(model_module, "attention", lambda q, k, v, mask, *rest: (
        seen.append(mask is None), real_attention(q, k, v, mask, *rest))[1])
    config = tiny()
    full, padded = batch(config, padded=False), batch(config)
    assert holds_no_padding(full) and not holds_no_padding(padded)
    assert not holds_no_padding({**full, "packed_positions": torch.arange(B * T)})  # packed: their own path
    pair = {"input_ids": full["input_ids"], "attention_mask": full["attention_mask"],  # S-ALBERT: two sides,
            "input_ids_b": padded["input_ids"], "attention_mask_b": padded["attention_mask"]}  # one padded
    assert not holds_no_padding(pair) and holds_no_padding({**pair, "attention_mask_b": full["attention_mask"]})
    a, b = model_pair(config)
    a.eval(), b.eval()
    results = {}
    for known in (False, True):
        model = a if known else b
        with forced_static_shapes():
            loss = forward_backward(model, torch.enable_grad, full, 1.0, no_padding=known)
        results[known] = (loss, [p.grad.clone() for p in model.parameters()])
        assert set(seen) == {known}, (known, seen)
        seen.clear()
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-6, atol=1e-6)
    for with_mask, without in zip(results[False][1], results[True][1], strict=True):
        torch.testing.assert_close(without, with_mask, rtol=1e-5, atol=1e-6)
    with forced_static_shapes(), batch_without_padding(False):
        a(**padded)
    assert seen and not any(seen)  # a padded batch, not vouched for: masked, as before
