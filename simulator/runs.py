"""Simulate a scenario at each of its kmax values, in worker processes or one after the other.

Each kmax run is independent, so each runs in a worker process of its own (``--jobs``) and writes
its own ``k<K>/`` files (deliveries, bandwidth, ``summary.json``), returning an :class:`Outcome`.
``replicast simulate`` (:mod:`experiments.simulate_cli`) and ``replicast experiment``
(:mod:`experiments.simulations`) run their simulations through :func:`simulate_runs`; what spans the
runs (ratios, plots) is theirs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import queue
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicast.operators.errors import ReplicastError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("replicast.simulate")

@dataclass
class Outcome:
    """What a simulation keeps of one run once its ``k<K>/`` files are written."""

    summary: dict[str, Any]
    latency: np.ndarray               # µs, the run's curve in latency.png: a sample read off its histogram
    mismatched: list[str] | None      # with --check: applications that did not get the reference


class _Stopped(Exception):
    """Raised in a worker's progress callback once the parent has given up (another run failed)."""


def simulate_runs(prepared: Any, out: Path, *, jobs: int | None = None, check: bool = False,
                  progress: bool = True, trace_queries: Sequence[tuple[str, str]] = ()) -> Iterator[Outcome]:
    """Every kmax of ``prepared.scenario``: up to ``jobs`` (default: the CPUs) at once in worker
    processes, or one after the other here if that is 1; each writes ``out/k<K>/``.  The outcomes
    in the scenario's kmax order (``replicast experiment`` runs its simulations through this too).
    ``trace_queries`` (``(id, text)``) are answered in ``out/k<K>/trace-queries.json``."""
    jobs = min(jobs or cpus(), len(prepared.scenario.kmax))
    if jobs == 1:
        yield from (simulate_one(prepared, k, out, check, progress=progress, trace_queries=trace_queries)
                    for k in prepared.scenario.kmax)
    else:
        yield from _in_workers(prepared.scenario, jobs, out, check, progress=progress, trace_queries=trace_queries)


def simulate_one(prepared: Any, k: int, out: Path, check: bool, *, progress: bool = False,
                 on_progress: Callable[[int, int], None] | None = None,
                 trace_queries: Sequence[tuple[str, str]] = ()) -> Outcome:
    """Run ``prepared`` at kmax ``k``, write ``out/k<k>/`` and, with ``check``, compare every
    application's output with the non-replicated ``engine.replay`` of the same input."""
    from replicast.engine.replay import replay
    from replicast.simulator.run import run as simulate
    from replicast.simulator.sweep_local import curve_sample

    log.info("kmax=%d: run started", k)
    wall = time.perf_counter()
    # Streamed to out/k<k>/ as it is made (Recorder's sink): memory stays flat whatever the run's length.
    result = simulate(prepared, k, keep_records=check, progress=progress, on_progress=on_progress,
                      sink=out / f"k{k}", trace_queries=trace_queries)
    if result.trace:
        (out / f"k{k}" / "trace-queries.json").write_text(json.dumps(result.trace, indent=2) + "\n", encoding="utf-8")
    coordinator = prepared.scenario.coordinator
    if coordinator is not None and coordinator.compare_static:
        log.info("kmax=%d: the same deployment without the coordinator, for comparison", k)
        static = simulate(prepared, k, progress=progress, on_progress=on_progress, coordinator=False,
                          sink=out / f"k{k}" / "static")
        result.summary["static"] = {key: static.summary[key] for key in
                                    ("delivered", "latency_ms", "records_sent", "network_cost", "cost_over_time")}
    mismatched = None
    if check:
        reference = replay(prepared.query, result.inputs, replicas=1,
                           punctuation_us=round(prepared.scenario.punctuation_ms * 1000))
        mismatched = [app for app, records in reference.outputs.items()
                      if Counter(records) != Counter(result.recorder.outputs[app])]
        result.summary["equals_reference"] = not mismatched
    (out / f"k{k}" / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8")
    log.info("kmax=%d: run finished in %.1f s wall (%.0f simulated s, %d records delivered)", k,
             time.perf_counter() - wall, result.summary["simulated_s"], result.summary["delivered"])
    return Outcome(result.summary, curve_sample(result.recorder.totals.histogram), mismatched)


def _in_workers(scenario: Any, jobs: int, out: Path, check: bool, progress: bool,
                trace_queries: Sequence[tuple[str, str]] = ()) -> list[Outcome]:
    """Each kmax in a worker process of its own; the outcomes in ``scenario.kmax`` order.

    Workers send progress ``(index, done_s, total_s)`` and their log records through one Manager
    queue; this process owns every bar and every log handler, so only one process writes to the
    terminal.  A run's bar appears when it starts, on the lowest free line (tqdm's own position
    bookkeeping, which works because all bars live in this process), and is removed when the run
    ends: closing a positioned bar with ``leave=True`` would print it over the top bar.  The log
    line "kmax=K: run finished in … s wall" stays instead.  Bars are shown only on a terminal:
    positioned bars move the cursor with escape codes, which a CI log would keep as garbage; there
    the start and finish log lines are the progress.  The first failure (e.g. a ScenarioError) is
    re-raised here as itself, so ``replicast`` prints its one line and exits 2; the other runs stop
    at their next progress report.
    """
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from tqdm.contrib.logging import logging_redirect_tqdm

    # "spawn", not "fork": by now this process has imported numpy and pyarrow (simulator.run) and
    # may run their thread pools; fork copies only the calling thread, so a lock another thread
    # held stays locked in the child for ever (CPython warns about forking a threaded process
    # from 3.12 and stops defaulting to fork in 3.14).  A spawned worker is a fresh interpreter:
    # it rebuilds Prepared(scenario) (~1 s with the imports, against runs of seconds to hours) and
    # behaves the same on Linux, macOS and Windows.  "forkserver" would save that second at best
    # and does not exist on Windows.
    context = multiprocessing.get_context("spawn")
    show = progress and sys.stderr.isatty()
    bars: dict[int, Any] = {}
    redirect = logging_redirect_tqdm() if show else contextlib.nullcontext()
    with context.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=context) as pool, redirect:
        reports, stop = manager.Queue(), manager.Event()
        # A worker filters its records as this process would: by root's level and this logger's.
        levels = {name: logging.getLogger(name).getEffectiveLevel() for name in ("", log.name)}
        # Largest kmax first: it runs longest (every stream has more replicas to send to), so with
        # fewer workers than runs the small ones fill in beside it instead of queueing behind the
        # others (sim-fig1 on 2 cores: 14.8 s; submitted in kmax order, 3 waited for 1: 18.4 s).
        order = sorted(range(len(scenario.kmax)), key=lambda i: -scenario.kmax[i])
        submitted = {i: pool.submit(_work, scenario, i, scenario.kmax[i], out, check, reports, stop, levels,
                                 trace_queries)
                     for i in order}
        futures = [submitted[i] for i in range(len(scenario.kmax))]
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
                _forward(reports, bars, scenario.kmax, show)
                for future in finished:
                    error = future.exception()
                    if isinstance(error, BrokenProcessPool):
                        raise ReplicastError(f"a worker process died ({error}); if it ran out of memory, "
                                             f"--jobs 1 runs one kmax at a time") from error
                    if error is not None:
                        raise error
            _forward(reports, bars, scenario.kmax, show)
            return [future.result() for future in futures]
        except BaseException:
            with contextlib.suppress(Exception):       # the manager may be gone already (Ctrl-C)
                stop.set()
            pool.shutdown(cancel_futures=True)
            raise
        finally:
            for i in sorted(bars):
                bars[i].close()


def _forward(reports: Any, bars: dict[int, Any], kmax: tuple[int, ...], show: bool) -> None:
    """Hand the workers' log records to this process's handlers and move their bars."""
    from tqdm import tqdm

    while True:
        try:
            item = reports.get_nowait()
        except queue.Empty:
            return
        if isinstance(item, logging.LogRecord):
            logging.getLogger(item.name).handle(item)
            continue
        index, done_s, total_s = item
        bar = bars.get(index)
        if bar is None:
            bar = bars[index] = tqdm(total=total_s, desc=f"kmax={kmax[index]}", unit="sim s", leave=False,
                                     disable=not show)
        bar.update(done_s - bar.n)
        if done_s == total_s:
            bar.close()


def _work(scenario: Any, index: int, k: int, out: Path, check: bool, reports: Any, stop: Any,
          levels: dict[str, int], trace_queries: Sequence[tuple[str, str]] = ()) -> Outcome:
    """One run in a worker process: build the shared parts, simulate, write, check."""
    from replicast.simulator.run import Prepared

    logging.getLogger().handlers[:] = [logging.handlers.QueueHandler(reports)]   # to _forward
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)

    def report(done_s: int, total_s: int) -> None:
        if stop.is_set():
            raise _Stopped(f"kmax={k}: stopped because another run failed")
        reports.put((index, done_s, total_s))

    return simulate_one(Prepared(scenario), k, out, check, on_progress=report, trace_queries=trace_queries)


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))     # the CPUs this process may use (Linux)
    except AttributeError:
        return os.cpu_count() or 1
