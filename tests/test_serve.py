"""`litebert serve`: answers, every kind of bad request refused with a one-line 4xx while the server keeps serving,
a model failure confined to its own request, concurrent requests really sharing model calls, and a SIGTERM that
lets the requests in flight (and those queued behind them) finish. A fake predictor stands in for the model, so
these run in seconds; one test at the end serves a tiny real model through litebert's pipeline."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from litebert.errors import ConfigError  # noqa: E402
from litebert.serving.server import RequestError, ServeConfig, bind, create_app, parse_inputs, uvicorn_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class FakePredictor:
    """Takes a string, or a multiple-choice-like [question, [choices]] (an input that is itself a list). Echoes
    each input with its length, records the size of every model call, and fails on the text "boom"."""

    task, name, backend, precision = "text-classification", "fake-model", "torch", "fp32"

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.batches: list[int] = []

    def validate(self, x) -> None:
        if isinstance(x, str):
            return
        if (isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], list)
                and all(isinstance(c, str) for c in x[1])):
            return
        raise ConfigError(f"an input is a string or [question, [choices]], got {json.dumps(x)[:40]}")

    def __call__(self, inputs: list, batch_size: int) -> list:
        self.batches.append(len(inputs))
        time.sleep(self.delay)
        if "boom" in inputs:
            raise RuntimeError("exploded\non two lines")
        return [{"echo": x, "chars": len(json.dumps(x))} for x in inputs]


@contextlib.contextmanager
def running(predictor, **options):
    """The app under uvicorn in a thread of this process, on a free loopback port."""
    cfg = ServeConfig(model="fake-dir", port=0, **options)
    app = create_app(predictor, cfg)
    sock = bind("127.0.0.1", 0)
    server = uvicorn_server(app, cfg, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()
        assert not thread.is_alive()


def assert_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    message = response.json()["error"]
    assert "\n" not in message and words in message, message


def assert_serving(client: httpx.Client) -> None:
    assert client.get("/health").json()["status"] == "ok"
    assert client.post("/predict", json={"inputs": "still here"}).json() == {"outputs": {"echo": "still here", "chars": 12}}


# -- answers -------------------------------------------------------------------------------------------------

def test_health_and_predict_answer_in_the_pipeline_shapes():
    fake = FakePredictor()
    with running(fake) as client:
        health = client.get("/health").json()
        assert {k: health[k] for k in ("status", "model", "task", "backend", "precision", "batching")} == {
            "status": "ok", "model": "fake-model", "task": "text-classification", "backend": "torch",
            "precision": "fp32", "batching": True}
        one = client.post("/predict", json={"inputs": "héllo"})
        assert one.status_code == 200 and one.json() == {"outputs": {"echo": "héllo", "chars": 12}}
        many = client.post("/predict", json={"inputs": ["a", "bb", ["q", ["x", "y"]]]}).json()["outputs"]
        assert [o["echo"] for o in many] == ["a", "bb", ["q", ["x", "y"]]]
        # an input whose own shape is a list, sent alone, is one input and gets one output
        alone = client.post("/predict", json={"inputs": ["q", ["x", "y"]]}).json()["outputs"]
        assert alone["echo"] == ["q", ["x", "y"]]
        assert client.get("/health").json()["served"] == {"requests": 3, "inputs": 5, "model_calls": 3,
                                                          "failed_requests": 0}


def test_parse_inputs_rules():
    v = FakePredictor().validate
    assert parse_inputs({"inputs": "a"}, v, 4, 10) == (["a"], True)
    assert parse_inputs({"inputs": ["a", "b"]}, v, 4, 10) == (["a", "b"], False)
    assert parse_inputs({"inputs": [["q", ["a"]]]}, v, 4, 10) == ([["q", ["a"]]], False)
    assert parse_inputs({"inputs": ["q", ["a"]]}, v, 4, 10) == ([["q", ["a"]]], True)
    for payload, words in [({"inputs": ["a", 3]}, "inputs[1]: an input is a string"),  # not one input either
                           ({"inputs": ["a", "b"] * 3}, "6 inputs in one request; the limit is 4"),
                           ({"inputs": ["q", ["a" * 11]]}, "inputs[1] has 11 characters"),
                           ({"inputs": ["a", " "]}, "inputs[1] is empty")]:
        with pytest.raises(RequestError, match=re.escape(words)):
            parse_inputs(payload, v, 4, 10)


def test_an_array_of_strings_is_a_list_of_texts_never_one_pair():
    """["good film", ""] is two texts, the second empty (a 422 naming it), not re-read as the pair ("good film",
    ""): a pair in an array is [[text, pair]], or {"text", "text_pair"} alone. An input shaped as a list that is
    not all strings ([question, [choices]]) is still one input."""
    from litebert.tasks.records import text_example

    def pairs(x):  # text-classification's inputs: a text, a (text, pair), or {"text", "text_pair"}
        text_example(x, 0)

    for blank in ("", "   "):
        with pytest.raises(RequestError, match=re.escape("inputs[1] is empty")) as e:
            parse_inputs({"inputs": ["good film", blank]}, pairs, 4, 100)
        assert e.value.status == 422
    assert parse_inputs({"inputs": ["good film", "bad"]}, pairs, 4, 100) == (["good film", "bad"], False)
    assert parse_inputs({"inputs": [["good film", ""]]}, pairs, 4, 100) == ([["good film", ""]], False)
    pair = {"text": "good film", "text_pair": ""}
    assert parse_inputs({"inputs": pair}, pairs, 4, 100) == ([pair], True)
    assert parse_inputs({"inputs": ["q", ["a"]]}, FakePredictor().validate, 4, 10) == ([["q", ["a"]]], True)


# -- bad requests --------------------------------------------------------------------------------------------

BAD_REQUESTS = [  # (method, path, body bytes or JSON-able, status, words in the message)
    ("POST", "/predict", b'{"inputs": "a"', 400, "malformed JSON"),
    ("POST", "/predict", b"\xff\xfe\xfa", 400, "malformed JSON"),
    ("POST", "/predict", b"", 400, "malformed JSON"),
    ("POST", "/predict", b"[" * 1500, 400, "malformed JSON"),  # deeper than the JSON parser recurses
    ("POST", "/predict", [], 422, "JSON object"),
    ("POST", "/predict", {"input": "a"}, 422, "JSON object"),
    ("POST", "/predict", {"inputs": "a", "options": {}}, 422, "unknown field(s) 'options'"),
    ("POST", "/predict", {"inputs": "a", "parameters": {"top_k": 2}}, 422, "this model takes no parameters"),
    ("POST", "/predict", {"inputs": "a", "parameters": [2]}, 422, "'parameters' must be a JSON object"),
    ("POST", "/predict", {"inputs": 7}, 422, "an input is a string"),
    ("POST", "/predict", {"inputs": None}, 422, "an input is a string"),
    ("POST", "/predict", {"inputs": {"text": "a"}}, 422, "an input is a string"),
    ("POST", "/predict", {"inputs": []}, 422, "empty list"),
    ("POST", "/predict", b'{"inputs": ' + b"[" * 900 + b"]" * 900 + b"}", 422, "an input is a string"),
    ("POST", "/predict", {"inputs": ""}, 422, "inputs is empty"),
    ("POST", "/predict", {"inputs": ["ok", "   "]}, 422, "inputs[1] is empty"),
    ("POST", "/predict", {"inputs": "x" * 101}, 422, "101 characters of text; the limit is 100"),
    ("POST", "/predict", {"inputs": ["x"] * 9}, 422, "9 inputs in one request; the limit is 8"),
    ("POST", "/predict", {"inputs": "x" * 5000}, 413, "the limit is 2000"),
    ("GET", "/nowhere", None, 404, "no route /nowhere"),
    ("GET", "/predict", None, 405, "GET not allowed on /predict"),
    ("PUT", "/predict", {"inputs": "a"}, 405, "PUT not allowed"),
    ("POST", "/health", None, 405, "POST not allowed on /health"),
]


def test_each_bad_request_gets_a_one_line_4xx_and_the_server_keeps_serving():
    fake = FakePredictor()
    with running(fake, max_body_bytes=2000, max_inputs=8, max_text_chars=100) as client:
        for method, path, body, status, words in BAD_REQUESTS:
            content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            response = client.request(method, path, content=content)
            assert_error(response, status, words)
            assert_serving(client)
        # a body sent in chunks, without a Content-Length, is cut off at the limit too
        chunks = (b'{"inputs": "' + b"x" * 500 for _ in range(10))
        assert_error(client.post("/predict", content=chunks), 413, "body over 2000 bytes")
        assert_serving(client)
        assert client.get("/health").json()["served"]["failed_requests"] == 0
    assert all(n == 1 for n in fake.batches)  # nothing malformed reached the model


def test_a_model_failure_is_a_500_for_its_request_only():
    fake = FakePredictor(delay=0.05)
    with running(fake, max_wait_ms=300) as client:
        texts = ["fine", "boom", "also fine"]
        with ThreadPoolExecutor(3) as pool:  # together, so they share a model call that fails
            responses = list(pool.map(lambda t: client.post("/predict", json={"inputs": [t]}), texts))
        assert_error(responses[1], 500, "model failed: RuntimeError: exploded on two lines")
        assert [r.json()["outputs"][0]["echo"] for r in (responses[0], responses[2])] == ["fine", "also fine"]
        assert_serving(client)
        assert client.get("/health").json()["served"]["failed_requests"] == 1
    assert fake.batches[0] == 3, fake.batches  # the shared call, then each request alone
    assert sorted(fake.batches[1:4]) == [1, 1, 1]


def test_an_input_the_model_refuses_is_a_422_for_its_request_and_the_others_share_a_call_again():
    """An input refused once featurized (fill-mask's [MASK] cut off) is the sender's fault: a 422 for its
    request, which the pipeline's InputError names by index, while the other requests of the call run again
    together, not one by one; a ConfigError of no input (targets no token is) is a lone request's 422."""
    from litebert.errors import InputError

    class Picky(FakePredictor):
        def __call__(self, inputs, batch_size):
            self.batches.append(len(inputs))
            time.sleep(self.delay)
            if "cut" in inputs:
                raise InputError(inputs.index("cut"), "1 of its 1 [MASK] tokens are cut off by max_length 8")
            if "odd" in inputs:
                raise ConfigError("none of the targets ['zz'] is a token of this model's vocabulary")
            return [{"echo": x} for x in inputs]

    fake = Picky(delay=0.05)
    with running(fake, max_wait_ms=300) as client:
        bodies = [{"inputs": ["fine"]}, {"inputs": ["x", "cut"]}, {"inputs": ["also fine"]}]
        with ThreadPoolExecutor(3) as pool:  # together, so they share a model call that fails
            responses = list(pool.map(lambda b: client.post("/predict", json=b), bodies))
        assert_error(responses[1], 422, "inputs[1]: 1 of its 1 [MASK] tokens are cut off by max_length 8")
        assert [r.json()["outputs"][0]["echo"] for r in (responses[0], responses[2])] == ["fine", "also fine"]
        assert_error(client.post("/predict", json={"inputs": "odd"}), 422, "none of the targets ['zz'] is a token")
        assert client.get("/health").json()["served"]["failed_requests"] == 0
    assert fake.batches[:2] == [4, 2], fake.batches  # the shared call, then the two others again in one


def test_outputs_that_are_not_json_are_a_500():
    class Bad(FakePredictor):
        def __call__(self, inputs, batch_size):
            return [float("nan")] * len(inputs) if inputs[0] == "nan" else [object()] * (len(inputs) + 1)

    with running(Bad()) as client:
        assert_error(client.post("/predict", json={"inputs": "nan"}), 500, "not JSON")
        assert_error(client.post("/predict", json={"inputs": "x"}), 500, "returned 2 outputs for 1 inputs")
        assert client.get("/health").status_code == 200


# -- batching ------------------------------------------------------------------------------------------------

def fire(client: httpx.Client, sizes: list[int]) -> list[dict]:
    """Concurrent requests, request i holding `sizes[i]` inputs of its own; each must get its own outputs back."""
    def one(i: int) -> list:
        texts = [f"r{i}-{j}" for j in range(sizes[i])]
        response = client.post("/predict", json={"inputs": texts})
        assert response.status_code == 200, response.text
        assert [o["echo"] for o in response.json()["outputs"]] == texts
        return texts

    with ThreadPoolExecutor(len(sizes)) as pool:
        return list(pool.map(one, range(len(sizes))))


def test_concurrent_requests_share_model_calls_up_to_the_batch_size():
    fake = FakePredictor(delay=0.05)
    sizes = [1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 3, 1, 1, 2, 1, 1]  # 23 inputs in 16 requests
    with running(fake, max_batch_size=8, max_wait_ms=200) as client:
        fire(client, sizes)
        served = client.get("/health").json()["served"]
    assert sum(fake.batches) == 23 and max(fake.batches) <= 8
    assert len(fake.batches) <= 8, fake.batches  # 16 requests alone would be 16 calls; full batches are 3
    assert served == {"requests": 16, "inputs": 23, "model_calls": len(fake.batches), "failed_requests": 0}


def test_a_request_larger_than_the_batch_size_is_one_call_and_others_wait_their_turn():
    fake = FakePredictor(delay=0.02)
    with running(fake, max_batch_size=4, max_wait_ms=100, max_inputs=16) as client:
        fire(client, [10, 1, 1])
    assert sum(fake.batches) == 12 and 10 in fake.batches  # the pipeline cuts it into batches itself


def test_a_lone_client_is_not_kept_waiting_for_companions():
    """The first batches wait for companions (max_wait_ms); once the recent batches (the last 8) held one
    request each, the next request runs at once instead of waiting for others that never come."""
    fake = FakePredictor()
    with running(fake, max_batch_size=2, max_wait_ms=500) as client:
        seconds = []
        for i in range(12):
            start = time.perf_counter()
            assert client.post("/predict", json={"inputs": f"r{i}"}).status_code == 200
            seconds.append(time.perf_counter() - start)
    assert min(seconds[:8]) >= 0.5 and max(seconds[8:]) < 0.5, seconds
    assert fake.batches == [1] * 12


def test_without_batching_each_request_is_its_own_model_call():
    fake = FakePredictor(delay=0.02)
    sizes = [1, 2, 1, 3, 1, 1, 2, 1]
    with running(fake, batching=False, max_wait_ms=200) as client:
        assert client.get("/health").json()["batching"] is False
        fire(client, sizes)
    assert sorted(fake.batches) == sorted(sizes)


# -- shutdown ------------------------------------------------------------------------------------------------

SERVER_SCRIPT = textwrap.dedent("""
    import sys, time
    from litebert.serving.server import ServeConfig, serve

    class Slow:
        task, name = "text-classification", "slow-fake"
        def validate(self, x):
            pass
        def __call__(self, inputs, batch_size):
            print("model call", inputs, flush=True)
            time.sleep(1.5)
            return [x.upper() for x in inputs]

    serve(Slow(), ServeConfig(model="slow", port=0, batching=False))
""")


def test_sigterm_finishes_the_request_in_flight_and_the_one_queued_then_exits_0():
    proc = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []

    def wait_for(pattern: str) -> re.Match:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
                continue
            if m := re.search(pattern, seen[-1]):
                return m
        raise AssertionError(f"no {pattern!r} in:\n{''.join(seen)}")

    try:
        port = int(wait_for(r"on http://127\.0\.0\.1:(\d+) ").group(1))
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/predict", json={"inputs": "first"})
            wait_for("model call")
            second = pool.submit(client.post, "/predict", json={"inputs": "second"})
            deadline = time.monotonic() + 20
            while client.get("/health").json()["queued_requests"] < 1:  # the second is waiting for the model
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert first.result().json() == {"outputs": "FIRST"}
            assert second.result().json() == {"outputs": "SECOND"}
        assert proc.wait(timeout=30) == 0
        wait_for("stopped after 2 requests")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the verb ------------------------------------------------------------------------------------------------

def test_the_verb_takes_flags_and_a_toml_and_refuses_bad_limits(tmp_path, monkeypatch, capsys):
    from litebert import cli
    from litebert.serving import server

    calls = {}
    monkeypatch.setattr(server, "pipeline", lambda **kw: calls.setdefault("pipeline", kw) and FakePredictor())
    monkeypatch.setattr(server, "serve", lambda predictor, cfg: calls.setdefault("cfg", cfg))
    toml = tmp_path / "serve.toml"
    toml.write_text('[serve]\nmodel = "m"\nmax_batch_size = 4\nmax_wait_ms = 2\n')

    assert cli.main(["serve", "--config", str(toml), "--port", "9", "--no-batching", "--task", "fill-mask",
                     "--device", "auto"]) == 0
    cfg = calls["cfg"]
    assert (cfg.model, cfg.port, cfg.max_batch_size, cfg.max_wait_ms, cfg.batching) == ("m", 9, 4, 2.0, False)
    assert calls["pipeline"] == {"task": "fill-mask", "model": "m", "backend": "torch", "precision": "fp32",
                                 "device": "auto", "min_agreement": None}

    assert cli.main(["serve", "--model", "m", "--max-batch-size", "0"]) == 2
    assert "litebert serve: error: --max-batch-size must be in [1, inf), got 0" in capsys.readouterr().err
    toml.write_text('[serve]\nmodel = "m"\nbatch = 4\n')
    assert cli.main(["serve", "--config", str(toml)]) == 2
    assert "unknown key 'batch'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve"])
    assert exit_.value.code == 2 and "--model" in capsys.readouterr().err


# -- with litebert's pipeline and a tiny real model ----------------------------------------------------------

def tiny_classifier(directory: Path) -> str:
    if importlib.util.find_spec("litebert.serving.pipeline") is None:
        pytest.skip("litebert.serving.pipeline is not there yet")
    sys.path.insert(0, str(ROOT / "bench"))
    from serve_load import random_classifier
    return random_classifier("tiny", str(directory))


def test_a_tiny_real_model_served_answers_what_its_pipeline_answers(tmp_path):
    model = tiny_classifier(tmp_path)
    from litebert.serving.pipeline import pipeline

    pipe = pipeline(task=None, model=model, backend="torch", precision="fp32")
    texts = ["Anne walked to the village.", "It rained.", "Sir Walter admired his own face in every mirror."]
    expected = pipe(texts, batch_size=1)
    with running(pipe, max_wait_ms=200, max_batch_size=8) as client:
        health = client.get("/health").json()
        assert (health["task"], health["backend"], health["precision"]) == ("text-classification", "torch", "fp32")
        single = client.post("/predict", json={"inputs": texts[0]}).json()["outputs"]
        with ThreadPoolExecutor(3) as pool:  # concurrent: one padded batch
            together = list(pool.map(lambda t: client.post("/predict", json={"inputs": [t]}).json()["outputs"][0],
                                     texts))
        assert_error(client.post("/predict", json={"inputs": 42}), 422, "inputs")
        assert client.post("/predict", json={"inputs": texts}).status_code == 200
    for got, want in zip([single, *together], [expected[0], *expected]):
        assert got["label"] == want["label"] and got["score"] == pytest.approx(want["score"], abs=1e-5)


@pytest.fixture(scope="module")
def tiny_heads(tmp_path_factory) -> dict[str, Path]:
    """Random tiny models (a classifier, a tagger, a masked LM) sharing a tokenizer trained in a blink."""
    import torch
    from fixtures.tokenizers import train_tiny_tokenizer

    from litebert.config import AlbertConfig
    from litebert.heads import AlbertForSequenceClassification, AlbertForTokenClassification
    from litebert.model import AlbertForMaskedLM

    root = tmp_path_factory.mktemp("heads")
    tok = train_tiny_tokenizer(root)
    torch.manual_seed(0)
    base = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    heads = {"classifier": (AlbertForSequenceClassification, {"id2label": {0: "negative", 1: "positive"}}),
             "tagger": (AlbertForTokenClassification, {"id2label": {0: "O", 1: "B-PER", 2: "I-PER"}}),
             "mlm": (AlbertForMaskedLM, {})}
    for name, (cls, overrides) in heads.items():
        cls(base.replace(**overrides)).save_pretrained(root / name)
        tok.save_pretrained(str(root / name))
    return {name: root / name for name in heads}


def test_a_real_pipelines_bad_options_and_refused_inputs_are_422s(tiny_heads):
    """Options are checked with the parameters (aggregation_strategy, ignore_labels, targets, truncation), not
    found once the model ran (a 500 "model failed"); an input the model refuses once tokenized is a 422."""
    from litebert.serving.pipeline import pipeline

    with running(pipeline(model=tiny_heads["tagger"])) as client:
        for params, words in [({"aggregation_strategy": "bogus"}, "aggregation_strategy must be one of none, "),
                              ({"ignore_labels": 5}, "ignore_labels must be a list of labels, got 5"),
                              ({"truncation": "only_first"}, "truncation='only_first': litebert cuts")]:
            response = client.post("/predict", json={"inputs": "Anne went", "parameters": params})
            assert_error(response, 422, f"parameters: {words}")
    with running(pipeline(model=tiny_heads["mlm"])) as client:
        response = client.post("/predict", json={"inputs": "a [MASK] b", "parameters": {"targets": 5}})
        assert_error(response, 422, "parameters: targets must be a string or a list of strings, got 5")
        cut = {"inputs": "the house " * 100 + "[MASK]."}
        assert_error(client.post("/predict", json=cut), 422,
                     "inputs[0]: 1 of its 1 [MASK] tokens are cut off by max_length 128")
        assert client.get("/health").json()["served"]["failed_requests"] == 0
    with running(pipeline(model=tiny_heads["classifier"])) as client:
        assert_error(client.post("/predict", json={"inputs": ["good film", ""]}), 422, "inputs[1] is empty")


def test_serve_parameters_are_call_options_checked_at_startup(tiny_heads, monkeypatch, capsys):
    """--parameters are the defaults of every request's call options, never pipeline() arguments: max_length
    (which a request's parameters may not set) or backend are refused in one line before serving."""
    from litebert import cli
    from litebert.serving import server

    served = {}
    monkeypatch.setattr(server, "serve", lambda predictor, cfg: served.setdefault("pipe", predictor))
    model = str(tiny_heads["classifier"])
    assert cli.main(["serve", "--model", model, "--parameters", '{"top_k": 2}']) == 0
    pipe = served["pipe"]
    assert pipe.options["top_k"] == 2 and pipe.settings.max_length == 128 and len(pipe("a text")) == 2
    for bad, words in [('{"max_length": 16}', "does not take max_length"), ('{"backend": "onnx"}',
                       "does not take backend"), ('{"top_k": 0}', "top_k must be a positive integer")]:
        assert cli.main(["serve", "--model", model, "--parameters", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


def test_serve_checks_the_int8_it_makes_and_min_agreement_sets_the_bar(tiny_heads, monkeypatch, capsys):
    """--precision int8 serves a model quantized at start, checked against fp32 as export checks its int8 (this
    random classifier changes a few near-ties); --min-agreement sets the bar (0: unchecked), and is refused
    where nothing is quantized."""
    from litebert import cli
    from litebert.serving import server

    model = str(tiny_heads["classifier"])
    assert cli.main(["serve", "--model", model, "--precision", "int8", "--min-agreement", "1"]) == 2
    err = capsys.readouterr().err
    assert "against fp32 on 256 random inputs of up to 128 tokens, below 1" in err and "--min-agreement 0" in err
    for bar in ("0.9", "0"):
        served = {}
        monkeypatch.setattr(server, "serve", lambda predictor, cfg: served.setdefault("pipe", predictor))
        assert cli.main(["serve", "--model", model, "--precision", "int8", "--min-agreement", bar]) == 0
        checked = served["pipe"].backend.agreement
        assert served["pipe"].precision == "int8" and (checked.fraction >= 0.9 if bar == "0.9" else checked is None)
    assert cli.main(["serve", "--model", model, "--min-agreement", "0.5"]) == 2
    assert "checks int8 against fp32; this runs in fp32" in capsys.readouterr().err


def test_a_load_levels_rate_is_its_requests_over_its_printed_seconds_even_for_a_short_run():
    """CI: 24 requests in 0.04145 s printed as 0.041 s beside 578.94 req/s (1% apart)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from serve_load import level_record
    record = level_record([0.001] * 24, 0, 0.04145, 24, 3)
    assert record["requests_per_s"] == pytest.approx(record["requests"] / record["seconds"], rel=1e-4)
    assert record["inputs_per_model_call"] == 8.0


@pytest.mark.slow
def test_the_load_test_runs_at_its_smoke_size_and_reports_consistent_figures():
    if importlib.util.find_spec("litebert.serving.pipeline") is None:
        pytest.skip("litebert.serving.pipeline is not there yet")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_load.py"), "--quick", "--concurrency", "1", "8"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert record["bench"] == "serve_load" and [lv["concurrency"] for lv in record["levels"]] == [1, 8]
    order = [line.split()[0] for line in done.stderr.splitlines() if "concurrency" in line]
    assert order == ["batching", "no_batching", "no_batching", "batching"]  # both servers up, modes interleaved
    for level in record["levels"]:
        for mode in ("batching", "no_batching"):
            side = level[mode]
            assert side["errors"] == 0 and 0 < side["requests"] <= 24 and side["p50_ms"] <= side["p99_ms"]
            assert side["requests_per_s"] == pytest.approx(side["requests"] / side["seconds"], rel=0.01)
        assert level["no_batching"]["inputs_per_model_call"] == 1.0
        assert level["speedup"] == pytest.approx(level["batching"]["requests_per_s"]
                                                 / level["no_batching"]["requests_per_s"], rel=0.01)


def test_a_request_cancelled_while_its_batch_failed_leaves_its_batch_mates_their_answers():
    """A failed model call answers the request that broke it; one cancelled meanwhile (a shutdown cancels the
    handlers) took set_exception's InvalidStateError, which the worker turned into "internal error" for the
    others. Now the cancelled one is skipped and the others still run."""
    import asyncio

    from litebert.errors import InputError
    from litebert.serving.server import Batcher, _Job

    async def scenario():
        loop = asyncio.get_running_loop()
        batcher = Batcher(lambda inputs, batch_size, **params: [f"ok {x}" for x in inputs], 4, max_wait_ms=0)
        batcher._executor = ThreadPoolExecutor(1)  # what start() makes
        cancelled, good = _Job(["bad"], loop.create_future()), _Job(["fine"], loop.create_future())
        cancelled.future.cancel()
        await batcher._failed([cancelled, good], InputError(0, "cannot take this input"))  # names the cancelled one
        return good.future.result()
    assert asyncio.run(scenario()) == ["ok fine"]
