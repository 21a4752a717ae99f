"""More of a transformers user's everyday calls on litebert's config, model and tokenizer objects, each made on
both libraries on the same tiny weights or tokenizer directory (built here, nothing downloaded)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import ConfigError
from litebert.heads import MODEL_CLASSES
from litebert.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

IDS = torch.randint(5, 500, (2, 9), generator=torch.Generator().manual_seed(1))


def tiny_config(**overrides) -> AlbertConfig:
    base = dict(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, hidden_act="gelu_new", initializer_range=0.2,
                num_labels=3)
    return AlbertConfig(**{**base, **overrides})


def test_config_from_pretrained_save_pretrained_update_and_json_as_transformers(tmp_path):
    config = tiny_config(id2label={0: "a", 1: "b", 2: "c"})
    config.save_pretrained(tmp_path)
    ours = AlbertConfig.from_pretrained(tmp_path, hidden_dropout_prob=0.2)
    theirs = transformers.AlbertConfig.from_pretrained(str(tmp_path), hidden_dropout_prob=0.2)
    assert ours.hidden_dropout_prob == theirs.hidden_dropout_prob == 0.2 and ours.id2label == theirs.id2label
    full = json.loads(ours.to_json_string(use_diff=False))
    reference = json.loads(theirs.to_json_string(use_diff=False))
    assert full.pop("num_labels") == 3  # litebert's config.json also records the count transformers derives
    assert {k: v for k, v in reference.items() if k in full} == full  # transformers adds its own bookkeeping
    diff = json.loads(ours.to_json_string())
    assert diff["hidden_size"] == 32 and "layer_norm_eps" not in diff and diff["model_type"] == "albert"
    ours.update({"attention_probs_dropout_prob": 0.3, "num_hidden_layers": 4})
    theirs.update({"attention_probs_dropout_prob": 0.3, "num_hidden_layers": 4})
    assert ours.to_dict()["num_hidden_layers"] == theirs.num_hidden_layers == 4
    assert ours.attention_probs_dropout_prob == theirs.attention_probs_dropout_prob
    with pytest.raises(ConfigError, match="no field 'hiden_size'"):
        ours.update({"hiden_size": 64})  # transformers sets it as a new attribute and changes nothing
    with pytest.raises(ConfigError):
        ours.update({"hidden_size": 30})  # not a multiple of the heads: refused as a new config is
    assert ours.hidden_size == 32


def test_set_input_embeddings_ties_the_decoder_as_transformers_tie_weights(tmp_path):
    torch.manual_seed(0)
    ours = MODEL_CLASSES["AlbertForMaskedLM"](tiny_config()).eval()
    ours.save_pretrained(tmp_path)
    theirs = transformers.AlbertForMaskedLM.from_pretrained(str(tmp_path)).eval()
    new = nn.Embedding(500, 16)
    ours.set_input_embeddings(new)
    theirs.set_input_embeddings(nn.Embedding.from_pretrained(new.weight.detach().clone(), freeze=False))
    theirs.tie_weights()
    ours.tie_weights()
    assert ours.get_output_embeddings().weight is ours.get_input_embeddings().weight is new.weight
    with torch.no_grad():
        assert torch.allclose(ours(IDS).logits, theirs(IDS).logits, atol=1e-5)
    ours.save_pretrained(tmp_path / "saved")
    again = type(ours).from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        assert torch.allclose(again(IDS).logits, theirs(IDS).logits, atol=1e-5)
    with pytest.raises(ConfigError, match="shape \\(500, 16\\)"):
        ours.set_input_embeddings(nn.Embedding(510, 16))
    classifier = MODEL_CLASSES["AlbertForSequenceClassification"](tiny_config())
    classifier.tie_weights()  # nothing to tie, as transformers
    assert classifier.get_output_embeddings() is None


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(None, str(out), vocab_size=500, input_sentence_size=20000)
    return Tokenizer.from_pretrained(str(out)), transformers.AutoTokenizer.from_pretrained(str(out))


def test_special_token_helpers_equal_transformers(both):
    ours, theirs = both
    assert ours.is_fast is theirs.is_fast is True
    for pair in (False, True):
        assert ours.num_special_tokens_to_add(pair=pair) == theirs.num_special_tokens_to_add(pair=pair)
    a, b = theirs("Anne walked.", "The wind.")["input_ids"], [7, 8, 9]
    assert ours.get_special_tokens_mask(a, already_has_special_tokens=True) == \
        theirs.get_special_tokens_mask(a, already_has_special_tokens=True)
    # transformers 5's AlbertTokenizer raises NotImplementedError on ids without their special tokens; its
    # encoding's special_tokens_mask is the reference (and transformers 4's answer)
    encoded = theirs("Anne walked.", "The wind.", return_special_tokens_mask=True, add_special_tokens=True)
    first, second = theirs("Anne walked.", add_special_tokens=False)["input_ids"], \
        theirs("The wind.", add_special_tokens=False)["input_ids"]
    assert ours.get_special_tokens_mask(first, second) == encoded["special_tokens_mask"]
    assert ours.get_special_tokens_mask(b) == [1, 0, 0, 0, 1]
    with_unk = [ours.unk_id, ours.pad_id, ours.mask_id, 7]
    assert ours.get_special_tokens_mask(with_unk, already_has_special_tokens=True) == \
        theirs.get_special_tokens_mask(with_unk, already_has_special_tokens=True)


LONG = "Anne Elliot walked along the shore at Lyme, and the wind was cold. " * 3


def as_lists(encoding) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in encoding.items()}


@pytest.mark.parametrize("args, kw", [
    ((LONG,), dict(max_length=20, truncation=True, stride=4)),
    (([LONG, "hi there"],), dict(max_length=16, truncation=True, stride=3, padding=True, return_tensors="pt")),
    (("what is it?", LONG), dict(max_length=24, truncation="only_second", stride=5, return_offsets_mapping=True,
                                 padding="max_length", return_tensors="pt")),
    ((LONG, "what?"), dict(max_length=24, truncation="only_first", stride=2, return_special_tokens_mask=True)),
    ((["x y z"],), dict(max_length=20, truncation=True, stride=2))])
def test_overflowing_windows_with_stride_equal_transformers(both, args, kw):
    """return_overflowing_tokens and stride were TypeErrors: long texts now give transformers' windows, with
    overflow_to_sample_mapping, offsets and word_ids() per window."""
    ours, theirs = both
    a = ours(*args, return_overflowing_tokens=True, **{"padding": False, "return_tensors": None, **kw})
    b = theirs(*args, return_overflowing_tokens=True, **kw)
    assert as_lists(a) == as_lists(b) and len(a["input_ids"]) == len(b["input_ids"]) >= 1
    assert [a.word_ids(i) for i in range(len(a["input_ids"]))] == [b.word_ids(i) for i in range(len(b["input_ids"]))]


def test_stride_alone_and_windows_without_room_are_refused_by_name(both):
    ours, _ = both
    with pytest.raises(ConfigError, match="stride=4"):
        ours(LONG, max_length=20, truncation=True, stride=4)  # transformers ignores it without overflow, silently
    with pytest.raises(ConfigError, match="stride=18"):
        ours(LONG, max_length=20, truncation=True, stride=18, return_overflowing_tokens=True)
    with pytest.raises(ConfigError, match="only_second"):
        ours("q?", LONG, max_length=20, truncation=True, return_overflowing_tokens=True)


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_inputs_embeds_give_transformers_outputs_and_gradients(name, tmp_path):
    """model(inputs_embeds=...) in place of input_ids, as attribution methods (integrated gradients) and
    adversarial training call it: the outputs, a loss and the gradient with respect to the embeddings equal
    transformers' on the same weights, and equal the outputs from the ids."""
    torch.manual_seed(0)
    ours = MODEL_CLASSES[name](tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()
    ours.save_pretrained(tmp_path)
    theirs = getattr(transformers, name).from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    ids = IDS[:, None].expand(2, 3, 9) if name == "AlbertForMultipleChoice" else IDS
    mask = torch.ones_like(ids).index_fill(-1, torch.tensor([7, 8]), 0)
    labels = {"AlbertForSequenceClassification": {"labels": torch.tensor([0, 2])},
              "AlbertForTokenClassification": {"labels": IDS % 3},
              "AlbertForQuestionAnswering": {"start_positions": torch.tensor([1, 3]),
                                             "end_positions": torch.tensor([2, 5])},
              "AlbertForMultipleChoice": {"labels": torch.tensor([0, 2])}}.get(name, {})
    results = []
    for model in (ours, theirs):
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
        out = model(inputs_embeds=embeds, attention_mask=mask, **labels)
        first = out[0] if not labels else out[1]  # the loss first when there is one
        # a loss, or a fixed random projection of the outputs (a norm of LayerNorm's output hardly moves)
        weights = torch.randn(first.shape, generator=torch.Generator().manual_seed(2))
        (out[0] if labels else (first.float() * weights).sum()).backward()
        results.append((first.detach(), embeds.grad))
    (a, grad_a), (b, grad_b) = results
    for got, want in ((a, b), (grad_a, grad_b)):  # fp32 sums in another order: 1e-5 of the largest value
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), (got - want).abs().max() / want.abs().max()
    from_ids = ours(ids, attention_mask=mask, **labels)
    torch.testing.assert_close(from_ids[0 if not labels else 1], a)
    with pytest.raises(ConfigError, match="input_ids or inputs_embeds"):
        ours(ids, inputs_embeds=ours.get_input_embeddings()(ids))
    with pytest.raises(ConfigError, match="input_ids or inputs_embeds"):
        ours(attention_mask=mask)


def test_gradient_checkpointing_enable_recomputes_layers_with_the_same_gradients(monkeypatch):
    """transformers' switch, which its ALBERT refuses (supports_gradient_checkpointing = False): litebert's
    checkpointing (--gradient-checkpointing) recomputes each layer application in the backward, same gradients."""
    torch.manual_seed(0)
    no_dropout = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    model = MODEL_CLASSES["AlbertForSequenceClassification"](no_dropout)  # training mode: checkpointing applies
    labels = torch.tensor([0, 2])

    def gradients():
        model.zero_grad()
        model(IDS, labels=labels).loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = gradients()
    calls = []
    real = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    model.gradient_checkpointing_enable({"use_reentrant": False})
    assert model.is_gradient_checkpointing
    for a, b in zip(gradients(), plain):
        torch.testing.assert_close(a, b)
    assert len(calls) == model.config.num_hidden_layers  # one checkpoint per layer application
    model.gradient_checkpointing_disable()
    gradients()
    assert not model.is_gradient_checkpointing and len(calls) == model.config.num_hidden_layers
    with pytest.raises(ConfigError, match="use_reentrant.*non-reentrant"):
        model.gradient_checkpointing_enable({"use_reentrant": True})
    with pytest.raises(ValueError, match="does not support"):  # transformers' own ALBERT: none to compare with
        transformers.AlbertModel(transformers.AlbertConfig(**tiny_config().to_dict())).gradient_checkpointing_enable()


def test_a_hook_on_a_query_projection_runs_and_sees_its_output():
    """Attribution and probing code hooks attention.query: the packed QKV GEMM skipped the module, so the hook
    never ran. A hooked projection now runs as itself (the other layers keep the packed GEMM)."""
    torch.manual_seed(0)
    model = MODEL_CLASSES["AlbertModel"](tiny_config()).eval()
    with torch.no_grad():
        expected = model(IDS).last_hidden_state
    seen = []
    query = model.encoder.albert_layer_groups[0].albert_layers[0].attention.query
    handle = query.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    with torch.no_grad():
        got = model(IDS).last_hidden_state
    handle.remove()
    assert seen == [(2, 9, 32)] * model.config.num_hidden_layers  # one shared layer, applied L times
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_hooked_token_type_table_runs_when_no_token_type_ids_are_given():
    """Without token_type_ids the embeddings add type 0's row directly; a hooked (or adapter-wrapped) table was
    skipped there, so its hook never ran. It now runs as itself, with the same result."""
    torch.manual_seed(0)
    model = MODEL_CLASSES["AlbertModel"](tiny_config()).eval()
    with torch.no_grad():
        expected = model(IDS).last_hidden_state
    seen = []
    handle = model.embeddings.token_type_embeddings.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    with torch.no_grad():
        got = model(IDS).last_hidden_state
    handle.remove()
    assert seen == [(1, 9, 16)]
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
