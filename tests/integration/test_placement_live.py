"""Issue 13 on real processes: a loopback cluster with ``placement = "min-cost"`` deploys itself, its
coordinator garbage-collects stream replicas while records flow, the application's output equals
``replay``'s reference, and when the coordinator's process is SIGKILLed the next node takes over and
adopts what runs from the reports.

The cluster: ``c0`` (a spare, the coordinator: smallest name), ``n1`` (the source's entry point),
``n2``, ``n3``, ``n4`` (the application).  cpu -> f -> g -> watch with f and g at kmax = kmin = 2, so
garbage collection may take only stream replicas between f and g (two of the four).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from tests.integration.helpers import (cluster, collect_outputs, coordinated_cluster_toml, free_ports, kill, metric,
                                       mosquitto, wait_for)

NODES = ["c0", "n1", "n2", "n3", "n4"]
QUERY = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[operators]]
name = "f"
kind = "filter"
input = "cpu"
where = "load >= 0.0"

[[operators]]
name = "g"
kind = "filter"
input = "f"
where = "load >= 0.0"

[[applications]]
name = "watch"
input = "g"
"""
TICK_S = 0.1
TICKS = 110
KILL_AT = 70


def cluster_file(tmp_path, ports, broker_port) -> str:
    return coordinated_cluster_toml(NODES, ports, broker_port, secret="placement-secret", coordinator="""
utility_period_s = 1
gc_period_s = 4
theta = 0
pin = { cpu = "n1", watch = "n4" }""", output_file=tmp_path / "out" / "watch.jsonl")


async def drive(broker_port: int, on_kill) -> tuple[list[dict], list[tuple], float, float]:
    published: list[dict] = []
    received: list[tuple] = []
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-sub") as sub, \
            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        await sub.subscribe("replicast/out/#", qos=1)

        collector = asyncio.create_task(collect_outputs(
            sub, lambda app, items: received.extend((i["ts"], i["server"], i["load"]) for i in items if "ts" in i)))
        first = time.time()
        for tick in range(TICKS):
            if tick == KILL_AT:
                on_kill()
            ts = time.time_ns() // 1000
            items = [{"ts": ts, "server": f"s{tick % 7}", "load": round((tick * 7 % 20) / 20, 2)},
                     {"punctuation": ts}]
            published.append(items[0])
            await pub.publish("replicast/in/cpu", json.dumps(items), qos=1)
            await asyncio.sleep(TICK_S)
        last = time.time()
        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)
        await asyncio.wait_for(collector, 60)
    return published, received, first, last


def decisions(log_path) -> list[dict]:
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "placement_decision"]


def test_a_min_cost_cluster_deploys_itself_and_collects_stream_replicas_without_changing_output(tmp_path):
    (tmp_path / "query.toml").write_text(QUERY)
    query = load_query(tmp_path / "query.toml")
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(10)
        path = tmp_path / "cluster.toml"
        path.write_text(cluster_file(tmp_path, ports, broker_port))
        with cluster(path, tmp_path / "run") as processes:
            assert metric(ports[5], "replicast_placement_coordinating") == 1      # c0, the smallest name
            assert metric(ports[5], "replicast_placement_deployed") == 1
            published, received, first, last = asyncio.run(drive(broker_port, lambda: kill(processes["c0"])))
            # n1 took over when c0's links broke and adopted what runs once it had settled.
            wait_for(lambda: metric(ports[6], "replicast_placement_adopted_total") == 1, 20, "n1 to adopt")
            assert metric(ports[6], "replicast_placement_coordinating") == 1
        made = decisions(tmp_path / "run" / "c0.log")
    initial = [d for d in made if d["reason"] == "initial"]
    assert {d["target"] for d in initial if d["decision"] == "deploy"} == {"f#0", "f#1", "g#0", "g#1"}
    gc = [d for d in made if d["reason"] == "gc"]
    assert gc and all(d["decision"] == "disconnect" and d["target"].startswith("f#") for d in gc), gc
    assert len({d["target"] for d in gc}) == 2
    stamps = [time.mktime(time.strptime(d["time"][:19], "%Y-%m-%dT%H:%M:%S")) for d in gc]
    assert all(first - 1 <= t <= last + 1 for t in stamps), (first, stamps, last)     # while records flowed
    streams = {"cpu": [(r["ts"], r["server"], r["load"]) for r in published]}
    reference = replay(query, streams, replicas=1, punctuation_us=100_000).outputs["watch"]
    assert len(reference) == TICKS
    assert Counter(received) == Counter(reference)
