"""What pretraining buys as labels get scarce: the demo's pretrained model against random initialisation,
fine-tuned on novel_authorship with about 1%, 10% and 100% of its 5,386 training passages, several seeds each.

    OMP_NUM_THREADS=1 python scripts/label_efficiency.py --out out/label_efficiency

Runs `litebert demo` first (its pretrained model, step 600 of the seq-128 phase) unless --pretrained names a
checkpoint, then one `litebert finetune` grid per (labels, init) with the demo's fine-tuning recipe. The training
file is shuffled, so its first N passages (--max-train-examples) are a random sample; every seed sees the same N.
Writes label_efficiency.json, .md and .png in --out (docs/results.md quotes them). Resumable: a finished grid is
read, not rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from litebert.cli import main as litebert  # noqa: E402
from litebert.demo import FINETUNE, TASK_DIR, TASK_MAX_LENGTH  # noqa: E402
from litebert.runtime.cpu import cpu_model  # noqa: E402

TRAIN_PASSAGES = 5386


def recipe_flags() -> list[str]:
    keys = ("optimizer", "lr", "batch_size", "max_steps", "warmup_steps", "weight_decay", "eval_every")
    return [arg for k in keys for arg in (f"--{k.replace('_', '-')}", str(FINETUNE[k]))] + ["--save-every", "0"]


def grid(out: str, pretrained: str, labels: int, scratch: bool, seeds: list[int]) -> list[float]:
    """Best dev accuracy of each seed's run (a grid of `litebert finetune --seeds`)."""
    run_dir = os.path.join(out, f"labels{labels}_{'scratch' if scratch else 'pretrained'}")
    argv = ["finetune", "--model", pretrained, "--task", "novel_authorship", "--data-dir", TASK_DIR,
            "--max-length", str(TASK_MAX_LENGTH), "--out-dir", run_dir, "--no-progress",
            "--seeds", *map(str, seeds), *recipe_flags()]
    if labels < TRAIN_PASSAGES:
        argv += ["--max-train-examples", str(labels)]
    if scratch:
        argv.append("--from-scratch")
    if litebert(argv) != 0:
        raise SystemExit(f"litebert {' '.join(argv)} failed")
    scores = []
    for seed in seeds:
        (name,) = [d for d in os.listdir(run_dir) if d.endswith(f"seed={seed}")]
        with open(os.path.join(run_dir, name, "summary.json")) as f:
            scores.append(json.load(f)["best"]["accuracy"])
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/label_efficiency")
    parser.add_argument("--pretrained", help="a pretrained checkpoint (default: run `litebert demo` into OUT/demo)")
    parser.add_argument("--labels", type=int, nargs="+", default=[54, 539, TRAIN_PASSAGES])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    started = time.time()
    pretrained = args.pretrained
    if pretrained is None:
        demo_dir = os.path.join(args.out, "demo")
        summary = os.path.join(demo_dir, "summary.json")
        if not os.path.isfile(summary) and litebert(["demo", "--out", demo_dir]) != 0:
            raise SystemExit("litebert demo failed")
        with open(summary) as f:
            pretrained = json.load(f)["pretrain128"]["checkpoint"]
    rows = []
    for labels in args.labels:
        row = {"labels": labels, "share": labels / TRAIN_PASSAGES}
        for init, scratch in (("pretrained", False), ("scratch", True)):
            scores = grid(args.out, pretrained, labels, scratch, args.seeds)
            row[init] = {"scores": scores, "mean": statistics.mean(scores),
                         "sd": statistics.stdev(scores) if len(scores) > 1 else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"task": "novel_authorship (4 novelists; majority class 26.8% of dev)", "pretrained": pretrained,
              "seeds": args.seeds, "recipe": FINETUNE, "rows": rows, "cpu": cpu_model(),
              "machine": platform.machine(), "minutes": (time.time() - started) / 60,
              "load_average_at_end": os.getloadavg()}
    with open(os.path.join(args.out, "label_efficiency.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["| training passages | pretrained: best dev accuracy | from scratch | gap |", "|---|---|---|---|"]
    for r in rows:
        p, s = r["pretrained"], r["scratch"]
        cell = (lambda c: f"{c['mean']:.1%} ± {c['sd']:.1%}" if c["sd"] is not None else f"{c['mean']:.1%}")
        lines.append(f"| {r['labels']} ({r['share']:.0%}) | {cell(p)} | {cell(s)} | "
                     f"{(p['mean'] - s['mean']) * 100:+.1f} points |")
    with open(os.path.join(args.out, "label_efficiency.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for init, style in (("pretrained", "o-"), ("scratch", "s--")):
        xs = [r["labels"] for r in rows]
        ax.errorbar(xs, [r[init]["mean"] * 100 for r in rows], yerr=[(r[init]["sd"] or 0) * 100 for r in rows],
                    fmt=style, capsize=3, label="pretrained (demo)" if init == "pretrained" else "from scratch")
    ax.axhline(26.8, color="grey", lw=0.8, ls=":", label="majority class")
    ax.set_xscale("log")
    ax.set_xlabel("training passages (log scale)")
    ax.set_ylabel("best dev accuracy, %")
    ax.set_title(f"novel_authorship, mean ± sd over {len(args.seeds)} seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "label_efficiency.png"), dpi=120)


if __name__ == "__main__":
    main()
