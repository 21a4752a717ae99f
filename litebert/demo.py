"""`litebert demo`: the whole ALBERT life cycle on the bundled corpus, in under 20 minutes on 2 CPU cores.

  1. train a SentencePiece tokenizer on the bundled demo corpus (six Austen novels, three other Gutenberg
     novels and the Jargon File: 7 MB of public-domain text, documents in a fixed shuffled order);
  2. cut it into sentence-order pairs of 64 and of 128 tokens (the last documents are held out);
  3. pretrain a small ALBERT with MLM + SOP on the 64-token pairs, then continue briefly on the 128-token ones
     (BERT's two phases: short sequences are cheap and learn faster from scratch; the long phase trains every
     position, and SOP's evidence is the two segments' content), evaluating on the held-out pairs
     against the baselines the run computes itself (most frequent token, unigram loss, majority SOP label) and
     against the untrained model;
  4. fine-tune it on a real labelled task (novel_authorship: who wrote this passage?), and fine-tune the same
     architecture from random initialisation with the same budget, to show what pretraining bought: once with
     all 5,386 training passages and once with 54 of them (1%), the regime pretraining is for;
  5. use them on text they never saw, through the pipelines `litebert predict` and `litebert serve` run: the
     pretrained model fills masks in sentences written for the demo, the classifier reads the task's test split;
  6. print a summary a person can read, where the checkpoints and plots are, and the command that serves the
     classifier.

Each stage is the same Python API the CLI verbs use; the pretraining recipe is litebert/configs/demo.toml.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import dataclass, field

from litebert.config import AlbertConfig
from litebert.corpus.shards import prepare
from litebert.corpus.tokenizer_training import train_tokenizer
from litebert.errors import ConfigError
from litebert.files import write_json, write_text_atomically
from litebert.finetune import FinetuneConfig, finetune
from litebert.pretrain import PretrainConfig, format_summary, pretrain
from litebert.runconfig import BUNDLED_CONFIGS, load_toml, parse_verb, resolve_config, verb_parser
from litebert.serving.pipeline import pipeline
from litebert.serving.server import one_line
from litebert.tasks.readers import read_table
from litebert.training import prerelease
from litebert.training.train_config import TrainConfig

DATA = os.path.join(os.path.dirname(__file__), "data")
CORPUS = os.path.join(DATA, "demo_corpus.txt.gz")
TASK_DIR = os.path.join(DATA, "novel_authorship")  # the task readers take the bundled .jsonl.gz as they are
TASK_MAX_LENGTH = 64  # tokens per passage, in fine-tuning and in the classifier's use after it
# Written for the demo, so in no text the models saw; each hides a word the corpus's novels use often.
UNSEEN_SENTENCES = (("She could not help thinking of [MASK] all the evening.", "him"),
                    ("What do you [MASK] of him?", "think"),
                    ("She sat down at the [MASK] and began to write a letter.", "table"),
                    ("The captain gave the order, and the ship turned toward the [MASK].", "shore"))

RECIPE = load_toml(BUNDLED_CONFIGS / "demo.toml", ("model", "pretrain", "train"))
MODEL = RECIPE["model"]
FINETUNE = dict(optimizer="adamw", lr=3e-4, batch_size=32, max_steps=500, warmup_steps=50, weight_decay=0.01,
                eval_every=100, save_every=0, keep_last=1, log_every=25)
# The second pretraining phase, at sequence length 128 from the first phase's last checkpoint, so that all 128
# positions are trained: held-out SOP starts near 59% on the longer pairs and ends where the first phase ended
# or above (65.3% -> 65.2% and 64.6% -> 65.2% in two demo runs; +1.6 points in the longer cpu_long run; README,
# "Pretraining recipe: what we measured").
LONG_PHASE = dict(max_steps=600, warmup_steps=50, lr=5e-3, eval_every=200, save_every=600)
# The few-label point: the first 54 training passages (1%; the file is shuffled, so a random sample). Pretraining's
# gain over a random start grows as labels get scarce (docs/results.md, label efficiency: +11.3 points at 1%, +5.9
# with all labels, three seeds each). 200 steps see each passage ~120 times; the 500-step runs of that curve had
# reached their best dev score by step 200 (< 1 point gained after it), and 200-step runs from the same model,
# seeds 1-3, gave 52.8 +- 5.8% pretrained against 40.2 +- 0.6% from scratch. One seed is not enough there: the
# demo's own seed drew 47.1% against 44.0%. So three seeds of each: under a minute a run, ~3 minutes in all.
FEW_LABELS = 54
FEW_LABEL_STEPS = dict(max_steps=200, warmup_steps=20)
FEW_LABEL_SEEDS = 3
QUICK = dict(max_steps=40, eval_every=20, save_every=20, warmup_steps=4, log_every=5)  # --quick: a smoke run,
# logged often enough that its plots are curves, not single points
QUICK_FEW_LABEL_SEEDS = 2  # enough for a mean and its spread; 40 steps teach nothing a third seed would show
QUICK_LONG_PHASE = dict(max_steps=10, eval_every=10, save_every=10, warmup_steps=2, log_every=2)


DEMO_MARKER = ".litebert-demo"  # written first into a demo's directory
# What a demo writes (and what demos before the release wrote).
DEMO_ENTRIES = {DEMO_MARKER, "summary.json", "tokenizer", "data64", "data128", "pretrain", "pretrain128",
                "finetune_pretrained", "finetune_from_scratch", f"finetune_pretrained_{FEW_LABELS}",
                f"finetune_from_scratch_{FEW_LABELS}", *prerelease.OLD_DEMO_ENTRIES}


def start_clean(out_dir: str) -> None:
    """A demo starts from nothing (real runs use --resume), but it deletes only what a demo made: the entries
    of a previous demo run (known by its marker, or as prerelease.OLD_DEMO_SIGN says), never the
    directory itself, and nothing at all if anything else has been put there (`--out .` in a project)."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ConfigError(f"{out_dir} is a file, not a directory")
    entries = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()
    foreign = sorted(entries - DEMO_ENTRIES)
    if foreign or (entries and not entries & {DEMO_MARKER, prerelease.OLD_DEMO_SIGN}):
        what = f"it holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}" if foreign else \
            "it is not a previous demo run"
        raise ConfigError(f"{out_dir}: {what}; choose another --out (a demo replaces only its own earlier run)")
    for name in entries:
        path = os.path.join(out_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    os.makedirs(out_dir, exist_ok=True)
    write_text_atomically(os.path.join(out_dir, DEMO_MARKER), "")


def run(out_dir: str, quick: bool = False, seed: int = 12345) -> dict:
    t0 = time.time()
    start_clean(out_dir)
    tok_dir = os.path.join(out_dir, "tokenizer")

    print("[1/6] tokenizer: SentencePiece unigram on the bundled demo corpus", flush=True)
    tok = train_tokenizer([CORPUS], tok_dir, vocab_size=8000)
    print(f"      {tok.vocab_size} pieces -> {tok_dir}")

    print("[2/6] prepare: sentence-order pairs of 64 and of 128 tokens, 2 cuts of the corpus (dupe_factor)",
          flush=True)
    data, metas = {}, {}
    for length in (64, 128):
        data[length] = os.path.join(out_dir, f"data{length}")
        meta = metas[length] = prepare([CORPUS], data[length], tok_dir, max_seq_length=length,
                                       dupe_factor=1 if quick else 2, seed=seed, num_workers=2, progress=False)
        print(f"      seq {length}: {meta['num_instances']} examples, {meta['num_tokens']} tokens -> {data[length]}")

    print("[3/6] pretrain: MLM + SOP on the 64-token pairs", flush=True)
    # The pairs of the last documents (a random sample: the corpus's order is shuffled) are held out.
    held_out = max(256, metas[64]["num_instances"] // 25)
    pre_cfg = resolve_config(PretrainConfig, {**RECIPE["pretrain"], "data": data[64], "held_out": held_out})
    pre_train = resolve_config(TrainConfig, {**RECIPE["train"], **(QUICK if quick else {}),
                                             "out_dir": os.path.join(out_dir, "pretrain"), "seed": seed})
    short = pretrain(pre_cfg, pre_train, MODEL)

    print("[4/6] pretrain: the same model continued on the 128-token pairs", flush=True)
    long_cfg = resolve_config(PretrainConfig, {**RECIPE["pretrain"], "data": data[128], "held_out": held_out,
                                               "held_out_from": data[64],  # the same held-out documents
                                               "init_from": short["checkpoint"]})
    long_train = resolve_config(TrainConfig, {**RECIPE["train"], **LONG_PHASE,
                                              **(QUICK_LONG_PHASE if quick else {}),
                                              "out_dir": os.path.join(out_dir, "pretrain128"), "seed": seed})
    pre = pretrain(long_cfg, long_train)
    pretrained_dir = pre["checkpoint"]

    print(f"[5/6] fine-tune: novel_authorship (4 authors) with all its training passages and with {FEW_LABELS}, "
          "each from the pretrained model and from scratch", flush=True)
    recipe = {**FINETUNE, **(QUICK if quick else {})}
    few_recipe = {**FINETUNE, **FEW_LABEL_STEPS, **(QUICK if quick else {})}
    runs, few = {}, {}
    for name, scratch in (("pretrained", False), ("from_scratch", True)):
        runs[name] = fine_tune(pretrained_dir, scratch, os.path.join(out_dir, f"finetune_{name}"), seed, recipe)
        few_dir = os.path.join(out_dir, f"finetune_{name}_{FEW_LABELS}")
        few[name] = [fine_tune(pretrained_dir, scratch, os.path.join(few_dir, f"seed={s}"), s, few_recipe, FEW_LABELS)
                     for s in range(seed, seed + (QUICK_FEW_LABEL_SEEDS if quick else FEW_LABEL_SEEDS))]

    print("[6/6] use: the pretrained model and the classifier on text they never saw", flush=True)
    use = use_models(pretrained_dir, runs["pretrained"]["best_dir"], TASK_MAX_LENGTH,
                     runs["pretrained"]["baseline"]["majority_class"])
    summary = {"pretrain": short, "pretrain128": pre, "finetune": runs, "few_labels": few, "use": use,
               "minutes": (time.time() - t0) / 60, "out_dir": out_dir, "quick": quick}
    write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


def fine_tune(model: str, from_scratch: bool, out_dir: str, seed: int, recipe: dict,
              train_examples: int | None = None) -> dict:
    cfg = FinetuneConfig(model=model, task="novel_authorship", data_dir=TASK_DIR, max_length=TASK_MAX_LENGTH,
                         from_scratch=from_scratch, max_train_examples=train_examples, max_eval_examples=None)
    return finetune(cfg, TrainConfig(**{**recipe, "out_dir": out_dir, "seed": seed}))


def use_models(pretrained_dir: str, classifier_dir: str, max_length: int, majority: str) -> dict:
    """Stage 6, through the pipelines that `litebert predict` and `litebert serve` run. The pretrained model fills
    the masks of UNSEEN_SENTENCES; each hidden word's rank among all pieces, beside its rank for a lone [MASK]
    (the same model without the sentence), shows what the context taught it, where a 10-minute model's top
    guesses are still mostly commas and "the". The classifier reads novel_authorship's test split, which
    neither its training nor the choice of its best checkpoint saw, at the length it was trained on."""

    vocab = AlbertConfig.load(pretrained_dir).vocab_size
    fill = pipeline("fill-mask", pretrained_dir, top_k=vocab)  # every piece, ranked: the hidden word's place
    *answers, alone = fill([text for text, _ in UNSEEN_SENTENCES] + ["[MASK]"])

    def rank(ranked: list[dict], word: str) -> int | None:
        """1-based, of the word's own piece (a word-initial piece and a word-inner one can read alike); None
        when the tokenizer cuts the word into several pieces."""
        ids = fill.tokenizer.encode(word, add_special_tokens=False)
        return next(i + 1 for i, a in enumerate(ranked) if a["token"] == ids[0]) if len(ids) == 1 else None
    filled = [{"text": text, "hidden": word, "rank": rank(ranked, word), "rank_alone": rank(alone, word),
               "top": [{"token": a["token_str"], "score": a["score"]} for a in ranked[:3]]}
              for (text, word), ranked in zip(UNSEEN_SENTENCES, answers)]

    test = read_table(os.path.join(TASK_DIR, "test.jsonl.gz"), ["text"], "label")
    classify = pipeline("text-classification", classifier_dir, max_length=max_length)
    predicted = classify([example.text_a for example in test])
    shown: dict[str, dict] = {}  # the first test passage of each author
    for example, answer in zip(test, predicted):
        shown.setdefault(example.label, {"text": example.text_a, "author": example.label, **answer})
    return {"fill_mask": filled, "vocab_size": vocab,
            "test": {"passages": len(test),
                     "accuracy": sum(a["label"] == e.label for a, e in zip(predicted, test)) / len(test),
                     "majority_class_accuracy": sum(e.label == majority for e in test) / len(test)},
            "shown": [shown[author] for author in sorted(shown)], "predictions": [a["label"] for a in predicted],
            "serve": f"litebert serve --model {classifier_dir}"}


def format_use(use: dict) -> list[str]:
    lines = ["", "the models on text they never saw (the pipelines of `litebert predict` and `litebert serve`):",
             f"  fill-mask, pretrained model; the hidden word's rank among {use['vocab_size']} pieces, and for a "
             "lone [MASK]:"]
    for s in use["fill_mask"]:
        guesses = "  ".join(f"{t['token']!r} {t['score']:.2f}" for t in s["top"])
        where = (f"{s['hidden']!r} ranks {s['rank']} (alone: {s['rank_alone']})" if s["rank"] else
                 f"{s['hidden']!r} is not one piece")
        lines += [f"    {s['text']}", f"        top 3: {guesses}    {where}"]
    test = use["test"]
    lines.append(f"  text-classification, fine-tuned model, novel_authorship's {test['passages']} test passages: "
                 f"accuracy {test['accuracy']:.1%} (majority class {test['majority_class_accuracy']:.1%})")
    for s in use["shown"]:
        lines.append(f"    {one_line(s['text'], 60)!r:64} -> {s['label']} {s['score']:.2f}  (by {s['author']})")
    lines += [f"  serve the classifier:  {use['serve']}",
              """    and ask it:  curl -s 127.0.0.1:8000/predict -d '{"inputs": "It was a dark and stormy night."}'"""]
    return lines


def best(run: dict, metric: str = "accuracy") -> float:
    return run["best"].get(metric, float("nan"))  # nan: a run too short to have evaluated (never in the demo)


def format_finetuning(runs: dict, few: dict) -> list[str]:
    """Pretrained against random initialisation, with all labels and with 1% of them, where the gap is widest."""
    p, s = runs["pretrained"], runs["from_scratch"]
    fp, fs = ([best(run) for run in few[name]] for name in ("pretrained", "from_scratch"))

    def seeds(scores: list[float]) -> str:
        spread = f" ± {100 * statistics.stdev(scores):.1f}" if len(scores) > 1 else ""
        return f"{100 * statistics.mean(scores):.1f}%{spread}   ({', '.join(f'{100 * x:.1f}' for x in scores)})"
    return [f"fine-tuned on novel_authorship ({p['examples']['train']} train passages, "
            f"{p['examples']['dev']} dev), best dev accuracy:",
            f"  from the pretrained model  {best(p):.1%}   (macro-F1 {best(p, 'macro_f1'):.3f})",
            f"  from random initialisation {best(s):.1%}   (macro-F1 {best(s, 'macro_f1'):.3f})",
            f"  majority class ({p['baseline']['majority_class']}) {p['baseline']['accuracy']:.1%}",
            f"the same with {few['pretrained'][0]['examples']['train']} train passages (1% of the labels), where "
            f"pretraining shows most, {len(fp)} seeds each:",
            f"  from the pretrained model  {seeds(fp)}",
            f"  from random initialisation {seeds(fs)}",
            f"  pretraining's gain {100 * (statistics.mean(fp) - statistics.mean(fs)):+.1f} points here, "
            f"{100 * (best(p) - best(s)):+.1f} with all labels"]


def format_demo(summary: dict) -> str:
    short, pre, p = summary["pretrain"], summary["pretrain128"], summary["finetune"]["pretrained"]
    smoke = ["--quick: a smoke run of every stage, 40 steps each; its numbers mean nothing (at the majority",
             "baseline is where 40 steps leave a model). `litebert demo` without --quick gives the real ones."]
    lines = ["", "=" * 78, f"litebert demo: done in {summary['minutes']:.1f} minutes", "=" * 78,
             *(smoke if summary.get("quick") else []),
             format_summary(short), format_summary(pre), "",
             *format_finetuning(summary["finetune"], summary["few_labels"]),
             *format_use(summary["use"]), "", "files:",
             f"  pretraining curves   {os.path.join(short['out_dir'], 'metrics.png')} (seq 64), "
             f"{os.path.join(pre['out_dir'], 'metrics.png')} (seq 128)",
             f"  pretrained model     {pre['checkpoint']}  (loads in transformers.AlbertForPreTraining)",
             f"  fine-tuned model     {p['best_dir']}",
             f"  fine-tuning curves   {os.path.join(p['out_dir'], 'metrics.png')}",
             f"  everything           {os.path.join(summary['out_dir'], 'summary.json')}"]
    return "\n".join(lines)


@dataclass
class DemoConfig:
    """The options of `litebert demo` (the [demo] table of --config)."""

    out: str = field(default="out/demo", metadata={
        "help": "run directory (a previous demo run there is replaced; anything else is refused)", "metavar": "DIR"})
    quick: bool = field(default=False, metadata={"help": "a smoke run of every stage, 40 steps each (under a minute "
                                                          "on 2 cores; its numbers mean nothing)"})
    seed: int = field(default=12345, metadata={"range": "[0, 4294967295]",
        "help": "seed of data preparation, pretraining and fine-tuning"})


def main(argv: list[str]) -> int:
    parser = verb_parser("demo", __doc__, {"demo": DemoConfig})
    (cfg,) = parse_verb(parser, argv)
    summary = run(cfg.out, cfg.quick, cfg.seed)
    print(format_demo(summary))
    return 0


__all__ = ["run", "format_demo"]
