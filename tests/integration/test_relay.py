"""Attacks on the node links by someone without the secret (docs/node.md, the handshake): two real node
processes, a real broker, and an attacker in this process.

* **Reflection**: the attacker poses as ``a`` to ``b`` and as ``b`` to ``a``, passing each node's
  challenge to the other, hoping one of them answers with a proof the other accepts; then it sends
  a forged batch with a huge offset.
* **Relay with injection**: ``a`` dials ``b`` through a relay that forwards the real handshake
  untouched and then slips a forged frame between two of ``a``'s frames.

Neither may deliver the forged record, and the genuine records must still arrive afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import aiomqtt
import pytest

from replicast.engine.messages import Batch, Hello, Proof
from replicast.engine.wire import FrameDecoder, WireError, decode, encode
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.integration.helpers import CPU_FILTER_QUERY, ROOT, free_ports, metric, shut, wait_for, wait_port

SECRET = "relay-test-secret"
FORGED_STREAM = StreamReplica(ReplicaId("busy", 0), ReplicaId("alerts", 0), 0)


def forged_batch() -> bytes:
    return encode(Batch(FORGED_STREAM, 0, 10**9, [(5_000, "forged", 0.99)], None))


def cluster_file(directory: Path, name: str, a_ports: tuple[int, int], b_ports: tuple[int, int], broker: int) -> Path:
    path = directory / name
    path.write_text(f"""query = "query.toml"
secret = "{SECRET}"
[mqtt]
broker = "mqtt://127.0.0.1:{broker}"
[[nodes]]
name = "a"
port = {a_ports[0]}
metrics_port = {a_ports[1]}
[[nodes]]
name = "b"
port = {b_ports[0]}
metrics_port = {b_ports[1]}
[placement]
cpu = ["a"]
busy = ["a"]
alerts = ["b"]
[outputs.alerts]
file = "alerts.jsonl"
mqtt = false
""")
    return path


class Processes:
    """A broker and the two nodes as real processes; always stopped."""

    def __init__(self, directory: Path):
        self.directory, self.processes = directory, []

    def start(self, *args: str, log: str) -> None:
        out = (self.directory / log).open("w")
        self.processes.append(subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(10)


@pytest.fixture
def nodes(tmp_path):
    """Starts the cluster; ``a`` dials b at ``b_address`` (b's real port, or a relay's)."""
    (tmp_path / "query.toml").write_text(CPU_FILTER_QUERY)
    a_port, a_metrics, b_port, b_metrics, broker, relay = free_ports(6)
    real = cluster_file(tmp_path, "cluster.toml", (a_port, a_metrics), (b_port, b_metrics), broker)
    via_relay = cluster_file(tmp_path, "cluster-a.toml", (a_port, a_metrics), (relay, b_metrics), broker)
    processes = Processes(tmp_path)

    def start(relayed: bool) -> None:
        processes.start("-m", "replicast.engine.aio.broker", "--port", str(broker), log="broker.log")
        wait_port(broker)
        processes.start("-m", "replicast.engine.cli", "node", "--config", str(real), "--name", "b", "--log-json", log="b.log")
        processes.start("-m", "replicast.engine.cli", "node", "--config", str(via_relay if relayed else real), "--name", "a",
                        "--log-json", log="a.log")
        wait_port(a_metrics)
        wait_port(b_metrics)

    try:
        yield {"dir": tmp_path, "start": start, "a": a_port, "b": b_port, "b_metrics": b_metrics,
               "broker": broker, "relay": relay}
    finally:
        processes.stop()


def a_connected_at_b(nodes) -> bool:
    try:
        return metric(nodes["b_metrics"], "replicast_peer_connected") == 1.0
    except KeyError:                         # no link yet: the gauge has no sample
        return False


def publish(port: int, items: list[dict]) -> None:
    async def send():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"relay-test-{os.getpid()}") as client:
            await client.publish("replicast/in/cpu", json.dumps(items), qos=1)
    asyncio.run(send())


def delivered(directory: Path) -> list[dict]:
    out = directory / "alerts.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def genuine_records_arrive_and_forged_do_not(nodes) -> None:
    records = [{"ts": 10_000 + i, "server": f"s{i}", "load": 0.9} for i in range(5)]
    publish(nodes["broker"], [*records, {"punctuation": CLOSED}])
    wait_for(lambda: len(delivered(nodes["dir"])) >= 5, 30, "the genuine records at b")
    got = delivered(nodes["dir"])
    assert [r["server"] for r in got] == [f"s{i}" for i in range(5)], got


# -- reflection -----------------------------------------------------------------------------------
def read_frames(sock: socket.socket, decoder: FrameDecoder, timeout: float) -> list:
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except (socket.timeout, OSError):
        return []
    try:
        return [decode(body) for body in decoder.feed(data)] if data else []
    except WireError:
        return []


def test_reflection_through_two_connections_delivers_no_forged_record(nodes):
    nodes["start"](relayed=False)
    wait_for(lambda: metric(nodes["b_metrics"], "replicast_ready") == 1.0, 30, "b ready")
    to_b = socket.create_connection(("127.0.0.1", nodes["b"]), timeout=10)
    to_a = socket.create_connection(("127.0.0.1", nodes["a"]), timeout=10)
    b_decoder, a_decoder = FrameDecoder(), FrameDecoder()
    to_b.sendall(encode(Hello("a", os.urandom(16))))           # "I am a" to b
    b_nonce, sent_to_a = None, False
    for _ in range(20):                                          # pass each side's frames to the other
        for message in read_frames(to_b, b_decoder, 0.2):
            if isinstance(message, Hello) and not sent_to_a:
                b_nonce, sent_to_a = message.nonce, True
                to_a.sendall(encode(Hello("b", b_nonce)))    # "I am b" to a, with b's challenge
            elif isinstance(message, Proof):
                to_a.sendall(encode(message))
        for message in read_frames(to_a, a_decoder, 0.2):
            if isinstance(message, Proof):
                try:                                          # a's answer to b's challenge, to b,
                    to_b.sendall(encode(message) + forged_batch())    # and at once the forgery
                except OSError:
                    pass                                      # b already closed it: fine
    assert b_nonce is not None, "b never sent its challenge"
    to_b.close()
    to_a.close()
    wait_for(lambda: a_connected_at_b(nodes), 30, "the real a at b")
    genuine_records_arrive_and_forged_do_not(nodes)


# -- relay with injection -------------------------------------------------------------------------
class InjectingRelay:
    """Forwards a → b and b → a byte for byte; once armed, slips ``frame`` into a → b at the next
    frame boundary (it can read the length prefixes, not forge anything)."""

    def __init__(self, listen: int, target: int, frame: bytes):
        self.server = socket.create_server(("127.0.0.1", listen))
        self.target, self.frame = target, frame
        self.armed = threading.Event()
        self.injected = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                a_side, _ = self.server.accept()
            except OSError:
                return
            try:
                b_side = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a_side.close()                       # b not up yet: a dials again
                continue
            threading.Thread(target=self._pump, args=(a_side, b_side, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(b_side, a_side, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, inject: bool) -> None:
        buffer = b""
        try:
            while data := source.recv(65536):
                if not inject:
                    sink.sendall(data)
                    continue
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                    size = 4 + int.from_bytes(buffer[:4], "big")
                    sink.sendall(buffer[:size])
                    buffer = buffer[size:]
                    if self.armed.is_set() and not self.injected.is_set():
                        sink.sendall(self.frame)
                        self.injected.set()
        except OSError:
            pass
        finally:
            shut(source, sink)

    def close(self) -> None:
        self.server.close()


def test_a_relay_on_the_path_cannot_inject_a_record(nodes):
    relay = InjectingRelay(nodes["relay"], nodes["b"], forged_batch())
    try:
        nodes["start"](relayed=True)
        wait_for(lambda: a_connected_at_b(nodes), 30, "a's link through the relay")
        relay.armed.set()                          # the next frame a sends (a heartbeat) carries the forgery
        wait_for(relay.injected.is_set, 10, "the relay to inject its frame")
        wait_for(lambda: a_connected_at_b(nodes), 30, "a to reconnect")
        genuine_records_arrive_and_forged_do_not(nodes)
    finally:
        relay.close()


# -- before authentication: small frames, few connections, short log lines ------------------------
def log_of(nodes, name: str) -> str:
    return (nodes["dir"] / f"{name}.log").read_text()


def test_a_stranger_cannot_make_a_node_buffer_a_large_frame_or_log_a_long_name(nodes):
    nodes["start"](relayed=False)
    wait_for(lambda: metric(nodes["b_metrics"], "replicast_ready") == 1.0, 30, "b ready")
    with socket.create_connection(("127.0.0.1", nodes["b"]), timeout=10) as sock:
        sock.sendall((64 * 2**20).to_bytes(4, "big") + b"\x92" * 1000)        # "a 64 MiB frame follows"
        assert sock.recv(100) == b""                                           # closed, not buffered
    with socket.create_connection(("127.0.0.1", nodes["b"]), timeout=10) as sock:
        sock.sendall(encode(Hello("n" * 400, os.urandom(16))))
        assert sock.recv(100) == b""
    wait_for(lambda: log_of(nodes, "b").count('"event": "refused"') >= 2, 10, "two refusals in b's log")
    refusals = [line for line in log_of(nodes, "b").splitlines() if '"event": "refused"' in line]
    assert "exceeds the 512-byte limit" in refusals[0]
    assert all(len(line) < 600 for line in refusals), refusals
    assert a_connected_at_b(nodes)      # the real a is untouched


def test_idle_strangers_cannot_hold_more_than_32_handshakes(nodes):
    nodes["start"](relayed=False)
    wait_for(lambda: metric(nodes["b_metrics"], "replicast_ready") == 1.0, 30, "b ready")
    idle = [socket.create_connection(("127.0.0.1", nodes["b"]), timeout=10) for _ in range(40)]
    try:
        wait_for(lambda: "connections are already in their handshake" in log_of(nodes, "b"), 4,
                 "b to refuse connections beyond 32 before their handshake times out")
        # the log line comes with the first refusal; the other seven follow as b accepts them
        wait_for(lambda: metric(nodes["b_metrics"], "replicast_refused_connections") >= 8, 4,
                 "b to refuse the 8 connections beyond 32")
    finally:
        for sock in idle:
            sock.close()
