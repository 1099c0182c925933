"""What a Spark sweep ships and where its tasks read and write, without a Spark cluster:
``simulator/spark_ship.py`` (the packed environment's contents) and ``simulator/spark_files.py``
(locations on pyarrow's filesystems)."""

import subprocess
import sys


from replicast.simulator.spark_files import Location, is_url, local_trace
from replicast.simulator.spark_ship import PROVIDED_BY_SPARK, closure, executor_config


def test_the_shipped_distributions_close_over_their_requirements_without_spark():
    names = {d.metadata["Name"].lower() for d in closure(("pandas", "pyspark"))}
    assert {"pandas", "numpy", "python-dateutil", "six"} <= names
    assert not names & PROVIDED_BY_SPARK


def test_a_local_master_runs_this_interpreter_and_ships_nothing(tmp_path):
    assert executor_config("local[2]", None, cache=tmp_path) == {"spark.pyspark.python": sys.executable}
    assert executor_config("local[*]", "/opt/py/bin/python3", cache=tmp_path) == \
        {"spark.pyspark.python": "/opt/py/bin/python3"}
    assert not list(tmp_path.iterdir())


def test_a_path_and_its_file_url_are_one_location(tmp_path):
    assert Location.of(tmp_path) == Location.of(tmp_path.as_uri()) == Location.of(tmp_path.as_uri() + "/")
    assert Location.of(tmp_path).local_path == tmp_path
    assert Location.of("s3://bucket/out").local_path is None
    assert Location.of("s3://bucket/out").for_spark() == "s3a://bucket/out"
    assert is_url("file:///x") and not is_url("/x")


def test_upload_and_remove_through_the_filesystem(tmp_path):
    local = tmp_path / "part.parquet"
    local.write_bytes(b"rows")
    out = Location.of((tmp_path / "out").as_uri())
    out.child("deliveries").upload(local, "kmax=2", "part-0.parquet")
    assert (tmp_path / "out" / "deliveries" / "kmax=2" / "part-0.parquet").read_bytes() == b"rows"
    out.child("deliveries").remove()
    out.child("deliveries").remove()                  # gone already: nothing to do
    assert not (tmp_path / "out" / "deliveries").exists()


def test_a_trace_url_on_this_disk_is_read_in_place(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Scenario:
        trace: str

    assert local_trace(Scenario(trace=tmp_path.as_uri())).trace == str(tmp_path)
    assert local_trace(Scenario(trace="seattle")).trace == "seattle"


def test_an_object_store_output_needs_spark(tmp_path):
    done = subprocess.run([sys.executable, "-m", "replicast.engine.cli", "simulate", "--out", "s3://bucket/out",
                           "--duration-s", "60"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "--out s3://bucket/out: only a Spark sweep" in done.stderr
