"""Load test of `litebert serve` on loopback: dynamic batching against the same server with batching off.

The script starts both servers (`litebert serve --port 0`, subprocesses on 127.0.0.1) side by side, and at each
concurrency (default 1, 8, 32) runs a closed loop against one mode and then the other, the order flipped from level
to level (interleaved, as every bench here: load from elsewhere on a shared machine lands on both modes alike; an
idle server takes no CPU from the one under load): that many clients, each on its own keep-alive connection,
sending one short text per request and the next as soon as the answer is in. A level stops after --requests answers
or --seconds, whichever comes first (so the whole run is bounded: 2 modes x levels x --seconds, plus model
loading); then each server gets SIGTERM and must exit by itself. Reported per level and mode: requests/s, p50/p99 latency (ms), and the
mean inputs per model call (from the server's /health counters); `speedup` is batching's requests/s over the
baseline's. One JSON line on stdout; progress on stderr.

The model: --model DIR, or (default) a random text-classification model of --preset size (tiny: litebert's CPU
preset, 128 hidden, 4 layers; albert-base-v2 for figures that mean something) with a small SentencePiece trained on
the bundled corpus, written to a temporary directory. The client is a few lines of asyncio HTTP/1.1 in this process
(httpx would spend more CPU than the server on a 2-core machine); give the server its own cores with --threads.

    .venv/bin/python bench/serve_load.py --preset albert-base-v2 --threads 1    # ~2 min
    .venv/bin/python bench/serve_load.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from common import emit, machine  # noqa: E402

# -- the model and the texts ---------------------------------------------------------------------------------

def random_classifier(preset: str, directory: str, seed: int = 0) -> str:
    """A randomly initialised AlbertForSequenceClassification (2 labels) with a tokenizer trained on the first
    ~30 KB of the bundled corpus: a complete model directory that `litebert serve` loads like a fine-tuned one."""
    import torch

    from litebert.config import AlbertConfig
    from litebert.corpus.documents import BUNDLED_CORPUS
    from litebert.corpus.tokenizer_training import train_tokenizer
    from litebert.heads import AlbertForSequenceClassification

    text = os.path.join(directory, "corpus.txt")
    with gzip.open(BUNDLED_CORPUS, "rt", encoding="utf-8") as f, open(text, "w", encoding="utf-8") as out:
        out.write(f.read(30_000))
    model_dir = os.path.join(directory, "model")
    tokenizer = train_tokenizer([text], model_dir, vocab_size=1000)
    config = AlbertConfig.from_preset(preset, vocab_size=len(tokenizer), id2label={0: "negative", 1: "positive"},
                                      problem_type="single_label_classification")
    torch.manual_seed(seed)
    AlbertForSequenceClassification(config).save_pretrained(model_dir)  # initialised as in from-scratch training
    return model_dir


def short_texts(n: int = 64) -> list[str]:
    """Sentences of 40-120 characters from the bundled corpus (a line is a sentence there)."""
    from litebert.corpus.documents import BUNDLED_CORPUS
    texts = []
    with gzip.open(BUNDLED_CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            if 40 <= len(line.strip()) <= 120:
                texts.append(line.strip())
                if len(texts) == n:
                    break
    return texts


# -- the server ----------------------------------------------------------------------------------------------

class Server:
    """`litebert serve` in a subprocess; its stdout read by a thread (for the port and the last words)."""

    def __init__(self, model: str, batching: bool, args: argparse.Namespace, log_path: str):
        cmd = [sys.executable, "-m", "litebert.cli", "serve", "--model", model, "--host", "127.0.0.1",
               "--port", "0", "--max-batch-size", str(args.max_batch_size),
               *(["--batching", "--max-wait-ms", str(args.max_wait_ms)] if batching else ["--no-batching"])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "PYTHONUNBUFFERED": "1"}
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()
        self.port = int(self.wait_for(r"on http://127\.0\.0\.1:(\d+) ", timeout=args.start_timeout).group(1))

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if m := re.search(pattern, line):
                return m
        self.stop()
        raise SystemExit(f"serve_load: the server did not print {pattern!r} in {timeout:.0f} s; its log: "
                         f"{self.log.name}\n{Path(self.log.name).read_text()[-2000:]}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the server's exit code (it must exit by itself; killed, and reported, if it does not)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        self.log.close()
        return self.proc.returncode


# -- the client ----------------------------------------------------------------------------------------------

class Connection:
    """One keep-alive HTTP/1.1 connection: just enough for uvicorn's answers (always with Content-Length)."""

    def __init__(self, port: int):
        self.port = port

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + (b"Content-Type: application/json\r\n\r\n" if body else b"\r\n") + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def get_json(port: int, path: str) -> dict:
    conn = await Connection(port).open()
    try:
        status, body = await conn.request("GET", path)
        assert status == 200, (status, body)
        return json.loads(body)
    finally:
        conn.close()


async def load(port: int, concurrency: int, texts: list[str], requests: int, seconds: float) -> dict:
    """Closed loop at `concurrency`: each client sends its next request when its last is answered, until
    `requests` answers in all or `seconds` have passed. Latencies in seconds, of the answered requests."""
    bodies = [json.dumps({"inputs": t}).encode() for t in texts]
    latencies: list[float] = []
    errors = 0
    issued = 0
    deadline = time.perf_counter() + seconds

    async def client(i: int) -> None:
        nonlocal issued, errors
        conn = await Connection(port).open()
        try:
            while issued < requests and time.perf_counter() < deadline:
                body = bodies[(issued + i) % len(bodies)]
                issued += 1
                t0 = time.perf_counter()
                status, answer = await asyncio.wait_for(conn.request("POST", "/predict", body), 60)
                latencies.append(time.perf_counter() - t0)
                errors += status != 200
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {"latencies": latencies, "errors": errors, "seconds": elapsed}


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def level_record(latencies: list[float], errors: int, seconds: float, inputs: int, model_calls: int) -> dict:
    """One load level's figures. Seconds keep microseconds: the smoke run lasts about 0.04 s, and at
    milliseconds the rate printed beside them disagreed with requests / seconds by 1%."""
    return {"requests": len(latencies), "errors": errors, "seconds": round(seconds, 6),
            "requests_per_s": round(len(latencies) / seconds, 2),
            "p50_ms": round(1000 * percentile(latencies, 50), 2), "p99_ms": round(1000 * percentile(latencies, 99), 2),
            "inputs_per_model_call": round(inputs / max(model_calls, 1), 2)}


async def measure_level(port: int, concurrency: int, texts: list[str], args: argparse.Namespace) -> dict:
    before = (await get_json(port, "/health"))["served"]
    run = await load(port, concurrency, texts, args.requests, args.seconds)
    after = (await get_json(port, "/health"))["served"]
    calls = after["model_calls"] - before["model_calls"]
    return level_record(run["latencies"], run["errors"], run["seconds"], after["inputs"] - before["inputs"], calls)


async def measure_modes(ports: dict[str, int], levels: list[int], texts: list[str], args: argparse.Namespace
                        ) -> dict[str, dict[int, dict]]:
    """Every mode at every level, the modes' order flipped from level to level."""
    for port in ports.values():
        await load(port, max(levels), texts, args.warmup, args.seconds)  # first calls: allocations, thread start-up
    results: dict[str, dict[int, dict]] = {name: {} for name in ports}
    for i, c in enumerate(levels):
        for name in (list(ports) if i % 2 == 0 else list(ports)[::-1]):
            r = results[name][c] = await measure_level(ports[name], c, texts, args)
            print(f"  {name:11s} concurrency {c:3d}: {r['requests_per_s']:8.1f} req/s  p50 {r['p50_ms']:7.1f} ms"
                  f"  p99 {r['p99_ms']:7.1f} ms  {r['inputs_per_model_call']:5.1f} inputs/call", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory to serve (default: a random classifier of --preset)")
    parser.add_argument("--preset", default="tiny", help="size of the default random model (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=2000, help="most answers per level (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=15.0, help="longest a level runs (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=64, help="requests before each mode's levels (default: %(default)s)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=0, help="the server's torch threads (default: torch's choice)")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds for a server to load its model")
    parser.add_argument("--quick", action="store_true", help="smoke run: 24 requests and at most 3 s per level")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.seconds, args.warmup = 24, 3.0, 8
    if min(args.concurrency) < 1 or args.requests < 1 or args.seconds <= 0:
        parser.error("--concurrency, --requests and --seconds must be positive")

    with tempfile.TemporaryDirectory(prefix="litebert-serve-load-") as tmp:
        model = args.model or random_classifier(args.preset, tmp)
        texts = short_texts()
        servers: dict[str, Server] = {}
        try:
            for name, batching in (("batching", True), ("no_batching", False)):
                servers[name] = Server(model, batching, args, os.path.join(tmp, f"{name}.log"))
            health = asyncio.run(get_json(servers["batching"].port, "/health"))
            modes = asyncio.run(measure_modes({n: s.port for n, s in servers.items()}, args.concurrency, texts, args))
        finally:
            codes = {name: server.stop() for name, server in servers.items()}
        for name, code in codes.items():
            if code != 0:
                raise SystemExit(f"serve_load: the {name} server exited with {code} after SIGTERM")

    levels = [{"concurrency": c, "batching": modes["batching"][c], "no_batching": modes["no_batching"][c],
               "speedup": round(modes["batching"][c]["requests_per_s"] / modes["no_batching"][c]["requests_per_s"], 3)}
              for c in args.concurrency]
    emit({"bench": "serve_load", "model": args.model or f"random {args.preset} classifier",
          "task": health["task"], "backend": health["backend"], "precision": health["precision"],
          "max_batch_size": args.max_batch_size, "max_wait_ms": args.max_wait_ms, "server_threads": args.threads or None,
          "requests_per_level": args.requests, "seconds_per_level": args.seconds,
          "text_chars_median": statistics.median(map(len, texts)), "levels": levels,
          "uvicorn_stack": {"loop": "uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
                            "http": "httptools" if importlib.util.find_spec("httptools") else "h11"},
          "machine": {**machine(), "threads": None}})


if __name__ == "__main__":
    main()
