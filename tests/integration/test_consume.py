"""Exactly-once to an external consumer on real processes (docs/consume.md): a real mosquitto, two
nodes each hosting a replica of every entry point, operator and *sink* (k = 2 sink replicas of
``alerts``), and ``replicast consume alerts`` as its own process.  Every KILL_EVERY ticks a random
node (every node hosts a sink) is SIGKILLed while both are ready and restarted RESTART_AFTER ticks
later — the last one is killed for good, leaving a restarted node the only sink; the consumer is
SIGKILLed and restarted from its position too.  The consumer's lines are exactly `replay`'s
reference — nothing lost, nothing twice — while the raw topic carried both sink replicas' copies."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from tests.integration.helpers import ROOT, cluster, free_ports, kill, metric, mosquitto, two_node_cluster, wait_for

TICK_S = 0.05
#: CI scale (~10 s of input); the full chaos run is
#: ``CONSUME_CHAOS_TICKS=5000 CONSUME_CHAOS_BATCH=200 CONSUME_CHAOS_KILL_EVERY=200 pytest tests/integration/test_consume.py``
#: (10^6 records, a kill -9 every 10 s).
TICKS = int(os.environ.get("CONSUME_CHAOS_TICKS", 200))
BATCH = int(os.environ.get("CONSUME_CHAOS_BATCH", 10))
KILL_EVERY = int(os.environ.get("CONSUME_CHAOS_KILL_EVERY", 60))
RESTART_AFTER = 20                 # ticks from a node's kill to its restart
CONSUMER_DOWN = 10                 # ticks the consumer stays dead
SETTLE = int(os.environ.get("CONSUME_CHAOS_SETTLE", 20))   # ticks both sink replicas are ready before a kill
AFTER_LAST = KILL_EVERY // 2       # ticks published after the last kill (its survivor is the only sink)
MAX_TICKS = 3 * TICKS              # the run may go on this long waiting for its last kill


def consumer(broker_port: int, tmp_path, part: int) -> subprocess.Popen:
    out = open(tmp_path / f"consumed-{part}.jsonl", "w")
    return subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "consume", "alerts",
                             "--broker", f"mqtt://127.0.0.1:{broker_port}", "--position", str(tmp_path / "alerts.pos"),
                             "--client-id", "test-consume"],
                            cwd=ROOT, stdout=out, stderr=open(tmp_path / f"consume-{part}.log", "w"))


def ready(port: int) -> bool:
    try:
        return metric(port, "replicast_ready") == 1
    except OSError:
        return False


def test_two_sink_replicas_kills_and_a_restarted_consumer_give_exactly_the_reference(tmp_path):
    with mosquitto(tmp_path) as broker_port:
        ports = free_ports(4)
        path = two_node_cluster(tmp_path, secret="consume-secret", ports=ports, broker_port=broker_port,
                                broker=f"mqtt://127.0.0.1:{broker_port}",
                                placement='cpu = ["a", "b"]\nbusy = ["a", "b"]\nalerts = ["a", "b"]')
        query = load_query(tmp_path / "query.toml")
        with cluster(path, tmp_path / "run") as processes:
            consumers = [consumer(broker_port, tmp_path, 0)]
            wait_for(lambda: "subscribed to" in (tmp_path / "consume-0.log").read_text(), 30,
                     "the consumer's subscription (its session then keeps the rest)")
            rng = random.Random(int(os.environ.get("CONSUME_CHAOS_SEED", 7)))
            metrics = {"a": ports[1], "b": ports[3]}
            live, restart_at, pending_kill = {"a", "b"}, {}, False
            restarted: list[subprocess.Popen] = []

            def restart(name: str, tick: int) -> subprocess.Popen:
                process = subprocess.Popen(
                    [sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(path), "--name", name,
                     "--state-dir", str(tmp_path / "run" / "state")], cwd=ROOT,
                    stdout=open(tmp_path / f"{name}-{tick}.log", "w"), stderr=subprocess.STDOUT)
                restarted.append(process)
                return process
            raw: list[dict] = []
            published: list[dict] = []

            async def drive():
                nonlocal pending_kill
                ready_since = None
                async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub, \
                        aiomqtt.Client("127.0.0.1", broker_port, identifier="test-raw") as sub:
                    await sub.subscribe("replicast/out/alerts", qos=1)
                    raw_task = asyncio.create_task(collect(sub))
                    tick = -1
                    while True:
                        tick += 1
                        # TICKS, longer only while the last kill has not come (restarts get ready
                        # slowly on a loaded machine), then AFTER_LAST ticks with the survivor alone
                        if tick >= TICKS and ("for_good" in log and tick >= log["for_good_tick"] + AFTER_LAST
                                              or tick >= MAX_TICKS):
                            break
                        base = time.time_ns() // 1000
                        items = [{"ts": base + i, "server": f"s{(tick + i) % 7}", "load": ((tick * 3 + i) % 10) / 10}
                                 for i in range(BATCH)]
                        published.extend(items)
                        await pub.publish("replicast/in/cpu", json.dumps(items), qos=1)
                        await pub.publish("replicast/in/cpu", json.dumps({"punctuation": base + BATCH}), qos=1)
                        both = all(ready(m) for m in metrics.values()) if live == {"a", "b"} else False
                        ready_since = (ready_since if ready_since is not None else tick) if both else None
                        if tick % KILL_EVERY == KILL_EVERY // 2 or pending_kill:
                            # kill -9 a node while both sink replicas are up and one has been up for
                            # SETTLE ticks (docs/consume.md: a sink that just joined from its donor's
                            # snapshot does not publish what the donor had not yet published); the
                            # last kill is for good
                            pending_kill = True
                            if both and tick - ready_since >= SETTLE:
                                pending_kill = False
                                victim = rng.choice(sorted(live))
                                kill(processes[victim])
                                live.discard(victim)
                                log.setdefault("kills", []).append((tick, victim))
                                if tick + KILL_EVERY < TICKS:
                                    restart_at[tick + RESTART_AFTER] = victim
                                else:
                                    log["for_good"], log["for_good_tick"] = victim, tick
                        if tick in restart_at:
                            victim = restart_at.pop(tick)
                            processes[victim] = {"pid": restart(victim, tick).pid}
                            live.add(victim)
                        if tick % (3 * KILL_EVERY) == KILL_EVERY - 1 and tick + CONSUMER_DOWN < TICKS:
                            os.kill(consumers[-1].pid, signal.SIGKILL)
                            consumers[-1].wait()
                            log.setdefault("consumer_kills", []).append(tick)
                        elif log.get("consumer_kills") and tick == log["consumer_kills"][-1] + CONSUMER_DOWN:
                            consumers.append(consumer(broker_port, tmp_path, len(consumers)))
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
                assert consumers[-1].wait(60) == 0, (tmp_path / f"consume-{len(consumers) - 1}.log").read_text()[-2000:]
            finally:
                for process in [*consumers, *restarted]:
                    if process is not None and process.poll() is None:
                        process.terminate()
                        process.wait(10)
    assert "for_good" in log and log.get("consumer_kills"), log
    reference = replay(query, {"cpu": [(r["ts"], r["server"], r["load"]) for r in published]}, replicas=1,
                       punctuation_us=50_000).outputs["alerts"]
    lines = [json.loads(line) for part in range(len(consumers))
             for line in (tmp_path / f"consumed-{part}.jsonl").read_text().splitlines()]
    got = [(l["ts"], l["server"], l["load"]) for l in lines]
    raw_got = Counter((r["ts"], r["server"], r["load"]) for r in raw)
    print(f"reference {len(reference)}, raw copies {sum(raw_got.values())}, consumer lines "
          f"{[len((tmp_path / f'consumed-{part}.jsonl').read_text().splitlines()) for part in range(len(consumers))]}, {log}")
    assert len(reference) > 500
    assert sum(raw_got.values()) > len(reference)            # both sink replicas published: copies on the topic
    missing = Counter(reference) - Counter(got)
    tick_of = {(r["ts"], r["server"], r["load"]): n // BATCH for n, r in enumerate(published)}
    assert Counter(got) == Counter(reference), (
        f"{len(got)} lines vs {len(reference)}; missing {list(missing)[:3]} (ticks {sorted({tick_of[m] for m in missing})}, "
        f"{sum(1 for m in missing if m not in raw_got)} of them never on the topic); "
        f"twice {list(Counter(got) - Counter(reference))[:3]}; {log}")
    assert len({l["@id"] for l in lines}) == len(lines)
