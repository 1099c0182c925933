"""CSV ``src,dst,rtt_ms,t`` → canonical trace in one pass over the text (month-scale ingest).

Spark schedules two stages of Python tasks; the CSV text is parsed once, by Arrow's C++ reader:

1. **Parse** (one task per ~64 MB byte range of the file, cut at line ends): ``pyarrow.csv`` with
   an explicit schema (``src, dst`` strings, ``rtt_ms, t`` float64; no type inference), checks every
   value with Arrow compute (empty names, negative or infinite numbers, empty ``t``), converts ``t``
   to µs and writes the rows to scratch Parquet by raw day, with the range's node names and earliest
   time.
2. **Canonical** (one task per output day and block of source nodes, ~8 M rows each): reads its
   rows back, maps names to ids (``pyarrow.compute.index_in``), keeps the latest measurement of a
   pair in a frame (one ``numpy.lexsort`` by frame, src, dst, t) and writes ``rtt/day=D/part-B``.

Only a file whose rows fail a check is read again, by :func:`traces.jobs.ingest._locate`, to name
the line.  CSVs without a ``t`` column (row order is time) keep the Spark SQL job in
:mod:`traces.jobs.ingest`: their frames depend on every earlier row of a pair.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from replicast.traces import format as fmt
from replicast.traces.errors import TraceError

RANGE_BYTES = 64 << 20
BLOCK_ROWS = 8_000_000
NULLS = ["", "nan", "NaN", "NAN", "null", "NULL", "Null"]


def byte_ranges(path: Path, size: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges of the rows after the header, each ending at a line end."""
    total = path.stat().st_size
    with open(path, "rb") as handle:
        handle.readline()
        start = handle.tell()
        ranges = []
        while start < total:
            handle.seek(min(total, start + size))
            handle.readline()
            end = min(total, handle.tell())
            ranges.append((start, end))
            start = end
    return ranges


def parse_range(path: str, start: int, end: int, header: list[str], scratch: str, index: int,
                time_unit_us: int) -> dict:
    """Stage 1: parse, check and stash one byte range; its names, time bounds and row count, or
    ``{"bad": reason}`` for the driver to locate."""
    import pyarrow.csv as csv

    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    types = {"src": pa.string(), "dst": pa.string(), "rtt_ms": pa.float64(), "t": pa.float64()}
    try:
        table = csv.read_csv(pa.py_buffer(data),
                             read_options=csv.ReadOptions(column_names=header, use_threads=False),
                             convert_options=csv.ConvertOptions(column_types=types, null_values=NULLS,
                                                                strings_can_be_null=False,
                                                                include_columns=list(types)))
    except pa.ArrowInvalid as error:
        return {"bad": str(error).splitlines()[0]}
    src, dst, rtt, t = (table.column(c) for c in ("src", "dst", "rtt_ms", "t"))
    problems = {
        "src is empty": pc.any(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(src)), 0)),
        "dst is empty": pc.any(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(dst)), 0)),
        "t is empty": pc.any(pc.is_null(t)),
        "a number is negative or infinite": pc.any(pc.or_(
            pc.or_(pc.less(rtt, 0), pc.is_inf(rtt)), pc.or_(pc.less(t, 0), pc.is_inf(t)))),
    }
    for reason, found in problems.items():
        if found.as_py():
            return {"bad": reason}
    rtt = pc.if_else(pc.is_nan(rtt), pa.scalar(None, pa.float64()), rtt)
    t_us = pc.cast(pc.round(pc.multiply(t, float(time_unit_us))), pa.int64())
    rows = pa.table({"src": pc.utf8_trim_whitespace(src), "dst": pc.utf8_trim_whitespace(dst),
                     "rtt_ms": pc.cast(rtt, pa.float32()), "t_us": t_us})
    if rows.num_rows == 0:
        return {"names": [], "rows": 0, "t_min": None, "t_max": None}
    _write_by_day(rows, "t_us", lambda day: Path(scratch) / f"raw_day={day}" / f"range-{index}.parquet", "lz4")
    names = pc.unique(pa.chunked_array(src.chunks + dst.chunks)).to_pylist()
    t_min, t_max = pc.min_max(t_us).values()
    return {"names": sorted(set(n.strip() for n in names)), "rows": rows.num_rows, "t_min": t_min.as_py(),
            "t_max": t_max.as_py()}


def canonical_block(scratch: str, out: str, day: int, block: int, sources: list[str], names: list[str],
                    t_min: int, interval_us: int) -> int:
    """Stage 2: the canonical rows of output ``day`` from the ``sources`` nodes; the largest ``t``."""
    lo = t_min + day * fmt.DAY_US
    hi = lo + fmt.DAY_US
    files = [str(p) for raw in range(lo // fmt.DAY_US, (hi - 1) // fmt.DAY_US + 1)
             for p in sorted((Path(scratch) / f"raw_day={raw}").glob("*.parquet"))]
    if not files:
        return -1
    wanted = (ds.field("t_us") >= lo) & (ds.field("t_us") < hi) & ds.field("src").isin(sources)
    table = ds.dataset(files, format="parquet").to_table(filter=wanted)
    if table.num_rows == 0:
        return -1
    catalogue = pa.array(names)
    src = pc.index_in(table.column("src"), value_set=catalogue).to_numpy(zero_copy_only=False).astype(np.int32)
    dst = pc.index_in(table.column("dst"), value_set=catalogue).to_numpy(zero_copy_only=False).astype(np.int32)
    t_us = table.column("t_us").to_numpy()
    rtt = table.column("rtt_ms")
    frame = (t_us - t_min) // interval_us
    # Sort by frame, src, dst, then time: the last row of each (frame, src, dst) run is the
    # latest measurement in that frame, and the output comes out in (t, src, dst) order.
    order = np.lexsort((t_us, dst, src, frame))
    frame, src, dst = frame[order], src[order], dst[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (frame[1:] != frame[:-1]) | (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    last &= src != dst
    keep = order[last]
    if not len(keep):
        return -1
    result = pa.table({"t": pa.array(frame[last] * interval_us, pa.int64()), "src": pa.array(src[last], pa.int32()),
                       "dst": pa.array(dst[last], pa.int32()), "rtt_ms": rtt.take(pa.array(keep))}, schema=fmt.SCHEMA)
    # Frames of one output day may straddle a canonical day boundary (t_min is not midnight):
    # split by the canonical day of t.
    _write_by_day(result, "t", lambda d: Path(out) / f"day={d}" / f"part-{day}-{block}.parquet", "zstd")
    return int(pc.max(result.column("t")).as_py())


def _write_by_day(table: pa.Table, column: str, target_of, compression: str) -> None:
    """One Parquet file per day of ``table[column]`` (µs), at ``target_of(day)``."""
    days = pc.divide(table.column(column), fmt.DAY_US)
    first, final = pc.min_max(days).values()
    for day in range(first.as_py(), final.as_py() + 1):
        part = table.filter(pc.equal(days, day)) if first != final else table
        if part.num_rows:
            target = target_of(day)
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, target, compression=compression)


def ingest(spark, path: Path, out_dir: Path, header: list[str], *, interval_us: int, time_unit_us: int,
           node_names: list[str] | None) -> tuple[int, list[str]] | str:
    """Both stages into ``out_dir/rtt``; ``(largest t, node names)``, or the reason of the first
    bad range (the caller names the line)."""
    from replicast.traces.jobs.errors import worker_errors
    from replicast.traces.jobs.ingest import _sorted_names

    context = spark.sparkContext
    scratch = out_dir / "_ingest"
    shutil.rmtree(scratch, ignore_errors=True)
    ranges = byte_ranges(path)
    path_s, scratch_s = str(Path(path).resolve()), str(scratch.resolve())
    with worker_errors():
        parsed = context.parallelize(list(enumerate(ranges)), max(1, len(ranges))).map(
            lambda item: parse_range(path_s, item[1][0], item[1][1], header, scratch_s, item[0], time_unit_us)
        ).collect()
    bad = [p["bad"] for p in parsed if "bad" in p]
    if bad:
        shutil.rmtree(scratch, ignore_errors=True)
        return bad[0]
    seen = sorted({n for p in parsed for n in p["names"]})
    names = node_names or _sorted_names(seen)
    stray = sorted(set(seen) - set(names))
    if stray:
        shutil.rmtree(scratch, ignore_errors=True)
        raise TraceError(f"{path}: node(s) {stray[:3]} are not in the nodes list ({len(names)} names)")
    timed = [p for p in parsed if p["rows"]]
    if not timed:
        shutil.rmtree(scratch, ignore_errors=True)
        raise TraceError(f"{out_dir}: the input held no measurements")
    t_min = min(p["t_min"] for p in timed)
    t_max = max(p["t_max"] for p in timed)
    rows = sum(p["rows"] for p in timed)
    days = (t_max - t_min) // fmt.DAY_US + 1
    blocks = max(1, min(len(names), math.ceil(rows / days / BLOCK_ROWS)))
    per_block = math.ceil(len(names) / blocks)
    work = [(day, b, names[b * per_block:(b + 1) * per_block]) for day in range(days) for b in range(blocks)]
    rtt_dir = str(fmt.rtt_dir(out_dir).resolve())
    with worker_errors():
        last = context.parallelize(work, max(1, len(work))).map(
            lambda w: canonical_block(scratch_s, rtt_dir, w[0], w[1], w[2], names, t_min, interval_us)).collect()
    shutil.rmtree(scratch, ignore_errors=True)
    return max(last), names

