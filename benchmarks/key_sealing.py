"""Seal per key against whole-stream punctuations: Blazes' sealing experiment (``papers/000_…``
§VIII-B3, Fig. 14, "independent seal") replayed in the simulator on the shipped Seattle trace.

A keyed time-window aggregate (each server's load per second) on one reporting server, fed by 5 and
then 10 producers at different distances (``examples/make_keyed_seal.py``).  Each configuration
runs twice on the node-core tier with the same trace window, seed (the sources' phases and walks),
sources and deployment: with the streams declaring ``seal = ["server"]`` (each producer seals its
own server at every punctuation, and the aggregate closes a server's window once that server's seal
has arrived) and without (the window closes once every producer's punctuation has).  Per-key
latency is an output's arrival at the application minus its timestamp (the window's end).  The
*nearer* keys are the producers whose median one-way delay to the reporting server (the trace, over
the run) is below the median of all producers'; the others are the *farther* keys.  Both runs must
deliver the identical multiset of records (checked; exit 1 otherwise), and so must the one-copy
replay reference of the records the sources produced.

Where the latency goes: for every output the benchmark also computes, from the trace alone, when
the punctuation (or seal) that closes its window could at the earliest reach the reporting server —
sent by its source at the first punctuation at or after the window's end (*phase*: sources punctuate
with their records, every 100 ms at their own phase), then one way over the trace's delay, behind
the earlier messages of that link (FIFO; during an outage the link holds it until the trace shows
the pair again, as the simulator's ``outage = "hold"`` does).  *held* is what the engine adds on top: 0 means nothing
in the engine holds a window back once its seal (or the last punctuation) could have arrived
(measured after the run's first window, while the nodes still connect).

    python3 benchmarks/key_sealing.py [--duration-s 600] [--producers 5 10]
    python3 benchmarks/key_sealing.py --producers 10 --seeds 1 2 3 --start-s 0 1200 2400 3600 4800
                                      # several seeds × trace windows: a line each, then the medians
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replicast.engine.replay import replay  # noqa: E402
from replicast.examples.make_keyed_seal import (PRODUCERS_5, PRODUCERS_10, REPORTING, query_text,  # noqa: E402
                                                scenario_text)
from replicast.simulator.run import Prepared, run  # noqa: E402
from replicast.simulator.scenario import load_scenario  # noqa: E402
from replicast.simulator.sources import messages  # noqa: E402


@dataclass
class Run:
    """One simulation: the records delivered in order, their arrival µs, and the prepared scenario."""

    records: list
    arrivals: np.ndarray
    prepared: Prepared


def simulate(directory: Path, producers: tuple[str, ...], sealed: bool, duration_s: int, seed: int,
             start_s: int) -> Run:
    name = f"{len(producers)}-{'sealed' if sealed else 'punctuated'}-{seed}-{start_s}"
    (directory / f"{name}.toml").write_text(query_text(len(producers), sealed))
    (directory / f"sim-{name}.toml").write_text(scenario_text(f"{name}.toml", producers, duration_s, seed=seed,
                                                              start_s=start_s))
    prepared = Prepared(load_scenario(directory / f"sim-{name}.toml"))
    result = run(prepared, 1, keep_records=True)
    table = result.recorder.deliveries()
    records = result.recorder.outputs["per_server"]
    arrivals = table.column("arrival").to_numpy()
    if len(records) != len(arrivals):
        raise SystemExit(f"{name}: {len(records)} records but {len(arrivals)} delivery rows")
    reference = replay(prepared.query, result.inputs, replicas=1).outputs["per_server"]
    if Counter(records) != Counter(reference):
        raise SystemExit(f"{name}: the delivered records differ from the one-copy replay reference")
    return Run(records, arrivals, prepared)


def one_way_ms(prepared: Prepared, producer: str) -> float:
    """The median one-way delay producer → reporting server over the run (trace samples every 10 s)."""
    trace, servers = prepared.trace, prepared.servers
    samples = [trace.one_way_us(servers[producer], servers[REPORTING], t)
               for t in range(prepared.start, prepared.end, 10_000_000)]
    return float(np.median([s for s in samples if s is not None])) / 1000.0


class PunctuationArrivals:
    """When each producer's punctuations leave it and, at the earliest, reach the reporting server:
    the trace's one-way delay at the send time, never before an earlier message of the link (FIFO)."""

    def __init__(self, prepared: Prepared):
        trace, servers, origin = prepared.trace, prepared.servers, prepared.origin

        def rtt(a: str, b: str, t: int) -> float | None:
            return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

        self.sent: dict[str, list[int]] = {}
        self.reached: dict[str, list[int]] = {}
        for source in prepared.sources:
            sent, reached, last = [], [], 0
            for when, items in messages(source, prepared.start, prepared.end, rtt, close=False):
                leaves, delay = when, None
                while delay is None and leaves < prepared.end + 3_600_000_000:
                    delay = trace.one_way_us(servers[source.server], servers[REPORTING], max(0, leaves - origin))
                    if delay is None:       # an outage: the link holds the message until the trace shows the
                        step = trace.interval_us                        # pair again (outage = "hold")
                        leaves = ((leaves - origin) // step + 1) * step + origin
                if delay is None:
                    continue
                last = max(last, leaves + delay)
                if any("punctuation" in item for item in items):
                    sent.append(when)
                    reached.append(last)
            self.sent[source.server], self.reached[source.server] = sent, reached

    def closing(self, producer: str, end: int) -> tuple[int, int] | None:
        """(sent, earliest arrival) of ``producer``'s first punctuation ``≥ end − 1``, or None past the run."""
        sent = self.sent[producer]
        i = bisect.bisect_left(sent, end - 1)
        return (sent[i], self.reached[producer][i]) if i < len(sent) else None


#: *held* leaves out the windows ending in the run's first second: the nodes are still connecting
#: then (the first window's outputs wait 100–200 ms for the links, on the trace windows seen).
WARM_UP_US = 1_000_000


@dataclass
class Split:
    """Latency quantiles of one group of keys under one coordination, and where the latency goes."""

    outputs: int
    p50: float
    p99: float
    phase: float        # median ms from the window's end to the closing punctuation's send
    flight: float       # median ms of its trip to the reporting server
    held: float         # the largest ms the engine added on top of that bound


def split(run: Run, members: set[str], producers: tuple[str, ...], sealed: bool, bound: PunctuationArrivals) -> Split:
    latencies, phases, flights, held = [], [], [], []
    for record, arrival in zip(run.records, run.arrivals):
        if record[1] not in members:
            continue
        end = record[0]
        latencies.append((arrival - end) / 1000.0)
        closers = [bound.closing(p, end) for p in ((record[1],) if sealed else producers)]
        if any(c is None for c in closers):
            continue                                # closed by the run's last (CLOSED) punctuation
        sent, reached = max(closers, key=lambda c: c[1])
        phases.append((sent - end) / 1000.0)
        flights.append((reached - sent) / 1000.0)
        if end > run.prepared.start + WARM_UP_US:
            held.append((arrival - reached) / 1000.0)
    return Split(len(latencies), float(np.quantile(latencies, 0.5)), float(np.quantile(latencies, 0.99)),
                 float(np.median(phases)), float(np.median(flights)), max(held))


def compare(producers: tuple[str, ...], duration_s: int, seed: int, start_s: int, verbose: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wall = time.perf_counter()
        runs = {sealed: simulate(Path(tmp), producers, sealed, duration_s, seed, start_s) for sealed in (True, False)}
        wall = time.perf_counter() - wall
    prepared = runs[True].prepared
    bound = PunctuationArrivals(prepared)
    distance = {p: one_way_ms(prepared, p) for p in producers}
    middle = float(np.median(list(distance.values())))
    near = {p for p in producers if distance[p] < middle}
    identical = Counter(runs[True].records) == Counter(runs[False].records)
    groups = {"nearer": near, "farther": set(producers) - near, "all": set(producers)}
    figures = {(g, s): split(runs[s], m, producers, s, bound) for g, m in groups.items() for s in (True, False)}
    if verbose:
        print(f"\n{len(producers)} producers, {duration_s} s of the Seattle trace from {start_s} s, seed {seed}, "
              f"reporting server {REPORTING} ({wall:.0f} s wall for both runs)")
        print("  one-way ms: " + ", ".join(f"{p} {distance[p]:.0f}{'*' if p in near else ''}" for p in producers)
              + "   (* nearer keys)")
        print(f"  {'keys':8} {'coordination':22} {'outputs':>8} {'p50 ms':>9} {'p99 ms':>9}   "
              f"{'phase':>6} {'flight':>6} {'held':>5}  (medians; held: max)")
        for group in groups:
            for sealed in (True, False):
                f = figures[group, sealed]
                print(f"  {group:8} {'seal per key' if sealed else 'whole-stream punct.':22} {f.outputs:8d} "
                      f"{f.p50:9.1f} {f.p99:9.1f}   {f.phase:6.1f} {f.flight:6.1f} {f.held:5.1f}")
            s, u = figures[group, True], figures[group, False]
            print(f"  {group:8} {'ratio punct./seal':22} {'':8} {u.p50 / s.p50:8.2f}x {u.p99 / s.p99:8.2f}x")
        print(f"  outputs identical with and without seals: {'yes' if identical else 'NO'} "
              f"({len(runs[True].records)} records; both equal the one-copy replay reference)")
    # which keys set the nearer group's p99: each key's own p99, sealed and not
    per_key = {p: tuple(np.quantile([(a - r[0]) / 1000.0 for r, a in zip(runs[sealed].records, runs[sealed].arrivals)
                                     if r[1] == p], 0.99) for sealed in (True, False)) for p in producers}
    if verbose:
        print("  per key p99 ms, seal per key / whole-stream punct.: " + ", ".join(
            f"{p} {per_key[p][0]:.0f}/{per_key[p][1]:.0f}{'*' if p in near else ''}" for p in producers))
    worst = max(near, key=lambda p: per_key[p][0])
    halved = sum(per_key[p][1] >= 2 * per_key[p][0] for p in near)
    s, u = figures["nearer", True], figures["nearer", False]
    return {"identical": identical, "p50": u.p50 / s.p50, "p99": u.p99 / s.p99, "halved": halved, "near": len(near),
            "held": max(f.held for f in figures.values()), "line":
            f"  seed {seed:2d}  from {start_s:5d} s   nearer p50 {s.p50:6.1f} / {u.p50:6.1f} ms = {u.p50 / s.p50:5.2f}x"
            f"   p99 {s.p99:6.1f} / {u.p99:6.1f} ms = {u.p99 / s.p99:5.2f}x   slowest nearer key {worst} "
            f"(its one-way median {distance[worst]:.0f} ms) p99 {per_key[worst][0]:.0f} ms; nearer keys whose own "
            f"p99 halves: {halved}/{len(near)}   held ≤ {max(f.held for f in figures.values()):.1f} ms   "
            f"identical: {'yes' if identical else 'NO'}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=int, default=600)
    parser.add_argument("--producers", type=int, nargs="+", default=[5, 10], choices=[5, 10])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="the sources' phases and walks")
    parser.add_argument("--start-s", type=int, nargs="+", default=[0], help="where in the trace each run starts")
    args = parser.parse_args()
    ok = True
    sweep = len(args.seeds) * len(args.start_s) > 1
    for n in args.producers:
        results = []
        for start_s in args.start_s:
            for seed in args.seeds:
                results.append(compare(PRODUCERS_5 if n == 5 else PRODUCERS_10, args.duration_s, seed, start_s,
                                       verbose=not sweep))
                ok &= results[-1]["identical"]
                if sweep:
                    print(f"{n} producers" + results[-1]["line"], flush=True)
        if sweep:
            print(f"{n} producers, {len(results)} runs ({len(args.seeds)} seeds × {len(args.start_s)} trace windows "
                  f"of {args.duration_s} s): median ratio punct./seal for the nearer keys: "
                  f"p50 {statistics.median(r['p50'] for r in results):.2f}x, "
                  f"p99 {statistics.median(r['p99'] for r in results):.2f}x "
                  f"(range {min(r['p99'] for r in results):.2f}–{max(r['p99'] for r in results):.2f}x); "
                  f"nearer keys whose own p99 halves: {sum(r['halved'] for r in results)} of "
                  f"{sum(r['near'] for r in results)}; held by the engine ≤ {max(r['held'] for r in results):.1f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
