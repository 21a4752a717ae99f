"""Adapting a pretrained model: further pretraining on a new corpus (MLM alone, or MLM + SOP with a fresh SOP head
when the checkpoint has none), and Korean through the whole path: tokenizer, prepared data, pretraining, further
pretraining, transformers parity and sentence embeddings."""

import importlib.util
import json
import logging
import os

import numpy as np
import pytest
import torch
from paths import SHARED_DATA

from litebert.corpus.dataset import PretrainDataset
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.embed import embed
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel
from litebert.pretrain import PretrainConfig, format_summary, pretrain
from litebert.tokenizer import Tokenizer
from litebert.training.train_config import TrainConfig

DATA = str(SHARED_DATA)
KO = f"{DATA}/pretrain/ko_small.txt"
pytestmark = pytest.mark.skipif(not os.path.isdir(DATA), reason="shared data not available")
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32)


def run(data, out, steps, init_from=None, objective="auto", lr=2e-3):
    """A test-sized pretraining run; returns its summary."""
    return pretrain(PretrainConfig(data=str(data), init_from=init_from and str(init_from), objective=objective,
                                   held_out=64),
                    TrainConfig(optimizer="adamw", lr=lr, batch_size=16, max_steps=steps, out_dir=str(out),
                                progress=False, log_every=5), None if init_from else TINY)


@pytest.fixture(scope="module")
def english(tmp_path_factory):
    """A tiny model pretrained (MLM + SOP) on Persuasion, and the Jargon File prepared with its tokenizer."""
    root = tmp_path_factory.mktemp("adapt")
    train_tokenizer(None, str(root / "tok"), vocab_size=1000, input_sentence_size=20000)
    prepare(None, str(root / "persuasion"), str(root / "tok"), max_seq_length=32, num_workers=1, progress=False)
    with open(f"{DATA}/corpus/en/jargon_file.jsonl", encoding="utf-8") as f:
        (root / "jargon.jsonl").write_text("".join(line for _, line in zip(range(120), f)))
    prepare([str(root / "jargon.jsonl")], str(root / "jargon"), str(root / "tok"), max_seq_length=32,
            num_workers=1, progress=False)
    summary = run(root / "persuasion", root / "start", 40)
    return root, summary["checkpoint"]


@needs_hf
def test_further_pretraining_lowers_held_out_loss_on_the_new_corpus(english):
    import transformers

    root, start = english
    summary = run(root / "jargon", root / "further", 40, init_from=start, objective="mlm")
    # "untrained" is the starting model on the new corpus's held-out part, before any further step.
    assert summary["objective"] == "mlm"
    assert summary["final"]["mlm_loss"] < summary["untrained"]["mlm_loss"] - 0.2, summary
    assert "at start" in format_summary(summary) and "untrained" not in format_summary(summary)
    assert (root / "further" / "metrics.png").exists() and (root / "further" / "summary.json").exists()
    checkpoint = summary["checkpoint"]
    assert Tokenizer.from_pretrained(checkpoint).sha256 == Tokenizer.from_pretrained(start).sha256
    ours = AlbertForPreTraining.from_pretrained(checkpoint).eval()
    theirs = transformers.AlbertForPreTraining.from_pretrained(checkpoint).eval()
    ids = torch.randint(5, 1000, (2, 24))
    with torch.no_grad():
        a, b = ours(ids), theirs(ids)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, atol=1e-5, rtol=0)


def test_mlm_checkpoint_gets_a_fresh_sop_head_and_the_right_tokenizer(english, tmp_path, caplog):
    root, start = english
    mlm_dir = tmp_path / "mlm"
    AlbertForMaskedLM.from_pretrained(start).save_pretrained(mlm_dir)  # no pooler, no SOP head
    Tokenizer.from_pretrained(start).save_pretrained(str(mlm_dir))
    with caplog.at_level(logging.INFO, logger="litebert"):
        summary = run(root / "jargon", tmp_path / "sop", 2, init_from=mlm_dir)
    assert summary["objective"] == "sop" and "sop_acc" in summary["final"]
    fresh = [r.getMessage() for r in caplog.records if "initialised fresh" in r.getMessage()]
    assert fresh and "sop_classifier.classifier" in fresh[0] and "albert.pooler" in fresh[0]
    # Data made with another tokenizer is refused: further pretraining uses the checkpoint's own.
    train_tokenizer(None, str(tmp_path / "other"), vocab_size=900, input_sentence_size=20000)
    prepare([str(root / "jargon.jsonl")], str(tmp_path / "other_data"), str(tmp_path / "other"),
            max_seq_length=32, num_workers=1, progress=False)
    with pytest.raises(ValueError, match="another tokenizer"):
        run(tmp_path / "other_data", tmp_path / "bad", 1, init_from=start)
    # Longer sequences than the checkpoint has positions for: named, not an index error mid-step.
    prepare([str(root / "jargon.jsonl")], str(tmp_path / "long_data"), str(root / "tok"), max_seq_length=64,
            num_workers=1, progress=False)
    with pytest.raises(ValueError, match="sequences of 64 tokens .* max_position_embeddings 32"):
        run(tmp_path / "long_data", tmp_path / "bad", 1, init_from=start)


@needs_hf
def test_korean_through_the_whole_path(tmp_path):
    """Tokenizer trained on Korean law text -> prepared shards without <unk> -> pretraining -> further
    pretraining -> embeddings; transformers reads the tokenizer.json the same way, [MASK] included."""
    from transformers import AlbertTokenizer, PreTrainedTokenizerFast

    tok = train_tokenizer([KO], str(tmp_path / "tok"), vocab_size=2000)
    meta = prepare([KO], str(tmp_path / "data"), str(tmp_path / "tok"), max_seq_length=32, num_workers=1,
                   progress=False)
    data = PretrainDataset(str(tmp_path / "data"), tokenizer=tok)
    ids = np.concatenate([data[i]["input_ids"] for i in range(len(data))])
    # the whole corpus encoded (20,663 tokens with sentencepiece 0.2.3, 19,959 with the GPU image's 0.2.2, whose
    # training picks a slightly different vocabulary), and no Korean word became <unk>
    assert meta["num_tokens"] > 19000 and not (ids == tok.unk_id).any()

    sentences = ["대한민국은 민주공화국이다.", "모든 국민은 법 앞에 평등하다.", "국회는 법률을 제정한다.",
                 "대한민국 [MASK] 헌법", "대한민국[MASK]헌법은"]
    hf = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "tok"))  # tokenizer.json as litebert wrote it
    for text in sentences:
        assert hf(text)["input_ids"] == tok.encode(text), text
        assert tok.encode(text).count(tok.mask_id) == text.count("[MASK]") and tok.unk_id not in tok.encode(text)
    # transformers' AlbertTokenizer rebuilds its normaliser from code: NFKD without recomposition splits Hangul
    # into jamo, all <unk>. With keep_accents (no accent stripping, meaningless for Hangul) it agrees.
    assert tok.unk_id in AlbertTokenizer.from_pretrained(str(tmp_path / "tok"))(sentences[0])["input_ids"]
    kept = train_tokenizer([KO], str(tmp_path / "kept"), vocab_size=2000, keep_accents=True)
    hf_kept = AlbertTokenizer.from_pretrained(str(tmp_path / "kept"))
    assert all(hf_kept(text)["input_ids"] == kept.encode(text) for text in sentences)

    start = run(tmp_path / "data", tmp_path / "start", 30)
    further = run(tmp_path / "data", tmp_path / "further", 30, init_from=start["checkpoint"], objective="mlm")
    assert further["final"]["mlm_loss"] < further["untrained"]["mlm_loss"]
    vectors = embed(AlbertModel.from_pretrained(further["checkpoint"]), tok, sentences)
    assert vectors.shape == (5, 32) and np.isfinite(vectors).all()
    assert len({v.tobytes() for v in vectors}) == 5
    json.dumps(further)  # the summary is plain JSON
