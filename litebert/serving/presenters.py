"""Presenters: a task family's answer (litebert.tasks.answers) in transformers' pipeline output shapes.

Each presenter is (pipe, answer, example, options) -> one output; `pipe` is the calling Pipeline, read for its
tokenizer and labels."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from litebert.serving.options import qa_answers, target_ids
from litebert.text.conventions import SPIECE_UNDERLINE
from litebert.tokenizer import Tokenizer

LEGACY = object()  # top_k not given: transformers' single-dict output


def metaspace_decode(pieces: list[str]) -> str:
    """What transformers' fast ALBERT tokenizer makes of pieces (its Metaspace decoder): "▁" is a space, except
    in the first piece, where it is dropped."""
    return "".join(p.replace(SPIECE_UNDERLINE, "") if i == 0 else p.replace(SPIECE_UNDERLINE, " ")
                   for i, p in enumerate(pieces))


def decode(tok: Tokenizer, ids, skip_special_tokens: bool = False) -> str:
    """transformers' `tokenizer.decode` for an ALBERT tokenizer (special tokens kept as their names, glued)."""
    return metaspace_decode([tok.pieces[i] for i in map(int, ids)
                             if not (skip_special_tokens and tok.special_table[i])])


def present_fill_mask(pipe: Any, answer, example, options: dict) -> list:
    single = len(answer.positions) == 1
    rows = []
    targets = None if options.get("targets") is None else np.array(target_ids(pipe.tokenizer, options["targets"]))
    for position, probs in zip(answer.positions, answer.probs):
        row = []
        best = np.argsort(-probs, kind="stable") if targets is None else \
            targets[np.argsort(-probs[targets], kind="stable")]
        for token in best[: options["top_k"]]:
            ids = list(answer.input_ids)
            ids[position] = int(token)
            row.append({"score": float(probs[token]), "token": int(token), "token_str": decode(pipe.tokenizer, [token]),
                        "sequence": decode(pipe.tokenizer, ids, skip_special_tokens=single)})
        rows.append(row)
    return rows[0] if single else rows


def present_ranked(answer, options: dict, item: Callable) -> Any:
    """transformers' text-classification shape: the prediction as one dict when top_k is not given (a list
    when the family may predict any number, as multi-label does), else the top_k (None: all) best first."""
    top_k = options["top_k"]
    if top_k is LEGACY:
        return item(answer.predicted[0]) if answer.one else [item(x) for x in answer.predicted]
    return [item(x) for x in (answer.ranked if top_k is None else answer.ranked[:top_k])]


def present_classes(pipe: Any, answer, example, options: dict) -> Any:
    return present_ranked(answer, options, lambda x: {"label": x.label, "score": x.score})


def present_choice(pipe: Any, answer, example, options: dict) -> Any:
    return present_ranked(answer, options,
                          lambda x: {"index": x.label, "option": example.options[x.label], "score": x.score})


def present_span(pipe: Any, answer, example, options: dict) -> dict | list[dict]:
    """transformers' question-answering: {score, start, end, answer}; a list of the top_k best when top_k > 1."""
    spans = qa_answers(answer, options)
    rows = [{"score": s.score, "start": s.start, "end": s.end, "answer": s.answer} for s in spans]
    return rows[0] if options.get("top_k", 1) == 1 else rows


def present_hidden(pipe: Any, answer, example, options: dict) -> list | torch.Tensor:
    """(1, T, H), as transformers' feature-extraction: nested lists, or a tensor with return_tensors=True."""
    if options.get("return_tensors"):
        return torch.as_tensor(answer)[None]
    return [answer.tolist()]


def present_vector(pipe: Any, answer, example, options: dict) -> list:
    return answer.tolist()


def present_entities(pipe: Any, tokens, example, options: dict) -> list[dict]:
    """transformers' token-classification: "none" one dict per token; "simple" adjacent tokens of one entity
    grouped (B-/I- prefixes); "first", "average", "max" tag whole words (the first sub-token's tag, the average
    of the word's probabilities, the most confident sub-token's) before grouping. Words are the text's
    whitespace-separated words (transformers guesses them from the offsets); a word's string is its decoded
    tokens, as transformers gives it (options are checked by the pipeline's task_options)."""
    strategy, ignore = options["aggregation_strategy"], options["ignore_labels"]
    ignore = ["O"] if ignore is None else ignore
    labels, text = pipe.labels, example.text

    def piece(t) -> str:  # an unknown token is shown as the text it stands for, as transformers does
        return text[t.start:t.end] if t.id == pipe.tokenizer.unk_id else pipe.tokenizer.pieces[t.id]

    if strategy in ("none", "simple"):
        entities = [{"entity": labels[int(t.probs.argmax())], "score": float(t.probs.max()), "index": t.index,
                     "word": piece(t), "start": t.start, "end": t.end, "pieces": [piece(t)]} for t in tokens]
        if strategy == "none":
            return [{k: v for k, v in e.items() if k != "pieces"} for e in entities if e["entity"] not in ignore]
    else:
        entities = [word_entity(group, pieces, strategy, labels) for group, pieces in words_of(tokens, piece)]
    # A group's word is its pieces decoded together, a bare "▁"'s space included: transformers' decode of the
    # group's tokens, as "simple" gives it (transformers' own "first"/"average"/"max" decode each word first,
    # which for ALBERT's pieces glues "new york" into "newyork").
    groups = [{"entity_group": run[0]["entity"].split("-", 1)[-1],
               "score": float(np.mean([e["score"] for e in run])),
               "word": metaspace_decode([p for e in run for p in e["pieces"]]), "start": run[0]["start"],
               "end": run[-1]["end"]} for run in entity_runs(entities)]
    return [g for g in groups if g["entity_group"] not in ignore]


def words_of(tokens: list, piece: Callable) -> list[tuple[list, list[str]]]:
    """(the word's tokens, its pieces) of each word. A bare "▁" belongs to no word's tag (a word's first
    sub-token is the one after it) but is the space before the word in its string: one of its pieces."""
    words: dict[int, tuple[list, list[str]]] = {}
    spaces: list[str] = []
    for t in tokens:
        if t.word is None:
            spaces.append(piece(t))
            continue
        group, pieces = words.setdefault(t.word, ([], []))
        group.append(t)
        pieces += [*spaces, piece(t)]
        spaces = []
    return list(words.values())


def word_entity(group: list, pieces: list[str], strategy: str, labels: list[str]) -> dict:
    """One word's entity: its first sub-token's tag ("first"), its most confident one's ("max"), or the average
    of their probabilities ("average")."""
    if strategy == "first":
        probs = group[0].probs
    elif strategy == "max":
        probs = max(group, key=lambda t: t.probs.max()).probs
    else:
        probs = np.mean([t.probs for t in group], axis=0)
    return {"entity": labels[int(probs.argmax())], "score": float(probs.max()), "start": group[0].start,
            "end": group[-1].end, "pieces": pieces}


def entity_runs(entities: list[dict]) -> list[list[dict]]:
    """Adjacent entities that make one: the same type, each after the first not a B- (transformers' rule;
    an unprefixed tag counts as I-)."""
    runs: list[list[dict]] = []
    for e in entities:
        bi, tag = (e["entity"][0], e["entity"][2:]) if e["entity"][:2] in ("B-", "I-") else ("I", e["entity"])
        last = runs[-1][-1]["entity"] if runs else None
        last_tag = None if last is None else last[2:] if last[:2] in ("B-", "I-") else last
        if runs and tag == last_tag and bi != "B":
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs
