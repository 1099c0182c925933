"""The one place a SparkSession is built for the trace jobs."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from replicast.traces.errors import TraceError

DEFAULT_MASTER = "local[2]"
#: PySpark 3.5 and 4 run on Java 17 or newer.
MIN_JAVA = 17
JAVA_HINT = "install one (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) or set JAVA_HOME to it"


def java_command() -> str | None:
    """The ``java`` PySpark will start: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.exists() else None
    return shutil.which("java")


def require_java() -> None:
    """Raise a one-line :class:`TraceError` unless a Java PySpark can run on is there: without it
    PySpark fails with "Java gateway process exited" and a long traceback."""
    java = java_command()
    if java is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") else \
            "no java on PATH and no JAVA_HOME"
        raise TraceError(f"PySpark needs Java {MIN_JAVA} or newer, and there is none ({where}): {JAVA_HINT}")
    try:
        banner = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as error:
        raise TraceError(f"PySpark needs Java {MIN_JAVA} or newer, and {java} does not run ({error}): {JAVA_HINT}") \
            from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if match:
        major = int(match.group(2)) if match.group(1) == "1" else int(match.group(1))   # "1.8.0" is Java 8
        if major < MIN_JAVA:
            raise TraceError(f"PySpark needs Java {MIN_JAVA} or newer, and {java} is Java {major}: {JAVA_HINT}")


def spark_session(master: str = DEFAULT_MASTER, *, app_name: str = "replicast-traces",
                  shuffle_partitions: int | None = None, driver_memory: str = "4g", progress: bool = False,
                  config: dict[str, str] | None = None):
    """A SparkSession for ``master`` (``local[N]`` or a cluster URL), quiet and without the UI.

    ``progress`` turns on Spark's console progress bar (the commands' progress display); ``config``
    adds Spark settings.
    Shuffle partitions default to 2 x the local cores: Spark's 200 is far too many for one machine,
    and a cluster user can pass their own.
    """
    require_java()
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
        # Python workers run this interpreter, which has replicast and its extras (in a venv, a
        # bare "python3" on PATH would not); a cluster whose workers differ overrides it in config.
        .config("spark.pyspark.python", sys.executable)
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    # PySpark takes the workers' interpreter from PYSPARK_PYTHON alone (SparkContext.pythonExec);
    # spark.pyspark.python reaches only sessions that spark-submit launches.
    os.environ["PYSPARK_PYTHON"] = (config or {}).get("spark.pyspark.python", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return spark
