"""No broker is a single point of failure, and a broker restart loses nothing it accepted
(docs/node.md, "MQTT"): real mosquitto brokers, real node processes started by ``cluster up``.

* Two brokers, one per "site": node ``a``'s entry replica reads broker A, node ``b``'s reads
  broker B (``[mqtt.brokers]``); the source publishes every message to both; broker A is killed
  with SIGKILL mid-stream.  The application (on ``a``, whose own broker is gone) receives exactly
  ``replay``'s reference: its input comes through ``b``'s entry replica, and the duplicate filters
  (§IV-B) made the two copies one while both brokers lived.  The application also publishes to
  both brokers (``[outputs.trends] brokers``): a consumer on B gets the same output.
* One broker with persistence, SIGKILLed and restarted while the source goes on publishing (QoS 1,
  retrying what was not acknowledged, on its own persistent session): the node's session survives
  in the broker, which queues what arrives before the node is back.  Before persistent node sessions,
  everything published between the restart and the node's resubscription (3–4 s) was acknowledged
  and lost, and the count windows after it were shifted.
* A broker restarted *without* persistence forgot the node's session: the node says so (a log line
  and ``replicast_mqtt_sessions_lost_total``), since it cannot know what it missed.

The query ends in a count window (4 records sliding 2), so a lost or duplicated record shifts every
window after it.  The kill in the single-broker test lands between two publishes: a message whose
PUBACK died with the broker is sent again by a QoS-1 publisher — a second occurrence that the
publisher, not the node, would be responsible for (at least once, MQTT 3.1.1 §4.3.2).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import aiomqtt

from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from tests.integration.brokers import Broker
from tests.integration.helpers import cluster, collect_outputs, free_ports, metric, wait_for

PUNCTUATION_MS = 50
QUERY = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[operators]]
name = "trend"
kind = "aggregate"
input = "cpu"
group_by = ["server"]
window = { kind = "count", size = 4, slide = 2 }
compute = { n = "count()", avg_load = "avg(load)", peak = "max(load)" }

[[applications]]
name = "trends"
input = "trend"
ordered = true
"""


def write_cluster(directory: Path, ports: list[int], *, nodes: list[str], mqtt: str, placement: str,
                  outputs: str = "mqtt = false") -> Path:
    (directory / "query.toml").write_text(QUERY)
    tables = "".join(f'[[nodes]]\nname = "{n}"\nport = {ports[2 * i]}\nmetrics_port = {ports[2 * i + 1]}\n'
                     for i, n in enumerate(nodes))
    path = directory / "cluster.toml"
    path.write_text(f'query = "query.toml"\nsecret = "brokers-ha-secret"\npunctuation_ms = {PUNCTUATION_MS}\n'
                    f'[mqtt]\n{mqtt}\n{tables}[placement]\n{placement}\n'
                    f'[outputs.trends]\nfile = "trends.jsonl"\n{outputs}\n')
    return path


def record(tick: int, server: str) -> dict:
    return {"ts": 1_000_000 + tick * 1000, "server": server, "load": round((tick * 7 % 20) / 20, 2)}


def check_against_reference(directory: Path, published: list[dict], lines: list[dict] | None = None) -> None:
    """The application's output (its file, or ``lines``) equals ``replay``'s on what was published."""
    query = load_query(directory / "query.toml")
    stream = [(r["ts"], r["server"], r["load"]) for r in published]
    reference = replay(query, {"cpu": stream}, replicas=1, punctuation_us=PUNCTUATION_MS * 1000).outputs["trends"]
    names = query.schemas[query.applications["trends"].input].names
    if lines is None:
        lines = [json.loads(line) for line in (directory / "trends.jsonl").read_text().splitlines()]
    got = [(line["ts"], *[line[n] for n in names]) for line in lines if "ts" in line]
    assert len(reference) > 10
    assert Counter(got) == Counter(reference), (f"{len(got)} rows, reference {len(reference)}; missing "
                                                f"{list((Counter(reference) - Counter(got)).elements())[:5]}, extra "
                                                f"{list((Counter(got) - Counter(reference)).elements())[:5]}")
    assert got == reference                  # ordered application


def sample(metrics_port: int, name: str) -> float | None:
    """``name``'s first sample, or None while it has none (a labelled metric before its first use)."""
    try:
        return metric(metrics_port, name)
    except (KeyError, OSError):
        return None


def closed(metrics_port: int) -> bool:
    return sample(metrics_port, "replicast_app_punctuation") == float(CLOSED)


# -- two brokers, one killed ----------------------------------------------------------------------
async def publish_to_both(ports: dict[str, int], brokers: dict[str, Broker], ticks: int, kill_at: int) -> tuple:
    """Every tick: two records (servers x, y) and a punctuation, to every live broker; broker A is
    SIGKILLed at ``kill_at``.  A publish that fails marks its broker dead for the rest of the run.
    Returns what was published and the application's output as read from broker B."""
    published, outputs = [], []
    consumer = aiomqtt.Client("127.0.0.1", ports["B"], identifier="ha-consumer-B")
    await consumer.__aenter__()
    await consumer.subscribe("replicast/out/#", qos=1)
    collector = asyncio.create_task(collect_outputs(consumer, lambda app, items: outputs.extend(items)))
    clients = {}
    for site, port in ports.items():
        clients[site] = aiomqtt.Client("127.0.0.1", port, identifier=f"ha-source-{site}")
        await clients[site].__aenter__()

    async def send(payload: str) -> None:
        for site in list(clients):
            try:
                await asyncio.wait_for(clients[site].publish("replicast/in/cpu", payload, qos=1), 5)
            except (aiomqtt.MqttError, asyncio.TimeoutError):
                del clients[site]                     # that site's broker is gone; the other carries on
    for tick in range(ticks):
        if tick == kill_at:
            brokers["A"].kill()
        items = [record(tick, server) for server in ("x", "y")]
        published += items
        await send(json.dumps(items))
        await send(json.dumps({"punctuation": items[-1]["ts"]}))
        await asyncio.sleep(0.02)
    await send(json.dumps({"punctuation": CLOSED}))
    assert list(clients) == ["B"], list(clients)
    await clients["B"].__aexit__(None, None, None)
    await asyncio.wait_for(collector, 30)
    await consumer.__aexit__(None, None, None)
    return published, outputs


def test_killing_one_of_two_brokers_loses_nothing(tmp_path):
    broker_ports = dict(zip("AB", free_ports(2)))
    ports = free_ports(4)
    path = write_cluster(tmp_path, ports, nodes=["a", "b"],
                         mqtt=f'broker = "mqtt://127.0.0.1:{broker_ports["A"]}"\n'
                              f'brokers = {{ b = "mqtt://127.0.0.1:{broker_ports["B"]}" }}',
                         placement='cpu = ["a", "b"]\ntrend = ["a", "b"]\ntrends = ["a"]',
                         outputs=f'brokers = ["mqtt://127.0.0.1:{broker_ports["A"]}", "mqtt://127.0.0.1:{broker_ports["B"]}"]')
    with Broker(tmp_path / "A", broker_ports["A"]) as a, Broker(tmp_path / "B", broker_ports["B"]) as b:
        with cluster(path, tmp_path / "run"):
            published, outputs = asyncio.run(publish_to_both(broker_ports, {"A": a, "B": b}, ticks=120, kill_at=40))
            wait_for(lambda: closed(ports[1]), 30, "the application's stream to close")
            assert metric(ports[1], "replicast_mqtt_connected") == 0.0       # a's own broker is gone
    check_against_reference(tmp_path, published)
    check_against_reference(tmp_path, published, outputs)      # the output, also published to broker B


# -- one broker, kill -9 and restart ----------------------------------------------------------------
async def publish_through_restart(port: int, broker: Broker, ticks: int, kill_at: int, down_s: float) -> list[dict]:
    """A QoS-1 source on a persistent session that retries each message until it is acknowledged;
    the broker is SIGKILLed after tick ``kill_at`` was acknowledged and restarted ``down_s`` later,
    while the source keeps trying."""
    published = []
    restart = None

    async def acknowledged(payload: str) -> None:
        while True:
            try:
                async with aiomqtt.Client("127.0.0.1", port, identifier="restart-source", clean_session=False,
                                          timeout=5) as client:
                    await client.publish("replicast/in/cpu", payload, qos=1)
                    return
            except aiomqtt.MqttError:
                await asyncio.sleep(0.1)

    for tick in range(ticks):
        items = [record(tick, server) for server in ("x", "y")]
        published += items
        await acknowledged(json.dumps(items))
        await acknowledged(json.dumps({"punctuation": items[-1]["ts"]}))
        if tick == kill_at:
            broker.kill()
            restart = asyncio.get_running_loop().call_later(down_s, broker.start)
        await asyncio.sleep(0.02)
    await acknowledged(json.dumps({"punctuation": CLOSED}))
    assert restart is not None
    return published


def test_a_broker_killed_and_restarted_loses_nothing_it_accepted(tmp_path):
    broker_port, *ports = free_ports(3)
    path = write_cluster(tmp_path, ports, nodes=["a"], mqtt=f'broker = "mqtt://127.0.0.1:{broker_port}"',
                         placement='cpu = ["a"]\ntrend = ["a"]\ntrends = ["a"]')
    with Broker(tmp_path / "broker", broker_port, persistent=True) as broker:
        with cluster(path, tmp_path / "run"):
            published = asyncio.run(publish_through_restart(broker_port, broker, ticks=100, kill_at=30, down_s=1.0))
            wait_for(lambda: closed(ports[1]), 30, "the application's stream to close")
            log = (tmp_path / "run" / "a.log").read_text()
            assert log.count('"event": "mqtt_up"') >= 2, log[-2000:]          # it did reconnect
            assert "mqtt_session_lost" not in log
    check_against_reference(tmp_path, published)


def test_a_session_the_broker_forgot_is_counted_and_logged(tmp_path):
    broker_port, *ports = free_ports(3)
    path = write_cluster(tmp_path, ports, nodes=["a"], mqtt=f'broker = "mqtt://127.0.0.1:{broker_port}"',
                         placement='cpu = ["a"]\ntrend = ["a"]\ntrends = ["a"]')
    with Broker(tmp_path / "broker", broker_port) as broker:          # no persistence
        with cluster(path, tmp_path / "run"):
            broker.kill()
            time.sleep(0.5)
            broker.start()
            wait_for(lambda: sample(ports[1], "replicast_mqtt_sessions_lost_total") == 1.0, 30,
                     "the lost session to be counted")
            wait_for(lambda: metric(ports[1], "replicast_mqtt_connected") == 1.0, 30, "a's MQTT session")
            log = (tmp_path / "run" / "a.log").read_text()
            assert '"event": "mqtt_session_lost"' in log and "kept no session for node a" in log
