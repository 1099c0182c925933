"""Sweeps: kmax values × deployments × time segments as independent tasks writing one dataset.

A task is one ``(kmax, deployment, segment)``.  It rebuilds the scenario's shared parts from the
same trace files, simulates its segment (:mod:`simulator.segments`) and streams its tables into one
Hive-partitioned Parquet dataset::

    OUT/deliveries/kmax=K/deployment=D/segment=S/part-0.parquet
    OUT/bandwidth/kmax=K/deployment=D/segment=S/part-0.parquet

and returns its summary (counts, sums and the latency histogram), which :func:`merge` adds up per
``(kmax, deployment)``.  Tasks run in local worker processes (``replicast simulate --segments N``)
or as Spark tasks (``--spark``, :mod:`simulator.spark`); the dataset is the same either way.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.parquet as pq

from replicast.simulator import latency
from replicast.simulator.segments import Segment, check_segmentable, default_warmup_us, grid_us, plan

TABLES = ("deliveries", "bandwidth")


@dataclass(frozen=True)
class Task:
    """One simulation of a sweep."""

    kmax: int
    deployment: str
    segment: Segment

    @property
    def label(self) -> str:
        return f"kmax={self.kmax} {self.deployment} segment {self.segment.index + 1}/{self.segment.count}"

    def partition(self) -> str:
        return f"kmax={self.kmax}/deployment={self.deployment}/segment={self.segment.index}"


def portable(scenario: Any) -> Any:
    """The scenario with every file it names made absolute, for tasks that run in another working
    directory (a Spark executor's).  A trace name that is not a directory here stays a name."""
    from dataclasses import replace

    trace = Path(scenario.trace)
    sources = [replace(s, events=s.events.resolve()) if s.events is not None else s for s in scenario.sources]
    return replace(scenario, path=Path(scenario.path).resolve(), query_path=Path(scenario.query_path).resolve(),
                   trace=str(trace.resolve()) if trace.is_dir() else scenario.trace, sources=sources)


def plan_tasks(prepared: Any, kmax: tuple[int, ...], deployments: tuple[str, ...], segments: int,
               warmup_us: int | None = None) -> tuple[list[Task], int]:
    """The sweep's tasks, longest first (largest kmax, then the later segments, which are no
    shorter), and the warmup used (the scenario's default unless given)."""
    scenario = prepared.scenario
    if segments > 1:
        check_segmentable(prepared.query, f"{scenario.path}")
    if warmup_us is None:
        warmup_us = default_warmup_us(scenario, prepared.query, prepared.trace, list(prepared.servers.values()),
                                      prepared.start, prepared.end, prepared.origin) if segments > 1 else 0
    parts = plan(prepared.start, prepared.end, segments, warmup_us, grid_us(scenario))
    tasks = [Task(k, d, s) for k in kmax for d in deployments for s in parts]
    tasks.sort(key=lambda t: (-t.kmax, -(t.segment.stop - t.segment.warm)))
    return tasks, warmup_us


_PREPARED: dict[Any, Any] = {}       # per process: the scenario's shared parts, built once


def prepared_for(scenario: Any) -> Any:
    """The scenario's :class:`~simulator.run.Prepared`, reused by the tasks a worker runs."""
    from replicast.simulator.run import Prepared

    key = (str(scenario.path), scenario.trace, scenario.duration_s, scenario.start_s)
    if key not in _PREPARED:
        _PREPARED.clear()                # one at a time: each holds trace chunks
        _PREPARED[key] = Prepared(scenario)
    return _PREPARED[key]


def run_task(scenario: Any, task: Task, out: Path, *, prepared: Any = None,
             on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Simulate ``task`` and write its partition of the dataset; its summary with the totals
    :func:`merge` needs (``_histogram``: sparse latency histogram)."""
    from replicast.simulator.run import run

    prepared = prepared or prepared_for(scenario)
    work = Path(out) / "_tasks" / task.partition().replace("/", "-")
    shutil.rmtree(work, ignore_errors=True)
    cpu = time.process_time()
    result = run(prepared, task.kmax, segment=task.segment, sink=work, deployment=task.deployment,
                 on_progress=on_progress)
    for table in TABLES:
        target = Path(out) / table / task.partition() / "part-0.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(work / f"{table}.parquet", target)
    shutil.rmtree(work, ignore_errors=True)
    totals = result.recorder.totals
    used = np.nonzero(totals.histogram.counts)[0]
    summary = dict(result.summary)
    summary.update(deployment=task.deployment, peak_rss_mb=_peak_rss_mb(), cpu_s=round(time.process_time() - cpu, 3), _histogram=[used.tolist(), totals.histogram.counts[used].tolist()],
                   _latency_sum=totals.latency_sum, _latency_max=totals.latency_max, _data=list(totals.data), _control_bytes=totals.control_bytes)
    return summary


def merge(out: Path, summaries: list[dict[str, Any]], scenario: Any,
          span_s: float) -> tuple[list[dict[str, Any]], list[latency.Histogram]]:
    """One summary per ``(kmax, deployment)`` from its segments' summaries, with exact latency
    quantiles from the dataset's files (:func:`simulator.latency.quantiles`); and its histogram."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for s in summaries:
        groups.setdefault((s["kmax"], s["deployment"]), []).append(s)
    runs, histograms = [], []
    for (k, deployment), parts in sorted(groups.items()):
        parts.sort(key=lambda s: s["segment"]["index"])
        totals = _Totals(parts)
        folder = Path(out) / "deliveries" / f"kmax={k}" / f"deployment={deployment}"
        per_app: dict[str, int] = {}
        for s in parts:
            for app, n in s["per_app"].items():
                per_app[app] = per_app.get(app, 0) + n
        runs.append(run_entry(parts, totals, per_app, scenario, span_s,
                              latency_columns(sorted(folder.glob("segment=*/*.parquet")))))
        histograms.append(totals.histogram)
    return runs, histograms


def run_entry(parts: list[dict[str, Any]], totals: Any, per_app: dict[str, int], scenario: Any, span_s: float,
              columns) -> dict[str, Any]:
    """The ``summary.json`` entry of one ``(kmax, deployment)``: event-loop figures from its task
    summaries ``parts``, outputs from ``totals`` (``delivered``, ``histogram``, ``latency_sum``,
    ``latency_max``, ``data`` = records, bytes, cost of data streams, ``control_bytes``) and
    ``columns`` (its latencies once more, for the exact quantiles)."""
    from replicast.simulator.run import latency_summary

    return {
        "kmax": parts[0]["kmax"], "deployment": parts[0]["deployment"], "segments": len(parts),
        "completed": all(s["completed"] for s in parts),
        "simulated_s": round(sum(s["simulated_s"] for s in parts), 3),
        "wall_s": round(sum(s["wall_s"] for s in parts), 3),
        "hops": sum(s["hops"] for s in parts), "messages": sum(s["messages"] for s in parts),
        "delivered": totals.histogram.total, "per_app": dict(sorted(per_app.items())),
        "latency_ms": latency_summary(totals, columns),
        "records_sent": int(totals.data[0]), "bytes_sent": int(totals.data[1] + totals.control_bytes),
        "data_bytes_sent": int(totals.data[1]),
        "network_cost": round(float(totals.data[2]) * scenario.bucket_s / span_s, 3),
        "dead_letters": sum(s["dead_letters"] for s in parts),
        "dead_letter_reasons": dict(sum((Counter(s.get("dead_letter_reasons", {})) for s in parts), Counter())
                                    .most_common()),
        "peak_rss_mb": max((s.get("peak_rss_mb") or 0) for s in parts),
        "warmup_s": round(max(s["segment"]["begin_us"] - s["segment"]["warm_us"] for s in parts) / 1e6, 3),
        "placement": parts[0]["placement"],
    }


class _Totals:
    """The recorder's :class:`~simulator.recorder.Totals`, added up from task summaries."""

    def __init__(self, parts: list[dict[str, Any]]):
        self.histogram = latency.Histogram()
        self.latency_sum, self.latency_max, self.data, self.control_bytes = 0, None, [0, 0, 0.0], 0
        for s in parts:
            bins, counts = s["_histogram"]
            np.add.at(self.histogram.counts, np.array(bins, dtype=np.int64), np.array(counts, dtype=np.int64))
            self.latency_sum += s["_latency_sum"]
            if s["_latency_max"] is not None:
                self.latency_max = max(self.latency_max or 0, s["_latency_max"])
            self.data = [a + b for a, b in zip(self.data, s["_data"])]
            self.control_bytes += s["_control_bytes"]
        self.delivered = self.histogram.total


def _peak_rss_mb() -> float | None:
    """This process's peak resident memory so far (the worker that ran the task), in MB."""
    try:
        import resource
    except ImportError:                      # not on Windows
        return None
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)    # KB on Linux


def latency_columns(files: list[Path]):
    """The ``latency_us`` column of ``files``, a row group at a time."""
    for path in files:
        with pq.ParquetFile(path) as file:
            for group in range(file.num_row_groups):
                yield file.read_row_group(group, columns=["latency_us"]).column(0).to_numpy()


def public(summary: dict[str, Any]) -> dict[str, Any]:
    """A task summary without the totals only :func:`merge` reads."""
    return {k: v for k, v in summary.items() if not k.startswith("_")}

