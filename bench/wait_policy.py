"""OpenMP's wait policy on a shared machine: the demo's training step alone and beside one busy process.

torch's CPU kernels run on OpenMP threads, one per core by default. Between parallel regions GNU OpenMP's
threads spin-wait (OMP_WAIT_POLICY unset: active for a while, then sleep). When another process holds one
of the cores, a spinning thread burns the time slice its sibling needs, and every barrier waits for the
descheduled thread: a 2-thread step can run many times slower than a 1-thread one. PASSIVE makes waiting
threads sleep at once. This script measures what each policy costs alone and buys under contention.

Each case is a fresh process (the policy is read when OpenMP starts), timing `--steps` training steps of the
demo's model (E 64, H 128, 4 layers, batch 32 x 64 tokens, AdamW) after 3 warm-up steps; the competitor is a
Python busy loop pinned to nothing (the scheduler places it). Prints one JSON line with the median seconds
per step for each (policy, load) pair and the machine.

    .venv/bin/python bench/wait_policy.py [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from common import emit, machine

STEP = r"""
import statistics, time, torch
from litebert.config import AlbertConfig
from litebert.heads import AlbertForPreTraining
torch.manual_seed(0)
cfg = AlbertConfig(vocab_size=8000, embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                   intermediate_size=512, max_position_embeddings=128, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0)
model = AlbertForPreTraining(cfg)
ids = torch.randint(5, 8000, (32, 64))
labels = torch.full_like(ids, -100)
labels[:, ::7] = ids[:, ::7]
order = torch.zeros(32, dtype=torch.long)
opt = torch.optim.AdamW(model.parameters())
seconds = []
for i in range(3 + STEPS):
    start = time.perf_counter()
    model(input_ids=ids, labels=labels, sentence_order_label=order).loss.backward()
    opt.step()
    opt.zero_grad()
    if i >= 3:
        seconds.append(time.perf_counter() - start)
print(statistics.median(seconds))
"""

BUSY = "while True: pass"


def time_steps(policy: str | None, steps: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout, so that litebert imports
    out = subprocess.run([sys.executable, "-c", STEP.replace("STEPS", str(steps))], env=env, check=True,
                         capture_output=True, text=True, cwd=root)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case (default: %(default)s)")
    steps = parser.parse_args().steps
    record: dict = {"bench": "wait_policy", "steps": steps, "threads": os.cpu_count(), "results": {}}
    for load in ("alone", "beside one busy process"):
        busy = subprocess.Popen([sys.executable, "-c", BUSY]) if load != "alone" else None
        try:
            time.sleep(0.5 if busy else 0)
            for policy in (None, "PASSIVE"):
                key = f"{policy or 'default'}, {load}"
                record["results"][key] = round(time_steps(policy, steps), 4)
        finally:
            if busy:
                busy.kill()
                busy.wait()
    r = record["results"]
    record["passive_vs_default_alone"] = round(r["default, alone"] / r["PASSIVE, alone"], 3)
    record["passive_vs_default_loaded"] = round(r["default, beside one busy process"]
                                                / r["PASSIVE, beside one busy process"], 3)
    record["machine"] = machine()
    emit(record)


if __name__ == "__main__":
    main()
