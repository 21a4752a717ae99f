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

import numpy as np

from litebert.errors import ConfigError, DataError

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


def lee_pairs(corpus: str, similarities: str) -> tuple[list[tuple[str, str]], list[float]]:
    """Every pair i < j of Lee's documents with its averaged human similarity (the matrix's upper triangle)."""
    with open(corpus, encoding="latin-1") as f:  # the file is Latin-1 (its pound signs are byte 0xA3)
        documents = [line.strip() for line in f if line.strip()]
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


def score_models(models: list[str], pairs: list[tuple[str, str]], labels: list[float] | None,
                 pooling: str | None = None, max_length: int | None = None, batch_size: int = 64,
                 device=None, recall: bool = True) -> dict[str, dict[str, float]]:
    """{model directory: metrics} for litebert, sentence-transformers and plain encoder directories alike
    (stdir.load_sentence_model), each on the same pairs (embed.pair_metrics); recall=False leaves out
    recall@1, which means nothing where every pair is scored and texts repeat (Lee's documents)."""
    from litebert.embed import pair_metrics
    from litebert.stdir import load_sentence_model

    texts = list(dict.fromkeys(t for pair in pairs for t in pair))  # Lee's 50 documents make its 2,450 sides
    row = {t: i for i, t in enumerate(texts)}
    a_rows, b_rows = [row[p[0]] for p in pairs], [row[p[1]] for p in pairs]
    results = {}
    for path in models:
        model = load_sentence_model(path, pooling, max_length)
        if device is not None:
            model.encoder.to(device)
        vectors = model.encode(texts, batch_size)
        results[path] = pair_metrics(vectors[a_rows], vectors[b_rows], labels)
        if not recall:
            results[path].pop("recall_at_1", None)
    return results
