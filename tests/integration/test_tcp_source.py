"""Records enter through a TCP source connection (§II-B, docs/node.md), and 'cluster up' notices a source
that dies at start.  Real node processes, real sockets."""

from __future__ import annotations

import json
import socket
from unittest.mock import ANY

from replicast.operators.record import CLOSED
from tests.integration.helpers import (cluster, free_ports, metric, replicast, two_node_cluster, wait_for,
                                       without_output_id)


def write_cluster(tmp_path, ports, sources: str = "") -> None:
    """a hosts the entry point (with a source port) and the filter; b the application, writing a file."""
    two_node_cluster(tmp_path, secret="tcp-source-test", ports=[ports[1], ports[2], ports[4], ports[5]],
                     broker_port=ports[0], node_a=f"source_port = {ports[3]}",
                     placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]',
                     extra=f'[outputs.alerts]\nfile = "out/alerts.jsonl"\n{sources}')


def test_records_sent_over_a_tcp_source_connection_reach_the_application(tmp_path):
    ports = free_ports(6)
    write_cluster(tmp_path, ports)
    records = [{"ts": 10_000 + i, "server": f"s{i}", "load": 0.9} for i in range(50)]
    lines = [f"cpu {json.dumps(records[:25])}",                     # a batch
             *(f"cpu {json.dumps(r)}" for r in records[25:]),       # single records
             "cpu " + json.dumps({"ts": 11_000, "server": "idle", "load": 0.1}),
             "cpu " + json.dumps({"punctuation": 20_000}),
             "cpu " + json.dumps({"ts": 15_000, "server": "late", "load": 0.9}),   # behind the punctuation
             "cpu {not json",                                        # malformed
             "nosuchstream " + json.dumps({"ts": 1}),               # unknown stream
             "cpu " + json.dumps({"punctuation": CLOSED})]
    with cluster(tmp_path / "cluster.toml", tmp_path / "run"):
        with socket.create_connection(("127.0.0.1", ports[3]), timeout=10) as source:
            source.sendall("".join(line + "\n" for line in lines).encode())
        out = tmp_path / "out" / "alerts.jsonl"
        text = wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 50 and out.read_text(), 30,
                        "50 alerts delivered on b")
        assert [without_output_id(json.loads(line)) for line in text.splitlines()] == [
            {"app": "alerts", **r, "arrival": ANY} for r in records]
        wait_for(lambda: metric(ports[2], "replicast_dead_letters_total") >= 3, 10, "3 dead letters on a")
        assert metric(ports[2], "replicast_dead_letters_total") == 3
        assert '"event": "source_up"' in (tmp_path / "run" / "a.log").read_text()


def test_cluster_up_fails_when_a_source_dies_at_start(tmp_path):
    ports = free_ports(6)
    write_cluster(tmp_path, ports, sources='[[sources]]\nnode = "a"\ncommand = ["python3", "no-such-source.py"]\n')
    up = replicast("cluster", "up", str(tmp_path / "cluster.toml"), "--run-dir", str(tmp_path / "run"))
    assert up.returncode == 2
    assert "source source-a-0 exited with status 2 at start" in up.stderr
    assert "no-such-source.py" in up.stderr
    assert not (tmp_path / "run" / "state.json").exists()        # everything it started was stopped
