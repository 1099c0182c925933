"""A node that reports ready is processing (docs/node.md): ``replicast_ready`` follows what the node
can do, not only what it could once.

* A real broker process is killed under a running node and started again on the same port: the
  node says it is not ready while it cannot take its source, stays alive, says ready again once it
  reconnects, and then processes what the source publishes.
* A driver task fails (the metrics refresher, the one that sets the gauge): the gauge falls at once,
  and rises again once the task is back.
* A scrape reads the node as it is at the scrape, not as the last periodic refresh saw it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import prometheus_client

from replicast.engine.aio.driver import SCRAPE_WAIT_S, NodeDriver
from replicast.engine.cluster_config import load_cluster
from replicast.operators.record import CLOSED
from tests.integration.helpers import CPU_FILTER_QUERY, ROOT, free_ports, metric, wait_for, wait_port
from tests.integration.test_survival import publish


def start_broker(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return process


def one_node_cluster(tmp_path, node_port: int, metrics_port: int, broker_port: int):
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    (tmp_path / "cluster.toml").write_text(f"""query = "query.toml"
secret = "readiness-test-secret"
punctuation_ms = 50
[mqtt]
broker = "embedded"
port = {broker_port}
[[nodes]]
name = "a"
port = {node_port}
metrics_port = {metrics_port}
[placement]
cpu = ["a"]
busy = ["a"]
alerts = ["a"]
[outputs.alerts]
file = "alerts.jsonl"
""")
    return tmp_path / "cluster.toml"


def test_ready_follows_the_broker_and_a_ready_node_processes(tmp_path):
    node_port, metrics_port, broker_port = free_ports(3)
    one_node_cluster(tmp_path, node_port, metrics_port, broker_port)
    broker = start_broker(broker_port)
    log = (tmp_path / "a.log").open("w")
    node = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(tmp_path / "cluster.toml"),
                             "--name", "a", "--log-json"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(metrics_port)
        wait_for(lambda: metric(metrics_port, "replicast_ready") == 1.0, 30, "a ready")
        broker.terminate()
        broker.wait(10)
        wait_for(lambda: metric(metrics_port, "replicast_ready") == 0.0, 10, "a not ready without its broker")
        assert metric(metrics_port, "replicast_mqtt_connected") == 0.0
        assert node.poll() is None, "the node exited when its broker went away"

        broker = start_broker(broker_port)
        wait_for(lambda: metric(metrics_port, "replicast_ready") == 1.0, 60, "a ready again")
        publish(broker_port, [json.dumps([{"ts": 1_000 + i, "server": f"s{i}", "load": 0.9} for i in range(5)]
                                         + [{"punctuation": CLOSED}]).encode()])
        out = tmp_path / "alerts.jsonl"
        wait_for(lambda: out.exists() and len(out.read_text().splitlines()) == 5, 30, "the alerts")
        assert [json.loads(line)["server"] for line in out.read_text().splitlines()] == [f"s{i}" for i in range(5)]
    finally:
        for process in (node, broker):
            process.terminate()
        for process in (node, broker):
            process.wait(10)
        log.close()


def with_ready_driver(tmp_path, check) -> None:
    """Run node ``a`` of :func:`one_node_cluster` in-process, with a real broker; once it is ready,
    ``await check(driver, metrics_port)``; then stop both."""
    node_port, metrics_port, broker_port = free_ports(3)
    config = load_cluster(one_node_cluster(tmp_path, node_port, metrics_port, broker_port))
    broker = start_broker(broker_port)

    async def main():
        driver = NodeDriver(config, "a")
        task = asyncio.create_task(driver.run(install_signals=False))
        try:
            await until(lambda: driver.metrics.ready._value.get() == 1, "ready")
            await check(driver, metrics_port)
        finally:
            driver.stop()
            await asyncio.gather(task, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        broker.terminate()
        broker.wait(10)


def test_a_driver_task_that_fails_makes_the_node_unready_until_it_is_back(tmp_path):
    async def check(driver, _):
        gauge = driver.metrics.ready._value.get
        statistics = driver.core.statistics

        def broken():
            raise RuntimeError("injected: the metrics refresher fails")
        driver.core.statistics = broken
        await until(lambda: "metrics" in driver._supervisor.down, "the metrics task to fail")
        assert gauge() == 0 and not driver.is_ready()
        driver.core.statistics = statistics
        await until(lambda: gauge() == 1, "ready again")
        assert driver.metrics.task_failures.labels("metrics")._value.get() >= 1

    with_ready_driver(tmp_path, check)


def test_a_scrape_reads_the_node_as_it_is_at_the_scrape(tmp_path):
    """Each record a source hands the node is counted by the very next scrape (a periodic refresh
    alone would lag it by up to 200 ms: ``cluster up`` returned while the coordinator's metrics still
    said it had not deployed)."""
    async def check(driver, metrics_port):
        seen = []
        for i in range(20):
            driver._on_source("cpu", json.dumps([{"ts": 1_000 + i, "server": "s", "load": 0.1}]).encode())
            seen.append(await asyncio.to_thread(metric, metrics_port, "replicast_replica_accepted_total"))
        assert seen == [float(i + 1) for i in range(20)]
        # Collected on the event loop itself (an embedding application), it refreshes without waiting.
        driver._on_source("cpu", json.dumps([{"ts": 2_000, "server": "s", "load": 0.1}]).encode())
        loop = asyncio.get_running_loop()
        began = loop.time()
        text = prometheus_client.generate_latest(driver.metrics.registry).decode()
        assert loop.time() - began < SCRAPE_WAIT_S
        assert 'replicast_replica_accepted_total{kind="entry",replica="cpu#0"} 21.0' in text

    with_ready_driver(tmp_path, check)


async def until(condition, what: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(0.01)
