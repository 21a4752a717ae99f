"""The paper's NSP-vs-SOP comparison (Table 4's cross-task columns) at small scale.

Two models with the same architecture, data and budget, one trained with MLM + SOP and one with MLM + NSP, are
each scored on held-out SOP pairs and held-out NSP pairs cut from documents neither saw. The paper: the
NSP-trained model scores 52% on SOP (it learned topic, not order); the SOP-trained one 78.9% on NSP and 86.5%
on SOP.

    python scripts/sop_vs_nsp.py --corpus ../shared/data/pretrain/en_medium.txt --steps 1500 --out out/sop_vs_nsp

The whole of Table 5 (no sentence objective as well, MLM/NSP/SOP accuracy, a downstream average, several seeds
with their spread, the paper's numbers beside): `litebert reproduce objective` (docs/paper/).
"""

from __future__ import annotations

import argparse
import json
import os

from litebert.corpus.dataset import PretrainDataset
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.demo import MODEL  # the demo recipe's architecture
from litebert.paper.grid import split_corpus  # train.txt and heldout.txt (the last documents)
from litebert.pretrain import PretrainConfig, pretrain
from litebert.training.train_config import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", help="one sentence per line, blank line between documents (default: bundled)")
    parser.add_argument("--out", default="out/sop_vs_nsp")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--held-out-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    train_txt, heldout_txt = split_corpus(args.corpus, args.out, args.held_out_fraction)
    tok = os.path.join(args.out, "tokenizer")
    train_tokenizer([train_txt], tok, vocab_size=args.vocab_size)
    data = {}
    for task in ("sop", "nsp"):
        for part, path, dupe in (("train", train_txt, 2), ("heldout", heldout_txt, 1)):
            data[part, task] = os.path.join(args.out, f"{part}_{task}")
            prepare([path], data[part, task], tok, max_seq_length=64, pair_task=task, dupe_factor=dupe,
                    seed=args.seed, num_workers=1, progress=False)
    results = {}
    for task in ("sop", "nsp"):
        cfg = PretrainConfig(data=data["train", task], held_out=64, eval_batch_size=128,
                             eval_data=[data["heldout", "sop"], data["heldout", "nsp"]])
        train_cfg = TrainConfig(optimizer="adamw", lr=2e-3, batch_size=32, max_steps=args.steps,
                                warmup_steps=args.steps // 16, eval_every=max(args.steps // 5, 1), log_every=25,
                                out_dir=os.path.join(args.out, f"run_{task}"), seed=args.seed, progress=False)
        summary = pretrain(cfg, train_cfg, MODEL)
        final = summary["final"]
        results[task] = {"sop_acc": final["heldout_sop/sop_acc"], "nsp_acc": final["heldout_nsp/nsp_acc"],
                         "mlm_acc": final["heldout_sop/mlm_acc"], "steps": summary["steps"]}
        print(task, json.dumps(results[task]), flush=True)
    for task in ("sop", "nsp"):  # the accuracy of always answering the held-out set's majority label
        held = PretrainDataset(data["heldout", task])
        positive = sum(held[i]["sentence_order_label"] for i in range(len(held))) / len(held)
        results.setdefault("majority", {})[f"{task}_acc"] = max(positive, 1 - positive)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("\n| trained with | held-out MLM acc | held-out NSP acc | held-out SOP acc |\n|---|---|---|---|")
    for task in ("sop", "nsp"):
        r = results[task]
        print(f"| MLM + {task.upper()} | {r['mlm_acc']:.1%} | {r['nsp_acc']:.1%} | {r['sop_acc']:.1%} |")
    m = results["majority"]
    print(f"| (majority label) | | {m['nsp_acc']:.1%} | {m['sop_acc']:.1%} |")


if __name__ == "__main__":
    main()
