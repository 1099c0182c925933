"""Benchmark the trace pipeline: PySpark ingest and summary, and the same summary in DuckDB and pandas.

    python3 benchmarks/traces.py                 # 50 M rows (a few minutes)
    python3 benchmarks/traces.py --rows 2000000  # quick check
    python3 benchmarks/traces.py --rows 10000000 --ingest-only   # the CSV ingest alone

Steps, all on one synthetic trace (``replicast trace synth`` calibrated on seattle, 100 nodes):
1. ingest: PySpark local[2] reads a CSV ``src,dst,rtt_ms,t`` of every row and writes canonical Parquet,
   once in one pass (Arrow's CSV reader in Spark tasks, :mod:`traces.jobs.csv_ingest`) and once
   with the Spark SQL CSV job it replaced (the baseline, same run); both traces must be equal;
2. summary: the per-pair summary (count, valid, outage rate, min, median, p90, p99, max, drift)
   from the same Parquet with PySpark local[2] (``traces.jobs.summary.pair_summary``), DuckDB
   (2 threads, ``quantile_disc`` + ``lag``) and pandas (``groupby``); every column of each result
   is compared with DuckDB's, and the ratios are printed. The exit status is 1 if PySpark's result
   is not DuckDB's (quantiles, counts, min and max equal; drift within 1e-9 relative). pandas'
   quantiles use ``interpolation="lower"``, which is not nearest rank, so its p99 may differ; that
   is reported, not failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# ``traces`` package; drop that entry.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from replicast.traces import calibrate, synth  # noqa: E402
from replicast.traces import format as fmt  # noqa: E402
from replicast.traces.store import TraceStore  # noqa: E402

NODES = 100


def timed(label: str, rows: int, action):
    start = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - start
    print(f"{label:<28} {seconds:8.1f} s  {rows / seconds / 1e6:8.2f} M rows/s", flush=True)
    return result, seconds


def duckdb_summary(glob: str, interval_us: int, n_frames: int):
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    return con.execute(f"""
        WITH p AS (
          SELECT src, dst, t, rtt_ms,
                 CASE WHEN lag(t) OVER w = t - {interval_us} THEN lag(rtt_ms) OVER w END AS prev_ms
          FROM read_parquet('{glob}', hive_partitioning = true)
          WINDOW w AS (PARTITION BY src, dst ORDER BY t))
        SELECT src, dst, count(*) AS samples, count(rtt_ms) AS valid, 1 - count(rtt_ms) / {n_frames} AS outage_rate,
               min(rtt_ms) AS min, quantile_disc(rtt_ms, 0.5) AS median, quantile_disc(rtt_ms, 0.9) AS p90,
               quantile_disc(rtt_ms, 0.99) AS p99, max(rtt_ms) AS max, avg(abs(rtt_ms - prev_ms)) AS drift_ms
        FROM p GROUP BY src, dst ORDER BY src, dst""").df()


def pandas_summary(root: Path, interval_us: int, n_frames: int):
    import pandas as pd

    df = pd.read_parquet(root, columns=["t", "src", "dst", "rtt_ms"]).sort_values(["src", "dst", "t"], kind="stable")
    same_pair = (df["src"].diff() == 0) & (df["dst"].diff() == 0) & (df["t"].diff() == interval_us)
    df["step"] = df["rtt_ms"].diff().abs().where(same_pair)
    groups = df.groupby(["src", "dst"], sort=True)
    out = groups.agg(samples=("t", "size"), valid=("rtt_ms", "count"), min=("rtt_ms", "min"),
                     max=("rtt_ms", "max"), drift_ms=("step", "mean"))
    out["outage_rate"] = 1 - out["valid"] / n_frames
    quantiles = groups["rtt_ms"].quantile([0.5, 0.9, 0.99], interpolation="lower").unstack()
    out[["median", "p90", "p99"]] = quantiles.to_numpy()
    return out.reset_index()


COLUMNS = ["samples", "valid", "outage_rate", "min", "median", "p90", "p99", "max", "drift_ms"]


def check(label: str, result, exact) -> bool:
    """Print the largest relative difference of each column from DuckDB's; True if they agree."""
    got = result.set_index(["src", "dst"]).sort_index()
    if not got.index.equals(exact.index):
        print(f"check {label}: pairs differ from DuckDB's ({len(got)} against {len(exact)})")
        return False
    worst = {}
    for column in COLUMNS:
        a, b = got[column].to_numpy(np.float64), exact[column].to_numpy(np.float64)
        both = ~np.isnan(a) & ~np.isnan(b)
        differs = np.isnan(a) != np.isnan(b)
        relative = np.abs(a[both] - b[both]) / np.maximum(np.abs(b[both]), 1e-12)
        worst[column] = np.inf if differs.any() else float(relative.max(initial=0.0))
    print(f"check {label}: {len(got)} pairs; largest relative difference from DuckDB: "
          + ", ".join(f"{column} {value:.2g}" for column, value in worst.items()))
    return all(value == 0 for column, value in worst.items() if column != "drift_ms") and worst["drift_ms"] <= 1e-9


def _same_trace(a: Path, b: Path) -> bool:
    """Two canonical traces hold the same nodes and samples (row order aside)."""
    import pyarrow.dataset as ds

    if fmt.read_nodes(a).column("name").to_pylist() != fmt.read_nodes(b).column("name").to_pylist():
        return False
    tables = [ds.dataset(fmt.rtt_dir(p), format="parquet", partitioning="hive").to_table(columns=fmt.SCHEMA.names)
              .sort_by([("t", "ascending"), ("src", "ascending"), ("dst", "ascending")]) for p in (a, b)]
    return tables[0].equals(tables[1].cast(tables[0].schema))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=50_000_000, help="trace rows (default 50 M)")
    parser.add_argument("--workdir", help="scratch directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--ingest-only", action="store_true", help="time the CSV ingest only (no summaries)")
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="replicast-bench-"))
    spark_ok = False
    pairs = NODES * (NODES - 1)
    n_frames = max(2, args.rows // pairs)
    rows = n_frames * pairs
    interval_us = 10_000_000
    # The machine is shared: the load before the run says what else was running (later readings
    # would include this benchmark's own previous step).
    print(f"trace: {NODES} nodes x {n_frames} frames = {rows:,} rows in {work}; "
          f"load average before the run {os.getloadavg()[0]:.2f}")
    try:
        params = calibrate.fit_store(TraceStore.open("seattle"))
        trace = work / "synthetic"
        shutil.rmtree(trace, ignore_errors=True)
        timed("synth (numpy, 1 core)", rows, lambda: synth.generate(
            params, trace, n_nodes=NODES, n_frames=n_frames, interval_us=interval_us, seed=1))
        glob = str(fmt.rtt_dir(trace) / "*" / "*.parquet")

        import duckdb

        csv = work / "rows.csv"
        duckdb.sql(f"COPY (SELECT src, dst, rtt_ms, t / 1e6 AS t FROM read_parquet('{glob}')) "
                   f"TO '{csv}' (HEADER, DELIMITER ',')")
        print(f"CSV for ingest: {csv.stat().st_size / 1e9:.2f} GB")

        from replicast.traces import build
        from replicast.traces.jobs import summary
        from replicast.traces.jobs.session import spark_session

        spark = spark_session("local[2]")
        ingested, baseline = work / "ingested", work / "ingested-sql"
        _, ingest_s = timed("ingest CSV, one pass (local[2])", rows, lambda: build.ingest_csv(
            spark, csv, ingested, name="ingested", interval_us=interval_us, time_unit_us=1_000_000, overwrite=True))
        _, sql_s = timed("ingest CSV, Spark SQL (before)", rows, lambda: build.ingest_csv(
            spark, csv, baseline, name="ingested", interval_us=interval_us, time_unit_us=1_000_000, overwrite=True,
            one_pass=False))
        same = _same_trace(ingested, baseline)
        print(f"ingest: one pass {rows / ingest_s / 1e6:.2f} M rows/s, {sql_s / ingest_s:.2f}x the Spark SQL job's "
              f"speed ({rows / sql_s / 1e6:.2f} M rows/s); traces equal: {same}", flush=True)
        if args.ingest_only:
            return 0 if same else 1

        df = spark.read.parquet(str(fmt.rtt_dir(trace))).select(*fmt.SCHEMA.names)
        spark_result, spark_s = timed("summary PySpark local[2]", rows, lambda: summary.pair_summary(
            df, n_frames=n_frames, interval_us=interval_us).toPandas())
        duck_result, duck_s = timed("summary DuckDB (2 threads)", rows, lambda: duckdb_summary(glob, interval_us, n_frames))
        pandas_result, pandas_s = timed("summary pandas", rows, lambda: pandas_summary(fmt.rtt_dir(trace), interval_us, n_frames))

        exact = duck_result.set_index(["src", "dst"]).sort_index()
        spark_ok = check("PySpark", spark_result, exact)
        check("pandas", pandas_result, exact)
        print(f"\nratios: PySpark/DuckDB summary time = {spark_s / duck_s:.2f}x (target <= 3x); "
              f"pandas/DuckDB = {pandas_s / duck_s:.2f}x; PySpark ingest {rows / ingest_s / 1e6:.2f} M rows/s")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if spark_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
