"""Attach latitude/longitude to a trace's nodes, by node name.

The geo file is a CSV with ``name,lat,lon``; nodes it does not list keep null coordinates, and
names it lists that are not nodes are reported (they usually mean a naming mismatch).
"""

from __future__ import annotations

from pathlib import Path

from replicast.traces.errors import TraceError


def read_geo(spark, path: Path):
    """The geo CSV as a DataFrame (name string, lat double, lon double), validated."""
    from pyspark.sql import functions as F

    geo = spark.read.option("header", True).csv(str(path))
    missing = {"name", "lat", "lon"} - set(geo.columns)
    if missing:
        raise TraceError(f"{path}:1: geo CSV needs columns name,lat,lon (missing {sorted(missing)})")
    geo = geo.select(
        F.trim("name").alias("name"),
        F.expr("try_cast(lat AS DOUBLE)").alias("lat"), F.expr("try_cast(lon AS DOUBLE)").alias("lon"),
        F.col("lat").alias("lat_raw"), F.col("lon").alias("lon_raw"),
    )
    bad = geo.where(
        "lat IS NULL OR lon IS NULL OR lat < -90 OR lat > 90 OR lon < -180 OR lon > 180"
    ).limit(1).collect()
    if bad:
        row = bad[0]
        raise TraceError(
            f"{path}: node {row.name!r}: lat={row.lat_raw!r}, lon={row.lon_raw!r}; "
            "expected numbers with -90 <= lat <= 90 and -180 <= lon <= 180"
        )
    return geo.select("name", "lat", "lon")


def join_geo(nodes, geo):
    """``nodes`` (id, name, lat, lon) with lat/lon taken from ``geo`` where it names the node.

    Returns (nodes DataFrame ordered by id, names in ``geo`` that match no node).
    """
    from pyspark.sql import functions as F

    joined = nodes.drop("lat", "lon").join(F.broadcast(geo), "name", "left").select("id", "name", "lat", "lon")
    strays = [r.name for r in geo.join(nodes, "name", "left_anti").select("name").limit(5).collect()]
    return joined.orderBy("id"), strays
