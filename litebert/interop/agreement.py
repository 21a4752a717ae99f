"""Whether a converted model (int8, ONNX) still computes what fp32 does.

`agreement` compares outputs with fp32's: the share of predictions unchanged (argmax of each *logits output,
per row or per token; sign per label for multi-label heads; within 1% of the spread for regression; cosine
>= 0.99 for hidden states) and the largest absolute difference. Non-finite outputs are an error, never
agreement (NaN compares false, so a NaN output would otherwise pass every tolerance check).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from litebert.config import AlbertConfig
from litebert.errors import ConfigError, LitebertError
from litebert.tasks.records import open_text
from litebert.tokenizer import Tokenizer


class QuantizeError(LitebertError):
    """An int8 model that cannot be made, or that does not compute what fp32 does."""


def nonfinite(name: str, array: np.ndarray, whose: str) -> str | None:
    """Why `array` cannot be compared (NaN/inf in it), or None. NaN compares false with everything, so a
    tolerance or agreement check alone would pass a NaN output."""
    if np.isfinite(array).all():
        return None
    return f"{whose} output {name} has {int((~np.isfinite(array)).sum())} NaN/inf values of {array.size}"


@dataclass
class Agreement:
    unchanged: int  # predictions (or vectors) equal to fp32's
    total: int
    max_abs_diff: float  # over every output element
    what: str  # "predictions" | "vectors with cosine >= 0.99"

    @property
    def fraction(self) -> float:
        return self.unchanged / max(self.total, 1)

    def summary(self) -> str:
        return (f"{100 * self.fraction:.2f}% of {self.what} unchanged ({self.unchanged}/{self.total}), "
                f"max |diff| {self.max_abs_diff:.3g}")

    def __add__(self, other: "Agreement") -> "Agreement":
        return Agreement(self.unchanged + other.unchanged, self.total + other.total,
                         max(self.max_abs_diff, other.max_abs_diff), self.what)


def agreement(names: list[str], reference: list[np.ndarray], outputs: list[np.ndarray],
              attention_mask: np.ndarray, problem_type: str | None = None) -> Agreement:
    """How often `outputs` predict what `reference` (fp32) predicts, and their largest difference. Token-level
    outputs count the unpadded positions only. Raises QuantizeError on NaN/inf in either."""
    unchanged = total = 0
    worst = 0.0
    what = "predictions"
    logits = [i for i, name in enumerate(names) if name.endswith("logits")]
    for i, (name, e, g) in enumerate(zip(names, reference, outputs)):
        problem = nonfinite(name, e, "the fp32 model's") or nonfinite(name, g, "the int8 model's")
        if problem:
            raise QuantizeError(problem)
        if e.shape != g.shape:
            raise QuantizeError(f"output {name} has shape {g.shape}, fp32 gives {e.shape}")
        if e.size:
            worst = max(worst, float(np.max(np.abs(e - g))))
        if logits and i not in logits:
            continue
        if not logits:  # hidden states: one vector per row / token
            what = "vectors with cosine >= 0.99"
            e2, g2 = e.reshape(-1, e.shape[-1]), g.reshape(-1, g.shape[-1])
            cos = (e2 * g2).sum(-1) / np.maximum(np.linalg.norm(e2, axis=-1) * np.linalg.norm(g2, axis=-1), 1e-12)
            same = (cos >= 0.99).reshape(e.shape[:-1])
        elif problem_type == "multi_label_classification":
            same = ((e > 0) == (g > 0)).all(-1)
        elif e.shape[-1] == 1:  # regression: no argmax to compare
            spread = float(e.max() - e.min()) if e.size else 0.0
            same = (np.abs(e - g) <= 0.01 * spread + 1e-6)[..., 0]
        else:  # classes per row or per token; start/end_logits (B, T): the predicted position of each row
            same = e.argmax(-1) == g.argmax(-1)
        if same.ndim and same.shape == attention_mask.shape:  # token-level: unpadded positions only
            same = same[attention_mask.astype(bool)]
        unchanged += int(same.sum())
        total += int(same.size)
    return Agreement(unchanged, total, worst, what)


def verification_batches(model_dir: str, config: AlbertConfig, choices: bool, text_file: str | None = None,
                         n: int = 256, batch_size: int = 32, seed: int = 100) -> tuple[list[tuple], str]:
    """Inputs to compare int8 with fp32 on, and what they are: `n` lines of `text_file` (one input per line, a
    tab before a sentence pair) tokenized with the model's tokenizer, or `n` random sequences of 8-128 tokens
    with some rows padded. Batches of (input_ids, attention_mask, token_type_ids)."""
    limit = min(128, config.max_position_embeddings)
    if text_file:
        if choices:
            raise ConfigError("--verify-text does not take multiple-choice inputs; leave it out (random inputs)")
        try:  # samples, not rows: blank lines are passed over and counted; a line not UTF-8 is refused
            with open_text(Path(text_file)) as f:
                read = [line.rstrip("\r\n") for line in f]
        except OSError as e:
            raise ConfigError(f"--verify-text: cannot read {text_file}: {e.strerror}") from None
        while read and not read[-1].strip():
            read.pop()
        lines, blank = [line for line in read if line.strip()][:n], sum(not line.strip() for line in read)
        if not lines:
            raise ConfigError(f"--verify-text: {text_file} has no lines")
        tok = Tokenizer.from_pretrained(model_dir)
        lines.sort(key=len)  # batches of similar lengths pad little
        batches = []
        for i in range(0, len(lines), batch_size):
            parts = [line.split("\t", 1) for line in lines[i:i + batch_size]]
            pairs = [p[1] if len(p) > 1 else "" for p in parts] if any(len(p) > 1 for p in parts) else None
            enc = tok([p[0] for p in parts], pairs, padding=True, truncation=True, max_length=limit,
                      return_tensors="pt")
            batches.append((enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]))
        return batches, f"{len(lines)} lines of {text_file}" + (f" ({blank} blank skipped)" if blank else "")
    g = torch.Generator().manual_seed(seed)
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    batches = []
    for start in range(0, n, batch_size):
        T = int(torch.randint(min(8, limit), limit + 1, (1,), generator=g))
        shape = (min(batch_size, n - start), 3, T) if choices else (min(batch_size, n - start), T)
        ids = torch.randint(min(5, config.vocab_size - 1), config.vocab_size, shape, generator=g)
        lengths = torch.randint(max(1, T // 2), T + 1, shape[:-1], generator=g)
        mask = (torch.arange(T) < lengths[..., None]).long()  # each row padded after its own length
        types = (torch.arange(T) >= lengths[..., None] // 2).long() if config.type_vocab_size > 1 else 0 * mask
        batches.append((ids.masked_fill(mask == 0, pad), mask, types * mask))
    return batches, f"{n} random inputs of up to {limit} tokens"


def compare(reference, candidate, names: list[str], batches: list[tuple], problem_type: str | None = None
            ) -> Agreement:
    """`agreement` summed over `batches` between two callables (input_ids, attention_mask, token_type_ids) ->
    outputs in `names` order (tensors or arrays)."""
    def numpy(outputs):
        return [o.float().numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outputs]

    total = None
    for batch in batches:
        with torch.inference_mode():
            expected, got = numpy(reference(*batch)), numpy(candidate(*batch))
        part = agreement(names, expected, got, batch[1].numpy(), problem_type)
        total = part if total is None else total + part
    return total
