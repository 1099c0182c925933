"""Ingest raw measurements into canonical rows (``t, src, dst, rtt_ms``).

Two sources:
* NetLatency text matrices, one file per frame (``netlatency_frames``): each file is parsed by one
  task with :func:`traces.netlatency.parse_matrix`, so the job scales with the number of frames.
* A generic CSV ``src,dst,rtt_ms[,t]`` (``csv_measurements``): parsed by Spark's CSV reader as
  strings and validated with SQL expressions; only when a row is bad does the driver rescan the
  file to name its line.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pyarrow as pa

from replicast.traces import format as fmt
from replicast.traces import netlatency
from replicast.traces.errors import TraceError
from replicast.traces.jobs.errors import worker_errors

SPARK_SCHEMA = "t long, src int, dst int, rtt_ms float"


def netlatency_frames(spark, files: list[Path], *, unit: str, interval_us: int, n_nodes: int):
    """Canonical rows of NetLatency frame files; frame k (1-based) is at ``t = (k - 1) * interval``."""
    from pyspark.sql import functions as F

    units = {str(p.resolve()): netlatency.unit_for(p, unit) for p in files}
    text = spark.read.text([str(p) for p in files], wholetext=True).select(
        F.col("_metadata.file_path").alias("path"), "value"
    )

    def parse(batches):
        from urllib.parse import unquote, urlparse

        for batch in batches:
            for path_uri, body in zip(batch.column("path").to_pylist(), batch.column("value").to_pylist()):
                path = unquote(urlparse(path_uri).path)
                matrix = netlatency.parse_matrix(body, path, n_nodes)
                t_us = (netlatency.frame_number(path) - 1) * interval_us
                yield from netlatency.matrix_to_table(matrix, t_us, units[path]).to_batches()

    return text.mapInArrow(parse, SPARK_SCHEMA)


def read_header(path: Path) -> list[str]:
    """Column names of a CSV file, checked against ``src,dst,rtt_ms[,t]``."""
    with open(path, newline="") as handle:
        header = next(csv.reader(handle), None)
    if not header:
        raise TraceError(f"{path}:1: empty file; expected a header src,dst,rtt_ms[,t]")
    header = [name.strip() for name in header]
    missing = [c for c in ("src", "dst", "rtt_ms") if c not in header]
    extra = [c for c in header if c not in ("src", "dst", "rtt_ms", "t")]
    if missing or extra:
        raise TraceError(
            f"{path}:1: header {','.join(header)}: missing {missing or 'nothing'}, unexpected {extra or 'nothing'}; "
            "expected src,dst,rtt_ms and optionally t"
        )
    return header


def csv_row_problem(row: dict[str, str]) -> str | None:
    """Why one CSV row is bad, or None: the driver-side twin of ``_bad_row`` below (for line numbers)."""
    if None in row.values() or None in row:
        return "wrong number of fields"
    for column in ("src", "dst"):
        if not row[column].strip():
            return f"{column} is empty"
    for column in ("rtt_ms", "t") if "t" in row else ("rtt_ms",):
        value = (row.get(column) or "").strip()
        if column == "t" and not value:
            return "t is empty"
        if value and value.lower() not in ("nan", "null"):
            try:
                number = float(value)
            except ValueError:
                return f"{column} {value!r} is not a number"
            if number < 0 or math.isinf(number):
                return f"{column} {value} is negative or infinite"
    return None


def _bad_row(has_t: bool):
    """A Column that is non-null (a reason) for a bad row; same rules as :func:`csv_row_problem`."""
    from pyspark.sql import functions as F

    def numeric_problem(column: str, allow_empty: bool):
        raw = F.trim(F.col(column))
        value = F.expr(f"try_cast(trim({column}) AS DOUBLE)")
        empty = raw.isNull() | (raw == "")
        checks = [
            (F.lower(raw).isin("nan", "null"), F.lit(None)),
            (empty, F.lit(None) if allow_empty else F.lit(f"{column} is empty")),
            (value.isNull(), F.concat(F.lit(f"{column} '"), raw, F.lit("' is not a number"))),
            ((value < 0) | (F.abs(value) == F.lit(float("inf"))), F.lit(f"{column} is negative or infinite")),
        ]
        out = F.lit(None)
        for condition, reason in reversed(checks):
            out = F.when(condition, reason).otherwise(out)
        return out

    reasons = [
        F.when(F.col("_corrupt").isNotNull(), F.lit("wrong number of fields")),
        F.when(F.trim(F.col("src")).isNull() | (F.trim(F.col("src")) == ""), F.lit("src is empty")),
        F.when(F.trim(F.col("dst")).isNull() | (F.trim(F.col("dst")) == ""), F.lit("dst is empty")),
        numeric_problem("rtt_ms", allow_empty=True),
    ]
    if has_t:
        reasons.append(numeric_problem("t", allow_empty=False))
    return F.coalesce(*reasons)


def _locate(path: Path, header: list[str]) -> str:
    """File:line: reason of the first bad row, found by rescanning the file (only on failure)."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle, fieldnames=header)
        next(reader)
        for row in reader:
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            problem = csv_row_problem(row)
            if problem:
                return f"{path}:{reader.line_num}: {problem}"
    return ""


def csv_measurements(spark, path: Path, *, interval_us: int, time_unit_us: int, node_names: list[str] | None):
    """Canonical rows and node names of a CSV ``src,dst,rtt_ms[,t]``.

    * src/dst are node names; ids follow ``node_names`` when given (a name outside it is an error),
      else the sorted distinct names (numerically if all are integers).
    * With ``t`` (in units of ``time_unit_us``), each measurement goes to frame
      ``floor((t - t_min) / interval)``; several in one frame keep the latest.
    * Without ``t``, the k-th row of a pair (in file order) is frame k.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    header = read_header(path)
    has_t = "t" in header
    schema = ", ".join(f"`{c}` string" for c in header) + ", _corrupt string"
    raw = (
        spark.read.option("header", True).option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt").option("enforceSchema", True)
        .schema(schema).csv(str(path))
    )
    with worker_errors():
        bad = raw.select(_bad_row(has_t).alias("reason"), *header).where("reason IS NOT NULL").limit(1).collect()
    if bad:
        where = _locate(path, header)
        raise TraceError(where or f"{path}: row {bad[0].asDict()}: {bad[0].reason}")

    rows = raw.select(
        F.trim("src").alias("src_name"), F.trim("dst").alias("dst_name"),
        F.expr("try_cast(trim(rtt_ms) AS DOUBLE)").alias("rtt"),
        *([F.expr("try_cast(trim(t) AS DOUBLE)").alias("t_raw")] if has_t else []),
    ).withColumn("rtt", F.when(F.isnan("rtt"), None).otherwise(F.col("rtt")))

    # One pass for the node names and the time origin (plain aggregates, no shuffle of rows).
    seen = rows.agg(
        F.array_union(F.collect_set("src_name"), F.collect_set("dst_name")).alias("names"),
        *([F.min(_t_us(time_unit_us)).alias("t_min")] if has_t else []),
    ).first()
    names = node_names or _sorted_names(seen["names"])
    stray = sorted(set(seen["names"]) - set(names))
    if stray:
        raise TraceError(f"{path}: node(s) {stray[:3]} are not in the nodes list ({len(names)} names)")
    ids = spark.createDataFrame([(name, i) for i, name in enumerate(names)], "name string, id int")
    rows = (
        rows.join(F.broadcast(ids.withColumnRenamed("id", "src")), rows.src_name == F.col("name")).drop("name")
        .join(F.broadcast(ids.withColumnRenamed("id", "dst")), F.col("dst_name") == F.col("name")).drop("name")
    )
    pair = Window.partitionBy("src", "dst")
    if has_t:
        t_us = _t_us(time_unit_us)
        frame = F.floor((t_us - F.lit(seen["t_min"])) / F.lit(interval_us)).cast("long")
        # Several measurements in one frame: keep the latest; a hash aggregate, not a window sort.
        rows = rows.withColumn("frame", frame).groupBy("src", "dst", "frame").agg(
            F.max_by("rtt", t_us).alias("rtt"))
    else:
        order = pair.orderBy(F.monotonically_increasing_id())
        rows = rows.withColumn("frame", F.row_number().over(order) - 1)
    canonical = rows.select(
        (F.col("frame") * F.lit(interval_us)).cast("long").alias("t"),
        F.col("src").cast("int"), F.col("dst").cast("int"), F.col("rtt").cast("float").alias("rtt_ms"),
    ).where("src != dst")
    return canonical, names


def _t_us(time_unit_us: int):
    from pyspark.sql import functions as F

    return F.round(F.col("t_raw") * F.lit(time_unit_us)).cast("long")


def _sorted_names(names: list[str]) -> list[str]:
    if all(name.lstrip("-").isdigit() for name in names):
        return sorted(names, key=int)
    return sorted(names)


def read_node_names(path: Path) -> tuple[list[str], list | None, list | None]:
    """Names (and lat/lon if present) from a nodes CSV with a ``name`` column, in id order."""
    import pandas as pd

    try:
        table = pd.read_csv(path, dtype={"name": str})
    except (OSError, ValueError) as error:
        raise TraceError(f"{path}: cannot read nodes CSV ({error})") from None
    if "name" not in table.columns:
        raise TraceError(f"{path}:1: nodes CSV needs a 'name' column (optional lat, lon)")
    duplicated = table["name"][table["name"].duplicated()]
    if len(duplicated):
        raise TraceError(f"{path}:{duplicated.index[0] + 2}: node name {duplicated.iloc[0]!r} appears twice")
    lat = table["lat"].tolist() if "lat" in table.columns else None
    lon = table["lon"].tolist() if "lon" in table.columns else None
    return table["name"].str.strip().tolist(), lat, lon


def write_canonical(df, out_dir: Path, *, meta: fmt.TraceMeta, nodes: pa.Table, compact: bool = False) -> fmt.TraceMeta:
    """Write canonical rows partitioned by day, then nodes and meta (with the frame count filled in)."""
    from pyspark.sql import functions as F

    with worker_errors():
        (
            df.withColumn("day", (F.col("t") / F.lit(fmt.DAY_US)).cast("int"))
            .sortWithinPartitions("t", "src", "dst")
            .write.mode("overwrite").partitionBy("day").parquet(str(fmt.rtt_dir(out_dir)))
        )
    last = df.sparkSession.read.parquet(str(fmt.rtt_dir(out_dir))).agg(F.max("t")).first()[0]
    if last is None:
        raise TraceError(f"{out_dir}: the input held no measurements")
    from dataclasses import replace

    meta = replace(meta, n_frames=int(last) // meta.interval_us + 1, n_nodes=nodes.num_rows)
    fmt.write_nodes(out_dir, nodes)
    fmt.write_meta(out_dir, meta)
    if compact:
        fmt.compact(out_dir)
    return meta
