"""Pretraining data: raw documents -> sentence-order pairs -> memory-mapped shards (`pairs`), tokenizer training
on the same documents, and the masked batches a pretraining step reads (`masking` for one sequence, `batches`).
Needs no network and no model: it imports only the tokenizer and the config's constants."""
