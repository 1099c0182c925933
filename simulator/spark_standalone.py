"""A Spark standalone Master and Workers on one machine, started from the PySpark install's
``bin/spark-class`` (what ``$SPARK_HOME/sbin/start-master.sh`` / ``start-worker.sh`` run): the
cluster ``replicast simulate --spark spark://HOST:PORT`` is tested and benchmarked against
(tests/simulator/test_spark.py, benchmarks/spark_workers.py)."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from replicast.operators.errors import ReplicastError


def spark_class() -> Path:
    """``bin/spark-class`` of the installed PySpark."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@contextmanager
def standalone_cluster(folder: Path, ports: list[int], *, workers: int = 1, cores: int = 2, memory: str = "1g",
                       host: str = "127.0.0.1", start_s: float = 180.0) -> Iterator[str]:
    """A Master on ``ports[0]`` (web UI ``ports[1]``) and ``workers`` Workers of ``cores`` cores
    (web UIs ``ports[2:]``), their logs and work directories under ``folder``; yields the master
    URL once every worker has registered, and stops them all on exit."""
    if len(ports) < 2 + workers:
        raise ValueError(f"{workers} workers need {2 + workers} ports, got {len(ports)}")
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOCAL_IP": host, "SPARK_LOG_DIR": str(folder), "SPARK_WORKER_DIR": str(folder / "work")}
    master = f"spark://{host}:{ports[0]}"
    processes: list[subprocess.Popen] = []

    def start(name: str, *arguments: str) -> Path:
        log = folder / f"{name}.log"
        with open(log, "w") as stream:
            processes.append(subprocess.Popen([str(spark_class()), *arguments], env=env, stdout=stream,
                                              stderr=subprocess.STDOUT))
        return log

    try:
        master_log = start("master", "org.apache.spark.deploy.master.Master", "--host", host,
                           "--port", str(ports[0]), "--webui-port", str(ports[1]))
        _wait_for(master_log, "I have been elected leader", 1, processes[0], start_s)
        for i in range(workers):
            start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", master, "--host", host,
                  "--cores", str(cores), "--memory", memory, "--webui-port", str(ports[2 + i]))
        _wait_for(master_log, "Registering worker", workers, processes[0], start_s)
        yield master
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for(log: Path, text: str, count: int, process: subprocess.Popen, seconds: float) -> None:
    """Until ``log`` holds ``text`` ``count`` times; a one-line error if ``process`` ends first
    or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        content = log.read_text(errors="replace") if log.is_file() else ""
        if content.count(text) >= count:
            return
        if process.poll() is not None:
            raise ReplicastError(f"Spark exited with {process.returncode} before {text!r}: see {log}")
        time.sleep(0.5)
    raise ReplicastError(f"no {text!r} (x{count}) in {log} after {seconds:.0f} s")
