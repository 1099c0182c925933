"""Run a sweep's tasks (:mod:`simulator.sweep`) in local worker processes.

One progress bar counts the simulated seconds of all tasks together (a month in 30 segments is
30 tasks of a day each); workers report through a Manager queue after each slice of their event
loop, as :mod:`simulator.runs` does for kmax runs.  :func:`curve_sample` turns a merged histogram
into the sample ``replicast simulate`` plots (:mod:`experiments.simulate_cli` writes a sweep's
``summary.json`` and ``latency.png``).
"""

from __future__ import annotations

import logging
import queue
from pathlib import Path
from typing import Any

import numpy as np

from replicast.simulator import latency
from replicast.simulator.sweep import Task, run_task

log = logging.getLogger("replicast.simulate")

def run_local(scenario: Any, tasks: list[Task], out: Path, jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Every task, at most ``jobs`` at once; their summaries in task order."""
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

    from tqdm import tqdm

    total = sum(round((t.segment.stop - t.segment.warm) / 1e6) for t in tasks)
    context = multiprocessing.get_context("spawn")    # see simulator.runs._in_workers
    done: dict[int, int] = {}
    with context.Manager() as manager, ProcessPoolExecutor(jobs, mp_context=context) as pool, \
            tqdm(total=total, unit="sim s", desc=f"{len(tasks)} tasks", disable=not progress) as bar:
        reports = manager.Queue()
        futures = [pool.submit(_work, scenario, task, out, i, reports) for i, task in enumerate(tasks)]
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                _drain(reports, done, bar)
                for future in finished:
                    if future.exception() is not None:
                        raise future.exception()
            _drain(reports, done, bar)
            return [future.result() for future in futures]
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def _drain(reports: Any, done: dict[int, int], bar: Any) -> None:
    while True:
        try:
            index, done_s = reports.get_nowait()
        except queue.Empty:
            return
        bar.update(done_s - done.get(index, 0))
        done[index] = done_s


def _work(scenario: Any, task: Task, out: Path, index: int, reports: Any) -> dict[str, Any]:
    total = round((task.segment.stop - task.segment.warm) / 1e6)
    return run_task(scenario, task, out, on_progress=lambda done_s, _total: reports.put((index, min(done_s, total))))


def curve_sample(histogram: latency.Histogram, points: int = 200_000) -> np.ndarray:
    """Latencies at ``points`` evenly spaced ranks, read off the histogram (each at its bin's
    upper edge): a sample whose P(latency > x) curve is the histogram's, for plotting."""
    counts = histogram.counts
    n = counts.sum()
    if not n:
        return np.empty(0)
    ranks = np.linspace(0, n - 1, min(points, int(n))).astype(np.int64)
    bins = np.searchsorted(np.cumsum(counts), ranks, side="right")
    return 2.0 ** (bins / latency.PER_OCTAVE)
