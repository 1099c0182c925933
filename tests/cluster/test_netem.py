"""Wide-area emulation with netem (``replicast cluster up --emulate-wan TRACE --wan-via netem``): nodes
in their own network namespaces with the trace's one-way delays between them.

Where the kernel has no netem (``CONFIG_NET_SCH_NETEM`` unset, as on the machine this was written
on), ``--wan-via netem`` must fail in one clear line with exit status 2 and leave nothing behind
(``auto`` takes the relays then: tests/cluster/test_relay_cluster.py), and the delay test skips
with the probe's reason; the namespace topology itself (bridge, veths, HTB classes and u32 filters
per destination) is still built, used and torn down."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from replicast.cluster import netem as wan
from tests.integration.helpers import free_ports, replicast

QUERY = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[applications]]
name = "alerts"
input = "cpu"
"""

REASON = wan.probe()
can_make_namespaces = REASON is None or "netem" in REASON


def write_cluster(tmp_path, nodes=("n0", "n1", "n2")):
    ports = free_ports(2 * len(nodes) + 1)
    (tmp_path / "query.toml").write_text(QUERY)
    text = f'query = "query.toml"\nsecret = "wan-test-secret"\n[mqtt]\nbroker = "embedded"\nport = {ports[-1]}\n'
    for i, node in enumerate(nodes):
        text += f'[[nodes]]\nname = "{node}"\nport = {ports[2 * i]}\nmetrics_port = {ports[2 * i + 1]}\n'
    text += f'[placement]\ncpu = ["{nodes[0]}", "{nodes[1]}"]\nalerts = ["{nodes[2]}"]\n'
    (tmp_path / "cluster.toml").write_text(text)
    return tmp_path / "cluster.toml"


def ours(tag: str) -> list[str]:
    return [ns for ns in wan.namespaces() if ns.startswith(f"replicast-{tag}-")]


def in_netns(ns: str, code: str) -> str:
    result = subprocess.run(wan.netns_command(ns, [sys.executable, "-c", code]), capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


CONNECT_TIME = """
import socket, sys, time
best = 1e9
for _ in range(5):
    start = time.perf_counter()
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
    best = min(best, time.perf_counter() - start)
print(best)
"""


def connect_time(ns: str, host: str, port: int) -> float:
    """Best-of-5 TCP connect time (one round trip) from namespace ``ns`` to ``host:port``, seconds."""
    return float(in_netns(ns, f"import sys; sys.argv[1:] = [{host!r}, '{port}']\n" + CONNECT_TIME))


def test_plan_takes_one_way_delays_from_the_trace_frame():
    from replicast.traces.store import TraceStore
    trace = TraceStore.open("seattle")
    t_us = 600 * 10**6
    p = wan.plan(["a", "b", "c"], lambda i, j: trace.one_way_us(i, j, t_us), trace.n_nodes, "t")
    assert p.delays_us[("a", "c")] == trace.one_way_us(0, 2, t_us) and p.delays_us[("c", "b")] == trace.one_way_us(2, 1, t_us)
    assert len(set(p.addresses.values())) == 3 and wan.HUB_ADDRESS not in p.addresses.values()
    assert wan.WanPlan.from_json(p.to_json()) == p
    with pytest.raises(wan.WanError, match="but the trace has 2"):
        wan.plan(["a", "b", "c"], lambda i, j: 1, 2, "t")


@pytest.mark.skipif(REASON is None, reason="netem works here: the full emulation test runs instead")
def test_without_netem_cluster_up_says_so_in_one_line_and_leaves_nothing(tmp_path):
    before = set(wan.namespaces())
    result = replicast("cluster", "up", str(write_cluster(tmp_path)), "--emulate-wan", "seattle", "--wan-via", "netem",
                       "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"replicast cluster: error: {REASON}"], result.stderr
    assert ours(wan.run_tag(tmp_path / "run")) == []
    # Nor a capability probe's namespace. A test on the other worker may hold namespaces of its own
    # for a moment (its probe, its topology), so what is new must be gone within a few seconds.
    deadline = time.monotonic() + 10
    while set(wan.namespaces()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(wan.namespaces()) - before == set()
    assert not (tmp_path / "run" / "state.json").exists()


@pytest.mark.skipif(not can_make_namespaces, reason=f"cannot make network namespaces here: {REASON}")
def test_namespace_topology_routes_per_destination_and_tears_down(tmp_path):
    """Bridge, veths, HTB classes and u32 filters per destination, without delays (works without netem)."""
    tag = wan.run_tag(tmp_path)
    p = wan.plan(["a", "b", "c"], lambda i, j: 1000 * (i + j), 3, tag)
    try:
        wan.setup(p, netem=False)
        assert sorted(ours(tag)) == sorted([p.hub, *p.namespaces.values()])
        server = subprocess.Popen(wan.netns_command(p.namespaces["b"], [
            sys.executable, "-c", "import socket,time; s=socket.create_server(('0.0.0.0', 7000)); time.sleep(60)"]))
        try:
            time.sleep(0.5)
            assert connect_time(p.namespaces["a"], p.addresses["b"], 7000) < 0.05
            assert connect_time(p.hub, p.addresses["b"], 7000) < 0.05
            # each destination has its own class: the u32 filter of a -> b counted the SYNs
            stats = subprocess.run(["tc", "-n", p.namespaces["a"], "-s", "class", "show", "dev", "eth0"],
                                   capture_output=True, text=True, check=True).stdout
            b_class = stats.split("class htb 1:b ")[1].split("class htb")[0]     # classid 10 + 1 = 0xb
            assert " 0 pkt" not in b_class.split("Sent", 1)[1].split("\n")[0], stats
        finally:
            server.kill()
            server.wait()
    finally:
        wan.teardown(p)
    assert ours(tag) == []


@pytest.mark.skipif(REASON is not None, reason=f"{REASON}")
def test_three_nodes_in_namespaces_see_the_trace_delays_and_down_removes_them(tmp_path):
    from replicast.traces.store import TraceStore
    trace = TraceStore.open("seattle")
    path, run = write_cluster(tmp_path), tmp_path / "run"
    up = replicast("cluster", "up", str(path), "--emulate-wan", "seattle", "--wan-via", "netem",
                   "--trace-nodes", "first", "--trace-time", "0", "--run-dir", str(run))
    tag = wan.run_tag(run)
    try:
        assert up.returncode == 0, up.stderr
        state = wan.WanPlan.from_json(__import__("json").loads((run / "state.json").read_text())["wan"])
        assert len(ours(tag)) == 4
        emulated = (run / "cluster-wan.toml").read_text()
        port = {n: int(emulated.split(f'name = "{n}", port = ')[1].split(",")[0]) for n in ("n0", "n1", "n2")}
        for a, i in (("n0", 0), ("n1", 1)):
            for b, j in (("n1", 1), ("n2", 2)):
                if a == b:
                    continue
                rtt = (trace.one_way_us(i, j, 0) + trace.one_way_us(j, i, 0)) / 1e6
                measured = connect_time(state.namespaces[a], state.addresses[b], port[b])
                print(f"{a}->{b}: trace RTT {rtt * 1e3:.1f} ms, TCP connect {measured * 1e3:.1f} ms")
                assert rtt <= measured < rtt + 0.05, (a, b, rtt, measured)
    finally:
        down = replicast("cluster", "down", "--run-dir", str(run), "--grace", "5")
    assert down.returncode == 0, down.stderr
    assert ours(tag) == []
