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
# remote-code tokenizers that tests load with trust_remote_code are copied here, not into ~/.cache
os.environ.setdefault("HF_MODULES_CACHE", tempfile.mkdtemp(prefix="litebert-test-hf-modules-"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# Tests marked `gpu` run on CUDA; without a GPU they are skipped, saying so. tests/test_gpu.py's code can still be
# exercised on the CPU: LITEBERT_GPU_TESTS_DEVICE=cpu runs that file there (a check of the tests, not of a GPU).
GPU_TESTS_DEVICE = os.environ.get("LITEBERT_GPU_TESTS_DEVICE", "cuda")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not (GPU_TESTS_DEVICE == "cpu" and item.path.name == "test_gpu.py"):
            item.add_marker(skip)
