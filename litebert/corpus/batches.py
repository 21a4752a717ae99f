"""The masked batch a pretraining step reads, from a PretrainDataset and a list of example indices.

Masking happens here, at batch time (dynamic masking, as RoBERTa and cramming do); shards prepared with
`--static-masking` carry their masks instead, as the original did. Each example's generator is seeded by (seed,
stream, its position in the run), so a resumed run, any number of processes and any split of a step into
micro-batches draw exactly the same masks.
"""

from __future__ import annotations

import numpy as np

from litebert.config import IGNORE_INDEX
from litebert.corpus.dataset import PretrainDataset
from litebert.corpus.masking import mask_tokens
from litebert.errors import DataError


def make_batch(dataset: PretrainDataset, indices: list[int], seed: int, stream: int, position: int, vocab_size: int,
               mask_id: int, max_seq_length: int, masked_lm_prob: float = 0.15, max_predictions_per_seq: int = 20,
               pad_to_max_length: bool = False, max_ngram: int = 3) -> dict:
    """A padded, masked batch (torch int64): input_ids, attention_mask, token_type_ids, labels (-100 = not
    predicted), sentence_order_label. Row r is the example at `position` + r of its stream (training, held-out,
    ...): its dynamic masks are drawn from (seed, stream, that position) alone, whatever batch it is in; static
    shards use their stored masks."""
    import torch

    rows = [dataset[int(i)] for i in indices]
    width = max_seq_length if pad_to_max_length else max((len(r["input_ids"]) for r in rows), default=0)
    B = len(rows)
    ids = np.full((B, width), dataset.pad_id, dtype=np.int64)
    labels = np.full((B, width), IGNORE_INDEX, dtype=np.int64)
    types = np.zeros((B, width), dtype=np.int64)
    attn = np.zeros((B, width), dtype=np.int64)
    for r, row in enumerate(rows):
        T = len(row["input_ids"])
        if T > max_seq_length:
            raise DataError(f"{dataset.data_dir}: example {indices[r]} has {T} tokens > max_seq_length="
                            f"{max_seq_length}; the data was prepared with max_seq_length={dataset.max_seq_length}")
        if dataset.static:
            masked, lab = row["masked_input_ids"], row["labels"]
        else:
            rng = np.random.default_rng([seed, stream, position + r])
            masked, lab = mask_tokens(row["input_ids"], row["word_starts"], row["special_mask"], rng, vocab_size,
                                      mask_id, masked_lm_prob, max_predictions_per_seq, max_ngram)
        ids[r, :T], labels[r, :T], types[r, :T], attn[r, :T] = masked, lab, row["token_type_ids"], 1
    sop = np.array([r["sentence_order_label"] for r in rows], dtype=np.int64)
    t = torch.from_numpy
    return {"input_ids": t(ids), "attention_mask": t(attn), "token_type_ids": t(types), "labels": t(labels),
            "sentence_order_label": t(sop)}
