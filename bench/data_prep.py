"""Data-preparation throughput: `litebert prepare` on en_medium.txt; prints one JSON line.

    python bench/data_prep.py [--mb 2] [--workers 2] [--tokenizer DIR]

MB/s counts raw input text bytes per wall-clock second of `prepare` (tokenizer training excluded); peak RSS is
the maximum resident set of the process that runs `prepare` and of its worker processes (the larger of the two),
in MB. Without --tokenizer one is trained first (SentencePiece on 7 MB peaks near 190 MB, three times what
`prepare` needs), so `prepare` is then measured in a fresh process given it: a process's peak never comes down.
That process's own peak is its VmHWM, not getrusage's ru_maxrss, which keeps the peak of what ran before exec
(the launching process, tokenizer training included).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.devdata import SHARED_DATA

CORPUS = str(SHARED_DATA / "pretrain" / "en_medium.txt")


def _head(path: str, mb: float, out: str) -> str:
    """The first `mb` MB of a corpus, cut at a document boundary (a blank line)."""
    limit, size = int(mb * 1e6), 0
    with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        for line in f:
            g.write(line)
            size += len(line.encode())
            if size >= limit and not line.strip():
                break
    return out


def peak_rss_kib() -> int:
    """The peak resident set of this process (VmHWM: this program's memory since exec) or of its largest
    finished worker, in KiB."""
    with open("/proc/self/status") as f:
        own = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=CORPUS)
    p.add_argument("--mb", type=float, default=None, help="use only the first MB of the corpus")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--tokenizer", default=None, help="tokenizer dir (default: train a 16k one on the corpus; 7 MB cannot give 30k pieces)")
    a = p.parse_args()
    if a.tokenizer is None:  # trained here, then prepare measured in a process that never held the training
        with tempfile.TemporaryDirectory() as tmp:
            tok_dir = os.path.join(tmp, "tok")
            train_tokenizer([a.corpus], tok_dir, vocab_size=16000)
            return subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--tokenizer", tok_dir]
                                  ).returncode
    with tempfile.TemporaryDirectory() as tmp:
        corpus = _head(a.corpus, a.mb, os.path.join(tmp, "part.txt")) if a.mb else a.corpus
        mb = os.path.getsize(corpus) / 1e6
        t0 = time.perf_counter()
        meta = prepare([corpus], os.path.join(tmp, "data"), a.tokenizer, max_seq_length=a.max_seq_length,
                       num_workers=a.workers, progress=False)
        dt = time.perf_counter() - t0
    rss = peak_rss_kib()
    print(json.dumps({"bench": "data_prep", "corpus": os.path.basename(a.corpus), "mb": round(mb, 3),
                      "workers": a.workers, "seconds": round(dt, 3), "mb_per_s": round(mb / dt, 3),
                      "examples": meta["num_instances"], "tokens": meta["num_tokens"],
                      "peak_rss_mb": round(rss / 1024, 1), "cpu_count": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
