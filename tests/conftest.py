import os

import pytest
import torch

# Two cores, several test processes in CI: one thread each keeps runs fast and results deterministic.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
