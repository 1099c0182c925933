"""Real clients, real brokers, real sockets: mosquitto_pub → node → mosquitto_sub through mosquitto
and through the embedded amqtt broker; dead letters; a wrong secret is refused; garbage frames and
payloads (Hypothesis) never crash a node."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from replicast.engine.wire import WireError
from tests.wire_strategies import frames, payloads
from tests.integration.helpers import (authenticate, cluster, free_ports, metric, mosquitto, sealed,
                                       two_node_cluster, wait_for, without_output_id)

SECRET = "right-secret-123"


def write_cluster(tmp_path: Path, broker: str, broker_port: int) -> Path:
    return two_node_cluster(tmp_path, secret=SECRET, ports=free_ports(4), broker_port=broker_port, broker=broker,
                            placement='cpu = ["a", "b"]\nbusy = ["b", "a"]\nalerts = ["b"]')


def pub(port: int, topic: str, message: str | bytes) -> None:
    args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", topic]
    if message == b"":
        subprocess.run(args + ["-n"], check=True, timeout=20)
    elif isinstance(message, bytes):
        subprocess.run(args + ["-s"], input=message, check=True, timeout=20)
    else:
        subprocess.run(args + ["-m", message], check=True, timeout=20)


class Subscriber:
    """A mosquitto_sub process; lines are read by a thread.  ``ready()`` waits until a probe
    published on replicast/probe comes back, i.e. all its subscriptions are live."""

    def __init__(self, port: int, topics: list[str]):
        self.port = port
        args = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-v", "-t", "replicast/probe"]
        for topic in topics:
            args += ["-t", topic]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.process.stdout], daemon=True).start()

    def ready(self) -> None:
        for _ in range(100):
            pub(self.port, "replicast/probe", "probe")
            try:
                if self.lines.get(timeout=0.2).startswith("replicast/probe"):
                    return
            except queue.Empty:
                pass
        raise TimeoutError("mosquitto_sub never subscribed")

    def take(self, n: int, timeout: float = 30) -> list[tuple[str, str]]:
        got: list[tuple[str, str]] = []
        while len(got) < n:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"expected {n} messages within {timeout} s, got {got}") from None
            topic, _, payload = line.rstrip("\n").partition(" ")
            if topic != "replicast/probe":
                got.append((topic, payload))
        return got

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def roundtrip(port: int) -> None:
    subscriber = Subscriber(port, ["replicast/out/alerts", "replicast/dead-letter"])
    try:
        subscriber.ready()
        pub(port, "replicast/in/cpu", json.dumps([{"ts": 1_000, "server": "x", "load": 0.9},
                                                  {"ts": 1_001, "server": "y", "load": 0.1},
                                                  {"punctuation": 2_000}]))
        pub(port, "replicast/in/cpu", '{"ts": 1500, "server": "late", "load": 0.9}')
        pub(port, "replicast/in/cpu", b"\xc1 garbage")
        pub(port, "replicast/in/nosuchstream", '{"ts": 1}')
        pub(port, "replicast/in/cpu", json.dumps({"punctuation": 2**63 - 1}))
        # 1 output (+1 for CLOSED) and 3 dead letters from each of the two entry-point replicas
        messages = subscriber.take(8)
        outputs = [[without_output_id(i) for i in json.loads(p)] for t, p in messages if t == "replicast/out/alerts"]
        assert outputs == [[{"ts": 1000, "server": "x", "load": 0.9}, {"punctuation": 2000}],
                           [{"punctuation": 2**63 - 1}]]
        letters = [json.loads(p) for t, p in messages if t == "replicast/dead-letter"]
        kinds = sorted((l["node"], l["reason"].split(" ")[0].rstrip(":")) for l in letters)
        assert kinds == [("a", "late"), ("a", "malformed"), ("a", "unknown"),
                         ("b", "late"), ("b", "malformed"), ("b", "unknown")]
    finally:
        subscriber.close()


needs_clients = pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto-clients not installed")


@needs_clients
def test_mosquitto_pub_to_mosquitto_sub_through_mosquitto(tmp_path):
    with mosquitto(tmp_path) as port:
        with cluster(write_cluster(tmp_path, f"mqtt://127.0.0.1:{port}", port), tmp_path / "run"):
            roundtrip(port)


@needs_clients
def test_mosquitto_pub_to_mosquitto_sub_through_the_embedded_amqtt_broker(tmp_path):
    port = free_ports(1)[0]
    with cluster(write_cluster(tmp_path, "embedded", port), tmp_path / "run"):
        roundtrip(port)


# -- the TCP side: handshake and garbage ----------------------------------------------------------
def handshake(port: int, name: str, secret: bytes, verifier: str = "b"):
    """Do the dialer's side of the handshake as node ``name``; returns (socket, sealer), the sealer
    None if the node refused (it then closes the socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sealer, _, _, _ = authenticate(sock, name, secret, verifier)     # checks the node's proof too
    except WireError:
        return sock, None
    return sock, sealer


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("nodes")
    port = free_ports(1)[0]
    path = write_cluster(tmp_path, "embedded", port)
    with cluster(path, tmp_path / "run"):
        text = path.read_text()
        node_port = int(text.split('name = "b"\nport = ')[1].split("\n")[0])
        metrics_port = int(text.split('name = "b"\nport = ')[1].split("metrics_port = ")[1].split("\n")[0])
        yield node_port, metrics_port, tmp_path / "run", port


def test_a_peer_with_the_wrong_secret_is_refused_and_logged(two_nodes):
    node_port, metrics_port, run_dir, _ = two_nodes
    before = metric(metrics_port, "replicast_refused_connections")
    sock, sealer = handshake(node_port, "a", b"wrong-secret-456")
    assert sealer is None and closed_by_peer(sock)
    wait_for(lambda: metric(metrics_port, "replicast_refused_connections") == before + 1, 10, "the refusal count")
    assert "failed the shared-secret challenge" in (run_dir / "b.log").read_text()
    assert metric(metrics_port, 'replicast_peer_connected') == 1.0     # the real link to a is untouched


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(frames(), min_size=1, max_size=4), st.booleans())
def test_garbage_after_a_good_handshake_never_crashes_the_node(two_nodes, chunks, authenticated):
    node_port, metrics_port, run_dir, _ = two_nodes
    # pose as node "a": the node replaces its link to a with ours, then drops ours on the garbage
    sock, sealer = handshake(node_port, "a", SECRET.encode())
    assert sealer is not None
    for chunk in chunks:
        try:     # tagged hostile frames (they pass authentication and meet the decoder and the core),
                 # or the raw bytes (they fail authentication)
            sock.sendall(sealed(sealer, chunk) if authenticated and len(chunk) >= 4 else chunk)
        except OSError:
            break
    sock.close()
    wait_for(lambda: metric(metrics_port, "replicast_peer_connected") == 1.0, 20, "the real node a to reconnect")


@needs_clients
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads)
def test_garbage_payloads_never_crash_the_node(two_nodes, payload):
    node_port, metrics_port, run_dir, broker_port = two_nodes
    pub(broker_port, "replicast/in/cpu", payload)
    wait_for(lambda: metric(metrics_port, "replicast_ready") == 1.0, 10, "node b to be alive and ready")
