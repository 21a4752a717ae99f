"""Where the project's shared public-domain data lives: `shared/data` beside the repository (as on every
developer machine and in CI), or LITEBERT_SHARED_DATA."""

import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("LITEBERT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
