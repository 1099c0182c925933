"""One small scenario on both runtimes (DESIGN.md §3, §VI-A): the asyncio/TCP driver on loopback with fixed link
delays, and the simulator with the same delays, give every application the same output — and the
same as the one-process replay reference.

The TCP side is the real thing: a private mosquitto carries the source payloads, one
:class:`engine.aio.driver.NodeDriver` per node runs in this process's event loop, and every node
pair's connection goes through a delay relay of ``replicast cluster up --emulate-wan``
(:mod:`cluster.relay`, here with the fixed delays as its trace: each chunk is forwarded one-way
delay after it was read, FIFO per direction).  The relay sits in the dialer's configuration only:
each driver gets a copy of the cluster configuration in which the peers it dials listen on their
relay's port.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections import Counter, defaultdict
from pathlib import Path

import aiomqtt

from replicast.cluster.relay import RelayLink, RelayPlan, start_relays
from replicast.engine.aio.driver import NodeDriver
from replicast.engine.cluster_config import ClusterConfig, NodeSpec
from replicast.engine.event_file import read_events
from replicast.engine.node import NodeOptions
from replicast.engine.query_file import load_query
from replicast.engine.replay import replay
from replicast.operators.record import CLOSED
from replicast.simulator.driver import Observer, Simulation
from replicast.simulator.network import FixedDelays
from replicast.simulator.sources import Source, messages, payload
from tests.integration.helpers import free_ports, mosquitto

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODES = ["n0", "n1", "n2"]
RTT_MS = {"n0": {"n1": 40.0, "n2": 80.0}, "n1": {"n2": 60.0}}
PUNCTUATION_US = 1_000_000
# Every stream and operator twice (kmax = 2), spread so each node pair carries stream replicas.
PLACEMENT = {
    "cpu_a": ["n0", "n1"], "cpu_b": ["n1", "n2"], "cpu_c": ["n2", "n0"],
    "ping_a": ["n0", "n2"], "ping_b": ["n1", "n0"], "ping_c": ["n2", "n1"],
    "load": ["n0", "n1"], "ping": ["n1", "n2"], "correlate": ["n2", "n0"], "hot": ["n0", "n2"],
    "rtt_by_dst": ["n1", "n0"], "load_trend": ["n2", "n1"],
    "alerts": ["n1"], "rtt_stats": ["n2"], "load_trends": ["n0"],
}
HOME = {"cpu_a": "n0", "cpu_b": "n1", "cpu_c": "n2", "ping_a": "n0", "ping_b": "n1", "ping_c": "n2"}


def scenario():
    """The Fig. 1 query, the first 20 s of its events file (some 360 records), and the payloads
    each source publishes: ``(when, stream, payload)`` in send order, shared by both runtimes."""
    query = load_query(EXAMPLES / "fig1.toml")
    inputs = read_events(EXAMPLES / "fig1-events.jsonl", query)
    first = min(records[0][0] for records in inputs.values())
    inputs = {s: [r for r in records if r[0] < first + 20_000_000] for s, records in inputs.items()}
    publications = []
    for stream, records in inputs.items():
        source = Source(stream, HOME[stream], "events", punctuation_us=PUNCTUATION_US, records=records,
                        names=query.schemas[stream].names)
        for when, items in messages(source, first, first + 10**12, None):
            publications.append((when, stream, payload(items)))
    publications.sort(key=lambda p: p[0])          # stable: per stream, send order is kept
    return query, inputs, publications


# -- the simulator -----------------------------------------------------------------------------------
class Collect(Observer):
    def __init__(self):
        self.outputs, self.closed = defaultdict(list), set()

    def delivered(self, node, event):
        self.outputs[event.app].extend(event.records)
        if event.punctuation == CLOSED:
            self.closed.add(event.app)


def run_simulator(query, publications):
    observer = Collect()
    sim = Simulation(query, PLACEMENT, FixedDelays(RTT_MS), {n: i for i, n in enumerate(NODES)},
                     options=NodeOptions(heartbeat_us=500_000, peer_timeout_us=3_000_000),
                     start_us=publications[0][0], observer=observer)
    for when, stream, body in publications:
        sim.env.timeout(when - sim.env.now).callbacks.append(
            lambda event, stream=stream, body=body: sim.publish(HOME[stream], stream, body))
    sim.run(publications[-1][0] + 60_000_000)
    assert observer.closed == set(query.applications)
    return observer.outputs


# -- the asyncio driver on loopback TCP ----------------------------------------------------------------
async def run_tcp(query, publications, broker_port: int, *, placement=PLACEMENT,
                  query_path: Path = EXAMPLES / "fig1.toml", min_bytes: int = 10_000, on_closed=None):
    """Run the cluster until every application closed; ``on_closed(drivers)``, if given, looks at the
    nodes before they stop (tests/simulator/test_key_seal_runtimes.py reads their statistics)."""
    ports = dict(zip(NODES, free_ports(len(NODES))))
    pairs = [(a, b) for a in NODES for b in NODES if a < b]          # the first name dials
    links = [RelayLink(a, b, NODES.index(a), NODES.index(b), "127.0.0.1", "127.0.0.1", ports[b]) for a, b in pairs]
    _, relays = await start_relays(RelayPlan("fixed", 0, links), trace=FixedDelays(RTT_MS, NODES))
    relay_ports = {(r.link.src, r.link.dst): r.port for r in relays}
    base = ClusterConfig(path=Path("runtimes.toml"), query_path=query_path, nodes={}, placement=placement,
                         secret=secrets.token_bytes(32), broker_port=broker_port, _query=query)
    outputs, closed = defaultdict(list), set()

    def collect(event):
        outputs[event.app].extend(event.records)
        if event.punctuation == CLOSED:
            closed.add(event.app)

    drivers = []
    for name in NODES:
        nodes = {n: NodeSpec(n, "127.0.0.1", ports[n] if n <= name else relay_ports[(name, n)], None) for n in NODES}
        config = dataclasses.replace(base, nodes=nodes)
        apps = [app for app in query.applications if placement[app] == [name]]
        drivers.append(NodeDriver(config, name, callbacks={app: collect for app in apps}))
    tasks = [asyncio.create_task(d.run(install_signals=False)) for d in drivers]
    try:
        await wait(lambda: all(d.is_ready() for d in drivers), 30, "the nodes to connect")
        async with aiomqtt.Client("127.0.0.1", broker_port, timeout=30) as client:
            for _, stream, body in publications:         # QoS 1, one at a time: per-topic order kept
                await client.publish(f"replicast/in/{stream}", body, qos=1)   # a lost PUBACK: TimeoutError
        await wait(lambda: closed == set(query.applications), 60, "every application to close")
        assert all(d.refused == 0 for d in drivers)
        # Every node pair's single connection went through its delay relay (and carried data).
        carried = {r.link.key: (r.connections, r.bytes) for r in relays}
        assert all(n == 1 and sum(b.values()) > min_bytes for n, b in carried.values()), carried
        if on_closed is not None:
            on_closed(drivers)
    finally:
        for d in drivers:
            d.stop()
        done, stuck = await asyncio.wait(tasks, timeout=30)
        for task in stuck:                               # a node that does not stop fails the test, not CI's time
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for relay in relays:
            relay.close()
    assert not stuck, f"{len(stuck)} nodes did not stop within 30 s of stop()"
    return outputs


async def wait(condition, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def test_tcp_and_simulator_give_equal_application_output(tmp_path):
    query, inputs, publications = scenario()
    reference = replay(query, inputs, replicas=1, punctuation_us=PUNCTUATION_US).outputs
    assert all(reference[app] for app in query.applications)      # every application has output to compare
    simulated = run_simulator(query, publications)
    with mosquitto(tmp_path) as broker_port:
        tcp = asyncio.run(run_tcp(query, publications, broker_port))
    for app, spec in query.applications.items():
        if spec.ordered:                                           # the sorter fixes the order
            assert simulated[app] == reference[app] == tcp[app], app
        else:
            assert Counter(simulated[app]) == Counter(reference[app]) == Counter(tcp[app]), app
