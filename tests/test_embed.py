"""Sentence embeddings and S-ALBERT: pooling against transformers' hidden states, the two losses against their
formulas, a saved S-ALBERT read by transformers and resumed, the CLI, and (slow) learning to retrieve paraphrases."""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from paths import SHARED_DATA

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.embed import SentenceConfig, embed, evaluate_pairs, read_pairs, train_sentence_encoder
from litebert.model import AlbertForPreTraining, AlbertModel
from litebert.sentence import SentenceEncoder, pool
from litebert.sentences.sts import pair_scores, paired_cosine, recall_at_1
from litebert.tokenizer import Tokenizer
from litebert.training.train_config import TrainConfig

DATA = str(SHARED_DATA)
PARAPHRASE = f"{DATA}/tasks/bible_paraphrase"
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
needs_data = pytest.mark.skipif(not os.path.isdir(DATA), reason="shared data not available")
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
SENTENCES = ["Anne Elliot walked to the town.", "Captain Wentworth", "It was a fine day, and the sea was calm.", "Yes."]


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A random tiny AlbertForPreTraining beside a 1000-piece tokenizer, as a pretraining run would leave it."""
    root = tmp_path_factory.mktemp("embed")
    tok = train_tokenizer(None, str(root / "start"), vocab_size=1000, input_sentence_size=20000)
    torch.manual_seed(0)
    AlbertForPreTraining(AlbertConfig(vocab_size=1000, **TINY)).save_pretrained(root / "start")
    return root / "start", tok


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    """48 KJV/WEB verse pairs (label 1) and 16 hard negatives (label 0), a slice of bible_paraphrase."""
    if not os.path.isdir(DATA):
        pytest.skip("shared data not available")
    rows = [json.loads(line) for line in open(f"{PARAPHRASE}/train.jsonl", encoding="utf-8")]
    rows = [r for r in rows if r["label"] == 1][:48] + [r for r in rows if r["label"] == 0][:16]
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@needs_hf
def test_embed_is_the_masked_mean_of_transformers_hidden_states(start):
    from transformers import AlbertModel as HFAlbertModel

    directory, tok = start
    ours = AlbertForPreTraining.from_pretrained(directory)  # any litebert model: its encoder is used
    theirs = HFAlbertModel.from_pretrained(str(directory)).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = theirs(**{k: batch[k] for k in ("input_ids", "attention_mask")}).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected_mean = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(embed(ours, tok, SENTENCES, batch_size=3), expected_mean, atol=1e-5, rtol=0)
    np.testing.assert_allclose(embed(ours, tok, SENTENCES, "cls"), hidden[:, 0].numpy(), atol=1e-5, rtol=0)
    alone = embed(ours, tok, SENTENCES[3:])  # no padding around it: padding must not change a sentence's vector
    np.testing.assert_allclose(alone[0], expected_mean[3], atol=1e-5, rtol=0)
    assert ours.training  # embed restores the mode it found
    with pytest.raises(ValueError, match="pooling"):
        pool(hidden, batch["attention_mask"], "max")


def test_metrics_on_hand_values():
    a = np.array([[1.0, 0.0], [1.0, 0.9], [1.0, 1.0]])
    b = np.array([[2.0, 0.1], [0.2, 1.0], [1.0, 1.2]])  # query 1's nearest is candidate 2, not 1
    assert recall_at_1(a, b) == pytest.approx(2 / 3)
    expected = [2 / np.hypot(2, 0.1), 1.1 / (np.hypot(1, 0.9) * np.hypot(0.2, 1)), 2.2 / (np.sqrt(2) * np.hypot(1, 1.2))]
    np.testing.assert_allclose(paired_cosine(a, b), expected, rtol=1e-6)


def test_recall_counts_a_shared_second_sentence_as_each_pairs_answer():
    """Pairs that share a sentence2 (6 of bible_paraphrase's 1,000 dev positives) have one vector for it, and the
    nearest candidate was the first copy: a perfect encoder scored 2/3 here."""
    vectors = {"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0], "c": [0.0, 0.0, 1.0], "x": [1.0, 1.0, 0.0],
               "y": [0.0, 0.0, 1.0]}
    pairs = [("a", "x"), ("b", "x"), ("c", "y")]
    assert pair_scores(lambda texts: np.array([vectors[t] for t in texts]), pairs, None) == {"recall_at_1": 1.0}


def test_losses_equal_their_formulas(start):
    directory, tok = start
    model = SentenceEncoder.from_pretrained(directory, scale=20.0)
    a, b = (tok(s, padding=True, return_tensors="pt") for s in (SENTENCES, SENTENCES[1:] + SENTENCES[:1]))
    out = model(a["input_ids"], a["attention_mask"], b["input_ids"], b["attention_mask"])
    u = F.normalize(pool(model.albert(a["input_ids"], a["attention_mask"])[0], a["attention_mask"], "mean"), dim=-1)
    v = F.normalize(pool(model.albert(b["input_ids"], b["attention_mask"])[0], b["attention_mask"], "mean"), dim=-1)
    cos = u @ v.T
    info_nce = -torch.log_softmax(20 * cos, dim=1).diagonal().mean()
    torch.testing.assert_close(out.loss, info_nce)
    torch.testing.assert_close(out.similarity, cos.diagonal())
    model.objective = "cosine"
    scores = torch.tensor([0.9, 0.1, 0.5, 0.0])
    torch.testing.assert_close(model(a["input_ids"], a["attention_mask"], b["input_ids"], b["attention_mask"],
                                     scores).loss, ((cos.diagonal() - scores) ** 2).mean())


@needs_hf
def test_salbert_trains_saves_an_hf_directory_and_resumes(start, pairs_file, tmp_path):
    from transformers import AlbertModel as HFAlbertModel

    directory, tok = start
    cfg = SentenceConfig(model=str(directory), train=str(pairs_file), eval=str(pairs_file), max_length=48)
    train_cfg = dict(optimizer="adamw", lr=1e-3, batch_size=16, max_steps=4, out_dir=str(tmp_path / "run"),
                     progress=False, save_every=2, log_every=1)
    summary = train_sentence_encoder(cfg, TrainConfig(**train_cfg))
    assert summary["train_pairs"] == 48 and summary["steps"] == 4  # contrastive: the positives only
    assert set(summary["before"]) == {"recall_at_1", "spearman", "pearson"} and 0 <= summary["after"]["recall_at_1"] <= 1
    assert summary["after"]["recall_at_1"] > summary["before"]["recall_at_1"]  # training on these very pairs
    out = tmp_path / "run" / "step_4"
    assert {"config.json", "model.safetensors", "spiece.model", "tokenizer_config.json", "sentence_config.json",
            "modules.json", "sentence_bert_config.json"} <= set(os.listdir(out))
    pooling = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"] and pooling["word_embedding_dimension"] == 32
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertModel"]

    ours = SentenceEncoder.from_pretrained(out)
    assert (ours.pooling, ours.max_length) == ("mean", 48)
    theirs = HFAlbertModel.from_pretrained(str(out)).eval()
    plain = AlbertModel.from_pretrained(out).eval()
    batch = Tokenizer.from_pretrained(str(out))(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hf_hidden = theirs(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        torch.testing.assert_close(plain(batch["input_ids"], batch["attention_mask"])[0], hf_hidden, atol=1e-5, rtol=0)
    np.testing.assert_allclose(embed(ours, tok, SENTENCES), pool(hf_hidden, batch["attention_mask"], "mean").numpy(),
                               atol=1e-5, rtol=0)

    # A run stopped after its step-2 checkpoint and resumed reaches the uninterrupted run's weights.
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "run", resumed)
    shutil.rmtree(resumed / "step_4")
    train_sentence_encoder(cfg, TrainConfig(**{**train_cfg, "out_dir": str(resumed), "resume": True}))
    a = AlbertModel.from_pretrained(out).state_dict()
    b = AlbertModel.from_pretrained(resumed / "step_4").state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_cosine_objective_scales_scores(start, pairs_file, tmp_path):
    directory, _ = start
    scored = tmp_path / "sts.jsonl"
    rows = [json.loads(line) for line in open(pairs_file)]
    scored.write_text("".join(json.dumps({**r, "label": 5.0 * r["label"]}) + "\n" for r in rows))
    cfg = SentenceConfig(model=str(directory), train=str(scored), eval=str(scored), objective="cosine",
                         pooling="cls", max_length=32)
    summary = train_sentence_encoder(cfg, TrainConfig(optimizer="adamw", lr=1e-3, batch_size=16, max_steps=3,
                                                      out_dir=str(tmp_path / "run"), progress=False))
    assert summary["train_pairs"] == 64 and summary["pooling"] == "cls"
    pairs, labels = read_pairs(str(scored), cfg)
    assert max(labels) == 5.0 and len(pairs) == 64
    assert SentenceEncoder.from_pretrained(summary["checkpoint"]).objective == "cosine"


def test_cli_embeds_evaluates_and_fails_with_one_line(start, pairs_file, tmp_path, capsys):
    directory, tok = start
    sentences = tmp_path / "s.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n\n")
    out = tmp_path / "emb.npy"
    # --device cpu: compared with the CPU's embeddings to 1e-6 (auto would pick a GPU where there is one)
    assert litebert_main(["embed", "--model", str(directory), "--input", str(sentences), "--out", str(out),
                          "--device", "cpu"]) == 0
    assert "4 x 32 (mean pooling)" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(out), embed(AlbertModel.from_pretrained(directory), tok, SENTENCES), atol=1e-6)
    assert litebert_main(["embed", "--model", str(directory), "--evaluate", str(pairs_file), "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    pairs, labels = read_pairs(str(pairs_file), SentenceConfig())
    assert metrics == pytest.approx(evaluate_pairs(AlbertModel.from_pretrained(directory), tok, pairs, labels))
    assert litebert_main(["embed", "--model", str(directory)]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert litebert_main(["embed", "--model", str(directory), "--input", str(tmp_path / "missing.txt"),
                          "--out", str(out)]) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert litebert_main(["embed", "--model", str(directory), "--train", str(pairs_file), "--objective", "cosine",
                          "--label-column", "", "--out-dir", str(tmp_path / "r")]) == 2
    assert "needs scored pairs" in capsys.readouterr().err


@pytest.mark.slow
@needs_data
def test_salbert_retrieves_bible_paraphrases_far_above_the_untrained_encoder(tmp_path):
    """A reduced scripts/salbert_bible.py: a random-init tiny encoder (no time to pretrain here), 300 test pairs.
    Mean-pooled random-transformer vectors already match verses by shared words; training must beat that."""
    tok = train_tokenizer([f"{DATA}/corpus/en/bible_kjv.jsonl", f"{DATA}/corpus/en/bible_web.jsonl"],
                          str(tmp_path / "start"), vocab_size=2000, input_sentence_size=30000)
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=128, max_position_embeddings=64)
    AlbertForPreTraining(config).save_pretrained(tmp_path / "start")
    cfg = SentenceConfig(model=str(tmp_path / "start"), train=f"{PARAPHRASE}/train.jsonl",
                         eval=f"{PARAPHRASE}/test.jsonl", max_length=48, max_eval_examples=600,
                         max_train_examples=6000)
    summary = train_sentence_encoder(cfg, TrainConfig(optimizer="adamw", lr=1e-3, batch_size=32, max_steps=150,
                                                      warmup_steps=15, out_dir=str(tmp_path / "run"), progress=False))
    before, after = summary["before"]["recall_at_1"], summary["after"]["recall_at_1"]
    assert after > before + 0.1, (before, after)


def test_cli_requires_model_and_says_what_to_pass(tmp_path, capsys):
    """Regression: --model defaulted to out/pretrain/final, a path no verb writes."""
    sentences = tmp_path / "s.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n")
    assert litebert_main(["embed", "--input", str(sentences), "--out", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("litebert embed: error: --model is required") and len(err.splitlines()) == 1
    with pytest.raises(SystemExit):
        litebert_main(["embed", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--model MODEL required: an ALBERT model directory" in help_text and "out/pretrain/final" not in help_text


@pytest.mark.parametrize("verb", ["embed", "finetune", "pretrain"])
def test_help_shows_each_default_once(verb, capsys):
    """Regression (recipes.add_config_args): a help text that explains its default ("(default: the model's)")
    was followed by a second "(default: None)"; an empty default printed as "(default: )"."""
    with pytest.raises(SystemExit):
        litebert_main([verb, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    options = help_text.split(" --")[1:]
    assert options and all(option.count("(default:") <= 1 for option in options), \
        [option for option in options if option.count("(default:") > 1]
    assert "(default: )" not in help_text
    if verb == "pretrain":
        assert "(default: batch_size / world_size, no accumulation) --" in help_text


@pytest.mark.parametrize("argv, words", [
    (["--input", "s.txt", "--out", "e.npy", "--lr", "1e-4"], "--lr is read with --train or --train --eval or --distill or --distill --eval, "
                                                               "not with --input"),
    (["--input", "s.txt", "--out", "e.npy", "--distill-text", "c.txt"], "--distill-text is read with --distill"),
    (["--evaluate", "p.jsonl", "--out", "e.npy"], "--out is read with --input or --silver, not with --evaluate"),
    (["--train", "p.jsonl", "--compare", "t"], "--compare is read with --evaluate, not with --train"),
    (["--input", "s.txt", "--out", "e.npy", "--silver-pairs", "9"], "--silver-pairs is read with --silver"),
    # a pairs file's options: --input and --silver read plain text
    (["--input", "s.txt", "--out", "e.npy", "--text-columns", "a", "b"],
     "--text-columns is read with --evaluate or --train or --train --eval or --distill or --distill --eval, not "
     "with --input"),
    (["--silver", "x", "--silver-text", "c.txt", "--out", "s.jsonl", "--max-eval-examples", "5"],
     "--max-eval-examples is read with --evaluate or --train --eval or --distill --eval, not with --silver"),
    (["--silver", "x", "--silver-text", "c.txt", "--out", "s.jsonl", "--label-column", "score"],
     "--label-column is read with --evaluate or --train or --train --eval or --distill --eval, not with --silver"),
    (["--distill", "t", "--label-column", "score"], "--label-column is read with --evaluate or --train or --train "
                                                    "--eval or --distill --eval, not with --distill"),
    # --train and --distill without --eval score nothing while training; --evaluate and --silver show no bar
    (["--train", "p.jsonl", "--eval-every", "5"], "--eval-every is read with --train --eval or --distill --eval, "
                                                  "not with --train"),
    (["--distill", "t", "--max-eval-examples", "5"], "--max-eval-examples is read with --evaluate or --train --eval "
                                                     "or --distill --eval, not with --distill"),
    (["--train", "p.jsonl", "--eval-batch-size", "8"], "--eval-batch-size is read with --input or --evaluate or "
                                                       "--silver or --train --eval or --distill --eval, not with --train"),
    (["--evaluate", "p.jsonl", "--no-progress"], "--progress is read with --input or --train or --train --eval or "
                                                 "--distill or --distill --eval, not with --evaluate"),
])
def test_a_flag_the_chosen_mode_would_ignore_is_refused_by_name(argv, words, tmp_path, capsys):
    """embed has five modes; a flag typed for another (--lr while embedding a file) was ignored without a word."""
    assert litebert_main(["embed", "--model", str(tmp_path / "m"), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
