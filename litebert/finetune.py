"""Fine-tuning, evaluation and prediction for every task family, through the one training loop.

A task (litebert.tasks.TASKS, or a custom table) decides four things, and this file maps each once:
the reader and featurizer (tasks.py / squad.py), the head class, and how logits become scores. Everything
else (optimizer, schedule, accumulation, checkpoints, resume, logging) is train.py's, shared with pretraining.

Defaults follow the ALBERT fine-tuning recipes (google-research/albert's README table: AdamW, per-task learning
rate, batch size, steps and warmup); every value can be overridden. The best dev checkpoint is kept in
`<out_dir>/best`, a complete model directory (transformers loads it), beside the last one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from litebert import tasks as T
from litebert.config import AlbertConfig
from litebert.tasks.features import collate, featurize_choices, featurize_classification, featurize_tags, word_predictions
from litebert.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                            AlbertForTokenClassification)
from litebert.runconfig import add_config_args, load_toml, resolve_config
from litebert.training.loop import TrainConfig, is_main_process, shuffled_batches, train, world_size

BEST_SCORE_NAME = "best_score.json"  # in best/, written with it: what it scored, so --resume keeps it unless beaten
HEAD_FOR_KIND = {"classification": AlbertForSequenceClassification, "regression": AlbertForSequenceClassification,
                 "multiple_choice": AlbertForMultipleChoice, "qa": AlbertForQuestionAnswering,
                 "tagging": AlbertForTokenClassification}

# (lr, batch size, train steps, warmup steps, max length) from the ALBERT README's fine-tuning table; the
# paper-scale recipes for the standard benchmarks. The bundled tasks get CPU-sized recipes for small models.
RECIPES: dict[str, tuple[float, int, int, int, int]] = {
    "CoLA": (1e-5, 16, 5336, 320, 512), "STS-B": (2e-5, 16, 3598, 214, 512), "SST-2": (1e-5, 32, 20935, 1256, 512),
    "MNLI-m": (3e-5, 128, 10000, 1000, 512), "MNLI-mm": (3e-5, 128, 10000, 1000, 512),
    "QNLI": (1e-5, 32, 33112, 1986, 512), "QQP": (5e-5, 128, 14000, 1000, 512), "RTE": (3e-5, 32, 800, 200, 512),
    "MRPC": (2e-5, 32, 800, 200, 512), "WNLI": (2e-5, 16, 2000, 250, 512),
    "squad-v1.1": (5e-5, 48, 3649, 365, 384), "squad-v2.0": (3e-5, 48, 8144, 814, 512),
    "race": (2e-5, 32, 12000, 1000, 512),
    "novel_authorship": (5e-4, 32, 600, 60, 128), "bible_paraphrase": (5e-4, 32, 600, 60, 128),
    "wordnet_qa": (5e-4, 32, 800, 80, 192), "wordnet_defmc": (5e-4, 32, 800, 80, 64),
}


@dataclass
class FinetuneConfig:
    """The task and the starting model. Training knobs are TrainConfig's (defaults from RECIPES)."""

    model: str = field(default="", metadata={"help": "pretrained model directory (litebert or HF), or a Hub id"})
    task: str = field(default="novel_authorship", metadata={
        "help": f"a registered task ({', '.join(T.TASKS)}) or 'table' (any CSV/TSV/JSONL, see --text-columns)"})
    data_dir: str = field(default="", metadata={"help": "the task's directory (train/dev/test files as distributed)"})
    tokenizer: str | None = field(default=None, metadata={"help": "tokenizer directory (default: --model's)"})
    max_length: int | None = field(default=None, metadata={"help": "max tokens per input (default: the recipe's)"})
    doc_stride: int = field(default=128, metadata={"help": "QA: tokens between the starts of context windows"})
    max_query_length: int = field(default=64, metadata={"help": "QA: question tokens kept"})
    max_answer_length: int | None = field(default=None, metadata={
        "help": "QA: longest answer span, in tokens (default: the task's; 30 as in SQuAD, 8 for wordnet_qa)"})
    text_columns: list[str] = field(default_factory=list, metadata={"help": "table task: one or two text columns"})
    label_column: str = field(default="label", metadata={"help": "table task: the label column"})
    regression: bool = field(default=False, metadata={"help": "table task: float labels (MSE), Pearson/Spearman"})
    train_file: str = field(default="train.jsonl", metadata={"help": "table task: training file in data_dir"})
    dev_file: str = field(default="dev.jsonl", metadata={"help": "table task: dev file in data_dir"})
    test_file: str = field(default="test.jsonl", metadata={
        "help": "table task: test file in data_dir, for evaluate/predict (may lack the label column)"})
    eval_split: str = field(default="dev", metadata={"help": "split scored during training and kept best on"})
    from_scratch: bool = field(default=False, metadata={
        "help": "random initialisation with --model's architecture: the baseline pretraining must beat"})
    max_train_examples: int | None = field(default=None, metadata={"help": "use only the first N training examples"})
    max_eval_examples: int | None = field(default=None, metadata={"help": "score only the first N eval examples"})
    eval_batch_size: int = field(default=64, metadata={"help": "examples per evaluation forward"})
    dropout: float | None = field(default=None, metadata={
        "help": "hidden and attention dropout while fine-tuning (default: the model's; ALBERT v2 pretrains "
                "without dropout, and a small model fine-tuned on a few thousand examples may want 0.1)"})

    def __post_init__(self) -> None:
        # Refused here, before training: otherwise the first evaluation fails with range()'s own message.
        if self.eval_batch_size < 1:
            raise ValueError(f"invalid FinetuneConfig: eval_batch_size must be >= 1, got {self.eval_batch_size}")


def resolve_task(cfg: FinetuneConfig) -> T.Task:
    if not cfg.model:
        raise ValueError("--model is required: the directory of a pretrained (or, to evaluate, fine-tuned) model")
    if not cfg.data_dir:
        raise ValueError("--data-dir is required: the task's directory with its train/dev/test files")
    if cfg.task in T.TASKS:
        return T.TASKS[cfg.task]
    if cfg.task != "table":
        raise ValueError(f"unknown task {cfg.task!r}; choose from {', '.join(T.TASKS)} or 'table'")
    if not 1 <= len(cfg.text_columns) <= 2:
        raise ValueError("a table task needs --text-columns with one or two column names")
    kind, metrics = ("regression", ("pearson", "spearman")) if cfg.regression else ("classification", ("accuracy",
                                                                                                     "macro_f1"))
    files = {"train": cfg.train_file, "dev": cfg.dev_file, "test": cfg.test_file}
    return T.Task("table", kind, "table", files, tuple(cfg.text_columns), cfg.label_column, None, metrics)


def task_labels(task: T.Task, train_examples: Sequence) -> list[str] | None:
    """Class names in id order: the task's own, else those seen in training (None for regression/QA/choice)."""
    if task.kind in ("regression", "qa", "multiple_choice"):
        return None
    if task.labels:
        return list(task.labels)
    if task.kind == "tagging":
        return sorted({tag for ex in train_examples for tag in (ex.tags or [])})
    return T.label_list(train_examples)


def featurize(task: T.Task, examples: Sequence, tok, labels: list[str] | None, cfg: FinetuneConfig,
              max_length: int) -> list:
    if task.kind in ("classification", "regression"):
        return featurize_classification(examples, tok, max_length, labels)
    if task.kind == "multiple_choice":
        return featurize_choices(examples, tok, max_length)
    if task.kind == "tagging":
        return featurize_tags(examples, tok, max_length, labels)
    from litebert.tasks.squad import featurize_squad
    return featurize_squad(examples, tok, max_length, cfg.doc_stride, cfg.max_query_length)


def read_split(task: T.Task, cfg: FinetuneConfig, split: str, labels: list[str] | None = None,
               limit: int | None = None) -> T.Examples:
    """A split's examples; with `labels` (the training split's), a label outside them is a counted skip."""
    examples = T.read_task(task, cfg.data_dir, split, errors="skip", labels=labels)
    return examples if limit is None else T.Examples(examples[:limit], examples.skipped)


@torch.no_grad()
def predict_outputs(model, features: Sequence, batch_size: int, pad_id: int) -> list[np.ndarray]:
    """Per-feature output arrays, in the features' order: logits (classification/choice/tagging, unpadded) or
    (start, end) stacked. Batches are cut from the features sorted by length, so each pads to near its own
    length rather than to the longest feature in a random handful."""
    model.eval()
    device = next(model.parameters()).device  # during fine-tuning: the training device
    outputs: list[np.ndarray | None] = [None] * len(features)
    order = sorted(range(len(features)), key=lambda i: _length(features[i].input_ids))
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        chunk = [features[i] for i in index]
        batch = collate(chunk, pad_id)
        batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        out = model(**batch)
        if isinstance(model, AlbertForQuestionAnswering):
            both = torch.stack([out.start_logits, out.end_logits], 1).float().cpu().numpy()  # (B, 2, T)
            rows = [both[j, :, :len(f.input_ids)] for j, f in enumerate(chunk)]
        elif isinstance(model, AlbertForTokenClassification):
            logits = out.logits.float().cpu().numpy()
            rows = [logits[j, :len(f.input_ids)] for j, f in enumerate(chunk)]
        else:
            rows = list(out.logits.float().cpu().numpy())
        for i, row in zip(index, rows):
            outputs[i] = row
    return outputs


def _length(input_ids: list) -> int:
    """Tokens of one feature: its length, or its longest option's for multiple choice (a list per option)."""
    return max(map(len, input_ids)) if input_ids and isinstance(input_ids[0], list) else len(input_ids)


def score(task: T.Task, examples: Sequence, features: Sequence, outputs: Sequence[np.ndarray],
          labels: list[str] | None, cfg: FinetuneConfig) -> tuple[dict[str, float], list]:
    """(metrics, one prediction per example): class names, floats, option indices, tag lists or answer texts."""
    if task.kind == "qa":
        from litebert.tasks.squad import apply_null_threshold, decode_squad, evaluate_squad
        decoded = decode_squad(examples, features, [o[0] for o in outputs], [o[1] for o in outputs],
                               max_answer_length=cfg.max_answer_length or task.max_answer_length)
        has_null = any(not ex.answers for ex in examples)  # SQuAD v2.0: tune the no-answer threshold on this set
        metrics = evaluate_squad(examples, decoded, None)
        threshold = metrics.get("best_f1_thresh") if has_null else None
        if has_null:
            metrics = evaluate_squad(examples, decoded, threshold)
        answers = apply_null_threshold(decoded, threshold)
        return metrics, [answers[ex.id] for ex in examples]
    if task.kind == "tagging":
        from litebert.tasks.metrics import entity_f1
        preds = [word_predictions(f.word_ids, o.argmax(-1), len(ex.words), labels)
                 for ex, f, o in zip(examples, features, outputs)]
        gold = [ex.tags for ex in examples]
        return (entity_f1(gold, preds) if all(g is not None for g in gold) else {}), preds
    from litebert.tasks.metrics import compute_metrics
    if task.kind == "regression":
        preds = [float(o[0]) for o in outputs]
        gold = [ex.label for ex in examples]
    elif task.kind == "multiple_choice":
        preds = [int(o.argmax()) for o in outputs]
        gold = [ex.label for ex in examples]
    else:
        preds = [int(o.argmax()) for o in outputs]
        gold = [labels.index(str(ex.label)) if ex.label is not None else None for ex in examples]
    metrics = compute_metrics(task.metrics, preds, gold) if all(g is not None for g in gold) else {}
    if task.kind == "classification":
        preds = [labels[p] for p in preds]
    return metrics, preds


_WORD = re.compile(r"\w+(?:[-'\u2019]\w+)*")


def rarest_word_answers(train_examples: Sequence, eval_examples: Sequence) -> dict[str, str]:
    """Span QA's "majority class": answer each question with the passage word that occurs in fewest training
    passages (an IDF pick; ties go to the first). It needs no model, and answers are often a passage's rarest word
    (on wordnet_qa it beats the random word by 4x), so a fine-tuned model must beat this, not chance."""
    passages: dict[str, int] = {}
    for context in {ex.context for ex in train_examples}:
        for word in {w.lower() for w in _WORD.findall(context)}:
            passages[word] = passages.get(word, 0) + 1
    return {ex.id: min(_WORD.findall(ex.context) or [""], key=lambda w: passages.get(w.lower(), 0))
            for ex in eval_examples}


def trivial_baseline(task: T.Task, train_examples: Sequence, eval_examples: Sequence) -> dict[str, float]:
    """What needs no model: the majority class (classification), chance (multiple choice), the rarest passage
    word (span QA)."""
    if task.kind == "classification":
        counts: dict[str, int] = {}
        for ex in train_examples:
            counts[str(ex.label)] = counts.get(str(ex.label), 0) + 1
        majority = max(counts, key=counts.get)
        return {"majority_class": majority,
                "accuracy": float(np.mean([str(ex.label) == majority for ex in eval_examples]))}
    if task.kind == "multiple_choice":
        return {"accuracy": float(np.mean([1 / len(ex.options) for ex in eval_examples]))}
    if task.kind == "qa":  # the rarest passage word, or, where questions may have none (v2.0), no answer at all
        from litebert.tasks.metrics import squad_scores
        gold = {ex.id: [a.text for a in ex.answers] for ex in eval_examples}
        rules = {"rarest passage word": rarest_word_answers(train_examples, eval_examples)}
        if any(not ex.answers for ex in eval_examples):
            rules["no answer"] = {ex.id: "" for ex in eval_examples}
        scores = {method: squad_scores(gold, answers) for method, answers in rules.items()}
        method = max(scores, key=lambda m: scores[m]["f1"])
        return {"method": method, "exact": scores[method]["exact"], "f1": scores[method]["f1"]}
    return {}


def apply_recipe(task_name: str, train_table: dict[str, Any], cli_args: argparse.Namespace | None) -> dict:
    """The task's recipe as TrainConfig values, under whatever the TOML or the command line set."""
    if task_name not in RECIPES:
        return dict(train_table)
    lr, batch, steps, warmup, _ = RECIPES[task_name]
    return {"optimizer": "adamw", "lr": lr, "batch_size": batch, "max_steps": steps, "warmup_steps": warmup,
            "weight_decay": 0.01, **train_table}


def load_model(cfg: FinetuneConfig, task: T.Task, labels: list[str] | None, model_dir: str):
    """The head for `task` on `model_dir` (cfg.model resolved to a local directory), or its random init."""
    head = HEAD_FOR_KIND[task.kind]
    overrides: dict[str, Any] = {}
    if task.kind in ("classification", "tagging"):
        overrides = {"num_labels": len(labels), "id2label": dict(enumerate(labels))}
    elif task.kind == "regression":
        overrides = {"num_labels": 1, "problem_type": "regression"}
    if cfg.dropout is not None:
        overrides.update(hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout)
    if cfg.from_scratch:
        return head(AlbertConfig.load(model_dir).replace(**overrides))
    return head.from_pretrained(model_dir, **overrides)


def checked_max_length(cfg: FinetuneConfig, task: T.Task) -> int:
    """--max-length, else the recipe's, capped by what the model's position embeddings can hold."""
    from litebert.weights import resolve_model_dir
    positions = AlbertConfig.load(resolve_model_dir(cfg.model)).max_position_embeddings
    if cfg.max_length is None:
        return min(RECIPES.get(task.name, (0, 0, 0, 0, 512))[4], positions)
    if cfg.max_length > positions:
        raise ValueError(f"max_length {cfg.max_length} exceeds the model's max_position_embeddings {positions}")
    return cfg.max_length


def load_tokenizer(cfg: FinetuneConfig, model_dir: str, config: AlbertConfig):
    """--tokenizer, else the model's own, refused if it has ids the model's embeddings lack: otherwise the
    first batch holding one dies with an IndexError deep inside the embedding lookup."""
    from litebert.tokenizer import Tokenizer
    tok = Tokenizer.from_pretrained(cfg.tokenizer or model_dir)
    if tok.vocab_size > config.vocab_size:
        raise ValueError(f"tokenizer {cfg.tokenizer or model_dir} has {tok.vocab_size} pieces but model "
                         f"{cfg.model} has vocab_size {config.vocab_size}: use the model's tokenizer, or extend "
                         "the model's vocabulary first (litebert extend-vocab)")
    return tok


def previous_best(best_dir: str, primary: str, resume: bool) -> dict[str, Any]:
    """The score of the best/ a resumed run inherits (from the file written with it), so that the first
    evaluation after --resume replaces it only with a better model. A fresh run starts from nothing."""
    path = os.path.join(best_dir, BEST_SCORE_NAME)
    if resume and os.path.isfile(path):
        with open(path) as f:
            saved = json.load(f)
        if saved.get("primary_metric") == primary:
            return {"metric": saved["metrics"][primary], "metrics": saved["metrics"]}
    return {"metric": -float("inf"), "metrics": {}}


def finetune(cfg: FinetuneConfig, train_cfg: TrainConfig) -> dict[str, Any]:
    """Fine-tune, keep the best dev checkpoint, and return (and write) a summary."""
    from litebert.training.checkpoint import write_dir_atomically
    from litebert.weights import resolve_model_dir
    task = resolve_task(cfg)
    model_dir = resolve_model_dir(cfg.model)  # a Hub id as its local download: checkpoints copy its tokenizer
    tok = load_tokenizer(cfg, model_dir, AlbertConfig.load(model_dir))
    max_length = checked_max_length(cfg, task)
    train_examples = read_split(task, cfg, "train", limit=cfg.max_train_examples)
    if not train_examples:
        raise ValueError(f"{cfg.data_dir}: no training examples for task {task.name}")
    labels = task_labels(task, train_examples)
    eval_examples = read_split(task, cfg, cfg.eval_split, labels, cfg.max_eval_examples)
    train_features = featurize(task, train_examples, tok, labels, cfg, max_length)
    eval_features = featurize(task, eval_examples, tok, labels, cfg, max_length)
    torch.manual_seed(train_cfg.seed)
    model = load_model(cfg, task, labels, model_dir)

    micro, _ = train_cfg.accumulation(world_size())
    batch_fn = shuffled_batches(len(train_features), train_cfg.batch_size, micro, train_cfg.seed,
                                lambda idx, _position: collate([train_features[i] for i in idx], tok.pad_id))
    primary = "f1" if task.kind in ("qa", "tagging") else task.metrics[0]
    best_dir = os.path.join(train_cfg.out_dir, "best")
    best = previous_best(best_dir, primary, train_cfg.resume)

    def write_best(m, metrics: dict[str, Any], directory: str) -> None:
        m.save_pretrained(directory)
        tok.save_pretrained(str(directory))
        with open(os.path.join(directory, BEST_SCORE_NAME), "w") as f:
            json.dump({"primary_metric": primary, "metrics": metrics}, f, default=float)

    def evaluate(m) -> dict[str, float]:
        metrics, _ = score(task, eval_examples, eval_features,
                           predict_outputs(m, eval_features, cfg.eval_batch_size, tok.pad_id), labels, cfg)
        value = metrics.get(primary, -float("inf"))
        if value > best["metric"]:  # replaced whole or not at all: a kill mid-write keeps the previous best
            write_dir_atomically(best_dir, lambda tmp: write_best(m, metrics, tmp))
            best.update(metric=value, metrics=metrics)
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}

    result = train(model, batch_fn, train_cfg, evaluate, tokenizer=cfg.tokenizer or model_dir,
                   configs={"finetune": dataclasses.asdict(cfg)})
    summary = {"task": task.name, "kind": task.kind, "from_scratch": cfg.from_scratch, "model": cfg.model,
               "examples": {"train": len(train_examples), cfg.eval_split: len(eval_examples),
                            "skipped_train": len(train_examples.skipped)},
               "primary_metric": primary, "final": dict(result.eval), "best": best["metrics"],
               "baseline": trivial_baseline(task, train_examples, eval_examples), "steps": result.step,
               "best_dir": best_dir, "out_dir": train_cfg.out_dir}
    if is_main_process():
        with open(os.path.join(train_cfg.out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return summary


def evaluate_checkpoint(model_dir: str, cfg: FinetuneConfig, split: str
                        ) -> tuple[dict[str, float], list, T.Task, T.Examples]:
    """Load a fine-tuned directory and score it (or just predict, for unlabelled splits)."""
    from litebert.weights import resolve_model_dir
    directory = resolve_model_dir(model_dir)
    config = AlbertConfig.load(directory)
    cfg = dataclasses.replace(cfg, model=directory)
    task = resolve_task(cfg)
    tok = load_tokenizer(cfg, directory, config)
    labels = [config.id2label[i] for i in range(config.num_labels)] if config.id2label else None
    if config.architectures and HEAD_FOR_KIND[task.kind].__name__ not in config.architectures:
        raise ValueError(f"{directory} is not fine-tuned for {task.name} ({task.kind}): its architectures are "
                         f"{config.architectures}; fine-tune it first (litebert finetune)")
    examples = read_split(task, cfg, split, labels, cfg.max_eval_examples)
    features = featurize(task, examples, tok, labels, cfg, checked_max_length(cfg, task))
    model = HEAD_FOR_KIND[task.kind].from_pretrained(directory)
    metrics, preds = score(task, examples, features, predict_outputs(model, features, cfg.eval_batch_size,
                                                                     tok.pad_id), labels, cfg)
    return metrics, preds, task, examples


def _parser(prog: str, description: str, train_args: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML recipe with [finetune] and [train] sections")
    add_config_args(parser, FinetuneConfig, "task and model")
    if train_args:
        add_config_args(parser, TrainConfig, "training (defaults: the task's ALBERT recipe)")
    return parser


def _finetune_config(args: argparse.Namespace, sections: tuple[str, ...]) -> tuple[FinetuneConfig, dict]:
    """The [finetune] table of --config under the command line's flags, and the whole TOML."""
    toml = load_toml(args.config, sections) if args.config else {}
    return resolve_config(FinetuneConfig, toml.get("finetune"), args, source=f"{args.config} [finetune]"), toml


def cli(argv: list[str]) -> int:
    parser = _parser("litebert finetune", __doc__, train_args=True)
    args = parser.parse_args(argv)
    cfg, toml = _finetune_config(args, ("finetune", "train"))
    train_table = apply_recipe(cfg.task, toml.get("train", {}), args)
    train_cfg = resolve_config(TrainConfig, train_table, args, source=f"{args.config} [train]")
    summary = finetune(cfg, train_cfg)
    print(json.dumps({"task": summary["task"], "best": summary["best"], "baseline": summary["baseline"],
                      "best_dir": summary["best_dir"]}, indent=1))
    return 0


def cli_evaluate(argv: list[str]) -> int:
    parser = _parser("litebert evaluate", "Score a fine-tuned checkpoint (--model) on a split of its task.", False)
    parser.add_argument("--split", default="dev", help="which of the task's files to score: dev, test, ...")
    parser.add_argument("--out", help="write metrics.json here")
    args = parser.parse_args(argv)
    cfg, _ = _finetune_config(args, ("finetune", "train"))
    metrics, _, task, _ = evaluate_checkpoint(cfg.model, cfg, args.split)
    if not metrics:  # a test file without its label column reads as unlabelled: nothing to score against
        raise ValueError(f"{cfg.data_dir}: the {args.split} split of {task.name} has no labels to score "
                         "(use litebert predict)")
    text = json.dumps(metrics, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


def cli_predict(argv: list[str]) -> int:
    parser = _parser("litebert predict", "Write predictions of a fine-tuned checkpoint (--model) for a split: "
                     "JSONL (id, prediction), or the GLUE submission format for GLUE tasks.", False)
    parser.add_argument("--split", default="test", help="which of the task's files to predict: test, dev, ...")
    parser.add_argument("--out", required=True, help="output file (a directory for GLUE submissions)")
    args = parser.parse_args(argv)
    cfg, _ = _finetune_config(args, ("finetune", "train"))
    _, preds, task, examples = evaluate_checkpoint(cfg.model, cfg, args.split)
    if task.submission:
        path = T.write_glue_predictions(args.out, task, examples, preds)
    else:
        path = args.out
        with open(path, "w", encoding="utf-8") as f:
            for ex, p in zip(examples, preds):
                f.write(json.dumps({"id": ex.id, "prediction": p}, ensure_ascii=False) + "\n")
    print(f"wrote {len(preds)} predictions to {path}")
    return 0
