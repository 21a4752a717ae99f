"""torch.compile of litebert's models: one graph, no breaks, and no recompiles when the data changes.

On an H100 the compiled pretraining step first ran at 1.00x eager: a graph break at `loss_positions` (its width
depends on how many labels a batch has) and `runtime.gemm.linear`/`dense` reading process state (thread count,
environment) that dynamo cannot trace, so each was compiled as its own frame, once per weight shape, until the
recompile limit sent most of the step back to eager. Dynamo's tracing runs on the CPU, so these are checked here;
the `eager` backend runs the captured graphs without inductor (no C++ compiler needed, seconds)."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

from litebert import AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining, AlbertForSequenceClassification

CONFIG = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


def batch(masked: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG.vocab_size, (3, 12), generator=g)
    labels = ids.masked_fill(torch.rand(3, 12, generator=g) > masked, -100)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
            "sentence_order_label": torch.tensor([0, 1, 0])}


def assert_trains_as_eager(model, b: dict, compiler):
    """`model` on `b` eagerly, then `compiler(model)` on `b` (called after the eager pass: compile_layers
    compiles in place): the same loss and gradients. Returns (eager output, compiled output)."""
    eager = model(**b)
    eager.loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = compiler(model)(**b)
    compiled.loss.backward()
    torch.testing.assert_close(compiled.loss, eager.loss, rtol=1e-5, atol=1e-6)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    return eager, compiled


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_pretraining_model_compiles_to_one_graph_without_breaks():
    model = AlbertForPreTraining(CONFIG)
    explained = torch._dynamo.explain(model)(**batch(0.15))
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    assert explained.graph_count == 1


def test_a_new_label_count_or_model_does_not_recompile():
    """Batches with 1 label and with most positions labelled, and a second model of the same shapes: one
    compilation (the data-dependent width is gone, and `linear` no longer compiles per weight shape)."""
    counter = CompileCounter()
    model = AlbertForPreTraining(CONFIG)
    compiled = torch.compile(model, backend=counter)
    for masked in (0.05, 0.15, 0.9):
        compiled(**batch(masked)).loss.backward()
    assert counter.frame_count == 1


@pytest.mark.parametrize("masked", [0.15, 0.0])
def test_compiled_losses_and_gradients_equal_eager(masked):
    """The compiled MLM loss reads every position's logits with the unlabelled ones weighted 0: the same mean as
    eager's gather of the labelled positions (0, not NaN, with none), and the same gradients."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(CONFIG).eval()
    b = batch(masked)
    eager, compiled = assert_trains_as_eager(model, b, lambda m: torch.compile(m, backend="eager"))
    torch.testing.assert_close(compiled.mlm_loss, eager.mlm_loss, rtol=1e-5, atol=1e-6)
    selected = b["labels"] != -100
    assert compiled.prediction_logits.shape == (3, 12, CONFIG.vocab_size)  # every position under compile
    torch.testing.assert_close(compiled.prediction_logits[selected], eager.prediction_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", [AlbertForMaskedLM, AlbertForSequenceClassification])
def test_other_heads_compile_without_breaks(cls):
    model = cls(CONFIG)
    b = batch(0.15)
    labels = b["labels"] if cls is AlbertForMaskedLM else torch.tensor([0, 1, 1])
    explained = torch._dynamo.explain(model)(b["input_ids"], b["attention_mask"], labels=labels)
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_compiled_layers_compile_once_and_leave_the_loss_eager(sharing):
    """compile_layers: the block's graphs are shared by all its applications (ALBERT's one shared block, or BERT's
    distinct blocks of one shape): one at every position, and the last block's at the labelled positions (whose
    count dynamo makes dynamic at its second value), and no more for further label counts. The MLM loss outside
    it still reads only the labelled positions, with eager's loss and gradients."""
    from litebert.model import compile_layers

    config = CONFIG.replace(num_hidden_groups=CONFIG.num_hidden_layers) if sharing == "none" else CONFIG
    torch.manual_seed(0)
    model = AlbertForPreTraining(config).eval()
    counter = CompileCounter()
    eager, compiled = assert_trains_as_eager(model, batch(0.15), lambda m: compile_layers(m, backend=counter))
    assert compiled.prediction_logits.shape == eager.prediction_logits.shape  # labelled positions only
    model(**batch(0.05, seed=1)).loss.backward()
    graphs = counter.frame_count
    for masked in (0.3, 0.9):
        model(**batch(masked, seed=2)).loss.backward()
    assert graphs == counter.frame_count == 3


def test_padding_free_batches_run_compiled_layers_eager():
    """A padding-free batch's token count changes every batch (a graph per count until the recompile limit):
    its blocks run eager, with the padded path's outputs at the real tokens."""
    from litebert.model import compile_layers

    torch.manual_seed(0)
    model = AlbertForSequenceClassification(CONFIG).eval()
    ids = torch.randint(5, CONFIG.vocab_size, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    mask[2, 4:] = 0
    padded = model(ids, mask).logits
    counter = CompileCounter()
    compile_layers(model, backend=counter)
    model.albert.padding_free = True
    torch.testing.assert_close(model(ids, mask).logits, padded, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 0


def test_a_bound_on_labels_gives_compiled_models_the_labelled_positions_alone():
    """With the data's max_predictions_per_seq (pretraining sets it), the static-shape path reads that many
    positions a row instead of every position's logits (B, T, V): one graph for any label count, eager's loss
    and gradients. A row over the bound is refused, eagerly with a one-line error, compiled by an assert."""
    from litebert.errors import DataError
    from litebert.model import forced_static_shapes

    torch.manual_seed(0)
    model = AlbertForPreTraining(CONFIG).eval()
    model.max_predictions_per_seq = 5
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    _, out = assert_trains_as_eager(model, batch(0.15), lambda m: compiled)
    assert out.prediction_logits.shape == (3, 5 + 1, CONFIG.vocab_size)  # the bound and [CLS], not all 12
    compiled(**batch(0.3, seed=1)).loss.backward()
    assert counter.frame_count == 1
    crowded = batch(0.9, seed=2)
    with pytest.raises(DataError, match="more than the data's max_predictions_per_seq \\(5\\)"):
        model(**crowded)
    with forced_static_shapes(), pytest.raises(RuntimeError, match="max_predictions_per_seq"):
        model(**crowded)
