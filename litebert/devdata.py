"""Where the developers' public-domain data lives: `shared/data` beside the repository (as on every
developer machine and in CI), or $LITEBERT_SHARED_DATA. For tests, bench/ and scripts/ only: the library
itself reads the paths it is given, and the demo reads the data bundled with it."""

import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("LITEBERT_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
