"""Entry-stamped mode in the simulator: a source's publication in flight when its own server's
engine crashes still reaches the other entry replicas; and the link between the two entry replicas is cut for four
seconds while a source keeps publishing to both (docs/node.md's split brain).  Every event must
reach the application once, with one timestamp; before the fix each event published during the
cut was delivered twice."""

from collections import Counter, defaultdict
from pathlib import Path

from replicast.engine.node import NodeOptions
from replicast.engine.query_file import load_query
from replicast.simulator.driver import Observer, Simulation
from replicast.simulator.network import FixedDelays

QUERY = load_query(Path(__file__).resolve().parents[2] / "examples/entry-stamped-query.toml")
MS = 1_000
S = 1_000_000


class Deliveries(Observer):
    def __init__(self):
        self.records = []

    def delivered(self, node, event):
        self.records.extend(event.records)


def test_a_cut_between_the_entry_replicas_gives_each_event_one_timestamp():
    nodes = ["e1", "e2", "f1", "f2", "app", "src"]
    rtt = {a: {b: 20.0 for b in nodes if b != a} for a in nodes}
    rtt["src"]["e2"] = rtt["e2"]["src"] = 30.0           # the replicas get each event at different times
    placement = {"cpu": ["e1", "e2"], "pass": ["f1", "f2"], "out": ["app"]}
    options = NodeOptions(punctuation_us=50 * MS, heartbeat_us=100 * MS, peer_timeout_us=500 * MS,
                          entry_modes={"cpu": "entry"})
    observer = Deliveries()
    sim = Simulation(QUERY, placement, FixedDelays(rtt, nodes), {n: i for i, n in enumerate(nodes)}, options=options,
                     observer=observer)
    sim.network.cut("e1", "e2", 2 * S, 6 * S)
    published = []
    for i in range(80):                                  # every 100 ms from 0.5 s to 8.4 s
        payload = f'{{"server": "s", "load": {i}.0}}'.encode()
        sim.env.call_at(S // 2 + i * 100 * MS, sim.publish, "src", "cpu", payload)
        published.append(("s", float(i)))
    sim.run(until=14 * S)
    counts = Counter(record[1:] for record in observer.records)
    stamps = defaultdict(set)
    for record in observer.records:
        stamps[record[1:]].add(record[0])
    twice = {event: n for event, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} events delivered more than once: {sorted(twice.items())[:5]}"
    assert all(len(ts) == 1 for ts in stamps.values())
    # Nothing is lost either: the majority side kept stamping, the other side's events were its own too.
    assert sorted(counts) == published


# A source is external to the engine on its server (docs/simulator.md, "Sources are external"): its
# publications ride its own connection to each entry replica (MQTT, retried until acknowledged), so
# the engine on the source's server crashing must not lose a publication already on its way to the
# other entry replicas.  Found by the sim-fig1 fault hunt (seed 85): a ping published 75 ms before
# its server's engine crashed was dropped with the engine's connections, and two join outputs per
# application went missing.
def test_a_publication_in_flight_when_the_sources_engine_crashes_still_arrives():
    nodes = ["e1", "e2", "e3", "f1", "f2", "app"]
    rtt = {a: {b: 40.0 for b in nodes if b != a} for a in nodes}      # 20 ms one way
    placement = {"cpu": ["e1", "e2", "e3"], "pass": ["f1", "f2"], "out": ["app"]}
    options = NodeOptions(punctuation_us=50 * MS, heartbeat_us=100 * MS, peer_timeout_us=500 * MS,
                          entry_modes={"cpu": "entry"})
    observer = Deliveries()
    sim = Simulation(QUERY, placement, FixedDelays(rtt, nodes), {n: i for i, n in enumerate(nodes)}, options=options,
                     observer=observer)
    published = []
    for i in range(40):                                  # every 100 ms from 0.5 s to 4.4 s, from e1's server
        payload = f'{{"server": "s", "load": {i}.0}}'.encode()
        sim.env.call_at(S // 2 + i * 100 * MS, sim.publish, "e1", "cpu", payload)
        published.append(("s", float(i)))
    # e1's engine crashes 5 ms after the publication at 2.0 s left for e2 and e3 (20 ms away).
    sim.env.call_at(2 * S + 5 * MS, sim.crash, "e1")
    sim.run(until=10 * S)
    counts = Counter(record[1:] for record in observer.records)
    assert ("s", 15.0) in counts, "the publication in flight at the crash was lost with the engine's connections"
    assert sorted(counts) == published
    assert set(counts.values()) == {1}


def test_an_entry_stamped_events_source_sends_bare_values_and_no_punctuation():
    """An ``events`` source replays its file's records at their times; entry-stamped (``stamped=False``,
    scenario ``entry_mode = "entry"``) it sends what the entry point stamps: values without ``ts`` and no
    punctuations, like the ``cpu`` and ``ping`` sources (simulator/sources.py).  Before, it sent ``ts``
    and punctuations, every record was refused as a dead letter and nothing was delivered."""
    from replicast.simulator.sources import Source, messages
    records = [(1_000_000 + i * 300_000, "s", float(i)) for i in range(10)]
    sent = {stamped: list(messages(Source("cpu", "e1", "events", punctuation_us=1_000_000, records=records,
                                          names=("server", "load"), stamped=stamped), 0, 10**9, None, close=True))
            for stamped in (True, False)}
    bare = [item for _, items in sent[False] for item in items]
    assert bare == [{"server": "s", "load": float(i)} for i in range(10)]
    assert [when for when, _ in sent[False]] == sorted({r[0] for r in records})
    stamped = [item for _, items in sent[True] for item in items]
    assert [item["ts"] for item in stamped if "ts" in item] == [r[0] for r in records]
    assert any("punctuation" in item for item in stamped)
