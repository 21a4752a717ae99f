"""`litebert serve`'s /metrics in Prometheus' text format (written here: a few counters and histograms do not
need prometheus_client): requests by route and status, errors by status, request latency, inputs per model call,
requests waiting; and the ASGI wrapper that observes every answer."""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import threading
import time
from collections import Counter

log = logging.getLogger("litebert.serve")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # inputs in one model call
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Histogram:
    def __init__(self, buckets: tuple):
        self.buckets, self.counts, self.sum, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.buckets):
            self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            out.append(f'{name}_bucket{{le="{bound}"}} {running}')
        out += [f'{name}_bucket{{le="+Inf"}} {self.count}', f"{name}_sum {self.sum:.6f}", f"{name}_count {self.count}"]
        return out


class Metrics:
    """What /metrics shows; observed from the event loop (requests) and the model thread (batches)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: Counter = Counter()  # (path, status) -> count
        self.latency = Histogram(LATENCY_BUCKETS)
        self.batches = Histogram(BATCH_BUCKETS)

    def request(self, path: str, status: int, seconds: float) -> None:
        with self.lock:
            self.requests[(path, status)] += 1
            if path == "/predict":
                self.latency.observe(seconds)

    def batch(self, inputs: int) -> None:
        with self.lock:
            self.batches.observe(inputs)

    def render(self, queued: int) -> str:
        with self.lock:
            lines = ["# HELP litebert_requests_total HTTP requests answered, by route and status.",
                     "# TYPE litebert_requests_total counter"]
            lines += [f'litebert_requests_total{{path="{p}",status="{s}"}} {n}'
                      for (p, s), n in sorted(self.requests.items())]
            errors = Counter()
            for (_, status), n in self.requests.items():
                if status >= 400:
                    errors[status] += n
            lines += ["# HELP litebert_errors_total HTTP error answers (4xx, 5xx), by status.",
                      "# TYPE litebert_errors_total counter"]
            lines += [f'litebert_errors_total{{status="{s}"}} {n}' for s, n in sorted(errors.items())]
            lines += ["# HELP litebert_request_duration_seconds Time to answer POST /predict.",
                      "# TYPE litebert_request_duration_seconds histogram",
                      *self.latency.lines("litebert_request_duration_seconds"),
                      "# HELP litebert_batch_size Inputs in one model call.",
                      "# TYPE litebert_batch_size histogram", *self.batches.lines("litebert_batch_size"),
                      "# HELP litebert_queued_requests Requests waiting for the model.",
                      "# TYPE litebert_queued_requests gauge", f"litebert_queued_requests {queued}"]
        return "\n".join(lines) + "\n"


ROUTES = ("/health", "/predict", "/metrics", "/openapi.json", "/docs")


class Observed:
    """The app as served (plain ASGI around Starlette): every answer counted in /metrics (status and latency),
    and a request that uvicorn cancels at shutdown (past --shutdown-timeout-s) answered 503 in JSON when its
    answer has not begun, instead of uvicorn's plain-text 500."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    def __getattr__(self, name: str):  # app.state, app.routes, ... of the wrapped Starlette app
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"] if scope["path"] in ROUTES else "other"
        started, status, begun = time.monotonic(), [500], [False]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0], begun[0] = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if begun[0]:
                raise
            log.warning("%s %s cancelled at shutdown: answered 503", scope["method"], scope["path"])
            status[0] = 503
            body = json.dumps({"error": "the server shut down before the request finished"}).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.metrics.request(path, status[0], time.monotonic() - started)
