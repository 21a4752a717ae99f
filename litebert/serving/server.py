"""`litebert serve`: an HTTP JSON server for a model directory, with dynamic batching of concurrent requests.

    GET  /health        {"status", "model", "task", "backend", "precision", "batching", ..., "queued_requests",
                        "served"}
    POST /predict       {"inputs": X, "parameters": {...}} -> {"outputs": Y}
    GET  /metrics       Prometheus text: requests and errors by status, latency, inputs per model call
    GET  /openapi.json  the OpenAPI description; GET /docs shows it

X is one input in the pipeline's shapes (a string; a pair {"text": ..., "text_pair": ...}; {"question": ...,
"context": ...}; ...) or a JSON array of them. A JSON array is a list of inputs (as in transformers' pipelines),
unless its elements are not inputs while the whole array is one (e.g. [question, [choices]]); an array of strings
is always a list of texts (a pair in an array is [[text, pair]]). A list answers with a list, one input with one
output. "parameters" are the task's call options (top_k, function_to_apply, aggregation_strategy, ...) as HF
inference servers take them; --parameters sets their defaults. Errors answer {"error": "<one line>"}: 400
malformed JSON, 413 a body over --max-body-bytes, 422 an input or parameter the model cannot take (wrong type,
empty, over --max-text-chars, more than --max-inputs, an option the task lacks or a value it refuses, an input
the model refuses once tokenized: a [MASK] cut off by max_length), 404/405 unknown routes and methods, 500 a
model failure, 503 while shutting down (and for requests still running when --shutdown-timeout-s cancels them).
After any of them the server keeps serving. A client that disconnects before its body is read is logged as such.

Batching: handlers put their inputs on one queue; one worker takes the oldest request, gathers the requests
behind it until --max-batch-size inputs or --max-wait-ms have passed, runs the model once in its own thread (the
event loop keeps accepting and parsing), and hands each request its slice of the outputs. While the model runs,
new requests queue up, so under load batches fill without waiting. If a batch fails, each of its requests is
run again alone, so one bad request gets the 500 and the others their answers; an input refused once tokenized
is named by the pipeline, so its request alone gets the 422 and the others run again together. --no-batching
runs one request per model call through the same worker (the baseline of bench/serve_load.py).

Shutdown (SIGTERM or Ctrl-C): uvicorn stops accepting connections and waits for the requests in flight; the
worker keeps answering until they are done, then drains anything still queued and stops. The exit code is 0.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from litebert.errors import ConfigError, DataError, InputError
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.serving.backends import MissingOutput
from litebert.serving.metrics import CONTENT_TYPE, Metrics, Observed
from litebert.serving.openapi import docs_page, openapi
from litebert.serving.pipeline import pipeline
from litebert.serving.requests import ClientGone, RequestError, one_line, parse_inputs, parse_parameters, read_body
from litebert.serving.serve_config import ServeConfig

log = logging.getLogger("litebert.serve")


class Predictor(Protocol):
    """What the server needs of a model: a pipeline (litebert.serving.pipeline) or a fake in tests."""

    task: str  # a transformers task name, e.g. "text-classification"
    name: str  # what /health calls the model

    def __call__(self, inputs: list, batch_size: int, **options) -> list:
        """One JSON-serialisable output per input, in order; options: a request's parameters (a pipeline also
        has `outputs`, the same always as a list, which the server prefers, and `check_options`, which
        validates parameters: without it, a request with parameters is a 422)."""

    def validate(self, raw_input: Any) -> None:
        """Raise ConfigError (one line) if `raw_input` is not one input of this task."""


# -- batching ------------------------------------------------------------------------------------------------

class ModelError(Exception):
    """The model failed on a batch: the request gets a 500 with this one-line message."""


class ShuttingDown(Exception):
    pass


@dataclass
class _Job:
    inputs: list
    future: asyncio.Future
    params: dict = field(default_factory=dict)  # a batch holds requests of equal parameters only

    @property
    def key(self) -> str:
        return json.dumps(self.params, sort_keys=True, default=str)


_STOP = object()


def _sender(jobs: list[_Job], error: Exception) -> tuple[_Job, int] | None:
    """The request whose input an InputError names by its index in the call, and that input's index in it."""
    index = error.index if isinstance(error, InputError) else -1
    for job in jobs:
        if 0 <= index < len(job.inputs):
            return job, index
        index -= len(job.inputs)
    return None


class Batcher:
    """One queue, one worker, one model thread. `submit` from request handlers; `start`/`close` from the
    app's lifespan (in the event loop that serves the requests)."""

    def __init__(self, predictor: Predictor, max_batch_size: int, max_wait_ms: float, batching: bool = True,
                 metrics: Metrics | None = None):
        self.predictor = predictor
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000
        self.batching = batching
        # A batch waits for companions only until it holds as many requests as the largest of the last 8 batches
        # did (a full batch at the start): a crowd still fills its batches, and once the recent batches were
        # single requests, a lone client is no longer kept waiting max_wait_ms.
        self.recent = collections.deque([max_batch_size], maxlen=8)
        self.served = {"requests": 0, "inputs": 0, "model_calls": 0, "failed_requests": 0}
        self.closing = False  # set by close(): new requests get a 503

    async def start(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        # One thread: model calls never overlap (they would only fight over the same cores), and whatever a
        # backend keeps per thread stays in one place.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="litebert-model")
        self._worker = asyncio.create_task(self._work(), name="litebert-batcher")

    async def submit(self, inputs: list, params: dict | None = None) -> list:
        if self.closing:
            raise ShuttingDown()
        job = _Job(inputs, asyncio.get_running_loop().create_future(), params or {})
        self._queue.put_nowait(job)
        return await job.future

    def queued(self) -> int:
        """Requests waiting for the model (not those in the call running now)."""
        return self._queue.qsize()

    async def close(self) -> None:
        """Refuse new work, answer everything queued, stop the worker and the model thread."""
        if self.closing:
            return
        self.closing = True
        self._queue.put_nowait(_STOP)  # FIFO: behind every job already queued
        await self._worker
        self._executor.shutdown(wait=True)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        carry = None
        while True:
            if carry is None:
                job = await self._queue.get()
            else:
                job, carry = carry, None
            if job is _STOP:
                return
            jobs, n = [job], len(job.inputs)
            deadline = loop.time() + self.max_wait_s
            while self.batching and n < self.max_batch_size:
                try:
                    nxt = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0 or len(jobs) >= max(self.recent):
                        break
                    try:
                        nxt = await asyncio.wait_for(self._queue.get(), remaining)
                    except TimeoutError:
                        break
                if nxt is _STOP or n + len(nxt.inputs) > self.max_batch_size or nxt.key != job.key:
                    carry = nxt  # first in line for the next batch
                    break
                jobs.append(nxt)
                n += len(nxt.inputs)
            self.recent.append(len(jobs))
            try:
                await self._run(jobs)
            except Exception:  # never let the worker die: every later request would hang
                log.exception("batch worker")
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(ModelError("internal error in the batch worker"))

    async def _run(self, jobs: list[_Job]) -> None:
        jobs = [j for j in jobs if not j.future.done()]  # a request cancelled while it queued
        if not jobs:
            return
        inputs = [x for j in jobs for x in j.inputs]
        try:
            outputs = await asyncio.get_running_loop().run_in_executor(
                self._executor, functools.partial(self._predict, inputs, jobs[0].params))
        except Exception as e:
            await self._failed(jobs, e)
            return
        start = 0
        for j in jobs:
            part, start = outputs[start:start + len(j.inputs)], start + len(j.inputs)
            if not j.future.done():
                j.future.set_result(part)
        self.served["requests"] += len(jobs)
        self.served["inputs"] += len(inputs)

    async def _failed(self, jobs: list[_Job], error: Exception) -> None:
        """A failed model call. An input or option the model cannot take is its sender's fault, a 422 (an ONNX
        graph without the task's output is the server's); where an InputError names the input, the other
        requests run again together, else each runs alone, to find the one that broke the call."""
        found = _sender(jobs, error)
        if found is None and len(jobs) > 1:
            for j in jobs:
                await self._run([j])
            return
        culprit, index = found or (jobs[0], None)
        if isinstance(error, (ConfigError, DataError)) and not isinstance(error, MissingOutput):
            reason = error if index is None else f"inputs[{index}]: {error.reason}"
            failure: Exception = RequestError(422, one_line(reason))
        else:
            log.error("model failed on a request of %d input(s)", len(culprit.inputs), exc_info=error)
            self.served["failed_requests"] += 1
            failure = ModelError(f"model failed: {type(error).__name__}: {one_line(error)}")
        if not culprit.future.done():  # cancelled meanwhile (a shutdown): no answer, and its batch-mates still run
            culprit.future.set_exception(failure)
        if rest := [j for j in jobs if j is not culprit]:
            await self._run(rest)

    def _predict(self, inputs: list, params: dict) -> list:
        self.served["model_calls"] += 1
        if self.metrics is not None:
            self.metrics.batch(len(inputs))
        run = getattr(self.predictor, "outputs", self.predictor)  # a pipeline's: a list even for one input
        outputs = run(inputs, batch_size=self.max_batch_size, **params)
        if not isinstance(outputs, list) or len(outputs) != len(inputs):
            got = f"{len(outputs)} outputs" if isinstance(outputs, list) else type(outputs).__name__
            raise RuntimeError(f"the pipeline returned {got} for {len(inputs)} inputs")
        return outputs


# -- the application -----------------------------------------------------------------------------------------

def _error(status: int, message: str, headers: dict | None = None):
    from starlette.responses import JSONResponse
    return JSONResponse({"error": one_line(message)}, status, headers=headers)


async def _on_request_error(request, exc: RequestError):
    return _error(exc.status, str(exc))


async def _on_http_error(request, exc):  # starlette's HTTPException: no route (404), wrong method (405)
    message = {404: f"no route {request.url.path}; the routes are GET /health, POST /predict, GET /metrics, "
                    "GET /openapi.json and GET /docs",
               405: f"{request.method} not allowed on {request.url.path}"}.get(exc.status_code, exc.detail)
    return _error(exc.status_code, message, exc.headers)


async def _on_client_gone(request, exc: ClientGone):
    log.info("client disconnected before its %s %s body was read", request.method, request.url.path)
    return _error(499, "client closed the request")  # nginx's status for it: nobody reads this answer


async def _on_bug(request, exc: Exception):
    log.error("unhandled error", exc_info=exc)
    return _error(500, f"internal error: {type(exc).__name__}: {exc}")


def _name(value: Any, default: str) -> str:
    """A predictor's backend or precision as /health shows it: a string, or an object's .name."""
    value = value if isinstance(value, str) else getattr(value, "name", None)
    return value if isinstance(value, str) and value else default


def create_app(predictor: Predictor, cfg: ServeConfig):
    """The Starlette app. The batcher lives in its lifespan: started before the first request, drained at
    shutdown after the requests in flight (uvicorn waits for those first)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    cfg.check()
    metrics = Metrics()
    batcher = Batcher(predictor, cfg.max_batch_size, cfg.max_wait_ms, cfg.batching, metrics)
    info = {"model": getattr(predictor, "name", None) or cfg.model, "task": predictor.task,
            "backend": _name(getattr(predictor, "backend", None), cfg.backend),
            "precision": _name(getattr(predictor, "precision", None), cfg.precision)}

    async def health(request) -> JSONResponse:
        return JSONResponse({"status": "shutting down" if batcher.closing else "ok", **info,
                             "batching": cfg.batching, "max_batch_size": cfg.max_batch_size,
                             "max_wait_ms": cfg.max_wait_ms, "queued_requests": batcher.queued(),
                             "served": dict(batcher.served)})

    spec = openapi(info, getattr(predictor, "options", None) or {}, cfg.max_inputs, cfg.max_body_bytes)

    async def metrics_text(request) -> Response:
        return Response(metrics.render(batcher.queued()), media_type=CONTENT_TYPE)

    async def openapi_json(request) -> JSONResponse:
        return JSONResponse(spec)

    async def docs(request) -> HTMLResponse:
        return HTMLResponse(docs_page(spec))

    async def predict(request) -> Response:
        body = await read_body(request, cfg.max_body_bytes)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise RequestError(400, f"malformed JSON: {e}") from None
        inputs, single = parse_inputs(payload, predictor.validate, cfg.max_inputs, cfg.max_text_chars)
        params = parse_parameters(payload, getattr(predictor, "check_options", None))
        try:
            outputs = await batcher.submit(inputs, params)
        except ShuttingDown:
            return _error(503, "the server is shutting down")
        except ModelError as e:
            return _error(500, str(e))
        try:
            content = json.dumps({"outputs": outputs[0] if single else outputs}, ensure_ascii=False,
                                 allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            log.error("outputs not serialisable as JSON", exc_info=e)
            return _error(500, f"model outputs are not JSON: {e}")
        return Response(content, media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await batcher.start()
        try:
            yield
        finally:
            await batcher.close()

    app = Starlette(routes=[Route("/health", health, methods=["GET"]), Route("/predict", predict, methods=["POST"]),
                            Route("/metrics", metrics_text, methods=["GET"]),
                            Route("/openapi.json", openapi_json, methods=["GET"]),
                            Route("/docs", docs, methods=["GET"])],
                    exception_handlers={RequestError: _on_request_error, HTTPException: _on_http_error,
                                        ClientGone: _on_client_gone, Exception: _on_bug},
                    lifespan=lifespan)
    app.state.batcher, app.state.info, app.state.metrics = batcher, info, metrics
    return Observed(app, metrics)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (IPv4 or IPv6 by the host's address), so port 0 can be resolved before serving."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def uvicorn_server(app, cfg: ServeConfig, log_level: str = "info"):
    import uvicorn
    return uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=cfg.access_log, lifespan="on",
                                         timeout_graceful_shutdown=cfg.shutdown_timeout_s))


def serve(predictor: Predictor, cfg: ServeConfig) -> dict:
    """Serve until SIGTERM or Ctrl-C; return what was served. Prints the address (port 0 resolved) first."""
    app = create_app(predictor, cfg)
    sock = bind(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    info = app.state.info
    print(f"litebert serve: {info['model']} ({info['task']}, {info['backend']} {info['precision']}) on {url} "
          f"(POST /predict, GET /health, /metrics, /docs)", flush=True)
    server = uvicorn_server(app, cfg)
    # uvicorn re-raises the signal it caught once it has shut down gracefully; with SIGTERM's default action
    # that kills the process. A no-op handler while it serves makes a graceful stop an ordinary exit.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: None) if main else None
    started = time.monotonic()
    try:
        server.run(sockets=[sock])
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        sock.close()
    served = dict(app.state.batcher.served, seconds=round(time.monotonic() - started, 1))
    print(f"litebert serve: stopped after {served['requests']} requests ({served['inputs']} inputs in "
          f"{served['model_calls']} model calls)", flush=True)
    return served


def cli(argv: list[str]) -> int:
    parser = verb_parser("serve", __doc__, {"server": ServeConfig}, epilog=(
        "example:\n  litebert serve --model out/novel_authorship/best --port 8000\n"
        "  curl -s localhost:8000/predict -d '{\"inputs\": [\"a first text\", \"a second\"]}'\n"
        "  curl -s localhost:8000/predict -d '{\"inputs\": \"a text\", \"parameters\": {\"top_k\": 2}}'\n"
        "  litebert serve --model out/novel_authorship/best --parameters '{\"top_k\": null}'  # every label"))
    args = parser.parse_args(argv)
    (cfg,) = parse_verb(parser, args)
    refuse_flags_of_other_modes(args, "--batching" if cfg.batching else "--no-batching",
                                {"max_wait_ms": ("--batching",)}, "serve")  # the wait for more requests to gather
    cfg.check()  # before the model is loaded

    pipe = pipeline(task=cfg.task, model=cfg.model, backend=cfg.backend, precision=cfg.precision, device=cfg.device,
                    min_agreement=cfg.min_agreement)
    if defaults := cfg.default_parameters():  # call options, refused in one line as a request's would be
        pipe.set_defaults(defaults)
    serve(pipe, cfg)
    return 0


__all__ = ["Predictor", "ServeConfig", "Batcher", "RequestError", "parse_inputs", "parse_parameters", "create_app",
           "serve", "cli"]
