"""Entry-stamped mode over real TCP: the link between the two entry replicas is cut (docs/node.md).

Nodes ``a`` and ``b`` each host a replica of the entry-stamped stream ``cpu``; ``c`` hosts the filter
and the application (a file).  ``a`` dials ``b`` through a proxy in this process, which the test
cuts (connections closed, new ones refused) and restores; every other link is direct.  A source
publishes 40 events over MQTT, which both entry replicas receive.  Before the fix both replicas
stamped during the cut and every event published then was delivered twice, with two timestamps.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import aiomqtt

from tests.integration.helpers import CPU_FILTER_QUERY, free_ports, metric, shut, wait_for, wait_port
from tests.integration.test_relay import Processes

SECRET = "entry-split-brain-test"


class CuttableProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; :meth:`cut` closes every connection and refuses
    new ones until :meth:`restore`."""

    def __init__(self, port: int, target: int):
        self.target, self.open, self.pairs = target, True, []
        self.server = socket.create_server(("127.0.0.1", port))
        self.server.settimeout(0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            if not self.open:
                shut(conn)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                shut(conn)
                continue
            self.pairs.append((conn, upstream))
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        shut(src, dst, close=False)

    def cut(self) -> None:
        self.open = False
        for pair in self.pairs:
            shut(*pair)
        self.pairs = []

    def restore(self) -> None:
        self.open = True

    def stop(self) -> None:
        self.stopped = True
        self.cut()
        self.server.close()


def cluster_file(path: Path, ports: dict, b_port: int) -> Path:
    path.write_text(f"""query = "query.toml"
secret = "{SECRET}"
entry_mode = "entry"
punctuation_ms = 50
heartbeat_ms = 100
peer_timeout_ms = 600
[mqtt]
broker = "mqtt://127.0.0.1:{ports['broker']}"
[[nodes]]
name = "a"
port = {ports['a']}
metrics_port = {ports['a_metrics']}
[[nodes]]
name = "b"
port = {b_port}
metrics_port = {ports['b_metrics']}
[[nodes]]
name = "c"
port = {ports['c']}
metrics_port = {ports['c_metrics']}
[placement]
cpu = ["a", "b"]
busy = ["c"]
alerts = ["c"]
[outputs.alerts]
file = "alerts.jsonl"
mqtt = false
""")
    return path


def publish(port: int, first: int, n: int) -> None:
    async def send():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"split-brain-{os.getpid()}") as client:
            for i in range(first, first + n):
                await client.publish("replicast/in/cpu", json.dumps({"server": f"s{i}", "load": 0.9}), qos=1)
                await asyncio.sleep(0.05)
    asyncio.run(send())


def delivered(directory: Path) -> list[dict]:
    out = directory / "alerts.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def sample(metrics_port: int, name: str) -> float | None:
    try:
        return metric(metrics_port, name)
    except (KeyError, OSError):                # not listening yet, or no sample yet
        return None


def linked(metrics_port: int, peer: str) -> bool:
    return sample(metrics_port, f'replicast_peer_connected{{peer="{peer}"}}') == 1.0


def test_a_cut_between_two_entry_replicas_stamps_each_event_once(tmp_path):
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    names = ["a", "a_metrics", "b", "b_metrics", "c", "c_metrics", "broker", "proxy"]
    ports = dict(zip(names, free_ports(len(names))))
    real = cluster_file(tmp_path / "cluster.toml", ports, ports["b"])
    via_proxy = cluster_file(tmp_path / "cluster-a.toml", ports, ports["proxy"])   # a dials b through it
    proxy = CuttableProxy(ports["proxy"], ports["b"])
    processes = Processes(tmp_path)
    try:
        processes.start("-m", "replicast.engine.aio.broker", "--port", str(ports["broker"]), log="broker.log")
        wait_port(ports["broker"])
        for name, config in (("b", real), ("c", real), ("a", via_proxy)):
            processes.start("-m", "replicast.engine.cli", "node", "--config", str(config), "--name", name, "--log-json",
                            log=f"{name}.log")
        wait_for(lambda: all(sample(ports[f"{n}_metrics"], "replicast_ready") == 1.0 for n in "abc"), 60,
                 "every node ready (a stamper elected, the other entry replica a member)")
        publish(ports["broker"], 0, 10)
        proxy.cut()
        wait_for(lambda: not linked(ports["a_metrics"], "b") and not linked(ports["b_metrics"], "a"), 10,
                 "the link a-b down at both ends")
        publish(ports["broker"], 10, 20)
        proxy.restore()
        wait_for(lambda: linked(ports["a_metrics"], "b"), 30, "a and b linked again")
        publish(ports["broker"], 30, 10)
        wait_for(lambda: len({r["server"] for r in delivered(tmp_path)}) >= 40, 30, "40 events at c")
        # Every event was stamped before now: once the application's punctuation passes now, anything
        # stamped twice has been delivered (a punctuation p promises every later record has ts > p).
        mark = time.time_ns() // 1000
        wait_for(lambda: (sample(ports["c_metrics"], 'replicast_app_punctuation{app="alerts"}') or 0) >= mark, 30,
                 "the application's punctuation past every stamp")
    finally:
        proxy.stop()
        processes.stop()
    records = delivered(tmp_path)
    counts = Counter(r["server"] for r in records)
    assert not {s: n for s, n in counts.items() if n > 1}, f"delivered twice: {sorted(counts.items())}"
    assert sorted(counts) == sorted(f"s{i}" for i in range(40))
