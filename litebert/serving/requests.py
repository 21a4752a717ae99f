"""What `litebert serve` reads from a request: its body (413 past the limit, without resetting the
connection), its inputs (the pipeline's shapes, with limits) and its parameters (the task's call options), each
refused with an HTTP status and a one-line message."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("litebert.serve")

class RequestError(Exception):
    """A request the server refuses: an HTTP status and a one-line message for {"error": ...}."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def one_line(text: object, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _text_chars(value: Any) -> int:
    """Characters of text in one input: its strings, however nested (dict keys are field names, not text).
    A loop, not recursion: JSON nested nearly as deep as the parser allows must not overflow here."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return total


def _check_input(value: Any, validate: Callable[[Any], None], max_text_chars: int, where: str) -> Any:
    chars = _text_chars(value)  # before validate: no tokenizing of a megabyte to refuse it
    if chars > max_text_chars:
        raise RequestError(422, f"{where} has {chars} characters of text; the limit is {max_text_chars}")
    if isinstance(value, str) and not value.strip():
        raise RequestError(422, f"{where} is empty")
    try:
        validate(value)
    except (ValueError, TypeError) as e:  # ConfigError is a ValueError
        raise RequestError(422, f"{where}: {one_line(e)}") from None
    return value


def parse_inputs(payload: Any, validate: Callable[[Any], None], max_inputs: int,
                 max_text_chars: int) -> tuple[list, bool]:
    """The body's inputs as a list, and whether the request sent one input (answered with one output). An
    array is a list of inputs; one that is not may be a single input shaped as a list ([question, choices]),
    but never an array of strings: ["a", ""] is two texts, the second empty, and a pair is [["a", ""]]."""
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise RequestError(422, 'the body must be a JSON object {"inputs": ...}')
    unknown = sorted(set(payload) - {"inputs", "parameters"})
    if unknown:
        raise RequestError(422, f"unknown field(s) {', '.join(map(repr, unknown))}; the body is "
                                f"{{\"inputs\": ..., \"parameters\": {{...}}}}")
    raw = payload["inputs"]
    if not isinstance(raw, list):
        return [_check_input(raw, validate, max_text_chars, "inputs")], True
    if not raw:
        raise RequestError(422, "'inputs' is an empty list")
    try:
        if len(raw) > max_inputs:
            raise RequestError(422, f"{len(raw)} inputs in one request; the limit is {max_inputs}")
        return [_check_input(x, validate, max_text_chars, f"inputs[{i}]") for i, x in enumerate(raw)], False
    except RequestError as as_list:
        if all(isinstance(x, str) for x in raw):  # texts, each an input: ["a", ""] is two, not a (text, pair)
            raise
        try:  # not a list of inputs, but maybe one input whose own shape is a list (e.g. [question, choices])
            return [_check_input(raw, validate, max_text_chars, "inputs")], True
        except RequestError:
            raise as_list from None


def parse_parameters(payload: Any, check: Callable[[dict], Any] | None) -> dict:
    """The body's "parameters" (the task's call options, as HF inference servers take them: {"top_k": 2}),
    checked by the predictor's `check` (ConfigError -> 422); {} when there are none."""
    params = payload.get("parameters") if isinstance(payload, dict) else None
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RequestError(422, f"'parameters' must be a JSON object of the task's options, got "
                                f"{type(params).__name__}")
    if params and check is None:
        raise RequestError(422, "this model takes no parameters")
    if params.get("return_tensors"):  # a tensor is no JSON: the answer is the nested lists already
        raise RequestError(422, "parameters: return_tensors is for Python callers; the server answers JSON lists")
    if params:
        try:
            check(params)
        except (ValueError, TypeError) as e:  # ConfigError is a ValueError
            raise RequestError(422, f"parameters: {one_line(e)}") from None
    return params


class ClientGone(Exception):
    """The client disconnected before its request was read: nobody to answer, logged as such."""


DRAIN_FACTOR = 16  # a body over the limit is read (and dropped) up to this many limits, so the client hears 413


async def read_body(request, limit: int) -> bytes:
    """The request body, refused with 413 once it is known to exceed `limit` (declared or streamed). The rest
    of an oversized body is read and dropped (up to DRAIN_FACTOR limits) before the 413 goes out: a client
    still sending would otherwise see its connection reset instead of the answer."""
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise RequestError(400, f"bad Content-Length {declared!r}")
    too_big = None if declared is None or int(declared) <= limit else \
        RequestError(413, f"body of {declared} bytes; the limit is {limit}")
    if too_big is not None and int(declared) > DRAIN_FACTOR * limit:
        raise too_big
    body, seen = bytearray(), 0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if too_big is None and seen > limit:
                too_big = RequestError(413, f"body over {limit} bytes")
            if too_big is not None:
                if seen > DRAIN_FACTOR * limit:
                    break
                continue
            body += chunk
    except ClientDisconnect:
        raise ClientGone() from None
    if too_big is not None:
        raise too_big
    return bytes(body)


