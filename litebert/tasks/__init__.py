"""Fine-tuning tasks: what a task's files hold, how they are read, and how each family of tasks is trained,
decoded and scored.

    records    examples, bad-record accounting (DataError or a counted skip), raw lines/rows/JSON
    readers    one reader per distributed format (tables, multiple-choice JSONL, RACE, SWAG, CoNLL)
    squad      SQuAD v1.1/v2.0: reading, windowed featurization, span decoding, official scoring
    registry   the known tasks (GLUE, SQuAD, RACE, SWAG, CoNLL, the bundled ones) and read_task
    features   examples -> model inputs, and the collate that pads a batch
    metrics    accuracy/F1/MCC/correlations, entity F1, SQuAD EM/F1, multi-label F1
    families   one object per task family: head, labels, features, outputs, predictions, scores, baselines

The names below are re-exported for `from litebert.tasks import ...`.
"""

from litebert.errors import DataError
from litebert.tasks.readers import read_choice_jsonl, read_conll, read_race, read_swag, read_table
from litebert.tasks.records import ChoiceExample, Examples, TagExample, TextExample, label_list
from litebert.tasks.registry import READERS, TASKS, Task, read_task, write_glue_predictions
from litebert.tasks.squad import QAExample, read_squad

__all__ = ["DataError", "read_choice_jsonl", "read_conll", "read_race", "read_swag", "read_table", "ChoiceExample",
           "Examples", "TagExample", "TextExample", "label_list", "READERS", "TASKS", "Task", "read_task",
           "write_glue_predictions", "QAExample", "read_squad"]
