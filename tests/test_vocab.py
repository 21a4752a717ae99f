"""Vocabulary extension: old ids and rows untouched, new pieces one id each, initialised from their old split,
and the extended directory read identically by transformers."""

import importlib.util
import os

import pytest
import torch
from paths import SHARED_DATA

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining
from litebert.text.conventions import SPIECE_UNDERLINE
from litebert.tokenizer import Tokenizer
from litebert.vocab import best_split, extend_vocab

DATA = str(SHARED_DATA)
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
TINY = dict(vocab_size=1000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64)
WORDS = ["Cryptography", "photosynthesis", "Kellynch-hall", "démocratie", "[MASK]", "anne", "the", "1990,"]
TEXTS = ["Cryptography and photosynthesis, said Anne.", "Démocratie! [MASK] was at Kellynch-hall in 1990, too.",
         "photosynthesisphotosynthesis cryptographyless"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny AlbertForPreTraining with random weights (and a non-zero MLM bias) beside a 1000-piece tokenizer."""
    root = tmp_path_factory.mktemp("vocab")
    tok = train_tokenizer(None, str(root / "base"), vocab_size=1000, input_sentence_size=20000)
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig(**TINY))
    with torch.no_grad():
        model.predictions.bias.normal_()
    model.save_pretrained(root / "base")
    return root, tok


@pytest.fixture(scope="module")
def extended(base):
    root, _ = base
    ext = extend_vocab(str(root / "base"), str(root / "ext"), words=WORDS, corpus=[f"{DATA}/corpus/en/jargon_file.jsonl"]
                       if os.path.isdir(DATA) else None, max_pieces=40, domain_vocab_size=1500,
                       input_sentence_size=5000)
    return root / "ext", ext


def test_best_split_is_the_highest_scoring_segmentation():
    scores = {"▁a": -1.0, "b": -2.0, "▁ab": -4.0, "c": -1.0}
    assert best_split("▁abc", scores, 3, unk_score=-20.0) == (-4.0, ["▁a", "b", "c"])
    assert best_split("▁abz", scores, 3, unk_score=-20.0) == (-23.0, ["▁a", "b", "z"])


def test_old_ids_and_rows_unchanged_new_pieces_one_id(base, extended):
    root, old_tok = base
    out, ext = extended
    new_tok = Tokenizer.from_pretrained(str(out))
    V = old_tok.vocab_size
    assert new_tok.pieces[:V] == old_tok.pieces and new_tok.pieces[V:] == ext.pieces
    assert [old_tok.sp.get_score(i) for i in range(V)] == [new_tok.sp.get_score(i) for i in range(V)]
    assert "▁cryptography" in ext.pieces and "▁photosynthesis" in ext.pieces and "▁democratie" in ext.pieces
    assert len(ext.pieces) > 40  # the words plus 40 learned from the Jargon File
    assert set(ext.skipped) >= {"▁anne", "▁the", "▁[MASK]", "▁1990,", "▁kellynch-hall"}  # known / special / split
    for i, piece in enumerate(ext.pieces):
        assert new_tok.sp.piece_to_id(piece) == V + i and not new_tok.sp.is_control(V + i)
        if piece.startswith(SPIECE_UNDERLINE):
            assert new_tok.encode(piece[1:], add_special_tokens=False) == [V + i], piece
    # Text without the new words encodes exactly as before.
    plain = "Anne walked to the town, and Captain Wentworth followed."
    assert new_tok.encode(plain) == old_tok.encode(plain)

    old = AlbertForPreTraining.from_pretrained(root / "base")
    new = AlbertForPreTraining.from_pretrained(out)
    assert new.config.vocab_size == new_tok.vocab_size
    old_emb, new_emb = old.albert.embeddings.word_embeddings.weight, new.albert.embeddings.word_embeddings.weight
    assert torch.equal(new_emb[:V], old_emb) and torch.equal(new.predictions.bias[:V], old.predictions.bias)
    assert new.predictions.decoder.weight is new_emb  # still tied after loading
    for i, ids in enumerate(ext.old_ids):
        assert ids == (old_tok.encode(ext.pieces[i][1:], add_special_tokens=False)
                       if ext.pieces[i].startswith(SPIECE_UNDERLINE) else ids)
        torch.testing.assert_close(new_emb[V + i], old_emb[ids].mean(0), rtol=0, atol=1e-6)
        torch.testing.assert_close(new.predictions.bias[V + i], old.predictions.bias[ids].mean(), rtol=0, atol=1e-6)
    ids = torch.tensor([old_tok.encode(plain)])
    with torch.no_grad():
        torch.testing.assert_close(new.eval()(ids).prediction_logits[..., :V], old.eval()(ids).prediction_logits)


def test_learned_pieces_shorten_the_domain_text(base, extended):
    if not os.path.isdir(DATA):
        pytest.skip("shared data not available")
    _, old_tok = base
    out, _ = extended
    new_tok = Tokenizer.from_pretrained(str(out))
    import json
    with open(f"{DATA}/corpus/en/jargon_file.jsonl", encoding="utf-8") as f:
        text = [json.loads(line)["text"] for _, line in zip(range(200), f)]
    old_n = sum(map(len, old_tok.encode_batch(text)))
    new_n = sum(map(len, new_tok.encode_batch(text)))
    assert new_n < 0.985 * old_n, (old_n, new_n)  # 40 pieces: about 3% fewer tokens


@needs_hf
def test_transformers_reads_the_extended_directory_identically(extended):
    from transformers import AlbertForMaskedLM as HFMaskedLM
    from transformers import AlbertTokenizer, AlbertTokenizerFast

    out, ext = extended
    ours_tok = Tokenizer.from_pretrained(str(out))
    for cls in (AlbertTokenizer, AlbertTokenizerFast):
        hf = cls.from_pretrained(str(out))
        assert len(hf) == ours_tok.vocab_size
        for text in TEXTS + [p.lstrip(SPIECE_UNDERLINE) for p in ext.pieces]:
            assert hf(text)["input_ids"] == ours_tok.encode(text), (cls.__name__, text)
    batch = ours_tok(TEXTS, padding=True, return_tensors="pt")
    ours = AlbertForMaskedLM.from_pretrained(out).eval()  # an AlbertForPreTraining save, read as MLM: no SOP head
    theirs = HFMaskedLM.from_pretrained(str(out)).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits,
                                   theirs(**batch).logits, atol=1e-5, rtol=0)


def test_cli_and_errors(base, tmp_path, capsys):
    root, old_tok = base
    words = tmp_path / "words.txt"
    words.write_text("zeitgeist\nquixotic\n\n")
    out = tmp_path / "ext"
    assert litebert_main(["extend-vocab", "--model", str(root / "base"), "--out", str(out), "--words", str(words)]) == 0
    assert "added 2 pieces (ids 1000..1001)" in capsys.readouterr().out
    assert AlbertForPreTraining.from_pretrained(out).config.vocab_size == 1002
    assert Tokenizer.from_pretrained(str(out)).encode("quixotic zeitgeist", add_special_tokens=False) == [1001, 1000]
    assert litebert_main(["extend-vocab", "--model", str(root / "base"), "--out", str(tmp_path / "x")]) == 2
    assert "nothing to add" in capsys.readouterr().err
    assert litebert_main(["extend-vocab", "--model", str(root / "base"), "--out", str(root / "base"),
                          "--words", str(words)]) == 2
    assert "new directory" in capsys.readouterr().err
    assert litebert_main(["extend-vocab", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "y"),
                          "--words", str(words)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"no such directory: {tmp_path / 'none'}")


@needs_hf
def test_overlapping_new_pieces_segment_as_transformers_does(base, tmp_path):
    """Regression: with one fixed score margin, "▁1" and "19" made "▁1|9|9|0" and "▁|19|9|0" score exactly the
    same, and sentencepiece (float32) and tokenizers (float64) broke the tie differently (seen in CI)."""
    from transformers import AlbertTokenizer, AlbertTokenizerFast

    from litebert.vocab import extend_tokenizer

    _, old_tok = base
    texts = ["in 1990, too.", "1999 and 1919 and 91 19 1190", "x1990 anne annnne walked walkked wanne"]
    for i, pieces in enumerate([["▁1", "19"], ["▁1", "19", "99", "▁19", "90", "▁an", "ne", "nn", "▁wa", "al", "lk"]]):
        extend_tokenizer(old_tok, pieces, str(tmp_path / str(i)))
        ours = Tokenizer.from_pretrained(str(tmp_path / str(i)))
        for cls in (AlbertTokenizer, AlbertTokenizerFast):
            hf = cls.from_pretrained(str(tmp_path / str(i)))
            for text in texts:
                assert hf(text)["input_ids"] == ours.encode(text), (cls.__name__, pieces, text)


def test_max_pieces_below_one_is_refused_before_writing(base, tmp_path, capsys):
    root, _ = base
    corpus = tmp_path / "domain.txt"
    corpus.write_text("Photosynthesis in chloroplasts.\nCryptography of ciphers.\n" * 50)
    out = tmp_path / "ext"
    assert litebert_main(["extend-vocab", "--model", str(root / "base"), "--out", str(out), "--corpus", str(corpus),
                          "--max-pieces", "0"]) == 2
    assert capsys.readouterr().err.strip() == "litebert extend-vocab: error: --max-pieces must be in [1, inf), got 0"
    assert not out.exists()


def test_extending_an_salbert_directory_keeps_its_pooling(base, tmp_path):
    """Regression: the sentence files were dropped, so the extended model silently pooled with the default."""
    from litebert.embed import embed
    from litebert.model import AlbertModel
    from litebert.sentence import SentenceEncoder

    root, tok = base
    src, out = tmp_path / "salbert", tmp_path / "ext"
    torch.manual_seed(0)
    SentenceEncoder(AlbertModel(AlbertConfig(**TINY)), pooling="cls", max_length=32).save_pretrained(src)
    tok.save_pretrained(str(src))
    extend_vocab(str(src), str(out), words=["zeitgeist"])
    for name in ("sentence_config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (out / name).read_text() == (src / name).read_text(), name
    old, new = SentenceEncoder.from_pretrained(src), SentenceEncoder.from_pretrained(out)
    assert (new.pooling, new.max_length, new.config.vocab_size) == ("cls", 32, 1001)
    text = ["Anne walked to the shop in the rain."]  # no new piece: the same vector as before
    assert torch.allclose(torch.from_numpy(embed(old, Tokenizer.from_pretrained(str(src)), text, old.pooling)),
                          torch.from_numpy(embed(new, Tokenizer.from_pretrained(str(out)), text, new.pooling)))
