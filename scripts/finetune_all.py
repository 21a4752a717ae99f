"""Fine-tune one pretrained litebert model on the four real tasks of shared/data, beside the same architecture
fine-tuned from random initialisation with the same budget, and print the table (issue: fine-tuning beats the
majority class and beats random initialisation).

    python scripts/finetune_all.py --model out/long/step_N --out out/finetune_all [--steps 400] [--seeds 1 2]

A thin wrapper over the grids of `litebert finetune --seeds` (litebert.training.sweep): one grid of seeds per task and
initialisation, in <out>/<task>_<init>/seed=N/, resumable (finished runs are kept). Every run's best dev
checkpoint is scored once on test. The table gives means over the seeds and counts the diverged runs (a best dev
score that does not beat the trivial baseline): from random initialisation that is itself the finding.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from litebert.config import AlbertConfig
from litebert.devdata import SHARED_DATA
from litebert.finetune import FinetuneConfig, finetune
from litebert.tasks.loading import evaluate_checkpoint
from litebert.training.sweep import grid_runs, run_grid, scored_once
from litebert.training.train_config import TrainConfig

TASKS = SHARED_DATA / "tasks"
MAX_LENGTH = {"novel_authorship": 64, "bible_paraphrase": 128, "wordnet_qa": 128, "wordnet_defmc": 48}
INITS = ("pretrained", "from_scratch")


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
    parser.add_argument("--max-train-examples", type=int, default=None, help="training examples read (default: all)")
    parser.add_argument("--max-eval-examples", type=int, default=None, help="dev examples scored while training")
    parser.add_argument("--max-query-length", type=int, default=32, help="wordnet_qa: question tokens kept")
    parser.add_argument("--doc-stride", type=int, default=16, help="wordnet_qa: tokens between context windows")
    args = parser.parse_args()
    positions = AlbertConfig.load(args.model).max_position_embeddings
    results: dict[str, dict] = {}
    for task in args.tasks:
        for init in INITS:
            cfg = FinetuneConfig(model=args.model, task=task, data_dir=str(TASKS / task),
                                 max_length=min(MAX_LENGTH[task], positions), max_query_length=args.max_query_length,
                                 doc_stride=args.doc_stride, dropout=args.dropout,
                                 from_scratch=init == "from_scratch", max_train_examples=args.max_train_examples,
                                 max_eval_examples=args.max_eval_examples)
            train_cfg = TrainConfig(optimizer="adamw", lr=args.lr, batch_size=args.batch_size, max_steps=args.steps,
                                    warmup_steps=args.steps // 10, eval_every=max(args.steps // 4, 1), log_every=25,
                                    keep_last=1, out_dir=os.path.join(args.out, f"{task}_{init}"), progress=False)
            report = run_grid(cfg, train_cfg, {}, args.seeds, train=finetune, score=evaluate_checkpoint)
            r = results.setdefault(task, {"metric": report["primary_metric"], "trivial_score": report["trivial_score"]})
            r["baseline"] = report["baseline"]
            r[init] = []
            for run, row in zip(grid_runs(cfg, train_cfg, {}, args.seeds), report["runs"]):
                summary = os.path.join(row["dir"], "summary.json")  # none after a non-finite loss
                dev = json.loads(Path(summary).read_text())["best"] if os.path.isfile(summary) else {}
                # the dev-selected checkpoint, scored once on test: dev figures are biased upwards by the choice
                test = scored_once(run, evaluate_checkpoint) if dev else {}
                r[init].append({"seed": row["values"]["seed"], "dev": dev, "test": test, "diverged": row["diverged"]})
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    def cell(runs: list[dict], metric: str, split: str) -> str:
        values = [run[split][metric] for run in runs if metric in run[split]]
        bad = sum(bool(run["diverged"]) for run in runs)
        return ("-" if not values else f"{sum(values) / len(values):.3f}") + \
            (f" ({bad}/{len(runs)} diverged)" if bad else "")

    print("\n| task | metric | split | pretrained | from scratch | trivial baseline (dev) |\n|---|---|---|---|---|---|")
    for task, r in results.items():
        m, base = r["metric"], r["trivial_score"]  # majority class, chance, or the rarest passage word (QA)
        for split in ("dev", "test"):
            print(f"| {task} | {m} | {split} | {cell(r['pretrained'], m, split)} | {cell(r['from_scratch'], m, split)} "
                  f"| {'' if base is None else f'{base:.3f}'} |")


if __name__ == "__main__":
    main()
