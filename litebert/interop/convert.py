"""Convert ALBERT checkpoints into a litebert model directory (which is also an HF model directory).

Two sources:
  * HuggingFace: litebert uses HF's state-dict names, so this is load + save (and a chance to fix the v1
    configs' `hidden_act`).
  * The original TF checkpoints (google-research/albert, and the TF-Hub v2 modules): read with
    litebert.interop.tf_checkpoint (no TensorFlow needed) and renamed by ONE table, `TF_RENAMES`, below.

Every TF variable is accounted for: it is renamed into the model, or an optimizer slot / step counter
(skipped by design), or a weight the chosen head has no place for (reported, e.g. `cls/*` when converting
to the bare AlbertModel). A variable that matches no rule, or a model weight that nothing fills, is an error,
never a silent skip: a silently random-initialised layer is the classic conversion bug. The one weight a
checkpoint may rightly lack is embedding_hidden_mapping_in when embedding_size == hidden_size: TF ALBERT has no
projection then, and the converted one is the identity (reported).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import torch

from litebert.config import AlbertConfig, read_json_object
from litebert.errors import CheckpointError
from litebert.files import same_path, write_files_atomically
from litebert.heads import MODEL_CLASSES, model_class
from litebert.interop.tf_checkpoint import TFCheckpoint
from litebert.runconfig import parse_verb, verb_parser
from litebert.text.transformers_files import SPIECE_FILE, TOKENIZER_FILES, match_model_max_length
from litebert.weight_shards import INDEX_NAME
from litebert.weights import resolve_model_dir

# -- the rename table -----------------------------------------------------------------------------------------
# (TF scope, litebert/HF name, kind). {g} / {i} are the group / inner-group indices, the same in both names.
# Sources of the TF names: modeling.py (bert/*: attention_ffn_block, dense_layer_3d, layer_norm scopes) and
# run_pretraining.py / classifier_utils.py (cls/*, output_*).
_TF_BLOCK = "bert/encoder/transformer/group_{g}/inner_group_{i}/"
_LAYER = "albert.encoder.albert_layer_groups.{g}.albert_layers.{i}."
TF_RENAMES: list[tuple[str, str, str]] = [
    ("bert/embeddings/word_embeddings", "albert.embeddings.word_embeddings.weight", "tensor"),
    ("bert/embeddings/position_embeddings", "albert.embeddings.position_embeddings.weight", "tensor"),
    ("bert/embeddings/token_type_embeddings", "albert.embeddings.token_type_embeddings.weight", "tensor"),
    ("bert/embeddings/LayerNorm", "albert.embeddings.LayerNorm", "layer_norm"),
    ("bert/encoder/embedding_hidden_mapping_in", "albert.encoder.embedding_hidden_mapping_in", "dense"),
    (_TF_BLOCK + "attention_1/self/query", _LAYER + "attention.query", "dense"),  # stored 2-D (H, H), viewed
    (_TF_BLOCK + "attention_1/self/key", _LAYER + "attention.key", "dense"),      # as (H, heads, head_dim)
    (_TF_BLOCK + "attention_1/self/value", _LAYER + "attention.value", "dense"),
    (_TF_BLOCK + "attention_1/output/dense", _LAYER + "attention.dense", "dense"),
    (_TF_BLOCK + "LayerNorm", _LAYER + "attention.LayerNorm", "layer_norm"),  # after attention
    (_TF_BLOCK + "ffn_1/intermediate/dense", _LAYER + "ffn", "dense"),
    (_TF_BLOCK + "ffn_1/intermediate/output/dense", _LAYER + "ffn_output", "dense"),
    (_TF_BLOCK + "LayerNorm_1", _LAYER + "full_layer_layer_norm", "layer_norm"),  # after the FFN
    ("bert/pooler/dense", "albert.pooler", "dense"),
    ("cls/predictions/transform/dense", "predictions.dense", "dense"),
    ("cls/predictions/transform/LayerNorm", "predictions.LayerNorm", "layer_norm"),
    ("cls/predictions/output_bias", "predictions.bias", "tensor"),  # the decoder weight is the word embedding
    # The SOP and run_classifier heads store (out, in) and multiply with transpose_b: already torch's layout.
    ("cls/seq_relationship/output_weights", "sop_classifier.classifier.weight", "tensor"),
    ("cls/seq_relationship/output_bias", "sop_classifier.classifier.bias", "tensor"),
    ("output_weights", "classifier.weight", "tensor"),  # run_classifier's head
    ("output_bias", "classifier.bias", "tensor"),
]
# kind -> [(TF suffix, litebert suffix, transpose)]. TF dense kernels are (in, out); torch Linear is (out, in).
KINDS: dict[str, list[tuple[str, str, bool]]] = {
    "tensor": [("", "", False)],
    "dense": [("/kernel", ".weight", True), ("/bias", ".bias", False)],
    "layer_norm": [("/gamma", ".weight", False), ("/beta", ".bias", False)],
}
TF_HUB_PREFIX = "module/"  # the TF-Hub modules hold the same variables under this scope
# Optimizer state and bookkeeping, skipped by name: ALBERT's LAMB and AdamWeightDecay keep `<var>/adam_m|adam_v`;
# tf.train optimizers use `<var>/Adam|Adam_1|Momentum` and `beta*_power`; mixed precision adds loss-scale state;
# TF2 object-based checkpoints add their object graph.
OPTIMIZER_STATE = re.compile(
    r"(^|/)(adam_m|adam_v|Adam|Adam_1|AdamWeightDecayOptimizer|AdamWeightDecayOptimizer_1|LAMB|LAMB_1|Momentum)$"
    r"|^(global_step|beta1_power|beta2_power|good_steps|current_loss_scale|loss_scale"
    r"|_CHECKPOINTABLE_OBJECT_GRAPH)$")
TF_ACTIVATIONS = {"gelu": "gelu_new"}  # TF ALBERT's gelu is the tanh approximation: HF/litebert "gelu_new"
SPM_NAMES = ("30k-clean.model", SPIECE_FILE)  # the released models' tokenizer name, then HF's


class ConversionError(CheckpointError):
    """A checkpoint that does not convert cleanly; the message says which variables and why."""


@cache
def _rules() -> list[tuple[re.Pattern, str, bool]]:
    rules = []
    for tf_scope, target, kind in TF_RENAMES:
        for tf_suffix, suffix, transpose in KINDS[kind]:
            pattern = re.escape(tf_scope + tf_suffix)
            pattern = pattern.replace(re.escape("{g}"), r"(?P<g>\d+)").replace(re.escape("{i}"), r"(?P<i>\d+)")
            rules.append((re.compile(pattern), target + suffix, transpose))
    return rules


def tf_to_litebert_name(tf_name: str) -> tuple[str, bool] | None:
    """(litebert name, transpose?) for a TF variable name, or None if no rule of TF_RENAMES matches."""
    name = tf_name.removeprefix(TF_HUB_PREFIX)
    for pattern, target, transpose in _rules():
        match = pattern.fullmatch(name)
        if match:
            return target.format(**match.groupdict()), transpose
    return None


TF_HEADS = {"pretraining": "AlbertForPreTraining", "masked_lm": "AlbertForMaskedLM", "base": "AlbertModel",
            "sequence_classification": "AlbertForSequenceClassification"}


# -- TF -> litebert ------------------------------------------------------------------------------------------

@dataclass
class ConversionReport:
    """Where every TF variable went."""

    source: str
    converted: dict[str, str] = field(default_factory=dict)  # TF name -> litebert name
    optimizer_state: list[str] = field(default_factory=list)  # slots, step counters: skipped by design
    unused: dict[str, str] = field(default_factory=dict)  # TF name -> litebert name the chosen head lacks
    identity: list[str] = field(default_factory=list)  # E == H: the projection TF skips, filled as the identity
    out_dir: str | None = None
    tokenizer: str | None = None  # the SentencePiece model copied beside the weights

    def summary(self) -> str:
        lines = [f"{self.source}: {len(self.converted)} tensors converted, "
                 f"{len(self.optimizer_state)} optimizer/step variables skipped"]
        if self.identity:
            lines.append("  embedding_size == hidden_size: no embedding_hidden_mapping_in in the checkpoint (TF "
                         "skips it), converted as the identity")
        if self.unused:
            scopes = sorted({name.rsplit("/", 1)[0] for name in self.unused})
            lines.append(f"  not used by this head ({len(self.unused)}): {', '.join(scopes)}")
        if self.out_dir:
            lines.append(f"  wrote {self.out_dir}" + (f" (tokenizer from {self.tokenizer})" if self.tokenizer else
                                                      " (no 30k-clean.model / spiece.model found to copy)"))
        return "\n".join(lines)


def tf_to_litebert_state(tensors: Mapping[str, np.ndarray], model: torch.nn.Module, source: str = "<checkpoint>"
                         ) -> tuple[dict[str, torch.Tensor], ConversionReport]:
    """Rename and transpose TF variables into `model`'s state dict, with strict accounting (see module doc).
    `tensors` may be lazy (a TFCheckpoint): only the variables the model uses are read."""
    tied = getattr(model, "tied_weights", {})
    own = {k: v for k, v in model.state_dict(keep_vars=True).items() if k not in tied}  # names, shapes, dtypes
    bare = not any(k.startswith("albert.") for k in own)  # an AlbertModel: its names lack the prefix
    report = ConversionReport(source)
    state: dict[str, torch.Tensor] = {}
    unknown = []
    for tf_name in tensors:
        if OPTIMIZER_STATE.search(tf_name):
            report.optimizer_state.append(tf_name)
            continue
        renamed = tf_to_litebert_name(tf_name)
        if renamed is None:
            unknown.append(tf_name)
            continue
        name, transpose = renamed
        if bare and name.startswith("albert."):
            name = name.removeprefix("albert.")
        if name not in own:
            report.unused[tf_name] = name
            continue
        if name in state:
            other = next(k for k, v in report.converted.items() if v == name)
            raise ConversionError(f"{source}: {tf_name!r} and {other!r} both map to {name}")
        array = np.asarray(tensors[tf_name])
        array = array.T if transpose else array
        if tuple(array.shape) != tuple(own[name].shape):
            raise ConversionError(f"{source}: {tf_name!r} has shape {list(array.shape)} (after transpose) but the "
                                  f"config gives {name} shape {list(own[name].shape)}: wrong albert_config.json?")
        state[name] = torch.from_numpy(np.ascontiguousarray(array)).to(own[name].dtype)
        report.converted[tf_name] = name
    if unknown:
        raise ConversionError(f"{source}: {len(unknown)} TF variables match no rule of the rename table "
                              f"(litebert/interop/convert.py TF_RENAMES), e.g. {', '.join(unknown[:3])}")
    # A head's weights may go unused (an MLM checkpoint read into a classifier); the encoder's never: a config
    # with fewer groups or inner layers than the checkpoint would run every layer on what is left.
    dropped = [tf for tf, name in report.unused.items()
               if name.removeprefix("albert.").startswith(("embeddings.", "encoder."))]
    if dropped:
        raise ConversionError(f"{source}: {len(dropped)} encoder weights of the checkpoint have no place in a model "
                              f"of this config, e.g. {', '.join(dropped[:2])}: num_hidden_groups / inner_group_num "
                              "of albert_config.json do not match the checkpoint")
    report.identity = _identity_projection(model, own, state)
    missing = [k for k in own if k not in state]
    if missing:
        raise ConversionError(f"{source}: nothing in the checkpoint fills {len(missing)} weights of "
                              f"{type(model).__name__}, e.g. {', '.join(missing[:3])} "
                              "(a different head? see --head; or num_hidden_groups / inner_group_num mismatch)")
    return state, report


def _identity_projection(model: torch.nn.Module, own: dict[str, torch.Tensor], state: dict[str, torch.Tensor]
                         ) -> list[str]:
    """Fill embedding_hidden_mapping_in with the identity where the checkpoint has none because E == H: TF
    ALBERT (modeling.py's transformer_model) makes that projection only when the embedding width differs from
    the hidden size and otherwise passes the embeddings on as they are, which an identity matrix and a zero bias
    compute. Returns the names filled (none when the checkpoint has the projection or E != H)."""
    config = model.config
    names = [k for k in own if k.endswith("encoder.embedding_hidden_mapping_in.weight") and k not in state]
    if config.embedding_size != config.hidden_size or not names:
        return []
    (weight,) = names
    bias = weight.removesuffix("weight") + "bias"
    if bias in state:  # half a projection is a damaged checkpoint, not the E == H layout
        return []
    state[weight] = torch.eye(config.hidden_size, dtype=own[weight].dtype)
    state[bias] = torch.zeros(config.hidden_size, dtype=own[bias].dtype)
    return [weight, bias]


def tf_albert_config(path: str | os.PathLike) -> AlbertConfig:
    """An original albert_config.json as an AlbertConfig (TF "gelu" -> "gelu_new": see TF_ACTIVATIONS)."""
    path = os.fspath(path)
    data = read_json_object(path)
    act = data.get("hidden_act", "gelu")
    data["hidden_act"] = TF_ACTIVATIONS.get(act, act)
    try:
        return AlbertConfig.from_dict(data)
    except (TypeError, ValueError) as e:
        raise ConversionError(f"{path}: {e}") from None


def _find_beside(paths: list[str], names: tuple[str, ...]) -> str | None:
    for directory in dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in paths):
        for name in names:
            if os.path.isfile(os.path.join(directory, name)):
                return os.path.join(directory, name)
    return None


def convert_tf_checkpoint(ckpt_prefix: str | os.PathLike, albert_config_json: str | os.PathLike | None,
                          out_dir: str | os.PathLike, head: str = "pretraining",
                          overwrite: bool = False) -> ConversionReport:
    """Convert an original TF ALBERT checkpoint into a litebert/HF model directory.

    `head` picks the model class: "pretraining" (MLM + SOP, what the released checkpoints hold), "masked_lm",
    "base" (the encoder alone) or "sequence_classification" (a run_classifier.py checkpoint). The config
    defaults to albert_config.json beside the checkpoint; 30k-clean.model found beside either is copied
    as spiece.model. The files are written beside out_dir and moved in once complete (`write_model_files`);
    a model already there is replaced only with overwrite=True."""

    if head not in TF_HEADS:
        raise ConversionError(f"unknown head {head!r}; choose from {', '.join(TF_HEADS)}")
    checkpoint = TFCheckpoint(ckpt_prefix)
    if albert_config_json is None:
        albert_config_json = _find_beside([checkpoint.index_path], ("albert_config.json",))
        if albert_config_json is None:
            raise FileNotFoundError(f"no albert_config.json beside {checkpoint.prefix}; pass --albert-config")
    config = tf_albert_config(albert_config_json)
    if head == "sequence_classification" and "output_weights" in checkpoint:
        config = config.replace(num_labels=checkpoint.info("output_weights").shape[0])
    model = MODEL_CLASSES[TF_HEADS[head]](config)
    state, report = tf_to_litebert_state(checkpoint, model, checkpoint.prefix)
    model.load_checkpoint_state(state, checkpoint.prefix)
    out_dir = os.fspath(out_dir)
    report.out_dir = out_dir
    report.tokenizer = _find_beside([checkpoint.index_path, os.fspath(albert_config_json)], SPM_NAMES)

    def fill(tmp) -> None:
        model.save_pretrained(tmp)
        if report.tokenizer:  # --out may be the checkpoint's dir: an identical spiece.model is no overwrite
            shutil.copyfile(report.tokenizer, os.path.join(tmp, SPIECE_FILE))

    write_model_files(out_dir, fill, overwrite)
    return report


MODEL_DIR_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", INDEX_NAME, "README.md", *TOKENIZER_FILES)


def write_model_files(out_dir: str, fill, overwrite: bool) -> None:
    """A model directory's files, made by fill(tmp) beside out_dir and moved in once complete (config.json
    last), keeping any other files there (a TF checkpoint converted in its own directory). A model there that
    would change is replaced only with overwrite (ConfigError otherwise, before anything is touched)."""
    write_files_atomically(out_dir, fill, owned=MODEL_DIR_FILES, last=("config.json",), overwrite=overwrite)


# -- HF -> litebert ------------------------------------------------------------------------------------------

def convert_hf(name_or_path: str | os.PathLike, out_dir: str | os.PathLike, hidden_act: str | None = None,
               overwrite: bool = False) -> str:
    """Load an HF ALBERT directory or Hub id with litebert (as the class its config names) and save it.
    Names already match; what this adds is litebert's checks on the way (every encoder weight present, shapes
    right) and, with hidden_act="gelu_new", the fix for the v1 configs' erf "gelu". Returns the class name."""

    directory = resolve_model_dir(name_or_path)
    out_dir = os.fspath(out_dir)
    if same_path(directory, out_dir):  # saving would overwrite the checkpoint being converted: refuse up front
        raise ConversionError(f"{out_dir} is the input directory; converting in place would overwrite it "
                              "(choose another --out)")
    cls = model_class(AlbertConfig.load(directory))
    model = cls.from_pretrained(directory, **({"hidden_act": hidden_act} if hidden_act else {}))

    def fill(tmp) -> None:
        model.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(directory, name)):
                shutil.copyfile(os.path.join(directory, name), os.path.join(tmp, name))
        match_model_max_length(tmp)  # HF's tokenizer_config.json may name more positions than the model has

    write_model_files(out_dir, fill, overwrite)
    return cls.__name__


# -- CLI -----------------------------------------------------------------------------------------------------

@dataclass
class ConvertConfig:
    """The options of `litebert convert` (the [convert] table of --config): one source, one output."""

    from_tf: str | None = field(default=None, metadata={
        "help": "original TF checkpoint: the prefix (DIR/model.ckpt-N), its .index file, or its directory",
        "metavar": "CKPT_PREFIX"})
    from_hf: str | None = field(default=None, metadata={
        "help": "a HuggingFace ALBERT directory or Hub id", "metavar": "DIR_OR_HUB_ID"})
    out: str = field(default="", metadata={"help": "output model directory (required)", "metavar": "DIR",
                                           "required": True})
    albert_config: str | None = field(default=None, metadata={
        "help": "--from-tf: albert_config.json (default: the one beside the checkpoint; `--config FILE.json` "
                "is read as this option too)", "metavar": "JSON"})
    head: str = field(default="pretraining", metadata={
        "help": "--from-tf: which model the checkpoint holds (default: pretraining, as released)",
        "choices": tuple(TF_HEADS)})
    hidden_act: str | None = field(default=None, metadata={
        "help": "--from-hf: override hidden_act; the v1 Hub configs say 'gelu' (erf) but the models were trained "
                "with TF's tanh form, 'gelu_new'", "metavar": "NAME"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace a model already in --out (a rerun that writes the same files needs no flag)"})


def cli(argv: list[str]) -> int:

    parser = verb_parser("convert", __doc__, {"conversion": ConvertConfig}, epilog=(
        "examples:\n"
        "  litebert convert --from-tf albert_base/model.ckpt-best --out albert-base-v2\n"
        "      (the original google-research/albert release: albert_config.json and 30k-clean.model are\n"
        "       found beside the checkpoint; no TensorFlow needed; optimizer slots are skipped)\n"
        "  litebert convert --from-hf albert/albert-base-v2 --out albert-base-v2\n"
        "  litebert convert --from-hf ./hf-albert-v1 --hidden-act gelu_new --out albert-v1-fixed\n"))
    args = parser.parse_args(argv)
    if args.config and args.config.endswith(".json"):
        # Before every verb took a TOML --config, convert's --config named the TF albert_config.json; it still does.
        if hasattr(args, "albert_config"):
            parser.error("--config FILE.json and --albert-config both name the albert_config.json")
        args.albert_config, args.config = args.config, None
    (cfg,) = parse_verb(parser, args)
    if bool(cfg.from_tf) == bool(cfg.from_hf):
        parser.error("give one of --from-tf and --from-hf" + (", not both" if cfg.from_tf else ""))
    if cfg.from_tf:
        if cfg.hidden_act:
            parser.error("--hidden-act applies to --from-hf (TF 'gelu' is converted to 'gelu_new' already)")
        print(convert_tf_checkpoint(cfg.from_tf, cfg.albert_config, cfg.out, head=cfg.head,
                                    overwrite=cfg.overwrite).summary())
    else:
        if cfg.albert_config or cfg.head != "pretraining":
            parser.error("--albert-config and --head apply to --from-tf")
        name = convert_hf(cfg.from_hf, cfg.out, hidden_act=cfg.hidden_act, overwrite=cfg.overwrite)
        print(f"{cfg.from_hf}: loaded as {name}; wrote {cfg.out}")
    return 0
