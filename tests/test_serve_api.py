"""`litebert serve`'s API beyond answers: per-request parameters (HF inference servers' {"inputs", "parameters"})
and their defaults, /metrics, /openapi.json and /docs, a 413 the client hears while still sending, and a request
cancelled at shutdown answered 503 in JSON."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time

import pytest
from test_serve import FakePredictor, assert_error, running, tiny_classifier

from litebert.errors import ConfigError, NonFiniteError
from litebert.serving.server import ServeConfig, create_app

httpx = pytest.importorskip("httpx")


def test_parameters_reach_the_pipeline_and_bad_ones_are_one_line_422s(tmp_path):
    from litebert.serving.pipeline import pipeline

    model = tiny_classifier(tmp_path)
    pipe = pipeline(model=model)
    expected = pipe(["a text", "another"], top_k=2)
    with running(pipe) as client:
        got = client.post("/predict", json={"inputs": ["a text", "another"], "parameters": {"top_k": 2}}).json()
        assert [[d["label"] for d in row] for row in got["outputs"]] == [[d["label"] for d in row] for row in expected]
        plain = client.post("/predict", json={"inputs": "a text"}).json()["outputs"]
        assert isinstance(plain, dict)  # top label only, as before
        logits = client.post("/predict", json={"inputs": "a text", "parameters": {"function_to_apply": "none"}})
        assert logits.status_code == 200
        assert_error(client.post("/predict", json={"inputs": "a", "parameters": {"top_k": 0}}), 422,
                     "parameters: top_k must be a positive integer")
        assert_error(client.post("/predict", json={"inputs": "a", "parameters": {"temperature": 1}}), 422,
                     "does not take temperature")
        spec = client.get("/openapi.json").json()
        assert spec["openapi"].startswith("3.") and {"/predict", "/health", "/metrics"} <= set(spec["paths"])
        assert "top_k" in spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"][
            "schema"]["properties"]["parameters"]["properties"]
        page = client.get("/docs")
        assert page.status_code == 200 and "POST /predict" in page.text
    defaults = pipeline(model=model, **ServeConfig(model="x", parameters='{"top_k": null}').default_parameters())
    with running(defaults) as client:  # --parameters: every label by default
        outputs = client.post("/predict", json={"inputs": "a text"}).json()["outputs"]
        assert isinstance(outputs, list) and len(outputs) == len(pipe.labels) > 1
    for bad in ("[1]", "{not json"):
        with pytest.raises(ConfigError, match="--parameters"):
            ServeConfig(model="x", parameters=bad).check()


def test_requests_of_different_parameters_never_share_a_model_call():
    class Options(FakePredictor):
        def check_options(self, options):
            pass

        def __call__(self, inputs, batch_size, **options):
            self.batches.append((len(inputs), json.dumps(options)))
            time.sleep(0.2)
            return [{"x": x, **options} for x in inputs]

    fake = Options()
    with running(fake, max_wait_ms=300) as client:
        from concurrent.futures import ThreadPoolExecutor
        bodies = [{"inputs": "a"}, {"inputs": "b", "parameters": {"k": 1}}, {"inputs": "c"},
                  {"inputs": "d", "parameters": {"k": 1}}]
        with ThreadPoolExecutor(4) as pool:
            outs = list(pool.map(lambda b: client.post("/predict", json=b).json()["outputs"], bodies))
    assert [o.get("k") for o in outs] == [None, 1, None, 1]
    assert all(len({opts for _, opts in fake.batches[i:i + 1]}) == 1 for i in range(len(fake.batches)))
    assert sum(n for n, _ in fake.batches) == 4


def test_metrics_count_requests_errors_latency_and_batches():
    with running(FakePredictor()) as client:
        client.post("/predict", json={"inputs": ["a", "b"]})
        client.post("/predict", json={"inputs": 7})
        client.get("/nowhere")
        text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain")
    body = text.text
    assert 'litebert_requests_total{path="/predict",status="200"} 1' in body
    assert 'litebert_errors_total{status="422"} 1' in body and 'litebert_errors_total{status="404"} 1' in body
    assert "litebert_request_duration_seconds_count 2" in body
    assert 'litebert_batch_size_bucket{le="2"} 1' in body and "litebert_batch_size_sum 2" in body
    assert "# TYPE litebert_request_duration_seconds histogram" in body


def test_a_body_over_the_limit_is_a_413_the_client_hears():
    with running(FakePredictor(), max_body_bytes=2000) as client:
        port = int(str(client.base_url).rsplit(":", 1)[1].strip("/"))
        body = b'{"inputs": "' + b"x" * 30000 + b'"}'
        with socket.create_connection(("127.0.0.1", port)) as sock:  # sends it all, then reads
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            answer = b""
            while b'"}' not in answer:
                chunk = sock.recv(65536)
                assert chunk, answer  # not reset, not closed before the answer
                answer += chunk
            answer = answer.decode()
        assert answer.startswith("HTTP/1.1 413") and '"error"' in answer and "application/json" in answer


def test_a_request_cancelled_at_shutdown_is_a_503_in_json():
    """uvicorn cancels what runs past --shutdown-timeout-s: the app answers those requests 503 in JSON."""
    app = create_app(FakePredictor(delay=0.0), ServeConfig(model="fake"))
    sent = []

    async def scenario():
        async def receive():
            return {"type": "http.request", "body": json.dumps({"inputs": "slow"}).encode(), "more_body": False}

        async def send(message):
            sent.append(message)

        async def never(*_):
            await asyncio.sleep(3600)

        app.app.state.batcher.submit = never  # a model call that outlasts the shutdown timeout
        scope = {"type": "http", "method": "POST", "path": "/predict", "headers": [], "query_string": b"",
                 "http_version": "1.1", "scheme": "http", "server": ("x", 80), "client": ("y", 1), "root_path": "",
                 "raw_path": b"/predict"}
        task = asyncio.create_task(app(scope, receive, send))
        await asyncio.sleep(0.1)
        task.cancel()
        await task

    asyncio.run(scenario())
    assert sent[0]["status"] == 503 and (b"content-type", b"application/json") in sent[0]["headers"]
    assert "shut down" in json.loads(sent[1]["body"])["error"]


class NonFinitePredictor(FakePredictor):
    """A model whose outputs overflow on the text "overflow": the pipeline's NonFiniteError, as serve meets it."""

    def __call__(self, inputs: list, batch_size: int) -> list:
        if "overflow" in inputs:
            raise NonFiniteError("fake-model: outputs are NaN or infinite for 1 of 1 inputs")
        return super().__call__(inputs, batch_size)


def test_non_finite_outputs_are_a_json_500_for_that_request_only():
    with running(NonFinitePredictor()) as client:
        assert_error(client.post("/predict", json={"inputs": "overflow"}), 500, "NaN or infinite")
        assert client.post("/predict", json={"inputs": "fine"}).json()["outputs"]["echo"] == "fine"


def test_a_client_gone_before_its_body_is_read_is_logged_as_such(caplog):
    app = create_app(FakePredictor(), ServeConfig(model="fake"))
    sent = []

    async def scenario():
        async def receive():
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/predict", "headers": [], "query_string": b"",
                 "http_version": "1.1", "scheme": "http", "server": ("x", 80), "client": ("y", 1), "root_path": "",
                 "raw_path": b"/predict"}
        await app(scope, receive, send)

    with caplog.at_level("INFO", logger="litebert.serve"):
        asyncio.run(scenario())
    assert "client disconnected before its POST /predict body was read" in caplog.text
    assert "Traceback" not in caplog.text and "unhandled error" not in caplog.text
    assert sent[0]["status"] == 499 and (b"content-type", b"application/json") in sent[0]["headers"]


@pytest.mark.parametrize("option,value,words", [("max_inputs", 0, "--max-inputs must be in [1, inf), got 0"),
                                                ("port", 70000, "--port must be in [0, 65535], got 70000"),
                                                ("max_wait_ms", float("nan"), "--max-wait-ms must be in [0, inf)")])
def test_a_serve_config_built_in_code_is_held_to_the_declared_ranges(option, value, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        create_app(FakePredictor(), ServeConfig(model="fake", **{option: value}))
