"""`litebert serve`'s OpenAPI description (GET /openapi.json) and a page that shows it (GET /docs), written
from the served task and limits; the page is self-contained (no script from elsewhere)."""

from __future__ import annotations

import html
import json
from typing import Any

ERROR = {"description": "a one-line error", "content": {"application/json": {"schema": {
    "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}


def openapi(info: dict, options: dict, max_inputs: int, max_body_bytes: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the server for a model (`info`: model, task, ...) whose task takes `options`
    (their defaults) as parameters."""
    plain = (str, int, float, bool, list, dict, type(None))
    params = {name: {"description": "default: " + (json.dumps(v) if isinstance(v, plain) else "not given")}
              for name, v in options.items()}
    example = {name: v for name, v in options.items() if isinstance(v, plain) and v is not None}
    predict = {
        "summary": f"{info['task']} on {info['model']}",
        "description": "One input in the pipeline's shape, or a JSON array of inputs (a list answers with a list). "
                       f"At most {max_inputs} inputs and {max_body_bytes} bytes. `parameters` are the task's "
                       "call options, as HF inference servers take them.",
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["inputs"], "properties": {
                "inputs": {"description": "one input or a list of them"},
                "parameters": {"type": "object", "properties": params, "additionalProperties": False}}},
            "example": {"inputs": "a text", "parameters": dict(list(example.items())[:1])}}}},
        "responses": {"200": {"description": "the outputs, in transformers' pipeline shapes",
                              "content": {"application/json": {"schema": {
                                  "type": "object", "properties": {"outputs": {}}}}}},
                      **{str(s): {**ERROR, "description": d} for s, d in (
                          (400, "malformed JSON"), (413, "body over the limit"),
                          (422, "an input or parameter the model cannot take"), (500, "the model failed"),
                          (503, "the server is shutting down"))}},
    }
    text = {"content": {"text/plain": {"schema": {"type": "string"}}}}
    return {"openapi": "3.1.0",
            "info": {"title": f"litebert serve: {info['model']}", "version": "1",
                     "description": f"{info['task']} ({info.get('backend')}, {info.get('precision')})"},
            "paths": {"/predict": {"post": predict},
                      "/health": {"get": {"summary": "status, model, batching settings and what was served",
                                          "responses": {"200": {"description": "JSON status"}}}},
                      "/metrics": {"get": {"summary": "Prometheus metrics: requests, errors, latency, batch sizes",
                                           "responses": {"200": {"description": "Prometheus text", **text}}}},
                      "/openapi.json": {"get": {"summary": "this document",
                                                "responses": {"200": {"description": "OpenAPI JSON"}}}},
                      "/docs": {"get": {"summary": "this document as a page",
                                        "responses": {"200": {"description": "HTML"}}}}}}


def docs_page(spec: dict) -> str:
    rows = "".join(f"<tr><td><code>{m.upper()} {html.escape(p)}</code></td><td>{html.escape(op['summary'])}</td></tr>"
                   for p, ops in spec["paths"].items() for m, op in ops.items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(spec['info']['title'])}</title>"
            "</head><body style='font-family:sans-serif;max-width:60em;margin:auto'>"
            f"<h1>{html.escape(spec['info']['title'])}</h1><p>{html.escape(spec['info']['description'])}</p>"
            f"<table>{rows}</table><h2>POST /predict</h2>"
            f"<p>{html.escape(spec['paths']['/predict']['post']['description'])}</p>"
            f"<p>The full description: <a href='openapi.json'>/openapi.json</a> (OpenAPI 3.1).</p>"
            f"<pre>{html.escape(json.dumps(spec['paths']['/predict'], indent=2))}</pre></body></html>")
