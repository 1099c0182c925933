"""The Fig. 1 walkthrough of docs/consume.md, as a user would run it: ``replicast cluster up`` of the
Fig. 1 cluster with two sink replicas per application (examples/make_cluster_fig1.py
``--sink-replicas 2``: every application on ``app`` and on a server), ``replicast consume APP`` for
each application as its own process (JSON lines on stdout), and kill -9 of three nodes in turn —
the server n2 (alerts' second sink, also entry points and operators), the server n3 (no sink: entry
points and operators only, each with a live replica elsewhere), then ``app`` (every application's
first sink) — each restarted with the command ``cluster up`` recorded in ``RUN_DIR/state.json``
(docs/deploy.md, "Restarting a node").  Every consumer prints exactly `replay`'s reference: none
twice, none missing.  Run on a private mosquitto and on the embedded amqtt broker that ``cluster up``
starts itself (``broker = "embedded"``, as examples/cluster-fig1-eo.toml).

The pause the consumer sees around a kill (the longest gap between consecutive alerts lines, against
the longest without a kill) and the copies a plain subscriber sees are printed, not asserted: they
are timings and counts on a shared machine; docs/consume.md records a run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import aiomqtt
import pytest

from replicast.engine.query_file import load_query
from replicast.operators.record import CLOSED
from tests.integration.helpers import (ROOT, assert_fig1_reference, cluster, fig1_cluster_toml, free_ports, kill,
                                       make_cluster_module, metric, mosquitto, publish_fig1_round, wait_for)

PUNCTUATION_MS = 100
TICK_S = 0.1
TICKS = 150
#: The run goes on past TICKS, up to this, while a kill is still to come or its node not yet ready
#: again (restarted nodes get ready late on a loaded machine).
MAX_TICKS = 400
#: (tick from which to kill, victim): a kill waits until both sink replicas have been ready SETTLE
#: ticks and the previous victim is ready again.  n3 hosts no sink (cpu_n2, ping_n2, cpu_n3, ping_n3,
#: correlate, load_trend: each with a replica on another server).
KILLS = [(30, "n2"), (60, "n3"), (90, "app")]
RESTART_AFTER = 10                 # ticks from a kill to the restart
SETTLE = 10


class Lines:
    """A consumer process's stdout, each JSON line with the monotonic time it was read."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.lines = process, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), json.loads(line)))


def consume(app: str, broker_port: int, tmp_path: Path) -> Lines:
    return Lines(subprocess.Popen(
        [sys.executable, "-m", "replicast.engine.cli", "consume", app, "--broker", f"mqtt://127.0.0.1:{broker_port}",
         "--position", str(tmp_path / f"{app}.pos")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=open(tmp_path / f"consume-{app}.log", "w"), text=True))


def ready(port: int) -> bool:
    try:
        return metric(port, "replicast_ready") == 1
    except OSError:
        return False


def max_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def test_shipped_example_is_the_generators_output():
    make = make_cluster_module()
    text = make.cluster_toml(query="cluster-fig1-query.toml", ports=list(range(17400, 17407)),
                             metrics_ports=list(range(17500, 17507)), broker="embedded", broker_port=18834,
                             secret="change-me-fig1-demo", output_dir="../out/cluster-fig1-eo", sources=True,
                             sink_replicas=2).replace("examples/cluster-fig1.toml", "examples/cluster-fig1-eo.toml")
    assert (ROOT / "examples/cluster-fig1-eo.toml").read_text() == text
    assert 'alerts = ["app", "n2"]' in text


@contextlib.contextmanager
def embedded_broker_port():
    """A port for the embedded broker that ``cluster up`` itself starts (``broker = "embedded"``)."""
    yield free_ports(1)[0]


def walkthrough(tmp_path: Path, sink_replicas: int, kills_plan: list[tuple[int, str]], broker: str = "mosquitto"):
    """Cluster up, a consumer per application, the kills and restarts of ``kills_plan``, then CLOSED;
    returns (query, published, each consumer's lines, each app's raw copies by id, each app's raw
    payloads with their arrival times, events).  ``broker``: ``"mosquitto"`` (started by the test)
    or ``"embedded"`` (the amqtt broker ``cluster up`` starts, as examples/cluster-fig1-eo.toml)."""
    make = make_cluster_module()
    query = load_query(ROOT / "examples/cluster-fig1-query.toml")
    with (mosquitto(tmp_path) if broker == "mosquitto" else embedded_broker_port()) as broker_port:
        ports = free_ports(14)
        path = tmp_path / "cluster.toml"
        text = fig1_cluster_toml(tmp_path, broker_port, ports, punctuation_ms=PUNCTUATION_MS,
                                 secret="consume-fig1-secret", sink_replicas=sink_replicas)
        if broker == "embedded":
            text = text.replace(f'broker = "mqtt://127.0.0.1:{broker_port}"', 'broker = "embedded"', 1)
            assert 'broker = "embedded"' in text
        path.write_text(text)
        metrics = dict(zip(["app", *make.SERVERS], ports[7:]))
        sinks = make.sink_nodes(sink_replicas)["alerts"]
        restarted: list[subprocess.Popen] = []
        consumers: dict[str, Lines] = {}
        published = {f"{kind}_{s}": [] for s in make.SERVERS for kind in ("cpu", "ping")}
        raw: dict[str, Counter] = {app: Counter() for app in make.APPLICATIONS}
        events: list[tuple[str, str, float]] = []        # (what, node, monotonic time)
        raw_payloads: dict[str, list[tuple[float, list]]] = {app: [] for app in make.APPLICATIONS}
        with cluster(path, tmp_path / "run") as processes:
            try:
                for app in make.APPLICATIONS:
                    consumers[app] = consume(app, broker_port, tmp_path)
                for app in make.APPLICATIONS:
                    wait_for(lambda: "subscribed to" in (tmp_path / f"consume-{app}.log").read_text(), 30,
                             f"{app}'s consumer subscription")

                async def drive() -> None:
                    kills, restart_at, down, ready_since = list(kills_plan), {}, None, None
                    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="test-pub") as pub, \
                            aiomqtt.Client("127.0.0.1", broker_port, identifier="test-raw") as sub:
                        await sub.subscribe("replicast/out/#", qos=1)
                        raw_task = asyncio.create_task(collect_raw(sub))
                        tick = -1
                        while (tick := tick + 1) < TICKS or (kills or down is not None) and tick < MAX_TICKS:
                            await publish_fig1_round(pub, make.SERVERS, tick, published)
                            both = down is None and all(ready(metrics[n]) for n in sinks)
                            ready_since = (tick if ready_since is None else ready_since) if both else None
                            if kills and tick >= kills[0][0] and both and tick - ready_since >= SETTLE:
                                down = kills.pop(0)[1]
                                kill(processes[down])
                                events.append(("kill", down, time.monotonic()))
                                restart_at[tick + RESTART_AFTER] = down
                            if tick in restart_at:
                                # docs/deploy.md, "Restarting a node": the command cluster up recorded
                                name = restart_at.pop(tick)
                                restarted.append(subprocess.Popen(
                                    processes[name]["command"], cwd=ROOT, stdout=open(tmp_path / f"{name}-{tick}.log", "w"),
                                    stderr=subprocess.STDOUT))
                                events.append(("restart", name, time.monotonic()))
                            if down is not None and events[-1][0] == "restart" and ready(metrics[down]):
                                events.append(("ready", down, time.monotonic()))
                                down = None
                            await asyncio.sleep(TICK_S)
                        assert not kills, f"kills not done (sink replicas not ready long enough): {kills}"
                        for stream in published:
                            await pub.publish(f"replicast/in/{stream}", json.dumps({"punctuation": CLOSED}), qos=1)
                        await asyncio.wait_for(raw_task, 60)

                async def collect_raw(sub) -> None:
                    closed = set()
                    async for message in sub.messages:
                        app = str(message.topic).rsplit("/", 1)[-1]
                        items = json.loads(message.payload)
                        raw[app].update(i["@id"] for i in items if "ts" in i)
                        raw_payloads[app].append((time.monotonic(), items))
                        if any(i.get("punctuation") == CLOSED for i in items):
                            closed.add(app)
                            if len(closed) == len(raw):
                                return

                asyncio.run(drive())
                for app, lines in consumers.items():
                    assert lines.process.wait(60) == 0, (tmp_path / f"consume-{app}.log").read_text()[-2000:]
                    lines.thread.join(10)
            finally:
                for process in [*(c.process for c in consumers.values()), *restarted]:
                    if process.poll() is None:
                        process.terminate()
                        process.wait(10)
    return query, published, consumers, raw, raw_payloads, events


@pytest.mark.parametrize("broker, plan", [("mosquitto", KILLS),
                                          # a sink host and a server with no sink: the CI time kept small
                                          ("embedded", KILLS[:2])], ids=["mosquitto", "embedded"])
def test_fig1_two_sink_replicas_kill_and_restart_sink_hosts_consumer_prints_exactly_the_reference(tmp_path, broker, plan):
    make = make_cluster_module()
    query, published, consumers, raw, _, events = walkthrough(tmp_path, 2, plan, broker)
    got = {app: [record for _, record in lines.lines] for app, lines in consumers.items()}
    kills = [(node, t) for what, node, t in events if what == "kill"]
    readies = [t for what, _, t in events if what == "ready"]
    times = [t for t, _ in consumers["alerts"].lines]
    quiet = [t for t in times if t < kills[0][1]]
    normal = max_gap(quiet[len(quiet) // 4:])               # before the first kill, after start-up
    around = {node: max_gap([t for t in times if k - 1 <= t <= r + 1]) for (node, k), r in zip(kills, readies)}
    print(f"alerts lines {len(got['alerts'])}, longest gap without a kill {normal:.3f} s, around each kill "
          f"(1 s before it to 1 s after the restarted node is ready) {({n: round(g, 3) for n, g in around.items()})}; "
          f"plain subscriber copies per record {({app: dict(Counter(c.values())) for app, c in raw.items()})}; "
          f"events {[(w, n, round(t - events[0][2], 2)) for w, n, t in events]}")
    assert [node for node, _ in kills] == [victim for _, victim in plan] and len(readies) == len(plan), events
    assert_fig1_reference(query, published, got, PUNCTUATION_MS)        # none missing, none twice
    for app, records in got.items():
        assert len({r["@id"] for r in records}) == len(records), app
        assert sum(raw[app].values()) > len(records), app       # both sink replicas published: copies on the topic
        # one file per sink replica ({node} in the path); a restarted one read its tail back: no line twice
        for node in make.sink_nodes(2)[app]:
            ids = [json.loads(line)["@id"] for line in (tmp_path / "out" / f"{app}-{node}.jsonl").read_text().splitlines()]
            assert ids and len(set(ids)) == len(ids), (app, node)


def frontiers_read(tmp_path: Path) -> dict[str, int | None]:
    """The frontier each application's restarted sink read back (its ``frontier_read`` log event)."""
    read = {}
    for log in tmp_path.glob("app-*.log"):
        for line in log.read_text().splitlines():
            if '"frontier_read"' in line:
                event = json.loads(line)
                read[event["app"]] = event["frontier"]
    return read


def test_a_restarted_only_sink_publishes_nothing_again_below_its_retained_frontier(tmp_path):
    """One sink replica per application (the plain Fig. 1 cluster): kill -9 of ``app`` and its
    restart.  The restarted sinks read the frontier retained on ``replicast/frontier/<app>`` and
    publish nothing again at or below it, so a plain subscriber (no ids, no library) sees no record
    twice below it; above it, what the sink had delivered but not yet punctuated before the kill may
    come again (docs/consume.md), and is printed.  The consumer still prints exactly the reference.

    The frontier read back is at least the punctuation published before the last one the plain
    subscriber saw before the kill: the sink publishes the retained frontier right after each
    payload on the same session, so only the last payload's frontier can be missing."""
    query, published, consumers, raw, raw_payloads, events = walkthrough(tmp_path, 1, [(30, "app")])
    got = {app: [record for _, record in lines.lines] for app, lines in consumers.items()}
    assert_fig1_reference(query, published, got, PUNCTUATION_MS)
    kill_time = next(t for what, _, t in events if what == "kill")
    read = frontiers_read(tmp_path)
    for app, payloads in raw_payloads.items():
        stamps = {i["@id"]: i["ts"] for _, items in payloads for i in items if "ts" in i}
        before = sorted({i["punctuation"] for t, items in payloads if t < kill_time for i in items
                         if "punctuation" in i})
        repeated = sorted(stamps[i] for i, n in raw[app].items() if n > 1)
        frontier = read.get(app)
        print(f"{app}: frontier read back {frontier}, punctuations before the kill …{before[-2:]}; repeated records "
              f"{len(repeated)}, of which at or below the frontier "
              f"{sum(1 for ts in repeated if frontier is not None and ts <= frontier)}")
        assert frontier is not None and len(before) >= 2 and frontier >= before[-2], (app, frontier, before[-2:])
        assert all(ts > frontier for ts in repeated), (app, frontier, repeated)
