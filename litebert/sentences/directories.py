"""Sentence-transformers model directories, read and written without the sentence-transformers package.

A sentence-transformers directory is a pipeline listed in modules.json:
  Transformer   the encoder (config.json + weights at the entry's path, usually the root) and its tokenizer;
                sentence_bert_config.json gives max_seq_length
  Pooling       1_Pooling/config.json: mean over the non-pad tokens, or the [CLS] vector
  Dense         (optional, any number) linear map + activation: config.json {in_features, out_features, bias,
                activation_function} and model.safetensors {linear.weight, linear.bias}
  Normalize     (optional) unit length
`load_sentence_model(path)` rebuilds that pipeline for three kinds of directory, so that one command scores a
litebert S-ALBERT, a sentence-transformers teacher and a plain encoder alike:
  * a litebert/ALBERT directory (spiece.model beside config.json): litebert's AlbertModel and Tokenizer, its
    pooling (1_Pooling, else sentence_config.json, else mean) and any Dense/Normalize modules.json lists;
  * any other directory with modules.json (e.g. all-MiniLM-L6-v2, a BERT): transformers' AutoModel and
    AutoTokenizer, from local files only;
  * a plain encoder without modules.json (config.json only): AutoModel with mean pooling.
Why not sentence-transformers itself: importing it takes 7.5 s on this project's 2-core machine (litebert's
whole `embed` verb needs less) and pulls scikit-learn and Pillow; the pipeline above is what it computes for
these module types, and tests/test_distill.py checks the vectors against sentence-transformers'. Other module
types (a CNN, an LSTM, max pooling) are refused by name rather than approximated.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_as, read_json_object, write_json
from litebert.model import AlbertModel
from litebert.sentence import embed, sentence_settings
from litebert.tokenizer import Tokenizer

MODULES = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"  # the model's similarity function, among others
KNOWN = ("Transformer", "Pooling", "Dense", "Normalize")
DENSE_TYPE = "sentence_transformers.models.Dense"
IDENTITY = "torch.nn.modules.linear.Identity"
# sentence-transformers' similarity functions by the names config_sentence_transformers.json gives them
SIMILARITIES = {"cosine": lambda a, b: F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T, "dot": lambda a, b: a @ b.T,
                "euclidean": lambda a, b: -torch.cdist(a, b, p=2.0), "manhattan": lambda a, b: -torch.cdist(a, b, p=1.0)}
ACTIVATIONS = {IDENTITY: nn.Identity, "torch.nn.modules.activation.Tanh": nn.Tanh,
               "torch.nn.modules.activation.ReLU": nn.ReLU, "torch.nn.modules.activation.GELU": nn.GELU}


def read_modules(directory: str) -> list[dict]:
    """modules.json of a directory as [{"kind": "Pooling", "path": ...}, ...] ([] when it has none); a module
    type outside KNOWN is a ConfigError."""
    path = os.path.join(directory, MODULES)
    if not os.path.isfile(path):
        return []
    entries = read_json_as(path, list, CheckpointError)
    if not all(isinstance(e, dict) and isinstance(e.get("idx", 0), int) and isinstance(e.get("path", ""), str)
               for e in entries):
        raise CheckpointError(f"{path}: expected a list of modules, each "
                              f"{{\"idx\": int, \"path\": str, \"type\": str}}")
    modules = []
    for entry in sorted(entries, key=lambda e: e.get("idx", 0)):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        if kind not in KNOWN:
            raise ConfigError(f"{path}: module type {entry.get('type')!r} is not supported (litebert reads "
                              f"{', '.join(KNOWN)})")
        modules.append({"kind": kind, "path": os.path.join(directory, entry.get("path", ""))})
    return modules


def pooling_of(config: dict, where: str) -> str:
    """'mean' or 'cls' from a 1_Pooling/config.json; any other mode (or a combination) is a ConfigError."""
    modes = [name for name, key in (("mean", "pooling_mode_mean_tokens"), ("cls", "pooling_mode_cls_token"),
                                    ("max", "pooling_mode_max_tokens"), ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
                                    ("weightedmean", "pooling_mode_weightedmean_tokens"),
                                    ("lasttoken", "pooling_mode_lasttoken")) if config.get(key)]
    if config.get("pooling_mode") in ("mean", "cls") and not modes:
        modes = [config["pooling_mode"]]
    if modes not in (["mean"], ["cls"]):
        raise ConfigError(f"{where}: pooling {modes or 'none'} is not supported (litebert pools by mean or cls)")
    return modes[0]


class Dense(nn.Module):
    """sentence-transformers' Dense module: activation(linear(x)); the attribute name gives its weight keys."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = IDENTITY):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"Dense activation {activation!r} is not supported ({', '.join(ACTIVATIONS)})")
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation_name, self.activation = activation, ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))

    @classmethod
    def load(cls, directory: str) -> "Dense":
        from safetensors.torch import load_file

        path = os.path.join(directory, "config.json")
        config = read_json_object(path, CheckpointError)
        if not all(isinstance(config.get(k), int) and config[k] > 0 for k in ("in_features", "out_features")):
            raise CheckpointError(f"{path}: a Dense module's config needs in_features and out_features (positive ints)")
        dense = cls(config["in_features"], config["out_features"], config.get("bias", True),
                    config.get("activation_function", "torch.nn.modules.activation.Tanh"))
        weights = os.path.join(directory, "model.safetensors")
        if not os.path.isfile(weights):
            raise CheckpointError(f"{directory}: no model.safetensors for its Dense module")
        state = load_file(weights)
        found, expected = ({k: tuple(v.shape) for k, v in d.items()} for d in (state, dense.state_dict()))
        if found != expected:
            raise CheckpointError(f"{weights} holds {found}, where {path} describes {expected}")
        dense.load_state_dict(state)
        return dense

    def save(self, directory: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(directory, exist_ok=True)
        write_json(os.path.join(directory, "config.json"), {
            "in_features": self.linear.in_features, "out_features": self.linear.out_features,
            "bias": self.linear.bias is not None, "activation_function": self.activation_name})
        tmp = os.path.join(directory, "model.safetensors.tmp")
        save_file({k: v.detach().contiguous() for k, v in self.state_dict().items()}, tmp, metadata={"format": "pt"})
        os.replace(tmp, os.path.join(directory, "model.safetensors"))


def add_dense(directory: str, dense: Dense, name: str = "2_Dense") -> None:
    """Append a Dense module to a saved directory's modules.json (after its Pooling) and write its files."""
    dense.save(os.path.join(directory, name))
    entries = read_json_as(os.path.join(directory, MODULES), list, CheckpointError)
    entries = [e for e in entries if e.get("path") != name]
    entries.append({"idx": len(entries), "name": str(len(entries)), "path": name, "type": DENSE_TYPE})
    write_json(os.path.join(directory, MODULES), entries)


class SentenceModel:
    """A sentence-transformers pipeline (module docstring) over an encoder: `encode(sentences)` -> (N, D), called
    with sentence-transformers' keywords and answering its names (`similarity`, `max_seq_length`,
    `get_sentence_embedding_dimension`), so that code written for its SentenceTransformer runs on this."""

    def __init__(self, encoder: nn.Module, tokenizer: Callable, pooling: str, max_length: int,
                 post: Sequence[nn.Module] = (), normalize: bool = False, name: str = "",
                 similarity_fn_name: str = "cosine"):
        self.encoder, self.tokenizer, self.pooling, self.max_length = encoder.eval(), tokenizer, pooling, max_length
        self.post, self.normalize, self.name = [m.eval() for m in post], normalize, name
        if similarity_fn_name not in SIMILARITIES:
            raise ConfigError(f"similarity_fn_name {similarity_fn_name!r}: choose from {', '.join(SIMILARITIES)}")
        self.similarity_fn_name = similarity_fn_name

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **options) -> "SentenceModel":
        """load_sentence_model(path, ...): a litebert, sentence-transformers or plain encoder directory."""
        return load_sentence_model(path, **options)

    @property
    def dimension(self) -> int:
        dense = [m for m in self.post if isinstance(m, Dense)]
        return dense[-1].linear.out_features if dense else self.encoder.config.hidden_size

    def get_sentence_embedding_dimension(self) -> int:  # sentence-transformers' names (6 renamed it)
        return self.dimension

    get_embedding_dimension = get_sentence_embedding_dimension

    @property
    def max_seq_length(self) -> int:
        return self.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        positions = self.encoder.config.max_position_embeddings
        if not 1 <= int(value) <= positions:  # not cut to fit without a word: the user asked for that length
            raise ConfigError(f"max_seq_length {value}: this encoder has {positions} positions")
        self.max_length = int(value)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @torch.no_grad()
    def encode(self, sentences: str | Sequence[str], batch_size: int = 64, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, normalize_embeddings: bool = False
               ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """sentence-transformers' encode: one string gives one (D,) vector (a string is not a list of
        characters), a list (N, D); convert_to_tensor a tensor, convert_to_numpy=False a list of (D,) tensors;
        normalize_embeddings unit length. Token embeddings and quantized precisions are refused by name: the
        feature-extraction pipeline gives the former, and the latter need calibration this reader does not hold."""
        if output_value != "sentence_embedding":
            raise ConfigError(f"output_value={output_value!r}: litebert's encode gives sentence embeddings only "
                              "(token embeddings: pipeline(\"feature-extraction\"))")
        if precision != "float32":
            raise ConfigError(f"precision={precision!r}: litebert's encode gives float32 embeddings only")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        vectors = torch.from_numpy(embed(self.encoder, self.tokenizer, texts, self.pooling, batch_size,
                                         self.max_length, bool(show_progress_bar)))
        for module in self.post:
            vectors = module(vectors)
        if self.normalize or normalize_embeddings:
            vectors = F.normalize(vectors, dim=-1)
        if single:
            vectors = vectors[0]
        if convert_to_tensor:
            return vectors
        return vectors.numpy() if convert_to_numpy else list(vectors) if not single else vectors

    def similarity(self, a, b) -> torch.Tensor:
        """(N, M) scores of every row of `a` against every row of `b`, by the model's similarity_fn_name
        (config_sentence_transformers.json's; cosine by default), as sentence-transformers scores them."""
        a, b = (torch.atleast_2d(torch.as_tensor(np.asarray(x) if not torch.is_tensor(x) else x)).float()
                for x in (a, b))
        return SIMILARITIES[self.similarity_fn_name](a, b)


class _HFTokenizer:
    """transformers' tokenizer, lowercasing first where sentence_bert_config.json's do_lower_case asks, as
    sentence-transformers does before its tokenizer."""

    def __init__(self, tokenizer, lower: bool):
        self.tokenizer, self.lower = tokenizer, lower

    def __call__(self, texts: list[str], **options) -> dict[str, torch.Tensor]:
        return self.tokenizer([t.lower() for t in texts] if self.lower else texts, **options)


@contextlib.contextmanager
def _no_loading_bar() -> Iterator[None]:
    """transformers 5 draws a "Loading weights" bar for a fraction of a second, into log files too (it does not
    look for a terminal): off while a teacher or plain encoder is read."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


class _HFEncoder(nn.Module):
    """transformers' AutoModel with the signature litebert.sentence.embed calls: (input_ids, attention_mask)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.config = model, model.config

    @property
    def albert(self) -> "_HFEncoder":  # where litebert.model.encoder_of looks for a wrapper's encoder
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        return self.model(input_ids=input_ids, attention_mask=attention_mask)


def is_litebert_dir(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "spiece.model")) and \
        os.path.isfile(os.path.join(directory, "config.json"))


def load_sentence_model(path: str | os.PathLike, pooling: str | None = None, max_length: int | None = None,
                        device: torch.device | str = "cpu") -> SentenceModel:
    """The sentence pipeline of a litebert, sentence-transformers or plain encoder directory (module docstring).
    `pooling` and `max_length` override what the directory says; the encoder runs on `device` (a teacher on the
    GPU encodes a corpus many times faster than on the CPU), the modules after pooling on the CPU."""
    directory = os.fspath(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no such directory: {directory}")
    modules = read_modules(directory)
    root = next((m["path"] for m in modules if m["kind"] == "Transformer"), directory)
    st_config = os.path.join(root, "sentence_bert_config.json")
    settings = read_json_object(st_config, CheckpointError) if os.path.isfile(st_config) else {}
    pool_dir = next((m["path"] for m in modules if m["kind"] == "Pooling"), None)
    found_pooling = pooling_of(read_json_object(os.path.join(pool_dir, "config.json"), CheckpointError),
                               pool_dir) if pool_dir else None
    post: list[nn.Module] = [Dense.load(m["path"]) for m in modules if m["kind"] == "Dense"]
    normalize = any(m["kind"] == "Normalize" for m in modules)
    st_model = os.path.join(directory, ST_CONFIG)
    similarity = read_json_object(st_model, CheckpointError).get("similarity_fn_name") if os.path.isfile(st_model) \
        else None
    if is_litebert_dir(root):

        ours = sentence_settings(root)
        encoder, tokenizer = AlbertModel.from_pretrained(root), Tokenizer.from_pretrained(root)
        found_pooling = found_pooling or ours.get("pooling")
        length = max_length or ours.get("max_length") or settings.get("max_seq_length") or 128
    else:
        if not os.path.isfile(os.path.join(root, "config.json")):
            raise CheckpointError(f"{root}: no config.json: not a model directory")
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError:
            raise ConfigError("reading a transformers model needs transformers: pip install 'litebert[hf]'") from None
        with _no_loading_bar():
            encoder = _HFEncoder(AutoModel.from_pretrained(root, local_files_only=True))
        tokenizer = _HFTokenizer(AutoTokenizer.from_pretrained(root, local_files_only=True),
                                 bool(settings.get("do_lower_case")))
        length = max_length or settings.get("max_seq_length") or 128
    length = min(length, encoder.config.max_position_embeddings)
    return SentenceModel(encoder.to(device), tokenizer, pooling or found_pooling or "mean", length, post, normalize,
                         name=directory, similarity_fn_name=similarity or "cosine")
