"""Reading and writing model weights in the HuggingFace layout (config.json + model.safetensors).

A litebert model directory *is* an HF model directory: transformers' `AlbertFor*.from_pretrained` reads what
`save_pretrained` writes, and litebert reads what transformers writes. Loading accounts for every key: a
missing encoder weight, a shape mismatch or a corrupt file is a one-line error naming the file; head weights
that a different head class left behind (or lacks) are reported, as when fine-tuning a pretrained encoder.
Nothing is ever unpickled: safetensors, or torch.load(weights_only=True) for legacy `pytorch_model.bin`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, TypeVar

import torch
from torch import nn

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError, NonFiniteError
from litebert.files import sha256_file
from litebert.hub import fetch_from_hub, hub_options, looks_like_hub_id, write_model_card
from litebert.text.transformers_files import match_model_max_length
from litebert.weight_shards import INDEX_NAME, WEIGHTS_NAME, read_sharded, shard_bytes, sharded_digest, write_weights

log = logging.getLogger("litebert")

LEGACY_WEIGHTS_NAME = "pytorch_model.bin"
ENCODER_PREFIX = "albert."
IGNORED_KEYS = ("albert.embeddings.position_ids", "embeddings.position_ids")  # non-persistent buffers in old HF saves

M = TypeVar("M", bound="PretrainedMixin")
# transformers' from_pretrained keywords about where and how to download, which litebert's loader has no use for
HUB_OPTIONS_NOT_TAKEN = {"use_auth_token", "force_download", "proxies", "subfolder", "trust_remote_code",
                         "use_safetensors", "low_cpu_mem_usage"}


def resolve_model_dir(name_or_path: str | os.PathLike, local_files_only: bool = False, revision: str | None = None,
                      cache_dir: str | os.PathLike | None = None, token: str | bool | None = None) -> str:
    """A local directory as is; otherwise try it as a Hub id (needs network and huggingface_hub, unless
    local_files_only: the Hugging Face cache alone), at `revision`, cached in `cache_dir`, with `token`
    (transformers' keywords; refused for a local path, hub.hub_options)."""
    path = os.fspath(name_or_path)
    options = hub_options(path, revision=revision, cache_dir=cache_dir, token=token)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise FileNotFoundError(f"{path}: not a model directory")
    if not looks_like_hub_id(path):
        raise FileNotFoundError(f"no such directory: {path}")
    return fetch_from_hub(path, lambda hub, local: _whole(hub.snapshot_download(
        path, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.model"], local_files_only=local, **options)),
        local_files_only, options)


def _whole(directory: str) -> str:
    """A cached snapshot that holds a model (a tokenizer fetched alone caches spiece.model and nothing else)."""
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise FileNotFoundError(f"{directory}: no config.json")
    return directory


def weights_digest(directory: str | os.PathLike) -> str | None:
    """sha256 of a model directory's weights file (model.safetensors, else the legacy .bin), None without one:
    what an export records, so that a graph beside weights trained since is noticed (litebert.serving.backends)."""
    for name in (WEIGHTS_NAME, LEGACY_WEIGHTS_NAME):
        if os.path.isfile(os.path.join(directory, name)):
            return sha256_file(os.path.join(directory, name))
    return sharded_digest(directory)


def read_state_dict(directory: str) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of a model directory and the file they came from."""
    path = os.path.join(directory, WEIGHTS_NAME)
    if os.path.isfile(path):
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return load_file(path), path
        except (SafetensorError, OSError, RuntimeError) as e:
            raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e})") from None
    if os.path.isfile(os.path.join(directory, INDEX_NAME)):  # save_pretrained(max_shard_size=...)'s layout
        return read_sharded(directory), os.path.join(directory, INDEX_NAME)
    path = os.path.join(directory, LEGACY_WEIGHTS_NAME)
    if os.path.isfile(path):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # weights_only refuses pickled code; zip errors mean truncation
            raise CheckpointError(f"{path}: unreadable or unsafe PyTorch checkpoint ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''})") from None
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(f"{path}: not a state dict of tensors")
        return state, path
    raise FileNotFoundError(f"{directory}: no {WEIGHTS_NAME}, {INDEX_NAME} or {LEGACY_WEIGHTS_NAME}")


def set_gradient_checkpointing(model: nn.Module, on: bool) -> None:
    """Turn checkpointing on or off in every module that has the switch (the encoder's layer loop); a model
    without one is a ConfigError, not a run that silently keeps every activation."""
    switches = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    if not switches:
        raise ConfigError(f"{type(model).__name__} has no gradient checkpointing (no module with a "
                          "gradient_checkpointing attribute)")
    for module in switches:
        module.gradient_checkpointing = on


class PretrainedMixin:
    """from_pretrained / save_pretrained / init_weights for every litebert model class."""

    config: AlbertConfig
    tied_weights: dict[str, str] = {}  # key -> the key it is the same tensor as (not stored twice)

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """torch's, except that a tensor listed under several keys (the MLM decoder tied to the word embeddings;
        a sub-layer that partial sharing puts in every layer) is a copy after its first key. safetensors refuses
        tensors that share memory, and transformers' Trainer saves a model that is not its own PreTrainedModel
        with safetensors' save_file: its first checkpoint of an MLM model died. The parameters stay shared, and
        save_pretrained stores a tied one once. keep_vars=True gives the parameters themselves (what code that
        finds the shared ones by their storage reads)."""
        if args:  # torch's deprecated positional form: (destination, prefix, keep_vars)
            destination, prefix, keep_vars = (*args, *(destination, prefix, keep_vars)[len(args):])[:3]
        state = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        if not keep_vars:
            seen: set[int] = set()
            for key, tensor in state.items():  # an int8 Linear's entries include a dtype and packed params
                if key.startswith(prefix) and isinstance(tensor, torch.Tensor):
                    storage = tensor.untyped_storage().data_ptr()
                    state[key] = tensor.clone() if storage in seen else tensor
                    seen.add(storage)
        return state

    def init_weights(self) -> None:
        """Initialise every module once: a head skips the encoder it wraps, which initialised itself."""
        done = {id(m) for child in self.children() if isinstance(child, PretrainedMixin) for m in child.modules()}
        for module in self.modules():
            if id(module) not in done:
                init_module_weights(module, self.config.initializer_range)

    def __call__(self, *args: Any, return_dict: bool | None = None, **kwargs: Any) -> Any:
        """transformers' return_dict=False gives the outputs as a plain tuple, the fields that are not None in
        order (`loss, logits = model(**batch, labels=y, return_dict=False)`); litebert's outputs already index
        and unpack that way, so the flag is taken here, once, not passed down every forward."""
        out = super().__call__(*args, **kwargs)
        return (out.to_tuple() if hasattr(out, "to_tuple") else tuple(out)) if return_dict is False else out

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """transformers' count: distinct parameters, optionally those that train, or those outside the embeddings."""
        embeddings = {id(m.weight) for m in self.modules() if exclude_embeddings and isinstance(m, nn.Embedding)}
        return sum(p.numel() for p in self.parameters()
                   if id(p) not in embeddings and (p.requires_grad or not only_trainable))

    # transformers' habits on a model: `batch.to(model.device)`, `model.dtype`, the embedding matrices
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    def get_input_embeddings(self) -> nn.Embedding:
        return getattr(self, "albert", self).embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear | None:
        """The MLM decoder (tied to the input embeddings), None for a head without one, as transformers."""
        return getattr(getattr(self, "predictions", None), "decoder", None)

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """transformers' setter, of the same shape (resize_token_embeddings says why a vocabulary grows
        elsewhere). The MLM decoder is tied to it at once: transformers waits for tie_weights(), but litebert
        saves a tied decoder once, so an untied one in between would be lost from model.safetensors."""
        old = self.get_input_embeddings().weight
        if not isinstance(value, nn.Embedding) or value.weight.shape != old.shape:
            raise ConfigError(f"set_input_embeddings takes an nn.Embedding of shape {tuple(old.shape)}, got "
                              f"{type(value).__name__} {tuple(getattr(value, 'weight', old).shape)}")
        getattr(self, "albert", self).embeddings.word_embeddings = value
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the MLM decoder's weight the word embeddings' again, as transformers' tie_weights (a head
        without a decoder has nothing to tie)."""
        decoder = self.get_output_embeddings()
        if decoder is not None:
            decoder.weight = self.get_input_embeddings().weight

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None) -> None:
        """transformers' switch (its ALBERT has none; litebert's `--gradient-checkpointing`): each layer
        application's activations are recomputed in the backward instead of kept. The checkpoint is the
        non-reentrant one; asking for the reentrant one (use_reentrant=True) or other options is refused."""
        unknown = {k: v for k, v in (gradient_checkpointing_kwargs or {}).items() if (k, v) != ("use_reentrant", False)}
        if unknown:
            raise ConfigError(f"gradient_checkpointing_kwargs {unknown}: litebert's checkpoint is non-reentrant "
                              "and takes no options (use_reentrant=False, or leave them out)")
        set_gradient_checkpointing(self, True)

    def gradient_checkpointing_disable(self) -> None:
        set_gradient_checkpointing(self, False)

    @property
    def is_gradient_checkpointing(self) -> bool:
        return any(getattr(m, "gradient_checkpointing", False) for m in self.modules())

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> None:
        """Refused: litebert's tokenizer gains pieces only with its embeddings, which one verb does for both."""
        raise ConfigError("litebert grows a vocabulary and the embeddings together: `litebert extend-vocab` (or "
                          "litebert.vocab.extend_vocab) adds pieces to spiece.model and rows to the model")

    # -- save --------------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | os.PathLike, *, config_only: bool = False,
                        card: dict[str, Any] | None = None, safe_serialization: bool = True,
                        max_shard_size: int | str | None = None) -> None:
        """Write config.json, model.safetensors and a model card (README.md: litebert.hub; `card` adds
        license, metrics or a training summary). Tied weights are stored once; layers that partial sharing
        ties are stored under every layer's name (equal values), so transformers computes the same thing.
        max_shard_size ("200MB", bytes): transformers' sharded layout (litebert.weight_shards); None, one file
        (transformers 5's default of 50GB is one file for every ALBERT). safe_serialization=False is refused:
        litebert writes no pickles (transformers 5 writes safetensors whatever it says)."""
        if safe_serialization is not True:
            raise ConfigError("save_pretrained(safe_serialization=False): litebert writes safetensors only "
                              "(transformers 5 also ignores False); pass True or leave it out")
        if max_shard_size is not None:
            shard_bytes(max_shard_size)  # a bad size is refused before anything is written
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        self.config.architectures = [type(self).__name__]
        self.config.save(directory)
        match_model_max_length(directory)  # a tokenizer saved here first learns the model's positions
        if config_only:
            return
        # shared tensors come as copies (state_dict): safetensors stores each key, and transformers reads them
        tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items() if k not in self.tied_weights}
        write_weights(tensors, directory, max_shard_size)
        source = getattr(self, "name_or_path", None)  # what from_pretrained loaded: the base model
        base = source if source and not (os.path.exists(source) and os.path.samefile(source, directory)) else None
        write_model_card(directory, type(self).__name__, self.num_parameters(), **{"base_model": base, **(card or {})})

    # -- load --------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls: type[M], name_or_path: str | os.PathLike, *, dtype: Any = None, torch_dtype: Any = None,
                        device_map: Any = None, label2id: dict[str, int] | None = None, config: Any = None,
                        local_files_only: bool = False, attn_implementation: str | None = None,
                        ignore_mismatched_sizes: bool = False, output_loading_info: bool = False,
                        revision: str | None = None, cache_dir: str | os.PathLike | None = None,
                        token: str | bool | None = None, **config_overrides: Any) -> M | tuple[M, dict[str, Any]]:
        """Load a model directory (litebert or HF) or a Hub id. Config fields can be overridden, e.g.
        `AlbertForSequenceClassification.from_pretrained(pretrained_dir, num_labels=4)` or `id2label={0: "neg",
        1: "pos"}` (or label2id, as transformers takes it). dtype (torch_dtype, transformers' older name): a torch
        dtype, its name ("bfloat16") or "auto" (the stored weights' dtype); None keeps fp32 (transformers 5's
        default is "auto": litebert's files are fp32 either way). device_map: "cpu", "cuda", "cuda:N", "auto" (a
        GPU when there is one) or a torch.device; the whole model goes to that one device.

        transformers' loading keywords: config (an AlbertConfig, litebert's or transformers', in place of
        config.json), local_files_only (a Hub id from the cache alone), ignore_mismatched_sizes (head weights
        of another shape start fresh, reported, as when re-heading a classifier for other labels; the encoder's
        must still fit), attn_implementation "sdpa" or "eager" (the same outputs: litebert picks its kernel
        per call, and output_attentions gives the probabilities either way), output_loading_info (returns
        (model, info): transformers' missing_keys, unexpected_keys, mismatched_keys sets and error_msgs),
        revision / cache_dir / token (a Hub id's; refused for a local path)."""
        if attn_implementation not in (None, "sdpa", "eager"):
            raise ConfigError(f"attn_implementation={attn_implementation!r}: litebert chooses its attention kernel "
                              "itself (SDPA, which runs flash attention where it can); pass \"sdpa\", \"eager\" or nothing")
        if dtype is not None and torch_dtype is not None and dtype != torch_dtype:
            raise ConfigError(f"dtype={dtype!r} and torch_dtype={torch_dtype!r} disagree; pass one")
        device = _map_device(device_map)
        if label2id is not None:
            config_overrides["id2label"] = _id2label(label2id, config_overrides.get("id2label"))
        not_taken = sorted(set(config_overrides) & HUB_OPTIONS_NOT_TAKEN)
        if not_taken:  # not config fields, as the error replace() gives would say
            raise ConfigError(f"from_pretrained takes no {not_taken[0]}=: litebert loads a local directory, or a "
                              "Hub id (revision=, cache_dir=, token=) into the Hugging Face cache")
        directory = resolve_model_dir(name_or_path, local_files_only, revision, cache_dir, token)
        config = AlbertConfig.load(directory) if config is None else given_config(config)
        if config_overrides:
            config = config.replace(**config_overrides)
        model = cls(config)
        state, path = read_state_dict(directory)
        mismatched: set = set()
        if ignore_mismatched_sizes:
            state, mismatched = fresh_mismatched_heads(model, state, path)
        missing, unexpected = model.load_checkpoint_state(state, path)
        model.name_or_path = os.fspath(name_or_path)  # transformers' name; the model card's base model
        dtype = _model_dtype(dtype if dtype is not None else torch_dtype, state)
        if dtype is not None or device is not None:
            model = model.to(device=device, dtype=dtype)
        if not output_loading_info:
            return model
        return model, {"missing_keys": set(missing) - {k for k, *_ in mismatched}, "unexpected_keys": set(unexpected),
                       "mismatched_keys": mismatched, "error_msgs": []}

    def load_checkpoint_state(self, state: dict[str, torch.Tensor], path: str = "<state dict>"
                              ) -> tuple[list[str], list[str]]:
        """Load with strict accounting. Encoder weights must all be present with the right shapes; head
        weights may be absent (fresh head, reported) or belong to another head (ignored, reported).
        Returns (missing keys, unexpected keys), transformers' loading info."""
        own = self.state_dict(keep_vars=True)  # names and shapes: no copies of the shared tensors
        state = {k: v for k, v in state.items() if k not in IGNORED_KEYS}
        has_prefix = any(k.startswith(ENCODER_PREFIX) for k in own)
        prefixed = has_prefix and not any(k.startswith(ENCODER_PREFIX) for k in state)
        if prefixed:
            state = {ENCODER_PREFIX + k: v for k, v in state.items()}  # a bare AlbertModel checkpoint
        heads_left_out = []  # a head's weights read into a bare encoder: reported with the unexpected ones
        if not has_prefix and any(k.startswith(ENCODER_PREFIX) for k in state):
            heads_left_out = [k for k in state if not k.startswith(ENCODER_PREFIX)]
            state = {k[len(ENCODER_PREFIX):]: v for k, v in state.items() if k.startswith(ENCODER_PREFIX)}
        for key, target in self.tied_weights.items():
            if key not in state and target in state:
                state[key] = state[target]
            elif key in state and target in state and not torch.equal(state[key], state[target]):
                # loaded in turn into the one shared parameter, the second would replace the first
                raise CheckpointError(f"{path}: {key} differs from {target}, which this model ties it to (the "
                                      "word embeddings are the MLM decoder): an untied checkpoint, which ALBERT's "
                                      "layout cannot hold")

        def is_encoder(key: str) -> bool:
            return key.startswith(ENCODER_PREFIX) or not has_prefix

        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        missing_encoder = [k for k in missing if is_encoder(k) and not k.startswith(("albert.pooler", "pooler"))]
        if missing_encoder:
            raise CheckpointError(f"{path}: missing {len(missing_encoder)} encoder weights, e.g. {missing_encoder[0]} "
                                  "(not an ALBERT checkpoint of this layout?)")
        unexpected_encoder = [k for k in unexpected if is_encoder(k) and not k.startswith(("albert.pooler", "pooler"))]
        if unexpected_encoder:
            raise CheckpointError(f"{path}: unexpected encoder weights, e.g. {unexpected_encoder[0]} "
                                  "(config.json does not match the weights: num_hidden_groups / inner_group_num?)")
        for key, tensor in state.items():
            if key in own and own[key].shape != tensor.shape:
                raise CheckpointError(f"{path}: {key} has shape {tuple(tensor.shape)}, the config expects "
                                      f"{tuple(own[key].shape)}")
        self._check_shared_copies_agree(state, path)
        _check_finite(state, path)
        self.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
        # Warnings, not info: a head that silently starts from random weights (e.g. the encoder's directory
        # given instead of the fine-tuned one) looks like a working model until its accuracy is checked.
        if missing:
            log.warning("%s: initialised fresh: %s (random until trained: expected when fine-tuning starts from a "
                        "pretrained model, wrong when loading a fine-tuned one)", path,
                        ", ".join(sorted({k.rsplit('.', 1)[0] for k in missing})))
        if unexpected or heads_left_out:
            log.warning("%s: not used by %s: %s (the checkpoint's other heads, left out)", path, type(self).__name__,
                        ", ".join(sorted({k.rsplit('.', 1)[0] for k in unexpected + heads_left_out})))
        # unexpected keys as the checkpoint names them (transformers' loading info): a bare one's without the prefix
        stored = [k[len(ENCODER_PREFIX):] for k in unexpected] if prefixed else unexpected
        return missing, stored + heads_left_out

    def _check_shared_copies_agree(self, state: dict[str, torch.Tensor], path: str) -> None:
        """Keys that name one shared tensor (partial sharing) must carry equal values, or loading would
        silently keep whichever came last."""
        by_storage: dict[int, str] = {}
        for key, tensor in self.state_dict(keep_vars=True).items():
            if key in self.tied_weights or key not in state:
                continue
            ptr = tensor.untyped_storage().data_ptr()
            first = by_storage.setdefault(ptr, key)
            if first != key and not torch.equal(state[first], state[key]):
                raise CheckpointError(f"{path}: {key} differs from {first}, but sharing={self.config.sharing!r} "
                                      "ties them; load it with sharing='none'")


def given_config(config: Any) -> AlbertConfig:
    """from_pretrained's config=: litebert's AlbertConfig, or transformers' (read through its to_dict())."""
    if isinstance(config, AlbertConfig):
        return config
    if not callable(getattr(config, "to_dict", None)):
        raise ConfigError(f"config must be an AlbertConfig, got {type(config).__name__}")
    return AlbertConfig.from_dict({k: v for k, v in config.to_dict().items() if v is not None or k in
                                   ("pad_token_id", "classifier_dropout_prob", "problem_type", "architectures")})


def fresh_mismatched_heads(model: nn.Module, state: dict[str, torch.Tensor], path: str
                           ) -> tuple[dict[str, torch.Tensor], set[tuple]]:
    """ignore_mismatched_sizes: the head weights whose shape differs from the model's left out (they start
    fresh, and the load reports them); an encoder weight of another shape stays the error it is. Also returns
    them as transformers' mismatched_keys: (key, stored shape, model shape)."""
    own = model.state_dict(keep_vars=True)
    mismatched = [k for k, v in state.items() if k in own and own[k].shape != v.shape
                  and not k.startswith((ENCODER_PREFIX, "embeddings.", "encoder."))]
    if mismatched:
        log.warning("%s: shapes differ, initialised fresh (ignore_mismatched_sizes): %s", path,
                    ", ".join(f"{k} {tuple(state[k].shape)} -> {tuple(own[k].shape)}" for k in mismatched))
    return {k: v for k, v in state.items() if k not in mismatched}, {(k, state[k].shape, own[k].shape)
                                                                      for k in mismatched}


def _check_finite(state: dict[str, torch.Tensor], path: str) -> None:
    """NonFiniteError naming the file and a tensor when any weight is NaN or infinite: such a model loads, runs
    and answers (argmax of NaN is class 0), wrong without a word."""
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise NonFiniteError(f"{path}: {len(bad)} weight tensor(s) hold NaN or infinite values, e.g. {bad[0]}; the "
                             "file is damaged or the run that wrote it diverged: use an earlier checkpoint")


def _model_dtype(dtype: Any, state: dict[str, torch.Tensor]) -> torch.dtype | None:
    """from_pretrained's dtype as a torch dtype: a dtype, its name, or "auto" (the stored floating weights')."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return next((t.dtype for t in state.values() if t.is_floating_point()), None)
    found = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(found, torch.dtype) or not found.is_floating_point:
        raise ConfigError(f"dtype {dtype!r} is not a floating dtype (use float32, bfloat16, float16 or auto)")
    return found


def _map_device(device_map: Any) -> torch.device | None:
    """from_pretrained's device_map as one device. transformers (with accelerate) can also spread a model over
    devices ("balanced", a dict of module names); litebert places the whole model on one."""
    if device_map is None or isinstance(device_map, torch.device):
        return device_map
    if isinstance(device_map, int) and not isinstance(device_map, bool):
        device_map = f"cuda:{device_map}"
    if device_map == "auto":
        device_map = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device_map, str) or not (device_map == "cpu" or device_map.split(":")[0] == "cuda"):
        raise ConfigError(f"device_map {device_map!r}: litebert places the whole model on one device; use \"cpu\", "
                          "\"cuda\", \"cuda:N\", \"auto\" or a torch.device")
    try:
        device = torch.device(device_map)
    except RuntimeError:
        raise ConfigError(f"device_map {device_map!r} is not a device (use cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device_map {device_map!r}: no CUDA GPU is available to this torch; use cpu or auto")
    return device


def _id2label(label2id: dict[str, int], id2label: dict | None) -> dict[int, str]:
    """transformers' label2id as litebert's id2label (config.json keeps both); they must agree when both are given."""
    derived = {int(i): str(name) for name, i in label2id.items()}
    if len(derived) != len(label2id):
        raise ConfigError(f"label2id {label2id} gives two labels the same id")
    if id2label is not None and {int(k): str(v) for k, v in id2label.items()} != derived:
        raise ConfigError(f"label2id {label2id} and id2label {id2label} disagree; pass one")
    return derived


def init_module_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation, as HF applies it: N(0, std) weights, zero biases, unit LayerNorms; a module with
    parameters of its own (the MLM head's output bias) initialises them in `init_own_parameters`."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif hasattr(module, "init_own_parameters"):
        module.init_own_parameters()


def parameter_count(module: nn.Module) -> int:
    """Distinct parameters: a shared layer or a tied embedding counts once (parameters() deduplicates them)."""
    return sum(p.numel() for p in module.parameters())
