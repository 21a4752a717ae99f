"""transformers' Trainer trains a litebert model as it trains its own: the tokenizer's features through
DataCollatorWithPadding, the same weights and data giving the same losses as transformers'
AlbertForSequenceClassification step for step, and evaluate/predict answering in its shapes. Everything is built
here (a tiny tokenizer and model; nothing downloaded)."""

from __future__ import annotations

import pytest
import torch

import litebert
from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.heads import AlbertForSequenceClassification
from litebert.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # what transformers' Trainer runs on
from litebert.interop.trainer import SaveConfig  # noqa: E402  (imports transformers)

TEXTS = ["the sea was calm and the ship sailed on", "she wrote a long letter to her sister",
         "the wind rose over the grey water", "a letter came from town that morning"] * 6
LABELS = [0, 1, 0, 1] * 6


class Examples(torch.utils.data.Dataset):
    """One example a row, encoded alone as tensors: a batch of one, (1, T), which pad reads as its row."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return len(TEXTS)

    def __getitem__(self, i: int) -> dict:
        return {**self.tokenizer(TEXTS[i], return_tensors="pt"), "labels": LABELS[i]}


def trained_losses(model, tokenizer, out) -> tuple[list[float], "transformers.trainer_utils.PredictionOutput"]:
    args = transformers.TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=8, max_steps=9, learning_rate=3e-3, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, seed=0, data_seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Examples(tokenizer),
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, trainer.predict(Examples(tokenizer))


def test_trainer_trains_a_litebert_model_as_transformers_own(tmp_path):
    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=500, input_sentence_size=20000)
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=64, num_labels=2,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    ours = AlbertForSequenceClassification(config)
    ours.save_pretrained(tmp_path / "start")
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path / "start"))
    our_losses, our_predictions = trained_losses(ours, tokenizer, tmp_path / "ours")
    their_losses, their_predictions = trained_losses(theirs, tokenizer, tmp_path / "theirs")
    assert len(our_losses) == 9 and our_losses == pytest.approx(their_losses, rel=1e-4, abs=1e-5)
    assert our_losses[-1] < our_losses[0]  # it learns
    assert our_predictions.predictions.shape == their_predictions.predictions.shape == (len(TEXTS), 2)
    torch.testing.assert_close(torch.as_tensor(our_predictions.predictions),
                               torch.as_tensor(their_predictions.predictions), atol=1e-4, rtol=1e-4)
    assert our_predictions.metrics["test_loss"] == pytest.approx(their_predictions.metrics["test_loss"], rel=1e-4)


def test_a_run_glue_shaped_script_gives_transformers_losses_with_litebert_imports(tmp_path, monkeypatch):
    """transformers' run_glue recipe: a CSV read by `datasets`, tokenized by `dataset.map(batched=True)` with
    truncation alone (padding is the collator's, per batch), DataCollatorWithPadding and Trainer. The same script
    with litebert's Auto classes in place of transformers' gives the same features and losses. It died before:
    litebert's call defaulted to tensors, and a map batch of texts of different lengths was refused."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=500, input_sentence_size=20000)
    torch.manual_seed(0)
    AlbertForSequenceClassification(AlbertConfig(
        vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, num_labels=2, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)).save_pretrained(tmp_path / "start")
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f'"{t}",{y}\n' for t, y in zip(TEXTS, LABELS)),
                                        encoding="utf-8")
    raw = datasets.load_dataset("csv", data_files={"train": str(tmp_path / "train.csv")},
                                cache_dir=str(tmp_path / "cache"))["train"]
    runs = {}
    for library in (litebert, transformers):  # the script, written once
        tokenizer = library.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
        model = library.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "start"))
        train = raw.map(lambda batch: tokenizer(batch["text"], truncation=True, max_length=32), batched=True,
                        remove_columns=["text"])
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / library.__name__), per_device_train_batch_size=8, max_steps=6,
            learning_rate=3e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=0,
            data_seed=0, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                       data_collator=transformers.DataCollatorWithPadding(tokenizer))
        trainer.train()
        runs[library.__name__] = train["input_ids"], [e["loss"] for e in trainer.state.log_history if "loss" in e]
    (our_ids, our_losses), (their_ids, their_losses) = runs["litebert"], runs["transformers"]
    assert our_ids == their_ids and len({len(ids) for ids in our_ids}) > 1  # unpadded rows, as transformers'
    assert len(our_losses) == 6 and our_losses == pytest.approx(their_losses, rel=1e-4, abs=1e-5)


def test_pad_takes_an_example_encoded_alone_and_refuses_a_feature_of_several_rows(tmp_path):
    """tokenizer(text, return_tensors="pt") is a batch of one, (1, T); transformers' collators expect the row:
    pad reads it so, and a feature holding several examples is refused by name instead of a TypeError from deep
    inside."""
    from litebert.errors import ConfigError

    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=500, input_sentence_size=20000)
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    features = [tokenizer(TEXTS[0], return_tensors="pt"), tokenizer(TEXTS[1])]
    batch = tokenizer.pad(features, return_tensors="pt")
    expected = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], expected["input_ids"])
    assert torch.equal(batch["attention_mask"], expected["attention_mask"])
    with pytest.raises(ConfigError, match="a feature's input_ids holds 2 rows"):
        tokenizer.pad([tokenizer(TEXTS[:2], padding=True, return_tensors="pt"), tokenizer(TEXTS[2])])


def test_trainer_pretrains_a_litebert_mlm_as_transformers_own_and_its_checkpoints_load(tmp_path):
    """transformers' run_mlm recipe (DataCollatorForLanguageModeling, Trainer, a checkpoint every few steps) on
    AlbertForMaskedLM: the same masked-LM losses as transformers' model from the same weights and seed. Its first
    checkpoint died before: Trainer saves a model that is not its PreTrainedModel with safetensors' save_file,
    which refuses the tied decoder's shared memory (litebert's state_dict now gives the duplicate as a copy)."""
    from litebert.model import AlbertForMaskedLM

    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=500, input_sentence_size=20000)
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours = AlbertForMaskedLM(config)
    ours.save_pretrained(tmp_path / "start")
    theirs = transformers.AlbertForMaskedLM.from_pretrained(str(tmp_path / "start"))
    texts = [{"input_ids": tokenizer(t)["input_ids"]} for t in TEXTS]
    runs = {}
    for name, model in (("ours", ours), ("theirs", theirs)):
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / name), per_device_train_batch_size=8, max_steps=6, learning_rate=3e-3,
            logging_steps=1, save_strategy="steps", save_steps=3, report_to=[], use_cpu=True, seed=0, data_seed=0,
            disable_tqdm=True)
        callbacks = [SaveConfig()] if name == "ours" else []  # checkpoints that are model directories
        trainer = transformers.Trainer(model=model, args=args, train_dataset=texts, callbacks=callbacks,
                                       data_collator=transformers.DataCollatorForLanguageModeling(tokenizer))
        trainer.train()
        runs[name] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(runs["ours"]) == 6 and runs["ours"] == pytest.approx(runs["theirs"], rel=1e-4, abs=1e-5)
    checkpoint = tmp_path / "ours" / "checkpoint-6"  # with SaveConfig: a model directory for either library
    bare = tmp_path / "bare"  # without it, the weights alone
    bare.mkdir()
    (bare / "model.safetensors").write_bytes((checkpoint / "model.safetensors").read_bytes())
    with pytest.raises(FileNotFoundError, match="Trainer checkpoints a litebert model: pass .*config=model.config"):
        AlbertForMaskedLM.from_pretrained(bare)  # says how to load it
    assert AlbertForMaskedLM.from_pretrained(bare, config=config).state_dict().keys() == ours.state_dict().keys()
    saved = litebert.AutoModelForMaskedLM.from_pretrained(checkpoint).state_dict()
    assert all(torch.equal(saved[k], v) for k, v in ours.state_dict().items())
    read_there = transformers.AutoModelForMaskedLM.from_pretrained(str(checkpoint)).state_dict()
    assert torch.equal(read_there["predictions.decoder.weight"], ours.predictions.decoder.weight.detach())
    from litebert.errors import ConfigError
    with pytest.raises(ConfigError, match="SaveConfig writes a litebert model's config.json"):
        transformers.Trainer(model=theirs, args=args, train_dataset=texts, callbacks=[SaveConfig()],
                             data_collator=transformers.DataCollatorForLanguageModeling(tokenizer)).train()
    assert ours.predictions.decoder.weight is ours.albert.embeddings.word_embeddings.weight  # still tied


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn"])
def test_a_state_dict_holds_no_shared_memory_and_the_parameters_stay_shared(sharing, tmp_path):
    """What safetensors' save_file (and Trainer's checkpoints) need of any litebert model: the tied decoder and
    partial sharing's sub-layer, listed under several keys, come as copies; the model's parameters stay one."""
    from safetensors.torch import load_file, save_file

    from litebert.model import AlbertForPreTraining

    layers = 3
    config = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=layers,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16, sharing=sharing,
                          num_hidden_groups=1 if sharing == "all" else layers)
    model = AlbertForPreTraining(config)
    state = model.state_dict()
    save_file(state, str(tmp_path / "w.safetensors"))  # refused shared memory before
    assert AlbertForPreTraining(config).load_state_dict(load_file(str(tmp_path / "w.safetensors"))) is not None
    assert model.predictions.decoder.weight is model.albert.embeddings.word_embeddings.weight
    assert len({p.untyped_storage().data_ptr() for p in model.state_dict(keep_vars=True).values()}) < len(state)


def test_state_dict_takes_an_int8_model_and_torchs_positional_form():
    """Dynamically quantized Linears hold a dtype and packed parameters in the state dict (not tensors), and
    torch's deprecated positional (destination, prefix, keep_vars) still means what it says."""
    from litebert.interop.quantize import quantize_model
    from litebert.model import AlbertForMaskedLM

    config = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = AlbertForMaskedLM(config)
    int8 = quantize_model(model).state_dict()
    assert any(not isinstance(v, torch.Tensor) for v in int8.values())
    kept = model.state_dict(None, "p.", True)
    assert all(k.startswith("p.") for k in kept) and kept["p.predictions.decoder.weight"] is \
        model.albert.embeddings.word_embeddings.weight


@pytest.mark.parametrize("targets", [["query", "value"], ["query", "key", "value", "dense", "ffn", "ffn_output"]])
def test_peft_lora_adapts_a_litebert_model_as_transformers_own(targets, tmp_path):
    """PEFT's LoRA on query and value (its usual targets for BERT-like models) changed nothing: the attention ran
    Q, K and V as one GEMM of their packed weights and left the wrapped layers' adapters out, without a word.
    Wrapped projections now run as themselves: the same logits as transformers' model with the same adapters,
    and gradients that reach them."""
    peft = pytest.importorskip("peft")

    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16, num_labels=2,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    base = AlbertForSequenceClassification(config)
    base.save_pretrained(tmp_path)
    lora = peft.LoraConfig(target_modules=targets, r=4, lora_alpha=8, init_lora_weights=False)
    ours = peft.get_peft_model(AlbertForSequenceClassification.from_pretrained(tmp_path), lora).eval()
    theirs = peft.get_peft_model(transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path)),
                                 lora).eval()
    adapters = {k: v for k, v in ours.state_dict().items() if "lora_" in k}
    assert adapters and set(adapters) <= set(theirs.state_dict())
    theirs.load_state_dict(adapters, strict=False)  # the same adapter weights on both
    ids = torch.randint(5, 100, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids).index_fill(1, torch.tensor([7, 8]), 0)
    logits = ours(input_ids=ids, attention_mask=mask).logits
    with torch.no_grad():
        plain = base.eval()(ids, attention_mask=mask).logits
    assert not torch.allclose(logits, plain)  # the adapters count
    torch.testing.assert_close(logits, theirs(input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-4)
    encoder = ours.get_base_model().albert
    encoder.padding_free = True  # the real tokens alone: the other path through the attention
    torch.testing.assert_close(ours(input_ids=ids, attention_mask=mask).logits, logits, atol=1e-5, rtol=1e-4)
    encoder.padding_free = False
    tokenizer_dir = tmp_path / "tok"  # a pipeline takes the PEFT model as it is, adapters included
    train_tokenizer(None, str(tokenizer_dir), vocab_size=100, input_sentence_size=20000)
    tokenizer = Tokenizer.from_pretrained(str(tokenizer_dir))
    text = "the sea was calm"  # within the tiny model's 16 positions
    scores = litebert.pipeline("text-classification", model=ours, tokenizer=tokenizer, top_k=None)(text)
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        expected = ours(input_ids=encoded["input_ids"]).logits.softmax(-1)[0]
    assert sorted(s["score"] for s in scores) == pytest.approx(sorted(expected.tolist()), abs=1e-5)
    logits.sum().backward()
    grads = [p.grad for name, p in ours.named_parameters() if "lora_" in name and ".query." in name]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_trainer_resumes_a_litebert_model_from_its_checkpoint_bit_exactly(tmp_path):
    """resume_from_checkpoint reads the weights Trainer saved (a litebert model's state dict) with its optimizer,
    scheduler and RNG states: the resumed run ends on the uninterrupted run's weights exactly, dropout on."""
    train_tokenizer(None, str(tmp_path / "tok"), vocab_size=500, input_sentence_size=20000)
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    examples = list(Examples(tokenizer))
    config = AlbertConfig(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=64, num_labels=2)

    def run(out, resume=None):
        torch.manual_seed(0)
        model = AlbertForSequenceClassification(config)
        args = transformers.TrainingArguments(
            output_dir=str(out), per_device_train_batch_size=4, max_steps=6, learning_rate=3e-3,
            save_strategy="steps", save_steps=3, report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
        transformers.Trainer(model=model, args=args, train_dataset=examples,
                             data_collator=transformers.DataCollatorWithPadding(tokenizer)
                             ).train(resume_from_checkpoint=resume)
        return model.state_dict()

    whole = run(tmp_path / "whole")
    resumed = run(tmp_path / "resumed", resume=str(tmp_path / "whole" / "checkpoint-3"))
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)
