"""Issue 11 item 9: ``cluster up`` checks every port before starting anything and, when a node dies
at start, names that node with the last line of its log (not the first node in the file)."""

from __future__ import annotations

import json
import socket

import pytest

from replicast.cluster import emulation, netem
from tests.integration.helpers import free_ports, replicast, two_node_cluster


def cluster_file(tmp_path, ports=None, broker_port=None, **extra):
    ports = ports or free_ports(4)
    return two_node_cluster(tmp_path, secret="checks-secret", ports=ports,
                            broker_port=broker_port or free_ports(1)[0],
                            placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]', **extra)


def up(tmp_path, path):
    return replicast("cluster", "up", str(path), "--run-dir", str(tmp_path / "run"), "--timeout", "30")


def assert_failed_at_once(result, tmp_path, message):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replicast cluster: error: "), result.stderr
    assert message in lines[0], lines[0]
    assert not (tmp_path / "run" / "state.json").exists()
    assert not list((tmp_path / "run").glob("*.log"))                 # nothing was started


@pytest.mark.parametrize("case, message", [
    ("duplicate port", "node b: port {0} is already node a's port"),
    ("port equals a metrics port", "node b: port {1} is already node a's metrics_port"),
    ("duplicate metrics port", "node b: metrics_port {1} is already node a's metrics_port"),
    ("broker port", "the embedded broker: [mqtt] port {0} is already node a's port"),
    ("out of range", "[[nodes]] #2 (b): 'port' must be a port number (1-65535), got 70003"),
])
def test_a_port_clash_fails_at_once_naming_node_and_port(tmp_path, case, message):
    a, am, b, bm = free_ports(4)
    ports, broker = {"duplicate port": ([a, am, a, bm], None), "port equals a metrics port": ([a, am, am, bm], None),
                     "duplicate metrics port": ([a, am, b, am], None), "broker port": ([a, am, b, bm], a),
                     "out of range": ([a, am, 70003, bm], None)}[case]
    result = up(tmp_path, cluster_file(tmp_path, ports, broker))
    assert_failed_at_once(result, tmp_path, message.format(a, am))


def test_a_port_in_use_fails_at_once(tmp_path):
    ports = free_ports(4)
    with socket.create_server(("127.0.0.1", ports[3])):
        result = up(tmp_path, cluster_file(tmp_path, ports))
    assert_failed_at_once(result, tmp_path, f"node b: metrics_port {ports[3]} on 127.0.0.1 cannot be used: "
                                            "Address already in use")


def test_a_node_that_dies_at_start_is_blamed_with_its_last_log_line(tmp_path):
    """Node b (second in the file) reads its own broker over TLS with a CA file that is missing, so it
    cannot start; node a runs fine and waits for b.  The error names b and b's own last log line, and
    everything started is stopped.  (An output file that cannot be opened no longer stops a node:
    that application reports not ready, docs/consume.md.)"""
    result = up(tmp_path, cluster_file(tmp_path, mqtt='ca = "missing-ca.pem"',
                                       extra='[mqtt.brokers]\nb = "mqtts://127.0.0.1:1"\n'))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    log = (tmp_path / "run" / "b.log").read_text().strip().splitlines()
    assert lines[0].startswith("replicast cluster: error: node b exited at start with status "), lines[0]
    assert log[-1] in lines[0] and "missing-ca.pem" in lines[0], (lines[0], log[-1])
    assert not (tmp_path / "run" / "state.json").exists()


def test_auto_takes_relays_exactly_where_netem_is_missing():
    reason = netem.probe()
    assert emulation.choose("auto") == (("netem", None) if reason is None else ("relay", reason))
    assert emulation.choose("relay") == ("relay", None)
    if reason is not None:
        with pytest.raises(emulation.ClusterError, match="netem"):
            emulation.choose("netem")


def test_down_stops_what_up_recorded(tmp_path):
    """State files stay readable (one JSON object with the processes)."""
    path = cluster_file(tmp_path)
    result = up(tmp_path, path)
    try:
        assert result.returncode == 0, result.stderr
        state = json.loads((tmp_path / "run" / "state.json").read_text())
        assert [p["name"] for p in state["processes"]] == ["broker", "a", "b"]
    finally:
        down = replicast("cluster", "down", "--run-dir", str(tmp_path / "run"), "--grace", "5")
    assert "stopped 3 process(es)" in down.stdout
