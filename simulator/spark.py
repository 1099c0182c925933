"""``replicast simulate --spark [MASTER]``: a sweep's tasks (:mod:`simulator.sweep`) as Spark tasks.

Every ``(kmax, deployment, segment)`` is one Spark task of one job (one partition each), so Spark
places them on its executors' cores and re-runs none: a simulation that fails fails the sweep
with its own error (``spark.task.maxFailures = 1``).  Executors need only Java and a Python of the
driver's version: replicast and what its tasks import are shipped to them
(:mod:`simulator.spark_ship`), the scenario's query and event files go with the job
(``SparkContext.addFile``), and a task reads the trace and writes its partition of the dataset
through pyarrow's filesystems (:mod:`simulator.spark_files`: a shared path, ``file://`` or an
object store), so nothing big goes through Spark (docs/simulator.md, "On Spark").  The driver
shows one progress bar in finished tasks, read from Spark's status tracker, and then summarises
the dataset with PySpark: counts, sums and the latency histogram as Spark aggregates, and the
exact quantiles from the few values in the histogram bins that hold them
(:func:`simulator.latency.quantiles`), so the summary equals the local one.
"""

from __future__ import annotations

import logging
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from replicast.simulator import latency
from replicast.simulator.spark_files import Location, local_trace
from replicast.simulator.sweep import TABLES, Task, run_entry, run_task

log = logging.getLogger("replicast.simulate.spark")   # shown with the sweep's own log lines


def session(master: str, python: str | None = None):
    """A SparkSession for the sweep whose executors run ``python`` (default: this interpreter's
    path) with replicast and what its tasks import shipped to them (:mod:`simulator.spark_ship`)."""
    from replicast.simulator.spark_ship import executor_config
    from replicast.traces.jobs.session import spark_session

    return spark_session(master, app_name="replicast-simulate", driver_memory="1g", config={
        "spark.task.maxFailures": "1",
        "spark.python.worker.reuse": "true",        # a worker keeps its Prepared trace between tasks
        **executor_config(master, python),
    })


def run_tasks(master: str, scenario: Any, tasks: list[Task], out: Location, *, progress: bool,
              python: str | None = None) -> list[dict[str, Any]]:
    """Run every task on ``master`` (executors running ``python``) into the dataset at ``out``;
    their summaries in task order."""
    from tqdm import tqdm

    spark = session(master, python)
    context = spark.sparkContext
    for path in _input_files(scenario):
        context.addFile(str(path))
    group = f"replicast-simulate-{id(tasks)}"
    rdd = context.parallelize(list(enumerate(tasks)), len(tasks))
    results: dict[str, Any] = {}

    def collect() -> None:
        try:
            # The job group is a property of the submitting thread (PySpark's pinned threads),
            # so it is set here, where the job is submitted, for the tracker to find the job.
            context.setJobGroup(group, f"replicast simulate: {len(tasks)} tasks")
            results["value"] = rdd.map(lambda item: (item[0], _run_here(scenario, item[1], out))).collect()
        except BaseException as error:      # re-raised in the caller's thread
            results["error"] = error

    worker = threading.Thread(target=collect, daemon=True)
    started = time.perf_counter()
    worker.start()
    tracker = context.statusTracker()
    with tqdm(total=len(tasks), unit="task", desc="spark tasks", disable=not progress) as bar:
        while worker.is_alive():
            worker.join(timeout=1.0)
            finished = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else []):
                    stage_info = tracker.getStageInfo(stage)
                    finished += stage_info.numCompletedTasks if stage_info else 0
            bar.update(min(finished, len(tasks)) - bar.n)
        if "error" in results:
            raise _readable(results["error"])
        bar.update(len(tasks) - bar.n)
    executors = sorted({summary.pop("_executor") for _, summary in results["value"]})
    log.info("%d tasks ran in %.1f s on %s", len(tasks), time.perf_counter() - started, ", ".join(executors))
    return [summary for _, summary in sorted(results["value"], key=lambda item: item[0])]


def _run_here(scenario: Any, task: Task, out: Location) -> dict[str, Any]:
    """One task on an executor: the trace and input files on this machine, the simulation into a
    scratch directory, its partition of the dataset uploaded to ``out``."""
    scenario = _inputs_here(local_trace(scenario))
    with tempfile.TemporaryDirectory(prefix="replicast-task-") as scratch:
        summary = run_task(scenario, task, Path(scratch))
        for table in TABLES:
            out.upload(Path(scratch) / table / task.partition() / "part-0.parquet", table, task.partition(),
                       "part-0.parquet")
    summary["_executor"] = f"{socket.gethostname()}:{sys.executable}"
    return summary


def _input_files(scenario: Any) -> list[Path]:
    """The scenario's own files a task reads: its query and its sources' event files (Spark fetches
    files by name, so two of one name in different folders are refused)."""
    from collections import Counter

    from replicast.operators.errors import ReplicastError

    files = [Path(scenario.query_path), *(Path(s.events) for s in scenario.sources if s.events is not None)]
    twice = [name for name, n in Counter(f.name for f in set(files)).items() if n > 1]
    if twice:
        raise ReplicastError(f"{scenario.path}: --spark ships the query and event files by name, and "
                             f"{twice[0]!r} names several of them; rename one")
    return sorted(set(files))


def _inputs_here(scenario: Any) -> Any:
    """``scenario`` with each input file this machine lacks at the driver's path replaced by the
    copy Spark fetched (``SparkContext.addFile``; files of one sweep have distinct names)."""
    from dataclasses import replace

    from pyspark import SparkFiles

    def here(path: Path) -> Path:
        return path if path.is_file() else Path(SparkFiles.get(path.name))

    sources = [replace(s, events=here(Path(s.events))) if s.events is not None else s for s in scenario.sources]
    return replace(scenario, query_path=here(Path(scenario.query_path)), sources=sources)


def _readable(error: BaseException) -> BaseException:
    """A task's ReplicastError (a scenario mistake) as itself, not a Py4J trace."""
    from replicast.operators.errors import ReplicastError

    text = str(error)
    marker = "ScenarioError: "
    if marker in text:
        line = text[text.index(marker) + len(marker):].splitlines()[0]
        return ReplicastError(line)
    return error


def summarise(master: str, out: Location, summaries: list[dict[str, Any]], scenario: Any,
              span_s: float) -> tuple[list[dict[str, Any]], list[latency.Histogram]]:
    """One summary per ``(kmax, deployment)``, computed by PySpark from the dataset at ``out``
    (the tasks' own summaries give only the event-loop figures: hops, messages, wall time)."""
    from pyspark.sql import functions as F

    spark = session(master)
    deliveries = spark.read.parquet(out.child("deliveries").for_spark())
    bandwidth = spark.read.parquet(out.child("bandwidth").for_spark())
    keys = ["kmax", "deployment"]
    counts = {(r.kmax, r.deployment): r for r in deliveries.groupBy(*keys).agg(
        F.sum("latency_us").alias("total"), F.max("latency_us").alias("max")).collect()}
    per_app: dict[tuple, dict[str, int]] = {}
    for r in deliveries.groupBy(*keys, "app").count().collect():
        per_app.setdefault((r.kmax, r.deployment), {})[r.app] = r["count"]
    histograms: dict[tuple, latency.Histogram] = {}
    binned = deliveries.select(*keys, "latency_us").mapInArrow(_bins, "kmax int, deployment string, bin long")
    for r in binned.groupBy(*keys, "bin").count().collect():
        histograms.setdefault((r.kmax, r.deployment), latency.Histogram()).counts[r.bin] += r["count"]
    sent = {(r.kmax, r.deployment, r.control): r for r in bandwidth.withColumn(
        "control", F.col("stream") == "control").groupBy(*keys, "control").agg(
        F.sum("records").alias("records"), F.sum("bytes").alias("bytes"), F.sum("cost").alias("cost")).collect()}

    runs, ordered = [], []
    for (k, deployment), hist in sorted(histograms.items()):
        parts = [s for s in summaries if s["kmax"] == k and s["deployment"] == deployment]
        data = sent.get((k, deployment, False))
        control = sent.get((k, deployment, True))
        totals = _Totals(hist, counts[(k, deployment)], data, control)
        entry = run_entry(parts, totals, per_app[(k, deployment)], scenario, span_s,
                          [_values_in_bins(deliveries, k, deployment, hist)])
        runs.append({**entry, "summarised_by": "pyspark"})
        ordered.append(hist)
    return runs, ordered


class _Totals:
    """What :func:`simulator.sweep.run_entry` reads, from the Spark aggregates."""

    def __init__(self, histogram: latency.Histogram, row: Any, data: Any, control: Any):
        self.histogram, self.latency_sum, self.latency_max = histogram, int(row.total), int(row.max)
        self.data = [int(data.records or 0), int(data.bytes or 0), float(data.cost or 0.0)] if data else [0, 0, 0.0]
        self.control_bytes = int(control.bytes or 0) if control else 0


def _bins(batches):
    """Spark ``mapInArrow``: each delivery's latency bin, with numpy's :func:`latency.bin_of`
    (the same function the quantile pass uses, so bins agree to the last value)."""
    import pyarrow as pa

    for batch in batches:
        yield pa.record_batch({"kmax": batch.column("kmax").cast(pa.int32()), "deployment": batch.column("deployment"),
                               "bin": pa.array(latency.bin_of(batch.column("latency_us").to_numpy()))})


def _values_in_bins(deliveries, k: int, deployment: str, histogram: latency.Histogram) -> np.ndarray:
    """The latencies of one run that fall in the bins holding its quantiles (a few per cent)."""
    from pyspark.sql import functions as F

    from replicast.simulator.run import QUANTILES

    n = histogram.total
    cumulative = np.cumsum(histogram.counts)
    ranks = set()
    for q in QUANTILES:
        low = int(np.floor((n - 1) * q))
        ranks |= {low, min(n - 1, low + 1)}
    wanted = sorted({int(np.searchsorted(cumulative, r, side="right")) for r in ranks})

    def keep(batches):
        import pyarrow as pa

        for batch in batches:
            values = batch.column("latency_us").to_numpy()
            yield pa.record_batch({"latency_us": pa.array(values[np.isin(latency.bin_of(values), wanted)])})

    rows = (deliveries.where((F.col("kmax") == k) & (F.col("deployment") == deployment)).select("latency_us")
            .mapInArrow(keep, "latency_us long"))
    return rows.toPandas()["latency_us"].to_numpy(np.int64)
