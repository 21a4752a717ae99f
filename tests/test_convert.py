"""Converting ALBERT checkpoints: the TF reader against TensorFlow's own files, the rename table against
TensorFlow's own forward pass, and the result against transformers.

The fixture (tests/fixtures/tf_albert_tiny, made by make_tf_fixture.py with real TensorFlow) holds a tiny
ALBERT saved by tf.compat.v1.train.Saver with the original variable names and optimizer slots, and
reference.npz: every variable by name, a batch, and TF's forward pass on it. No TensorFlow is needed here.
"""

import os
import shutil

import numpy as np
import pytest
import torch

from litebert.cli import main as litebert_main
from litebert.config import AlbertConfig
from litebert.heads import AlbertForSequenceClassification
from litebert.interop.convert import (
    ConversionError,
    convert_hf,
    convert_tf_checkpoint,
    tf_albert_config,
    tf_to_litebert_state,
)
from litebert.interop.tf_checkpoint import (
    CheckpointFormatError,
    TFCheckpoint,
    _crc_update,
    crc32c,
    load_tf_checkpoint,
    resolve_prefix,
)
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "tf_albert_tiny")
PREFIX = os.path.join(FIXTURE, "model.ckpt-7")


@pytest.fixture(scope="module")
def reference():
    with np.load(os.path.join(FIXTURE, "reference.npz")) as z:
        data = {k: z[k] for k in z.files}
    return {
        "vars": {k[4:]: v for k, v in data.items() if k.startswith("var:")},
        "inputs": {k[6:]: torch.from_numpy(v).long() for k, v in data.items() if k.startswith("input:")},
        "outputs": {k[4:]: v for k, v in data.items() if k.startswith("out:")},
    }


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("converted")
    report = convert_tf_checkpoint(PREFIX, os.path.join(FIXTURE, "albert_config.json"), out)
    return out, report


def copy_fixture(tmp_path):
    target = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, target)
    return target


# -- the reader ----------------------------------------------------------------------------------------------

def test_crc32c_known_value_and_fast_path_agree():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    data = np.random.default_rng(0).integers(0, 256, 150_001, dtype=np.uint8).tobytes()  # takes the numpy path
    assert crc32c(data) == _crc_update(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def test_reader_returns_exactly_the_saved_tensors(reference):
    tensors = load_tf_checkpoint(PREFIX)
    assert set(tensors) == set(reference["vars"])  # weights, adam_m/adam_v slots, global_step
    for name, expected in reference["vars"].items():
        assert tensors[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(tensors[name], expected, err_msg=name)
    assert tensors["global_step"].dtype == np.int64 and tensors["global_step"] == 7


def test_reader_dtypes_and_refusals():
    ckpt = TFCheckpoint(os.path.join(FIXTURE, "dtypes.ckpt"))
    np.testing.assert_array_equal(ckpt["f16"], np.array([1.5, -2.25, 65504.0], dtype=np.float16))
    bf16 = ckpt["bf16"]  # widened to float32: exact values, and 1e30 rounded to bf16's 8 significant bits
    assert bf16.dtype == np.float32 and not (bf16.view(np.uint32) & 0xFFFF).any()
    np.testing.assert_array_equal(bf16[:3], [1.0, -3.5, 0.15625])
    assert abs(bf16[3] / 1e30 - 1) < 2 ** -8
    np.testing.assert_array_equal(ckpt["f64"], np.array([[np.pi, -1e-300]]))
    np.testing.assert_array_equal(ckpt["i32"], np.arange(-3, 3, dtype=np.int32).reshape(2, 3))
    np.testing.assert_array_equal(ckpt["i64"], np.array([2 ** 40, -5]))
    np.testing.assert_array_equal(ckpt["u8"], np.array([0, 255], dtype=np.uint8))
    np.testing.assert_array_equal(ckpt["flag"], np.array([True, False, True]))
    assert ckpt["scalar"].shape == () and ckpt["scalar"] == 0.5
    assert ckpt["empty"].shape == (0, 3)
    assert ckpt.info("text").dtype_name == "string"
    with pytest.raises(CheckpointFormatError, match="'text' has dtype string"):
        ckpt["text"]


def test_prefix_resolution(tmp_path):
    assert resolve_prefix(FIXTURE) == PREFIX  # via the TF `checkpoint` file
    directory = copy_fixture(tmp_path)
    (directory / "checkpoint").write_text('model_checkpoint_path: "gs://bucket/run/model.ckpt-7"\n')
    assert resolve_prefix(directory) == str(directory / "model.ckpt-7")  # the file name, found here
    (directory / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-9"\n')  # not here: not another one
    with pytest.raises(FileNotFoundError, match="names model.ckpt-9, which is not in"):
        resolve_prefix(directory)
    (directory / "checkpoint").unlink()
    with pytest.raises(FileNotFoundError, match="found dtypes.ckpt, model.ckpt-7; pass the checkpoint prefix"):
        resolve_prefix(directory)
    assert resolve_prefix(PREFIX + ".index") == PREFIX
    assert resolve_prefix(PREFIX + ".data-00000-of-00001") == PREFIX
    with pytest.raises(FileNotFoundError, match="no such TF checkpoint index"):
        TFCheckpoint(os.path.join(FIXTURE, "model.ckpt-8"))


@pytest.mark.parametrize("damage", ["truncate_index", "corrupt_index", "truncate_data", "corrupt_data", "no_data"])
def test_damaged_files_give_one_line_errors_naming_the_file(tmp_path, damage, capsys):
    directory = copy_fixture(tmp_path)
    index, data = directory / "model.ckpt-7.index", directory / "model.ckpt-7.data-00000-of-00001"
    victim = index if "index" in damage else data
    raw = bytearray(victim.read_bytes())
    if damage.startswith("truncate"):
        victim.write_bytes(raw[: len(raw) // 2])
    elif damage.startswith("corrupt"):
        raw[200] ^= 0x10  # inside the first data block of the index; inside word_embeddings' bytes in the data
        victim.write_bytes(raw)
    else:
        victim.unlink()
    expected = {"truncate_index": "truncated", "corrupt_index": "checksum mismatch", "truncate_data": "truncated",
                "corrupt_data": "checksum mismatch", "no_data": "missing data file"}[damage]
    with pytest.raises((CheckpointFormatError, FileNotFoundError), match=expected) as error:
        load_tf_checkpoint(directory / "model.ckpt-7")
    assert str(victim) in str(error.value) and "\n" not in str(error.value)
    # Through the CLI: exit code 2 and one line on stderr.
    assert litebert_main(["convert", "--from-tf", str(directory), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(victim) in err and expected in err


# -- the rename table ----------------------------------------------------------------------------------------

# Written out by hand (not derived from TF_RENAMES), one of each kind, at non-zero group / inner indices.
HAND_MAPPED = {
    "bert/embeddings/word_embeddings": ("albert.embeddings.word_embeddings.weight", False),
    "bert/embeddings/token_type_embeddings": ("albert.embeddings.token_type_embeddings.weight", False),
    "bert/embeddings/position_embeddings": ("albert.embeddings.position_embeddings.weight", False),
    "bert/embeddings/LayerNorm/gamma": ("albert.embeddings.LayerNorm.weight", False),
    "bert/embeddings/LayerNorm/beta": ("albert.embeddings.LayerNorm.bias", False),
    "bert/encoder/embedding_hidden_mapping_in/kernel": ("albert.encoder.embedding_hidden_mapping_in.weight", True),
    "bert/encoder/transformer/group_1/inner_group_0/attention_1/self/query/kernel":
        ("albert.encoder.albert_layer_groups.1.albert_layers.0.attention.query.weight", True),
    "bert/encoder/transformer/group_0/inner_group_1/attention_1/self/key/bias":
        ("albert.encoder.albert_layer_groups.0.albert_layers.1.attention.key.bias", False),
    "bert/encoder/transformer/group_1/inner_group_1/attention_1/self/value/kernel":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.attention.value.weight", True),
    "bert/encoder/transformer/group_1/inner_group_1/attention_1/output/dense/kernel":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.attention.dense.weight", True),
    "bert/encoder/transformer/group_1/inner_group_1/LayerNorm/gamma":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.attention.LayerNorm.weight", False),
    "bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/dense/kernel":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.ffn.weight", True),
    "bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/output/dense/kernel":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.ffn_output.weight", True),
    "bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/output/dense/bias":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.ffn_output.bias", False),
    "bert/encoder/transformer/group_1/inner_group_1/LayerNorm_1/beta":
        ("albert.encoder.albert_layer_groups.1.albert_layers.1.full_layer_layer_norm.bias", False),
    "bert/pooler/dense/kernel": ("albert.pooler.weight", True),
    "cls/predictions/transform/dense/kernel": ("predictions.dense.weight", True),
    "cls/predictions/transform/LayerNorm/gamma": ("predictions.LayerNorm.weight", False),
    "cls/predictions/output_bias": ("predictions.bias", False),
    "cls/seq_relationship/output_weights": ("sop_classifier.classifier.weight", False),
    "cls/seq_relationship/output_bias": ("sop_classifier.classifier.bias", False),
}


def test_every_tensor_lands_at_its_name_with_the_right_transpose(converted, reference):
    from safetensors.numpy import load_file
    out, report = converted
    saved = load_file(os.path.join(out, "model.safetensors"))
    weights = {k: v for k, v in reference["vars"].items() if "/adam_" not in k and k != "global_step"}
    assert set(report.converted) == set(weights)
    assert sorted(report.optimizer_state) == sorted(set(reference["vars"]) - set(weights))
    assert not report.unused
    for tf_name, (name, transpose) in HAND_MAPPED.items():
        assert report.converted[tf_name] == name
        np.testing.assert_array_equal(saved[name], weights[tf_name].T if transpose else weights[tf_name])
    for tf_name, name in report.converted.items():  # and all the others, by the kernel rule
        value = weights[tf_name]
        np.testing.assert_array_equal(saved[name], value.T if tf_name.endswith("/kernel") else value, err_msg=tf_name)
    config = AlbertConfig.load(out)
    assert config.hidden_act == "gelu_new"  # TF ALBERT's "gelu" is the tanh form
    assert config.architectures == ["AlbertForPreTraining"] and config.extra["down_scale_factor"] == 1


def test_converted_model_computes_what_tensorflow_computed(converted, reference):
    model = AlbertForPreTraining.from_pretrained(converted[0]).eval()
    with torch.no_grad():
        h, pooled = model.albert(**reference["inputs"]).to_tuple()
        out = model(**reference["inputs"])
    expected = reference["outputs"]
    torch.testing.assert_close(h, torch.from_numpy(expected["sequence_output"]), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(pooled, torch.from_numpy(expected["pooled_output"]), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.prediction_logits, torch.from_numpy(expected["mlm_logits"]), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.sop_logits, torch.from_numpy(expected["sop_logits"]), atol=2e-5, rtol=1e-5)


def test_converted_directory_loads_in_transformers(converted, reference):
    transformers = pytest.importorskip("transformers")
    ours = AlbertForPreTraining.from_pretrained(converted[0]).eval()
    theirs = transformers.AlbertForPreTraining.from_pretrained(converted[0]).eval()
    with torch.no_grad():
        a, b = ours(**reference["inputs"]), theirs(**reference["inputs"])
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, atol=1e-5, rtol=1e-5)


def test_strict_accounting(reference):
    config = tf_albert_config(os.path.join(FIXTURE, "albert_config.json"))
    model = AlbertForPreTraining(config)
    tensors = dict(reference["vars"])
    with pytest.raises(ConversionError, match="match no rule.*bert/encoder/mystery/kernel"):
        tf_to_litebert_state({**tensors, "bert/encoder/mystery/kernel": np.zeros(3)}, model)
    without_pooler_bias = {k: v for k, v in tensors.items() if k != "bert/pooler/dense/bias"}
    with pytest.raises(ConversionError, match="fills 1 weights of AlbertForPreTraining, e.g. albert.pooler.bias"):
        tf_to_litebert_state(without_pooler_bias, model)
    with pytest.raises(ConversionError, match="shape .* albert_config.json"):
        tf_to_litebert_state(tensors, AlbertForPreTraining(config.replace(intermediate_size=20)))
    with pytest.raises(ConversionError, match="fills .* weights"):  # a layout mismatch: 1 group where TF has 2
        tf_to_litebert_state(tensors, AlbertForPreTraining(config.replace(num_hidden_groups=4)))
    # Fewer groups / inner layers than the checkpoint: every weight of the model is filled, but the rest of the
    # encoder had nowhere to go (it converted, and ran every layer on group 0, block 0).
    assert (config.num_hidden_groups, config.inner_group_num) == (2, 2)
    for fewer in ({"num_hidden_groups": 1}, {"inner_group_num": 1}):
        with pytest.raises(ConversionError, match="encoder weights of the checkpoint have no place.*inner_group_num"):
            tf_to_litebert_state(tensors, AlbertForPreTraining(config.replace(**fewer)))
    # The TF-Hub modules' "module/" scope converts the same.
    hub = {("module/" + k if k != "global_step" else k): v for k, v in tensors.items()}
    state, report = tf_to_litebert_state(hub, model)
    assert len(report.converted) == 80 and len(report.optimizer_state) == 161


def test_a_checkpoint_with_embedding_size_equal_to_hidden_size_converts_without_a_projection(reference):
    """TF ALBERT makes embedding_hidden_mapping_in only when E != H (modeling.py's transformer_model); with E == H
    the embeddings go to the first layer as they are, so the converted projection is the identity, exactly."""
    config = tf_albert_config(os.path.join(FIXTURE, "albert_config.json"))
    H, E = config.hidden_size, config.embedding_size
    rng = np.random.default_rng(0)
    tensors = {}
    for name, value in reference["vars"].items():  # the fixture's layout with E widened to H
        if "embedding_hidden_mapping_in" in name:
            continue
        if name.startswith(("bert/embeddings/", "cls/predictions/transform/")) and value.shape[-1] == E:
            value = rng.standard_normal((*value.shape[:-1], H)).astype(np.float32)
        tensors[name] = value
    same = config.replace(embedding_size=H)
    state, report = tf_to_litebert_state(tensors, AlbertForPreTraining(same))
    assert report.identity and "converted as the identity" in report.summary()
    assert torch.equal(state["albert.encoder.embedding_hidden_mapping_in.weight"], torch.eye(H))
    assert not state["albert.encoder.embedding_hidden_mapping_in.bias"].any()
    model = AlbertForPreTraining(same)
    model.load_checkpoint_state(state)
    ids = torch.tensor([[2, 7, 9, 3]])
    embedded = model.albert.embeddings(ids, torch.zeros_like(ids))
    torch.testing.assert_close(model.albert.encoder.embedding_hidden_mapping_in(embedded), embedded)
    # E != H: a checkpoint without the projection is still refused (a weight nothing fills)
    without = {k: v for k, v in reference["vars"].items() if "embedding_hidden_mapping_in" not in k}
    with pytest.raises(ConversionError, match="fills 2 weights.*embedding_hidden_mapping_in"):
        tf_to_litebert_state(without, AlbertForPreTraining(config))


def test_other_heads(tmp_path, reference):
    report = convert_tf_checkpoint(PREFIX, None, tmp_path / "base", head="base")  # config found beside
    assert sorted(report.unused) == sorted(k for k in reference["vars"] if k.startswith("cls/") and "/adam_" not in k)
    base = AlbertModel.from_pretrained(tmp_path / "base").eval()
    with torch.no_grad():
        h, _ = base(**reference["inputs"]).to_tuple()
    torch.testing.assert_close(h, torch.from_numpy(reference["outputs"]["sequence_output"]), atol=2e-5, rtol=1e-5)
    report = convert_tf_checkpoint(PREFIX, None, tmp_path / "mlm", head="masked_lm")
    assert set(report.unused) == {"bert/pooler/dense/kernel", "bert/pooler/dense/bias",
                                  "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"}
    AlbertForMaskedLM.from_pretrained(tmp_path / "mlm")
    with pytest.raises(ConversionError, match="classifier.weight"):  # a pretraining checkpoint has no classifier
        convert_tf_checkpoint(PREFIX, None, tmp_path / "cls", head="sequence_classification")
    # A run_classifier.py checkpoint: its head is `output_weights` (num_labels, H) at the top level.
    classifier = {k: v for k, v in reference["vars"].items() if not k.startswith("cls/")}
    classifier |= {"output_weights": np.ones((3, 16), np.float32), "output_bias": np.arange(3, dtype=np.float32)}
    config = tf_albert_config(os.path.join(FIXTURE, "albert_config.json")).replace(num_labels=3)
    state, report = tf_to_litebert_state(classifier, AlbertForSequenceClassification(config))
    assert report.converted["output_weights"] == "classifier.weight" and state["classifier.bias"].tolist() == [0, 1, 2]
    with pytest.raises(ConversionError, match="unknown head"):
        convert_tf_checkpoint(PREFIX, None, tmp_path / "x", head="squad")


def test_cli_from_tf_copies_the_sentencepiece_model(tmp_path, capsys):
    directory = copy_fixture(tmp_path)
    (directory / "30k-clean.model").write_bytes(b"stand-in for a SentencePiece model")
    out = tmp_path / "out"
    assert litebert_main(["convert", "--from-tf", str(directory / "model.ckpt-7"), "--config",
                          str(directory / "albert_config.json"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "80 tensors converted, 161 optimizer/step variables skipped" in printed and str(out) in printed
    assert (out / "spiece.model").read_bytes() == b"stand-in for a SentencePiece model"


def test_cli_options_from_a_toml_table_and_albert_config_json_as_before(tmp_path, capsys):
    """`--config` is a TOML file with a [convert] table, as for every verb; a .json there is still read as the
    albert_config.json it named before (the test above), and naming that file twice is refused."""
    directory = copy_fixture(tmp_path)
    toml = tmp_path / "convert.toml"
    toml.write_text(f'[convert]\nfrom_tf = "{directory / "model.ckpt-7"}"\nalbert_config = '
                    f'"{directory / "albert_config.json"}"\nhead = "base"\n')
    assert litebert_main(["convert", "--config", str(toml), "--out", str(tmp_path / "out")]) == 0
    assert "not used by this head" in capsys.readouterr().out  # head = "base": the cls/* variables are unused
    assert AlbertConfig.load(tmp_path / "out").architectures == ["AlbertModel"]
    with pytest.raises(SystemExit) as exit_:
        litebert_main(["convert", "--from-tf", str(directory), "--config", str(directory / "albert_config.json"),
                       "--albert-config", str(directory / "albert_config.json"), "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "both name the albert_config.json" in capsys.readouterr().err


def test_converting_into_the_source_directory(tmp_path, capsys):
    """--out naming the input. From TF it is fine (no TF file is overwritten) and the spiece.model found there
    stays as it is, not copied onto itself; from HF it would overwrite the model being read, so it is refused
    before anything is written."""
    directory = copy_fixture(tmp_path)
    (directory / "spiece.model").write_bytes(b"stand-in for a SentencePiece model")
    assert litebert_main(["convert", "--from-tf", str(directory / "model.ckpt-7"), "--out", str(directory)]) == 0
    assert (directory / "spiece.model").read_bytes() == b"stand-in for a SentencePiece model"
    capsys.readouterr()

    def contents_and_times():
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}

    before = contents_and_times()
    assert litebert_main(["convert", "--from-hf", str(directory), "--out", str(directory / ".")]) == 2
    err = capsys.readouterr().err
    assert "is the input directory" in err and err.count("\n") == 1
    assert contents_and_times() == before


def test_tf_config_rejects_what_litebert_cannot_run(tmp_path):
    path = tmp_path / "albert_config.json"
    path.write_text('{"hidden_size": 16, "num_attention_heads": 2, "net_structure_type": 1}')
    with pytest.raises(ConversionError, match="net_structure_type"):
        tf_albert_config(path)
    path.write_text('{"hidden_act": "linear"}')
    with pytest.raises(ConversionError, match="hidden_act"):
        tf_albert_config(path)


# -- HF -> litebert ------------------------------------------------------------------------------------------

def test_from_hf(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=24, max_position_embeddings=16,
                                          hidden_act="gelu")
    hf = transformers.AlbertForMaskedLM(hf_config).eval()
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "spiece.model").write_bytes(b"spm")
    assert litebert_main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "out")]) == 0
    assert "loaded as AlbertForMaskedLM" in capsys.readouterr().out
    ours = AlbertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    assert (tmp_path / "out" / "spiece.model").read_bytes() == b"spm"
    ids = torch.randint(5, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, atol=1e-5, rtol=1e-5)
    convert_hf(tmp_path / "hf", tmp_path / "fixed", hidden_act="gelu_new")
    assert AlbertConfig.load(tmp_path / "fixed").hidden_act == "gelu_new"


def test_cli_help_and_usage_errors(capsys):
    with pytest.raises(SystemExit) as exit_:
        litebert_main(["convert", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    assert "--from-tf" in help_text and "--from-hf" in help_text and "no TensorFlow needed" in help_text
    with pytest.raises(SystemExit) as exit_:
        litebert_main(["convert", "--from-hf", "x", "--head", "base", "--out", "y"])
    assert exit_.value.code == 2
    assert litebert_main(["convert", "--from-hf", "/no/such/dir", "--out", "y"]) == 2
