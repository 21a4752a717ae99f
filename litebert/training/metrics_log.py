"""A run's metrics: `metrics.jsonl` (one JSON record per logged step or evaluation) and `metrics.png`, and
TensorBoard event files in `tensorboard/` when the `tensorboard` package is installed (`pip install
litebert[tensorboard]`; `tensorboard --logdir OUT_DIR`), each number of a record as a scalar at its step.

Records are appended as the run goes, so a kill loses at most the line being written; a resumed run first
drops the records after the step it resumes from, so each step is logged once (TensorBoard's events after it
are purged too). Baselines a verb wants drawn beside its curves go in `references.json` ({metric: {label:
value}}) in the same directory.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from litebert.files import save_figure, write_text_atomically

log = logging.getLogger("litebert")

METRICS_NAME, PLOT_NAME, REFERENCES_NAME = "metrics.jsonl", "metrics.png", "references.json"
PLOT_INTERVAL_S = 30.0  # between drawings of metrics.png at saves (evaluations and the last step always draw)
TENSORBOARD_DIR = "tensorboard"
MAX_EVENT_NAME_WAIT_S = 2.0  # the longest a new TensorBoard event file waits for a later name (see below)


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class MetricsLog:
    """The metrics file of one run, with the steps seen since the last record (for averages and tokens/s).

    Only the main process writes: on other ranks `write` and `plot` do nothing, so callers need not ask.
    tensorboard: also write TensorBoard events (None: when the package is installed)."""

    def __init__(self, out_dir: str | os.PathLike, writes: bool, tensorboard: bool | None = None):
        self.path = Path(out_dir) / METRICS_NAME
        self.writes = writes
        self.tensorboard = tensorboard_installed() if tensorboard is None else tensorboard
        self._window = _Window()
        self._events = None  # the SummaryWriter, made at the first record
        self._purge_step: int | None = None
        self._replay: list[dict[str, Any]] = []  # records the purge takes and the resume keeps (restart_at)
        self._plotted_at = -math.inf  # time.monotonic() of the last plot

    def restart_at(self, step: int, *, evaluated: bool = True) -> None:
        """Keep the records up to `step`: what a crashed run logged after its last checkpoint is redone. With
        evaluated=False (the checkpoint holds no record of its evaluation: a kill after logging it and before
        recording it), the evaluation logged at `step` is dropped too, as the resume evaluates that step again."""
        if self.writes:
            records = [r for r in read_metrics(self.path)
                       if r["step"] < step or (r["step"] == step and (evaluated or not is_evaluation(r)))]
            write_text_atomically(self.path, "".join(json.dumps(r) + "\n" for r in records))  # a kill keeps it
            # TensorBoard purges whole steps: one redone evaluation purges its step, whose kept records return.
            self._purge_step = step + 1 if evaluated else step
            self._replay = [] if evaluated else [r for r in records if r["step"] == step]

    def add_step(self, loss: float, tokens: float, seconds: float) -> None:
        self._window.add(loss, tokens, seconds)

    @property
    def window(self) -> _Window:
        """The steps since the last record: checkpointed with the run, so that the first record after a resume
        averages the whole interval, as the uninterrupted run's does."""
        return self._window

    def log_steps(self, step: int, **extra: float) -> dict[str, Any]:
        """Write the mean loss and tokens/s of the steps since the last call, with `extra`; returns the record."""
        record = {"step": step, "loss": self._window.mean_loss(), **extra,
                  "tokens_per_s": self._window.tokens_per_s()}
        self._window.reset()
        self.write(record)
        return record

    def write(self, record: dict[str, Any]) -> None:
        if self.writes:
            with open(self.path, "a") as fh:
                fh.write(json.dumps(record) + "\n")
            if self.tensorboard:
                self._write_events(record)

    def _write_events(self, record: dict[str, Any]) -> None:
        if self._events is None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            directory = self.path.with_name(TENSORBOARD_DIR)
            wait_for_a_later_event_file_name(directory)
            self._events = SummaryWriter(str(directory), purge_step=self._purge_step)
            for kept in self._replay:
                self._add_scalars(kept)
        self._add_scalars(record)
        self._events.flush()  # records are few (one per logging interval): each is on disk as in metrics.jsonl

    def _add_scalars(self, record: dict[str, Any]) -> None:
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._events.add_scalar(key, value, record["step"])

    def plot(self, *, now: bool = True) -> None:
        """Redraw metrics.png; with now=False only if the last drawing is PLOT_INTERVAL_S old. A drawing takes
        ~0.4 s, so a run saving every few steps would otherwise spend nearly half its time plotting."""
        if self.writes and (now or time.monotonic() - self._plotted_at >= PLOT_INTERVAL_S):
            plot_metrics(self.path, self.path.with_name(PLOT_NAME))
            self._plotted_at = time.monotonic()


class _Window:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss, self.steps, self.tokens, self.seconds = 0.0, 0, 0.0, 0.0

    def state_dict(self) -> dict[str, float]:
        return {"loss": self.loss, "steps": self.steps, "tokens": self.tokens, "seconds": self.seconds}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.loss, self.steps = float(state["loss"]), int(state["steps"])
        self.tokens, self.seconds = float(state["tokens"]), float(state["seconds"])

    def add(self, loss: float, tokens: float, seconds: float) -> None:
        self.loss, self.steps = self.loss + loss, self.steps + 1
        self.tokens, self.seconds = self.tokens + tokens, self.seconds + seconds

    def mean_loss(self) -> float:
        return self.loss / self.steps

    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def is_evaluation(record: dict[str, Any]) -> bool:
    return any(key.startswith("eval_") for key in record)


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of metrics.jsonl; a line torn by a kill mid-append is dropped, not fatal to a resume."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def plot_metrics(metrics_path: str | os.PathLike, png_path: str | os.PathLike) -> None:
    """Loss, lr and every eval metric against step, one panel each, as a PNG (Agg canvas: no display, no
    pyplot global state). Baselines in references.json beside the metrics are drawn as labelled dashed lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_metrics(metrics_path)
    references = _read_references(Path(metrics_path).with_name(REFERENCES_NAME))
    keys = ["loss", "lr"] + sorted({k for r in records for k in r if k.startswith("eval_")})
    series = {k: [(r["step"], r[k]) for r in records if isinstance(r.get(k), (int, float))] for k in keys}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return
    cols = min(3, len(series))
    rows = math.ceil(len(series) / cols)
    # Fixed margins rather than layout="constrained": the panels are alike, and constrained layout's solver
    # took as long as drawing them (a second per plot, paid by every short run).
    fig = Figure(figsize=(4.5 * cols, 3.2 * rows))
    fig.subplots_adjust(left=0.22 / cols + 0.04, right=0.98, bottom=0.45 / (3.2 * rows) + 0.05,
                        top=1 - 0.3 / (3.2 * rows), wspace=0.35, hspace=0.55)
    FigureCanvasAgg(fig)
    for i, (key, points) in enumerate(series.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if key.startswith("eval_") or len(xs) == 1 else None, markersize=3)
        for j, (label, value) in enumerate(references.get(key, {}).items()):
            ax.axhline(value, linestyle="--", linewidth=1, color=f"C{j + 1}", label=label)
        if references.get(key):
            ax.legend(fontsize=7)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    save_figure(fig, png_path, dpi=90)


def _read_references(path: Path) -> dict[str, dict[str, float]]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:  # torn by a kill mid-write: the plot goes without its baselines
        return {}


def wait_for_a_later_event_file_name(directory: Path) -> None:
    """TensorBoard reads a run's event files in name order, and a name is the second it was made in, then a
    per-process counter that sorts as text (counter 10 before 9). A file made in the same second as an earlier
    one could be read first, and then a resume's purge drops the wrong steps (a flaky test showed it). So a new
    file waits for the next second when one from this second exists (resumes only: at most a second).
    A file dated further ahead was made by a clock ahead of this one (another machine, a clock set back): no
    wait of this length is worth it (an hour ahead would be an hour's sleep), so it is named in a warning."""
    stamps = [int(p.name.split(".")[3]) for p in directory.glob("events.out.tfevents.*")
              if len(p.name.split(".")) > 3 and p.name.split(".")[3].isdigit()]
    wait = max(stamps, default=-math.inf) + 1 - time.time()
    if wait > MAX_EVENT_NAME_WAIT_S:
        log.warning("%s holds TensorBoard events dated %.0f s ahead of this clock: TensorBoard may read this "
                    "run's new events before them", directory, wait - 1)
    elif wait > 0:
        time.sleep(wait)
