"""A node's source_port within bounds (engine/aio/tcp_source.py, docs/node.md "TCP sources"): the
connection cap, the per-line byte bound, the idle time-out, the secret challenge and TLS client
certificates, and the node's memory under many hostile connections.  Real node processes
(``replicast cluster up``), real sockets; every refusal is read back from the node's metrics."""

from __future__ import annotations

import json
import re
import shutil
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from replicast.engine.source_protocol import answer
from replicast.operators.record import CLOSED
from tests.integration.helpers import cluster, free_ports, metric, two_node_cluster, wait_for

SECRET = "source-port-test"


def write_cluster(tmp_path: Path, ports: list[int], limits: str = "", top: str = "") -> Path:
    """a hosts the entry point (source port ports[3]) and the filter; b the application, writing a file."""
    extra = "[outputs.alerts]\nfile = \"out/alerts.jsonl\"\n" + (f"[source_connections]\n{limits}\n" if limits else "")
    return two_node_cluster(tmp_path, secret=SECRET, ports=[ports[1], ports[2], ports[4], ports[5]],
                            broker_port=ports[0], node_a=f"source_port = {ports[3]}", top=top,
                            placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]', extra=extra)


def scrape(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        return page.read().decode()


def refused(metrics_port: int) -> dict[str, float]:
    """``replicast_source_refused_total`` by reason."""
    return {m[1]: float(m[2]) for m in re.finditer(r'^replicast_source_refused_total\{reason="(\w+)"\} (\S+)$',
                                                   scrape(metrics_port), re.M)}


def accepted(metrics_port: int) -> float:
    return sum(float(v) for v in re.findall(r"^replicast_replica_accepted_total\{[^}]*\} (\S+)$",
                                            scrape(metrics_port), re.M))


def closed_by_node(sock: socket.socket, timeout: float) -> bool:
    """Whether the node closes ``sock`` within ``timeout`` s (False: it is still open then)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def record(ts: int, server: str) -> str:
    return "cpu " + json.dumps({"ts": ts, "server": server, "load": 0.9}) + "\n"


def delivered(tmp_path: Path) -> list[str]:
    out = tmp_path / "out" / "alerts.jsonl"
    return [json.loads(line)["server"] for line in out.read_text().splitlines()] if out.exists() else []


def closes_stream(tmp_path: Path, metrics_b: int, sock: socket.socket) -> list[str]:
    """Send CLOSED on ``sock``; wait until the application has it; the servers delivered."""
    sock.sendall(("cpu " + json.dumps({"punctuation": CLOSED}) + "\n").encode())
    def closed() -> bool:
        try:
            return metric(metrics_b, "replicast_app_punctuation") == float(CLOSED)
        except KeyError:                               # no punctuation delivered yet
            return False
    wait_for(closed, 30, "CLOSED at the application")
    return delivered(tmp_path)


def test_connection_cap_line_bound_and_idle_timeout(tmp_path):
    ports = free_ports(6)
    write_cluster(tmp_path, ports, "max_connections = 4\nmax_line_bytes = 1024\nidle_timeout_s = 3")
    source_port, metrics_a, metrics_b = ports[3], ports[2], ports[5]
    with cluster(tmp_path / "cluster.toml", tmp_path / "run"):
        sources = [socket.create_connection(("127.0.0.1", source_port), timeout=10) for _ in range(4)]
        wait_for(lambda: metric(metrics_a, "replicast_source_connections") == 4, 10, "4 open source connections")
        fifth = socket.create_connection(("127.0.0.1", source_port), timeout=10)
        assert closed_by_node(fifth, 10), "the 5th connection over max_connections = 4 stays open"
        assert refused(metrics_a)["too_many_connections"] == 1
        assert metric(metrics_a, "replicast_source_connections") == 4

        # An over-long line is refused and skipped; the next line on the same connection, and the
        # lines of another connection, are read.
        sources[0].sendall(b"cpu [" + b"x" * 2000 + b"]\n" + record(10_000, "after-long-line").encode())
        sources[1].sendall(record(10_001, "other-source").encode())
        wait_for(lambda: accepted(metrics_a) >= 2, 10, "both good lines accepted")
        assert refused(metrics_a)["line_too_long"] == 1

        # Idle: 0, 2 and 3 say nothing more and are closed after ~3 s; 1 sends an empty line
        # every second and stays open.
        started = time.monotonic()
        for _ in range(6):
            sources[1].sendall(b"\n")
            time.sleep(1)
        assert closed_by_node(sources[2], 0.5) and closed_by_node(sources[3], 0.5) and closed_by_node(sources[0], 0.5)
        assert time.monotonic() - started >= 3
        # The source that kept sending is still served: a record on it is accepted (an event to
        # wait for, not a quiet interval that proves nothing).
        sources[1].sendall(record(10_002, "kept-open").encode())
        wait_for(lambda: accepted(metrics_a) >= 3, 10, "the record of the source that kept sending")
        assert refused(metrics_a)["idle"] == 3
        # The idle connections' places are free again: a new source is accepted.
        late = socket.create_connection(("127.0.0.1", source_port), timeout=10)
        assert closes_stream(tmp_path, metrics_b, late) == ["after-long-line", "other-source", "kept-open"]
        log = (tmp_path / "run" / "a.log").read_text()
        peer = str(sources[0].getsockname()[1])
        assert any('"reason": "line_too_long"' in line and peer in line for line in log.splitlines())
        assert log.count('"reason": "too_many_connections"') == 1
        for sock in (*sources, fifth, late):
            sock.close()


def test_sources_must_answer_the_challenge_with_the_cluster_secret(tmp_path):
    ports = free_ports(6)
    write_cluster(tmp_path, ports, 'auth = "secret"')
    source_port, metrics_a, metrics_b = ports[3], ports[2], ports[5]

    def connect() -> tuple[socket.socket, bytes]:
        sock = socket.create_connection(("127.0.0.1", source_port), timeout=10)
        return sock, sock.makefile("rb").readline()

    with cluster(tmp_path / "cluster.toml", tmp_path / "run"):
        silent, _ = connect()                                     # never answers
        started = time.monotonic()
        no_auth, _ = connect()
        no_auth.sendall(record(10_000, "unauthenticated").encode())
        wrong, challenge = connect()
        wrong.sendall(answer(b"not-the-secret", challenge) + record(10_001, "wrong-secret").encode())
        assert closed_by_node(no_auth, 10) and closed_by_node(wrong, 10)
        right, challenge = connect()
        right.sendall(answer(SECRET.encode(), challenge) + record(10_002, "authenticated").encode())
        assert closed_by_node(silent, 15)
        assert time.monotonic() - started >= 4.5                    # HANDSHAKE_TIMEOUT is 5 s
        assert closes_stream(tmp_path, metrics_b, right) == ["authenticated"]
        counts = refused(metrics_a)
        assert (counts["auth_failed"], counts["auth_timeout"]) == (2, 1)
        assert accepted(metrics_a) == 1
        for sock in (silent, no_auth, wrong, right):
            sock.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")
def test_sources_must_show_a_client_certificate_from_the_cluster_ca(tmp_path):
    from tests.integration.test_tls import make_ca, make_node_cert
    certs, rogue = tmp_path / "certs", tmp_path / "rogue"
    for directory, ca in ((certs, "replicast-test-ca"), (rogue, "some-other-ca")):
        directory.mkdir()
        make_ca(directory, ca)
    for name in ("a", "b", "source"):
        make_node_cert(certs, name)
    make_node_cert(rogue, "source")
    ports = free_ports(6)
    write_cluster(tmp_path, ports, 'auth = "tls"', top="[tls]\ncert = \"certs/{node}.crt\"\nkey = \"certs/{node}.key\"\n"
                                                      "ca = \"certs/ca.crt\"")
    source_port, metrics_a, metrics_b = ports[3], ports[2], ports[5]

    def connect(directory: Path | None) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", source_port), timeout=10)
        if directory is None:
            return sock
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        context.check_hostname = False
        context.load_cert_chain(str(directory / "source.crt"), str(directory / "source.key"))
        return context.wrap_socket(sock)

    with cluster(tmp_path / "cluster.toml", tmp_path / "run"):
        plain = connect(None)
        plain.sendall(record(10_000, "plain").encode())
        assert closed_by_node(plain, 10)
        try:
            stranger = connect(rogue)
            stranger.sendall(record(10_001, "rogue-certificate").encode())
            assert closed_by_node(stranger, 10)
        except (ssl.SSLError, ConnectionResetError):
            pass                                       # TLS 1.2 refuses in the handshake itself
        good = connect(certs)
        good.sendall(record(10_002, "certified").encode())
        assert closes_stream(tmp_path, metrics_b, good) == ["certified"]
        assert refused(metrics_a)["tls_failed"] == 2
        assert accepted(metrics_a) == 1
        log = (tmp_path / "run" / "a.log").read_text()
        assert "presented a certificate for 'source'" in log
        for sock in (plain, good):
            sock.close()


def rss_bytes(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def test_memory_stays_bounded_under_200_connections_sending_garbage_without_newlines(tmp_path):
    """Default limits (no [source_connections]): 256 connections, 64 KiB a line.  Half the
    connections send 1 MiB without a newline (refused, skipped), the other half just under the
    limit (held).  The node's RSS grows by less than 200 x 64 KiB plus 32 MiB of slack (the old
    4 MiB-a-line port held all of it: ~100 MiB more), and a genuine source is still served."""
    ports = free_ports(6)
    write_cluster(tmp_path, ports)
    source_port, metrics_a, metrics_b = ports[3], ports[2], ports[5]
    connections, limit = 200, 64 * 1024
    with cluster(tmp_path / "cluster.toml", tmp_path / "run") as processes:
        pid = processes["a"]["pid"]
        warm = socket.create_connection(("127.0.0.1", source_port), timeout=10)
        warm.sendall(b"x" * 2 * limit + b"\n" + record(10_000, "before").encode())
        wait_for(lambda: accepted(metrics_a) >= 1, 10, "the first record accepted")
        before = rss_bytes(pid)
        hostile = []
        for i in range(connections):
            sock = socket.create_connection(("127.0.0.1", source_port), timeout=30)
            sock.sendall(b"\xff" * (1024 * 1024 if i % 2 else limit - 1))
            hostile.append(sock)
        wait_for(lambda: refused(metrics_a)["line_too_long"] >= 1 + connections // 2, 60,
                 "every 1 MiB line refused")
        assert metric(metrics_a, "replicast_source_connections") == connections + 1
        time.sleep(1)
        after = 0
        for _ in range(5):
            after = max(after, rss_bytes(pid))
            time.sleep(0.2)
        growth = after - before
        print(f"RSS of node a: {before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB with {connections} hostile "
              f"connections (+{growth / 2**20:.1f} MiB)")
        assert growth < connections * limit + 32 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB"
        warm.sendall(record(10_001, "after").encode())
        assert closes_stream(tmp_path, metrics_b, warm) == ["before", "after"]
        for sock in (*hostile, warm):
            sock.close()
