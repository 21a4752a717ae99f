"""`litebert evaluate` and `litebert predict`: a fine-tuned checkpoint scored on a split of its task, or run on
raw inputs through its pipeline. Both read the task the way fine-tuning did (litebert.tasks.loading) and apply
what fine-tuning calibrated on dev (thresholds), so a test split is never tuned on.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from litebert import tasks as T
from litebert.config import AlbertConfig
from litebert.errors import ConfigError, DataError
from litebert.files import atomic_open, check_replaceable, write_json
from litebert.progress import progress_bar
from litebert.runconfig import given_fields, parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.runtime.device import check_device
from litebert.runtime.precision import INFERENCE_PRECISIONS
from litebert.serving.inputs import OutputWriter, input_format, output_format, read_inputs, split_hint
from litebert.serving.pipeline import model_members, pipeline
from litebert.tasks.families import family_of
from litebert.tasks.fine_tuned import family_for_config
from litebert.tasks.loading import TaskConfig, check_task_given, evaluate_checkpoint, load_tokenizer
from litebert.tasks.records import open_text
from litebert.weights import resolve_model_dir

DEVICE_HELP = "auto (a GPU when there is one), cpu, cuda or cuda:N"


@dataclass
class EvaluateConfig:
    """What to score and where the metrics go."""

    split: str = field(default="dev", metadata={"help": "which of the task's files to score: dev, test, ..."})
    out: str | None = field(default=None, metadata={"help": "write the metrics (JSON) here too"})
    device: str = field(default="auto", metadata={"help": DEVICE_HELP})

    def __post_init__(self) -> None:
        check_device(self.device)


@dataclass
class PredictConfig:
    """What to predict (a split of a task with --data-dir, else raw inputs) and how."""

    split: str = field(default="test", metadata={"help": "with --data-dir: which of the task's files to predict"})
    out: str | None = field(default=None, metadata={
        "help": "output file (a directory for GLUE submissions); raw inputs default to standard output"})
    device: str = field(default="auto", metadata={
        "help": DEVICE_HELP + " (raw inputs on the onnxruntime backend: the CPU)"})
    text: list[str] = field(default_factory=list, metadata={
        "repeatable": True, "metavar": "TEXT",
        "help": "raw input (repeatable); a JSON object for pairs, question answering, ...: "
                '\'{"question": "...", "context": "..."}\''})
    input: str | None = field(default=None, metadata={
        "metavar": "FILE", "help": "raw inputs, one per line: text (or JSON objects), .jsonl or .csv/.tsv with a "
                                   "header (default: standard input, read as it comes)"})
    backend: str = field(default="torch", metadata={"choices": ("torch", "onnxruntime"),
                                                    "help": "what runs the model on raw inputs"})
    precision: str = field(default="fp32", metadata={
        "choices": INFERENCE_PRECISIONS,
        "help": "torch: fp32, bf16, int8 or auto (bf16 where measured faster here); onnxruntime: fp32 or int8"})
    min_agreement: float | None = field(default=None, metadata={"range": "[0, 1]", "help": "int8 made here: the "
        "share of fp32's predictions it must keep on 256 random inputs (default 0.95; 0: unchecked)"})
    top_k: int | None = field(default=None, metadata={"range": "[1, inf)",
        "help": "fill-mask, text-classification, multiple-choice: answers per input"})
    aggregation_strategy: str | None = field(default=None, metadata={
        "help": "token-classification: none, simple, first, average, max"})

    def __post_init__(self) -> None:
        check_device(self.device)


def cli_evaluate(argv: list[str]) -> int:
    parser = verb_parser("evaluate", "Score a fine-tuned checkpoint (--model) on a split of its task.",
                         {"task and model": TaskConfig, "evaluation": EvaluateConfig}, other_tables=("train",))
    args = parser.parse_args(argv)
    cfg, ev, _ = parse_verb(parser, args)
    check_task_given(cfg, given_fields(args))
    check_replaceable(ev.out, _is_metrics, "a metrics file of litebert evaluate", cfg.overwrite)
    scored, task, examples = evaluate_checkpoint(cfg.model, cfg, ev.split, ev.device)
    metrics = scored.metrics
    if not examples:
        why = f"{len(examples.skipped)} skipped; first: {examples.skipped[0]}" if examples.skipped else "none there"
        raise DataError(f"{cfg.data_dir}: no usable {ev.split} rows for task {task.name} ({why})")
    if not metrics:  # a test file without its label column reads as unlabelled: nothing to score against
        raise DataError(f"{cfg.data_dir}: the {ev.split} split of {task.name} has no labels to score "
                        "(use litebert predict)")
    if examples.skipped:  # a score over a subset says so beside it
        metrics = {**metrics, "scored_on": examples.scored_on(ev.split)}
    # a metric with no value (Pearson of constant predictions) is null: NaN is not JSON, and strict readers refuse it
    metrics = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.items()}
    if ev.out:
        write_json(ev.out, metrics, indent=1)
    print(f"litebert evaluate: {task.name}, {ev.split} split of {cfg.data_dir}: {len(examples)} examples scored",
          file=sys.stderr)  # what the JSON on stdout is a score of
    print(json.dumps(metrics, indent=1))
    return 0


PREDICT_HELP = ("Predict with a checkpoint (--model). Raw inputs (--text, --input FILE, or standard input, one per "
                "line) go through the pipeline of the checkpoint's task (or --task: fill-mask, text-classification, "
                "...) and come out as JSON Lines {input, output}. With --task and --data-dir, a split of a task is "
                "predicted instead: JSONL (id, prediction), or the GLUE submission format for GLUE tasks.")


RAW = "raw inputs (--text, --input, standard input)"
# What only one of predict's two modes reads: a split's task files, or the pipeline's options for raw inputs.
PREDICT_READERS = {**{name: ("--data-dir",) for name in ("text_columns", "label_column", "regression", "multi_label",
                                                         "train_file", "dev_file", "test_file", "max_eval_examples",
                                                         "split")},
                   **{name: (RAW,) for name in ("backend", "precision", "min_agreement", "top_k",
                                                "aggregation_strategy")}}


def cli_predict(argv: list[str]) -> int:
    parser = verb_parser("predict", PREDICT_HELP, {"task and model": TaskConfig, "prediction": PredictConfig},
                         other_tables=("train",))
    args = parser.parse_args(argv)
    cfg, pr, _ = parse_verb(parser, args)
    refuse_flags_of_other_modes(args, "--data-dir" if cfg.data_dir else RAW, PREDICT_READERS, "predict")
    check_replaceable(pr.out, _is_predictions, "a predictions file of litebert predict", cfg.overwrite)
    if not cfg.data_dir:
        return predict_inputs(cfg, pr, given_fields(args))
    check_task_given(cfg, given_fields(args))
    if pr.text or pr.input:
        raise ConfigError("--text/--input are raw inputs for the checkpoint's task; --data-dir predicts a split of "
                          "a task from its files: give one or the other")
    if not pr.out:
        raise ConfigError("--out is required to predict a split (--data-dir)")
    scored, task, examples = evaluate_checkpoint(cfg.model, cfg, pr.split, pr.device)
    preds = scored.predictions
    if task.submission:
        path = T.write_glue_predictions(pr.out, task, examples, preds)
    else:
        path = pr.out
        with atomic_open(path) as f:
            for ex, p in zip(examples, preds):
                f.write(json.dumps({"id": ex.id, "prediction": p}, ensure_ascii=False) + "\n")
    print(f"wrote {len(preds)} predictions to {path}")
    return 0


def _is_metrics(path) -> bool:
    """What `litebert evaluate --out` writes: one JSON object of scores, some per class or type (entity F1's
    per_type), and the subset it was scored on."""
    def scores(value) -> bool:
        return isinstance(value, (int, float)) or isinstance(value, dict) and all(map(scores, value.values()))
    metrics = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(metrics, dict) and all(scores(v) or k == "scored_on" for k, v in metrics.items())


def _is_predictions(path) -> bool:
    """What `litebert predict --out` writes: JSON Lines with a prediction or an output per input, or a GLUE
    submission (a header "index\tprediction")."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    if first.rstrip("\r\n") in ("index\tprediction", "id,input,output", "input,output", "id\tinput\toutput",
                                  "input\toutput"):  # a GLUE submission; predict's CSV/TSV
        return True
    record = json.loads(first)
    return isinstance(record, dict) and ("prediction" in record or {"input", "output"} <= set(record))


def _open_input(path: str):
    """An --input file as text lines; CSV/TSV keep their own line endings (a quoted cell may hold one)."""
    return open_text(Path(path), newline="" if input_format(path) in ("csv", "tsv") else "\n")


def _counted(records, bar):
    """The records, each counted on `bar` once it was taken (a bar on a terminal, a line now and then in a log)."""
    with bar:
        for record in records:
            yield record
            bar.update(1)


def predict_inputs(cfg: TaskConfig, pr: PredictConfig, given: set[str]) -> int:
    """`litebert predict` on raw inputs: each batch of inputs through the pipeline, written (and flushed) as one
    JSON line per input, {"id" (a JSONL/CSV row's), "input", "output"}, as soon as it is done. `given`: the
    TaskConfig fields set by a flag or --config (the others are the pipeline's defaults, not the task's)."""
    if not cfg.model:
        raise ConfigError("--model is required: a fine-tuned or pretrained model directory")
    task = cfg.task if "task" in given else None
    if task in T.TASKS or task == "table":  # a registered task names the checkpoint's own (pipeline) task
        family = family_for_config(AlbertConfig.load(resolve_model_dir(cfg.model)))
        if task != "table" and family_of(T.TASKS[task]) is not family:
            raise ConfigError(f"{cfg.model} is not fine-tuned for {task}")
        task = None
    total = None
    if pr.input:  # every line read once before the model loads: a blank or undecodable one is refused at once
        with _open_input(pr.input) as f:
            total = sum(1 for _ in read_inputs(f, pr.input, input_format(pr.input)))
    tokenizer = None
    if cfg.tokenizer:  # held to the model as evaluate holds it (a tokenizer of other ids scores without a word)
        directory = model_members(cfg.model)[0][0]
        tokenizer = load_tokenizer(cfg, directory, AlbertConfig.load(directory))
    options = {k: getattr(pr, k) for k in ("top_k", "aggregation_strategy") if getattr(pr, k) is not None}
    pipe = pipeline(task, cfg.model, tokenizer, backend=pr.backend, precision=pr.precision,
                    batch_size=cfg.eval_batch_size, max_length=cfg.max_length, max_query_length=cfg.max_query_length,
                    doc_stride=cfg.doc_stride if "doc_stride" in given else None,  # else the pipeline's
                    device=pr.device, min_agreement=pr.min_agreement, **options,
                    **({"max_answer_length": cfg.max_answer_length} if "max_answer_length" in given else {}))
    chunk, stream = cfg.eval_batch_size, None
    if pr.text:
        if not all(t.strip() for t in pr.text):
            raise ConfigError("--text is empty")
        records = read_inputs(pr.text, "--text")
    elif pr.input:
        stream = _open_input(pr.input)
        records = read_inputs(stream, pr.input, input_format(pr.input))
        records = _counted(records, progress_bar(total, "predict", unit=" inputs"))
    else:
        typed = sys.stdin.isatty()  # typed by hand: answer each line at once; a blank line aligns nothing
        chunk = 1 if typed else chunk
        records = read_inputs(sys.stdin, "stdin", skip_blank=typed)
    written = 0
    # --out is replaced when every input is done (atomic_open; a kill leaves the old file and .tmp-NAME)
    with stream or contextlib.nullcontext(), \
            atomic_open(pr.out, newline="" if output_format(pr.out) != "jsonl" else None) if pr.out \
            else contextlib.nullcontext(sys.stdout) as out:
        writer = OutputWriter(out, output_format(pr.out))
        while batch := list(itertools.islice(records, chunk)):
            for r in batch:
                try:
                    pipe.validate(r.input)
                except ConfigError as e:
                    raise ConfigError(f"{r.where}: {e}{split_hint(r.input)}") from None
            for r, output in zip(batch, pipe.outputs([r.input for r in batch])):
                writer.write(r, output)
            out.flush()
            written += len(batch)
    if pr.out:
        print(f"wrote {written} {pipe.task} outputs to {pr.out}")
    return 0
