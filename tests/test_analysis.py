import json
import shutil

import torch
from fixtures.tokenizers import train_tiny_tokenizer

from litebert.cli import main
from litebert.config import AlbertConfig
from litebert.model import AlbertForPreTraining
from litebert.paper.analysis import layer_transitions, model_names, plot_transitions


def test_transitions_follow_every_application_of_a_shared_layer(tmp_path):
    config = AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=5, num_attention_heads=2,
                          intermediate_size=32, max_position_embeddings=16, inner_group_num=2)
    model = AlbertForPreTraining(config).eval()
    ids = torch.randint(5, 60, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    r = layer_transitions(model, ids, mask)
    assert len(r["l2"]) == len(r["cosine"]) == 5 * 2  # L applications x inner_group_num blocks

    # The same numbers by hand: run the blocks in order and compare consecutive states on real tokens.
    albert = model.albert
    with torch.no_grad():
        x = albert.encoder.embedding_hidden_mapping_in(albert.embeddings(ids))
        from litebert.model import padding_mask
        attn = padding_mask(mask, x.dtype)
        states = [x]
        for g in albert.encoder.layer_to_group:
            for layer in albert.encoder.albert_layer_groups[g].albert_layers:
                states.append(layer(states[-1], attn))
    keep = mask.bool()
    expected = [(a[keep] - b[keep]).norm(dim=-1).mean().item() for a, b in zip(states, states[1:])]
    assert r["l2"] == expected
    assert all(-1 <= c <= 1 for c in r["cosine"])
    assert not albert._forward_hooks and not albert.encoder.embedding_hidden_mapping_in._forward_hooks
    # A model set to run padding-free (as fine-tuning leaves it) kept its blocks' states as (real tokens, H) rows,
    # which the (batch, length) mask could not index: the same figures, not an IndexError.
    albert.padding_free = True
    assert layer_transitions(model, ids, mask) == r and albert.padding_free
    assert plot_transitions({"tiny": r}, str(tmp_path / "t.png")) and (tmp_path / "t.png").stat().st_size > 1000


def test_the_analyze_command_reads_a_corpus_and_writes_the_plot_and_figures(tmp_path, capsys):
    tok = train_tiny_tokenizer(tmp_path)
    config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model_dir = tmp_path / "tiny"
    AlbertForPreTraining(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "transitions.png"
    assert main(["analyze", str(model_dir), "--text", str(tmp_path / "text.txt"), "--max-sentences", "5",
                 "--max-length", "32", "--out", str(out)]) == 0
    figures = json.loads(out.with_suffix(".json").read_text())
    assert len(figures["tiny"]["l2"]) == 3 and out.stat().st_size > 1000
    assert main(["analyze", str(model_dir), "--out", str(out)]) == 0  # the bundled corpus by default
    # Two runs whose checkpoints share a name (runA/final, runB/final) are both kept, under their own paths.
    for run in ("runA", "runB"):
        shutil.copytree(model_dir, tmp_path / run / "final")
    assert main(["analyze", str(tmp_path / "runA" / "final"), str(tmp_path / "runB" / "final"), "--out", str(out)]) == 0
    assert sorted(json.loads(out.with_suffix(".json").read_text())) == ["runA/final", "runB/final"]
    assert model_names(["a/x", "b/y"]) == ["x", "y"]
    assert main(["analyze", str(model_dir), str(model_dir) + "/", "--out", str(out)]) == 2
    assert "is given twice" in capsys.readouterr().err

    assert main(["analyze", str(model_dir), "--text", str(tmp_path / "missing.txt")]) == 2
    assert "no input files match" in capsys.readouterr().err.strip().splitlines()[-1]
    (tmp_path / "empty.txt").write_text("\n\n")
    assert main(["analyze", str(model_dir), "--text", str(tmp_path / "empty.txt")]) == 2
    assert capsys.readouterr().err.strip().endswith("empty.txt: no sentences")
