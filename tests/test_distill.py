"""Distillation from a sentence-transformers teacher, the reader of such directories, and STS scoring: a tiny
BERT teacher made here (Transformer -> Pooling -> Dense(tanh) -> Normalize), checked against sentence-transformers
itself; the student's loss against its formula, its saved directory read by sentence-transformers with equal
vectors, a resumed run equal to an uninterrupted one; the benchmarks' readers on hand-made files and (when the
gensim wheel is installed) on Lee's real judgments."""

import contextlib
import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
import torch

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.corpus.documents import split_sentences
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.embed import SentenceConfig
from litebert.model import AlbertModel
from litebert.sentence import pool
from litebert.sentences.directories import Dense, add_dense, load_sentence_model
from litebert.sentences.distill import (
    DistillConfig,
    DistillStudent,
    distill_items,
    monolingual_texts,
    student_vectors,
    train_distilled,
)
from litebert.sentences.sts import (
    lee_background,
    lee_pairs,
    pair_metrics,
    pair_scores,
    read_benchmark,
    score_models,
    word_pairs,
)
from litebert.tokenizer import Tokenizer
from litebert.training.train_config import TrainConfig

needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
needs_st = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                              reason="sentence-transformers not installed")
SENTENCES = ["Anne Elliot walked to the town.", "Captain Wentworth", "It was a fine day, and the sea was calm.",
             "Yes.", "the navy, the navy and the sea"]
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)


def corpus_lines(n: int) -> list[str]:
    import gzip

    from litebert.corpus.documents import BUNDLED_CORPUS
    with gzip.open(BUNDLED_CORPUS, "rt", encoding="utf-8") as f:
        return [line.strip() for line, _ in zip(f, range(5 * n)) if line.strip()][:n]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny sentence-transformers BERT: WordPiece vocabulary of the corpus's words, 24-d, Dense(tanh) to 16-d."""
    pytest.importorskip("transformers")
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("teacher")
    words = sorted({w for line in corpus_lines(400) for w in line.lower().replace(",", " , ").replace(".", " . ").split()})
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab_file=str(root / "vocab.txt"), do_lower_case=True).save_pretrained(root)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(words) + 5, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=48, max_position_embeddings=64)).save_pretrained(root)
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": False}))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 24, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    dense = Dense(24, 16, activation="torch.nn.modules.activation.Tanh")
    torch.nn.init.normal_(dense.linear.weight, std=0.5)
    add_dense(str(root), dense)
    entries = json.loads((root / "modules.json").read_text())
    entries.append({"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(entries))
    return root


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    root = tmp_path_factory.mktemp("student")
    train_tokenizer(None, str(root), vocab_size=1000, input_sentence_size=20000)
    torch.manual_seed(0)
    AlbertModel(AlbertConfig(vocab_size=1000, **TINY)).save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    lines = corpus_lines(120)
    path.write_text("\n".join(lines[:60]) + "\n\n" + "\n".join(lines[60:]) + "\n")  # two documents
    return path


@needs_st
def test_reader_equals_sentence_transformers_on_a_tiny_teacher(teacher, capfd):
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    theirs = SentenceTransformer(str(teacher), device="cpu").encode(SENTENCES)
    capfd.readouterr()
    ours = load_sentence_model(teacher)
    assert "Loading weights" not in capfd.readouterr().err  # transformers' bar, drawn even into log files
    assert hf_logging.is_progress_bar_enabled()  # and left as it was found
    assert ours.dimension == 16 and ours.max_length == 32 and ours.normalize
    np.testing.assert_allclose(ours.encode(SENTENCES, batch_size=2), theirs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)


@needs_hf
def test_a_plain_encoder_is_mean_pooled(teacher, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    plain = tmp_path / "plain"
    shutil.copytree(teacher, plain)
    for name in ("modules.json", "sentence_bert_config.json"):
        os.remove(plain / name)
    batch = AutoTokenizer.from_pretrained(str(plain))(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = AutoModel.from_pretrained(str(plain))(**batch).last_hidden_state
    expected = pool(hidden, batch["attention_mask"], "mean").numpy()
    np.testing.assert_allclose(load_sentence_model(plain).encode(SENTENCES), expected, atol=1e-5, rtol=0)


def test_unsupported_modules_are_refused_by_name(teacher, tmp_path):
    odd = tmp_path / "odd"
    shutil.copytree(teacher, odd)
    (odd / "modules.json").write_text(json.dumps([{"idx": 0, "path": "", "type": "sentence_transformers.models.LSTM"}]))
    with pytest.raises(ValueError, match="LSTM"):
        load_sentence_model(odd)
    (odd / "modules.json").write_text(json.dumps([{"idx": 0, "path": "1_Pooling", "type": "x.Pooling"}]))
    (odd / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(ValueError, match="max"):
        load_sentence_model(odd)


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "modules.json").write_text('[{"idx": 0,'), "modules.json: not valid JSON"),
    (lambda d: (d / "modules.json").write_text('{"0": "x"}'), "modules.json: expected a JSON array"),
    (lambda d: (d / "modules.json").write_text('["x"]'), "modules.json: expected a list of modules"),
    (lambda d: (d / "2_Dense" / "config.json").write_text('{"out_features": 16}'), "needs in_features"),
    (lambda d: (d / "2_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 24, "out_features": 8, "activation_function": "torch.nn.modules.activation.Tanh"})),
     r"model.safetensors holds .* where .*config.json describes"),
])
def test_a_damaged_sentence_transformers_directory_is_a_one_line_error(teacher, tmp_path, damage, message):
    """modules.json and a Dense module's files are read as the other model files are: a damaged one was a
    JSONDecodeError, AttributeError, KeyError or RuntimeError traceback from deep in the reader."""
    from litebert.errors import CheckpointError

    broken = tmp_path / "broken"
    shutil.copytree(teacher, broken)
    damage(broken)
    with pytest.raises(CheckpointError, match=message):
        load_sentence_model(broken)


def test_distillation_items_monolingual_and_parallel(text_file, tmp_path):
    texts = monolingual_texts([str(text_file)], span=3, seed=1, limit=None)
    assert texts == monolingual_texts([str(text_file)], span=3, seed=1, limit=None)  # seeded
    lines = corpus_lines(120)
    assert " ".join(texts[:len(texts)]).split() == " ".join(lines).split()  # every sentence once, in order
    assert max(len(t) for t in texts) > max(len(line) for line in lines)  # some spans join sentences
    sample = monolingual_texts([str(text_file)], span=1, seed=1, limit=10)
    assert len(sample) == 10 and sample == [t for t in lines if t in set(sample)]  # a sample, in corpus order
    pairs = tmp_path / "parallel.jsonl"
    pairs.write_text("".join(json.dumps({"sentence1": s, "sentence2": t}) + "\n" for s, t in
                             [("a source", "its translation"), ("b source", "b translation")]))
    from litebert.sentences.sts import read_scored_pairs
    sources, items = distill_items(DistillConfig(distill="t", distill_pairs=[str(pairs)]),
                                   lambda p: read_scored_pairs(p, ["sentence1", "sentence2"], "")[0], seed=0)
    assert sources == ["a source", "b source"]  # the teacher sees the source side only
    assert items == [("a source", 0), ("its translation", 0), ("b source", 1), ("b translation", 1)]
    with pytest.raises(ValueError, match="nothing to distill"):
        distill_items(DistillConfig(distill="t"), None, seed=0)


def test_loss_is_the_mse_to_the_teacher_through_the_projection(student):
    model = DistillStudent.from_pretrained(student, teacher_dim=16)
    assert model.projection.linear.weight.shape == (16, 32)
    tok = Tokenizer.from_pretrained(str(student))
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    target = torch.randn(len(SENTENCES), 16)
    out = model(batch["input_ids"], batch["attention_mask"], target)
    pooled = pool(model.albert(batch["input_ids"], batch["attention_mask"])[0], batch["attention_mask"], "mean")
    projected = pooled @ model.projection.linear.weight.T + model.projection.linear.bias
    torch.testing.assert_close(out.loss, ((projected - target) ** 2).mean())
    assert DistillStudent.from_pretrained(student, teacher_dim=32).projection is None  # same size: none


@needs_st
def test_distilled_student_approaches_the_teacher_loads_in_sentence_transformers_and_resumes(student, teacher,
                                                                                           text_file, tmp_path):
    from sentence_transformers import SentenceTransformer

    cfg = SentenceConfig(model=str(student), eval=str(tmp_path / "eval.jsonl"), max_length=32, label_column="score")
    lines = corpus_lines(40)
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps({"sentence1": lines[i], "sentence2": lines[i + 1],
                                                             "score": i % 5}) + "\n" for i in range(0, 38, 2)))
    dcfg = DistillConfig(distill=str(teacher), distill_text=[str(text_file)], distill_span=2)
    train_kw = dict(optimizer="adamw", lr=3e-3, batch_size=16, max_steps=40, save_every=20, log_every=10,
                    progress=False, out_dir=str(tmp_path / "run"))
    summary = train_distilled(cfg, dcfg, TrainConfig(**train_kw))
    assert summary["projection"] and summary["teacher_dim"] == 16 and summary["steps"] == 40
    assert set(summary["teacher_eval"]) == {"spearman", "pearson", "recall_at_1"}

    texts = monolingual_texts([str(text_file)], span=1, seed=0, limit=None)[:32]
    target = load_sentence_model(teacher).encode(texts)
    out = tmp_path / "run" / "step_40"
    before = student_vectors(DistillStudent.from_pretrained(student, teacher_dim=16), Tokenizer.from_pretrained(
        str(student)), texts)  # a fresh random projection: about as far as any untrained student
    after = load_sentence_model(out).encode(texts)
    assert ((after - target) ** 2).mean() < 0.5 * ((before - target) ** 2).mean()

    # the saved directory: sentence-transformers computes litebert's vectors (pooling, then the 2_Dense projection)
    assert json.loads((out / "modules.json").read_text())[-1]["type"] == "sentence_transformers.models.Dense"
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(after, theirs, atol=1e-5, rtol=0)
    sentences = tmp_path / "sentences.txt"  # embed --input: one sentence per line, row i = line i (no blank lines)
    sentences.write_text("\n".join(texts) + "\n")
    assert litebert_main(["embed", "--model", str(out), "--input", str(sentences), "--out", str(tmp_path / "e")]) == 0
    assert np.load(tmp_path / "e.npy").shape == (len(texts), 16)

    # the teacher's vectors are cached; a run resumed from step 20 reaches the uninterrupted weights
    assert (tmp_path / "run" / "teacher_vectors.npy").is_file()
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "run", resumed)
    shutil.rmtree(resumed / "step_40")
    train_distilled(cfg, dcfg, TrainConfig(**{**train_kw, "out_dir": str(resumed), "resume": True}))
    a = DistillStudent.from_pretrained(out).state_dict()
    b = DistillStudent.from_pretrained(resumed / "step_40").state_dict()
    assert a.keys() == b.keys() and "projection.linear.weight" in a
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_the_teacher_is_loaded_once_and_let_go_before_the_student_trains(student, teacher, text_file, tmp_path,
                                                                         monkeypatch):
    """Its vectors and its scores on --eval come from one load, and its memory (a GPU's, under --device cuda) is
    free while the student trains."""
    import gc
    import weakref

    from litebert.sentences import distill

    loaded, real_load, real_train = [], distill.load_sentence_model, distill.train

    def counting_load(*args, **kwargs):
        model = real_load(*args, **kwargs)
        loaded.append(weakref.ref(model))
        return model

    def train_after_the_teacher_is_gone(*args, **kwargs):
        gc.collect()
        assert [ref() for ref in loaded] == [None]
        return real_train(*args, **kwargs)

    monkeypatch.setattr(distill, "load_sentence_model", counting_load)
    monkeypatch.setattr(distill, "train", train_after_the_teacher_is_gone)
    lines = corpus_lines(20)
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps({"sentence1": lines[i], "sentence2": lines[i + 1],
                                                             "score": i % 5}) + "\n" for i in range(0, 18, 2)))
    cfg = SentenceConfig(model=str(student), eval=str(tmp_path / "eval.jsonl"), max_length=32, label_column="score")
    dcfg = DistillConfig(distill=str(teacher), distill_text=[str(text_file)], distill_span=2)
    summary = train_distilled(cfg, dcfg, TrainConfig(optimizer="adamw", lr=3e-3, batch_size=16, max_steps=2,
                                                     save_every=0, progress=False, out_dir=str(tmp_path / "run")))
    assert len(loaded) == 1 and summary["teacher_eval"] and summary["steps"] == 2


def test_cli_distills_and_compares_in_one_command(student, teacher, text_file, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    lines = corpus_lines(20)
    pairs.write_text("".join(json.dumps({"sentence1": lines[i], "sentence2": lines[i + 1], "label": i % 3})
                             + "\n" for i in range(18)))
    assert litebert_main(["embed", "--model", str(student), "--evaluate", str(pairs), "--compare", str(teacher)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert list(scores) == [str(student), str(teacher)]
    pairs_list = [(json.loads(r)["sentence1"], json.loads(r)["sentence2"]) for r in pairs.read_text().splitlines()]
    labels = [float(i % 3) for i in range(18)]
    expected = score_models([str(student), str(teacher)], pairs_list, labels, max_length=128)  # --max-length's default
    assert all(scores[k] == pytest.approx(expected[k]) for k in expected)
    assert set(scores[str(teacher)]) == {"spearman", "pearson", "recall_at_1"}
    assert litebert_main(["embed", "--model", str(student), "--distill", str(teacher), "--out-dir",
                          str(tmp_path / "d")]) == 2
    assert "nothing to distill" in capsys.readouterr().err
    assert litebert_main(["embed", "--model", str(student), "--distill", str(teacher), "--evaluate",
                          str(pairs)]) == 2
    assert "exactly one of" in capsys.readouterr().err


def test_pair_metrics_and_benchmark_readers_on_hand_made_files(tmp_path):
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.2]])
    b = np.array([[1.0, 0.1], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    gold = [0.9, 0.8, 0.1, 0.3]
    metrics = pair_metrics(a, b, gold)
    assert metrics["pearson"] == pytest.approx(np.corrcoef(cosine, gold)[0, 1])
    assert metrics["spearman"] == pytest.approx(1.0)  # cosines 0.995, 0.707, 0, 0.196: the gold order
    (tmp_path / "lee.cor").write_text("first doc\nsecond doc\n\nthird doc\n", encoding="latin-1")
    (tmp_path / "sim.txt").write_text("1 0.2 0.3\n0 1 0.4\n0 0 1\n")
    pairs, scores = lee_pairs(str(tmp_path / "lee.cor"), str(tmp_path / "sim.txt"))
    assert pairs == [("first doc", "second doc"), ("first doc", "third doc"), ("second doc", "third doc")]
    assert scores == [0.2, 0.3, 0.4]
    (tmp_path / "ws.tsv").write_text("# header\n# Word 1\tWord 2\tHuman (mean)\nlove\tsex\t6.77\ntiger\tcat\t7.35\n")
    assert word_pairs(str(tmp_path / "ws.tsv")) == ([("love", "sex"), ("tiger", "cat")], [6.77, 7.35])
    calls = []
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # cosines 0.71, 0, 0.71 (np.eye's, all 0, are NaN's)
    scored = pair_scores(lambda texts: calls.append(list(texts)) or vectors, pairs, scores, recall=False)
    assert calls == [["first doc", "second doc", "third doc"]] and set(scored) == {"spearman", "pearson"}


@pytest.mark.skipif(importlib.util.find_spec("gensim") is None, reason="the gensim wheel is not installed")
def test_lee_wordsim_and_simlex_read_from_the_gensim_wheel():
    pairs, scores = read_benchmark("gensim:lee")
    assert len(pairs) == 1225 and len({p[0] for p in pairs} | {p[1] for p in pairs}) == 50
    assert 0 < min(scores) and max(scores) <= 1
    assert len(read_benchmark("gensim:wordsim353")[0]) == 353 and len(read_benchmark("gensim:simlex999")[0]) == 999
    with pytest.raises(ValueError, match="unknown benchmark"):
        read_benchmark("gensim:nope")
    # the unlabelled in-domain text: 300 news documents, none of them one of Lee's 50 nor sharing a sentence
    background = lee_background()
    lee_documents = {p[0] for p in pairs} | {p[1] for p in pairs}
    assert len(background) == 300 and not set(background) & lee_documents
    lee_sentences = {s for doc in lee_documents for s in split_sentences(doc) if len(s) > 40}
    assert not {s for doc in background for s in split_sentences(doc)} & lee_sentences


def test_silver_pairs_are_sampled_labelled_by_a_regression_cross_encoder_and_train_the_bi_encoder(student, text_file,
                                                                                                 tmp_path):
    from litebert.embed import read_pairs, train_sentence_encoder
    from litebert.finetune import FinetuneConfig, finetune
    from litebert.sentences.silver import label_pairs, sample_pairs, write_pairs

    lines = corpus_lines(80)
    gold = tmp_path / "gold"
    gold.mkdir()
    rows = [{"sentence1": lines[i], "sentence2": lines[i] if i % 2 else lines[i + 1], "label": float(i % 2)}
            for i in range(60)]
    for split, part in (("train", rows[:48]), ("dev", rows[48:])):
        (gold / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    finetune(FinetuneConfig(model=str(student), task="table", data_dir=str(gold), regression=True,
                            text_columns=["sentence1", "sentence2"], max_length=48),
             TrainConfig(optimizer="adamw", lr=1e-3, batch_size=16, max_steps=6, progress=False,
                         out_dir=str(tmp_path / "cross")))
    cross = str(tmp_path / "cross" / "best")

    texts = monolingual_texts([str(text_file)], span=1, seed=0, limit=None)
    pairs = sample_pairs(texts, str(student), 10, seed=3, pool=50)
    assert len(pairs) == 10 and pairs == sample_pairs(texts, str(student), 10, seed=3, pool=50)  # seeded
    near = load_sentence_model(student).encode([t for p in pairs[:5] for t in p])
    others = load_sentence_model(student).encode(texts[:50])
    for k in range(5):  # the first half: each query's nearest other sentence of the pool
        a, b = near[2 * k], near[2 * k + 1]
        assert pairs[k][0] != pairs[k][1]
        cos = lambda x, y: float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))  # noqa: E731
        assert cos(a, b) >= np.percentile([cos(a, o) for o in others], 90)
    assert len({frozenset(p) for p in pairs}) == 10  # distinct, a pair and its reverse counted once
    scores = label_pairs(cross, pairs, max_length=48)  # on the gold's scale (0-1 here), unclipped
    assert len(scores) == 10 and all(np.isfinite(scores))
    with pytest.raises(ValueError, match="regression"):
        label_pairs(str(student), pairs)  # no regression head: refused by name (a 2-label head by default)

    silver = tmp_path / "silver.jsonl"
    assert litebert_main(["embed", "--model", str(student), "--silver", cross, "--silver-text", str(text_file),
                          "--silver-pairs", "20", "--out", str(silver), "--silver-max-length", "48",
                          "--device", "cpu"]) == 0
    read, labels = read_pairs(str(silver), SentenceConfig())
    assert len(read) == 20 and all(0.0 <= x <= 1.0 for x in labels)
    both = tmp_path / "both.jsonl"
    both.write_text((gold / "train.jsonl").read_text() + silver.read_text())
    summary = train_sentence_encoder(SentenceConfig(model=str(student), train=str(both), objective="cosine",
                                                    max_length=48),
                                     TrainConfig(optimizer="adamw", lr=1e-3, batch_size=16, max_steps=2,
                                                 progress=False, out_dir=str(tmp_path / "bi")))
    assert summary["train_pairs"] == 68
    write_pairs(str(tmp_path / "w.jsonl"), [("a", "b")], [0.25])
    assert json.loads((tmp_path / "w.jsonl").read_text()) == {"sentence1": "a", "sentence2": "b", "label": 0.25}


# -- what a review of the sentence side found (each of these passed silently before) ----------------------------

def test_embed_uses_the_saved_max_length_and_compares_other_models_as_they_were_saved(student, teacher, tmp_path,
                                                                                      capsys):
    """`litebert embed` forced 128 tokens on every model (a default, not the directory's setting), and its
    --pooling / --max-length on the --compare teachers too."""
    from litebert.sentence import SentenceEncoder
    short = tmp_path / "short"
    SentenceEncoder(AlbertModel.from_pretrained(student), max_length=8).save_pretrained(short)
    Tokenizer.from_pretrained(str(student)).save_pretrained(str(short))
    lines = corpus_lines(6)
    (tmp_path / "s.txt").write_text("\n".join(lines) + "\n")
    assert litebert_main(["embed", "--model", str(short), "--input", str(tmp_path / "s.txt"), "--out",
                          str(tmp_path / "e.npy"), "--device", "cpu"]) == 0
    own = load_sentence_model(short).encode(lines)
    assert load_sentence_model(short).max_length == 8
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), own, atol=1e-6)
    assert not np.allclose(own, load_sentence_model(short, max_length=64).encode(lines), atol=1e-3)  # it matters

    pairs = [(lines[i], lines[i + 1]) for i in range(5)]
    labels = [0.0, 1.0, 2.0, 3.0, 4.0]
    both = score_models([str(short), str(teacher)], pairs, labels, pooling="cls", max_length=16, recall=False)
    assert both[str(teacher)] == score_models([str(teacher)], pairs, labels, recall=False)[str(teacher)]
    assert both[str(short)] == score_models([str(short)], pairs, labels, "cls", 16, recall=False)[str(short)]


def test_a_distilled_students_projection_is_not_silently_dropped_by_train(student, tmp_path):
    from litebert.embed import train_sentence_encoder
    distilled = tmp_path / "distilled"
    DistillStudent.from_pretrained(student, teacher_dim=16).save_pretrained(distilled)
    Tokenizer.from_pretrained(str(student)).save_pretrained(str(distilled))
    pairs = tmp_path / "p.jsonl"
    pairs.write_text("".join(json.dumps({"sentence1": a, "sentence2": a, "label": 1}) + "\n"
                             for a in corpus_lines(20)))
    with pytest.raises(ValueError, match="2_Dense after its pooling, which --train would drop"):
        train_sentence_encoder(SentenceConfig(model=str(distilled), train=str(pairs)),
                               TrainConfig(batch_size=4, max_steps=1, out_dir=str(tmp_path / "run")))


def test_non_finite_scores_and_a_collapsed_encoder_are_errors_not_nan_metrics(tmp_path):
    from litebert.errors import DataError, NonFiniteError
    from litebert.sentences.sts import read_scored_pairs
    path = tmp_path / "sts.jsonl"
    path.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "label": 3.0}) + "\n"
                    + json.dumps({"sentence1": "c", "sentence2": "d", "label": "NaN"}) + "\n")
    with pytest.raises(DataError, match="sts.jsonl:2: label .NaN. is not a finite number"):
        read_scored_pairs(str(path), ("sentence1", "sentence2"), "label")
    same = np.ones((4, 8), dtype=np.float32)
    with pytest.raises(NonFiniteError, match="every pair has the same cosine"):
        pair_metrics(same, same, [0.0, 1.0, 2.0, 3.0])


def tiny_cross_encoder(student, path):
    """A regression head (one output) on the student's tokenizer: random, but what --silver accepts."""
    from litebert.heads import AlbertForSequenceClassification

    shutil.copytree(student, path)
    torch.manual_seed(0)
    AlbertForSequenceClassification(AlbertConfig(vocab_size=1000, num_labels=1, **TINY)).save_pretrained(path)
    return path


def test_silver_samples_with_the_pooling_and_length_given_for_its_bi_encoder(student, text_file, tmp_path,
                                                                            monkeypatch):
    """--pooling and --max-length are --model's in every mode of embed; --silver, whose --model is the bi-encoder
    that picks the nearest neighbours, loaded it without them (its directory's mean pooling, 128 tokens)."""
    from litebert.sentences import silver

    cross = tiny_cross_encoder(student, tmp_path / "cross")
    loaded = []

    def recording(path, pooling=None, max_length=None, device="cpu"):
        loaded.append((os.fspath(path), pooling, max_length))
        return load_sentence_model(path, pooling, max_length, device)

    monkeypatch.setattr(silver, "load_sentence_model", recording)
    assert litebert_main(["embed", "--model", str(student), "--silver", str(cross), "--silver-text", str(text_file),
                          "--silver-pairs", "6", "--out", str(tmp_path / "silver.jsonl"), "--pooling", "cls",
                          "--max-length", "24", "--silver-max-length", "48", "--device", "cpu"]) == 0
    assert loaded == [(str(student), "cls", 24)]


def test_the_cross_encoder_labels_silver_pairs_without_recording_gradients(student, tmp_path, monkeypatch):
    """label_pairs lost its @torch.no_grad() to check_cross_encoder, written in between: every chunk's forward kept
    its activations for a backward that never comes (gigabytes for a base cross-encoder on a GPU)."""
    from litebert.heads import AlbertForSequenceClassification
    from litebert.sentences import silver

    cross = tiny_cross_encoder(student, tmp_path / "cross")
    recorded = []

    class Recording(AlbertForSequenceClassification):
        def forward(self, *args, **kwargs):
            recorded.append(torch.is_grad_enabled())
            return super().forward(*args, **kwargs)

    monkeypatch.setattr(silver, "AlbertForSequenceClassification", Recording)
    scores = silver.label_pairs(str(cross), [("A fine day.", "The sea was calm."), ("Yes.", "No.")], 32, 1)
    assert len(scores) == 2 and recorded == [False, False]


def test_silver_scores_keep_the_gold_scale_and_a_wrong_range_is_refused():
    """The cross-encoder's scores were clipped to [0, 1] whatever the gold's scale: on STS 0-5 every similar pair
    became 1, and the concatenated gold + silver file was then divided by 5 (silver squashed to 0-0.2)."""
    from litebert.sentences.silver import clip_to_gold_range
    sts = [3.1, 4.8, 0.4, 2.2, 5.3]
    assert clip_to_gold_range(sts, 0, 5) == ([3.1, 4.8, 0.4, 2.2, 5.0], 1)
    with pytest.raises(ValueError, match="4 of 5 cross-encoder scores lie outside --score-range 0 1"):
        clip_to_gold_range(sts, 0, 1)


def test_silver_refuses_to_write_over_its_own_text_and_bad_options_in_one_line(student, text_file, tmp_path,
                                                                             capsys):
    copy = tmp_path / "corpus.txt"
    shutil.copyfile(text_file, copy)
    (tmp_path / "other.txt").write_text("a text a user wrote\n")
    silver = ["embed", "--model", str(student), "--silver", str(student), "--silver-text", str(copy)]
    for extra, message in (
            (["--out", str(copy)], "is one of the --silver-text files it would be made from"),
            (["--out", str(tmp_path / "other.txt")], "is not a silver pairs file"),
            ([], "--silver needs --out FILE.jsonl"),
            (["--out", str(tmp_path / "s.jsonl"), "--score-range", "5", "0"], "--score-range takes LOW HIGH"),
            (["--out", str(tmp_path / "s.jsonl"), "--score-range", "0"], "--score-range takes LOW HIGH")):
        assert litebert_main(silver + extra) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert litebert_main(["embed", "--model", str(student), "--silver", str(student), "--out",
                          str(tmp_path / "s.jsonl")]) == 2
    assert "--silver needs --silver-text FILE" in capsys.readouterr().err
    assert copy.read_text() == text_file.read_text()
    assert (tmp_path / "other.txt").read_text() == "a text a user wrote\n" and not (tmp_path / "s.jsonl").exists()


def test_the_teacher_cache_is_keyed_by_the_teachers_files_not_its_path(teacher, tmp_path):
    from safetensors.torch import load_file, save_file

    from litebert.sentences.distill import teacher_vectors
    mine = tmp_path / "teacher"
    shutil.copytree(teacher, mine)
    texts, cfg = corpus_lines(8), DistillConfig(distill=str(mine))
    first = teacher_vectors(str(mine), texts, cfg, str(tmp_path / "run"), write=True, progress=False)
    np.testing.assert_array_equal(teacher_vectors(str(mine), texts, cfg, str(tmp_path / "run"), write=True,
                                                  progress=False), first)
    weights = load_file(mine / "model.safetensors")  # the teacher retrained in place
    save_file({k: v * 1.5 if v.dim() == 2 else v for k, v in weights.items()}, mine / "model.safetensors")
    again = teacher_vectors(str(mine), texts, cfg, str(tmp_path / "run"), write=True, progress=False)
    np.testing.assert_allclose(again, load_sentence_model(mine).encode(texts), atol=1e-6)
    assert not np.allclose(again, first, atol=1e-4)


def test_a_tokenizer_saved_without_tokenizers_leaves_no_stale_tokenizer_json(student, tmp_path, monkeypatch):
    from litebert.text import transformers_files
    out = tmp_path / "tok"
    out.mkdir()
    (out / "tokenizer.json").write_text("{}")  # another tokenizer's, as a reused directory holds it

    def missing(tok):
        raise ImportError("no tokenizers")
    monkeypatch.setattr(transformers_files, "fast_tokenizer", missing)
    with pytest.warns(UserWarning) if not transformers_files.albert_tokenizer_agrees(
            Tokenizer.from_pretrained(str(student))) else contextlib.nullcontext():
        transformers_files.save_tokenizer(Tokenizer.from_pretrained(str(student)), str(out))
    assert not (out / "tokenizer.json").exists() and (out / "spiece.model").is_file()
