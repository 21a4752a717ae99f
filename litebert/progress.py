"""Progress of long work: a tqdm bar on a terminal, plain lines in a log.

tqdm draws nothing when stderr is not a terminal (a log file, CI, `nohup`), so a 45-minute pretraining would
print nothing between its stage headers. There, `progress_bar` gives an object with the bar's methods that
prints one line every `interval` seconds instead: where the work is, its rate, and the time left.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tqdm.auto import tqdm

LOG_INTERVAL = 30.0  # seconds between two lines in a log


class LogLines:
    """The subset of tqdm's interface the loops use, printed as plain lines at most every `interval` s."""

    def __init__(self, total: float | None, desc: str, initial: float = 0, unit: str = "it",
                 interval: float | None = None, stream: TextIO | None = None):
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.interval = LOG_INTERVAL if interval is None else interval
        self.stream = stream or sys.stderr
        self.started, self.start_n, self.last = time.monotonic(), initial, time.monotonic()
        self.postfix: dict[str, Any] = {}

    def update(self, n: float = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.interval:
            self.write()

    def set_postfix(self, **fields: Any) -> None:
        self.postfix = fields

    def write(self) -> None:
        self.last = now = time.monotonic()
        elapsed = now - self.started
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0
        where = f"{self.n:,.0f}/{self.total:,.0f}" if self.total else f"{self.n:,.0f}"
        left = (f", ~{_clock((self.total - self.n) / rate)} left" if self.total and rate > 0 else "")
        extra = "".join(f" {k} {v}" for k, v in self.postfix.items())
        print(f"{self.desc}: {where} {self.unit}, {_clock(elapsed)} elapsed{left}{extra}", file=self.stream,
              flush=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _clock(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"


def progress_bar(total: float | None, desc: str, enabled: bool = True, **kw: Any):
    """tqdm on a terminal, LogLines when stderr is not one, nothing when not `enabled` (another rank, or
    progress turned off)."""
    if not enabled:
        return tqdm(total=total, desc=desc, disable=True, **kw)
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, dynamic_ncols=True, **kw)
    return LogLines(total, desc, kw.get("initial", 0), kw.get("unit", "it"))
