import os
import tempfile

import pytest
import torch

# Two cores, several test processes in CI: one thread each keeps runs fast and results deterministic.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# litebert.runtime.gemm caches its measured GEMM choice per machine: the tests' choices stay out of the user's home.
os.environ.setdefault("LITEBERT_CACHE_DIR", tempfile.mkdtemp(prefix="litebert-test-cache-"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
