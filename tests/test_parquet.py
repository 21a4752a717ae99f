"""A table task read from Parquet (what `datasets` writes with Dataset.to_parquet and the Hub serves): the same
examples, checks and counted skips as the JSONL it holds, and a damaged file refused in one line."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_finetune import tiny_model_dir

from litebert.cli import main as litebert_main
from litebert.errors import DataError
from litebert.tasks import read_table

ROWS = [{"id": "a", "text": "The ship sailed at dawn.", "pair": "It left early.", "label": "yes", "title": "x"},
        {"id": "b", "text": "Rain fell all day.", "pair": "It was sunny.", "label": "no", "title": "y"},
        {"id": "c", "text": "She wrote a letter.", "pair": None, "label": "yes", "title": "z"},
        {"id": "d", "text": "He read the book.", "pair": "He read it.", "label": "maybe", "title": "w"}]


def write_both(tmp_path, rows, name="train"):
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_parquet_rows_read_as_the_jsonl_they_hold(tmp_path):
    write_both(tmp_path, ROWS)
    kw = dict(text_columns=["text", "pair"], label_column="label", id_column="id", labels=["yes", "no"],
              errors="skip")
    from_parquet, from_jsonl = (read_table(tmp_path / f"train.{s}", **kw) for s in ("parquet", "jsonl"))
    assert [(e.id, e.text_a, e.text_b, e.label) for e in from_parquet] == \
        [(e.id, e.text_a, e.text_b, e.label) for e in from_jsonl] == [("a", ROWS[0]["text"], ROWS[0]["pair"], "yes"),
                                                                     ("b", ROWS[1]["text"], ROWS[1]["pair"], "no")]
    assert len(from_parquet.skipped) == len(from_jsonl.skipped) == 2  # a null pair, an unknown label: counted
    assert from_parquet.skipped[0].startswith(f"{tmp_path / 'train.parquet'}:row 3")


def test_a_damaged_parquet_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "train.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"train.parquet: not a readable Parquet file"):
        read_table(tmp_path / "train.parquet", ["text"], "label")


def test_finetune_trains_and_scores_on_parquet_files(tmp_path, capsys):
    model = tiny_model_dir(tmp_path)
    rows = [{"text": f"{w} is a word about {w}", "label": ["odd", "even"][i % 2]}
            for i, w in enumerate("apple river stone cloud tiger lemon piano candle".split() * 4)]
    data = tmp_path / "data"
    data.mkdir()
    write_both(data, rows[:24], "train")
    write_both(data, rows[24:], "dev")
    assert litebert_main(["finetune", "--model", str(model), "--task", "table", "--data-dir", str(data),
                          "--train-file", "train.parquet", "--dev-file", "dev.parquet", "--text-columns", "text",
                          "--max-steps", "2", "--batch-size", "4", "--max-length", "32", "--out-dir",
                          str(tmp_path / "run"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["examples"]["train"] == 24 and summary["examples"]["dev"] == 8 and summary["steps"] == 2
