"""The tests' handle on the developers' shared data (litebert.devdata: shared/data beside the repository,
or LITEBERT_SHARED_DATA)."""

from litebert.devdata import SHARED_DATA

__all__ = ["SHARED_DATA"]
