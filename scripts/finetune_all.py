"""Fine-tune one pretrained litebert model on the four real tasks of shared/data, beside the same architecture
fine-tuned from random initialisation with the same budget, and print the table (issue: fine-tuning beats the
majority class and beats random initialisation).

    python scripts/finetune_all.py --model out/long/step_N --out out/finetune_all [--steps 400] [--seeds 1 2]

Each run keeps its best dev checkpoint and scores it once on test; the table gives means over the seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

from litebert.config import AlbertConfig
from litebert.devdata import SHARED_DATA
from litebert.finetune import FinetuneConfig, evaluate_checkpoint, finetune
from litebert.training.loop import TrainConfig

TASKS = SHARED_DATA / "tasks"
MAX_LENGTH = {"novel_authorship": 64, "bible_paraphrase": 128, "wordnet_qa": 128, "wordnet_defmc": 48}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="pretrained model directory")
    parser.add_argument("--out", default="out/finetune_all")
    parser.add_argument("--tasks", nargs="+", default=list(MAX_LENGTH))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dropout", type=float, default=None, help="fine-tuning dropout (default: the model's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[12345], help="one run per seed and initialisation")
    parser.add_argument("--max-eval-examples", type=int, default=None)
    parser.add_argument("--max-query-length", type=int, default=32, help="wordnet_qa: question tokens kept")
    parser.add_argument("--doc-stride", type=int, default=16, help="wordnet_qa: tokens between context windows")
    args = parser.parse_args()
    positions = AlbertConfig.load(args.model).max_position_embeddings
    results = {}
    for task in args.tasks:
        for seed in args.seeds:
            for init in ("pretrained", "from_scratch"):
                cfg = FinetuneConfig(model=args.model, task=task, data_dir=str(TASKS / task),
                                     max_length=min(MAX_LENGTH[task], positions),
                                     max_query_length=args.max_query_length, doc_stride=args.doc_stride,
                                     dropout=args.dropout, from_scratch=init == "from_scratch",
                                     max_eval_examples=args.max_eval_examples)
                train_cfg = TrainConfig(optimizer="adamw", lr=args.lr, batch_size=args.batch_size,
                                        max_steps=args.steps, warmup_steps=args.steps // 10, seed=seed,
                                        eval_every=max(args.steps // 4, 1), log_every=25, keep_last=1,
                                        out_dir=os.path.join(args.out, f"{task}_{init}_{seed}"), progress=False)
                summary = finetune(cfg, train_cfg)
                # the dev-selected checkpoint, scored once on test: dev figures are biased upwards by the choice
                test = evaluate_checkpoint(summary["best_dir"], dataclasses.replace(
                    cfg, max_eval_examples=None), "test")[0].metrics
                r = results.setdefault(task, {"metric": summary["primary_metric"], "baseline": summary["baseline"]})
                r.setdefault(init, []).append({"seed": seed, "dev": summary["best"], "test": test})
                print(task, init, seed, json.dumps({"dev": summary["best"], "test": test}), flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("\n| task | metric | split | pretrained | from scratch | trivial baseline (dev) |\n|---|---|---|---|---|---|")
    for task, r in results.items():
        m = r["metric"]
        base = r["baseline"].get(m)  # majority class, chance, or the rarest passage word (QA)
        for split in ("dev", "test"):
            mean = {init: sum(run[split][m] for run in r[init]) / len(r[init])
                    for init in ("pretrained", "from_scratch")}
            print(f"| {task} | {m} | {split} | {mean['pretrained']:.3f} | {mean['from_scratch']:.3f} | "
                  f"{'' if base is None else f'{base:.3f}'} |")


if __name__ == "__main__":
    main()
