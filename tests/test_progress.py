"""Long work says where it is in a log: plain lines every LOG_INTERVAL seconds where tqdm would draw nothing."""

import torch
from test_finetune import train_tiny_tokenizer

from litebert import AlbertConfig, AlbertForSequenceClassification, progress
from litebert.sentence import embed
from litebert.training.data import ShuffledData
from litebert.training.loop import train
from litebert.training.train_config import TrainConfig


def test_a_log_gets_lines_with_position_rate_and_time_left(monkeypatch, capsys):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    with progress.progress_bar(4, "prepare", True, unit="B") as bar:  # pytest's stderr is no terminal
        for _ in range(4):
            bar.update(1)
            bar.set_postfix(loss="1.5")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("prepare: 4/4 B, 0:00 elapsed") and lines[-1].endswith("loss 1.5")
    assert "left" in lines[0]
    with progress.progress_bar(4, "quiet", False) as bar:  # another rank, or --no-progress
        bar.update(4)
    assert capsys.readouterr().err == ""


def test_training_in_a_log_prints_its_steps(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", num_labels=2))
    ids = torch.randint(5, model.config.vocab_size, (8, 12))
    data = ShuffledData(8, lambda idx, _pos: {"input_ids": ids[idx], "labels": torch.tensor(idx) % 2})
    train(model, data, TrainConfig(optimizer="adamw", batch_size=4, max_steps=3, log_every=1,
                                       out_dir=str(tmp_path / "run"), save_every=0))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("train: ")]
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]


def test_embedding_in_a_log_prints_its_sentences(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    tok = train_tiny_tokenizer(tmp_path)
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", vocab_size=tok.vocab_size))
    vectors = embed(model, tok, ["a first sentence", "and a second", "the third"], batch_size=2, progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("embed: ")]
    assert vectors.shape[0] == 3 and [line.split()[1] for line in lines] == ["2/3", "3/3"]
