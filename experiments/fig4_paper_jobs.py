"""``fig4 --paper-scale --jobs N``: the configurations of :mod:`experiments.fig4_paper` split over
``N`` worker processes (``spawn``), each running the timing tier's window loop
(:func:`simulator.timing.run_configs`) for its share over the same trace and scenario.

The parent places every configuration once (the placement network reads frames across the whole
trace) and sends each worker its configurations' placements, so a worker
repeats only what every window needs: the trace's frames (a synthetic month is generated again in
each worker, :class:`traces.synth_store.SynthStore`) and the window's content (the Fig. 1 query's rows
with lineage).  A configuration's sink does not depend on which others share its process, so the
merged rows are the ones one process computes (tests/simulator/test_timing_paper.py checks the
outputs byte for byte).

Shares are balanced by a cost per configuration proportional to kmax (each sink's wall time over
three simulated hours of 100 servers in one process, load ~8: random 0.10, 0.14, 0.24, 0.31, 0.43 s
and min-cost 0.06, 0.15, 0.17, 0.26, 0.31 s at kmax 1–5); ties keep the sweep's order, so with two
workers one gets the random deployments and the other the min-cost ones, kmax 1–5 each
(``run_configs`` over those three hours took 1.04 and 0.94 CPU s for the two shares, 1.98 together
against 2.01 for all ten at once: splitting this way loses none of the sharing between
configurations).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import queue
import resource
import time
from pathlib import Path
from typing import Any

from replicast.operators.errors import ReplicastError
from replicast.simulator.timing_sink import Sink

#: The progress queue of this worker process (set by :func:`_start`).
_progress: Any = None


def default_jobs(configs: int) -> int:
    """The machine's cores this process may use, at most one per configuration."""
    return max(1, min(len(os.sched_getaffinity(0)), configs))


def shares(kmaxes: list[int], jobs: int) -> list[list[int]]:
    """Indices of the configurations (by their kmax) for each of ``jobs`` workers: the costliest
    first onto the least loaded worker (cost ∝ kmax), ties in the sweep's order."""
    load = [0] * jobs
    out: list[list[int]] = [[] for _ in range(jobs)]
    for i in sorted(range(len(kmaxes)), key=lambda i: (-kmaxes[i], i)):
        worker = min(range(jobs), key=lambda w: (load[w], w))
        load[worker] += kmaxes[i]
        out[worker].append(i)
    return [sorted(share) for share in out if share]


def peak_rss_mb() -> float:
    """This process's peak resident set (MB): ``VmHWM`` of /proc/self/status (getrusage's
    ru_maxrss survives exec, so a spawned worker would report its parent's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_shares(scenario_path: Path, store_args: dict | None, configs: list[Any], jobs: int,
               thresholds_us: tuple[int, ...], on_window: Any = None) -> tuple[list[Any], list[dict]]:
    """Time ``configs`` (:class:`~simulator.timing.Deployed`) in ``jobs`` processes; returns their
    sinks (the counts, histogram and network cost each worker's sink kept) in the order of
    ``configs`` and per worker its CPU seconds, peak RSS (MB) and share.
    ``on_window(done_us)`` gets the least simulated time any worker has done."""
    parts = shares([c.kmax for c in configs], jobs)
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    done = [0] * len(parts)
    sinks: list[Any] = [None] * len(configs)
    workers: list[dict] = [{} for _ in parts]
    with concurrent.futures.ProcessPoolExecutor(len(parts), mp_context=context, initializer=_start,
                                                initargs=(progress,)) as pool:
        futures = {pool.submit(_share, w, str(scenario_path), store_args,
                               [(configs[i].kmax, configs[i].deployment, configs[i].placement) for i in part],
                               thresholds_us): w for w, part in enumerate(parts)}
        pending = set(futures)
        try:
            while pending:
                finished, pending = concurrent.futures.wait(pending, timeout=0.5,
                                                            return_when=concurrent.futures.FIRST_COMPLETED)
                _drain(progress, done, on_window)
                for future in finished:
                    w = futures[future]
                    try:
                        got, cpu, rss = future.result()       # a worker's error is the sweep's
                    except concurrent.futures.process.BrokenProcessPool:
                        raise ReplicastError(f"fig4 --paper-scale --jobs {jobs}: a worker process ended without "
                                             f"a result (killed, e.g. out of memory?); --jobs 1 runs every "
                                             f"configuration in this process") from None
                    for i, (sent, totals, exceed) in zip(parts[w], got):
                        sinks[i] = sink = Sink(configs[i], keep=False, thresholds_us=thresholds_us)
                        sink.config.sent, sink.totals, sink.exceed = sent, totals, exceed
                    workers[w] = {"cpu_s": cpu, "peak_rss_mb": rss,
                                  "configs": [(configs[i].deployment, configs[i].kmax) for i in parts[w]]}
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return sinks, workers


def _drain(progress: Any, done: list[int], on_window: Any) -> None:
    moved = False
    while True:
        try:
            w, done_us = progress.get_nowait()
        except queue.Empty:
            break
        done[w], moved = done_us, True
    if moved and on_window is not None:
        on_window(min(done))


def _start(progress: Any) -> None:
    global _progress
    _progress = progress


def _share(worker: int, scenario_path: str, store_args: dict | None, configs: list[tuple[int, str, dict]],
           thresholds_us: tuple[int, ...]) -> tuple[list[tuple], float, float]:
    """One worker: the scenario and trace opened again, its configurations ``(kmax, deployment,
    placement)`` timed window by window; per configuration its network cost, totals and counts over
    the thresholds."""
    from replicast.simulator.run import Prepared
    from replicast.simulator.scenario import load_scenario
    from replicast.simulator.timing import deployed, run_configs
    from replicast.traces.synth_store import SynthStore

    store = SynthStore(**store_args) if store_args is not None else None
    prepared = Prepared(load_scenario(Path(scenario_path)), store)
    configs = [deployed(prepared, k, kind, placement) for k, kind, placement in configs]

    def on_window(done_us: int, total_us: int) -> None:
        _progress.put((worker, done_us))

    sinks = run_configs(prepared, configs, keep=False, thresholds_us=thresholds_us, on_window=on_window)
    # the worker's CPU since it started (its imports included): CLOCK_PROCESS_CPUTIME_ID counts from the fork
    return [(s.config.sent, s.totals, s.exceed) for s in sinks], round(time.process_time(), 1), peak_rss_mb()
