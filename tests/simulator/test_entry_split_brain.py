"""Entry-stamped mode in the simulator: the link between the two entry replicas is cut for four
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
