"""Crash-only on core bugs (engine/node.py rules 1–2, cluster/keeper.py), on real processes.

``cluster up`` starts the embedded broker and nodes a, b, c (each under its keeper): the entry point
of ``cpu`` and the operator ``relay`` run on a and b (k = 2), the application ``out`` on c.
``relay`` is :class:`tests.integration.crash_operator.CrashOnce`: at its 60th record the replica
that claims the marker first raises inside its node's core.  That node must log the exception with
its traceback, refuse everything after, exit with status 70; its keeper must start it again with
its state directory, it must rejoin from its live peer's snapshot and report ready — and ``out``
must receive exactly what a failure-free run gives (``replicast replay``), no record lost or twice.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import aiomqtt
import psutil

from replicast.cluster.readiness import node_ready
from replicast.engine.node_cli import EXIT_BUG
from replicast.engine.replay import replay
from replicast.engine.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.crash_operator import crash_query
from tests.integration.helpers import cluster, collect_outputs, free_ports

AFTER = 60
TICK_S = 0.1
RECORDS_PER_TICK = 6
#: Rounds published after the crashed node is ready again (its replicas then carry half the load).
AFTER_READY_TICKS = 15


def cluster_file(directory: Path, ports: list[int]) -> Path:
    (directory / "query.toml").write_text(crash_query(AFTER, directory / "bug-fired"))
    nodes = "".join(f'[[nodes]]\nname = "{name}"\nport = {ports[2 * i]}\nmetrics_port = {ports[2 * i + 1]}\n\n'
                    for i, name in enumerate("abc"))
    path = directory / "cluster.toml"
    path.write_text(f'query = "query.toml"\nsecret = "crash-only-secret"\npunctuation_ms = 50\n\n'
                    f'[mqtt]\nbroker = "embedded"\nport = {ports[6]}\n\n{nodes}'
                    f'[placement]\ncpu = ["a", "b"]\nrelay = ["a", "b"]\nout = ["c"]\n')
    return path


def log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def node_of(keeper_pid: int) -> int | None:
    """The pid of the node process the keeper runs now (psutil: its only child)."""
    children = psutil.Process(keeper_pid).children()
    return children[0].pid if children else None


async def drive(broker_port: int, on_tick) -> tuple[list[dict], list[dict]]:
    """Publish rounds of records and punctuations while ``on_tick(tick)`` says go on; then CLOSED.
    Returns what was published and what ``out`` received."""
    published, received = [], []
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="crash-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="crash-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)
        collector = asyncio.create_task(collect_outputs(
            sub, lambda app, items: received.extend(i for i in items if "ts" in i), applications=1))
        tick = 0
        while on_tick(tick):
            records = [{"ts": time.time_ns() // 1000 + i, "server": f"s{tick}-{i}", "load": (tick * 7 + i) % 10 / 10}
                       for i in range(RECORDS_PER_TICK)]
            published += records
            await pub.publish("replicast/in/cpu", json.dumps(records), qos=1)
            await pub.publish("replicast/in/cpu", json.dumps({"punctuation": records[-1]["ts"]}), qos=1)
            await asyncio.sleep(TICK_S)
            tick += 1
        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)
        await asyncio.wait_for(collector, 60)
    return published, received


def test_a_core_bug_stops_the_node_its_keeper_restarts_it_and_the_output_is_exact(tmp_path):
    ports = free_ports(7)
    path = cluster_file(tmp_path, ports)
    metrics = {"a": ports[1], "b": ports[3]}
    run = tmp_path / "run"
    seen: dict = {}
    with cluster(path, run) as processes:
        keepers = {name: processes[name]["pid"] for name in "ab"}
        first = {name: node_of(pid) for name, pid in keepers.items()}
        assert None not in first.values(), first

        def on_tick(tick: int) -> bool:
            if "crashed" not in seen and (tmp_path / "bug-fired").exists():
                seen["crashed"] = tick
            if "crashed" in seen and "ready" not in seen:
                for name in "ab":
                    now = node_of(keepers[name])
                    if now not in (None, first[name]) and node_ready("127.0.0.1", metrics[name]):
                        seen["ready"], seen["node"] = tick, name
                assert tick < seen["crashed"] + 300, "the crashed node never came back ready"
            return "ready" not in seen or tick < seen["ready"] + AFTER_READY_TICKS

        published, received = asyncio.run(drive(ports[6], on_tick))
        crashed = seen["node"]
        assert psutil.Process(keepers[crashed]).is_running()           # the keeper lives on
        lines = {name: log_lines(run / f"{name}.log") for name in "abc"}

    other = "b" if crashed == "a" else "a"
    failed = [line for line in lines[crashed] if line.get("event") == "core_failed"]
    assert len(failed) == 1, failed                                   # logged once, then input refused
    assert "InjectedBug: planted bug" in failed[0]["exception"] and "crash_operator.py" in failed[0]["exception"]
    assert failed[0]["exception"].startswith("Traceback"), failed[0]["exception"][:200]
    restarts = [line for line in lines[crashed] if line.get("event") == "node_restarting"]
    assert [line["status"] for line in restarts] == [EXIT_BUG]         # it exited non-zero, once, and came back
    assert sum(line.get("event") == "listening" for line in lines[crashed]) == 2
    rejoined = [line for line in lines[crashed] if line.get("event") == "replica_state"
                and line["replica"] == "relay#" + ("0" if crashed == "a" else "1") and line["state"] == "live"]
    assert rejoined and "snapshot" in rejoined[-1]["message"], rejoined
    assert not any(line.get("event") in ("core_failed", "node_restarting") for line in lines[other] + lines["c"])
    ready_again = [line["t"] for line in lines[crashed] if line.get("event") == "ready" and line["t"] > failed[0]["t"]]
    print(f"node {crashed}: core failed at record {AFTER}, ready again {ready_again[0] - failed[0]['t']:.2f} s later "
          f"(exit, keeper's back-off, start, rejoin by snapshot); {len(published)} records published")

    # The reference: the same query in one failure-free process (its marker already claimed).
    (tmp_path / "claimed").touch()
    reference_query = tmp_path / "reference.toml"
    reference_query.write_text(crash_query(AFTER, tmp_path / "claimed"))
    query = load_query(reference_query)
    stream = [(r["ts"], r["server"], r["load"]) for r in published]
    reference = replay(query, {"cpu": stream}, replicas=1, punctuation_us=50_000).outputs["out"]
    got = [(r["ts"], r["server"], r["load"]) for r in received]
    assert len(reference) == len(published) > AFTER * 2
    assert Counter(got) == Counter(reference), (f"{len(got)} received, {len(reference)} expected; missing "
                                                f"{list((Counter(reference) - Counter(got)))[:3]}, extra "
                                                f"{list((Counter(got) - Counter(reference)))[:3]}")


def test_without_the_planted_bug_nothing_restarts(tmp_path):
    """The control: the same cluster with the marker already claimed runs through with no exit."""
    ports = free_ports(7)
    path = cluster_file(tmp_path, ports)
    (tmp_path / "bug-fired").touch()
    run = tmp_path / "run"
    with cluster(path, run) as processes:
        keepers = {name: processes[name]["pid"] for name in "ab"}
        first = {name: node_of(pid) for name, pid in keepers.items()}
        published, received = asyncio.run(drive(ports[6], lambda tick: tick < 2 * AFTER // RECORDS_PER_TICK))
        assert {name: node_of(pid) for name, pid in keepers.items()} == first
    assert Counter((r["ts"], r["server"]) for r in received) == Counter((r["ts"], r["server"]) for r in published)
