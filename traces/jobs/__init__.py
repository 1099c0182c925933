"""PySpark jobs over canonical traces.

Transformations (``ingest``, ``summary``, ``resample``, ``geo``) take and return DataFrames and never
build a session; ``session.spark_session`` is the only place a SparkSession is configured, so the
same jobs run in local mode (the default, ``local[2]``) or on a cluster (``--master``).
"""
