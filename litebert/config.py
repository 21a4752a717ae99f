"""AlbertConfig: the architecture, and nothing else.

Field names are those of HuggingFace's / the original TF `config.json`, so a released ALBERT config reads
as it is and a litebert config loads in transformers unchanged. The one addition is `sharing`, the knob of
the paper's Table 5 ablation, which HF ignores (see `sharing` below for why HF still computes the same thing).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from litebert import files
from litebert.errors import ConfigError

IGNORE_INDEX = -100  # the label of positions and pairs no loss reads (F.cross_entropy's default ignore_index)

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "quick_gelu", "relu", "silu", "swish", "tanh")
SHARING = ("all", "attention", "ffn", "none")
# HF's loss rules (heads.sequence_loss); anything else would silently fall through to multi-label BCE.
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")

# Keys that HF writes into config.json for its own bookkeeping, and the original ALBERT config's unused
# research knobs. They are kept (round-tripped) but have no effect; the research knobs must hold their
# neutral value, since litebert (like HF) does not implement them.
_NEUTRAL_RESEARCH_KNOBS = {"down_scale_factor": 1, "gap_size": 0, "net_structure_type": 0, "num_memory_blocks": 0}
# Fields that must hold a number of this kind (an int is a float here, as in JSON), and those that may be null.
_NUMBER_FIELDS = {"pad_token_id": int, "hidden_dropout_prob": float, "attention_probs_dropout_prob": float,
                  "classifier_dropout_prob": float, "initializer_range": float, "layer_norm_eps": float}
_MAY_BE_NONE = ("pad_token_id", "classifier_dropout_prob")


@dataclass
class AlbertConfig:
    """ALBERT architecture. Defaults are albert-base-v2."""

    vocab_size: int = 30000
    embedding_size: int = 128  # E: the factorized vocabulary embedding (paper section 3.1)
    hidden_size: int = 768  # H
    num_hidden_layers: int = 12  # L: how many times a layer is applied
    num_hidden_groups: int = 1  # G: distinct parameter groups; layer l uses group l * G // L
    inner_group_num: int = 1  # blocks inside each group, all run at every application of the group
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    classifier_dropout_prob: float | None = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0  # None (as HF allows): no embedding row is kept at zero
    bos_token_id: int = 2
    eos_token_id: int = 3
    # Heads. HF derives num_labels from id2label; we keep both so config.json matches HF's. None (unnamed labels)
    # becomes transformers' LABEL_i names, so `config.id2label[pred]` names any prediction, as there.
    num_labels: int = 2
    id2label: dict[int, str] | None = None
    problem_type: str | None = None  # "regression" | "single_label_classification" | "multi_label_classification"
    # Table 5 of the paper. "all" is ALBERT: layers share through the G groups above. The others give each
    # layer its own group (needs G == L, inner_group_num == 1) and then tie one sub-layer across all layers:
    # "attention" shares only attention, "ffn" only the feed-forward, "none" nothing (BERT-style).
    sharing: str = "all"
    # What a model's call returns when it does not say (transformers' habit:
    # AutoModel.from_pretrained(path, output_hidden_states=True) for every layer's states); a call's own flag wins.
    output_hidden_states: bool = False
    output_attentions: bool = False
    architectures: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # unknown config.json keys, round-tripped

    def __post_init__(self) -> None:
        if self.id2label is not None:
            if not isinstance(self.id2label, dict):
                raise ConfigError("invalid AlbertConfig: id2label must map label ids to names (a JSON object), "
                                  f"got a {type(self.id2label).__name__}")
            try:
                id2label = {int(k): str(v) for k, v in self.id2label.items()}
            except (TypeError, ValueError):
                raise ConfigError(f"invalid AlbertConfig: id2label's keys must be label ids (0, 1, ...), got "
                                  f"{list(self.id2label)}") from None
            # The head has one output per label and output i is named id2label[i]: ids with a gap (0 and 2)
            # would give an output no name, and the label lookups fail far from here (KeyError: 1).
            if sorted(id2label) != list(range(len(id2label))):
                raise ConfigError(f"invalid AlbertConfig: id2label's ids must be 0..{len(id2label) - 1}, one per "
                                  f"label, got {sorted(id2label)}")
            self.id2label, self.num_labels = id2label, len(id2label)
        self.validate()
        if self.id2label is None:
            self.id2label = {i: f"LABEL_{i}" for i in range(self.num_labels)}

    def validate(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ConfigError(f"invalid AlbertConfig: {msg}")

        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
                     "inner_group_num", "num_attention_heads", "intermediate_size", "max_position_embeddings",
                     "type_vocab_size", "num_labels"):
            value = getattr(self, name)
            need(_is_number(value, int) and value > 0, f"{name} must be a positive integer, got {value!r}")
        # A value of the wrong JSON type ("0.1" for 0.1) is named here, not met as a comparison's TypeError
        # below or as a failure at the first forward pass or weight initialisation.
        for name, kind in _NUMBER_FIELDS.items():
            value = getattr(self, name)
            need((value is None and name in _MAY_BE_NONE) or _is_number(value, kind),
                 f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
        need(self.hidden_size % self.num_attention_heads == 0,
             f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}")
        need(self.num_hidden_layers % self.num_hidden_groups == 0,
             f"num_hidden_layers {self.num_hidden_layers} is not divisible by num_hidden_groups {self.num_hidden_groups}")
        need(self.hidden_act in ACTIVATIONS, f"unknown hidden_act {self.hidden_act!r}; choose from {', '.join(ACTIVATIONS)}")
        need(self.sharing in SHARING, f"unknown sharing {self.sharing!r}; choose from {', '.join(SHARING)}")
        if self.sharing != "all":
            need(self.num_hidden_groups == self.num_hidden_layers and self.inner_group_num == 1,
                 f"sharing={self.sharing!r} gives every layer its own group: set num_hidden_groups = "
                 f"num_hidden_layers ({self.num_hidden_layers}) and inner_group_num = 1")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            value = getattr(self, name)
            need(value is None or 0.0 <= value < 1.0, f"{name} must be in [0, 1), got {value!r}")
        need(self.layer_norm_eps > 0, f"layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        need(self.initializer_range >= 0, f"initializer_range must be >= 0, got {self.initializer_range!r}")
        need(self.pad_token_id is None or 0 <= self.pad_token_id < self.vocab_size,
             f"pad_token_id {self.pad_token_id} outside vocab_size {self.vocab_size}")
        for name in ("output_hidden_states", "output_attentions"):
            need(isinstance(getattr(self, name), bool), f"{name} must be true or false, got {getattr(self, name)!r}")
        need(self.problem_type is None or self.problem_type in PROBLEM_TYPES,
             f"unknown problem_type {self.problem_type!r}; choose from {', '.join(PROBLEM_TYPES)}")
        # HF's AlbertForMaskedLM can keep a separate decoder matrix; litebert's heads have no slot for it, so
        # loading one would silently predict with the word embeddings instead.
        need(self.extra.get("tie_word_embeddings", True) is not False,
             "tie_word_embeddings is false, but litebert ties the MLM decoder to the word embeddings as ALBERT "
             "does and this checkpoint does not")
        for key, neutral in _NEUTRAL_RESEARCH_KNOBS.items():
            if key in self.extra:
                need(self.extra[key] == neutral, f"{key}={self.extra[key]!r} is not supported (only {neutral})")

    # -- derived -----------------------------------------------------------------------------------
    def outputs_asked(self, output_hidden_states: bool | None, output_attentions: bool | None) -> tuple[bool, bool]:
        """A call's (output_hidden_states, output_attentions): its own, or where it passed None, this config's."""
        return (self.output_hidden_states if output_hidden_states is None else output_hidden_states,
                self.output_attentions if output_attentions is None else output_attentions)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def layer_to_group(self) -> list[int]:
        """Which parameter group each of the L layer applications uses (HF: int(l / (L / G)))."""
        return [layer * self.num_hidden_groups // self.num_hidden_layers for layer in range(self.num_hidden_layers)]

    @property
    def label_names(self) -> list[str] | None:
        """The label names in id order, or None when the config names none (transformers' LABEL_i)."""
        names = [self.id2label[i] for i in range(self.num_labels)]
        return None if names == [f"LABEL_{i}" for i in range(self.num_labels)] else names

    @property
    def label2id(self) -> dict[str, int]:
        return {name: i for i, name in self.id2label.items()}

    model_type = "albert"  # transformers' name of the architecture, as config.json records it

    def replace(self, **changes: Any) -> "AlbertConfig":
        """A copy with `changes` (from_pretrained's keyword overrides); a name that is no field is a ConfigError."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)} - {"extra"})
        if unknown:
            raise ConfigError(f"AlbertConfig has no field {unknown[0]!r}; its fields: "
                              f"{', '.join(f.name for f in dataclasses.fields(self) if f.name != 'extra')}")
        if "num_labels" in changes and "id2label" not in changes:
            changes["id2label"] = None  # a new label count makes the old label names meaningless
        return dataclasses.replace(self, **changes)

    # -- config.json ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("extra", "id2label")}
        out.update(self.extra)
        if out["classifier_dropout_prob"] is None:  # transformers refuses null; write the rate heads.py uses
            out["classifier_dropout_prob"] = self.hidden_dropout_prob
        out["id2label"] = {str(i): label for i, label in self.id2label.items()}
        out["label2id"] = self.label2id
        out["model_type"] = self.model_type
        if out["architectures"] is None:
            del out["architectures"]
        for name in ("problem_type", "output_hidden_states", "output_attentions"):  # as transformers: only if set
            if not out[name]:
                del out[name]
        return out

    @staticmethod
    def without_derived(data: dict[str, Any]) -> dict[str, Any]:
        """`data` (a config.json, or a [model] table a run recorded from to_dict) less what to_dict derives for
        transformers: label2id and model_type (which must be albert) dropped, and id2label's default names
        (LABEL_i) read as a label count alone, so that the table sets fields again (`pretrain --config` of a run's
        train_config.toml)."""
        if data.get("model_type", "albert") != "albert":
            raise ConfigError(f"invalid AlbertConfig: model_type is {data['model_type']!r}, not 'albert'")
        out = {k: v for k, v in data.items() if k not in ("label2id", "model_type")}
        id2label = out.get("id2label")
        if isinstance(id2label, dict) and all(str(v) == f"LABEL_{k}" for k, v in id2label.items()):
            del out["id2label"]  # HF's default names: keep the count only
            out["num_labels"] = len(id2label)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AlbertConfig":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        data = cls.without_derived(data)
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        if "id2label" not in known and "num_labels" not in known and "_num_labels" in extra:
            known["num_labels"] = extra["_num_labels"]
        return cls(**known, extra=extra)

    def save(self, directory: str | os.PathLike) -> str:
        path = os.path.join(directory, "config.json")
        os.makedirs(directory, exist_ok=True)
        files.write_text_atomically(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "AlbertConfig":
        """Read a config.json, or the config.json inside a directory."""
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        data = read_json_object(path)
        try:
            return cls.from_dict(data)
        except (TypeError, ConfigError) as e:
            raise ConfigError(f"{path}: {e}") from None

    # transformers' names for the same IO, and its in-place update
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> "AlbertConfig":
        """A local model directory's config.json (or the file), with overrides as from_pretrained's."""
        config = cls.load(path)
        return config.replace(**overrides) if overrides else config

    def save_pretrained(self, directory: str | os.PathLike) -> str:
        return self.save(directory)

    def to_json_string(self, use_diff: bool = True) -> str:
        """config.json's text; use_diff (transformers' default) keeps only what differs from the defaults
        (litebert's: albert-base-v2's shapes, where transformers' class defaults are xxlarge's) and model_type."""
        data = self.to_dict()
        if use_diff:
            defaults = AlbertConfig().to_dict()
            data = {k: v for k, v in data.items() if k == "model_type" or k not in defaults or defaults[k] != v}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def update(self, config_dict: dict[str, Any]) -> None:
        """transformers' in-place update, checked as a new config is: an unknown name or a bad value is a
        ConfigError (transformers sets any attribute, so a misspelt one silently changes nothing)."""
        changed = self.replace(**config_dict)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(changed, f.name))

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "AlbertConfig":
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


def turn_off_output_flags(model: Any) -> list[str]:
    """Set output_hidden_states / output_attentions to False in every AlbertConfig inside `model` (an nn.Module;
    its submodules may hold their own); returns the names that were on. For a loop that reads neither: with them
    on, every call computes each layer's attention explicitly (no SDPA, no padding-free path, B*H*T^2 more memory)
    for outputs it drops."""
    was_on = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        for name in ("output_hidden_states", "output_attentions"):
            if isinstance(config, AlbertConfig) and getattr(config, name):
                setattr(config, name, False)
                was_on.add(name)
    return sorted(was_on)


def _is_number(value: Any, kind: type) -> bool:
    """Whether `value` is a number of `kind`: an int for int, an int or a float for float; a bool is neither."""
    return isinstance(value, int if kind is int else (int, float)) and not isinstance(value, bool)


def read_json_object(path: str) -> dict[str, Any]:
    """The JSON object in a config file; a missing, non-JSON or non-object file is a one-line error naming it."""
    if not os.path.isfile(path):
        weights_alone = os.path.isfile(os.path.join(os.path.dirname(path), "model.safetensors"))
        raise FileNotFoundError(f"no config file at {path}" + (
            " (weights without their config.json, as transformers' Trainer checkpoints a litebert model: pass "
            "from_pretrained(..., config=model.config), and save results with save_pretrained)" if weights_alone
            else ""))
    return files.read_json_object(path, ConfigError)


def _albert(h: int, layers: int, heads: int, v1: bool) -> dict[str, Any]:
    # The released v1 models were trained with dropout 0.1 and TF's tanh "gelu" (= HF "gelu_new"; the v1
    # configs on the Hub say "gelu", which is the erf form and does not match training). v2 drops dropout.
    dropout = 0.1 if v1 else 0.0
    return dict(embedding_size=128, hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
                intermediate_size=4 * h, hidden_act="gelu_new", hidden_dropout_prob=dropout,
                attention_probs_dropout_prob=dropout)


def _bert(h: int, layers: int, heads: int) -> dict[str, Any]:
    # The paper's BERT baselines: E = H and no sharing, on ALBERT's 30k vocabulary.
    return dict(embedding_size=h, hidden_size=h, num_hidden_layers=layers, num_hidden_groups=layers,
                num_attention_heads=heads, intermediate_size=4 * h, hidden_act="gelu_new", sharing="none",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


PRESETS: dict[str, dict[str, Any]] = {
    **{f"albert-{size}-v{v}": _albert(h, layers, heads, v1=(v == 1))
       for size, (h, layers, heads) in {"base": (768, 12, 12), "large": (1024, 24, 16),
                                        "xlarge": (2048, 24, 16), "xxlarge": (4096, 12, 64)}.items()
       for v in (1, 2)},
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
    "bert-xlarge": _bert(2048, 24, 16),
    # CPU-sized: trains in minutes on 2 cores (see configs/demo.toml for the recipe around it).
    "tiny": dict(vocab_size=8000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                 num_attention_heads=4, intermediate_size=512, max_position_embeddings=128),
}
