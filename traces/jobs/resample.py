"""Resample a canonical trace to another interval by forward-filling (sample-and-hold).

New frame k (at ``k * new``) takes the sample in effect then: the one of old frame
``floor(k * new / old)``, outage included (a failed measurement holds until the next one, as in
:class:`traces.store.TraceStore`).  Downsampling therefore picks samples; it never averages.

Scales without a sort: because old frames sit on a regular grid, each old row knows which new
frames it covers (``[ceil(f * old / new), ceil((f + 1) * old / new))``) and is exploded into them.
"""

from __future__ import annotations


def resample(df, *, old_interval_us: int, new_interval_us: int, n_frames: int):
    """Rows of ``df`` re-gridded to ``new_interval_us``; returns (rows, new frame count)."""
    from pyspark.sql import functions as F

    old, new = old_interval_us, new_interval_us
    new_frames = -(-n_frames * old // new)  # ceil: the new grid covers the old duration
    frame = F.floor(F.col("t") / F.lit(old)).cast("long")
    first = F.ceil(frame * F.lit(old) / F.lit(new)).cast("long")
    stop = F.least(F.ceil((frame + 1) * F.lit(old) / F.lit(new)).cast("long"), F.lit(new_frames))
    exploded = df.where(first < stop).withColumn("k", F.explode(F.sequence(first, stop - 1)))
    rows = exploded.select((F.col("k") * F.lit(new)).alias("t"), "src", "dst", "rtt_ms")
    return rows, new_frames
