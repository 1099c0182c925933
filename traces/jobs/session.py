"""The one place a SparkSession is built for the trace jobs."""

from __future__ import annotations

import logging
import os

DEFAULT_MASTER = "local[2]"


def spark_session(master: str = DEFAULT_MASTER, *, app_name: str = "replicast-traces",
                  shuffle_partitions: int | None = None, driver_memory: str = "4g", progress: bool = False,
                  config: dict[str, str] | None = None):
    """A SparkSession for ``master`` (``local[N]`` or a cluster URL), quiet and without the UI.

    ``progress`` turns on Spark's console progress bar (the commands' progress display); ``config``
    adds Spark settings.
    Shuffle partitions default to 2 x the local cores: Spark's 200 is far too many for one machine,
    and a cluster user can pass their own.
    """
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    import warnings

    # PySpark 4.x warns on every pandas conversion that pandas 3 is "not fully supported"; the jobs
    # only move plain numeric columns through Arrow, which works, so keep the commands' output clean.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    warnings.filterwarnings("ignore", message="The copy keyword is deprecated")
    from pyspark.sql import SparkSession

    if shuffle_partitions is None:
        shuffle_partitions = 2 * (os.cpu_count() or 2) if master.startswith("local") else 200
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory)
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return spark
