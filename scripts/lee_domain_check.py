"""How much of Lee's similarity can the distillation text teach at all? A check without a transformer.

A mean of trained piece embeddings (the student's tokenizer, an EmbeddingBag of width 128 and a linear map to
the teacher's 384 dimensions) is fitted straight to the teacher's vectors of a distillation run's own texts
(the run's cached teacher vectors; MSE, AdamW), and scored on Lee's 1,225 pairs every sixth of the way. It has no
layers to train and no pretraining to undo, so what it reaches says what the texts themselves carry about the
vocabulary of Lee's news documents; docs/sentence.md compares the bundled text alone with the text plus Lee's
background corpus.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/lee_domain_check.py --out out/sentence_mlm_news
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="a scripts/sentence_distill.py output directory, distilled")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--distill-texts", type=int, default=16000, help="the run's --distill-texts")
    a = p.parse_args()

    import numpy as np
    import torch

    from litebert.runconfig import load_toml
    from litebert.sentences.distill import distill_items
    from litebert.sentences.sts import pair_metrics, read_benchmark, read_scored_pairs
    from litebert.tokenizer import Tokenizer
    from litebert.training.train_config import TrainConfig

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sentence_distill import distill_text_settings

    torch.manual_seed(0)
    seed = load_toml(os.path.join(a.out, "distill", "train_config.toml"))["train"].get("seed", TrainConfig.seed)
    in_domain = os.path.isfile(os.path.join(a.out, "distill_text.txt"))
    cfg = argparse.Namespace(**distill_text_settings(a.out, in_domain, a.distill_texts),
                             distill_pairs=[os.path.join(a.out, "parallel.jsonl")])
    texts, items = distill_items(cfg, lambda path: read_scored_pairs(path, ("sentence1", "sentence2"), "")[0], seed)
    targets = torch.from_numpy(np.load(os.path.join(a.out, "distill", "teacher_vectors.npy")))
    if len(texts) != len(targets):
        raise SystemExit(f"{a.out}: {len(texts)} texts rebuilt, {len(targets)} teacher vectors cached")
    tok = Tokenizer.from_pretrained(os.path.join(a.out, "tokenizer"))
    pieces = [tok.encode(text)[:126] for text, _ in items]  # the student's 128 tokens, less [CLS] and [SEP]
    rows = torch.tensor([row for _, row in items])
    pairs, gold = read_benchmark("gensim:lee")
    lee_a, lee_b = [tok.encode(x)[:126] for x, _ in pairs], [tok.encode(y)[:126] for _, y in pairs]

    bag = torch.nn.EmbeddingBag(tok.vocab_size, a.width, mode="mean")
    proj = torch.nn.Linear(a.width, targets.shape[1])
    opt = torch.optim.AdamW([*bag.parameters(), *proj.parameters()], lr=a.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / a.steps)

    def encode(seqs: list[list[int]]) -> torch.Tensor:
        offsets = torch.tensor([0] + [len(s) for s in seqs[:-1]]).cumsum(0)
        return proj(bag(torch.tensor([i for s in seqs for i in s]), offsets))

    def lee() -> float:
        with torch.no_grad():
            return pair_metrics(encode(lee_a).numpy(), encode(lee_b).numpy(), gold)["spearman"]

    curve, t0 = [(0, lee())], time.time()
    draw = torch.Generator().manual_seed(0)
    for step in range(1, a.steps + 1):
        batch = torch.randint(len(items), (a.batch_size,), generator=draw)
        loss = ((encode([pieces[i] for i in batch]) - targets[rows[batch]]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % max(a.steps // 6, 1) == 0:
            curve.append((step, lee()))
            print(f"step {step}: loss {loss.item():.5f}, Lee Spearman {curve[-1][1]:.3f}", flush=True)
    print(json.dumps({"out": a.out, "in_domain_text": in_domain, "texts": len(texts), "items": len(items),
                      "lee_spearman_curve": curve, "seconds": round(time.time() - t0)}))


if __name__ == "__main__":
    main()
