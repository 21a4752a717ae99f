"""What a fine-tuned checkpoint directory says about its task: the family its config.json names (the head and
problem type transformers records) and what that family calibrated on dev (calibration.json), for the verbs and
pipelines that load one without being told its task.
"""

from __future__ import annotations

import os
from typing import Any

from litebert.config import AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.files import read_json_object
from litebert.heads import AlbertForSequenceClassification
from litebert.tasks.families import FAMILIES, Family

CALIBRATION_FILE = "calibration.json"  # beside a fine-tuned checkpoint: what its family tuned on dev
BEST_SCORE_NAME = "best_score.json"  # in best/, written with it: what it scored (so --resume keeps it unless
# beaten) and the feature settings it was scored with (so evaluating it later cuts its inputs the same way)


def fine_tuned_max_length(directory: str) -> int | None:
    """The max_length a best/ checkpoint was fine-tuned and scored with, or None (not a best/, or written before
    it was recorded): `evaluate` without --max-length uses it, where the recipe's could differ from the run's."""
    path = os.path.join(directory, BEST_SCORE_NAME)
    if not os.path.isfile(path):
        return None
    return read_json_object(path, CheckpointError).get("features", {}).get("max_length")


def read_calibration(directory: str) -> dict[str, Any] | None:
    """What the family calibrated on dev when the checkpoint was fine-tuned (thresholds), or None."""
    path = os.path.join(directory, CALIBRATION_FILE)
    if not os.path.isfile(path):
        return None
    return read_json_object(path, CheckpointError)  # a damaged file is named, not a JSONDecodeError


def family_for_config(config: AlbertConfig) -> Family:
    """The family a fine-tuned checkpoint was trained as, from its config.json (architectures, problem_type)."""
    head = (config.architectures or [""])[0]
    if head == AlbertForSequenceClassification.__name__:
        if config.problem_type == "multi_label_classification":  # before num_labels: one tag may be all it has
            return FAMILIES["multi_label"]
        if config.problem_type == "regression" or config.num_labels == 1:
            return FAMILIES["regression"]
        return FAMILIES["classification"]
    for family in FAMILIES.values():
        if family.head.__name__ == head:
            return family
    raise ConfigError(f"a {head or 'headless'} checkpoint is not fine-tuned for any task family; heads litebert "
                      f"fine-tunes: {', '.join(sorted({f.head.__name__ for f in FAMILIES.values()}))}")
