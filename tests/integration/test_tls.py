"""Node links over mutually authenticated TLS: certificates made with the ``openssl`` commands of
docs/deploy.md (one cluster CA, one certificate per node via ``{node}`` in ``[tls]``); records
cross a TLS link between two real node processes; a peer that does not speak TLS, and a peer
whose certificate comes from another CA, are refused, logged and counted."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from unittest.mock import ANY

import aiomqtt
import pytest

from replicast.engine.messages import Hello
from replicast.engine.wire import FrameDecoder, WireError, decode, encode
from replicast.operators.record import CLOSED
from tests.integration.helpers import (cluster, free_ports, metric, two_node_cluster, wait_for,
                                       without_output_id)

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> None:
    """docs/deploy.md, step 1: the cluster CA."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", "ca.key", "-out", "ca.crt", cwd=directory)


def make_node_cert(directory: Path, node: str) -> None:
    """docs/deploy.md, step 2: one key and certificate per node, signed by the cluster CA."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={node}",
            "-keyout", f"{node}.key", "-out", f"{node}.csr", cwd=directory)
    (directory / "node.ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                                        "extendedKeyUsage=serverAuth,clientAuth\n")
    openssl("x509", "-req", "-in", f"{node}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "node.ext", "-out", f"{node}.crt", cwd=directory)


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("tls")
    certs, rogue = tmp_path / "certs", tmp_path / "rogue"
    for directory, ca in ((certs, "replicast-test-ca"), (rogue, "some-other-ca")):
        directory.mkdir()
        make_ca(directory, ca)
    for node in ("a", "b"):
        make_node_cert(certs, node)
    make_node_cert(rogue, "a")                 # a certificate for "a", but from the wrong CA
    ports = free_ports(5)
    # Every record crosses the a -> b link: the entry point and the filter run on a, the application on b.
    two_node_cluster(tmp_path, secret="tls-test-secret", ports=ports[:4], broker_port=ports[4],
                     top='[tls]\ncert = "certs/{node}.crt"\nkey = "certs/{node}.key"\nca = "certs/ca.crt"',
                     placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]',
                     extra='[outputs.alerts]\nfile = "out/alerts.jsonl"')
    with cluster(tmp_path / "cluster.toml", tmp_path / "run"):
        yield {"dir": tmp_path, "b_port": ports[2], "b_metrics": ports[3], "broker": ports[4], "rogue": rogue}


async def publish(port: int, items: list[dict]) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier="tls-test-pub") as client:
        await client.publish("replicast/in/cpu", json.dumps(items), qos=1)


def test_records_cross_a_tls_link(tls_cluster):
    records = [{"ts": 1_000 + i, "server": f"s{i}", "load": 0.9} for i in range(20)]
    asyncio.run(publish(tls_cluster["broker"], [*records, {"ts": 1_100, "server": "idle", "load": 0.1},
                                                {"punctuation": CLOSED}]))
    out = tls_cluster["dir"] / "out" / "alerts.jsonl"
    lines = wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 20 and out.read_text(), 30,
                     "20 alerts delivered on b").splitlines()
    assert [without_output_id(json.loads(l)) for l in lines] == [{"app": "alerts", **r, "arrival": ANY} for r in records]
    assert '"event": "link_up"' in (tls_cluster["dir"] / "run" / "b.log").read_text()


def refused_after(tls_cluster, connect) -> str:
    """Run ``connect`` (a would-be peer of b); assert b refuses, counts and logs it; return the log line."""
    port, metrics_port = tls_cluster["b_port"], tls_cluster["b_metrics"]
    before = metric(metrics_port, "replicast_refused_connections")
    got = connect(port)
    assert not any(isinstance(m, Hello) for m in got), "b answered the handshake of a peer it should refuse"
    wait_for(lambda: metric(metrics_port, "replicast_refused_connections") == before + 1, 10, "the refusal count")
    assert metric(metrics_port, "replicast_peer_connected") == 1.0         # the real link to a is untouched
    log = (tls_cluster["dir"] / "run" / "b.log").read_text().splitlines()
    return [l for l in log if '"event": "refused"' in l][-1]


def frames_from(sock) -> list:
    """Send a Hello as node "a"; return the frames b sends back before it closes the connection."""
    decoder, messages = FrameDecoder(), []
    try:
        sock.sendall(encode(Hello("a", os.urandom(16))))
        while data := sock.recv(65536):
            messages += [decode(body) for body in decoder.feed(data)]
    except (OSError, WireError):
        pass
    return messages


def test_a_peer_without_tls_is_refused(tls_cluster):
    def plain(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            return frames_from(sock)
    line = refused_after(tls_cluster, plain)
    assert "TLS:" in line, line                 # its Hello is not a TLS ClientHello


def test_a_peer_with_a_certificate_from_another_ca_is_refused(tls_cluster):
    rogue = tls_cluster["rogue"]

    def untrusted(port):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE     # the rogue trusts anyone
        context.load_cert_chain(rogue / "a.crt", rogue / "a.key")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            try:
                sock = context.wrap_socket(raw)
            except OSError:
                return []                       # refused during the handshake (TLS 1.2)
            with sock:
                return frames_from(sock)        # TLS 1.3: refused right after it
    line = refused_after(tls_cluster, untrusted)
    assert "TLS:" in line and "certificate" in line.lower(), line


def test_a_trusted_certificate_passes_tls_and_reaches_the_secret_challenge(tls_cluster):
    """The control for the two refusals: the same client with a certificate of the cluster CA gets
    b's Hello, so what refused them above was TLS."""
    certs = tls_cluster["dir"] / "certs"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(certs / "ca.crt")
    context.load_cert_chain(certs / "a.crt", certs / "a.key")
    with socket.create_connection(("127.0.0.1", tls_cluster["b_port"]), timeout=10) as raw, \
            context.wrap_socket(raw) as sock:
        sock.sendall(encode(Hello("a", os.urandom(16))))
        decoder, messages = FrameDecoder(), []
        while not messages:
            messages += [decode(body) for body in decoder.feed(sock.recv(65536))]
    assert isinstance(messages[0], Hello) and messages[0].node == "b"
    wait_for(lambda: metric(tls_cluster["b_metrics"], "replicast_peer_connected") == 1.0, 20, "a to reconnect")
