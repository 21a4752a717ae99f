"""litebert computes what transformers' Albert classes compute, on the same checkpoint.

The reference is the real thing: a tiny random litebert model is saved, transformers loads that directory,
and outputs and gradients are compared for every head class and every sharing layout.
"""

import pytest
import torch

from litebert.config import AlbertConfig
from litebert.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel

transformers = pytest.importorskip("transformers")

L = 4
LAYOUTS = {  # name: config overrides
    "G1_inner1": dict(num_hidden_groups=1, inner_group_num=1),
    "G2_inner1": dict(num_hidden_groups=2, inner_group_num=1),
    "G1_inner2": dict(num_hidden_groups=1, inner_group_num=2),
    "GL_inner1": dict(num_hidden_groups=L, inner_group_num=1),
    "share_attention": dict(num_hidden_groups=L, sharing="attention"),
    "share_ffn": dict(num_hidden_groups=L, sharing="ffn"),
    "share_none": dict(num_hidden_groups=L, sharing="none"),
}
B, T, C = 3, 12, 3


def tiny_config(**overrides) -> AlbertConfig:
    base = dict(vocab_size=97, embedding_size=16, hidden_size=32, num_hidden_layers=L, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, hidden_act="gelu_new")
    return AlbertConfig(**{**base, **overrides})


def num_labels_for(cls) -> int:
    """HF sizes the SOP and QA heads by num_labels, which must then be 2; other heads get 3."""
    return 2 if cls in (AlbertForPreTraining, AlbertForQuestionAnswering) else 3


def make_batch(cls, config: AlbertConfig, generator: torch.Generator) -> dict:
    shape = (B, C, T) if cls is AlbertForMultipleChoice else (B, T)
    ids = torch.randint(5, config.vocab_size, shape, generator=generator)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., -3:][0] = 0  # the first example is padded
    ids = ids.masked_fill(mask == 0, 0)
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=(torch.arange(T) >= T // 2).long().expand(shape))
    if cls in (AlbertForPreTraining, AlbertForMaskedLM):
        labels = torch.full((B, T), -100)
        labels[:, 1:T:3] = ids[:, 1:T:3]
        batch["labels"] = labels
        if cls is AlbertForPreTraining:
            batch["sentence_order_label"] = torch.tensor([0, 1, 1])
    elif cls is AlbertForSequenceClassification:
        batch["labels"] = torch.tensor([0, 2, 1])
    elif cls is AlbertForTokenClassification:
        batch["labels"] = torch.randint(0, config.num_labels, (B, T), generator=generator)
    elif cls is AlbertForQuestionAnswering:
        batch["start_positions"] = torch.tensor([1, 4, 7])
        batch["end_positions"] = torch.tensor([2, 6, 7])
    elif cls is AlbertForMultipleChoice:
        batch["labels"] = torch.tensor([0, 2, 1])
    return batch


def randomize(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Random values everywhere (LayerNorms and biases too), so no parameter hides behind its init."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.2)


HEADS = [AlbertModel, AlbertForPreTraining, AlbertForMaskedLM, AlbertForSequenceClassification,
         AlbertForTokenClassification, AlbertForQuestionAnswering, AlbertForMultipleChoice]


def outputs_of(out) -> list[torch.Tensor]:
    fields = ("last_hidden_state", "pooler_output", "prediction_logits", "sop_logits", "logits",
              "start_logits", "end_logits")
    return [getattr(out, f) for f in fields if getattr(out, f, None) is not None]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cls", HEADS, ids=lambda c: c.__name__)
def test_outputs_and_gradients_equal_transformers(tmp_path, cls, layout):
    config = tiny_config(**LAYOUTS[layout], num_labels=num_labels_for(cls))
    generator = torch.Generator().manual_seed(1234)
    ours = cls(config)
    randomize(ours, generator)
    ours.save_pretrained(tmp_path)
    theirs = getattr(transformers, cls.__name__).from_pretrained(tmp_path).eval()
    ours.eval()
    batch = make_batch(cls, config, generator)

    # Forward without labels: every output equal.
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        mine, ref = outputs_of(ours(**inputs)), outputs_of(theirs(**inputs))
    for a, b in zip(mine, ref, strict=True):
        mask = inputs["attention_mask"].bool()
        if a.dim() >= 2 and a.shape[:2] == mask.shape:  # padded positions are not outputs anyone reads
            a, b = a[mask], b[mask]
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)

    if cls is AlbertModel:
        return
    # Loss and gradients equal. Partial sharing is one tensor here and equal copies in transformers, so the
    # gradient of a shared tensor is the sum of the gradients of its copies.
    loss = ours(**batch).loss
    ref_loss = theirs(**batch).loss
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
    loss.backward()
    ref_loss.backward()
    ref_grads = {k: p.grad for k, p in theirs.named_parameters(remove_duplicate=False)}
    summed: dict[int, torch.Tensor] = {}
    params = {}
    for name, p in ours.named_parameters(remove_duplicate=False):
        if name in ours.tied_weights:
            continue
        ref_grad = ref_grads.get(name)
        if ref_grad is None:
            continue
        summed[id(p)] = summed.get(id(p), 0) + ref_grad
        params[id(p)] = (name, p)
    assert params, "no parameter compared"
    for key, (name, p) in params.items():
        torch.testing.assert_close(p.grad, summed[key], atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("cls", [AlbertForPreTraining, AlbertForSequenceClassification, AlbertForQuestionAnswering],
                         ids=lambda c: c.__name__)
def test_transformers_save_loads_in_litebert(tmp_path, cls):
    config = tiny_config(num_hidden_groups=2, num_labels=num_labels_for(cls))
    torch.manual_seed(5)
    theirs = getattr(transformers, cls.__name__)(transformers.AlbertConfig(**config.to_dict())).eval()
    theirs.save_pretrained(tmp_path)
    ours = cls.from_pretrained(tmp_path).eval()
    batch = make_batch(cls, config, torch.Generator().manual_seed(0))
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        for a, b in zip(outputs_of(ours(**inputs)), outputs_of(theirs(**inputs)), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_mlm_logits_only_at_labelled_positions_give_the_full_loss():
    config = tiny_config()
    model = AlbertForMaskedLM(config).eval()
    batch = make_batch(AlbertForMaskedLM, config, torch.Generator().manual_seed(3))
    sparse = model(**batch)
    full_logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    selected = batch["labels"] != -100
    assert sparse.logits.shape == (int(selected.sum()), config.vocab_size)
    torch.testing.assert_close(sparse.logits, full_logits[selected])
    full_loss = torch.nn.functional.cross_entropy(full_logits.view(-1, config.vocab_size), batch["labels"].view(-1))
    torch.testing.assert_close(sparse.loss, full_loss)


@pytest.mark.parametrize("layout", ["G1_inner1", "share_attention"])
def test_padding_does_not_change_unpadded_outputs(layout):
    model = AlbertModel(tiny_config(**LAYOUTS[layout])).eval()
    ids = torch.randint(5, 97, (2, 10))
    with torch.no_grad():
        short = model(ids)
        padded_ids = torch.cat([ids, torch.zeros(2, 6, dtype=torch.long)], 1)
        mask = torch.cat([torch.ones(2, 10), torch.zeros(2, 6)], 1).long()
        long = model(padded_ids, mask)
    torch.testing.assert_close(long.last_hidden_state[:, :10], short.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(long.pooler_output, short.pooler_output, atol=1e-5, rtol=0)


def test_gelu_in_cpu_inference_takes_the_sigmoid_form_and_equals_the_fused_kernel(monkeypatch):
    import litebert.model as model_module
    from litebert.model import gelu_tanh

    x = 4 * torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
    exact = torch.nn.functional.gelu(x.double(), approximate="tanh")

    def fused_is_not_used(*args, **kwargs):
        raise AssertionError("fp32 CPU inference should not call the fused kernel")

    with torch.no_grad(), monkeypatch.context() as patch:
        patch.setattr(model_module.F, "gelu", fused_is_not_used)
        fast = gelu_tanh(x)
    torch.testing.assert_close(fast.double(), exact, atol=1e-6, rtol=0)
    assert torch.equal(x, 4 * torch.randn(64, 48, generator=torch.Generator().manual_seed(0)))  # input untouched

    # With autograd the fused op runs (the in-place form could not be differentiated) and its gradient is GELU's.
    x.requires_grad_(True)
    gelu_tanh(x).sum().backward()
    x64 = x.detach().double().requires_grad_(True)
    torch.nn.functional.gelu(x64, approximate="tanh").sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-5, rtol=0)
