"""The padding-free encoder (AlbertModel.padding_free) computes what the padded one computes, on the real tokens.

On the CPU in fp32 its attention re-pads for SDPA, so every head's outputs at real positions, its loss and every
parameter's gradient equal the padded path's to fp32 rounding; on CUDA in bf16 it runs varlen_attn (flash) and
agrees within bf16 rounding. Batches without padding, and requests that need every position (hidden states,
attentions, outputs at padding), keep the padded path.
"""

import contextlib
import json
import shutil
import subprocess
import sys

import pytest
import torch
from paths import SHARED_DATA
from test_finetune import tiny_model_dir

import litebert.model as model_module
from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from litebert.model import AlbertForPreTraining, encoder_of, packed_positions
from litebert.tasks.features import Feature, collate
from litebert.training.metrics_log import read_metrics

TIGHT = dict(atol=1e-5, rtol=1e-5)
LENGTHS = [40, 3, 17, 29]  # very different lengths: most of the padded batch is padding


def tiny(**overrides) -> AlbertConfig:
    return AlbertConfig(**{**dict(vocab_size=97, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                                  classifier_dropout_prob=0.0), **overrides})


def padded_batch(cls, config: AlbertConfig, lengths=LENGTHS, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    if cls is AlbertForMultipleChoice:  # two options per question, each with its own length
        mask = torch.stack([mask, mask.flip(0)], 1)  # (B, 2, T)
    ids = torch.randint(5, config.vocab_size, mask.shape, generator=g).masked_fill(mask == 0, 0)
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=(torch.arange(T) >= 2).long().expand(mask.shape))
    if cls is AlbertForSequenceClassification:
        batch["labels"] = torch.randint(0, 3, (B,), generator=g)
    elif cls is AlbertForMultipleChoice:
        batch["labels"] = torch.randint(0, 2, (B,), generator=g)
    elif cls is AlbertForTokenClassification:
        batch["labels"] = torch.randint(0, 3, (B, T), generator=g).masked_fill(mask == 0, -100)
    elif cls is AlbertForPreTraining:
        batch["labels"] = torch.where((torch.rand(B, T, generator=g) < 0.3) & (mask == 1), ids, -100)
        batch["sentence_order_label"] = torch.randint(0, 2, (B,), generator=g)
    return batch


def twins(cls, config: AlbertConfig):
    """(padded, padding-free) models with the same weights."""
    torch.manual_seed(0)
    padded = cls(config.replace(num_labels=2 if cls is AlbertForQuestionAnswering else 3))
    free = cls(padded.config)
    free.load_state_dict(padded.state_dict())
    encoder_of(free).padding_free = True
    return padded, free


def run(model, batch: dict):
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    loss = out.loss if out.loss is not None else sum(t.float().sum() for t in out.to_tuple())
    loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def unpad_calls(monkeypatch):
    """How many forwards took the padding-free path (unpad decides: None sends a batch to the padded path)."""
    calls = []
    real = model_module.unpad

    def counted(*args):
        unpadded = real(*args)
        if unpadded is not None:
            calls.append(1)
        return unpadded
    monkeypatch.setattr(model_module, "unpad", counted)
    return calls


@pytest.mark.parametrize("cls", [AlbertForSequenceClassification, AlbertForMultipleChoice,
                                 AlbertForTokenClassification])
@pytest.mark.parametrize("layout", [dict(), dict(num_hidden_groups=3, sharing="attention"),
                                    dict(inner_group_num=2), "checkpointing"])
def test_same_outputs_loss_and_gradients_as_the_padded_path(cls, layout, unpad_calls):
    config = tiny(**(layout if isinstance(layout, dict) else {}))
    padded, free = twins(cls, config)
    if layout == "checkpointing":
        free.albert.encoder.gradient_checkpointing = True
    batch = padded_batch(cls, config)
    (a, grads_a), (b, grads_b) = run(padded, batch), run(free, batch)
    assert unpad_calls == [1]
    real = batch["attention_mask"] == 1
    if cls is AlbertForTokenClassification:  # real positions only: the padding-free states are zero at padding
        torch.testing.assert_close(b.logits[real], a.logits[real], **TIGHT)
    else:
        torch.testing.assert_close(b.logits, a.logits, **TIGHT)
    torch.testing.assert_close(b.loss, a.loss, **TIGHT)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], **TIGHT, msg=name)


def test_question_answering_logits_equal_at_real_positions_and_padding_reads_zeros(unpad_calls):
    config = tiny()
    padded, free = twins(AlbertForQuestionAnswering, config)
    batch = padded_batch(AlbertForQuestionAnswering, config)
    with torch.no_grad():
        a, b = padded(**batch), free(**batch)
        h = free.albert(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"] == 1
    for name in ("start_logits", "end_logits"):
        torch.testing.assert_close(getattr(b, name)[real], getattr(a, name)[real], **TIGHT)
    assert h.shape == (len(LENGTHS), max(LENGTHS), config.hidden_size) and not h[~real].any()
    assert len(unpad_calls) == 2


def test_unpadded_batches_and_requests_for_every_position_take_the_padded_path(unpad_calls):
    config = tiny()
    padded, free = twins(AlbertForSequenceClassification, config)
    full = padded_batch(AlbertForSequenceClassification, config, lengths=[12, 12, 12])
    torch.testing.assert_close(free(**full).logits, padded(**full).logits, atol=0, rtol=0)
    batch = padded_batch(AlbertForSequenceClassification, config)
    a = padded(**batch, output_hidden_states=True, output_attentions=True)
    b = free(**batch, output_hidden_states=True, output_attentions=True)
    for x, y in zip(a.hidden_states + a.attentions, b.hidden_states + b.attentions, strict=True):
        torch.testing.assert_close(y, x, atol=0, rtol=0)
    assert unpad_calls == []


@pytest.mark.parametrize("static", [False, True])
def test_pretraining_runs_padding_free_with_short_rows_and_equals_the_padded_path(static, unpad_calls):
    """`pretrain --padding-free`: the last layer runs at the loss positions, and those must be real tokens. A row
    shorter than the loss width (3 tokens against 9 positions here) used to fill it with padding and send every
    batch down the padded path; its fillers now repeat [CLS]. Eager, and as a capture runs it (static shapes, the
    data's bound on labels, positions packed on the host), loss, logits and gradients equal the padded path's."""
    config = tiny()
    padded, free = twins(AlbertForPreTraining, config)
    batch = padded_batch(AlbertForPreTraining, config)
    assert (batch["labels"] != -100).sum(1).max() + 1 > min(LENGTHS)
    if static:
        free.albert.padding_free = False  # the packed positions alone turn it on
        for m in (padded, free):
            m.max_predictions_per_seq = int((batch["labels"] != -100).sum(1).max())
    with model_module.forced_static_shapes() if static else contextlib.nullcontext():
        (a, grads_a) = run(padded, batch)
        (b, grads_b) = run(free, {**batch, "packed_positions": packed_positions(batch["attention_mask"])}
                           if static else batch)
    assert unpad_calls == ([] if static else [1])
    for x, y in zip(a.to_tuple(), b.to_tuple(), strict=True):
        torch.testing.assert_close(y, x, **TIGHT)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], **TIGHT, msg=name)


def packed_twins(cls, config: AlbertConfig, lengths, static_length: int, seed: int):
    """(eager padding-free model, the same weights with padding-free off, a batch from `collate(static_length=...)`
    with packed_positions): the positions alone turn the second one's padding-free encoder on."""
    eager, packed = twins(cls, config)
    encoder_of(eager).padding_free, encoder_of(packed).padding_free = True, False
    g = torch.Generator().manual_seed(seed)
    features = [Feature(torch.randint(5, config.vocab_size, (n,), generator=g).tolist(), [0] * 3 + [1] * (n - 3),
                        label=(torch.randint(0, 3, (n,), generator=g).tolist() if cls is AlbertForTokenClassification
                               else 1)) for n in lengths]
    batch = collate(features, pad_id=0, static_length=static_length)
    if cls is AlbertForQuestionAnswering:  # logits alone: its loss reads padding, and so keeps the padded path
        del batch["labels"]
    return eager, packed, batch


@pytest.mark.parametrize("cls", [AlbertForSequenceClassification, AlbertForTokenClassification,
                                 AlbertForQuestionAnswering])
@pytest.mark.parametrize("lengths", [LENGTHS, [40, 24]])  # 89 real tokens in 4 x 64 slots; 64, a multiple of T
def test_packed_positions_from_the_collate_run_padding_free_without_reading_the_device(cls, lengths, unpad_calls):
    """`collate(static_length=T)` pads to T and lists the real tokens, their count rounded up past the next
    multiple of T (spare rows: -1), the shapes a CUDA graph keeps. From those positions the encoder runs
    padding-free on the static-shape path a capture takes, and computes what the eager padding-free path
    computes (itself the padded path's results, above), spare rows leaving no trace in the gradients."""
    eager, packed, batch = packed_twins(cls, tiny(), lengths, static_length=64, seed=1)
    positions, mask = batch["packed_positions"], batch["attention_mask"]
    n = sum(lengths)
    assert mask.shape == (len(lengths), 64) and positions.numel() == (n // 64 + 1) * 64
    assert positions[:n].tolist() == mask.flatten().nonzero().squeeze(1).tolist() and (positions[n:] == -1).all()
    (a, grads_a) = run(eager, {k: v for k, v in batch.items() if k != "packed_positions"})
    assert unpad_calls == [1]
    with model_module.forced_static_shapes():
        (b, grads_b) = run(packed, batch)
    assert unpad_calls == [1]  # the positions came from the host: nothing read back
    for x, y in zip(a.to_tuple(), b.to_tuple(), strict=True):
        torch.testing.assert_close(y, x, **TIGHT)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], **TIGHT, msg=name)


def test_finetune_cli_records_padding_free_and_learns_as_the_padded_run(tmp_path):
    model = tiny_model_dir(tmp_path)

    def finetune(flag: str, *extra: str) -> int:
        return litebert_main(["finetune", "--model", str(model), "--task", "novel_authorship", "--data-dir",
                              str(SHARED_DATA / "tasks" / "novel_authorship"), "--max-train-examples", "64",
                              "--max-eval-examples", "16", "--max-length", "48", "--batch-size", "16", "--max-steps",
                              "4", "--log-every", "1", "--lr", "1e-3", "--out-dir", str(tmp_path / "padding-free"),
                              "--no-progress", flag, *extra])

    learned = {}
    for flag in ("--padding-free", "--no-padding-free"):
        assert finetune(flag, "--overwrite") == 0
        out = tmp_path / "padding-free"
        assert f"padding_free = {str(flag == '--padding-free').lower()}" in (out / "train_config.toml").read_text()
        losses = [r["loss"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r]
        learned[flag] = [*losses, json.loads((out / "summary.json").read_text())["best"]["accuracy"]]
        shutil.rmtree(out)
    assert len(learned["--padding-free"]) == 5
    assert learned["--padding-free"] == pytest.approx(learned["--no-padding-free"], abs=1e-4)
    # Padding-free changes how a run computes, not what it learns: a --resume may switch it.
    assert finetune("--padding-free") == 0 and finetune("--no-padding-free", "--resume") == 0


def test_reading_a_model_leaves_torch_dynamo_unimported():
    """varlen_attn is imported at its first use on a GPU: its import loads torch._dynamo (~3 s), which every
    process that reads a model would pay (`litebert finetune --help`: 7.2 -> 3.1 s on a 2-core Zen 3)."""
    code = ("import sys, torch, litebert.model as m; m.AlbertModel(m.AlbertConfig(vocab_size=50, embedding_size=8, "
            "hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)); "
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


@pytest.mark.gpu
def test_cuda_bf16_runs_varlen_attention_and_agrees_with_the_padded_path(monkeypatch):
    """varlen_attn (flash) is what runs on CUDA in bf16, and its result agrees with padded SDPA to bf16 rounding."""
    real = model_module.varlen_attention()
    assert real is not None, "torch.nn.attention.varlen is missing from this torch"
    calls = []
    monkeypatch.setattr(model_module, "varlen_attention", lambda: lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    config = tiny(hidden_size=128, num_attention_heads=2, intermediate_size=256, max_position_embeddings=128)
    padded, free = (m.cuda() for m in twins(AlbertForSequenceClassification, config))
    lengths = [100, 7, 64, 33]
    batch = {k: v.cuda() for k, v in padded_batch(AlbertForSequenceClassification, config, lengths).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (a, grads_a), (b, grads_b) = run(padded, batch), run(free, batch)
    # every layer on the N real tokens; the last with the [CLS] queries alone
    assert calls[:config.num_hidden_layers] == [(sum(lengths), 2, 64)] * (config.num_hidden_layers - 1) + [(4, 2, 64)]
    torch.testing.assert_close(b.logits.float(), a.logits.float(), atol=3e-2, rtol=3e-2)
    for name in grads_a:
        scale = grads_a[name].abs().max().item() + 1e-6
        assert (grads_b[name] - grads_a[name]).abs().max().item() <= 0.05 * scale, name


@pytest.mark.gpu
@pytest.mark.parametrize("cls", [AlbertForSequenceClassification, AlbertForTokenClassification,
                                 AlbertForQuestionAnswering])
def test_cuda_bf16_packed_positions_agree_with_the_padding_free_path_in_memory_full_of_nan(cls):
    """On CUDA the packed path runs varlen_attn with spare rows: their keys and values must leave no trace,
    even where flash leaves gradients unwritten (the [CLS]-only last layer). The allocator's cache is filled
    with NaN first, so that anything read uninitialised shows."""
    config = tiny(hidden_size=128, num_attention_heads=2, intermediate_size=256, max_position_embeddings=128)
    eager, packed, batch = packed_twins(cls, config, (100, 7, 64, 33), static_length=128, seed=2)
    eager, packed, batch = eager.cuda(), packed.cuda(), {k: v.cuda() for k, v in batch.items()}
    torch.full((64 << 20,), float("nan"), device="cuda")  # freed at once: its block stays in the cache
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (a, grads_a) = run(eager, {k: v for k, v in batch.items() if k != "packed_positions"})
        torch.full((64 << 20,), float("nan"), device="cuda")
        with model_module.forced_static_shapes():
            (b, grads_b) = run(packed, batch)
    for x, y in zip(a.to_tuple(), b.to_tuple(), strict=True):
        torch.testing.assert_close(y.float(), x.float(), atol=3e-2, rtol=3e-2)
    for name in grads_a:
        assert torch.isfinite(grads_b[name]).all(), name
        scale = grads_a[name].abs().max().item() + 1e-6
        assert (grads_b[name] - grads_a[name]).abs().max().item() <= 0.05 * scale, name


def test_finetune_with_compile_trains_on_padded_batches(tmp_path, monkeypatch, caplog):
    """--compile compiles the transformer blocks, whose shapes a padding-free batch would change every step: the
    run pads instead, and says so (the training itself is stubbed: only the model it is handed is read)."""
    import litebert.finetune as finetune_module

    handed = []

    def stop_at_train(model, *args, **kwargs):
        handed.append(encoder_of(model).padding_free)
        raise KeyboardInterrupt
    monkeypatch.setattr(finetune_module, "train", stop_at_train)
    for extra in ([], ["--compile"]):
        with caplog.at_level("INFO", logger="litebert"):
            assert litebert_main(["finetune", "--model", str(tiny_model_dir(tmp_path)), "--task", "novel_authorship",
                           "--data-dir", str(SHARED_DATA / "tasks" / "novel_authorship"), "--max-train-examples",
                           "32", "--max-eval-examples", "8", "--max-length", "32", "--out-dir",
                           str(tmp_path / f"run{len(extra)}"), "--no-progress", *extra]) != 0  # interrupted
    assert handed == [True, False]
    assert "--compile: padded batches" in caplog.text


@pytest.mark.parametrize("cls", [AlbertForQuestionAnswering, AlbertForTokenClassification])
def test_a_loss_that_reads_padding_keeps_the_padded_path_and_its_loss(cls, unpad_calls):
    """The padding-free states at padding are zeros, the padded path's (and transformers') are not. QA's loss is
    a softmax over every position, padding included, and a token label on padding is read as transformers reads
    it: both used to run padding-free and train on another loss (QA 2.347 against 2.360 on a tiny model, with
    every answer on a real token). Without those reads, the heads still run padding-free."""
    config = tiny()
    padded, free = twins(cls, config)
    batch = padded_batch(cls, config)
    if cls is AlbertForQuestionAnswering:
        batch.update(start_positions=torch.tensor([1, 0, 5, 9]), end_positions=torch.tensor([3, 2, 8, 20]))
    else:
        batch["labels"] = torch.randint(0, 3, batch["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    (a, grads_a), (b, grads_b) = run(padded, batch), run(free, batch)
    torch.testing.assert_close(b.loss, a.loss, **TIGHT)
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], **TIGHT, msg=name)
    assert unpad_calls == []
    unlabelled = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    if cls is AlbertForTokenClassification:  # labels on real tokens alone: padding-free
        unlabelled["labels"] = batch["labels"].masked_fill(batch["attention_mask"] == 0, -100)
    free(**unlabelled)
    assert unpad_calls == [1]


def test_finetune_cuda_graphs_with_compiled_blocks_collates_padded_batches(tmp_path, monkeypatch):
    """`--cuda-graphs --compile` turns padding-free off for the compiled blocks' shapes, but the collate still added
    packed_positions, which run the padding-free encoder (and every compiled block eagerly) by themselves. Without
    --compile the batches are packed. The train step is stubbed (a CUDA graph needs a GPU)."""
    import litebert.finetune as finetune_module

    handed = []

    def stop_at_train(model, data, *args, **kwargs):
        handed.append((encoder_of(model).padding_free, "packed_positions" in data.collate([0, 1], 0)))
        raise KeyboardInterrupt
    monkeypatch.setattr(finetune_module, "train", stop_at_train)
    model = tiny_model_dir(tmp_path)
    for extra in ([], ["--compile"]):
        assert litebert_main(["finetune", "--model", str(model), "--task", "novel_authorship", "--data-dir",
                              str(SHARED_DATA / "tasks" / "novel_authorship"), "--max-train-examples", "32",
                              "--max-eval-examples", "8", "--max-length", "32", "--device", "cpu", "--cuda-graphs",
                              "--out-dir", str(tmp_path / f"run{len(extra)}"), "--no-progress", *extra]) != 0
    assert handed == [(True, True), (False, False)]


def test_cuda_graphs_collate_leaves_question_answering_batches_at_their_own_length():
    """QA trains on the padded path: its loss is a softmax over every position, padding included. `finetune
    --cuda-graphs` (padding-free, the default) collated QA batches out to --max-length for packed positions the
    head then drops, so the extra padding joined the softmax: another loss than the same run without --cuda-graphs
    or with --no-padding-free (4.15 against 3.39 here)."""
    from litebert.tasks.squad import QAFeature

    torch.manual_seed(0)
    model = AlbertForQuestionAnswering(tiny(num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    encoder_of(model).padding_free = True
    g = torch.Generator().manual_seed(0)
    features = [QAFeature(torch.randint(5, 97, (n,), generator=g).tolist(), [0] * n, 2, 4, i, [None] * n, [True] * n)
                for i, n in enumerate([30, 12])]
    own, static = collate(features, pad_id=0), collate(features, pad_id=0, static_length=64)
    assert static.keys() == own.keys() and all(torch.equal(static[k], own[k]) for k in own)
    with torch.no_grad():
        torch.testing.assert_close(model(**static).loss, model(**own).loss, atol=0, rtol=0)
