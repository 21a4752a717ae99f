"""`litebert <verb>`: one entry point, each verb implemented beside the code it drives.

Verbs are looked up lazily (module:function), so `litebert params` does not pay for importing the data
pipeline and `--help` is instant. Each verb's function takes argv and returns an exit code; errors that a
user can fix (bad path, bad config, corrupt file) are printed as one line, without a traceback
(LITEBERT_DEBUG=1 shows it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from litebert import __version__
from litebert.errors import LitebertError
from litebert.runconfig import ParserBuilt, stop_at_parser
from litebert.runtime import allocator

VERBS: dict[str, tuple[str, str]] = {
    # verb: (module:function, one-line help)
    "demo": ("litebert.demo:main", "the whole life cycle on the bundled corpus, with a readable summary"),
    "tokenizer": ("litebert.corpus.tokenizer_training:cli", "train a SentencePiece tokenizer with ALBERT's conventions"),
    "prepare": ("litebert.corpus.shards:cli", "turn raw documents into sharded sentence-order pretraining pairs"),
    "pretrain": ("litebert.pretrain:cli", "pretrain AlbertForPreTraining with MLM + SOP (or NSP) and LAMB"),
    "finetune": ("litebert.finetune:cli", "fine-tune on a classification, QA, multiple-choice or tagging task; "
                 "--seeds/swept flags: a grid"),
    "evaluate": ("litebert.evaluate:cli_evaluate", "score a fine-tuned checkpoint on a task's dev/test file"),
    "predict": ("litebert.evaluate:cli_predict", "write predictions of a fine-tuned checkpoint"),
    "ensemble": ("litebert.ensemble:cli", "average fine-tuned models' scores, members chosen greedily on dev"),
    "embed": ("litebert.embed:cli", "sentence embeddings for a file of sentences; S-ALBERT training"),
    "convert": ("litebert.interop.convert:cli", "convert HF or original TF ALBERT checkpoints to a litebert/HF directory"),
    "export": ("litebert.interop.export:cli", "export a checkpoint for inference (TorchScript / ONNX)"),
    "serve": ("litebert.serving.server:cli", "an HTTP JSON server for a model, with dynamic batching"),
    "params": ("litebert.paper.params:cli", "parameter counts of every preset beside the paper's Tables 1 and 4"),
    "analyze": ("litebert.paper.analysis:cli", "layer-to-layer L2 / cosine transitions (paper Figure 1)"),
    "reproduce": ("litebert.paper.reproduce:cli", "the paper's experiments (Tables 3-8, 11-12, Figures 1-2) as "
                  "resumable grids of runs, with a report beside the paper's numbers"),
    "extend-vocab": ("litebert.vocab:cli", "add pieces to a tokenizer and resize a model's embeddings to match"),
}


def _usage() -> str:
    width = max(map(len, VERBS))
    lines = ["usage: litebert <verb> [options]   (litebert <verb> --help for details; litebert --version)", "",
             "verbs:"]
    lines += [f"  {verb:<{width}}  {help_}" for verb, (_, help_) in VERBS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    allocator.retain_freed_memory()  # training steps reuse their buffers instead of page-faulting them in again
    try:
        code = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # so a reader that went away is noticed here, not as noise at interpreter exit
        return code
    except BrokenPipeError:
        # `litebert params | head -1`: the reader stopped listening, which is no error of ours. Point stdout at
        # devnull so the final flush at exit stays quiet, and exit 1 (Python docs, "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"litebert {__version__}")
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"litebert: unknown verb {verb!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        return int(_verb_function(verb)(rest) or 0)
    except BrokenPipeError:
        raise  # an OSError, but not the user's: main() ends quietly
    except (LitebertError, OSError) as e:
        # What a user can fix (a bad flag, file or model; a missing file, a full disk, a permission): one line,
        # no traceback. Anything else is a bug and keeps its traceback.
        if os.environ.get("LITEBERT_DEBUG"):
            raise
        print(f"litebert {verb}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"litebert {verb}: interrupted", file=sys.stderr)
        return 130


def _verb_function(verb: str) -> Callable[[list[str]], int | None]:
    module_name, func_name = VERBS[verb][0].split(":")
    return getattr(importlib.import_module(module_name), func_name)


def verb_parser_of(verb: str) -> argparse.ArgumentParser:
    """The argparse parser `litebert VERB` parses its command line with, built by the verb's own code and not
    run: tests/test_documented_commands.py parses every documented command with it. The verb is called with
    --help, so a verb that ever built its parser some other way would print its help rather than run."""
    try:
        with stop_at_parser():
            _verb_function(verb)(["--help"])
    except ParserBuilt as built:
        return built.parser
    raise RuntimeError(f"litebert {verb} built no parser with runconfig.verb_parser")


def _one_line(error: Exception) -> str:
    """The message of a LitebertError; for an OSError, the file it names and the system's words ("out/tok:
    No space left on device") rather than "[Errno 28] ..."."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        where = f"{error.filename} -> {error.filename2}" if error.filename2 is not None else f"{error.filename}"
        return f"{where}: {error.strerror}"
    return " ".join(str(error).split()) if "\n" in str(error) else str(error)


if __name__ == "__main__":
    sys.exit(main())
