"""Exactly-once to an external consumer on real processes (docs/consume.md): a real mosquitto, two
nodes each hosting a replica of every entry point, operator and *sink* (k = 2 sink replicas of
``alerts``), and ``replicast consume alerts`` as its own process.  Mid-stream the sink host b is
SIGKILLed and restarted, then the consumer is SIGKILLed and restarted from its position, then a
is SIGKILLed for good: the consumer's lines are exactly `replay`'s reference — nothing lost, nothing
twice — while the raw topic carried both sink replicas' copies."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import aiomqtt

from replicast.engine.replay import replay
from replicast.operators.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.helpers import ROOT, cluster, free_ports, kill, metric, mosquitto, two_node_cluster

TICK_S = 0.05
TICKS = 200                       # ~10 s of input, 10 records a tick
KILL_B, RESTART_B, KILL_CONSUMER, RESTART_CONSUMER = 30, 50, 90, 100


def consumer(broker_port: int, tmp_path, part: int) -> subprocess.Popen:
    out = open(tmp_path / f"consumed-{part}.jsonl", "w")
    return subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "-q", "consume", "alerts",
                             "--broker", f"mqtt://127.0.0.1:{broker_port}", "--position", str(tmp_path / "alerts.pos"),
                             "--client-id", "test-consume"],
                            cwd=ROOT, stdout=out, stderr=open(tmp_path / f"consume-{part}.log", "w"))


def ready(port: int) -> bool:
    try:
        return metric(port, "replicast_ready") == 1
    except OSError:
        return False


def test_two_sink_replicas_kills_and_a_restarted_consumer_give_exactly_the_reference(tmp_path):
    query_ts = iter(range(10**9))
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(4)
        path = two_node_cluster(tmp_path, secret="consume-secret", ports=ports, broker_port=broker_port,
                                broker=f"mqtt://127.0.0.1:{broker_port}",
                                placement='cpu = ["a", "b"]\nbusy = ["a", "b"]\nalerts = ["a", "b"]')
        query = load_query(tmp_path / "query.toml")
        with cluster(path, tmp_path / "run") as processes:
            consumers = [consumer(broker_port, tmp_path, 0)]
            time.sleep(1.0)                               # subscribed (its session then keeps the rest)
            restarted_b = None
            raw: list[dict] = []
            published: list[dict] = []

            async def drive():
                nonlocal restarted_b
                async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub, \
                        aiomqtt.Client("127.0.0.1", broker_port, identifier="test-raw") as sub:
                    await sub.subscribe("replicast/out/alerts", qos=1)
                    raw_task = asyncio.create_task(collect(sub))
                    for tick in range(TICKS):
                        base = time.time_ns() // 1000
                        items = [{"ts": base + i, "server": f"s{(tick + i) % 7}", "load": ((tick * 3 + i) % 10) / 10}
                                 for i in range(10)]
                        published.extend(items)
                        await pub.publish("replicast/in/cpu", json.dumps(items), qos=1)
                        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": base + 10}), qos=1)
                        if tick == KILL_B:
                            kill(processes["b"])
                        elif tick == RESTART_B:
                            restarted_b = subprocess.Popen(
                                [sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(path), "--name",
                                 "b", "--state-dir", str(tmp_path / "run" / "state")], cwd=ROOT,
                                stdout=open(tmp_path / "b2.log", "w"), stderr=subprocess.STDOUT)
                        elif tick == KILL_CONSUMER:
                            os.kill(consumers[-1].pid, signal.SIGKILL)
                            consumers[-1].wait()
                        elif tick == RESTART_CONSUMER:
                            consumers.append(consumer(broker_port, tmp_path, 1))
                        elif tick > RESTART_B and "a_killed" not in log and ready(ports[3]):
                            kill(processes["a"])               # b, restarted and joined, is the last sink
                            log["a_killed"] = tick
                        await asyncio.sleep(TICK_S)
                    await pub.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)
                    await asyncio.wait_for(raw_task, 60)

            async def collect(sub):
                async for message in sub.messages:
                    items = json.loads(message.payload)
                    raw.extend(i for i in items if "ts" in i)
                    if any(i.get("punctuation") == CLOSED for i in items):
                        return

            log: dict = {}
            try:
                asyncio.run(drive())
                assert consumers[-1].wait(60) == 0, (tmp_path / "consume-1.log").read_text()[-2000:]
            finally:
                for process in [*consumers, restarted_b]:
                    if process is not None and process.poll() is None:
                        process.terminate()
                        process.wait(10)
    assert "a_killed" in log, "b never became ready after its restart: " + (tmp_path / "b2.log").read_text()[-2000:]
    reference = replay(query, {"cpu": [(r["ts"], r["server"], r["load"]) for r in published]}, replicas=1,
                       punctuation_us=50_000).outputs["alerts"]
    lines = [json.loads(line) for part in (0, 1) for line in (tmp_path / f"consumed-{part}.jsonl").read_text().splitlines()]
    got = [(l["ts"], l["server"], l["load"]) for l in lines]
    raw_got = Counter((r["ts"], r["server"], r["load"]) for r in raw)
    print(f"reference {len(reference)}, raw copies {sum(raw_got.values())}, consumer lines "
          f"{[len((tmp_path / f'consumed-{part}.jsonl').read_text().splitlines()) for part in (0, 1)]}, a killed at {log}")
    assert len(reference) > 500
    assert sum(raw_got.values()) > len(reference)            # both sink replicas published: copies on the topic
    assert Counter(got) == Counter(reference), (
        f"{len(got)} lines vs {len(reference)}; missing {list(Counter(reference) - Counter(got))[:3]}; "
        f"twice {list(Counter(got) - Counter(reference))[:3]}")
    assert len({l["@id"] for l in lines}) == len(lines)
