"""Seals per key end to end (operators/key_seals.py, engine/core/key_seals.py): a keyed aggregate over
three sealed producers, every stream and operator twice, gives the same output on the asyncio/TCP
driver (a private mosquitto, delay relays between the nodes, as tests/simulator/test_runtimes.py) and
in the simulator as the one-copy reference of the *unsealed* query — and the seals are used on the
way (the aggregate's replicas apply them).  In the simulator, the nearest producer's windows then
arrive sooner than with whole-stream punctuations (the benefit of Blazes' sealing, §VIII-B3).
The same holds for a user-defined keyed window that declares ``key_seals = "close"`` (``ServerPeak``).
"""

from __future__ import annotations

import asyncio

import pytest
from collections import Counter, defaultdict

from replicast.engine.node import NodeOptions
from replicast.engine.query_file import parse_query
from replicast.engine.replay import replay
from replicast.simulator.driver import Simulation
from replicast.simulator.network import FixedDelays
from replicast.simulator.sources import Source, messages, payload
from tests.integration.helpers import mosquitto
from tests.simulator.test_runtimes import Collect, run_tcp

NODES = ["n0", "n1", "n2"]
RTT_MS = {"n0": {"n1": 40.0, "n2": 80.0}, "n1": {"n2": 60.0}}
PUNCTUATION_US = 500_000
HOME = {"cpu_a": "n0", "cpu_b": "n1", "cpu_c": "n2"}
PLACEMENT = {"cpu_a": ["n0", "n1"], "cpu_b": ["n1", "n2"], "cpu_c": ["n2", "n0"],
             "cpu": ["n1", "n2"], "load": ["n0", "n2"], "per_server": ["n0"]}


#: The keyed window: the built-in aggregate, or a user operator closing per key (examples/user_operators.py).
WINDOWS = {"aggregate": """
[[operators]]
name = "load"
kind = "aggregate"
input = "cpu"
group_by = ["server"]
window = { kind = "time", size_ms = 1000 }
compute = { n = "count()", avg = "avg(load)" }
""", "user": """
[[operators]]
name = "load"
kind = "python"
input = "cpu"
class = "replicast.examples.user_operators:ServerPeak"
args = { interval_ms = 1000 }
fields = { server = "str", load = "float" }
key_seals = "close"
"""}


def query_text(sealed: bool, window: str = "aggregate") -> str:
    seal = 'seal = ["server"]\n' if sealed else ""
    streams = "".join(f'[[streams]]\nname = "{s}"\nfields = {{ server = "str", load = "float" }}\n{seal}\n'
                      for s in HOME)
    return streams + """
[[operators]]
name = "cpu"
kind = "union"
inputs = ["cpu_a", "cpu_b", "cpu_c"]
""" + WINDOWS[window] + """

[[applications]]
name = "per_server"
input = "load"
"""


def scenario(sealed: bool = True, period_us: int = 100_000, window: str = "aggregate"):
    """The query, the records each source produces over 6 s (a record every 100 ms, a punctuation —
    and, sealed, a seal of its server — every 500 ms), and the payloads in send order."""
    query = parse_query(query_text(sealed, window), "keyed-seal-test.toml")
    start, end = 1_000_000_000_000, 1_000_006_000_000
    inputs, publications = {}, []
    for stream, server in HOME.items():
        source = Source(stream, server, "cpu", period_us=period_us, punctuation_us=PUNCTUATION_US, seed=3,
                        seal=query.streams[stream].seal)
        inputs[stream] = []
        for when, items in messages(source, start, end, None):
            inputs[stream] += [(i["ts"], i["server"], i["load"]) for i in items if "ts" in i]
            publications.append((when, stream, payload(items)))
    publications.sort(key=lambda p: p[0])
    assert any(b'key' in body for _, _, body in publications) == sealed
    return query, inputs, publications


def run_simulator(query, publications, placement=PLACEMENT):
    observer = Collect()
    arrivals = defaultdict(list)

    class Timed(Collect):
        def delivered(self, node, event):
            observer.delivered(node, event)
            arrivals[event.app] += [(r, event.now) for r in event.records]

    sim = Simulation(query, placement, FixedDelays(RTT_MS), {n: i for i, n in enumerate(NODES)},
                     options=NodeOptions(heartbeat_us=500_000, peer_timeout_us=3_000_000,
                                         punctuation_us=PUNCTUATION_US),
                     start_us=publications[0][0], observer=Timed())
    for when, stream, body in publications:
        sim.env.timeout(when - sim.env.now).callbacks.append(
            lambda event, stream=stream, body=body: sim.publish(HOME[stream], stream, body))
    sim.run(publications[-1][0] + 30_000_000)
    assert observer.closed == set(query.applications)
    used = sum(sim.nodes[n].core.statistics()["key_seals"] for n in placement["load"])
    return observer.outputs, arrivals, used


def count_closes(monkeypatch, window: str) -> list:
    """What the window's replicas emit at seals per key (both runtimes run in this process)."""
    from replicast.examples.user_operators import ServerPeak
    from replicast.operators.aggregate import TimeWindowAggregate

    cls = ServerPeak if window == "user" else TimeWindowAggregate
    closed, original = [], cls.on_key_seal

    def counting(self, port, key, p):
        out = original(self, port, key, p)
        closed.extend(out)
        return out

    monkeypatch.setattr(cls, "on_key_seal", counting)
    return closed


@pytest.mark.pure_python        # counts closes through a patched operator method (count_closes)
@pytest.mark.parametrize("window", list(WINDOWS))
def test_a_sealed_keyed_aggregate_gives_the_unsealed_output_on_tcp_and_in_the_simulator(tmp_path, window, monkeypatch):
    closed = count_closes(monkeypatch, window)
    query, inputs, publications = scenario(sealed=True, window=window)
    plain, _, _ = scenario(sealed=False, window=window)
    reference = Counter(replay(plain, inputs, replicas=1, punctuation_us=PUNCTUATION_US).outputs["per_server"])
    assert len(reference) >= 15                               # 6 windows × 3 servers (the last may be empty)
    simulated, _, used = run_simulator(query, publications)
    assert used > 0 and closed                                # windows closed by seals in the simulator
    assert Counter(simulated["per_server"]) == reference
    closed.clear()
    query_path = tmp_path / "keyed-seal.toml"
    query_path.write_text(query_text(True, window))
    used = []
    with mosquitto(tmp_path) as broker_port:
        tcp = asyncio.run(run_tcp(query, publications, broker_port, placement=PLACEMENT, query_path=query_path,
                                  min_bytes=1_000, on_closed=lambda drivers: used.extend(
                                      d.core.statistics()["key_seals"] for d in drivers if d.name in PLACEMENT["load"])))
    assert sum(used) > 0 and closed                           # ... and over TCP
    assert Counter(tcp["per_server"]) == reference


@pytest.mark.parametrize("window", list(WINDOWS))
def test_the_nearest_producers_windows_arrive_sooner_with_seals(window):
    # one aggregate on n0 beside cpu_a's producer; cpu_c's punctuations come 40 ms later (n2 → n0).
    # A record every 5 ms: a source's phase (when after a window's end its next seal goes) is small.
    placement = {"cpu_a": ["n0"], "cpu_b": ["n1"], "cpu_c": ["n2"], "cpu": ["n0"], "load": ["n0"],
                 "per_server": ["n0"]}
    latency = {}
    for sealed in (True, False):
        query, _, publications = scenario(sealed, period_us=5_000, window=window)
        _, arrivals, _ = run_simulator(query, publications, placement)
        near = [now - r[0] for r, now in arrivals["per_server"] if r[1] == "n0" and r[0] < publications[-1][0]]
        latency[sealed] = sum(near) / len(near)
    assert latency[True] + 30_000 < latency[False], latency      # ~40 ms less: no wait for n2's punctuation
