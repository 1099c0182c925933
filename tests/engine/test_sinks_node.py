"""A file output that fails does not stop its node (docs/node.md, "Outputs"): a real node process
whose ``alerts`` output directory is a read-only mount starts, keeps delivering its other
application, reports ``alerts`` not ready (metric, event), and writes every line once the
directory is writable again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import urllib.request
import uuid

import aiomqtt
import pytest

from replicast.operators.record import CLOSED
from tests.integration.helpers import CPU_FILTER_QUERY, ROOT, free_ports, mosquitto, wait_for, wait_port

QUERY = CPU_FILTER_QUERY + """
[[applications]]
name = "everything"
input = "cpu"
"""


def samples(port: int, name: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in page.read().decode().splitlines()
                if line.startswith(name)}


def publish(port: int, items) -> None:
    async def send():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"sinks-node-{uuid.uuid4().hex[:6]}") as client:
            for item in items:
                await client.publish("replicast/in/cpu", json.dumps(item), qos=1)
    asyncio.run(send())


def test_a_read_only_output_directory_fails_safe(tmp_path):
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    node = None
    with contextlib.ExitStack() as stack:
        stack.callback(subprocess.run, ["umount", "--lazy", str(mount)])
        broker_port = stack.enter_context(mosquitto(tmp_path))
        port, metrics_port = free_ports(2)
        (tmp_path / "query.toml").write_text(QUERY)
        config = tmp_path / "cluster.toml"
        config.write_text(f"""query = "query.toml"
secret = "sinks-node-secret"
punctuation_ms = 50
[mqtt]
broker = "mqtt://127.0.0.1:{broker_port}"
[[nodes]]
name = "a"
port = {port}
metrics_port = {metrics_port}
[placement]
cpu = ["a"]
busy = ["a"]
alerts = ["a"]
everything = ["a"]
[outputs.alerts]
file = "ro/alerts.jsonl"
[outputs.everything]
file = "rw/everything.jsonl"
""")
        log = open(tmp_path / "node.log", "w")
        stack.callback(lambda: node.poll() is not None or (node.terminate(), node.wait(10)))
        node = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(config),
                                 "--name", "a", "--log-json", "--state-dir", str(tmp_path / "state")],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        wait_port(metrics_port, 30)
        records = [{"ts": 1000 + i, "server": f"s{i}", "load": 0.9 if i % 2 else 0.1} for i in range(40)]
        wait_for(lambda: samples(metrics_port, "replicast_output_ready").get('replicast_output_ready{app="alerts"}') == 0,
                 20, "alerts reported not ready")
        wait_for(lambda: samples(metrics_port, "replicast_mqtt_connected")["replicast_mqtt_connected"] == 1, 20,
                 "subscribed")
        publish(broker_port, [records, {"punctuation": 2000}])
        everything = tmp_path / "rw" / "everything.jsonl"
        wait_for(lambda: everything.exists() and len(everything.read_text().splitlines()) == 40, 20,
                 "the other application's output")
        assert node.poll() is None
        assert samples(metrics_port, "replicast_ready")["replicast_ready"] == 0
        events = [json.loads(l) for l in (tmp_path / "node.log").read_text().splitlines() if l.startswith("{")]
        assert any(e.get("event") == "output_failing" and e.get("app") == "alerts" for e in events)
        subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        wait_for(lambda: samples(metrics_port, "replicast_output_ready").get('replicast_output_ready{app="alerts"}') == 1,
                 20, "alerts writing again")
        publish(broker_port, [{"punctuation": CLOSED}])
        alerts = mount / "alerts.jsonl"
        wait_for(lambda: alerts.exists() and len(alerts.read_text().splitlines()) == 20, 20, "every alert written")
        lines = [json.loads(l) for l in alerts.read_text().splitlines()]
        assert [l["ts"] for l in lines] == [r["ts"] for r in records if r["load"] > 0.5]
        wait_for(lambda: samples(metrics_port, "replicast_ready")["replicast_ready"] == 1, 20, "the node ready again")
