"""The Fig. 1 cluster of examples/cluster-fig1-ssh.toml on seven real sshd hosts (tests/cluster/sshd_hosts.py):
``cluster up`` installs the wheel on every host and starts the nodes there, with the wide-area delays of
the seattle trace between them (the project's delay relays, run on the hosts: cluster/remote_relays.py;
every node measures at least the trace's RTT to each peer); n3 is killed with
SIGKILL on its host, ``cluster restart n3`` starts it again (it rejoins by snapshot,
docs/lifecycle.md), and every application receives exactly `replay`'s reference of what was
published; ``cluster down`` leaves no process on any host.

The example file is used as written except where these hosts differ from its 10.0.0.10-16: the
addresses, the test's ssh key, known_hosts and per-host directories (the hosts share one
filesystem), ports where the hosts share loopback, and no ``[[sources]]`` (the test publishes, and
records what it published, as tests/integration/test_restart.py does).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import tomllib
import urllib.request
from collections import Counter

import aiomqtt
import pytest
import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from replicast.traces.store import TraceStore
from tests.cluster.sshd_hosts import processes_under, replicast, sshd_hosts, wheel  # noqa: F401  (a fixture)
from tests.cluster.test_remote_failures import up
from tests.integration.helpers import ROOT, collect_outputs, free_ports, publish_fig1_round

PUNCTUATION_MS = 100
TICK_S = 0.1
KILL_AT, RESTART_AT, AFTER_READY = 10, 15, 10
VICTIM = "n3"
SERVERS = [f"n{i}" for i in range(1, 7)]
#: Seven seattle nodes with no outage and one-way delays of 5-220 ms (RTTs of 10 ms or more) over the
#: first 200 s of the trace.
TRACE_NODES = ["seattle-1", "seattle-27", "seattle-32", "seattle-52", "seattle-60", "seattle-56", "seattle-66"]


def cluster_file(tmp_path, hosts, key, known_hosts):
    doc = tomllib.loads((ROOT / "examples/cluster-fig1-ssh.toml").read_text())
    doc["query"] = str(ROOT / "examples/cluster-fig1-query.toml")
    doc.pop("sources")
    address = {f"10.0.0.{10 + i}": h for i, h in enumerate(hosts)}
    loopback = hosts[0].namespace is None
    ports = iter(free_ports(15)) if loopback else None
    for node in doc["nodes"]:
        host = address[node["host"]]
        node["host"] = host.address
        node["ssh"] = host.ssh(key=str(key), known_hosts=str(known_hosts))
        if loopback:
            node["port"], node["metrics_port"] = next(ports), next(ports)
    doc["mqtt"]["host"] = hosts[0].address
    if loopback:
        doc["mqtt"]["port"] = next(ports)
    doc["punctuation_ms"] = PUNCTUATION_MS
    (tmp_path / "cluster.toml").write_text(tomli_w.dumps(doc))
    return tmp_path / "cluster.toml", doc


def check_delays(doc: dict) -> None:
    """Every node's heartbeat RTT to every peer is at least the trace's smallest RTT for that pair over
    the test's span (each host's relays keep their own origin, so the exact trace time is not known
    here); loopback veths alone give well under a millisecond."""
    trace = TraceStore.open("seattle")
    index = {node["name"]: trace.nodes.index(TRACE_NODES[i]) for i, node in enumerate(doc["nodes"])}
    floor = {(a, b): min(trace.one_way_us(index[a], index[b], t) + trace.one_way_us(index[b], index[a], t)
                         for t in range(0, 200_000_000, 10_000_000)) / 1e6 for a in index for b in index if a != b}
    time.sleep(1.5)                                         # a few heartbeats
    for node in doc["nodes"]:
        rtts = peer_rtts(node["host"], node["metrics_port"])
        assert set(rtts) == set(index) - {node["name"]}, rtts
        for peer, rtt in rtts.items():
            assert rtt >= floor[(node["name"], peer)] - 0.002, (node["name"], peer, rtt, floor[(node["name"], peer)])
    assert min(floor.values()) >= 0.01                     # every pair: 10 ms or more


def peer_rtts(host: str, metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return {s.labels["peer"]: s.value for family in text_string_to_metric_families(text)
            if family.name == "replicast_peer_rtt_seconds" for s in family.samples}


async def drive(doc: dict, run_dir) -> tuple[dict, dict, str]:
    """Publish Fig. 1 rounds; kill -9 the victim, then 'cluster restart' it while publishing goes on."""
    host, port = doc["mqtt"]["host"], doc["mqtt"]["port"]
    published = {f"{kind}_{s}": [] for s in SERVERS for kind in ("cpu", "ping")}
    arrivals: dict[str, list] = {}
    async with aiomqtt.Client(host, port, identifier="test-sub") as sub, \
            aiomqtt.Client(host, port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)
        collector = asyncio.create_task(collect_outputs(
            sub, lambda app, items: arrivals.setdefault(app, []).extend(i for i in items if "ts" in i), applications=3))
        tick, restart, restarted_at = 0, None, None
        while restarted_at is None or tick < restarted_at + AFTER_READY:
            if tick == KILL_AT:
                state = json.loads((run_dir / "state.json").read_text())
                os.kill(next(p["pid"] for p in state["remote"] if p["name"] == VICTIM), signal.SIGKILL)
            if tick == RESTART_AT:
                restart_t0 = time.monotonic()
                restart = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "replicast.engine.cli", "cluster", "restart", VICTIM, "--run-dir", str(run_dir),
                    "--timeout", "60", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            if restart is not None and restarted_at is None and restart.returncode is not None:
                restarted_at = tick
                print(f"cluster restart {VICTIM}: {time.monotonic() - restart_t0:.1f} s")
            if restart is not None and restart.returncode is None:
                try:
                    await asyncio.wait_for(asyncio.shield(restart.wait()), 0.001)
                except asyncio.TimeoutError:
                    pass
            await publish_fig1_round(pub, SERVERS, tick, published)
            await asyncio.sleep(TICK_S)
            tick += 1
            assert tick < 1200, "cluster restart did not finish"
        output = (await restart.stdout.read()).decode()
        assert restart.returncode == 0, output
        for stream in published:
            await pub.publish(f"replicast/in/{stream}", json.dumps({"punctuation": CLOSED}), qos=1)
        await asyncio.wait_for(collector, 90)
    return published, arrivals, output


@pytest.mark.slow
def test_fig1_on_ssh_hosts_survives_a_kill_and_a_restart(tmp_path, wheel):  # noqa: F811
    with sshd_hosts(tmp_path / "hosts", 7) as (hosts, key, _, known_hosts):
        path, doc = cluster_file(tmp_path, hosts, key, known_hosts)
        run_dir = tmp_path / "run"
        t0 = time.monotonic()
        started = up(path, run_dir, wheel, "--emulate-wan", "seattle", "--trace-nodes", ",".join(TRACE_NODES))
        print(f"cluster up on 7 hosts: {time.monotonic() - t0:.1f} s")
        try:
            assert started.returncode == 0, started.stdout[-3000:] + started.stderr
            assert all(f"[{n}] node {n} ready" in started.stdout for n in ["app", *SERVERS]), started.stdout
            assert "wide-area emulation (seattle via relays on the hosts" in started.stdout
            check_delays(doc)
            published, arrivals, restart_output = asyncio.run(drive(doc, run_dir))
            print(restart_output)
            assert f"cluster restart: {VICTIM} started again" in restart_output
            # Its log from the restart on: its replicas rejoined from their live peers' snapshots.
            assert restart_output.count(f"[{VICTIM}] node {VICTIM} listening") == 1, restart_output
            assert f"[{VICTIM}] replica correlate#0: joining -> live (restored from correlate#1's snapshot)" \
                in restart_output, restart_output
            status = replicast("cluster", "status", "--run-dir", str(run_dir))
            assert status.returncode == 0 and status.stdout.count(" ready ") == 7, status.stdout + status.stderr
        finally:
            down = replicast("cluster", "down", "--run-dir", str(run_dir), "--grace", "5")
        # the broker, 7 nodes and 7 relay processes
        assert down.returncode == 0 and "stopped 15 process(es) on 7 host(s)" in down.stdout, down.stdout + down.stderr
        deadline = time.monotonic() + 5
        while processes_under(*(h.dir for h in hosts)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_under(*(h.dir for h in hosts)) == []
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    streams = {name: [(r["ts"], *[v for k, v in r.items() if k != "ts"]) for r in records]
               for name, records in published.items()}
    reference = replay(query, streams, replicas=1, punctuation_us=PUNCTUATION_MS * 1000).outputs
    for app, spec in query.applications.items():
        names = query.schemas[spec.input].names
        got = [(i["ts"], *[i[n] for n in names]) for i in arrivals.get(app, [])]
        assert len(reference[app]) > 0, app
        assert Counter(got) == Counter(reference[app]), f"{app}: {len(got)} records vs {len(reference[app])}"
        if spec.ordered:
            assert got == reference[app], app
