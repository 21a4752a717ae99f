"""S-ALBERT's model: an ALBERT encoder whose pooled last hidden states are sentence embeddings, saved as a
plain HF AlbertModel directory plus the pooling description (litebert/embed.py's docstring has the layout and
the training objectives). The pooling and the file names live here, in the model core, so that training
(embed.py), pipelines and the server read a model's pooling the same way.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from litebert.errors import CheckpointError, ConfigError, NonFiniteError
from litebert.files import read_json_object, write_json
from litebert.model import AlbertModel, encoder_of
from litebert.progress import progress_bar
from litebert.weights import PretrainedMixin

POOLING = ("mean", "cls")
OBJECTIVES = ("contrastive", "cosine")
SENTENCE_CONFIG = "sentence_config.json"


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """(B, T, H) hidden states -> (B, H): the mean over tokens whose mask is 1, or the [CLS] (first) vector."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling != "mean":
        raise ConfigError(f"pooling must be one of {POOLING}, got {pooling!r}")
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


@torch.no_grad()
def embed(model: nn.Module, tokenizer, sentences: Sequence[str], pooling: str = "mean", batch_size: int = 64,
          max_length: int = 128, progress: bool = False) -> np.ndarray:
    """(N, H) float32 embeddings of `sentences`, in order. Sentences are batched by length (less padding) and
    truncated to `max_length` tokens (at most the model's positions); the model is put in eval mode for the
    call and restored after. `progress`: a bar on a terminal, a line every 30 s in a log (`litebert embed`)."""
    encoder = encoder_of(model)
    max_length = min(max_length, encoder.config.max_position_embeddings)
    was_training = encoder.training
    encoder.eval()
    device = next(encoder.parameters()).device
    order = np.argsort([len(s) for s in sentences], kind="stable")
    out = np.zeros((len(sentences), encoder.config.hidden_size), dtype=np.float32)
    try:
        with progress_bar(len(order), "embed", progress, unit="sentences") as bar:
            for start in range(0, len(order), batch_size):
                index = order[start:start + batch_size]
                batch = tokenizer([sentences[i] for i in index], padding=True, truncation=True,
                                  max_length=max_length, return_tensors="pt")
                mask = batch["attention_mask"].to(device)
                hidden = encoder(batch["input_ids"].to(device), mask).last_hidden_state
                out[index] = pool(hidden, mask, pooling).float().cpu().numpy()
                bar.update(len(index))
    finally:
        encoder.train(was_training)
    if not np.isfinite(out).all():  # a NaN vector is nobody's nearest neighbour: retrieval would fail silently
        bad = int((~np.isfinite(out).all(axis=1)).sum())
        raise NonFiniteError(f"the model's embeddings are NaN or infinite for {bad} of {len(out)} sentences; its "
                             "weights are damaged, or training diverged")
    return out


def sentence_settings(model_dir: str) -> dict:
    """sentence_config.json of a model directory, or {} when it has none (a plain ALBERT checkpoint)."""
    path = os.path.join(model_dir, SENTENCE_CONFIG)
    return read_json_object(path, CheckpointError) if os.path.isfile(path) else {}


class PairOutput(NamedTuple):
    loss: torch.Tensor | None
    similarity: torch.Tensor  # (B,) cos(u_i, v_i)


class SentenceEncoder(PretrainedMixin, nn.Module):
    """Siamese S-ALBERT: one AlbertModel encodes both sides of a pair; the loss is the objective's (see the
    module docstring). `forward` takes the two sides' input_ids and attention_mask, as the training loop's
    batches hold them, and returns a PairOutput."""

    def __init__(self, albert: AlbertModel, pooling: str = "mean", objective: str = "contrastive",
                 scale: float = 20.0, max_length: int = 128):
        super().__init__()
        if pooling not in POOLING or objective not in OBJECTIVES:
            raise ConfigError(f"pooling must be one of {POOLING} and objective one of {OBJECTIVES}, got "
                             f"{pooling!r} and {objective!r}")
        self.albert, self.config = albert, albert.config
        if albert.pooler is not None:  # outside every loss here (pooling reads the hidden states): frozen, so that
            albert.pooler.requires_grad_(False)  # DDP finds every trainable parameter in the loss; still saved
        self.pooling, self.objective, self.scale = pooling, objective, scale
        self.max_length = min(max_length, albert.config.max_position_embeddings)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return pool(self.albert(input_ids, attention_mask).last_hidden_state, attention_mask, self.pooling)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, input_ids_b: torch.Tensor,
                attention_mask_b: torch.Tensor, labels: torch.Tensor | None = None) -> PairOutput:
        u = F.normalize(self.encode(input_ids, attention_mask).float(), dim=-1)  # (B, H)
        v = F.normalize(self.encode(input_ids_b, attention_mask_b).float(), dim=-1)  # (B, H)
        similarity = (u * v).sum(-1)  # (B,)
        if self.objective == "contrastive":
            logits = self.scale * u @ v.T  # (B, B): row i scores every v_j in the batch as u_i's partner
            loss = F.cross_entropy(logits, torch.arange(len(u), device=u.device))
        elif labels is not None:
            loss = F.mse_loss(similarity, labels.float())
        else:
            loss = None
        return PairOutput(loss, similarity)

    def save_pretrained(self, directory: str | os.PathLike, **kwargs) -> None:
        """An HF AlbertModel directory plus the pooling description (module docstring)."""
        super().save_pretrained(directory, **kwargs)
        self.config.architectures = ["AlbertModel"]  # what transformers should build from this directory
        self.config.save(directory)
        sentence = {"pooling": self.pooling, "max_length": self.max_length, "objective": self.objective,
                    "scale": self.scale}
        write_json(os.path.join(directory, SENTENCE_CONFIG), sentence)
        write_json(os.path.join(directory, "modules.json"), [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
        # what sentence-transformers' similarity() reads (it writes prompts and versions there too; none apply)
        write_json(os.path.join(directory, "config_sentence_transformers.json"),
                   {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                    "similarity_fn_name": "cosine"})
        write_json(os.path.join(directory, "sentence_bert_config.json"),
                    {"max_seq_length": self.max_length, "do_lower_case": False})
        write_json(os.path.join(directory, "1_Pooling", "config.json"), {
            "word_embedding_dimension": self.config.hidden_size, "pooling_mode_cls_token": self.pooling == "cls",
            "pooling_mode_mean_tokens": self.pooling == "mean", "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False})

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **overrides) -> "SentenceEncoder":
        """Any ALBERT directory (its encoder is used); a saved SentenceEncoder's sentence_config.json gives the
        pooling etc. unless overridden."""
        albert = AlbertModel.from_pretrained(name_or_path)
        settings = sentence_settings(os.fspath(name_or_path))
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return cls(albert, **settings)
