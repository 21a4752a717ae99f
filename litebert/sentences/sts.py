"""Similarity benchmarks with human judgments, read from the installed gensim wheel's test data (their licences
are not ours to redistribute, so nothing of them is committed), and scoring many models on one pairs file.

  gensim:lee         Lee, Pincombe & Welsh (2005): 50 short news documents (lee.cor) and the averaged human
                     similarity of every pair (similarities0-1.txt, upper triangle: 1,225 pairs, 0-1 scale)
  gensim:wordsim353  WordSim-353 (Finkelstein et al., 2002): word pairs, relatedness 0-10
  gensim:simlex999   SimLex-999 (Hill et al., 2015): word pairs, similarity 0-10 (relatedness scored low)
The files are found from gensim's package location without importing gensim (its import loads scipy and
smart_open, for three text files). `pip install gensim` (or litebert[sts]) provides them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

import numpy as np

from litebert.errors import ConfigError, DataError, NonFiniteError
from litebert.sentences.directories import load_sentence_model
from litebert.tasks.metrics import pearson, spearman
from litebert.tasks.readers import read_table

BENCHMARKS = ("lee", "wordsim353", "simlex999")
PREFIX = "gensim:"


def gensim_test_data() -> str:
    """The directory of gensim's test data, located without importing gensim."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the similarity benchmarks are read from the gensim wheel's test data: "
                          "pip install gensim (or litebert[sts])")
    path = os.path.join(list(spec.submodule_search_locations)[0], "test", "test_data")
    if not os.path.isdir(path):
        raise ConfigError(f"{path} is missing: this gensim wheel has no test data")
    return path


def is_benchmark(name: str) -> bool:
    return name.startswith(PREFIX)


def read_benchmark(name: str) -> tuple[list[tuple[str, str]], list[float]]:
    """(pairs, human scores) of a benchmark named "gensim:lee", "gensim:wordsim353" or "gensim:simlex999"."""
    which = name.removeprefix(PREFIX)
    if which not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {name!r}; known: {', '.join(PREFIX + b for b in BENCHMARKS)}")
    root = gensim_test_data()
    if which == "lee":
        return lee_pairs(os.path.join(root, "lee.cor"), os.path.join(root, "similarities0-1.txt"))
    return word_pairs(os.path.join(root, "wordsim353.tsv" if which == "wordsim353" else "simlex999.txt"))


def lee_background() -> list[str]:
    """The 300 documents of Lee's background corpus: news of the same source and time as Lee's 50 (none of them),
    without similarity judgments, the unlabelled in-domain text gensim's own tutorials train on before scoring
    on Lee. One string per document."""
    return _lee_documents(os.path.join(gensim_test_data(), "lee_background.cor"))


def _lee_documents(path: str) -> list[str]:
    """A Lee corpus file: one document per line, Latin-1 (lee.cor's pound signs are byte 0xA3)."""
    with open(path, encoding="latin-1") as f:
        return [line.strip() for line in f if line.strip()]


def lee_pairs(corpus: str, similarities: str) -> tuple[list[tuple[str, str]], list[float]]:
    """Every pair i < j of Lee's documents with its averaged human similarity (the matrix's upper triangle)."""
    documents = _lee_documents(corpus)
    matrix = np.loadtxt(similarities)
    if matrix.shape != (len(documents), len(documents)):
        raise DataError(f"{similarities}: a {matrix.shape} matrix for {len(documents)} documents in {corpus}")
    i, j = np.triu_indices(len(documents), k=1)
    return [(documents[a], documents[b]) for a, b in zip(i, j)], matrix[i, j].astype(float).tolist()


def word_pairs(path: str) -> tuple[list[tuple[str, str]], list[float]]:
    """word1 TAB word2 TAB score lines; '#' lines are comments."""
    pairs, scores = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                raise DataError(f"{path}:{number}: expected word1<TAB>word2<TAB>score")
            pairs.append((fields[0], fields[1]))
            scores.append(float(fields[2]))
    return pairs, scores


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def paired_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N,) cosine similarity of row i of `a` with row i of `b`."""
    return (_unit(a) * _unit(b)).sum(-1)


def recall_at_1(queries: np.ndarray, candidates: np.ndarray, texts: Sequence | None = None) -> float:
    """Fraction of queries i whose most cosine-similar candidate is candidate i, or, where `texts` names each
    candidate's text, a copy of it: a sentence2 that two pairs share is both queries' right answer (its
    copies' vectors are equal, and argmax would pick the first copy for both)."""
    similarity = _unit(queries) @ _unit(candidates).T  # (N, N)
    names = np.arange(len(queries)) if texts is None else np.asarray(texts)
    return float((names[similarity.argmax(1)] == names).mean())


def pair_metrics(a: np.ndarray, b: np.ndarray, labels: Sequence[float] | None, b_texts: Sequence | None = None
                 ) -> dict[str, float]:
    """evaluate_pairs' metrics from the two sides' vectors: Spearman and Pearson of cosine vs gold (as
    sentence-transformers' EmbeddingSimilarityEvaluator reports them) when labelled, and recall@1 (`b_texts`:
    the second sides' texts, or ids for them, so that copies of one are one answer)."""

    metrics = {}
    positive = np.ones(len(a), dtype=bool)
    if labels is not None:
        labels = np.asarray(labels, dtype=np.float64)
        if len(np.unique(labels)) > 1:
            cosines = paired_cosine(a, b)
            if np.ptp(cosines) == 0:  # scipy's answer is NaN, printed as invalid JSON and compared as nothing
                raise NonFiniteError(f"every pair has the same cosine ({float(cosines[0]):.4g}): the encoder's "
                                     "vectors have collapsed, and their correlation with the gold is undefined")
            metrics["spearman"] = spearman(cosines, labels)
            metrics["pearson"] = pearson(cosines, labels)
        positive = labels > 0
    if positive.sum() > 1:
        metrics["recall_at_1"] = recall_at_1(a[positive], b[positive],
                                             None if b_texts is None else np.asarray(b_texts)[positive])
    return metrics


def pair_scores(encode, pairs: list[tuple[str, str]], labels: list[float] | None, recall: bool = True
                ) -> dict[str, float]:
    """embed.pair_metrics of `encode(texts) -> (N, D) vectors` on `pairs`, each distinct text encoded once (Lee's
    50 documents make its 2,450 sides). recall=False leaves out recall@1, which means nothing where every pair
    is scored and texts repeat (Lee)."""
    texts = list(dict.fromkeys(t for pair in pairs for t in pair))
    row = {t: i for i, t in enumerate(texts)}
    vectors = encode(texts)
    b_rows = [row[p[1]] for p in pairs]
    metrics = pair_metrics(vectors[[row[p[0]] for p in pairs]], vectors[b_rows], labels, b_rows)
    if not recall:
        metrics.pop("recall_at_1", None)
    return metrics


def read_scored_pairs(path: str, text_columns: Sequence[str], label_column: str, limit: int | None = None
                      ) -> tuple[list[tuple[str, str]], list[float] | None]:
    """Text pairs of a .jsonl/.tsv/.csv table and their float labels (None when label_column is ''), via
    tasks.read_table; the first `limit` rows when given."""

    examples = read_table(path, list(text_columns), label_column or None, regression=bool(label_column))
    examples = examples[:limit] if limit is not None else examples
    if not examples:
        raise DataError(f"{path}: no sentence pairs")
    pairs = [(e.text_a, e.text_b) for e in examples]
    return pairs, ([float(e.label) for e in examples] if label_column else None)


def score_models(models: list[str], pairs: list[tuple[str, str]], labels: list[float] | None,
                 pooling: str | None = None, max_length: int | None = None, batch_size: int = 64,
                 device=None, recall: bool = True) -> dict[str, dict[str, float]]:
    """{model directory: pair_scores} for litebert, sentence-transformers and plain encoder directories alike
    (stdir.load_sentence_model), each on the same pairs. `pooling` and `max_length` override the first model's
    settings only: the others (a teacher, a baseline) are scored as their directories say they are used."""

    results = {}
    for i, path in enumerate(models):
        model = load_sentence_model(path, pooling, max_length) if i == 0 else load_sentence_model(path)
        if device is not None:
            model.encoder.to(device)
        results[path] = pair_scores(lambda texts: model.encode(texts, batch_size), pairs, labels, recall)
    return results
