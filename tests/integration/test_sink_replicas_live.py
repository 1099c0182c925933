"""Sink replicas placed by the coordinator, on real processes (docs/consume.md, "Sink replicas"):
``sink_replicas = 2`` makes Alg. 5 place a second replica of the application; when its node is
SIGKILLed mid-stream, revival places a third on another node, which joins from the pinned one's
snapshot while records flow.  Every sink replica writes its own file (``watch-{node}.jsonl``): the
same record has the same output id in every file, including the sink added at run time, though
equal records (same ts, same fields) come in pairs; and ``replicast.consume`` yields exactly
``replay``'s reference.

The cluster: ``c0`` (a spare: the coordinator, smallest name), ``n1`` and ``n2`` (the source's two
entry points), ``n3``, ``n4`` (the pinned sink replica, never killed).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict

import aiomqtt

from replicast.consume import Consumer
from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from tests.integration.helpers import cluster, coordinated_cluster_toml, free_ports, kill, mosquitto, wait_for

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

[[applications]]
name = "watch"
input = "f"
"""
TICK_S = 0.1
TICKS = 160
KILL_AT = 40


def cluster_file(tmp_path, ports, broker_port) -> str:
    return coordinated_cluster_toml(NODES, ports, broker_port, secret="sink-replicas-secret", coordinator="""
sink_replicas = 2
gc = false
revival_period_s = 1
expiry_s = 2
pin = { cpu = ["n1", "n2"], watch = "n4" }""", output_file=tmp_path / "out" / "watch-{node}.jsonl")


def decisions(run_dir) -> list[dict]:
    out = []
    for path in sorted(run_dir.glob("*.log")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
        out += [line for line in lines if line.get("event") == "placement_decision"]
    return out


def sink_host(run_dir, replica: str) -> str | None:
    hosts = [d["nodes"][0] for d in decisions(run_dir) if d["decision"] == "deploy" and d["target"] == replica]
    return hosts[-1] if hosts else None


async def drive(broker_port: int, run_dir, processes) -> tuple[list[dict], list[dict], str]:
    published: list[dict] = []
    consumer = Consumer("watch", [f"mqtt://127.0.0.1:{broker_port}"], client_id="test-consumer")
    got: list[dict] = []

    async def consume():
        async for record in consumer.records():
            got.append(record)
    reader = asyncio.create_task(consume())
    await asyncio.sleep(1.0)                                  # subscribed
    killed = ""
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub:
        for tick in range(TICKS):
            if tick == KILL_AT:
                killed = sink_host(run_dir, "watch#1")
                assert killed and killed != "n4", decisions(run_dir)
                kill(processes[killed])
            ts = time.time_ns() // 1000
            record = {"ts": ts, "server": f"s{tick % 3}", "load": float(tick % 4)}
            equal = tick % 2 == 0                             # two equal records: distinct events
            items = [record, dict(record)] if equal else [record]
            published += items
            await pub.publish("replicast/in/cpu", json.dumps([*items, {"punctuation": ts}]), qos=1)
            await asyncio.sleep(TICK_S)
        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)
    await asyncio.wait_for(reader, 60)
    return published, got, killed


def test_a_sink_replica_revived_at_run_time_publishes_the_same_ids_and_the_consumer_gets_the_reference(tmp_path):
    (tmp_path / "query.toml").write_text(QUERY)
    query = load_query(tmp_path / "query.toml")
    run_dir = tmp_path / "run"
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(10)
        path = tmp_path / "cluster.toml"
        path.write_text(cluster_file(tmp_path, ports, broker_port))
        with cluster(path, run_dir) as processes:
            wait_for(lambda: sink_host(run_dir, "watch#1"), 30, "the coordinator to place a second sink replica")
            published, got, killed = asyncio.run(drive(broker_port, run_dir, processes))
    revived = [d for d in decisions(run_dir) if d["decision"] == "deploy" and d["target"].startswith("watch#")
               and d["reason"] == "revival"]
    assert revived, decisions(run_dir)
    added = revived[0]["nodes"][0]
    assert added not in (killed, "n4")
    reference = replay(query, {"cpu": [(r["ts"], r["server"], r["load"]) for r in published]}, replicas=1,
                       punctuation_us=100_000).outputs["watch"]
    assert len(reference) == len(published)
    # The consumer library: exactly the reference, no id twice.
    assert Counter((r["ts"], r["server"], r["load"]) for r in got) == Counter(reference)
    assert len({r["@id"] for r in got}) == len(got)
    # Every sink replica's file: one id, one record, in all of them; the added one published.
    named: dict[str, tuple] = {}
    files = {}
    for output in (tmp_path / "out").glob("watch-*.jsonl"):
        lines = [json.loads(line) for line in output.read_text().splitlines()]
        files[output.stem.split("-", 1)[1]] = lines
        ids = [line["@id"] for line in lines]
        assert len(ids) == len(set(ids)), f"{output.name} names two records alike"
        for line in lines:
            record = (line["ts"], line["server"], line["load"])
            assert named.setdefault(line["@id"], record) == record, (output.name, line)
    assert files.get(added), f"the sink replica added on {added} wrote nothing ({sorted(files)})"
    pinned = {line["@id"] for line in files["n4"]}
    assert {line["@id"] for line in files[added]} <= pinned
    assert Counter(named.values()) == Counter(reference)
    equal_pairs = defaultdict(int)
    for line in files[added]:
        equal_pairs[(line["ts"], line["server"], line["load"])] += 1
    assert any(n == 2 for n in equal_pairs.values()), "the added sink delivered no pair of equal records"
