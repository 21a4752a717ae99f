"""Korean with and without morpheme pre-segmentation (`litebert tokenizer --pre-tokenize kiwi|mecab`), same
vocabulary size, same model, same steps, on the bundled Korean corpus (the constitution and 10 bills;
docs/sentence.md).

For each tokenizer (--tokenizers: "plain", SentencePiece on raw text, or a segmenter's name; default plain, kiwi):
  0. for a segmenter: the time until it is ready, and to segment every line of pretrain/ko_small.txt;
  1. train it on the training documents (all but the last 3 of pretrain/ko_small.txt);
  2. prepare sentence-order pairs of the training documents and, apart, of the 3 held-out documents;
  3. pretrain a demo-sized ALBERT (MLM + SOP, LAMB) and score MLM on the held-out documents' pairs;
  4. fine-tune it on a downstream task made from document structure: which of the 11 sources (the constitution,
     or one of the 10 bills) a paragraph comes from, the first 70% of each source's paragraphs to train on, the
     rest to score (accuracy, macro-F1);
  5. check that the tokenizer in the pretraining checkpoint and in the fine-tuned model give the ids the
     tokenizer directory gives, on every held-out paragraph.
MLM accuracy is over each tokenizer's own pieces (a morpheme-split piece is a different prediction target), so the
downstream score is the comparable one. Writes <out>/results.json.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/korean_morphemes.py --out out/korean [--steps 400]
        [--tokenizers plain kiwi mecab] [--seed 12345]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/korean_morphemes.py --speed-only kiwi   # step 0 alone, one segmenter
    .venv/bin/python scripts/korean_morphemes.py --compare kiwi mecab   # where two segmenters cut ko_small.txt

results.json is rewritten after each tokenizer, so a stopped run keeps the ones it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from litebert.devdata import SHARED_DATA
from litebert.files import write_json
from litebert.text.pretokenize import SEGMENTERS, make_segmenter

KO_TEXT = os.path.join(str(SHARED_DATA), "pretrain", "ko_small.txt")
KO_DOCS = os.path.join(str(SHARED_DATA), "corpus", "ko", "kolaw_kobill.jsonl")
MODEL = dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
             max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def source_task(out: str) -> str:
    """{text, label} paragraphs of kolaw_kobill by source: first 70% of each source's paragraphs train, rest dev."""
    task = os.path.join(out, "source_task")
    os.makedirs(task, exist_ok=True)
    by_source: dict[str, list[str]] = {}
    with open(KO_DOCS, encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            label = "constitution" if doc["id"].startswith("kolaw") else doc["id"]
            by_source.setdefault(label, []).extend(p for p in doc["text"].split("\n") if len(p.strip()) >= 10)
    splits = {"train": [], "dev": []}
    for label, paragraphs in by_source.items():
        cut = int(0.7 * len(paragraphs))
        splits["train"] += [{"text": p, "label": label} for p in paragraphs[:cut]]
        splits["dev"] += [{"text": p, "label": label} for p in paragraphs[cut:]]
    for split, rows in splits.items():
        with open(os.path.join(task, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return task


def segmenter_speed(name: str, docs: list[str]) -> dict:
    """Seconds until the segmenter has segmented a first word (kiwi builds its model on that first call, not in
    its constructor), and the best of two passes over every line (the second without first-call costs); wall
    time and this process's CPU time, the steadier of the two on a shared machine."""
    clocks = (time.perf_counter, time.process_time)
    t0 = [c() for c in clocks]
    segmenter = make_segmenter(name)
    segmenter.segment("학교에서")
    ready = [c() - t for c, t in zip(clocks, t0)]
    lines = [line for doc in docs for line in doc.split("\n") if line.strip()]
    passes = []
    for _ in range(2):
        t0 = [c() for c in clocks]
        for line in lines:
            segmenter.segment(line)
        passes.append([c() - t for c, t in zip(clocks, t0)])
    wall, cpu = min(passes)
    return {"ready_s": round(ready[0], 3), "ready_cpu_s": round(ready[1], 3), "segment_s": round(wall, 3),
            "segment_cpu_s": round(cpu, 3), "lines": len(lines), "chars_per_s": round(sum(map(len, lines)) / wall),
            "load_average": os.getloadavg()}


def compare_cuts(first: str, second: str) -> dict:
    """Cuts (spaces a segmenter inserts inside a word, in context) that both, or only one, of two segmenters make."""
    with open(KO_TEXT, encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    counts = {"lines": len(lines), "identical_lines": 0, "both": 0, first: 0, second: 0}
    for line in lines:
        cuts = []
        for name in (first, second):
            segmented, source = make_segmenter(name).segment_aligned(line)
            cuts.append({source[i] for i, c in enumerate(segmented) if c == " " and line[source[i]] != " "})
        counts["identical_lines"] += cuts[0] == cuts[1]
        counts["both"] += len(cuts[0] & cuts[1])
        counts[first] += len(cuts[0] - cuts[1])
        counts[second] += len(cuts[1] - cuts[0])
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/korean")
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--finetune-steps", type=int, default=200)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tokenizers", nargs="+", default=["plain", "kiwi"], choices=["plain", *SEGMENTERS])
    p.add_argument("--seed", type=int, default=12345, help="pretraining and fine-tuning seed")
    p.add_argument("--speed-only", choices=list(SEGMENTERS), help="time this segmenter's load and segmentation "
                   "of pretrain/ko_small.txt, print it and stop (a fresh process per segmenter: the load counts the "
                   "package's import)")
    p.add_argument("--compare", nargs=2, choices=list(SEGMENTERS), metavar="NAME",
                   help="count the morpheme cuts two segmenters make in each line of pretrain/ko_small.txt, print, stop")
    a = p.parse_args()
    if a.compare:
        print(json.dumps(compare_cuts(*a.compare), ensure_ascii=False))
        return
    if a.speed_only:
        with open(KO_TEXT, encoding="utf-8") as f:
            print(json.dumps({a.speed_only: segmenter_speed(a.speed_only, f.read().strip().split("\n\n"))}))
        return

    import torch

    from litebert.corpus.shards import prepare
    from litebert.corpus.tokenizer_training import train_tokenizer
    from litebert.finetune import FinetuneConfig, finetune
    from litebert.pretrain import PretrainConfig, pretrain
    from litebert.tokenizer import Tokenizer
    from litebert.training.train_config import TrainConfig

    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    with open(KO_TEXT, encoding="utf-8") as f:
        docs = f.read().strip().split("\n\n")
    train_text, held_text = os.path.join(a.out, "train.txt"), os.path.join(a.out, "heldout.txt")
    with open(train_text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs[:-3]) + "\n")
    with open(held_text, "w", encoding="utf-8") as f:
        f.write("\n\n".join(docs[-3:]) + "\n")
    task = source_task(a.out)
    dev = [json.loads(line)["text"] for line in open(os.path.join(task, "dev.jsonl"), encoding="utf-8")]
    results = {"corpus": {"documents": len(docs), "held_out_documents": 3}, "vocab_size": a.vocab_size,
               "pretrain_steps": a.steps, "finetune_steps": a.finetune_steps, "model": MODEL, "threads": a.threads,
               "seed": a.seed, "load_average": os.getloadavg()}
    for name in a.tokenizers:
        pre_tokenize = None if name == "plain" else name
        t0 = time.time()
        speed = segmenter_speed(name, docs) if pre_tokenize else None
        root = os.path.join(a.out, name)
        tok_dir = os.path.join(root, "tokenizer")
        tok = train_tokenizer([train_text], tok_dir, vocab_size=a.vocab_size, pre_tokenize=pre_tokenize)
        for text, data in ((train_text, "data"), (held_text, "heldout")):
            prepare([text], os.path.join(root, data), tok_dir, max_seq_length=a.max_length, num_workers=1,
                    progress=False, overwrite=True)
        s = pretrain(PretrainConfig(data=os.path.join(root, "data"), model="tiny", held_out=1,
                                    eval_data=[os.path.join(root, "heldout")]),
                     TrainConfig(optimizer="lamb", lr=1e-2, batch_size=32, seed=a.seed, max_steps=a.steps,
                                 warmup_steps=a.steps // 10, out_dir=os.path.join(root, "pretrain"), progress=False,
                                 log_every=50),
                     dict(MODEL))
        f = finetune(FinetuneConfig(model=s["checkpoint"], task="table", data_dir=task, text_columns=["text"],
                                    max_length=a.max_length),
                     TrainConfig(optimizer="adamw", lr=5e-4, batch_size=32, seed=a.seed, max_steps=a.finetune_steps,
                                 warmup_steps=a.finetune_steps // 10, eval_every=a.finetune_steps // 4,
                                 out_dir=os.path.join(root, "finetune"), progress=False))
        ids = [tok.encode(t) for t in dev]
        same = all(Tokenizer.from_pretrained(d).encode_batch(dev) == [i[1:-1] for i in ids]
                   for d in (s["checkpoint"], os.path.join(root, "finetune", "best")))
        lengths = [len(i) - 2 for i in ids]
        results[name] = {
            "pre_tokenizer": tok.pre_tokenizer, "segmenter_speed": speed,
            "pieces_per_paragraph": sum(lengths) / len(lengths),
            "unk_rate": sum(i.count(tok.unk_id) for i in ids) / sum(lengths),
            "held_out_mlm_acc": s["final"].get("heldout/mlm_acc"), "held_out_mlm_loss": s["final"].get("heldout/mlm_loss"),
            "held_out_sop_acc": s["final"].get("heldout/sop_acc"),
            "commonest_token_acc": s["baselines"].get("majority_token_acc"),
            "downstream": {k: v for k, v in (f.get("best") or {}).items() if isinstance(v, (int, float))},
            "ids_equal_in_checkpoints": same, "minutes": round((time.time() - t0) / 60, 2)}
        print(name, json.dumps(results[name]), flush=True)
        write_json(os.path.join(a.out, "results.json"), results)
    print(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
