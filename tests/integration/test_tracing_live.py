"""Issue 24 as a user tries it: trace queries installed on a running Fig. 1 cluster (7 processes,
k = 2, real TCP, mosquitto) with ``replicast trace-query``, answers streamed back and merged, the
win shares moving when a node is killed, and the queries' cost gone once they are removed
(docs/tracing.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from html.parser import HTMLParser

import aiomqtt
import pytest

from replicast.engine.cluster_config import load_cluster
from replicast.engine.trace_client import ClusterTrace
from tests.integration.helpers import (ROOT, cluster, fig1_cluster_toml, free_ports, kill, make_cluster_module,
                                       mosquitto, publish_fig1_round)

#: Correlate's first input is ``load``, whose replicas run on n1 (load#0) and n4 (load#1).
WIN_SHARE = ('From a In Arrival Where a.replica = "correlate#0" And a.port = 0 And a.outcome = "pass" '
             'GroupBy a.port, a.upstream Select a.port, a.upstream, COUNT, SHARE Sample 1/1')
GAIN = ("From a In Arrival Where a.rank = 2 GroupBy a.replica "
        "Select a.replica, COUNT, P50(a.later_us), P99(a.later_us) Sample 1/1")
#: Where records over a bound spent their time (on loopback nothing takes 500 ms: a bound of 0 here).
SLOW_HOPS = ("From h In Hop Where h.latency_us > 0 GroupBy h.app, h.hop, h.replica "
             "Select h.app, h.hop, h.replica, COUNT, SUM(h.hop_us), SUM(h.latency_us), P50(h.hop_us) Sample 1/1")
MAX_TICKS = 400                         # the publisher stops by itself after 40 s at most


class Publisher:
    """The Fig. 1 sources, a round every 0.1 s, in a thread, until stopped (or MAX_TICKS)."""

    def __init__(self, broker_port: int, servers: list[str]):
        self.broker_port, self.servers = broker_port, servers
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        published = {f"{kind}_{s}": [] for s in self.servers for kind in ("cpu", "ping")}
        async with aiomqtt.Client("127.0.0.1", self.broker_port, identifier="trace-test-pub") as pub:
            for tick in range(MAX_TICKS):
                if self.stopping.is_set():
                    return
                await publish_fig1_round(pub, self.servers, tick, published)
                await asyncio.sleep(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        self.thread.join(10)


def trace_query(cluster_file, text: str, *args: str) -> list[dict]:
    """``replicast trace-query … --json``: the answers it printed, one per line."""
    done = subprocess.run([sys.executable, "-m", "replicast.engine.cli", "trace-query", str(cluster_file), text,
                           "--json", "--every", "1", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def shares(answer: dict) -> dict[str, float]:
    return {row["upstream"]: row["SHARE"] for row in answer["rows"]}


def test_trace_queries_on_a_running_cluster_stream_answers_and_follow_a_kill(tmp_path):
    make = make_cluster_module()
    with mosquitto(tmp_path) as broker_port:
        cluster_file = tmp_path / "cluster.toml"
        cluster_file.write_text(fig1_cluster_toml(tmp_path, broker_port, free_ports(14), punctuation_ms=100))
        with cluster(cluster_file, tmp_path / "run") as processes, Publisher(broker_port, make.SERVERS):
            time.sleep(1.0)
            answers = trace_query(cluster_file, WIN_SHARE, "--for", "4", "--id", "share")
            assert len(answers) >= 3                   # streamed: one answer a second
            final = shares(answers[-1])
            assert set(final) == {"load#0", "load#1"}, answers[-1]
            assert sum(final.values()) == pytest.approx(1.0)
            assert sum(row["COUNT"] for row in answers[-1]["rows"]) > 20
            gains = trace_query(cluster_file, GAIN, "--for", "3")[-1]["rows"]
            operators = {row["replica"].split("#")[0] for row in gains}
            assert {"load", "ping", "correlate", "hot"} <= operators, gains
            assert all(row["P99(later_us)"] >= row["P50(later_us)"] >= 0 for row in gains)
            # "where did slow records spend their time": every hop of the alerts' records, from the entry
            # points through the join to the application, and the hops add up to the latency
            hops = trace_query(cluster_file, SLOW_HOPS, "--for", "3")[-1]["rows"]
            alerts = [row for row in hops if row["app"] == "alerts"]
            assert {row["replica"].split("#")[0] for row in alerts} >= {"load", "correlate", "hot", "alerts"}, hops
            starts = {f"{kind}_{s}" for kind in ("cpu", "ping") for s in make.SERVERS}
            first = [row for row in alerts if row["hop"] == 0]         # (records in flight while the query was
            from_entry = sum(row["COUNT"] for row in first if row["replica"].split("#")[0] in starts)   # installed
            assert from_entry >= 0.8 * sum(row["COUNT"] for row in first), first   # start their chain later)
            assert sum(row["SUM(hop_us)"] for row in alerts) == \
                sum(row["SUM(latency_us)"] for row in alerts if row["hop"] == 0)
            # the queries were removed when trace-query stopped: the nodes trace nothing any more
            trace = ClusterTrace(load_cluster(cluster_file))
            assert trace.queries() == {node: {} for node in trace.urls}

            kill(processes["n1"])                      # load#0 dies: correlate#0 takes load#1's copies only
            time.sleep(1.5)
            after = trace_query(cluster_file, WIN_SHARE, "--for", "3", "--window", "2")
            assert shares(after[-1]) == {"load#1": 1.0}, after[-1]


def chromium_dom(url: str, budget_ms: int = 4000) -> str:
    """The page at ``url`` as headless Chromium renders it after its script ran ``budget_ms`` (virtual time)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    done = subprocess.run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Page(HTMLParser):
    """The elements of the dashboard that carry data- attributes."""

    def __init__(self, html: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if any(k.startswith("data-") for k in attrs):
            self.elements.append((tag, attrs))

    def replicas(self) -> dict[str, dict]:
        return {a["data-replica"]: a for t, a in self.elements if t == "span" and "data-replica" in a}

    def shares(self, replica: str, port: int) -> dict[str, float]:
        return {a["data-upstream"]: float(a["data-share"]) for t, a in self.elements
                if t == "tr" and a.get("data-replica") == replica and a.get("data-port") == str(port)}

    def ccdfs(self) -> dict[str, int]:
        return {a["data-app"]: int(a["data-count"]) for t, a in self.elements if t == "svg" and "data-app" in a}

    def queries(self) -> set[str]:
        return {a["data-query"] for t, a in self.elements if "data-query" in a}


def test_the_dashboard_shows_a_running_cluster_in_a_browser_and_a_kill_moves_the_win_shares(tmp_path):
    make = make_cluster_module()
    with mosquitto(tmp_path) as broker_port:
        cluster_file = tmp_path / "cluster.toml"
        ports = free_ports(15)
        cluster_file.write_text(fig1_cluster_toml(tmp_path, broker_port, ports[:14], punctuation_ms=100))
        with cluster(cluster_file, tmp_path / "run") as processes, Publisher(broker_port, make.SERVERS):
            dashboard = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "dashboard", str(cluster_file),
                                          "--port", str(ports[14])], cwd=ROOT, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
            try:
                trace_query(cluster_file, GAIN, "--for", "1", "--keep", "--id", "gain")   # a query left installed
                url = f"http://127.0.0.1:{ports[14]}/"
                time.sleep(5)
                page = Page(chromium_dom(url))
                replicas = page.replicas()
                assert replicas["correlate#0"]["data-node"] == "n3" and replicas["correlate#0"]["data-state"] == "live"
                assert {"cpu_n1#0", "load#0", "hot#1", "alerts#0"} <= set(replicas)
                assert set(page.ccdfs()) == {"alerts", "rtt_stats", "load_trends"} and page.ccdfs()["alerts"] > 0
                before = page.shares("correlate#0", 0)
                assert set(before) == {"load#0", "load#1"} and sum(before.values()) == pytest.approx(1.0)
                assert "gain" in page.queries()

                kill(processes["n1"])                  # load#0 dies
                time.sleep(12)                         # the win-share window (10 s) passes
                page = Page(chromium_dom(url))
                assert page.shares("correlate#0", 0) == {"load#1": 1.0}
                assert page.replicas()["load#0"]["data-state"] == "unreachable"
            finally:
                dashboard.send_signal(signal.SIGINT)
                dashboard.wait(20)
                ClusterTrace(load_cluster(cluster_file)).remove("gain")
            trace = ClusterTrace(load_cluster(cluster_file))
            assert all(not queries for queries in trace.queries().values())    # the dashboard removed its own


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize("entry", ["mqtt", "tcp"])
def test_a_producers_traceparent_comes_out_with_the_applications_records(tmp_path, entry):
    """W3C Trace Context (docs/tracing.md): a source message's ``traceparent`` — an MQTT 5 user
    property, or a TCP source line's field (a's source port) — rides in the baggage across the link
    (a on b: cpu → busy → alerts) and the application's messages carry the same trace id — once a
    Hop query asks for baggage."""
    from tests.integration.helpers import two_node_cluster, wait_for
    ports = free_ports(5)
    with mosquitto(tmp_path) as broker_port:
        path = two_node_cluster(tmp_path, secret="trace-secret", ports=ports[:4], broker_port=broker_port,
                                broker=f"mqtt://127.0.0.1:{broker_port}", node_a=f"source_port = {ports[4]}",
                                placement='cpu = ["a"]\nbusy = ["b"]\nalerts = ["a"]')
        with cluster(path, tmp_path / "run"):
            traced = ClusterTrace(load_cluster(path))
            wait_for(lambda: traced.queries() and len(traced.queries()) == 2, 30, "both nodes' trace routes")
            if entry == "mqtt":
                refuses_strangers_and_bad_queries(path)
            drive = traced_over_mqtt if entry == "mqtt" else traced_over_tcp
            assert asyncio.run(traceparents_out(broker_port, drive(broker_port, ports[4]), 5)) == []   # no Hop query
            traced.install("hops", "From h In Hop Select COUNT Sample 1/1000000")
            out = asyncio.run(traceparents_out(broker_port, drive(broker_port, ports[4]), 10))
            assert len(out) >= 8, out
            assert {value.split("-")[1] for value in out} == {TRACE}
            assert all(len(value.split("-")[2]) == 16 and value.split("-")[2] != "00f067aa0ba902b7" for value in out)
            traced.remove("hops")


async def traceparents_out(broker_port: int, sender, rounds: int) -> list[str]:
    """The ``traceparent`` user properties of alerts' MQTT 5 messages while ``sender`` (an async
    generator, one step per round) sends a traced record and a punctuation each 0.1 s."""
    seen: list[str] = []
    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="tp-sub",
                              protocol=aiomqtt.ProtocolVersion.V5) as sub:
        await sub.subscribe("replicast/out/alerts", qos=1)

        async def collect():
            async for message in sub.messages:
                pairs = getattr(message.properties, "UserProperty", None) or []
                seen.extend(v for k, v in pairs if k == "traceparent")
        task = asyncio.create_task(collect())
        count = 0
        async for _ in sender:
            count += 1
            if count == rounds:
                break
            await asyncio.sleep(0.1)
        await sender.aclose()
        await asyncio.sleep(1.0)
        task.cancel()
    return seen


async def traced_over_mqtt(broker_port: int, _source_port: int):
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    async with aiomqtt.Client("127.0.0.1", broker_port, identifier="tp-pub",
                              protocol=aiomqtt.ProtocolVersion.V5) as pub:
        while True:
            base = time.time_ns() // 1000
            properties = Properties(PacketTypes.PUBLISH)
            properties.UserProperty = [("traceparent", f"00-{TRACE}-00f067aa0ba902b7-01")]
            await pub.publish("replicast/in/cpu", json.dumps([{"ts": base, "server": "s1", "load": 0.9}]),
                              qos=1, properties=properties)
            await pub.publish("replicast/in/cpu", json.dumps({"punctuation": base + 1}), qos=1)
            yield


async def traced_over_tcp(_broker_port: int, source_port: int):
    _, writer = await asyncio.open_connection("127.0.0.1", source_port)
    try:
        while True:
            base = time.time_ns() // 1000
            record = {"ts": base, "server": "s1", "load": 0.9, "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
            writer.write(f"cpu {json.dumps([record])}\ncpu {json.dumps({'punctuation': base + 1})}\n".encode())
            await writer.drain()
            yield
    finally:
        writer.close()


def refuses_strangers_and_bad_queries(cluster_file) -> None:
    """The trace routes want the cluster's token, and a node answers a query it cannot parse with
    the parser's one line (a client that skips the local check gets the same line)."""
    import dataclasses
    import urllib.error
    import urllib.request

    from replicast.engine.aio.trace_service import token
    from replicast.operators.errors import ReplicastError
    config = load_cluster(cluster_file)
    stranger = ClusterTrace(dataclasses.replace(config, secret=b"not the secret"))
    with pytest.raises(ReplicastError, match="token"):
        stranger.queries()
    url = next(iter(ClusterTrace(config).urls.values()))
    request = urllib.request.Request(f"{url}/trace/queries/bad", data=b"From a In Arrival Select a.colour, COUNT",
                                     method="PUT", headers={"Authorization": f"Bearer {token(config.secret)}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 400
    assert "Arrival has no field 'colour'" in json.loads(refused.value.read())["error"]
