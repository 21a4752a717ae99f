"""S-ALBERT on bible_paraphrase: recall@1 of the right paraphrase, before and after siamese training.

  1. a tokenizer and a small ALBERT pretrained (MLM + SOP) for a few minutes on the KJV + WEB Bible text;
  2. its mean-pooled embeddings, untrained for similarity: recall@1 over the test set's positive pairs
     (for each KJV verse, is its own WEB verse the nearest of all of them?);
  3. S-ALBERT: the same encoder trained with in-batch negatives on the train set's positive pairs; recall@1 again.

    .venv/bin/python scripts/salbert_bible.py --out out/salbert_bible [--pretrain-steps 600 --steps 400]
Prints a JSON summary (also <out>/salbert_summary.json).
"""

import argparse
import json
import os
import time

from litebert.devdata import SHARED_DATA

DATA = str(SHARED_DATA)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/salbert_bible")
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--pretrain-steps", type=int, default=600, help="0: random initialisation")
    p.add_argument("--steps", type=int, default=400, help="S-ALBERT steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--test-pairs", type=int, default=None, help="score only the first N test pairs")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    import torch

    from litebert.config import AlbertConfig
    from litebert.corpus.shards import prepare
    from litebert.corpus.tokenizer_training import train_tokenizer
    from litebert.embed import SentenceConfig, train_sentence_encoder
    from litebert.model import AlbertForPreTraining
    from litebert.pretrain import PretrainConfig, pretrain
    from litebert.training.train_config import TrainConfig

    torch.set_num_threads(a.threads)
    t0 = time.time()
    bible = [f"{DATA}/corpus/en/bible_kjv.jsonl", f"{DATA}/corpus/en/bible_web.jsonl"]
    tok_dir, data_dir = os.path.join(a.out, "tokenizer"), os.path.join(a.out, "data")
    tiny = dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
                max_position_embeddings=128)
    tok = train_tokenizer(bible, tok_dir, vocab_size=a.vocab_size, input_sentence_size=200_000)
    if a.pretrain_steps:
        prepare(bible, data_dir, tok_dir, max_seq_length=a.max_length, num_workers=1, progress=False,
                paragraphs=False)
        summary = pretrain(PretrainConfig(data=data_dir, model="tiny", held_out=500),
                           TrainConfig(lr=2e-3, batch_size=64, max_steps=a.pretrain_steps, warmup_steps=50,
                                       out_dir=os.path.join(a.out, "pretrain"), progress=False, log_every=50),
                           {k: v for k, v in tiny.items()})
        start = summary["checkpoint"]
        start_kind = f"pretrained {a.pretrain_steps} steps (held-out MLM acc {summary['final']['mlm_acc']:.3f})"
    else:
        start = os.path.join(a.out, "random")
        torch.manual_seed(0)
        AlbertForPreTraining(AlbertConfig(vocab_size=tok.vocab_size, **tiny)).save_pretrained(start)
        tok.save_pretrained(start)
        start_kind = "random initialisation"
    task = f"{DATA}/tasks/bible_paraphrase"
    cfg = SentenceConfig(model=start, train=f"{task}/train.jsonl", eval=f"{task}/test.jsonl",
                         max_length=a.max_length, max_eval_examples=a.test_pairs)
    s = train_sentence_encoder(cfg, TrainConfig(optimizer="adamw", lr=1e-4 * 5, batch_size=a.batch_size,
                                                max_steps=a.steps, warmup_steps=a.steps // 10,
                                                out_dir=os.path.join(a.out, "salbert"), progress=False))
    result = {"start": start_kind, "untrained_recall_at_1": s["before"]["recall_at_1"],
              "trained_recall_at_1": s["after"]["recall_at_1"], "untrained_spearman": s["before"].get("spearman"),
              "trained_spearman": s["after"].get("spearman"), "train_pairs": s["train_pairs"], "steps": s["steps"],
              "checkpoint": s["checkpoint"], "minutes": round((time.time() - t0) / 60, 1)}
    with open(os.path.join(a.out, "salbert_summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
