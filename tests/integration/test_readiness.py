"""A node that reports ready is processing (issue 11): ``replicast_ready`` follows what the node
can do, not only what it could once.  A real broker process is killed under a running node and
started again on the same port: the node says it is not ready while it cannot take its source,
stays alive, says ready again once it reconnects, and then processes what the source publishes."""

from __future__ import annotations

import json
import subprocess
import sys

from operators.record import CLOSED
from tests.integration.helpers import CPU_FILTER_QUERY, ROOT, free_ports, metric, wait_for, wait_port
from tests.integration.test_survival import publish


def start_broker(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "engine.aio.broker", "--port", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return process


def test_ready_follows_the_broker_and_a_ready_node_processes(tmp_path):
    node_port, metrics_port, broker_port = free_ports(3)
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
    broker = start_broker(broker_port)
    log = (tmp_path / "a.log").open("w")
    node = subprocess.Popen([sys.executable, "-m", "engine.cli", "node", "--config", str(tmp_path / "cluster.toml"),
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
