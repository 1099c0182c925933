"""What entry stamping that never stamps twice costs in latency (docs/node.md).

A stamped segment leaves the entry point only once every member of the stream's view holds it
(engine/core/stamper.py rule 2): one round trip between the entry replicas.  This runs the
simulator (simulated time: the figures do not depend on the machine's load) on

    source → entry replicas e1, e2 → filter replicas f1, f2 → application

with 20 ms RTT on every other link, and reports arrival − ts (ts is the stamp) for each RTT
between the entry replicas, against the baseline of the same run with one entry replica (no member
to wait for); then crashes the stamper halfway and reports the longest pause in deliveries (the
take-over: a new view decided by the voters, the member's pending records stamped).

    python3 benchmarks/entry_stamping.py [--rtts 20,100] [--records 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replicast.engine.node import NodeOptions  # noqa: E402
from replicast.engine.query_file import load_query  # noqa: E402
from replicast.simulator.driver import Observer, Simulation  # noqa: E402
from replicast.simulator.network import FixedDelays  # noqa: E402

QUERY = load_query(Path(__file__).resolve().parents[1] / "examples/entry-stamped-query.toml")
MS, S = 1_000, 1_000_000
NODES = ["e1", "e2", "f1", "f2", "app", "src"]


class Latencies(Observer):
    def __init__(self):
        self.ms: list[float] = []
        self.arrivals: list[int] = []
        self.events: list[tuple] = []

    def delivered(self, node, event):
        self.ms.extend((event.now - record[0]) / MS for record in event.records)
        self.arrivals.extend(event.now for _ in event.records)
        self.events.extend(record[1:] for record in event.records)


def run(entries: list[str], entry_rtt_ms: float, records: int, crash: bool = False) -> Latencies:
    rtt = {a: {b: 20.0 for b in NODES if b != a} for a in NODES}
    rtt["e1"]["e2"] = rtt["e2"]["e1"] = entry_rtt_ms
    options = NodeOptions(punctuation_us=50 * MS, heartbeat_us=100 * MS, peer_timeout_us=500 * MS,
                          entry_modes={"cpu": "entry"})
    observer = Latencies()
    sim = Simulation(QUERY, {"cpu": entries, "pass": ["f1", "f2"], "out": ["app"]}, FixedDelays(rtt, NODES),
                     {n: i for i, n in enumerate(NODES)}, options=options, observer=observer)
    start = 5 * S                                       # after the start-up (views, operator joins)
    for i in range(records):
        sim.env.call_at(start + i * 10 * MS, sim.publish, "src", "cpu", f'{{"server": "s", "load": {i}.0}}'.encode())
    def crash_the_stamper():
        sim.crash(next(n for n in entries for h in sim.nodes[n].core.hosted.values()
                       if h.stamp is not None and h.stamp.role.value == "stamping"))
    if crash:                                           # the stamper's process dies halfway
        sim.env.call_at(start + records * 5 * MS, crash_the_stamper)
    sim.run(until=start + records * 10 * MS + 3 * S)
    assert len(observer.events) == len(set(observer.events)), "an event was delivered twice"
    assert len(observer.ms) == records, f"{len(observer.ms)} of {records} records delivered"
    return observer


def summary(ms: list[float]) -> str:
    ordered = sorted(ms)
    return f"median {statistics.median(ordered):6.1f} ms   p99 {ordered[int(0.99 * (len(ordered) - 1))]:6.1f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtts", default="20,100", help="RTTs between the two entry replicas, ms (default 20,100)")
    parser.add_argument("--records", type=int, default=300, help="records per run (default 300)")
    args = parser.parse_args(argv)
    baseline = run(["e1"], 20.0, args.records).ms
    base = statistics.median(baseline)
    print(f"one entry replica (baseline):       {summary(baseline)}")
    for rtt in (float(x) for x in args.rtts.split(",")):
        ms = run(["e1", "e2"], rtt, args.records).ms
        print(f"two, {rtt:5.0f} ms RTT between them:  {summary(ms)}   median / baseline {statistics.median(ms) / base:.2f}")
    for rtt in (float(x) for x in args.rtts.split(",")):
        crashed = run(["e1", "e2"], rtt, args.records, crash=True)
        gap = max(b - a for a, b in zip(sorted(crashed.arrivals), sorted(crashed.arrivals)[1:])) / MS
        print(f"two, {rtt:5.0f} ms RTT, the stamper crashes: every record once; longest pause between deliveries "
              f"{gap:.0f} ms (records every 10 ms)")


if __name__ == "__main__":
    main()
