"""Summaries of a canonical trace: per pair, per sample, and overall.

Per pair (:func:`pair_summary`): one shuffle by pair, then numpy per partition through
``mapInArrow`` (:func:`pair_stats`), with exact nearest-rank quantiles: the q-quantile of n samples
is the ceil(q * n)-th smallest (numpy's ``inverted_cdf``, DuckDB's ``quantile_disc``).

Per sample and overall, quantiles scale through histograms, not ``percentile_approx``:
``percentile_approx`` at default accuracy runs ~1 M rows/s on 2 cores here, a plain groupBy ~20 M
rows/s.  So each quantile is read off a per-group histogram of log-spaced buckets (relative width
``precision``, 1 %), built with one groupBy; the histogram has at most a few thousand rows per
group, whatever the trace length.  Same definition (nearest rank); we return the smallest sample in
the quantile's bucket, so the result is exact when samples are quantised coarser than the bucket
width (Seattle: 10 ms) and within ``precision`` otherwise.
"""

from __future__ import annotations

import math

import numpy as np

QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99}
DEFAULT_PRECISION = 0.01


def bucket(column, precision: float = DEFAULT_PRECISION):
    """Log-spaced bucket number of a positive RTT (values <= 1 µs share one bucket)."""
    from pyspark.sql import functions as F

    return F.floor(F.log(F.greatest(column, F.lit(1e-3))) / F.lit(math.log1p(precision))).cast("int")


def quantiles_by(df, keys: list[str], value: str = "rtt_ms", precision: float = DEFAULT_PRECISION):
    """One row per ``keys`` group with ``QUANTILES`` columns of ``value`` (nulls ignored)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    histogram = (
        df.where(F.col(value).isNotNull())
        .groupBy(*keys, bucket(F.col(value), precision).alias("bucket"))
        .agg(F.count("*").alias("n"), F.min(value).alias("low"))
    )
    group = Window.partitionBy(*keys) if keys else Window.partitionBy()
    running = group.orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    histogram = histogram.withColumn("cum", F.sum("n").over(running)).withColumn("total", F.sum("n").over(group))
    # "low" rises with "bucket", so the min over qualifying buckets is the first qualifying one.
    return histogram.groupBy(*keys).agg(
        *[F.min(F.when(F.col("cum") >= F.ceil(F.col("total") * q), F.col("low"))).alias(name)
          for name, q in QUANTILES.items()]
    )


def with_previous(df, interval_us: int):
    """Add ``prev_ms``: the same pair's sample one frame earlier (null if missing or no such row)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("src", "dst").orderBy("t")
    previous_t = F.lag("t").over(order)
    return df.withColumn(
        "prev_ms", F.when(previous_t == F.col("t") - F.lit(interval_us), F.lag("rtt_ms").over(order))
    )


PAIR_COLUMNS = ["src", "dst", "samples", "valid", "outage_rate", "min", *QUANTILES, "max", "drift_ms"]
PAIR_SCHEMA = ("src int, dst int, samples bigint, valid bigint, outage_rate double, min float, median float, "
               "p90 float, p99 float, max float, drift_ms double")
# Largest pairs x frames float32 matrix one task fills (128 MB; the task holds a few arrays that size);
# beyond it the sort path runs.
DENSE_CELLS = 1 << 25


def pair_summary(df, *, n_frames: int, interval_us: int):
    """Per directed pair: samples, valid, outage_rate (missing rows count as outages), min, exact
    median, p90, p99 (nearest rank, see :func:`pair_stats`), max, drift_ms (mean |change| between
    valid samples in consecutive frames).

    One shuffle puts each pair's rows in one partition (``spark.sql.shuffle.partitions`` of them, no
    sort); each partition is then summarised in one Python task with numpy (:func:`pair_stats`)
    through ``mapInArrow``, so there is no per-row Python and no second pass.
    """
    import functools

    from pyspark.sql import functions as F

    # One long key instead of src and dst: every column costs in the shuffle and the Arrow transfer.
    key = F.shiftleft(F.col("src").cast("long"), 32).bitwiseOR(F.col("dst").cast("long")).alias("pair")
    summarise = functools.partial(_pair_stats_batches, n_frames=n_frames, interval_us=interval_us)
    return df.select(key, "t", "rtt_ms").repartition("pair").mapInArrow(summarise, PAIR_SCHEMA)


def pair_key(src, dst):
    """The key ``pair_summary`` shuffles on: src << 32 | dst (node ids are non-negative int32)."""
    return (np.asarray(src, dtype=np.int64) << 32) | np.asarray(dst, dtype=np.int64)


def _pair_stats_batches(batches, *, n_frames: int, interval_us: int):
    """``mapInArrow`` body: the partition's Arrow batches in, one batch of per-pair rows out."""
    import pyarrow as pa

    batches = list(batches)
    if not batches or not any(batch.num_rows for batch in batches):
        return
    table = pa.Table.from_batches(batches)
    stats = pair_stats(table.column("t").to_numpy(), table.column("pair").to_numpy(), table.column("rtt_ms").to_numpy(),
                       n_frames=n_frames, interval_us=interval_us)
    none = stats["valid"] == 0
    columns = {
        "src": pa.array(stats["src"], pa.int32()),
        "dst": pa.array(stats["dst"], pa.int32()),
        "samples": pa.array(stats["samples"], pa.int64()),
        "valid": pa.array(stats["valid"], pa.int64()),
        "outage_rate": pa.array(stats["outage_rate"], pa.float64()),
        **{name: pa.array(stats[name], pa.float32(), mask=none) for name in ("min", *QUANTILES, "max")},
        "drift_ms": pa.array(stats["drift_ms"], pa.float64(), mask=np.isnan(stats["drift_ms"])),
    }
    yield pa.RecordBatch.from_pydict(columns)


def nearest_rank(valid, q: float):
    """0-based position of the q-quantile among ``valid`` sorted samples: the ceil(q * n)-th
    smallest (nearest rank, numpy's ``inverted_cdf``, DuckDB's ``quantile_disc``); 0 when n = 0."""
    return np.maximum(np.ceil(q * np.asarray(valid, dtype=np.float64)).astype(np.int64) - 1, 0)


def pair_stats(t, pair, rtt, *, n_frames: int, interval_us: int, dense_cells: int = DENSE_CELLS) -> dict:
    """The per-pair summary of one set of rows, all of each pair's rows included (numpy arrays;
    ``pair`` from :func:`pair_key`, ``rtt`` NaN = outage, like a null). Returns a dict of arrays, one entry per pair, ordered by
    (src, dst): src, dst, samples (rows), valid, outage_rate (1 - valid / n_frames), min, the
    ``QUANTILES`` (nearest rank: the ceil(q * valid)-th smallest valid sample), max, drift_ms (mean
    |rtt(t) - rtt(t - interval)| over the pair's rows whose previous frame's sample is valid too),
    with NaN for a statistic of no samples.

    Rows on the frame grid (t a multiple of ``interval_us``, one per pair and frame) go into a
    pairs x frames matrix, NaN where no valid sample: the drift is a difference along frames and
    the quantiles come from a row-wise sort, so nothing is sorted across pairs. Other rows, or a
    matrix over ``dense_cells``, take the general path: sort by (pair, t) and by (pair, rtt).
    """
    import pandas as pd

    t = np.asarray(t, dtype=np.int64)
    if t.size == 0:
        raise ValueError("pair_stats needs at least one row")
    rtt = np.asarray(rtt, dtype=np.float32)
    pair, codes = pd.factorize(np.asarray(pair, dtype=np.int64), sort=True)
    n_pairs = codes.size
    samples = np.bincount(pair, minlength=n_pairs)
    is_valid = ~np.isnan(rtt)
    valid = np.bincount(pair, weights=is_valid, minlength=n_pairs).astype(np.int64)
    ranks = {name: nearest_rank(valid, q) for name, q in QUANTILES.items()}

    frame = t // interval_us
    first = int(frame.min())
    span = int(frame.max()) - first + 1
    cell = pair * span + (frame - first)
    dense = n_pairs * span <= dense_cells and bool(np.all(t % interval_us == 0))
    if dense:
        matrix = np.full(n_pairs * span, np.nan, dtype=np.float32)
        taken = np.zeros(n_pairs * span, dtype=bool)
        taken[cell] = True
        dense = int(np.count_nonzero(taken)) == t.size  # else two rows share a pair and frame
    if dense:
        matrix[cell] = rtt
        matrix = matrix.reshape(n_pairs, span)
        step = np.abs(np.diff(matrix, axis=1))
        counted = ~np.isnan(step)
        steps = np.count_nonzero(counted, axis=1)
        step_sum = np.where(counted, step, 0).sum(axis=1, dtype=np.float64)
        ordered = np.sort(matrix, axis=1)  # NaN last, so row p's valid samples are ordered[p, :valid[p]]
        rows = np.arange(n_pairs)
        low, high = ordered[:, 0], ordered[rows, np.maximum(valid - 1, 0)]
        picked = {name: ordered[rows, rank] for name, rank in ranks.items()}
    else:
        order = np.lexsort((t, pair))
        p, tt, r = pair[order], t[order], rtt[order]
        step = np.abs(r[1:] - r[:-1])
        counted = (p[1:] == p[:-1]) & (tt[1:] - tt[:-1] == interval_us) & ~np.isnan(step)
        steps = np.bincount(p[1:][counted], minlength=n_pairs)
        step_sum = np.bincount(p[1:][counted], weights=step[counted].astype(np.float64), minlength=n_pairs)
        by_value = np.lexsort((rtt[is_valid], pair[is_valid]))
        values = np.append(rtt[is_valid][by_value], np.float32("nan"))  # the last entry answers valid == 0
        start = np.cumsum(valid) - valid

        def at(offset):
            return values[np.where(valid > 0, start + offset, -1)]

        low, high = at(0), at(valid - 1)
        picked = {name: at(rank) for name, rank in ranks.items()}

    none = valid == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        drift = np.where(steps > 0, step_sum / steps, np.nan)
    return {
        "src": (codes >> 32).astype(np.int32),
        "dst": (codes & 0xFFFFFFFF).astype(np.int32),
        "samples": samples.astype(np.int64),
        "valid": valid,
        "outage_rate": 1 - valid / n_frames,
        "min": np.where(none, np.nan, low).astype(np.float32),
        **{name: np.where(none, np.nan, value).astype(np.float32) for name, value in picked.items()},
        "max": np.where(none, np.nan, high).astype(np.float32),
        "drift_ms": drift,
    }


def sample_summary(df, precision: float = DEFAULT_PRECISION):
    """Per sample time ``t``: valid measurements and the median RTT over pairs."""
    from pyspark.sql import functions as F

    counts = df.groupBy("t").agg(F.count("rtt_ms").alias("valid"))
    medians = quantiles_by(df, ["t"], precision=precision).select("t", "median")
    return counts.join(medians, "t", "left").orderBy("t")


def overall_summary(df, *, n_nodes: int, n_frames: int, interval_us: int, precision: float = DEFAULT_PRECISION) -> dict:
    """Whole-trace figures, with the same definitions as :func:`traces.calibrate.measure`."""
    from pyspark.sql import functions as F

    paired = with_previous(df, interval_us)
    # Not F.greatest: it skips nulls, which would turn an outage into a 1 µs RTT.
    log_now = F.log(F.when(F.col("rtt_ms") > 1e-3, F.col("rtt_ms")).otherwise(F.lit(1e-3)))
    log_prev = F.log(F.when(F.col("prev_ms") > 1e-3, F.col("prev_ms")).otherwise(F.lit(1e-3)))
    row = paired.agg(
        F.count("*").alias("rows"),
        F.count("rtt_ms").alias("valid"),
        F.min("rtt_ms").alias("min"),
        F.max("rtt_ms").alias("max"),
        F.avg(F.abs(F.col("rtt_ms") - F.col("prev_ms"))).alias("drift_ms"),
        F.corr(F.when(F.col("rtt_ms").isNotNull(), log_now), F.when(F.col("prev_ms").isNotNull(), log_prev)).alias("frame_corr"),
    ).first().asDict()
    row.update(quantiles_by(df, [], precision=precision).first().asDict())
    expected = n_nodes * (n_nodes - 1) * n_frames
    row["outage_rate"] = 1 - row["valid"] / expected
    return row
