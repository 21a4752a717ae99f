"""`litebert serve`'s options: what the verb reads from its flags and --config's [serve] table, and what code
that builds a server itself (tests, bench/serve_load.py) passes to `create_app` and `serve`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from litebert.errors import ConfigError
from litebert.runconfig import check_declared


@dataclass
class ServeConfig:
    model: str = field(default="", metadata={"help": "model directory (its config.json names the task)",
                                             "required": True, "metavar": "DIR"})
    task: str | None = field(default=None, metadata={
        "help": "pipeline task, e.g. text-classification (default: the checkpoint's)"})
    backend: str = field(default="torch", metadata={"help": "pipeline backend"})
    precision: str = field(default="fp32", metadata={
        "help": "torch: fp32, bf16, int8 or auto (bf16 where measured faster here); onnxruntime: fp32 or int8"})
    device: str = field(default="cpu", metadata={
        "help": "cpu, cuda, cuda:N or auto (a GPU when there is one); the torch backend"})
    min_agreement: float | None = field(default=None, metadata={"range": "[0, 1]", "help": "int8 made at start: "
        "the share of fp32's predictions it must keep on 256 random inputs (default 0.95; 0: unchecked)"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on (0.0.0.0: every interface)"})
    port: int = field(default=8000, metadata={"range": "[0, 65535]",
        "help": "port to listen on (0: any free port, printed at start)"})
    max_batch_size: int = field(default=32, metadata={"range": "[1, inf)", "help": "most inputs in one model call"})
    max_wait_ms: float = field(default=5.0, metadata={"range": "[0, inf)",
        "help": "longest a request waits for others to share its model call (only while the last 8 batches "
                "say more are coming: after 8 lone requests, a lone client is answered at once)"})
    batching: bool = field(default=True, metadata={
        "help": "gather concurrent requests into one model call (--no-batching: one request per call)"})
    max_body_bytes: int = field(default=1 << 20, metadata={"range": "[1, inf)",
        "help": "largest request body (413 beyond)"})
    max_inputs: int = field(default=256, metadata={"range": "[1, inf)", "help": "most inputs in one request"})
    max_text_chars: int = field(default=20_000, metadata={"range": "[1, inf)",
        "help": "most characters of text in one input (all its strings together)"})
    shutdown_timeout_s: float = field(default=30.0, metadata={"range": "[0, inf)",
        "help": "on SIGTERM, how long requests in flight may take before they are cancelled"})
    access_log: bool = field(default=False, metadata={"help": "log every request"})
    parameters: str = field(default="", metadata={
        "metavar": "JSON", "help": "default call options of the task, a JSON object, e.g. '{\"top_k\": 2}' "
                                   "(a request's own \"parameters\" override them)"})

    def default_parameters(self) -> dict:
        if not self.parameters.strip():
            return {}
        try:
            value = json.loads(self.parameters)
        except ValueError as e:
            raise ConfigError(f"--parameters is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"--parameters must be a JSON object, e.g. '{{\"top_k\": 2}}', got {self.parameters}")
        return value

    def check(self) -> ServeConfig:
        """The declared ranges again, for a ServeConfig built in code (the CLI's are checked when parsed)."""
        check_declared(self)
        self.default_parameters()
        return self
