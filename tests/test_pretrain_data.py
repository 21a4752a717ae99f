"""Pretraining data tests: masking statistics, whole words, SOP order, determinism, bad input."""

from __future__ import annotations

import collections
import gzip
import json
import os

import numpy as np
import pytest

from litebert.corpus.batches import make_batch
from litebert.corpus.dataset import PretrainDataset
from litebert.corpus.documents import resolve_inputs, split_sentences
from litebert.corpus.masking import mask_tokens, select_spans
from litebert.corpus.pairs import InstanceOptions, create_instances
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import DataError

V, MASK = 30000, 4


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tok"))
    train_tokenizer(None, d, vocab_size=2000)
    return d


@pytest.fixture(scope="module")
def data_dir(tok_dir, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("data"))
    prepare(None, d, tok_dir, max_seq_length=64, num_workers=1, progress=False, shard_size=300)
    return d


def _seq(T, specials=(0,), word_starts=None):
    special = np.zeros(T, bool)
    special[list(specials)] = True
    ws = np.ones(T, bool) if word_starts is None else word_starts
    return np.arange(100, 100 + T), ws, special


# ----------------------------------------------------------------------------- masking


def test_mask_rate_and_cap_exact_per_sequence():
    rng = np.random.default_rng(0)
    ids, ws, sp = _seq(128, specials=(0, 60, 127))
    for _ in range(300):
        _, labels = mask_tokens(ids, ws, sp, rng, V, MASK, 0.15, max_predictions_per_seq=80)
        assert (labels != -100).sum() == round(125 * 0.15)  # 15% of the non-special tokens
        assert not (labels[sp] != -100).any()  # never a special token
    ids, ws, sp = _seq(512, specials=(0, 511))
    for _ in range(100):
        _, labels = mask_tokens(ids, ws, sp, rng, V, MASK, 0.15, max_predictions_per_seq=20)
        assert (labels != -100).sum() == 20  # the cap


def test_80_10_10():
    rng = np.random.default_rng(1)
    ids, ws, sp = _seq(256)
    counts = collections.Counter()
    for _ in range(2000):
        masked, labels = mask_tokens(ids, ws, sp, rng, V, MASK, 0.15, max_predictions_per_seq=40)
        pos = labels != -100
        assert (labels[pos] == ids[pos]).all() and (masked[~pos] == ids[~pos]).all()
        counts["mask"] += (masked[pos] == MASK).sum()
        counts["same"] += (masked[pos] == ids[pos]).sum()
        counts["random"] += ((masked[pos] != MASK) & (masked[pos] != ids[pos])).sum()
        assert (masked[pos] >= 5).all() or (masked[pos] == MASK).any()
    n = sum(counts.values())  # ~76k decisions: std of a 10% share is 0.0011
    assert abs(counts["mask"] / n - 0.8) < 0.006
    assert abs(counts["same"] / n - 0.1) < 0.005
    assert abs(counts["random"] / n - 0.1) < 0.005


def test_ngram_distribution_is_one_over_n():
    rng = np.random.default_rng(2)
    _, ws, sp = _seq(512, specials=(0, 255, 511))
    lengths = collections.Counter()
    for _ in range(1500):
        spans = select_spans(ws, sp, rng, 0.15, max_predictions_per_seq=76, max_ngram=3)
        for s, e in spans[:-1]:  # the last span may be shrunk to fit the budget
            lengths[e - s] += 1
    n = sum(lengths.values())
    for k, p in {1: 6 / 11, 2: 3 / 11, 3: 2 / 11}.items():
        assert abs(lengths[k] / n - p) < 0.01, (k, lengths[k] / n, p)
    assert set(lengths) == {1, 2, 3}


def test_whole_words_no_overlap_no_specials():
    rng = np.random.default_rng(3)
    for _ in range(500):
        T = int(rng.integers(8, 200))
        ws = rng.random(T) < 0.6
        specials = [0, T - 1] + ([T // 2] if T > 20 else [])
        _, _, sp = _seq(T, specials=specials)
        spans = select_spans(ws, sp, rng, 0.15, 20, 3)
        covered = np.zeros(T, int)
        for s, e in spans:
            covered[s:e] += 1
            assert ws[s] or sp[s - 1]  # starts a word
            assert e == T or ws[e] or sp[e]  # ends where the next word (or a special) begins
        assert covered.max(initial=0) <= 1  # no overlap
        assert not covered[sp].any()
        assert covered.sum() == min(20, max(1, round((~sp).sum() * 0.15))) or covered.sum() <= 20


def test_mask_tokens_deterministic_given_rng():
    ids, ws, sp = _seq(64)
    a = mask_tokens(ids, ws, sp, np.random.default_rng(7), V, MASK)
    b = mask_tokens(ids, ws, sp, np.random.default_rng(7), V, MASK)
    assert all((x == y).all() for x, y in zip(a, b))


# ----------------------------------------------------------------------------- instances


def _doc(k, n_sent=6, L=9):
    """Document k: sentence j holds increasing ids, so order inside a document is readable from the ids."""
    base = 1000 * (k + 1)
    return [np.arange(base + 100 * j, base + 100 * j + L, dtype=np.int32) for j in range(n_sent)]


@pytest.mark.parametrize("pair_task", ["sop", "nsp", "none"])
def test_pair_labels_match_segment_order(pair_task):
    docs = [_doc(k, n_sent=int(3 + k % 5), L=int(5 + 3 * (k % 4))) for k in range(12)] + [[np.arange(1, 200)] * 2]
    ws = np.ones(100_000, bool)
    opt = InstanceOptions(max_seq_length=40, pair_task=pair_task)
    labels = collections.Counter()
    rng = np.random.default_rng(4)
    for _ in range(20):
        for j, d in enumerate(docs):
            for a, b, label in create_instances(d, j, docs, ws, rng, opt, collections.Counter()):
                labels[label] += 1
                assert len(a) + (0 if b is None else len(b)) <= 40 - (2 if b is None else 3)
                if pair_task == "none":
                    assert b is None and label == -100
                    continue
                same_doc = a[0] // 1000 == b[0] // 1000
                if pair_task == "sop":
                    assert same_doc  # never an NSP negative inside SOP data
                    assert (a.max() < b.min()) == (label == 0) and (a.min() > b.max()) == (label == 1)
                else:
                    assert same_doc == (label == 0)
                    if label == 0:
                        assert a.max() < b.min()
                    else:  # a random B from an earlier document: held-out documents, the last, lend none
                        doc_of = lambda x: x[0] // 1000 - 1 if x[0] >= 1000 else 12  # noqa: E731
                        assert doc_of(b) < doc_of(a) == j
    if pair_task == "sop":
        assert 0.45 < labels[1] / (labels[0] + labels[1]) < 0.55
    elif pair_task == "nsp":  # as the original, one-sentence chunks always get a random B: more than half are 1
        assert 0.45 < labels[1] / (labels[0] + labels[1]) < 0.75


def test_split_sentences():
    assert split_sentences('Mr. Elliot came. "Yes!" said Anne. Then J. Smith left? No.') == \
        ["Mr. Elliot came.", '"Yes!"', "said Anne.", "Then J. Smith left?", "No."] or \
        split_sentences('Mr. Elliot came. "Yes!" said Anne.')[0] == "Mr. Elliot came."


# ----------------------------------------------------------------------------- shards


def test_dataset_and_batches(data_dir, tok_dir):
    from litebert.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(tok_dir)
    ds = PretrainDataset(data_dir, tok)
    meta = json.load(open(os.path.join(data_dir, "meta.json")))
    assert len(ds) == meta["num_instances"] > 300 and len(meta["shards"]) >= 2
    assert meta["tokenizer_sha256"] == tok.sha256 and meta["args"]["max_seq_length"] == 64
    item = ds[len(ds) - 1]
    ids = item["input_ids"]
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id and len(ids) <= 64
    assert (ids == tok.sep_id).sum() == 2 and item["sentence_order_label"] in (0, 1)
    first_b = int(np.argmax(item["token_type_ids"]))
    assert ids[first_b - 1] == tok.sep_id
    batch = make_batch(ds, [0, 5, 7], seed=1, stream=0, position=3, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                       max_seq_length=64)
    again = make_batch(ds, [0, 5, 7], seed=1, stream=0, position=3, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                       max_seq_length=64)
    other = make_batch(ds, [0, 5, 7], seed=1, stream=0, position=4, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                       max_seq_length=64)
    assert all((batch[k] == again[k]).all() for k in batch)
    assert not (batch["input_ids"] == other["input_ids"]).all()
    # an example's masks are its position's, whatever micro-batch holds it (world size, accumulation)
    tail = make_batch(ds, [5, 7], seed=1, stream=0, position=4, vocab_size=tok.vocab_size, mask_id=tok.mask_id,
                      max_seq_length=64)
    width = tail["input_ids"].shape[1]
    for key in ("input_ids", "labels"):
        assert (batch[key][1:, :width] == tail[key]).all()
    assert batch["input_ids"].shape[1] == max(len(ds[i]["input_ids"]) for i in (0, 5, 7))
    assert ((batch["labels"] != -100).sum(1) >= 1).all()
    assert (batch["input_ids"][batch["attention_mask"] == 0] == tok.pad_id).all()
    padded = make_batch(ds, [0], 1, 0, 0, tok.vocab_size, tok.mask_id, 64, pad_to_max_length=True)
    assert padded["input_ids"].shape == (1, 64)


def test_refuses_other_tokenizer(data_dir, tmp_path):
    other = train_tokenizer(None, str(tmp_path), vocab_size=1500)
    with pytest.raises(DataError, match="another tokenizer"):
        PretrainDataset(data_dir, other)


def test_same_inputs_and_seed_give_identical_shards(tok_dir, tmp_path):
    metas = []
    for name, workers in [("a", 1), ("b", 2)]:
        metas.append(prepare(None, str(tmp_path / name), tok_dir, max_seq_length=96, num_workers=workers,
                             progress=False, chunk_chars=60_000, static_masking=True, dupe_factor=2))
    files = sorted(f for f in os.listdir(tmp_path / "a") if f.endswith(".npy"))
    assert files and files == sorted(f for f in os.listdir(tmp_path / "b") if f.endswith(".npy"))
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    ds = PretrainDataset(str(tmp_path / "a"))
    assert ds.static and (ds[0]["labels"] != -100).any()
    b = make_batch(ds, [0, 1], 0, 0, 0, 2000, 4, 96)
    assert (b["labels"][0, : len(ds[0]["labels"])].numpy() == ds[0]["labels"]).all()


def test_inputs_jsonl_gz_paragraphs_and_bad_bytes(tok_dir, tmp_path):
    para = "Anne walked to the shop. She bought bread. Then she came home again. It was late."
    with gzip.open(tmp_path / "docs.jsonl.gz", "wt", encoding="utf-8") as f:
        for k in range(30):
            f.write(json.dumps({"text": para + "\n" + para}) + "\n")
        f.write("not json\n")
    raw = ("\n".join(split_sentences(para)) + "\n\n").encode() * 20 + b"bad \xff\xfe bytes\n" + b"Lonely sentence.\n"
    (tmp_path / "plain.txt").write_bytes(raw)
    meta = prepare([str(tmp_path / "*.gz"), str(tmp_path / "plain.txt")], str(tmp_path / "out"), tok_dir,
                   max_seq_length=32, num_workers=1, progress=False)
    s = meta["stats"]
    assert s["skipped_bad_json_lines"] == 1 and s["skipped_non_utf8_lines"] == 1
    assert s["documents"] == 51 and meta["num_instances"] > 0


def test_a_bom_and_a_corrupt_gzip_in_a_corpus(tmp_path):
    """A BOM made line 1 of a JSONL corpus bad JSON (its document lost, counted as a bad line); a corrupt
    deflate stream was a zlib.error traceback, not a one-line DataError."""
    from litebert.corpus.documents import iter_documents
    rows = [{"text": "First doc. It has two."}, {"text": "Second doc. Also two."}]
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in rows).encode())
    stats = collections.Counter()
    assert list(iter_documents([str(tmp_path / "bom.jsonl")], stats=stats)) == [
        ["First doc.", "It has two."], ["Second doc.", "Also two."]]
    assert stats["skipped_bad_json_lines"] == 0
    blob = gzip.compress(("The sea was calm. " * 200).encode())
    (tmp_path / "flipped.txt.gz").write_bytes(blob[:12] + bytes(b ^ 0xFF for b in blob[12:30]) + blob[30:])
    with pytest.raises(DataError, match="cannot read .*flipped.txt.gz"):
        list(iter_documents([str(tmp_path / "flipped.txt.gz")]))


def test_bad_input_messages(tok_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="no input files match"):
        prepare([str(tmp_path / "missing.txt")], str(tmp_path / "o"), tok_dir, progress=False)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match="no text found"):
        prepare([str(tmp_path / "empty.txt")], str(tmp_path / "o"), tok_dir, num_workers=1, progress=False)
    (tmp_path / "one.txt").write_text("Just one sentence here.\n\nAnd another lonely one.\n")
    with pytest.raises(DataError, match="one_sentence_docs=2"):  # NSP: one-sentence documents give no pair
        prepare([str(tmp_path / "one.txt")], str(tmp_path / "o"), tok_dir, num_workers=1, progress=False,
                pair_task="nsp", dupe_factor=3)  # counted once per document, not per copy
    meta = prepare([str(tmp_path / "one.txt")], str(tmp_path / "o"), tok_dir, num_workers=1, progress=False)
    assert meta["stats"]["sop_split_inside_sentence"] == meta["num_instances"] == 2  # SOP: cut inside it
    long_line = " ".join(["word"] * 3000)
    (tmp_path / "long.txt").write_text(f"{long_line}\nShort one.\n{long_line}\n")
    meta = prepare([str(tmp_path / "long.txt")], str(tmp_path / "o"), tok_dir, max_seq_length=32, num_workers=2,
                   progress=False)
    assert meta["stats"]["long_sentences_truncated"] >= 1
    assert all(len(PretrainDataset(str(tmp_path / "o"))[i]["input_ids"]) <= 32 for i in range(meta["num_instances"]))


def test_cli_prepare_one_line_errors(tok_dir, tmp_path, capsys):
    from litebert.cli import main

    assert main(["prepare", str(tmp_path / "nope.txt"), "--tokenizer", tok_dir, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no input files match" in err and len(err.splitlines()) == 1
    assert main(["prepare", "--tokenizer", tok_dir, "--out", str(tmp_path / "d"), "--no-progress",
                 "--max-seq-length", "64", "--num-workers", "1"]) == 0
    assert "examples" in capsys.readouterr().out


def _jsonl(path, field="text", n=30):
    para = "Anne walked to the shop. She bought bread. Then she came home again. It was late."
    path.write_text("".join(json.dumps({"id": k, field: para}) + "\n" for k in range(n)))
    return str(path)


@pytest.mark.parametrize("flag,value,message", [  # each flag's declared range, or the rule check_options adds
    ("--masked-lm-prob", "2", "--masked-lm-prob must be in (0, 1], got 2.0"),
    ("--masked-lm-prob", "-1", "--masked-lm-prob must be in (0, 1], got -1.0"),
    ("--masked-lm-prob", "0", "--masked-lm-prob must be in (0, 1], got 0.0"),
    ("--max-predictions-per-seq", "0", "--max-predictions-per-seq must be in [1, inf), got 0"),
    ("--short-seq-prob", "1.5", "--short-seq-prob must be in [0, 1], got 1.5"),
    ("--dupe-factor", "0", "--dupe-factor must be in [1, inf), got 0"),
    ("--max-seq-length", "4", "max_seq_length must be in [5, 65536], got 4"),  # [CLS] A [SEP] B [SEP] needs 5
    ("--shard-size", "0", "--shard-size must be in [1, inf), got 0"),
    ("--seed", "-3", "--seed must be in [0, 4294967295], got -3"),
    ("--pair-task none --max-seq-length", "3", "--max-seq-length must be in [4, 65536], got 3"),
])
def test_cli_prepare_rejects_out_of_range_options(tok_dir, tmp_path, capsys, flag, value, message):
    from litebert.cli import main

    out = tmp_path / "out"
    assert main(["prepare", _jsonl(tmp_path / "docs.jsonl"), "--tokenizer", tok_dir, "--out", str(out),
                 "--no-progress", "--num-workers", "1", *flag.split(), value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"litebert prepare: error: {message}"
    assert not out.exists()  # refused before anything is written


def test_the_shortest_unpaired_examples_are_made(tok_dir, tmp_path):
    """--pair-task none at its minimum length, with every target shortened: [CLS] A [SEP], A of 2 tokens."""
    meta = prepare([_jsonl(tmp_path / "docs.jsonl")], str(tmp_path / "out"), tok_dir, max_seq_length=4,
                   pair_task="none", short_seq_prob=1.0, num_workers=1, progress=False)
    data = PretrainDataset(str(tmp_path / "out"))
    assert meta["num_instances"] > 0 and {len(data[i]["input_ids"]) for i in range(len(data))} == {4}


def test_jsonl_missing_text_field_is_named_and_loses_nothing(tok_dir, tmp_path):
    out = str(tmp_path / "out")
    docs = _jsonl(tmp_path / "docs.jsonl")
    meta = prepare([docs], out, tok_dir, max_seq_length=32, num_workers=1, progress=False)
    before = {f: (tmp_path / "out" / f).read_bytes() for f in os.listdir(out)}
    # Every record lacks the field: an error naming the file, the field and the keys there are.
    wrong = _jsonl(tmp_path / "body.jsonl", field="body")
    with pytest.raises(DataError, match=r"body\.jsonl: no record has the text field 'text'; its records have the "
                                         r"keys \['id', 'body'\]") as e:
        prepare([wrong], out, tok_dir, max_seq_length=32, num_workers=1, progress=False)
    assert "\n" not in str(e.value)
    assert {f: (tmp_path / "out" / f).read_bytes() for f in os.listdir(out)} == before  # the old run is intact
    # Some records lack it: counted under their own name, apart from bad JSON.
    with open(docs, "a") as f:
        f.write(json.dumps({"body": "x"}) + "\n" + json.dumps({"body": "y"}) + "\nnot json\n")
    meta = prepare([docs], out, tok_dir, max_seq_length=32, num_workers=1, progress=False)
    assert meta["stats"]["skipped_missing_text_field"] == 2 and meta["stats"]["skipped_bad_json_lines"] == 1


def test_a_run_failing_after_writing_shards_leaves_the_old_dataset_intact(tok_dir, tmp_path):
    """The new dataset is written beside the old one and swapped in only when complete."""
    out = str(tmp_path / "out")
    prepare(None, out, tok_dir, max_seq_length=64, num_workers=1, progress=False, shard_size=300)
    before = {f: (tmp_path / "out" / f).read_bytes() for f in os.listdir(out)}
    # Real text, then a truncated gzip stream: shards are flushed before the read fails.
    corpus = resolve_inputs(None)[0]
    with (gzip.open if corpus.endswith(".gz") else open)(corpus, "rt", encoding="utf-8") as f:
        text = f.read(400_000)
    blob = gzip.compress(text.encode("utf-8"))
    (tmp_path / "bad.gz").write_bytes(blob[: len(blob) - 20])
    with pytest.raises(DataError, match="cannot read .*bad.gz"):
        prepare([str(tmp_path / "bad.gz")], out, tok_dir, max_seq_length=32, num_workers=1, progress=False,
                shard_size=50, chunk_chars=5_000)
    assert {f: (tmp_path / "out" / f).read_bytes() for f in os.listdir(out)} == before
    meta = prepare(None, out, tok_dir, max_seq_length=48, num_workers=1,
                   progress=False, shard_size=300)  # a successful rerun replaces it, with nothing left over
    assert sorted(os.listdir(out)) == sorted(
        ["meta.json", "vocab_word_starts.npy", "vocab_special.npy"]
        + [f"{s['name']}.{k}.npy" for s in meta["shards"] for k in ("input_ids", "offsets", "b_start", "label", "doc")])
