"""A transformers user's habits work in litebert, and litebert's files work in transformers.

Each test makes the same call on transformers and on litebert, on the same tiny model or tokenizer directory (built
here, nothing downloaded), and compares the results.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch

from litebert.config import AlbertConfig
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.heads import AlbertForSequenceClassification
from litebert.tokenizer import Tokenizer

transformers = pytest.importorskip("transformers")

POSITIONS = 32  # a model with fewer positions than the 512 tokenizers used to claim
LONG = "Anne Elliot walked along the shore at Lyme, and the wind was cold. " * 8  # ~130 tokens


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(None, str(out), vocab_size=500, input_sentence_size=20000)
    return out


def tiny_config(**overrides) -> AlbertConfig:
    base = dict(vocab_size=500, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=POSITIONS, hidden_act="gelu_new",
                classifier_dropout_prob=0.0, initializer_range=0.2)
    return AlbertConfig(**{**base, **overrides})


def saved_classifier(tok_dir, out, tokenizer_first: bool):
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, id2label={0: "austen", 1: "dickens", 2: "eliot"})
    model = AlbertForSequenceClassification(config).eval()
    tok = Tokenizer.from_pretrained(str(tok_dir))
    if tokenizer_first:  # as `litebert extend-vocab` writes
        tok.save_pretrained(str(out))
        model.save_pretrained(out)
    else:  # as fine-tuning's best/ and ensembles write
        model.save_pretrained(out)
        tok.save_pretrained(str(out))
    return model


# ----------------------------------------------------------------------------- model_max_length


@pytest.mark.parametrize("tokenizer_first", [False, True])
def test_transformers_pipeline_truncates_to_the_models_positions(tok_dir, tmp_path, tokenizer_first):
    """tokenizer_config.json names the model's positions, so transformers' pipeline with truncation=True cuts a
    passage longer than the model to them (it crashed with 512) and scores what litebert's pipeline scores."""
    from litebert import pipeline

    saved_classifier(tok_dir, tmp_path, tokenizer_first)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["model_max_length"] == POSITIONS
    assert Tokenizer.from_pretrained(str(tmp_path)).model_max_length == POSITIONS
    assert len(Tokenizer.from_pretrained(str(tmp_path)).encode(LONG)) > 4 * POSITIONS
    theirs = transformers.pipeline("text-classification", model=str(tmp_path), top_k=None)(LONG, truncation=True)
    ours = pipeline("text-classification", model=str(tmp_path), top_k=None)(LONG)
    theirs = theirs[0]  # transformers 5 nests one text's top_k=None ranking in a list (litebert: not)
    assert [r["label"] for r in ours] == [r["label"] for r in theirs]
    assert [r["score"] for r in ours] == pytest.approx([r["score"] for r in theirs], abs=1e-5)


def test_checkpoints_and_old_directories_carry_the_models_positions(tok_dir, tmp_path):
    """A training checkpoint copies the tokenizer's files beside the model; a directory written before the fix
    (512 in tokenizer_config.json) still gives litebert's tokenizer the model's positions."""
    from litebert.training.checkpoint import save_checkpoint

    model = AlbertForSequenceClassification(tiny_config())
    step = save_checkpoint(tmp_path / "run", 1, model, {}, tokenizer=tok_dir)
    assert json.loads((step / "tokenizer_config.json").read_text())["model_max_length"] == POSITIONS
    assert json.loads((tok_dir / "tokenizer_config.json").read_text())["model_max_length"] == 512  # the source
    old = json.loads((step / "tokenizer_config.json").read_text())
    (step / "tokenizer_config.json").write_text(json.dumps({**old, "model_max_length": 512}))
    assert Tokenizer.from_pretrained(str(step)).model_max_length == POSITIONS


# ----------------------------------------------------------------------------- the tokenizer object

TEXTS = ["Anne Elliot's [MASK] was there, at 1,000 o'clock!", "hello , world . don ' t", "Café déjà vu 1990,"]
PAIRS = ["She smiled.", "No.", "Mary went to Uppercross, and Charles too."]


@pytest.fixture(scope="module")
def both(tok_dir):
    """litebert's Tokenizer and transformers' AutoTokenizer on the same directory."""
    return Tokenizer.from_pretrained(str(tok_dir)), transformers.AutoTokenizer.from_pretrained(str(tok_dir))


def lists(encoding) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in encoding.items()}


def test_call_shapes_equal_transformers(both):
    """text_pair=, is_split_into_words, the return_* flags and word_ids() give transformers' results."""
    ours, theirs = both
    flags = dict(return_offsets_mapping=True, return_special_tokens_mask=True, return_length=True)
    for text, pair in zip(TEXTS, PAIRS):
        for kw in ({}, flags, dict(return_token_type_ids=False, return_attention_mask=False)):
            a = ours(text, text_pair=pair, **kw)
            b = theirs(text, text_pair=pair, **kw)
            assert dict(a) == dict(b), (text, kw)
            assert a.word_ids() == b.word_ids() and a.input_ids == b["input_ids"]
    words = [["Anne", "Elliot's", "1,000", "Café", "[MASK]"], ["x"]]
    a = ours(words, is_split_into_words=True, padding=True, return_offsets_mapping=True)
    b = theirs(words, is_split_into_words=True, padding=True, return_offsets_mapping=True)
    assert dict(a) == dict(b) and [a.word_ids(i) for i in (0, 1)] == [b.word_ids(i) for i in (0, 1)]
    kw = dict(padding=True, truncation=True, max_length=12, return_tensors="pt")
    a, b = ours(TEXTS, PAIRS, **kw), theirs(TEXTS, PAIRS, **kw)
    assert lists(a) == lists(b) and a.to("cpu").input_ids.dtype == torch.int64


def test_a_call_without_options_answers_as_transformers(both):
    """The defaults are transformers': `len(tok(text)["input_ids"])` counts the tokens (it was 1 when a call
    defaulted to a padded (1, T) tensor), and a batch of texts of different lengths gives ragged lists for a
    collator to pad (it was refused as a ragged tensor)."""
    ours, theirs = both
    for text in TEXTS:
        assert dict(ours(text)) == dict(theirs(text))
        assert len(ours(text)["input_ids"]) == len(theirs(text)["input_ids"]) > 3
    assert dict(ours(TEXTS)) == dict(theirs(TEXTS)) and len({len(r) for r in ours(TEXTS)["input_ids"]}) > 1
    assert dict(ours(TEXTS, PAIRS, truncation=True, max_length=9)) == dict(theirs(TEXTS, PAIRS, truncation=True,
                                                                                   max_length=9))


@pytest.mark.parametrize("name", ["AlbertModel", "AlbertForSequenceClassification", "AlbertForQuestionAnswering"])
def test_a_model_given_the_tokenizers_lists_says_to_ask_for_tensors(both, name):
    """`model(**tok(texts))` without return_tensors="pt" hands the model lists (transformers' default, now
    litebert's): one line naming the input and the option, where transformers fails on "'list' object has no
    attribute 'size'"."""
    from litebert.errors import ConfigError
    from litebert.heads import MODEL_CLASSES

    ours, _ = both
    model = MODEL_CLASSES[name](tiny_config(num_labels=2)).eval()
    for encoded, culprit in ((ours(TEXTS[0]), "input_ids"), ({**ours(TEXTS, padding=True, return_tensors="pt"),
                                                             "attention_mask": [[1] * 3] * 3}, "attention_mask")):
        with pytest.raises(ConfigError, match=f'{culprit} is a list, not a tensor: encode with return_tensors="pt"'):
            model(**encoded)


@pytest.mark.parametrize("options", [dict(padding=True), dict(truncation="only_first", max_length=24, stride=3,
                                                                 return_overflowing_tokens=True, padding="max_length")])
def test_the_alignment_maps_answer_as_a_fast_tokenizers(both, options):
    """tokens(), sequence_ids() and the maps between characters, words and tokens, which transformers' QA and
    NER preprocessing read (run_qa.py takes sequence_ids(i) with offsets and overflowing windows): the same
    answer as AlbertTokenizerFast for every row, token, word and character, padding and windows included."""
    ours, theirs = both
    kw = dict(return_offsets_mapping=True, **options)
    a, b = ours(TEXTS, PAIRS, **kw), theirs(TEXTS, PAIRS, **kw)
    assert a["input_ids"] == b["input_ids"] and len(a["input_ids"]) >= len(TEXTS)
    checked = 0
    for i in range(len(a["input_ids"])):
        assert a.tokens(i) == b.tokens(i) and a.sequence_ids(i) == b.sequence_ids(i), i
        for j in range(len(a["input_ids"][i])):
            assert (a.token_to_word(i, j), a.token_to_sequence(i, j), a.token_to_chars(i, j)) == \
                (b.token_to_word(i, j), b.token_to_sequence(i, j), b.token_to_chars(i, j)), (i, j)
        for seq, texts in ((0, TEXTS), (1, PAIRS)):
            for word in range(max((w for w in a.word_ids(i) if w is not None), default=0) + 2):
                assert a.word_to_tokens(i, word, seq) == b.word_to_tokens(i, word, seq), (i, word, seq)
                if b.word_to_tokens(i, word, seq) is not None:
                    assert a.word_to_chars(i, word, seq) == b.word_to_chars(i, word, seq), (i, word, seq)
            for c in range(max(len(t) for t in texts)):
                assert (a.char_to_token(i, c, seq), a.char_to_word(i, c, seq)) == \
                    (b.char_to_token(i, c, seq), b.char_to_word(i, c, seq)), (i, c, seq)
                checked += 1
    assert checked > 100
    one = ours(TEXTS[0])  # one text: the (index) form reads its row
    assert one.tokens() == theirs(TEXTS[0]).tokens() and one.token_to_word(3) == theirs(TEXTS[0]).token_to_word(3)
    from litebert.errors import ConfigError
    with pytest.raises(ConfigError, match=r"char_to_token\(\) needs character offsets: encode with "
                                          "return_offsets_mapping=True"):
        one.char_to_token(2)
    with pytest.raises(ConfigError, match=r"sequence_ids\(\) reads how a tokenizer call cut its texts"):
        ours.pad([ours(TEXTS[0])]).sequence_ids(0)


def squad_training_features(tokenizer, questions: list[str], contexts: list[str], answers: list[dict]) -> dict:
    """The Hugging Face course's SQuAD preprocessing, as written there for transformers' tokenizers: windows
    over each context, then each answer's characters located through offsets and sequence_ids."""
    inputs = tokenizer(questions, contexts, max_length=24, truncation="only_second", stride=6,
                       return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    offsets_of, samples = inputs.pop("offset_mapping"), inputs.pop("overflow_to_sample_mapping")
    starts, ends = [], []
    for i, offsets in enumerate(offsets_of):
        answer = answers[samples[i]]
        first, last = answer["start"], answer["start"] + len(answer["text"])
        sequence_ids = inputs.sequence_ids(i)
        context_start = sequence_ids.index(1)
        context_end = len(sequence_ids) - 1 - sequence_ids[::-1].index(1)
        if offsets[context_start][0] > first or offsets[context_end][1] < last:
            starts.append(0), ends.append(0)  # the answer is not inside this window
            continue
        idx = context_start
        while idx <= context_end and offsets[idx][0] <= first:
            idx += 1
        starts.append(idx - 1)
        idx = context_end
        while idx >= context_start and offsets[idx][1] >= last:
            idx -= 1
        ends.append(idx + 1)
    return {**inputs, "start_positions": starts, "end_positions": ends}


def test_the_courses_squad_preprocessing_gives_transformers_features(both):
    ours, theirs = both
    contexts = ["Anne Elliot walked along the shore at Lyme, and the wind was cold, and Captain Wentworth "
                "came down to the sea after her.", "Mary went to Uppercross, and Charles too."]
    questions, answers = ["Who came to the sea?", "Where did Mary go?"], [
        {"text": "Captain Wentworth", "start": contexts[0].index("Captain")},
        {"text": "Uppercross", "start": contexts[1].index("Uppercross")}]
    mine, reference = (squad_training_features(t, questions, contexts, answers) for t in (ours, theirs))
    assert mine == reference and len(mine["input_ids"]) > len(contexts) and any(mine["start_positions"])
    for ids, start, end in zip(mine["input_ids"], mine["start_positions"], mine["end_positions"]):
        if start:  # a window holding the answer spans its words
            assert ours.decode(ids[start:end + 1]).lower() in ("captain wentworth", "uppercross")


def test_multiple_choice_given_a_row_per_text_names_the_shape_it_takes(both):
    """(batch, length) ids given to AlbertForMultipleChoice, as a classifier takes them, failed on "not enough
    values to unpack" (transformers: a view error); now one line names the (batch, choices, length) layout."""
    from litebert.errors import ConfigError
    from litebert.heads import MODEL_CLASSES

    ours, _ = both
    model = MODEL_CLASSES["AlbertForMultipleChoice"](tiny_config()).eval()
    flat = ours(TEXTS, PAIRS, padding=True, return_tensors="pt")
    with pytest.raises(ConfigError, match=r"takes \(batch, choices, length\) inputs, got shape \(3, \d+\)"):
        model(**flat)
    stacked = {k: v.unsqueeze(0) for k, v in flat.items()}  # one question, its three choices
    assert model(**stacked).logits.shape == (1, 3)


def test_an_encoding_pickles_small_and_a_datasets_batch_is_refused_by_name(both):
    """An encoding keeps its rows' alignment, not the vocabulary: pickled (a DataLoader worker's items), it
    stays small and answers as before. A datasets batch handed whole (a dict) was encoded as its column names."""
    import pickle

    from litebert.errors import ConfigError

    ours, theirs = both
    encoded = ours(TEXTS[0])
    back = pickle.loads(pickle.dumps(encoded))
    assert len(pickle.dumps(encoded)) < 2000 and back.tokens() == encoded.tokens() == theirs(TEXTS[0]).tokens()
    with pytest.raises(ConfigError, match=r"got a dict \(a datasets batch: pass its column, tok\(batch\['text'\]\)\)"):
        ours({"text": TEXTS})


def test_a_row_of_one_text_ignores_sequence_index_as_the_tokenizers_library(both):
    ours, theirs = both
    a, b = ours(TEXTS[0], return_offsets_mapping=True), theirs(TEXTS[0], return_offsets_mapping=True)
    for sequence_index in (0, 1):
        assert a.word_to_tokens(0, 1, sequence_index) == b.word_to_tokens(0, 1, sequence_index) is not None
        assert a.char_to_token(0, 5, sequence_index) == b.char_to_token(0, 5, sequence_index) is not None
        assert a.word_to_chars(0, 1, sequence_index) == b.word_to_chars(0, 1, sequence_index)


def test_word_ids_count_a_character_outside_the_vocabulary_in_its_word(both):
    """A character the vocabulary lacks (an emoji, another script) becomes a <unk> inside its word, and word_ids()
    keeps it there, as transformers: it used to start a new word, and so did the rest of that word, shifting the
    word of every later token (labels aligned by word_ids() went to the wrong words). A typed "<unk>" is a word."""
    ours, theirs = both
    for text in ["x😀y and z", "😀 Anne Ω Ωx", "😀<unk>😀 q", "a <unk> b", "Captain [MASK]😀, 1,000😀"]:
        for kw in ({}, dict(return_offsets_mapping=True)):
            a, b = ours(text, "Ωmega 😀", padding=False, return_tensors=None, **kw), theirs(text, "Ωmega 😀", **kw)
            assert a.input_ids == b["input_ids"] and ours.unk_id in a.input_ids
            assert a.word_ids() == b.word_ids(), (text, kw)


def test_special_ids_vocab_and_conversions_equal_transformers(both):
    ours, theirs = both
    for name in ("pad", "unk", "cls", "sep", "mask", "bos", "eos"):
        assert getattr(ours, f"{name}_token") == getattr(theirs, f"{name}_token")
        assert getattr(ours, f"{name}_token_id") == getattr(theirs, f"{name}_token_id"), name
    assert ours.all_special_ids == theirs.all_special_ids and ours.all_special_tokens == theirs.all_special_tokens
    assert ours.get_vocab() == theirs.get_vocab() and len(ours) == len(theirs)
    ids = theirs(TEXTS[0], TEXTS[1])["input_ids"]
    assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
    assert ours.convert_ids_to_tokens(ids[3]) == theirs.convert_ids_to_tokens(ids[3])
    assert ours.convert_ids_to_tokens(ids, skip_special_tokens=True) == theirs.convert_ids_to_tokens(
        ids, skip_special_tokens=True)
    tokens = ["▁anne", "zzzq", "[MASK]", ","]
    assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
    assert ours.convert_tokens_to_ids("▁anne") == theirs.convert_tokens_to_ids("▁anne")


def test_decode_and_batch_decode_equal_transformers(both):
    ours, theirs = both
    batch = theirs(TEXTS, PAIRS, padding=True, return_tensors="pt")["input_ids"]
    for skip in (False, True):
        assert ours.batch_decode(batch, skip_special_tokens=skip) == theirs.batch_decode(batch, skip_special_tokens=skip)
        for row in [batch[0], batch[1].tolist(), [1, 46, 0, 4], [5, 6, 7, 13, 8]]:
            assert ours.decode(row, skip_special_tokens=skip) == theirs.decode(row, skip_special_tokens=skip)


def test_no_silent_cut_without_truncation(both):
    """As transformers: without truncation or max_length nothing is cut, and a row over model_max_length warns;
    truncation=True cuts to model_max_length."""
    ours, theirs = both
    text = "word " * 600
    with pytest.warns(UserWarning, match="more than model_max_length 512"):
        uncut = ours(text, padding=False, return_tensors=None)
    assert uncut == dict(theirs(text)) and len(uncut["input_ids"]) > 512
    cut = ours(text, truncation=True, padding=False, return_tensors=None)
    assert cut == dict(theirs(text, truncation=True)) and len(cut["input_ids"]) == 512
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours(text, max_length=64)  # an explicit max_length cuts, as litebert's own callers ask



# ----------------------------------------------------------------------------- model outputs

HEAD_NAMES = ["AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM", "AlbertForSequenceClassification",
              "AlbertForTokenClassification", "AlbertForQuestionAnswering", "AlbertForMultipleChoice"]


def twins(name: str, tmp_path, **overrides):
    """A random litebert model of class `name`, saved, and transformers' same class loaded from that directory
    (eager attention: transformers' SDPA returns no attention probabilities)."""
    from litebert.heads import MODEL_CLASSES

    torch.manual_seed(0)
    num_labels = 2 if name in ("AlbertForPreTraining", "AlbertForQuestionAnswering") else 3
    ours = MODEL_CLASSES[name](tiny_config(num_labels=num_labels, **overrides)).eval()
    ours.save_pretrained(tmp_path)
    theirs = getattr(transformers, name).from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    return ours, theirs


def inputs_for(name: str) -> dict:
    generator = torch.Generator().manual_seed(1)
    shape = (2, 3, 9) if name == "AlbertForMultipleChoice" else (2, 9)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., -3:][0] = 0  # the first example is padded
    return dict(input_ids=torch.randint(5, 500, shape, generator=generator), attention_mask=mask,
                token_type_ids=torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_outputs_index_and_hold_hidden_states_as_transformers(name, tmp_path):
    """out[0] is the first field that is not None (the logits when no labels are given), keys() and to_tuple()
    skip None, and output_hidden_states / output_attentions give transformers' tuples: the projected embeddings
    and each block's output, each block's attention probabilities (two groups of two blocks here)."""
    ours, theirs = twins(name, tmp_path, num_hidden_groups=2, inner_group_num=2)
    x = inputs_for(name)
    with torch.no_grad():
        plain_a, plain_b = ours(**x), theirs(**x)
        a = ours(**x, output_hidden_states=True, output_attentions=True)
        b = theirs(**x, output_hidden_states=True, output_attentions=True)
    assert list(plain_a.keys()) == list(plain_b.keys()) and len(plain_a) == len(plain_b)
    assert "loss" not in plain_a and torch.allclose(plain_a[0], plain_b[0], atol=1e-5)
    assert list(a.keys()) == list(b.keys()) and len(a.to_tuple()) == len(b.to_tuple())
    assert len(a.hidden_states) == len(b.hidden_states) == 1 + 2 * 2 and len(a.attentions) == len(b.attentions) == 4
    for ours_t, theirs_t in zip(a.hidden_states + a.attentions, b.hidden_states + b.attentions, strict=True):
        assert ours_t.shape == theirs_t.shape and torch.allclose(ours_t, theirs_t, atol=1e-5)
    assert torch.allclose(a[0], plain_a[0], atol=1e-5)  # asking for more changes nothing else (SDPA vs explicit)
    assert torch.allclose(a["hidden_states"][-1], b["hidden_states"][-1], atol=1e-5)


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_output_flags_given_to_from_pretrained_are_every_calls_default_as_in_transformers(name, tmp_path):
    """`AutoModel.from_pretrained(path, output_hidden_states=True)` (layer-wise features) was refused: the flags
    were arguments of the call only. Now they are config fields, as transformers': every call returns what they
    ask unless it says otherwise, config.json records them when set, and transformers reads that file alike."""
    from litebert.heads import MODEL_CLASSES

    twins(name, tmp_path / "start")
    ours = MODEL_CLASSES[name].from_pretrained(tmp_path / "start", output_hidden_states=True,
                                               output_attentions=True).eval()
    theirs = getattr(transformers, name).from_pretrained(str(tmp_path / "start"), output_hidden_states=True,
                                                         output_attentions=True, attn_implementation="eager").eval()
    x = inputs_for(name)
    with torch.no_grad():
        a, b = ours(**x), theirs(**x)
        assert len(a.hidden_states) == len(b.hidden_states) == 3 and len(a.attentions) == len(b.attentions) == 2
        for ours_t, theirs_t in zip(a.hidden_states + a.attentions, b.hidden_states + b.attentions, strict=True):
            torch.testing.assert_close(ours_t, theirs_t, atol=1e-5, rtol=1e-4)
        told = ours(**x, output_hidden_states=False, output_attentions=False)  # the call's own flags win
        assert told.hidden_states is None and told.attentions is None
        ours.config.output_attentions = False  # set after loading, as transformers users do
        assert ours(**x).attentions is None and ours(**x).hidden_states is not None
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["output_hidden_states"] is True and "output_attentions" not in saved  # written only when set
    assert getattr(transformers, name).from_pretrained(str(tmp_path / "saved")).config.output_hidden_states
    assert MODEL_CLASSES[name].from_pretrained(tmp_path / "saved").config.output_hidden_states


def test_indexing_with_labels_and_mapping_habits(tmp_path):
    ours, theirs = twins("AlbertForSequenceClassification", tmp_path)
    x = {**inputs_for("AlbertForSequenceClassification"), "labels": torch.tensor([0, 2])}
    a, b = ours(**x), theirs(**x)
    assert list(a.keys()) == list(b.keys()) == ["loss", "logits"]
    assert torch.allclose(a[0], b[0], atol=1e-5) and torch.allclose(a[1], b[1], atol=1e-5)
    loss, logits = a.to_tuple()
    assert torch.allclose(dict(a)["logits"], logits) and a["loss"] is a.loss is loss
    with pytest.raises(KeyError):
        ours(**inputs_for("AlbertForSequenceClassification"))["loss"]  # as transformers: None fields are not keys


def test_from_pretrained_takes_transformers_keywords(tmp_path):
    from litebert.errors import ConfigError

    ours, _ = twins("AlbertForSequenceClassification", tmp_path)
    cls = type(ours)
    for kw, expected in [(dict(dtype=torch.bfloat16), torch.bfloat16), (dict(torch_dtype="float16"), torch.float16),
                         (dict(dtype="auto"), torch.float32), (dict(torch_dtype=torch.float32), torch.float32)]:
        assert {p.dtype for p in cls.from_pretrained(tmp_path, **kw).parameters()} == {expected}, kw
    for device_map in ("cpu", "auto", torch.device("cpu")):
        model = cls.from_pretrained(tmp_path, device_map=device_map)
        assert {p.device.type for p in model.parameters()} == {"cuda" if device_map == "auto" and
                                                               torch.cuda.is_available() else "cpu"}
    label2id = {"neg": 0, "neutral": 1, "pos": 2}
    model = cls.from_pretrained(tmp_path, label2id=label2id)
    reference = transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path), label2id=label2id,
                                                                             id2label={0: "neg", 1: "neutral", 2: "pos"})
    assert model.config.id2label == reference.config.id2label and model.config.num_labels == reference.num_labels
    for kw, message in [(dict(device_map="balanced"), "one device"), (dict(device_map={"": 0}), "one device"),
                        (dict(dtype="int8"), "not a floating dtype"), (dict(dtype="float32", torch_dtype="float16"), "disagree"),
                        (dict(label2id={"a": 0}, id2label={0: "b"}), "disagree")]:
        with pytest.raises(ConfigError, match=message):
            cls.from_pretrained(tmp_path, **kw)


# ----------------------------------------------------------------------------- model card, TensorBoard


def front_matter(path) -> dict:
    text = path.read_text()
    assert text.startswith("---\n")
    meta, key = {}, None
    for line in text.split("---\n")[1].splitlines():  # the small YAML subset a card uses: keys and lists
        if line.startswith("- "):
            meta.setdefault(key, []).append(line[2:])
        else:
            key, _, value = (part.strip() for part in line.partition(":"))
            if value:
                meta[key] = value
    return meta


def test_every_saved_model_has_a_model_card(tmp_path):
    """README.md with the Hub's front matter; a metrics table when the run gives one; a user's own card is kept."""
    from huggingface_hub import ModelCard

    model = AlbertForSequenceClassification(tiny_config(num_labels=2, id2label={0: "neg", 1: "pos"}))
    model.save_pretrained(tmp_path / "m", card={"license": "apache-2.0", "metrics": {"accuracy": 0.8125}})
    meta = front_matter(tmp_path / "m" / "README.md")
    assert meta == {"library_name": "transformers", "tags": ["albert", "litebert"],
                    "pipeline_tag": "text-classification", "license": "apache-2.0"}
    card = ModelCard.load(tmp_path / "m" / "README.md")  # the Hub's own reader
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-classification"
    assert "| accuracy | 0.8125 |" in card.text and "0 neg, 1 pos" in card.text
    loaded = AlbertForSequenceClassification.from_pretrained(tmp_path / "m")
    loaded.save_pretrained(tmp_path / "again")
    assert "Initialised from `" + str(tmp_path / "m") + "`" in (tmp_path / "again" / "README.md").read_text()
    (tmp_path / "m" / "README.md").write_text("# my own card\n")
    model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "README.md").read_text() == "# my own card\n"


def test_metrics_log_writes_tensorboard_events(tmp_path, monkeypatch):
    """The same numbers as metrics.jsonl, read back with TensorBoard's own reader; a resume purges later steps.
    The two event files get writer counters 9 and 10 (names that sort the wrong way round as text when made in
    the same second: the case that made this test flaky)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer

    from litebert.training.metrics_log import MetricsLog, read_metrics

    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(9))
    log = MetricsLog(tmp_path, writes=True)
    for step in (10, 20, 30):
        log.write({"step": step, "loss": 1.0 / step, "lr": 1e-3})
    log.write({"step": 30, "eval_accuracy": 0.75, "split": "dev"})
    resumed = MetricsLog(tmp_path, writes=True)
    resumed.restart_at(20)
    resumed.write({"step": 30, "loss": 0.5})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars["loss"] == [(10, pytest.approx(0.1)), (20, pytest.approx(0.05)), (30, 0.5)]
    assert scalars["lr"] == [(10, pytest.approx(1e-3)), (20, pytest.approx(1e-3))]
    assert scalars["eval_accuracy"] == []  # purged with the steps after 20 (the tag stays listed)
    assert [r["loss"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0.1, 0.05, 0.5]
    # Step 30 was evaluated but its checkpoint never recorded it: the resume redoes that evaluation, and
    # TensorBoard, like metrics.jsonl, keeps one of it and step 30's training record.
    resumed.write({"step": 30, "eval_accuracy": 0.5})
    again = MetricsLog(tmp_path, writes=True)
    again.restart_at(30, evaluated=False)
    again.write({"step": 30, "eval_accuracy": 0.8})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval_accuracy")] == [(30, pytest.approx(0.8))]
    assert [(e.step, e.value) for e in events.Scalars("loss")][-1] == (30, 0.5)
    assert [r.get("eval_accuracy") for r in read_metrics(tmp_path / "metrics.jsonl") if r["step"] == 30] == [
        None, 0.8]
    (tmp_path / "off").mkdir()
    MetricsLog(tmp_path / "off", writes=True, tensorboard=False).write({"step": 1, "loss": 1.0})
    assert os.listdir(tmp_path / "off") == ["metrics.jsonl"]


# ----------------------------------------------------------------------------- more of a user's first calls


def test_config_names_unnamed_labels_as_transformers(tmp_path):
    """`model.config.id2label[prediction]` names a prediction of a model whose labels have no names (it was None,
    a TypeError); label2id and model_type are there too."""
    ours, theirs = twins("AlbertForSequenceClassification", tmp_path)
    assert ours.config.id2label == theirs.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert ours.config.label2id == theirs.config.label2id and ours.config.model_type == theirs.config.model_type
    assert ours.config.label_names is None and ours.config.replace(num_labels=4).id2label[3] == "LABEL_3"
    named = tiny_config(id2label={0: "neg", 1: "pos"})
    assert named.label2id == {"neg": 0, "pos": 1} and named.label_names == ["neg", "pos"]


@pytest.mark.parametrize("name", ["AlbertForMaskedLM", "AlbertForSequenceClassification", "AlbertModel"])
def test_device_dtype_embeddings_and_parameter_counts_as_transformers(name, tmp_path):
    """`batch.to(model.device)`, `model.dtype`, get_input/output_embeddings and num_parameters' keywords (each an
    AttributeError or TypeError before)."""
    from litebert.errors import ConfigError

    ours, theirs = twins(name, tmp_path)
    assert ours.device == theirs.device and ours.dtype == theirs.dtype == torch.float32
    assert ours.to(torch.bfloat16).dtype == torch.bfloat16
    assert torch.equal(ours.get_input_embeddings().weight.float(), theirs.get_input_embeddings().weight.bfloat16().float())
    assert (ours.get_output_embeddings() is None) == (theirs.get_output_embeddings() is None)
    if ours.get_output_embeddings() is not None:  # tied, as in transformers
        assert ours.get_output_embeddings().weight is ours.get_input_embeddings().weight
    ours.get_input_embeddings().weight.requires_grad_(False)
    theirs.get_input_embeddings().weight.requires_grad_(False)
    for kw in ({}, dict(only_trainable=True), dict(exclude_embeddings=True),
               dict(only_trainable=True, exclude_embeddings=True)):
        assert ours.num_parameters(**kw) == theirs.num_parameters(**kw), kw
    with pytest.raises(ConfigError, match="litebert extend-vocab"):
        ours.resize_token_embeddings(600)


@pytest.mark.parametrize("name", HEAD_NAMES)
def test_return_dict_false_gives_transformers_tuple(name, tmp_path):
    """`model(**batch, return_dict=False)` is a tuple of the fields that are not None, as transformers' (a
    TypeError before); return_dict=True is the output object as without it."""
    ours, theirs = twins(name, tmp_path)
    x = inputs_for(name)
    if name == "AlbertForSequenceClassification":
        x["labels"] = torch.tensor([0, 2])
    with torch.no_grad():
        for kw in ({}, dict(output_hidden_states=True)):
            a, b = ours(**x, **kw, return_dict=False), theirs(**x, **kw, return_dict=False)
            assert type(a) is type(b) is tuple and len(a) == len(b), kw
            flat = [t for item in a for t in (item if isinstance(item, tuple) else (item,))]
            flat_b = [t for item in b for t in (item if isinstance(item, tuple) else (item,))]
            assert all(torch.allclose(s, t, atol=1e-5) for s, t in zip(flat, flat_b, strict=True))
        assert list(ours(**x, return_dict=True).keys()) == list(theirs(**x, return_dict=True).keys())


def test_decode_cleans_up_spaces_when_asked_as_transformers(both):
    """clean_up_tokenization_spaces=True joins " ," and " n't" as transformers does (a TypeError before)."""
    ours, theirs = both
    ids = theirs("hello , world . don ' t isn't I 'm here !", "you 're ?")["input_ids"]
    for kw in ({}, dict(clean_up_tokenization_spaces=True), dict(clean_up_tokenization_spaces=False),
               dict(clean_up_tokenization_spaces=True, skip_special_tokens=True)):
        assert ours.decode(ids, **kw) == theirs.decode(ids, **kw), kw
        assert ours.batch_decode([ids, ids[:4]], **kw) == theirs.batch_decode([ids, ids[:4]], **kw), kw
    tokens = theirs.convert_ids_to_tokens(ids)
    assert ours.convert_tokens_to_string(tokens) == theirs.convert_tokens_to_string(tokens)
    assert ours.clean_up_tokenization_spaces == theirs.clean_up_tokenization_spaces


def test_encode_takes_text_pair_and_return_tensors_as_transformers(both):
    """`tok.encode(text, return_tensors="pt")` is a (1, T) int64 tensor and text_pair= names the second text, as
    in transformers (each a TypeError before)."""
    import numpy as np

    ours, theirs = both
    for kw in ({}, dict(text_pair=PAIRS[2]), dict(max_length=8, truncation=True), dict(add_special_tokens=False)):
        assert ours.encode(TEXTS[0], **kw) == theirs.encode(TEXTS[0], **kw), kw
        a, b = ours.encode(TEXTS[0], return_tensors="pt", **kw), theirs.encode(TEXTS[0], return_tensors="pt", **kw)
        assert a.dtype == b.dtype and torch.equal(a, b), kw
        a, b = ours.encode(TEXTS[0], return_tensors="np", **kw), theirs.encode(TEXTS[0], return_tensors="np", **kw)
        assert a.dtype == b.dtype and np.array_equal(a, b), kw


def test_pad_to_multiple_of_equals_transformers(both):
    """The width rounded up to a multiple, as a data collator asks for tensor cores (a TypeError before); a cut
    to a length that is not a multiple is refused, as there."""
    from litebert.errors import ConfigError

    ours, theirs = both
    for kw in (dict(padding=True), dict(padding="max_length", max_length=16, truncation=True), dict(padding=False),
               dict(padding="longest", truncation=True, max_length=16)):
        for multiple in (1, 8, 16):
            a = ours(TEXTS, PAIRS, return_tensors=None, pad_to_multiple_of=multiple, **kw)
            assert dict(a) == dict(theirs(TEXTS, PAIRS, pad_to_multiple_of=multiple, **kw)), (kw, multiple)
    a = ours(TEXTS, padding=True, pad_to_multiple_of=8, return_tensors="pt")  # a batch for the model
    assert a.input_ids.shape[1] % 8 == 0 and torch.equal(a.input_ids, theirs(TEXTS, padding=True, pad_to_multiple_of=8,
                                                                             return_tensors="pt")["input_ids"])
    with pytest.raises(ValueError, match="not a multiple"):
        theirs(TEXTS, padding=True, truncation=True, max_length=10, pad_to_multiple_of=8)
    with pytest.raises(ConfigError, match="make max_length a multiple"):
        ours(TEXTS, padding=True, truncation=True, max_length=10, pad_to_multiple_of=8)


def test_from_pretrained_takes_transformers_loading_keywords(tmp_path, caplog):
    """config=, local_files_only, attn_implementation and ignore_mismatched_sizes load as in transformers (each
    was refused as "AlbertConfig has no field ..."); download options are refused by name."""
    from litebert.errors import CheckpointError, ConfigError

    ours, _ = twins("AlbertForSequenceClassification", tmp_path)
    cls, x = type(ours), inputs_for("AlbertForSequenceClassification")
    expected = ours(**x).logits
    their_config = transformers.AlbertConfig.from_pretrained(str(tmp_path))
    for kw in (dict(local_files_only=True), dict(attn_implementation="eager"), dict(attn_implementation="sdpa"),
               dict(config=their_config), dict(config=ours.config), dict(ignore_mismatched_sizes=True)):
        model = cls.from_pretrained(tmp_path, **kw).eval()
        assert torch.allclose(model(**x).logits, expected, atol=1e-6), kw
    fields = {**vars(cls.from_pretrained(tmp_path, config=their_config).config), "extra": None}
    assert fields == {**vars(ours.config), "extra": None}
    with pytest.raises(CheckpointError, match="classifier.bias has shape"):
        cls.from_pretrained(tmp_path, num_labels=5)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path), num_labels=5)
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(str(tmp_path), num_labels=5,
                                                                         ignore_mismatched_sizes=True)
    with caplog.at_level("WARNING", logger="litebert"):
        model = cls.from_pretrained(tmp_path, num_labels=5, ignore_mismatched_sizes=True)
    assert "classifier.bias (3,) -> (5,)" in caplog.text and model.config.id2label == theirs.config.id2label
    assert torch.equal(model.albert.embeddings.word_embeddings.weight, ours.albert.embeddings.word_embeddings.weight)
    with pytest.raises(CheckpointError, match="shape"):  # the encoder must still fit
        cls.from_pretrained(tmp_path, embedding_size=8, ignore_mismatched_sizes=True)
    for kw, message in [(dict(attn_implementation="flash_attention_2"), "chooses its attention kernel"),
                        (dict(revision="main"), "revision= chooses what to download from the Hub; .* is a local path"),
                        (dict(cache_dir=str(tmp_path)), "cache_dir= chooses"), (dict(use_auth_token="t"), "takes no"),
                        (dict(config={"hidden_size": 8}), "must be an AlbertConfig")]:
        with pytest.raises(ConfigError, match=message):
            cls.from_pretrained(tmp_path, **kw)


def test_padding_side_reads_as_transformers_and_left_is_refused(both):
    """padding_side / truncation_side read "right" as transformers'; setting "left" was kept as an attribute
    nothing read (rows still padded on the right, silently): it is refused."""
    from litebert.errors import ConfigError

    ours, theirs = both
    assert (ours.padding_side, ours.truncation_side) == (theirs.padding_side, theirs.truncation_side)
    assert ours.model_input_names == theirs.model_input_names
    ours.padding_side = ours.truncation_side = "right"
    for side in ("padding_side", "truncation_side"):
        with pytest.raises(ConfigError, match="right only"):
            setattr(ours, side, "left")
    assert ours.padding_side == "right"


def test_a_pipeline_answers_model_device_and_tokenizer_as_transformers(tok_dir, tmp_path):
    """`pipe.model`, `pipe.device` and `pipe.tokenizer` are what transformers users reach for after building one
    (to move a batch, to inspect a config); `pipe.model` was an AttributeError."""
    import litebert
    saved_classifier(tok_dir, tmp_path / "clf", tokenizer_first=False)
    ours = litebert.pipeline("text-classification", model=str(tmp_path / "clf"), device="cpu")
    theirs = transformers.pipeline("text-classification", model=str(tmp_path / "clf"), device="cpu")
    assert ours.device == theirs.device == torch.device("cpu")
    assert ours.model.config.id2label == {i: n for i, n in theirs.model.config.id2label.items()}
    assert type(ours.model).__name__ == type(theirs.model).__name__ == "AlbertForSequenceClassification"
    assert ours.tokenizer("Anne walked.")["input_ids"] == theirs.tokenizer("Anne walked.")["input_ids"]


def test_tokenizer_special_tokens_map_and_name_or_path_as_transformers(tok_dir):
    ours = Tokenizer.from_pretrained(str(tok_dir))
    theirs = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    assert ours.special_tokens_map == {k: str(v) for k, v in theirs.special_tokens_map.items()}
    assert ours.name_or_path == theirs.name_or_path == str(tok_dir)


@pytest.mark.parametrize("options", [{}, {"return_tensors": "pt"}, {"padding": "max_length", "max_length": 20},
                                     {"pad_to_multiple_of": 8, "return_tensors": "np"},
                                     {"return_attention_mask": False}])
def test_pad_equals_transformers_and_feeds_its_data_collator(tok_dir, options):
    """`tokenizer.pad` is what transformers' data collators call (DataCollatorWithPadding, so Trainer); litebert's
    Tokenizer had none, so it could not stand in for AlbertTokenizer there."""
    ours, theirs = Tokenizer.from_pretrained(str(tok_dir)), transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    texts = ["Anne walked to the town.", "Yes.", "It was a fine day, and the sea was calm."]
    features = [{"input_ids": ours.encode(t), "label": i} for i, t in enumerate(texts)]
    assert features == [{"input_ids": theirs(t)["input_ids"], "label": i} for i, t in enumerate(texts)]
    a, b = ours.pad(features, **options), theirs.pad(features, **options)
    assert sorted(a) == sorted(b)
    for key in b:
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
    one = ours.pad(features[1], padding="max_length", max_length=6)  # one example: its row, not a batch
    assert one["input_ids"] == theirs.pad(features[1], padding="max_length", max_length=6)["input_ids"]
    scored = [{**f, "label": 0.5 * i} for i, f in enumerate(features)]  # a regression's float scores stay floats
    assert ours.pad(scored, return_tensors="pt")["label"].dtype == theirs.pad(scored, return_tensors="pt")["label"].dtype
    batch = transformers.DataCollatorWithPadding(ours, return_tensors="pt")(features)
    assert batch["input_ids"].shape == (3, max(len(f["input_ids"]) for f in features))
    assert batch["labels"].tolist() == [0, 1, 2] and batch["attention_mask"].sum().item() == sum(
        len(f["input_ids"]) for f in features)


def test_tokenize_takes_a_pair_and_add_special_tokens_as_transformers(both):
    ours, theirs = both
    for args, kwargs in ((("Anne walked to Lyme.",), {}), (("Anne walked to Lyme.",), {"add_special_tokens": True}),
                         (("Anne walked.", "Yes."), {}), (("Anne walked.", "Yes."), {"add_special_tokens": True})):
        assert ours.tokenize(*args, **kwargs) == theirs.tokenize(*args, **kwargs), (args, kwargs)
