"""``replicast simulate --spark``: the sweep's tasks on Spark (local mode, and a real standalone
master and worker on loopback whose Python has neither replicast nor its requirements) write the
same dataset and summary as local worker processes."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parents[2]
# Relative to ROOT, where the command runs: the sweep must make its files absolute for executors,
# which run in their own working directories.
SCENARIO = Path("tests/simulator/data/segments.toml")
# Small: 10 simulated minutes at kmax 2 in two segments, a short explicit warmup.
SWEEP = ["--duration-s", "600", "--kmax", "2", "--segments", "2", "--warmup-s", "120", "--no-progress"]

pytestmark = pytest.mark.spark


def simulate(out: Path, *extra: str, destination: str | None = None, env: dict | None = None) -> dict:
    """Run the sweep into ``out`` (named on the command line as ``destination``, default its path);
    its summary, and its log in ``out/stderr.log``.  The driver binds to loopback, as the cluster."""
    done = subprocess.run([sys.executable, "-m", "replicast.engine.cli", "simulate", str(SCENARIO), *SWEEP,
                           "--out", destination or str(out), *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "stderr.log").write_text(done.stderr)
    return json.loads((out / "summary.json").read_text())


def dataset_rows(out: Path) -> list:
    table = ds.dataset(out / "deliveries", format="parquet", partitioning="hive").to_table()
    return sorted(zip(*(table.column(c).cast("string").to_pylist() for c in
                        ("kmax", "deployment", "segment", "app", "ts", "arrival", "path"))))


def dataset_digest(out: Path) -> str:
    """A hash of every delivery of the dataset, in a canonical order."""
    return hashlib.sha256(repr(dataset_rows(out)).encode()).hexdigest()


def same_summaries(a: dict, b: dict) -> None:
    drop = {"wall_s", "summarised_by", "peak_rss_mb"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["runs"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b["runs"]]


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return out, simulate(out)


def test_spark_local_mode_writes_the_local_sweep(local_sweep, tmp_path):
    out, summary = local_sweep
    spark_summary = simulate(tmp_path, "--spark", "local[2]")
    assert [r["summarised_by"] for r in spark_summary["runs"]] == ["pyspark"]
    same_summaries(spark_summary, summary)
    assert dataset_rows(tmp_path) == dataset_rows(out)
    assert (tmp_path / "latency.png").stat().st_size > 10_000


@pytest.fixture
def bare_python(tmp_path) -> Path:
    """A fresh venv's Python without replicast, msgpack, numpy or pyarrow: what a Spark worker
    that has only Java and a Python runs."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    for module in ("replicast", "msgpack", "numpy", "pyarrow", "simpy", "sortedcontainers"):
        missing = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, cwd=tmp_path)
        assert missing.returncode != 0, f"the bare venv imports {module}"
    return python


def test_a_standalone_master_and_worker_on_loopback_run_the_sweep(local_sweep, tmp_path, bare_python):
    """A real Spark standalone cluster (master + one 2-core worker, started with spark-class from
    the pyspark install) whose executors run a bare Python runs the sweep with replicast shipped to
    them, the trace and the dataset named by file:// URLs; its dataset and summary are the local ones."""
    from replicast.experiments.ports import free_loopback_ports
    from replicast.simulator.spark_standalone import standalone_cluster

    cluster = tmp_path / "cluster"
    with standalone_cluster(cluster, free_loopback_ports(3), workers=1, cores=2) as master:
        out = tmp_path / "out"
        trace = ROOT / "traces" / "data" / "seattle"           # the scenario's "seattle", by URL
        # The wheel shipped is built pure (REPLICAST_PURE_PYTHON): a mypyc build in the test costs CI
        # two minutes, and tests/test_native_build.py checks both builds simulate the same run.
        summary = simulate(out, "--spark", master, "--spark-python", str(bare_python), "--trace", trace.as_uri(),
                           "--duration-s", "600", destination=out.as_uri(), env={"REPLICAST_PURE_PYTHON": "1"})
    same_summaries(summary, local_sweep[1])
    assert dataset_digest(out) == dataset_digest(local_sweep[0])
    # The tasks ran in the bare Python, from the archive Spark unpacked in the worker's executor.
    assert f":{bare_python}" in (out / "stderr.log").read_text()
    assert list((cluster / "work").glob("app-*/*/replicast_env/replicast/simulator/sweep.py"))
