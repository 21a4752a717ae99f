"""A grid's row runs as child processes: how a verb is started (alone or under torchrun), the heartbeat that
says where a child is, the threads it gets, the time a run takes over all its attempts, and several chains of runs
at once (`litebert reproduce --jobs`).

Each row is a recipe (the TOML `litebert pretrain --config` reads) run by the verb itself in its own process:
the paper scale writes the same recipes without running them, a stage imports no verb, and a row that dies
takes nothing of the grid with it. Nothing here knows what a row is; reproduce.py says what to run."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from litebert.errors import LitebertError
from litebert.files import write_json
from litebert.paper.experiments import Row
from litebert.paper.grid import Grid, read_json
from litebert.training.metrics_log import METRICS_NAME, read_metrics

# Tests swap the command (e.g. to inject a crash into the child) and shorten the heartbeat.
VERB_COMMAND = [sys.executable, "-m", "litebert.cli"]
HEARTBEAT_SECONDS = 60.0
LEDGER_SECONDS = 30.0


def verb_command(nproc: int) -> list[str]:
    """How a row's training verb is started: itself, or under torchrun with `nproc` processes. --standalone
    picks a free rendezvous port, so two grids on one machine do not meet; the batch sizes of a recipe are
    global, so a row trains on the same examples whatever `nproc` is."""
    if nproc == 1:
        return VERB_COMMAND
    return [VERB_COMMAND[0], "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            *VERB_COMMAND[1:]]


@dataclasses.dataclass(frozen=True)
class Lane:
    """Where a row's children run when several rows train at once (--jobs): the name their heartbeat lines
    carry, and the threads each child gets (None: the process's own setting)."""

    tag: str = ""
    threads: int | None = None

    def env(self) -> dict[str, str] | None:
        return None if self.threads is None else {**os.environ, "OMP_NUM_THREADS": str(self.threads)}

    @property
    def thread_count(self) -> int:
        """The threads a child in this lane runs with: its share, else the user's OMP_NUM_THREADS, else every
        core this process may use."""
        return self.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or usable_cores()


ALONE = Lane()


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says, else the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def shared_threads(processes: int) -> int | None:
    """Each of `processes` children's share of this process's cores; None when the user set OMP_NUM_THREADS
    (their choice stands) or there is nothing to share."""
    if processes == 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    return max(1, usable_cores() // processes)


def crowding(threads: int) -> str | None:
    """A warning when the machine already runs other work (its 1-minute load) and the grid's `threads` in all
    would not fit beside it: OpenMP threads that outnumber the free cores wait on each other, and a row then
    trains several times slower (8x seen: 2 threads beside a busy core) with nothing else to show it."""
    if not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], usable_cores()
    if threads <= cores - round(load):
        return None
    return (f"the machine's 1-minute load is {load:.1f} on {cores} core(s) before this grid's {threads} thread(s) "
            "start: they will wait on the other work and train slower than their timings should say; set "
            "OMP_NUM_THREADS (threads per run) and --jobs to fit the free cores, or run the grid alone")


def lane_for(grid: Grid, parallel: int, row: Row | None = None, seed: int | None = None) -> Lane:
    """The lane of a row run among `parallel` at once: ALONE for one run of one process; else the machine's cores
    shared among the runs and their torchrun processes (an OMP_NUM_THREADS of the user's is kept), and with
    several runs, the row's name on its lines."""
    processes = parallel * grid.cfg.nproc_per_node
    if processes == 1:
        return ALONE
    return Lane(f"{row.name}, seed {seed}: " if parallel > 1 and row is not None else "", shared_threads(processes))


# The children alive now, so that an interrupt of the grid (while several run in threads) can stop them all.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def run_verb(verb: str, args: list[str], log_path: str, nproc: int = 1,
             progress: tuple[str, int] | None = None, lane: Lane = ALONE) -> None:
    """`litebert VERB ARGS` in a child process (`nproc` of them under torchrun), its output in `log_path`; a
    failure names the log. `progress`: the child's run directory and its last step, for the heartbeat."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    started, seen = time.time(), []
    attempt_starts = os.path.getsize(log_path) if os.path.isfile(log_path) else 0  # the log keeps every attempt
    with open(log_path, "a") as log:
        child = subprocess.Popen(verb_command(nproc) + [verb, *args], stdout=log, stderr=subprocess.STDOUT,
                                 env=lane.env())
        with _LIVE_LOCK:
            _LIVE.add(child)
        try:
            while True:  # a row takes minutes to an hour: say where it is every HEARTBEAT_SECONDS
                try:
                    code = child.wait(timeout=HEARTBEAT_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    where = _steps_and_time_left(progress, seen) if progress else None
                    print(f"      {lane.tag}{verb}, {minutes(time.time() - started)} in: "
                          f"{where or _last_line(log_path)}", flush=True)
        except BaseException:
            child.kill()
            child.wait()
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(child)
    if code == -signal.SIGINT or code == 130:
        raise KeyboardInterrupt
    if code != 0:
        raise LitebertError(f"litebert {verb} exited with {code}: {_why_failed(log_path, attempt_starts)} "
                            f"(log: {log_path})")


class TimeLedger:
    """The wall-clock seconds a run has taken over every attempt, kept in `path`: a grid killed and started again
    resumes a half-trained run, and its timing must count the first attempt too. Rewritten every LEDGER_SECONDS
    while the run goes on (a kill loses at most that much), read back when the next attempt starts.

        with TimeLedger(row_dir / "spent.json") as ledger:
            ...
        ledger.seconds, ledger.attempts
    """

    def __init__(self, path: str) -> None:
        earlier = read_json(path) or {}
        self.path, self.earlier = path, float(earlier.get("seconds", 0.0))
        self.attempts = int(earlier.get("attempts", 0)) + 1
        self.started, self.ended, self._stop = time.time(), None, threading.Event()
        self._writer = threading.Thread(target=self._keep_writing, daemon=True)

    @property
    def attempt_seconds(self) -> float:
        """This attempt's time so far; once it has ended, up to its end."""
        return (self.ended or time.time()) - self.started

    @property
    def seconds(self) -> float:
        """Every attempt's time so far."""
        return self.earlier + self.attempt_seconds

    def _write(self) -> None:
        write_json(self.path, {"seconds": self.seconds, "attempts": self.attempts})

    def _keep_writing(self) -> None:
        while not self._stop.wait(LEDGER_SECONDS):
            self._write()

    def __enter__(self) -> TimeLedger:
        self._write()
        self._writer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._writer.join()
        self.ended = time.time()
        self._write()


def _kill_live_children() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for child in live:
        child.kill()


def run_chains(chains: Sequence[Sequence[Any]], run_one: Callable[[Any], None], jobs: int) -> None:
    """run_one(item) for every item, each chain's items in order, `jobs` chains at once (in threads: the work
    is in child processes). When an item fails, no new one starts; those running finish (a row is kept, or
    resumes on the next run), then the first failure is raised and the others printed. An interrupt of this
    thread (Ctrl-C, which a terminal also sends the children) kills the children and starts nothing more."""
    failed, errors, lock = threading.Event(), [], threading.Lock()

    def run_chain(chain: Sequence[Any]) -> None:
        for item in chain:
            if failed.is_set():
                return
            try:
                run_one(item)
            except BaseException as error:
                with lock:
                    errors.append(error)
                failed.set()
                return

    pool = concurrent.futures.ThreadPoolExecutor(jobs)
    futures = [pool.submit(run_chain, chain) for chain in chains]
    try:  # waits of a second: a signal's handler runs between them, whichever thread the signal woke
        while concurrent.futures.wait(futures, timeout=1.0).not_done:
            pass
    except BaseException:
        failed.set()
        for future in futures:
            future.cancel()
        _kill_live_children()
        raise
    finally:
        pool.shutdown(wait=True)
    for error in errors[1:]:
        print(f"also failed: {error}", file=sys.stderr, flush=True)
    if errors:
        raise errors[0]


def _last_line(log_path: str) -> str:
    with open(log_path, errors="replace") as f:
        return ([line.strip() for line in f if line.strip()] or ["(no output)"])[-1][:200]


# A verb's own one-line error (litebert.cli), and the first line torchrun adds after its workers' output when one
# fails (its traceback and a report framed in "=====" follow, and say nothing of why).
_VERB_ERROR = re.compile(r"litebert [\w-]+: error: ")
_LAUNCHER_REPORT = re.compile(r"torch[/.]distributed[/.]elastic")


def _why_failed(log_path: str, offset: int) -> str:
    """The line of a failed attempt's output (from `offset` in its log) that says why: the verb's own error, else
    the last line its process wrote (an exception's), not the last of torchrun's report."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if _VERB_ERROR.search(line)]
    launcher = next((i for i, line in enumerate(lines) if _LAUNCHER_REPORT.search(line)), len(lines))
    return (errors or lines[:launcher] or lines or ["(no output)"])[-1][:200]


def _steps_and_time_left(progress: tuple[str, int], seen: list[tuple[float, int]]) -> str | None:
    """The step the run's metrics log has reached, of how many, and the time left at the pace since the first
    heartbeat that saw a step (a resumed run starts at its checkpoint's step); None before the first step."""
    run_dir, last_step = progress
    steps = [r["step"] for r in read_metrics(os.path.join(run_dir, METRICS_NAME)) if "loss" in r]
    if not steps:
        return None
    seen.append((time.time(), steps[-1]))
    (t0, step0), (t1, step1) = seen[0], seen[-1]
    left = f", ~{minutes((last_step - step1) * (t1 - t0) / (step1 - step0))} left" if step1 > step0 else ""
    return f"step {step1} of {last_step}{left}"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
