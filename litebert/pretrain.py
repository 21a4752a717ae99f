"""Pretraining: AlbertForPreTraining on `litebert prepare` shards, through the one training loop.

What this file adds to the loop is ALBERT-specific: the model built from a preset (or continued from a
checkpoint), batches masked at batch time with a seed that depends only on the example position (so resume
and any world size see the same masks), a held-out evaluation (MLM accuracy/loss, SOP or NSP accuracy), and
the baselines a run must beat, computed from the run's own data: the most frequent masked token, the unigram
loss, and the majority sentence label.

The sentence objective follows the data: SOP pairs train SOP, NSP pairs NSP (the same binary head; the
paper's comparison), no pairs or `objective = "mlm"` trains MLM alone. MLM alone leaves the pooler and the
SOP head out of the loss: they are frozen (saved as initialised, so the checkpoint keeps HF's
AlbertForPreTraining layout), which is what an unwrapped run does to them anyway and what DistributedDataParallel
needs: every trainable parameter in the loss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from litebert.config import IGNORE_INDEX, PRESETS, AlbertConfig
from litebert.corpus.batches import make_batch
from litebert.corpus.dataset import PretrainDataset
from litebert.errors import CheckpointError, ConfigError, DataError
from litebert.files import write_json
from litebert.model import AlbertForPreTraining, packed_positions
from litebert.runconfig import parse_verb, refuse_flags_of_other_modes, verb_parser
from litebert.text.transformers_files import SPIECE_FILE
from litebert.tokenizer import Tokenizer
from litebert.training import prerelease, sweep
from litebert.training.data import ShuffledData
from litebert.training.distributed import is_main_process
from litebert.training.loop import train
from litebert.training.metrics_log import REFERENCES_NAME
from litebert.training.train_config import TrainConfig

# Independent masking streams (make_batch's `stream`): training, the held-out set (fixed for the whole run,
# so evaluations compare like with like) and the sample the baselines are estimated from.
TRAIN_STREAM, EVAL_STREAM, BASELINE_STREAM = 0, 1, 2
log = logging.getLogger("litebert")


@dataclass
class PretrainConfig:
    """What to pretrain on and what to pretrain. Architecture fields go in the TOML [model] section."""

    data: str = field(default="out/data", metadata={"help": "directory written by `litebert prepare`"})
    model: str = field(default="tiny", metadata={"help": f"a preset ({', '.join(PRESETS)}) or a config.json; "
                                                         "[model] TOML keys override its fields"})
    init_from: str | None = field(default=None, metadata={
        "help": "continue pretraining from this model directory (litebert or HF); its tokenizer must be the data's"})
    objective: str = field(default="auto", metadata={
        "help": "auto (from the data: sop, nsp or mlm alone) or mlm (ignore sentence labels)",
        "choices": ("auto", "mlm")})
    held_out: int = field(default=1000, metadata={"range": "[1, inf)",
        "help": "examples at the end of the data (its last documents) kept out of training for evaluation"})
    held_out_from: str | None = field(default=None, metadata={
        "help": "count --held-out in this other prepared directory (the same corpus at another sequence length, "
                "the data of the run --init-from continues) and hold out the same documents here"})
    eval_data: list[str] = field(default_factory=list, metadata={
        "help": "more prepared directories to evaluate on (e.g. NSP pairs of held-out text, for the SOP/NSP table)"})
    eval_batch_size: int = field(default=64, metadata={"range": "[1, inf)", "help": "examples per evaluation forward"})
    padding_free: bool = field(default=False, metadata={"help": (
        "run the encoder on each batch's real tokens alone, as fine-tuning does: pretraining data is padded "
        "3-10%% (short sequences, document ends), and a padded batch on CUDA also takes SDPA's masked kernel "
        "instead of flash attention. Variable-length flash attention on CUDA in bf16/fp16 without attention "
        "dropout; with --cuda-graphs each batch is padded to the data's length with its real tokens' places. Equal "
        "to the padded path (tests/test_padding_free.py); its speed not yet measured on a GPU (docs/gpu.md)")})

    def __post_init__(self) -> None:
        if self.held_out < 1:
            raise ConfigError(f"invalid PretrainConfig: held_out must be >= 1, got {self.held_out}")
        if self.eval_batch_size < 1:
            raise ConfigError(f"invalid PretrainConfig: eval_batch_size must be >= 1, got {self.eval_batch_size}")


def build_model(cfg: PretrainConfig, overrides: dict[str, Any], vocab_size: int, max_seq_length: int
                ) -> AlbertForPreTraining:
    if "vocab_size" in overrides:  # a recorded [model] (a run's train_config.toml) names the size it trained with
        if overrides["vocab_size"] != vocab_size:
            raise ConfigError(f"[model] vocab_size {overrides['vocab_size']} is not the data's tokenizer's "
                              f"{vocab_size}: the vocabulary comes from the data (--data)")
        overrides = {k: v for k, v in overrides.items() if k != "vocab_size"}
    if cfg.init_from:
        model = AlbertForPreTraining.from_pretrained(cfg.init_from, **overrides)
        if model.config.vocab_size != vocab_size:
            raise ConfigError(f"{cfg.init_from} has vocab_size {model.config.vocab_size}, the data's tokenizer "
                              f"{vocab_size}: extend the model's vocabulary first (litebert extend-vocab)")
        if model.config.max_position_embeddings < max_seq_length:
            raise ConfigError(f"the data has sequences of {max_seq_length} tokens but {cfg.init_from} has "
                              f"max_position_embeddings {model.config.max_position_embeddings}")
        return model
    if cfg.model in PRESETS:
        config = AlbertConfig.from_preset(cfg.model, vocab_size=vocab_size, **overrides)
    else:
        config = AlbertConfig.load(cfg.model).replace(vocab_size=vocab_size, **overrides)
    if config.max_position_embeddings < max_seq_length:
        raise ConfigError(f"the data has sequences of {max_seq_length} tokens but max_position_embeddings is "
                          f"{config.max_position_embeddings}")
    return AlbertForPreTraining(config)


def held_out_start(dataset: PretrainDataset, held_out: int) -> int:
    """Where the held-out examples begin: at least `held_out` examples from the end, moved back to a document
    boundary so that no document (nor another cut of it, with dupe_factor > 1) is both trained on and scored."""
    n = len(dataset)
    docs = dataset.document_ids()
    cut = int(np.searchsorted(docs, docs[n - held_out], side="left")) if held_out < n else 0
    if cut == 0:
        raise ConfigError(f"{dataset.data_dir} has {n} examples from {len(np.unique(docs))} documents: holding out "
                          f"{held_out} examples leaves no document to train on; prepare more text or lower held_out")
    return cut


def _sibling(directory: str, dataset: PretrainDataset) -> PretrainDataset:
    """Another prepared directory used beside `dataset` (evaluation, held-out documents): same tokenizer."""
    other = PretrainDataset(directory, tokenizer=None)
    if other.meta["tokenizer_sha256"] != dataset.meta["tokenizer_sha256"]:
        raise DataError(f"{directory} was made with another tokenizer than {dataset.data_dir}")
    return other


def held_out_cut(cfg: PretrainConfig, dataset: PretrainDataset) -> int:
    """Where `dataset`'s held-out examples begin. With `held_out_from`, at the first document that the other
    directory holds out: a run continued from a model trained on that directory is then scored only on
    documents neither run trained on."""
    if not cfg.held_out_from:
        return held_out_start(dataset, cfg.held_out)
    reference = _sibling(cfg.held_out_from, dataset)
    first_doc = reference.document_ids()[held_out_start(reference, cfg.held_out)]
    cut = int(np.searchsorted(dataset.document_ids(), first_doc, side="left"))
    if cut == len(dataset):
        raise DataError(f"{cfg.data} has no example from the documents {cfg.held_out_from} holds out: "
                        "were they prepared from the same corpus?")
    if cut == 0:
        raise DataError(f"{cfg.data}: holding out the documents {cfg.held_out_from} holds out leaves none to "
                        "train on")
    return cut


def sentence_task(dataset: PretrainDataset, objective: str) -> str | None:
    """'sop', 'nsp' or None (MLM alone)."""
    task = dataset.meta["args"]["pair_task"]
    return None if objective == "mlm" or task == "none" else task


def freeze_outside_loss(model: AlbertForPreTraining, task: str | None) -> None:
    """MLM alone: the pooler and the SOP head take no part in the loss; freeze them (module docstring)."""
    if task is None:
        model.albert.pooler.requires_grad_(False)
        model.sop_classifier.requires_grad_(False)


# How `litebert prepare` laid its examples out, not which examples: workers hand their chunks back in input order
# and shards are cut from one stream (litebert.corpus.shards), so a re-preparation with other values reads the same
# examples in the same order and a resume must not refuse it.
_LAYOUT_ARGS = ("num_workers", "shard_size")


def data_fingerprint(dataset: PretrainDataset, train_examples: int) -> dict[str, Any]:
    """What a resume must find unchanged: meta.json's content (counts, arguments, tokenizer hash; not its timing,
    absolute paths or the shard layout) and how many of its examples are trained on (--held-out)."""
    meta = {k: v for k, v in dataset.meta.items() if k not in ("seconds", "inputs", "tokenizer_dir", "shards")}
    meta["args"] = {k: v for k, v in meta["args"].items() if k not in _LAYOUT_ARGS}
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()
    return {"examples_sha256": digest, "train_examples": train_examples}


class Batches:
    """Masked batches of a prepared dataset: a pure function of (indices, position)."""

    def __init__(self, dataset: PretrainDataset, seed: int, task: str | None, packed: bool = False):
        self.dataset, self.seed, self.task, self.packed = dataset, seed, task, packed
        args = dataset.meta["args"]
        self.knobs = dict(vocab_size=dataset.meta["vocab_size"], mask_id=dataset.meta["special_ids"]["mask"],
                          max_seq_length=dataset.max_seq_length, masked_lm_prob=args["masked_lm_prob"],
                          max_predictions_per_seq=args["max_predictions_per_seq"], max_ngram=args["max_ngram"])

    def __call__(self, indices: list[int], position: int, stream: int = TRAIN_STREAM) -> dict[str, torch.Tensor]:
        packed = self.packed and stream == TRAIN_STREAM  # the padding-free encoder's shapes from a few, as a
        # CUDA graph needs (`--padding-free --cuda-graphs`): padded to the data's length, the real tokens listed
        batch = make_batch(self.dataset, indices, seed=self.seed, stream=stream, position=position,
                           pad_to_max_length=packed, **self.knobs)
        if packed:
            batch["packed_positions"] = packed_positions(batch["attention_mask"])
        if self.task is None:
            del batch["sentence_order_label"]
        return batch


@torch.no_grad()
def evaluate_pretraining(model, batches: Batches, indices: list[int], batch_size: int, prefix: str = ""
                         ) -> dict[str, float]:
    """Held-out MLM accuracy and loss, and sentence-pair accuracy (named by the data's pair task), on the
    model's device; the counts stay there until the end (no .item() per batch)."""
    device = next(model.parameters()).device
    sums = []  # per batch: MLM correct, MLM predictions, MLM loss sum, pairs correct, pairs
    for start in range(0, len(indices), batch_size):
        batch = {k: v.to(device, non_blocking=True)
                 for k, v in batches(indices[start:start + batch_size], start, EVAL_STREAM).items()}
        sentence_labels = batch.pop("sentence_order_label", None)
        out = model(**batch)
        labels = batch["labels"][batch["labels"] != IGNORE_INDEX]  # the order of out.prediction_logits' rows
        logits = out.prediction_logits.float()
        row = [(logits.argmax(-1) == labels).sum(), labels.new_tensor(labels.numel()),
               F.cross_entropy(logits, labels, reduction="sum")]
        if sentence_labels is None:
            row += [labels.new_tensor(0), labels.new_tensor(0)]
        else:
            row += [(out.sop_logits.argmax(-1) == sentence_labels).sum(), labels.new_tensor(sentence_labels.numel())]
        sums.append(torch.stack([x.double() for x in row]))
    correct, total, loss_sum, pair_correct, pair_total = torch.stack(sums).sum(0).tolist() if sums else [0.0] * 5
    metrics = {f"{prefix}mlm_acc": correct / max(total, 1), f"{prefix}mlm_loss": loss_sum / max(total, 1)}
    if pair_total:
        metrics[f"{prefix}{batches.dataset.meta['args']['pair_task']}_acc"] = pair_correct / pair_total
    return metrics


def baselines(batches: Batches, train_indices: list[int], eval_indices: list[int], sample: int = 2000
              ) -> dict[str, float]:
    """What a model that learned nothing about context scores on the held-out set: always predicting the most
    frequent masked token of the training data, the loss of its smoothed unigram distribution, and always
    predicting the majority sentence label."""
    vocab = batches.knobs["vocab_size"]
    rng = np.random.default_rng(0)
    sample_indices = rng.choice(train_indices, size=min(sample, len(train_indices)), replace=False).tolist()
    counts = np.ones(vocab)  # add-one smoothing
    for start in range(0, len(sample_indices), 256):
        labels = batches(sample_indices[start:start + 256], start, BASELINE_STREAM)["labels"]
        counts += np.bincount(labels[labels != IGNORE_INDEX].numpy(), minlength=vocab)
    probs = counts / counts.sum()
    held_labels, pair_labels = [], []
    for start in range(0, len(eval_indices), 256):
        batch = batches(eval_indices[start:start + 256], start, EVAL_STREAM)
        held_labels.append(batch["labels"][batch["labels"] != IGNORE_INDEX].numpy())
        if "sentence_order_label" in batch:
            pair_labels.append(batch["sentence_order_label"].numpy())
    held = np.concatenate(held_labels)
    out = {"majority_token_acc": float((held == counts.argmax()).mean()),
           "majority_token": int(counts.argmax()),
           "unigram_loss": float(-np.log(probs[held]).mean())}
    if pair_labels:
        pairs = np.concatenate(pair_labels)
        out["majority_pair_acc"] = float(max(pairs.mean(), 1 - pairs.mean()))
    return out


def pretrain(cfg: PretrainConfig, train_cfg: TrainConfig, model_overrides: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Run pretraining; returns the summary also written to `<out_dir>/summary.json`."""
    model_overrides = dict(model_overrides or {})
    sweep.refuse_changed_resume(cfg, train_cfg, "pretrain", model_overrides)  # before the data is read
    dataset = PretrainDataset(cfg.data)
    tokenizer_dir = dataset.meta["tokenizer_dir"]
    if cfg.init_from:  # further pretraining: the checkpoint's tokenizer must be the one the data was made with
        PretrainDataset(cfg.data, tokenizer=_tokenizer_of(cfg.init_from))
    cut = held_out_cut(cfg, dataset)
    train_indices, eval_indices = list(range(cut)), list(range(cut, len(dataset)))
    task = sentence_task(dataset, cfg.objective)
    padding_free = cfg.padding_free and not train_cfg.compile
    if cfg.padding_free and train_cfg.compile:  # a padding-free batch's token count changes every batch
        log.info("--compile: padded batches, so that the compiled transformer blocks keep their shapes")
    # a captured step keeps its shapes: padding-free batches then carry the count of real tokens, rounded (packed
    # positions alone turn the padding-free encoder on, so never with --compile)
    batches = Batches(dataset, train_cfg.seed, task, packed=padding_free and train_cfg.cuda_graphs)
    torch.manual_seed(train_cfg.seed)
    model = build_model(cfg, model_overrides, dataset.meta["vocab_size"], dataset.max_seq_length)
    model.albert.padding_free = padding_free
    freeze_outside_loss(model, task)
    train_data = ShuffledData(len(train_indices), _Subset(batches, train_indices))

    extra_eval = []
    for directory in cfg.eval_data:
        other = _sibling(directory, dataset)
        extra_eval.append((os.path.basename(os.path.normpath(directory)) + "/",
                           Batches(other, train_cfg.seed, sentence_task(other, "auto")), list(range(len(other)))))

    # litebert's masking labels at most max_predictions_per_seq tokens a row: a compiled or graphed step reads that
    # many positions a row (loss_positions), and any step refuses a row over it
    model.max_predictions_per_seq = max(b.knobs["max_predictions_per_seq"] for b in [batches] +
                                        [other_batches for _, other_batches, _ in extra_eval])

    def evaluate(m) -> dict[str, float]:
        metrics = evaluate_pretraining(m, batches, eval_indices, cfg.eval_batch_size)
        for prefix, other_batches, indices in extra_eval:
            metrics.update(evaluate_pretraining(m, other_batches, indices, cfg.eval_batch_size, prefix))
        return metrics

    base = baselines(batches, train_indices, eval_indices) if is_main_process() else {}
    if is_main_process():  # the baselines, drawn on the run's plot
        references = {"eval_mlm_acc": {"commonest token": base["majority_token_acc"]},
                      "eval_mlm_loss": {"unigram": base["unigram_loss"]}}
        if task:
            references[f"eval_{task}_acc"] = {"majority label": base["majority_pair_acc"]}
        write_json(os.path.join(train_cfg.out_dir, REFERENCES_NAME), references, indent=1)
    # The untrained (or --init-from) model is evaluated by the loop: on the training device, on rank 0, once
    # per run (a resume reads it from its checkpoint). A resume of a finished run returns its recorded final
    # evaluation.
    # checkpoints written before the fingerprint left the layout out recorded all of meta.json's hash: still checked
    data_identity = prerelease.Accepting(data_fingerprint(dataset, len(train_indices)),
                                         prerelease.meta_fingerprint(dataset.meta, len(train_indices)))
    result = train(model, train_data, train_cfg, evaluate, tokenizer=tokenizer_dir,
                   configs={"model": model.config.to_dict(), "pretrain": dataclasses.asdict(cfg)},
                   evaluate_start=True, identity={"data": data_identity})
    summary = {"objective": task or "mlm", "examples": {"train": len(train_indices), "held_out": len(eval_indices)},
               "parameters": model.num_parameters(), "baselines": base, "untrained": result.start_eval,
               "init_from": cfg.init_from,
               "final": dict(result.eval), "steps": result.step, "seq_length": dataset.max_seq_length,
               "tokens_seen": result.step * train_cfg.batch_size * dataset.max_seq_length,
               "checkpoint": str(result.checkpoint), "out_dir": train_cfg.out_dir}
    if is_main_process():
        write_json(os.path.join(train_cfg.out_dir, "summary.json"), summary)
    return summary


class _Subset:
    """Batches over a subset of the dataset's indices (the training part)."""

    def __init__(self, batches: Batches, indices: list[int]):
        self.batches, self.indices = batches, indices

    def __call__(self, positions: list[int], position: int) -> dict[str, torch.Tensor]:
        return self.batches([self.indices[i] for i in positions], position)


def _tokenizer_of(model_dir: str):
    if not os.path.isfile(os.path.join(model_dir, SPIECE_FILE)):
        raise CheckpointError(f"{model_dir} has no spiece.model: further pretraining uses the checkpoint's tokenizer")
    return Tokenizer.from_pretrained(model_dir)


def format_summary(s: dict[str, Any]) -> str:
    """The few lines a person reads after a run: learned vs chance vs untrained (or vs the starting checkpoint)."""
    b, f = s["baselines"], s["final"]
    u = prerelease.untrained_of(s)

    def at_start(key: str, spec: str) -> str:
        return "not recorded" if key not in u else format(u[key], spec)
    start = "at start" if s.get("init_from") else "untrained"
    verb = "continued" if s.get("init_from") else "pretrained"
    at_seq = f" at seq {s['seq_length']}" if "seq_length" in s else ""
    objective = "MLM" + (f" + {s['objective'].upper()}" if s["objective"] != "mlm" else "")
    lines = [f"{verb} {s['parameters'] / 1e6:.2f}M parameters for {s['steps']} steps{at_seq} "
             f"({s['tokens_seen'] / 1e6:.1f}M tokens), objective {objective}",
             f"  held-out MLM accuracy {f['mlm_acc']:.1%}   (most frequent token {b['majority_token_acc']:.1%}, "
             f"{start} {at_start('mlm_acc', '.1%')})",
             f"  held-out MLM loss     {f['mlm_loss']:.3f}   (unigram {b['unigram_loss']:.3f}, {start} "
             f"{at_start('mlm_loss', '.3f')})"]
    for key in ("sop_acc", "nsp_acc"):
        if key in f:
            lines.append(f"  held-out {key[:3].upper()} accuracy {f[key]:.1%}   (majority "
                         f"{b.get('majority_pair_acc', 0.5):.1%}, {start} {at_start(key, '.1%')})")
    for key in sorted(k for k in f if "/" in k):
        lines.append(f"  {key} {f[key]:.3f}")
    lines.append(f"  checkpoint {s['checkpoint']}")
    return "\n".join(lines)


def cli(argv: list[str]) -> int:
    parser = verb_parser("pretrain", __doc__, {"data and model": PretrainConfig, "training": TrainConfig},
                         other_tables=("model",), epilog=(
        "Bundled recipes (--config NAME): demo (2 CPU cores, ~10 minutes), cpu_long (2 CPU cores, 23 minutes at\n"
        "64 tokens, then a 9-minute phase at 128 whose flags its header gives), paper_base (the paper's albert-base\n"
        "run); their [model] table sets AlbertConfig fields. Scale out:\n"
        "  torchrun --nproc-per-node N -m litebert.cli pretrain --config paper_base --data DIR"))
    args = parser.parse_args(argv)
    cfg, train_cfg, overrides = parse_verb(parser, args)
    new = "a new model (no --init-from)"  # --init-from's checkpoint has its own architecture: --model is not read
    refuse_flags_of_other_modes(args, "--init-from" if cfg.init_from else new, {"model": (new,)}, "pretrain")
    overrides = AlbertConfig.without_derived(overrides)  # a run's own train_config.toml [model] comes back
    unknown = set(overrides) - {f.name for f in dataclasses.fields(AlbertConfig)}
    if unknown:
        raise ConfigError(f"[model]: unknown AlbertConfig fields {', '.join(sorted(unknown))}")
    summary = pretrain(cfg, train_cfg, overrides)
    if is_main_process():
        print(format_summary(summary))
    return 0


__all__ = ["PretrainConfig", "pretrain", "evaluate_pretraining", "baselines", "format_summary", "held_out_cut"]
