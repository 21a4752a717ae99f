"""transformers' Auto names in litebert: a script whose imports change from `transformers` to `litebert` runs
and computes the same thing, on the same tiny checkpoints (built here, nothing downloaded)."""

from __future__ import annotations

import pytest
import torch

import litebert
from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import ConfigError
from litebert.heads import MODEL_CLASSES

transformers = pytest.importorskip("transformers")

AUTO_NAMES = {"AutoModel": "AlbertModel", "AutoModelForPreTraining": "AlbertForPreTraining",
              "AutoModelForMaskedLM": "AlbertForMaskedLM",
              "AutoModelForSequenceClassification": "AlbertForSequenceClassification",
              "AutoModelForTokenClassification": "AlbertForTokenClassification",
              "AutoModelForQuestionAnswering": "AlbertForQuestionAnswering",
              "AutoModelForMultipleChoice": "AlbertForMultipleChoice"}

SCRIPT = """
from {library} import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
import torch

tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForSequenceClassification.from_pretrained(path).eval()
batch = tokenizer(["the sea was calm", "she wrote a letter to her sister"], padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(**batch).logits
labels = AutoConfig.from_pretrained(path).id2label
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny pretraining checkpoint (every head loads from it) with its tokenizer."""
    path = tmp_path_factory.mktemp("albert")
    train_tokenizer(None, str(path), vocab_size=500, input_sentence_size=20000)
    torch.manual_seed(0)
    MODEL_CLASSES["AlbertForPreTraining"](AlbertConfig(
        vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, hidden_act="gelu_new")).save_pretrained(path)
    return path


def test_a_transformers_script_runs_on_litebert_by_its_imports_alone(checkpoint, tmp_path):
    torch.manual_seed(0)
    classifier = MODEL_CLASSES["AlbertForSequenceClassification"].from_pretrained(
        checkpoint, id2label={0: "austen", 1: "dickens", 2: "eliot"})
    classifier.save_pretrained(tmp_path)
    litebert.Tokenizer.from_pretrained(str(checkpoint)).save_pretrained(str(tmp_path))
    results = {}
    for library in ("transformers", "litebert"):
        scope = {"path": str(tmp_path)}
        exec(SCRIPT.format(library=library), scope)
        results[library] = scope
    ours, theirs = results["litebert"], results["transformers"]
    assert ours["labels"] == theirs["labels"] == {0: "austen", 1: "dickens", 2: "eliot"}
    assert torch.equal(ours["batch"]["input_ids"], theirs["batch"]["input_ids"])
    torch.testing.assert_close(ours["logits"], theirs["logits"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("auto, target", sorted(AUTO_NAMES.items()))
def test_each_auto_name_loads_the_class_transformers_picks_with_its_outputs(auto, target, checkpoint, tmp_path):
    torch.manual_seed(0)
    head = MODEL_CLASSES[target].from_pretrained(checkpoint)
    head.save_pretrained(tmp_path)  # the head's checkpoint: each Auto name reads it as transformers' does
    ours = getattr(litebert, auto).from_pretrained(tmp_path).eval()
    theirs = getattr(transformers, auto).from_pretrained(str(tmp_path)).eval()
    assert type(ours).__name__ == type(theirs).__name__ == target
    ids = torch.randint(5, 500, (2, 3, 7) if target == "AlbertForMultipleChoice" else (2, 7),
                        generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids)[0], theirs(ids)[0], atol=1e-5, rtol=1e-4)
    fresh = getattr(litebert, auto).from_config(theirs.config)  # transformers' config is read too
    assert type(fresh).__name__ == target and fresh.config.hidden_size == 32


def test_configs_and_tokenizers_by_their_auto_names_and_another_architecture_refused(checkpoint, tmp_path):
    ours, theirs = litebert.AutoConfig.from_pretrained(checkpoint), transformers.AutoConfig.from_pretrained(str(checkpoint))
    assert (ours.hidden_size, ours.embedding_size, ours.model_type) == (theirs.hidden_size, theirs.embedding_size,
                                                                        theirs.model_type)
    assert litebert.AutoConfig.from_pretrained(checkpoint, num_labels=5).num_labels == 5
    text = "Anne Elliot walked along the shore at Lyme."
    assert litebert.AutoTokenizer.from_pretrained(checkpoint)(text, return_tensors=None)["input_ids"] == \
        transformers.AutoTokenizer.from_pretrained(str(checkpoint))(text)["input_ids"]
    assert litebert.AlbertTokenizerFast is litebert.AlbertTokenizer is litebert.Tokenizer
    transformers.BertModel(transformers.BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=32)).save_pretrained(
        str(tmp_path / "bert"))
    with pytest.raises(ConfigError, match="model_type is 'bert', not 'albert'"):
        litebert.AutoModel.from_pretrained(tmp_path / "bert")
    with pytest.raises(TypeError, match="from_pretrained"):
        litebert.AutoModel()
