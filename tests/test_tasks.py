"""Task readers on hand-written files in the official layouts, the registry, featurizers and collate."""

import json
import re
from pathlib import Path

import pytest
import torch
from fixtures.tokenizers import FakeTokenizer, train_tiny_tokenizer
from paths import SHARED_DATA

from litebert import tasks as T
from litebert.errors import ConfigError
from litebert.tasks import features as FT

FIX = Path(__file__).parent / "fixtures"
GLUE = FIX / "glue"
SHARED = SHARED_DATA / "tasks"


# ----------------------------------------------------------------------------------------------------------------
# GLUE


def glue(name, split, **kw):
    return T.read_task(name, GLUE / T.TASKS[name].directory, split, **kw)


@pytest.mark.parametrize("name,split,count,text_a,text_b,label", [
    # CoLA train has no header (source, label, original mark, sentence); its test file has one
    ("CoLA", "train", 3, "Our friends won't buy this analysis,", None, "1"),
    ("CoLA", "test", 2, "Bill whistled past the house.", None, None),
    ("SST-2", "dev", 2, "it 's a charming and often affecting journey . ", None, "1"),  # the trailing space is data
    # a BOM on the header, bare double quotes inside the fields (no CSV quoting in GLUE files)
    ("MRPC", "train", 2, 'Amrozi accused his brother , whom he called " the witness "', 'Referring to him as only "', "1"),
    ("MRPC", "test", 1, "PCCW 's chief operating officer", "Current Chief Operating Officer", None),
    ("STS-B", "dev", 2, "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0),
    ("STS-B", "test", 1, "A girl is styling her hair.", "A girl is brushing her hair.", None),
    ("QQP", "test", 1, "Why am I mentally very lonely?", "Find the remainder when [math]23^{24}[/math]", None),
    ("MNLI-m", "train", 2, "Conceptually cream skimming", "Product and geography", "neutral"),
    ("MNLI-m", "dev", 2, "The new rights are nice enough", "Everyone really likes", "neutral"),  # gold_label, col 16
    ("MNLI-mm", "dev", 1, "Your contribution helped", "Your contributions were of no help", "contradiction"),
    ("MNLI-m", "test", 2, "Hierbas, ans seco, ans dulce,", "Hierbas is a name worth looking out for.", None),
    ("QNLI", "dev", 2, "What came into force", "As of that day,", "entailment"),
    ("RTE", "dev", 1, "Dana Reeve, the widow", "Christopher Reeve had an accident.", "not_entailment"),
    ("WNLI", "dev", 1, "The drain is clogged with hair.", "The hair has to be cleaned.", "0"),
    ("AX", "test", 1, "The cat sat on the mat.", "The cat did not sit on the mat.", None),
])
def test_glue_readers(name, split, count, text_a, text_b, label):
    examples = glue(name, split)
    assert len(examples) == count and examples.skipped == []
    first = examples[0]
    assert first.id == "0" and first.text_a.startswith(text_a) and first.label == label
    assert first.text_b is None if text_b is None else first.text_b.startswith(text_b)


def test_glue_registry_metrics_and_labels():
    assert T.TASKS["CoLA"].metrics == ("mcc",)
    assert T.TASKS["MRPC"].metrics == T.TASKS["QQP"].metrics == ("accuracy", "f1")
    assert T.TASKS["STS-B"].kind == "regression" and T.TASKS["STS-B"].metrics == ("pearson", "spearman")
    assert T.TASKS["MNLI-m"].labels == ("contradiction", "entailment", "neutral")
    assert glue("STS-B", "dev")[1].label == 4.75
    assert [e.label for e in glue("CoLA", "train")] == ["1", "0", "1"]


def test_glue_malformed_row_raises_with_file_and_line_or_is_counted(caplog):
    with pytest.raises(T.DataError, match=r"QQP/train\.tsv:4: expected 6 .*found 4"):
        glue("QQP", "train")
    examples = glue("QQP", "train", errors="skip")
    assert [e.id for e in examples] == ["133273", "402555", "150662"]
    assert len(examples.skipped) == 1 and "train.tsv:4" in examples.skipped[0]
    assert "skipped 1 of 4 records" in caplog.text


def test_glue_submission_files(tmp_path):
    examples = glue("MNLI-m", "test")
    path = T.write_glue_predictions(tmp_path, "MNLI-m", examples, [1, 2])
    assert path.name == "MNLI-m.tsv"
    assert path.read_text() == "index\tprediction\n0\tentailment\n1\tneutral\n"
    path = T.write_glue_predictions(tmp_path / "sts.tsv", "STS-B", glue("STS-B", "test"), [3.14159])
    assert path.read_text() == "index\tprediction\n0\t3.142\n"
    assert T.write_glue_predictions(tmp_path, "AX", glue("AX", "test"), [0]).name == "AX.tsv"
    with pytest.raises(ValueError, match="2 examples but 1"):
        T.write_glue_predictions(tmp_path, "MNLI-m", examples, [0])
    # a model whose labels are not the task's: refused by name (was a ValueError traceback from int('pos'), or
    # an IndexError for '7')
    for wrong in ("pos", "7"):
        with pytest.raises(ConfigError, match=f"the model predicts '{wrong}', which is not a label of task MNLI-m"):
            T.write_glue_predictions(tmp_path, "MNLI-m", examples, [wrong, "neutral"])


# ----------------------------------------------------------------------------------------------------------------
# generic tables and bad input


def test_csv_with_quoting_and_jsonl_never_reads_other_fields(tmp_path):
    csv_file = tmp_path / "data.csv"
    csv_file.write_text('text,label,title\n"Hello, world",pos,secret\n"two\nlines",neg,secret\n', encoding="utf-8")
    examples = T.read_table(csv_file, ["text"], "label")
    assert [(e.text_a, e.label) for e in examples] == [("Hello, world", "pos"), ("two\nlines", "neg")]
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text('{"id": "a", "text": "x", "label": 1, "title": "Emma"}\n\n{"id": "b", "text": "y", "label": 0}\n')
    examples = T.read_table(jsonl, ["text"], "label", id_column="id")
    assert examples == [T.TextExample("a", "x", None, "1"), T.TextExample("b", "y", None, "0")]
    assert "Emma" not in repr(examples)
    assert T.label_list(examples) == ["0", "1"]


def test_unseen_label_and_bad_json_name_file_and_line(tmp_path):
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "zzz"}\n{"text": "c", "label"\n')
    with pytest.raises(T.DataError, match=r"dev\.jsonl:2: label 'zzz' is not one of \['x', 'y'\]"):
        T.read_table(jsonl, ["text"], "label", labels=["x", "y"])
    skipped = T.read_table(jsonl, ["text"], "label", labels=["x", "y"], errors="skip")
    assert len(skipped) == 1 and len(skipped.skipped) == 2
    assert "dev.jsonl:3: invalid JSON" in skipped.skipped[1]
    with pytest.raises(T.DataError, match=r"dev\.jsonl:1: missing field 'sentence'"):
        T.read_table(jsonl, ["sentence"], "label")
    tsv = tmp_path / "x.tsv"
    tsv.write_text("a\tb\n1\t2\n")
    with pytest.raises(T.DataError, match=r"x\.tsv:1: no column 'label'"):
        T.read_table(tsv, ["a"], "label")
    custom = T.Task("mine", "classification", "table", {"dev": "dev.jsonl"}, ("text",), "label")
    assert len(T.read_task(custom, tmp_path, "dev", errors="skip", labels=["x"])) == 1  # "zzz" and bad JSON skipped
    with pytest.raises(ValueError, match="errors must be"):
        T.read_table(tsv, ["a"], errors="ignore")


# ----------------------------------------------------------------------------------------------------------------
# multiple choice and tagging readers


def test_race_reader():
    examples = T.read_task("race", FIX / "race", "dev")
    assert [(e.id, e.label) for e in examples] == [("middle/middle17.txt-0", 1), ("middle/middle17.txt-1", 3),
                                                   ("high/high4.txt-0", 0)]
    assert examples[1].options[3] == "Tom's teacher"
    # ALBERT's race_utils: the option fills the question's blank
    assert FT.choice_pair(examples[1].context, examples[1].question, "Mary") == (
        examples[1].context, "Mary asked Tom to stay after class.")
    second = FT.choice_pair(examples[0].context, examples[0].question, "at home")[1]
    assert second == "Where does the story happen? at home"


def test_race_bad_answer_names_file_and_question(tmp_path):
    (tmp_path / "high").mkdir()
    (tmp_path / "high" / "1.txt").write_text(json.dumps({"id": "high1.txt", "article": "A.", "questions": ["q1", "q2"],
                                                         "options": [["a", "b"], ["c", "d"]], "answers": ["A", "E"]}))
    with pytest.raises(T.DataError, match=r"1\.txt: questions\[1\]: answer 'E'"):
        T.read_race(tmp_path)
    assert len(T.read_race(tmp_path, errors="skip")) == 1


@pytest.mark.parametrize("article, problem", [
    ({"question": ["q1"], "options": [["a", "b"]], "answers": ["A"]}, "questions should be a non-empty list, got nothing"),
    ({"questions": [], "options": [], "answers": []}, "questions should be a non-empty list, got []"),
    ({"questions": ["q1"], "options": [["a", "b"], ["c", "d"]], "answers": ["A", "B"]},
     "1 questions but 2 option lists and 2 answers")])
def test_a_race_article_whose_questions_would_be_lost_is_a_bad_record(tmp_path, article, problem):
    """A misspelt "questions" key, an empty list or extra option lists were read as nothing, not counted."""
    (tmp_path / "high").mkdir()
    (tmp_path / "high" / "1.txt").write_text(json.dumps({"id": "high1.txt", "article": "A.", **article}))
    with pytest.raises(T.DataError, match=re.escape(problem)):
        T.read_race(tmp_path)


def test_a_table_label_with_spaces_around_it_is_the_label(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nIt rained.\tneg \nIt shone.\t pos\nIt poured.\tneg\n")
    examples = T.read_table(tmp_path / "train.tsv", ["sentence"], "label")
    assert T.label_list(examples) == ["neg", "pos"]


def test_swag_reader():
    examples = T.read_task("swag", FIX / "swag", "dev")
    assert len(examples) == 2 and examples[0].id == "19974" and examples[0].label == 2
    assert (examples[0].context, examples[0].question) == ("Students lower their eyes nervously.", "She")
    assert FT.choice_pair(examples[0].context, examples[0].question, examples[0].options[2]) == (
        "Students lower their eyes nervously.", "She walks slowly towards someone.")


def test_choice_jsonl_reader(tmp_path):
    f = tmp_path / "mc.jsonl"
    f.write_text('{"id": "q", "question": "a cat", "options": ["feline", "dog"], "label": 0}\n'
                 '{"id": "r", "question": "x", "options": ["a", "b"], "label": 2}\n')
    with pytest.raises(T.DataError, match=r"mc\.jsonl:2: label 2 is not an index into 2 options"):
        T.read_choice_jsonl(f)
    assert T.read_choice_jsonl(f, errors="skip") == [T.ChoiceExample("q", "", "a cat", ["feline", "dog"], 0)]
    assert FT.choice_pair("", "a cat", "feline") == ("a cat", "feline")


def test_conll_reader(tmp_path):
    examples = T.read_task("conll2003", FIX / "conll", "train")
    assert len(examples) == 3  # -DOCSTART- and its blank line are not a sentence
    assert examples[0].id == "train.txt:3"
    assert examples[0].words[:3] == ["EU", "rejects", "German"] and examples[0].tags[:3] == ["B-ORG", "O", "B-MISC"]
    assert examples[1] == T.TagExample("train.txt:13", ["Peter", "Blackburn"], ["B-PER", "I-PER"])
    bad = tmp_path / "bad.txt"
    bad.write_text("a B-X\nb\n\nc O\n")
    with pytest.raises(T.DataError, match=r"bad\.txt:2: expected a word and a tag"):
        T.read_conll(bad)
    assert [e.words for e in T.read_conll(bad, errors="skip")] == [["c"]]
    unseen = tmp_path / "unseen.txt"
    unseen.write_text("a B-X\n\nb I-X\nc O\n")
    with pytest.raises(T.DataError, match=r"unseen\.txt:4: tag 'O' is not one of"):
        T.read_conll(unseen, labels=["B-X", "I-X"])


# ----------------------------------------------------------------------------------------------------------------
# the shared datasets: documented counts


@pytest.mark.skipif(not SHARED.exists(), reason="shared task data not present")
@pytest.mark.parametrize("name,counts", [
    ("novel_authorship", (5386, 746, 767)), ("bible_paraphrase", (12000, 2000, 2000)),
    ("wordnet_qa", (8000, 1000, 1000)), ("wordnet_defmc", (12000, 1500, 1500))])
def test_shared_datasets_counts(name, counts):
    for split, count in zip(("train", "dev", "test"), counts):
        examples = T.read_task(name, SHARED / name, split)
        assert (len(examples), examples.skipped) == (count, [])
    if T.TASKS[name].labels:
        assert T.label_list(examples) == list(T.TASKS[name].labels)


# ----------------------------------------------------------------------------------------------------------------
# featurizers and collate


def test_featurize_classification_single_pair_regression():
    tok = FakeTokenizer()
    pair = T.TextExample("0", "aa bb", "cc dd ee", "entailment")
    f, = FT.featurize_classification([pair], tok, 16, ["contradiction", "entailment"])
    assert f.input_ids[0] == tok.cls_id and f.input_ids.count(tok.sep_id) == 2
    assert f.token_type_ids == [0, 0, 0, 0, 1, 1, 1, 1] and f.label == 1
    f, = FT.featurize_classification([T.TextExample("0", "a b c d e f g h")], tok, 5, ["x"])
    assert len(f.input_ids) == 5 and f.token_type_ids == [0] * 5 and f.label is None
    f, = FT.featurize_classification([T.TextExample("0", "a", "b", 4.75)], tok, 8, None)
    assert f.label == 4.75
    with pytest.raises(ValueError, match="label 'maybe'"):
        FT.featurize_classification([T.TextExample("7", "a", None, "maybe")], tok, 8, ["yes", "no"])


def test_featurize_tags_labels_first_subtoken_only():
    tok = FakeTokenizer(piece=3)
    example = T.TagExample("s", ["Washington", "is", "in", "USA"], ["B-LOC", "O", "O", "B-LOC"])
    labels = ["O", "B-LOC", "I-LOC"]
    f, = FT.featurize_tags([example], tok, 32, labels)
    pieces = [tok.piece_of(i) for i in f.input_ids]
    assert pieces == ["[CLS]", "Was", "hin", "gto", "n", "is", "in", "USA", "[SEP]"]
    assert f.label == [-100, 1, -100, -100, -100, 0, 0, 1, -100]
    assert f.word_ids == [None, 0, 0, 0, 0, 1, 2, 3, None]
    assert FT.word_predictions(f.word_ids, [0, 1, 2, 2, 2, 0, 0, 1, 0], 4, labels) == example.tags
    short, = FT.featurize_tags([example], tok, 6, labels)  # 4 tokens fit: the last two words are cut off
    assert short.label == [-100, 1, -100, -100, -100, -100] and short.word_ids[-2] == 0
    assert FT.word_predictions(short.word_ids, [0, 1, 0, 0, 0, 0], 4, labels) == ["B-LOC", "O", "O", "O"]


def test_scoring_tags_says_how_many_words_max_length_cut_off(caplog):
    """Words past --max-length are predicted O and scored against their gold tags: said in a warning, counted."""
    from litebert.tasks.families import FAMILIES, FeatureSettings
    tok, labels = FakeTokenizer(piece=3), ["O", "B-LOC", "I-LOC"]
    example = T.TagExample("s", ["Washington", "is", "in", "USA"], ["B-LOC", "O", "O", "B-LOC"])
    short, = FT.featurize_tags([example], tok, 6, labels)
    scores = [torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 0, 0, 0]), 3).float().numpy()]
    tagging = FAMILIES["tagging"]
    with caplog.at_level("WARNING"):
        scored = tagging.score(T.TASKS["conll2003"], [example], [short], scores, labels, FeatureSettings(max_length=6))
    assert scored.predictions == [["B-LOC", "O", "O", "O"]]
    assert "3 of 4 words (in 1 of 1 sentences) lie past --max-length 6" in caplog.text


def test_collate_pads_and_types():
    tok = FakeTokenizer()
    feats = FT.featurize_classification([T.TextExample("0", "a b c", None, "1"), T.TextExample("1", "d", None, "0")],
                                       tok, 16, ["0", "1"])
    batch = FT.collate(feats, pad_id=tok.pad_id)
    assert batch["input_ids"].shape == (2, 5) and batch["input_ids"].dtype == torch.int64
    assert batch["input_ids"][1].tolist()[3:] == [tok.pad_id, tok.pad_id]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["labels"].tolist() == [1, 0] and batch["labels"].dtype == torch.int64
    reg = FT.collate(FT.featurize_classification([T.TextExample("0", "a", "b", 2.5)], tok, 8, None))
    assert reg["labels"].dtype == torch.float32
    tags = FT.featurize_tags([T.TagExample("a", ["x"], ["O"]), T.TagExample("b", ["y", "z"], ["O", "O"])], tok, 8, ["O"])
    assert FT.collate(tags)["labels"].tolist() == [[-100, 0, -100, -100], [-100, 0, 0, -100]]
    unlabelled = FT.featurize_classification([T.TextExample("0", "a")], tok, 8, ["0"])
    assert "labels" not in FT.collate(unlabelled)
    with pytest.raises(ValueError, match="mixes labelled"):
        FT.collate(feats + unlabelled)


def test_featurize_choices_and_collate_to_b_c_t():
    tok = FakeTokenizer()
    examples = [T.ChoiceExample("0", "ctx here", "q _ end", ["x", "yy zz"], 1),
                T.ChoiceExample("1", "", "the cat", ["w", "v"], 0)]
    feats = FT.featurize_choices(examples, tok, 16)
    assert len(feats[0].input_ids) == 2 and feats[0].label == 1
    pieces = [tok.piece_of(i) for i in feats[0].input_ids[0]]
    assert pieces == ["[CLS]", "ctx", "her", "e", "[SEP]", "q", "x", "end", "[SEP]"]  # the option fills the blank
    assert feats[1].token_type_ids[0] == [0, 0, 0, 0, 1, 1]  # [CLS] the cat [SEP] w [SEP]
    batch = FT.collate(feats)
    assert batch["input_ids"].shape[:2] == (2, 2) and batch["labels"].tolist() == [1, 0]
    assert batch["attention_mask"].sum().item() == sum(len(r) for f in feats for r in f.input_ids)


# ----------------------------------------------------------------------------------------------------------------
# the real tokenizer


@pytest.fixture(scope="module")
def real_tok(tmp_path_factory):
    return train_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def test_classification_features_match_real_tokenizer(real_tok):
    examples = [T.TextExample("0", "Anne Elliot was a lady.", "Sir Walter was vain, and proud of it!", "1"),
                T.TextExample("1", "It was a truth universally acknowledged.", None, "0")]
    feats = FT.featurize_classification(examples, real_tok, 12, ["0", "1"])
    expected = real_tok([e.text_a for e in examples[:1]], [examples[0].text_b], max_length=12)
    assert feats[0].input_ids == expected["input_ids"][0]
    assert feats[0].token_type_ids == expected["token_type_ids"][0]
    assert feats[1].input_ids == real_tok.encode(examples[1].text_a, max_length=12)
    assert set(feats[1].token_type_ids) == {0}


def test_choice_features_match_real_tokenizer(real_tok):
    example = T.ChoiceExample("0", "Anne walked to Uppercross.", "Where did _ go?", ["Anne", "Mary"], 1)
    f, = FT.featurize_choices([example], real_tok, 10)
    expected = real_tok([example.context] * 2, ["Where did Anne go?", "Where did Mary go?"], max_length=10)
    assert f.input_ids == expected["input_ids"] and f.token_type_ids == expected["token_type_ids"]


def test_tag_alignment_with_real_tokenizer(real_tok):
    words = ["Sir", "Walter", "Elliot,", "of", "Kellynch-Hall,", "in", "Somersetshire"]
    example = T.TagExample("s", words, ["O", "B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC"])
    f, = FT.featurize_tags([example], real_tok, 64, ["O", "B-PER", "I-PER", "B-LOC"])
    text, starts = " ".join(words), [sum(len(w) + 1 for w in words[:j]) for j in range(len(words))]
    ids, offsets = real_tok.encode_with_offsets(text)
    labelled = [k for k, lab in enumerate(f.label) if lab != -100]
    assert len(labelled) == len(words)  # exactly one labelled token per word
    for j, k in enumerate(labelled):
        s, e = offsets[k - 1]  # shift for [CLS]
        assert f.word_ids[k] == j and starts[j] <= s < starts[j] + len(words[j])
    assert FT.word_predictions(f.word_ids, f.label, len(words), ["O", "B-PER", "I-PER", "B-LOC"]) == example.tags


def test_a_word_that_normalises_to_nothing_does_not_take_the_next_words_token(real_tok):
    """A zero-width space is a word of its own that no token covers: the next token's span starts inside it, and
    matched by its first character that token went to the empty word, leaving the next word without a label."""
    words, tags = ["a", "\u200b", "Elliot"], ["O", "O", "B-PER"]
    labels = ["O", "B-PER"]
    f, = FT.featurize_tags([T.TagExample("z", words, tags)], real_tok, 32, labels)
    assert FT.word_predictions(f.word_ids, f.label, len(words), labels) == ["O", "O", "B-PER"]


# ----------------------------------------------------------------------------------------------------------------
# gzipped files, unlabelled test tables, GLUE submission directories

BUNDLED = Path(T.__file__).parents[1] / "data" / "novel_authorship"


def test_bundled_gzipped_task_reads_like_the_plain_files():
    """Regression: litebert/data/novel_authorship ships {split}.jsonl.gz, which `--data-dir` could not read."""
    for split, count in zip(("train", "dev", "test"), (5386, 746, 767)):
        examples = T.read_task("novel_authorship", BUNDLED, split)
        assert (len(examples), examples.skipped) == (count, [])
    assert T.label_list(examples) == list(T.TASKS["novel_authorship"].labels)
    if (SHARED / "novel_authorship").exists():  # the plain copy it was made from
        assert examples == T.read_task("novel_authorship", SHARED / "novel_authorship", "test")


def test_gzipped_csv_and_conll(tmp_path):
    import gzip

    text = 'text,label\n"Hello, world",pos\n"two\nlines",neg\n'
    (tmp_path / "data.csv").write_text(text)
    with gzip.open(tmp_path / "data.csv.gz", "wt") as f:
        f.write(text)
    assert T.read_table(tmp_path / "data.csv.gz", ["text"], "label") == T.read_table(tmp_path / "data.csv", ["text"],
                                                                                       "label")
    with gzip.open(tmp_path / "train.txt.gz", "wt") as f:
        f.write("-DOCSTART- O\n\nAnne B-PER\nwalked O\n")
    assert [e.tags for e in T.read_task("conll2003", tmp_path, "train")] == [["B-PER", "O"]]

    # A truncated or non-gzip file is a DataError naming it, not an EOFError from inside a reader.
    whole = (tmp_path / "data.csv.gz").read_bytes()
    (tmp_path / "cut.csv.gz").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "plain.csv.gz").write_text(text)
    # a corrupt deflate stream raises zlib.error, neither OSError nor EOFError
    (tmp_path / "flipped.csv.gz").write_bytes(whole[:12] + bytes(b ^ 0xFF for b in whole[12:30]) + whole[30:])
    for name in ("cut.csv.gz", "plain.csv.gz", "flipped.csv.gz"):
        with pytest.raises(T.DataError, match=f"{name}: cannot read as gzip"):
            T.read_table(tmp_path / name, ["text"], "label")


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl"])
def test_table_test_split_without_label_column_is_unlabelled(tmp_path, ext):
    """Regression: a custom table's test file without its label column failed with "no column 'y'"."""
    rows = [{"id": "a", "t": "first text"}, {"id": "b", "t": "second text"}]
    sep = {"csv": ",", "tsv": "\t"}.get(ext)

    def write(name, records):
        lines = [json.dumps(r) for r in records] if sep is None else \
            [sep.join(records[0])] + [sep.join(str(v) for v in r.values()) for r in records]
        (tmp_path / name).write_text("\n".join(lines) + "\n")

    write(f"test.{ext}", rows)
    write(f"train.{ext}", rows)
    task = T.Task("table", "classification", "table", {"train": f"train.{ext}", "test": f"test.{ext}"}, ("t",), "y",
                  id_column="id")
    assert T.read_task(task, tmp_path, "test") == [T.TextExample("a", "first text"), T.TextExample("b", "second text")]
    with pytest.raises(T.DataError, match="no column 'y'|missing field 'y'"):  # training data must be labelled
        T.read_task(task, tmp_path, "train")
    write(f"test.{ext}", [{**r, "y": "pos"} for r in rows])  # a labelled test file keeps its labels
    assert [e.label for e in T.read_task(task, tmp_path, "test")] == ["pos", "pos"]


def test_glue_submission_into_a_new_directory(tmp_path):
    """Regression: `--out subs/` (not yet existing) wrote a *file* named subs."""
    examples = glue("MNLI-m", "test")
    path = T.write_glue_predictions(f"{tmp_path / 'subs'}/", "MNLI-m", examples, [1, 2])
    assert path == tmp_path / "subs" / "MNLI-m.tsv" and path.read_text().startswith("index\tprediction\n0\t")
    assert T.write_glue_predictions(tmp_path / "subs", "AX", glue("AX", "test"), [0]) == tmp_path / "subs" / "AX.tsv"
    assert T.write_glue_predictions(tmp_path / "one.tsv", "AX", glue("AX", "test"), [0]).is_file()  # a file path


def test_a_classifier_scores_the_same_whatever_order_its_outputs_name_the_classes():
    """Binary F1 is the task's class 1 (the paraphrase): a checkpoint whose id2label lists "1" first scored the
    F1 of class "0" instead (0.667 for predictions whose paraphrase F1 is 0.8)."""
    import numpy as np

    from litebert.tasks.families import FAMILIES
    task = T.TASKS["bible_paraphrase"]
    gold, predicted = ["1", "1", "1", "0"], ["1", "1", "0", "0"]
    examples = [T.TextExample(str(i), "a", "b", label) for i, label in enumerate(gold)]
    for labels in (["0", "1"], ["1", "0"]):
        scores = [np.eye(2)[labels.index(p)] for p in predicted]
        metrics, predictions, _ = FAMILIES["classification"].score(task, examples, None, scores, labels, None)
        assert metrics == {"accuracy": 0.75, "f1": pytest.approx(0.8)} and predictions == predicted
