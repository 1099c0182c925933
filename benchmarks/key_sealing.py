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

Replication (``--kmax K``, §III): the Union and the aggregate run ``K`` replicas — on the reporting
server and the ``K − 1`` nearest relays (``--deployment near``), or where the placement puts them
(``min-cost``, Alg. 5) — and each stream enters at its producer (``--entry-replicas 1``) or also at
``K − 1`` other servers (``kmax``).  Every upstream replica feeds every downstream one and the first
copy wins (§IV-B), so a punctuation or seal reaches the reporting server along the *fastest* of the
deployment's paths: the bound above is then the earliest arrival over every path (producer → entry
replica → Union replica → aggregate replica → application, each hop over the trace's delay at the
time it leaves, FIFO behind that producer's earlier messages on the hop), *flight* is that fastest
path's trip, and *held* is still what the engine adds on top.  Whole-stream punctuations must all
reach one Union replica, whose punctuation then travels on: the bound takes, per Union replica, the
last producer's arrival there, then the fastest way on.  Every aggregate replica must close the same
windows with the same contents: a trace query (docs/tracing.md, ``Emit``) counts each replica's outputs
and sums their timestamps, and the benchmark fails unless they agree (besides the delivered multiset
equalling the one-copy replay reference).

    python3 benchmarks/key_sealing.py [--duration-s 600] [--producers 5 10] [--kmax 1]
                                      [--deployment near|min-cost] [--entry-replicas 1|kmax]
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
from replicast.examples.make_keyed_seal import (DEPLOYMENTS, PRODUCERS_5, PRODUCERS_10, REPORTING,  # noqa: E402
                                                query_text, scenario_text)
from replicast.simulator.run import Prepared, run  # noqa: E402
from replicast.simulator.scenario import load_scenario  # noqa: E402
from replicast.simulator.sources import messages  # noqa: E402


@dataclass(frozen=True)
class Replication:
    """How the Union and the aggregate are replicated (make_keyed_seal.deployment_lines)."""

    kmax: int = 1
    deployment: str = "near"
    entry_replicas: str = "1"


#: Each aggregate replica's outputs over the run: how many, and the sum of their timestamps (every
#: output, ``Sample 1/1``): replicas that close the same windows agree on both.
REPLICA_OUTPUTS = ('From e In Emit Where e.replica != "" GroupBy e.replica '
                   'Select e.replica, COUNT, SUM(e.ts) Sample 1/1')


@dataclass
class Run:
    """One simulation: the records delivered in order, their arrival µs and path, the deployment, and
    the prepared scenario."""

    records: list
    arrivals: np.ndarray
    paths: list[str]
    placement: dict[str, list[str]]
    prepared: Prepared


def simulate(directory: Path, producers: tuple[str, ...], sealed: bool, duration_s: int, seed: int,
             start_s: int, replication: Replication = Replication()) -> Run:
    r = replication
    name = f"{len(producers)}-{'sealed' if sealed else 'punctuated'}-{seed}-{start_s}"
    (directory / f"{name}.toml").write_text(query_text(len(producers), sealed))
    (directory / f"sim-{name}.toml").write_text(scenario_text(f"{name}.toml", producers, duration_s, seed=seed,
                                                              start_s=start_s, kmax=r.kmax, deployment=r.deployment,
                                                              entry_replicas=r.entry_replicas))
    prepared = Prepared(load_scenario(directory / f"sim-{name}.toml"))
    result = run(prepared, r.kmax, keep_records=True, trace_queries=[("outputs", REPLICA_OUTPUTS)])
    table = result.recorder.deliveries()
    records = result.recorder.outputs["per_server"]
    arrivals = table.column("arrival").to_numpy()
    paths = table.column("path").to_pylist()
    if len(records) != len(arrivals):
        raise SystemExit(f"{name}: {len(records)} records but {len(arrivals)} delivery rows")
    reference = replay(prepared.query, result.inputs, replicas=1).outputs["per_server"]
    if Counter(records) != Counter(reference):
        raise SystemExit(f"{name}: the delivered records differ from the one-copy replay reference")
    outputs = {row["replica"]: (row["COUNT"], row["SUM(ts)"]) for row in result.trace[0]["rows"]
               if row["replica"].startswith("load#")}
    if len(outputs) != r.kmax or len(set(outputs.values())) != 1 or result.trace[0]["events_past_group_limit"]:
        raise SystemExit(f"{name}: the aggregate's replicas closed different windows (outputs, sum of ts): {outputs}")
    return Run(records, arrivals, paths, result.placement, prepared)


def one_way_ms(prepared: Prepared, producer: str) -> float:
    """The median one-way delay producer → reporting server over the run (trace samples every 10 s)."""
    trace, servers = prepared.trace, prepared.servers
    samples = [trace.one_way_us(servers[producer], servers[REPORTING], t)
               for t in range(prepared.start, prepared.end, 10_000_000)]
    return float(np.median([s for s in samples if s is not None])) / 1000.0


class Links:
    """One-way trips over the trace: a message leaving ``a`` for ``b`` at ``t`` arrives at
    :meth:`arrival`, held through an outage until the trace shows the pair again (``outage = "hold"``);
    0 between replicas on one server."""

    def __init__(self, prepared: Prepared):
        self.trace, self.servers, self.origin = prepared.trace, prepared.servers, prepared.origin
        self.limit = prepared.end + 3_600_000_000
        self.cache: dict[tuple[str, str, int], int | None] = {}

    def delay(self, a: str, b: str, t: int) -> int | None:
        frame = max(0, t - self.origin) // self.trace.interval_us
        key = (a, b, frame)
        if key not in self.cache:
            self.cache[key] = self.trace.one_way_us(self.servers[a], self.servers[b], max(0, t - self.origin))
        return self.cache[key]

    def arrival(self, a: str, b: str, t: int) -> int | None:
        if a == b:
            return t
        leaves, delay = t, self.delay(a, b, t)
        while delay is None and leaves < self.limit:
            step = self.trace.interval_us
            leaves = ((leaves - self.origin) // step + 1) * step + self.origin
            delay = self.delay(a, b, leaves)
        return None if delay is None else leaves + delay


class PunctuationArrivals:
    """When each producer's punctuations leave it and, at the earliest, reach each Union replica's
    server and the application, over every path of the deployment (module docstring).

    Hop by hop: a producer's messages go to its stream's entry replicas (the source's own
    connection), every entry replica forwards each to every Union replica, every Union replica to
    every aggregate replica, and an aggregate replica passes each seal on to the application (its
    output keeps ``Seal_server``) with the window's output when that seal closes one.  A replica has a message when its first copy arrives.  Each hop
    takes the trace's one-way delay at the time it leaves (0 on one server), and a link between two
    servers is FIFO over everything the bound sends on it, every producer's messages together and
    every hop that shares the link (a relay's Union replica forwarding to the reporting server's
    aggregate replica and its aggregate replica's outputs to the application ride one link):
    ``arrival = max(send + delay, previous arrival)``, as the simulator's links.  With one replica
    each on the reporting server this is the direct link's trip, behind that producer's earlier
    messages."""

    def __init__(self, prepared: Prepared, placement: dict[str, list[str]]):
        trace, servers, origin = prepared.trace, prepared.servers, prepared.origin
        self.links = Links(prepared)
        self.unions, self.aggregates = list(dict.fromkeys(placement["cpu"])), list(dict.fromkeys(placement["load"]))
        self.application = placement["per_server"][0]

        def rtt(a: str, b: str, t: int) -> float | None:
            return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

        self.sent: dict[str, list[int]] = {}         # producer → its punctuations' send times
        self.message: dict[str, list[int]] = {}      # producer → its punctuations' message numbers
        at_entries: list[dict[str, int | None]] = []
        carries: list[bool] = []                      # whether the message carries a punctuation (and seal)
        for source in prepared.sources:
            entries = list(dict.fromkeys(placement[source.stream]))
            last = dict.fromkeys(entries, 0)
            sent, numbers = [], []
            for when, items in messages(source, prepared.start, prepared.end, rtt, close=False):
                at = {}
                for entry in entries:
                    arrives = self.links.arrival(source.server, entry, when)
                    at[entry] = None if arrives is None else max(last[entry], arrives)
                    last[entry] = at[entry] or last[entry]
                punctuated = any("punctuation" in item for item in items)
                if punctuated:
                    sent.append(when)
                    numbers.append(len(at_entries))
                at_entries.append(at)
                carries.append(punctuated)
            self.sent[source.server], self.message[source.server] = sent, numbers
        self.sent_on: dict[tuple[str, str], list[tuple[list[int], list[int]]]] = {}   # earlier hops' sends
        everything = [True] * len(at_entries)
        self.at_union = self.hop(at_entries, self.unions, everything)
        at_aggregates = self.hop(self.at_union, self.aggregates, everything)
        #: what the entry and Union replicas send (records and punctuations), before any output
        self.union_sent = {link: list(logs) for link, logs in self.sent_on.items()}
        self.at_application = self.hop(at_aggregates, [self.application], carries)
        # A relay's aggregate replica passing a seal on can delay what its Union replica sends later on
        # the same link (and so on): the two hops once more, each behind what the other sent.
        at_aggregates = self.hop(self.at_union, self.aggregates, everything)
        self.at_application = self.hop(at_aggregates, [self.application], carries)

    def behind(self, a: str, b: str, t: int, logs=None) -> int:
        """The latest arrival of what an earlier hop sent from ``a`` to ``b`` at or before ``t`` (FIFO)."""
        latest = 0
        for times, arrivals in (self.sent_on if logs is None else logs).get((a, b), ()):
            before = bisect.bisect_right(times, t)
            if before:
                latest = max(latest, arrivals[before - 1])
        return latest

    def hop(self, at: list[dict[str, int | None]], targets: list[str], carried: list[bool]):
        """Every message ``carried`` from where it is (``at``: server → first arrival) to each of
        ``targets``: per message, target → first arrival; each link's send times and arrivals (a
        running maximum: FIFO) are added to :attr:`sent_on` for the later hops."""
        reached: list[dict[str, int | None]] = [dict.fromkeys(targets) for _ in at]
        sends: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for number, here in enumerate(at):
            if carried[number]:
                for a, t in here.items():
                    if t is not None:
                        for b in targets:
                            sends.setdefault((a, b), []).append((t, number))
        log = {}
        for (a, b), items in sends.items():
            earlier = {(a, b): self.sent_on.get((a, b), [])}
            items.sort()
            times, arrivals, last = [], [], 0
            for t, number in items:
                arrives = self.links.arrival(a, b, t)
                if arrives is None:
                    continue
                if a != b:
                    arrives = last = max(last, arrives, self.behind(a, b, t, earlier))
                times.append(t)
                arrivals.append(arrives)
                if reached[number][b] is None or arrives < reached[number][b]:
                    reached[number][b] = arrives
            log[a, b] = (times, arrivals)
        for link, sent in log.items():
            if link[0] != link[1]:
                self.sent_on.setdefault(link, []).append(sent)
        return reached

    def index(self, producer: str, end: int) -> int | None:
        """Which of ``producer``'s punctuations is the first ``≥ end − 1``, or None past the run."""
        i = bisect.bisect_left(self.sent[producer], end - 1)
        return i if i < len(self.sent[producer]) else None

    def sealed(self, producer: str, end: int) -> tuple[int, int] | None:
        """(sent, earliest arrival at the application) of the seal that closes ``producer``'s window
        ending at ``end``: its first punctuation ``≥ end − 1``, along the fastest path."""
        i = self.index(producer, end)
        if i is None:
            return None
        reached = self.at_application[self.message[producer][i]][self.application]
        return None if reached is None else (self.sent[producer][i], reached)

    def whole_stream(self, producers: tuple[str, ...], ends: list[int]) -> dict[int, tuple[int, int]]:
        """Per window end (ascending), (sent, earliest arrival at the application) of the punctuation
        that closes it: a Union replica forwards it once every producer's has reached it (behind what
        it forwarded before, FIFO), each aggregate replica closes the window at the first Union
        replica's, and its output goes on behind the earlier ones; *sent* is when the last producer's
        punctuation, on the fastest route, left its producer."""
        closing: dict[int, tuple[int, int]] = {}
        last = dict.fromkeys(self.aggregates, 0)
        for end in ends:
            indices = {p: self.index(p, end) for p in producers}
            if any(i is None for i in indices.values()):
                continue
            ready: dict[str, tuple[int, str]] = {}
            for union in self.unions:
                arrivals = [(self.at_union[self.message[p][i]][union], p) for p, i in indices.items()]
                if all(a is not None for a, _ in arrivals):
                    ready[union] = max(arrivals)
            routes = []
            for aggregate in self.aggregates:
                heard = []
                for union, (t, producer) in ready.items():
                    arrives = self.links.arrival(union, aggregate, t)
                    if arrives is None:
                        continue
                    if union != aggregate:            # behind the records sent on this link before
                        arrives = max(arrives, self.behind(union, aggregate, t, self.union_sent))
                    heard.append((arrives, producer))
                if not heard:
                    continue
                closes, producer = min(heard)
                out = self.links.arrival(aggregate, self.application, closes)
                if out is None:
                    continue
                if aggregate != self.application:     # behind the earlier outputs and records on the link
                    out = last[aggregate] = max(last[aggregate], out,
                                                self.behind(aggregate, self.application, closes, self.union_sent))
                routes.append((out, producer))
            if routes:
                reached, producer = min(routes)
                closing[end] = (self.sent[producer][indices[producer]], reached)
        return closing


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


def split(run: Run, members: set[str], producers: tuple[str, ...], sealed: bool, bound: PunctuationArrivals,
          whole: dict[int, tuple[int, int]]) -> Split:
    latencies, phases, flights, held = [], [], [], []
    for record, arrival in zip(run.records, run.arrivals):
        if record[1] not in members:
            continue
        end = record[0]
        latencies.append((arrival - end) / 1000.0)
        closer = bound.sealed(record[1], end) if sealed else whole.get(end)
        if closer is None:
            continue                                # closed by the run's last (CLOSED) punctuation
        sent, reached = closer
        phases.append((sent - end) / 1000.0)
        flights.append((reached - sent) / 1000.0)
        if end > run.prepared.start + WARM_UP_US:
            held.append((arrival - reached) / 1000.0)
    return Split(len(latencies), float(np.quantile(latencies, 0.5)), float(np.quantile(latencies, 0.99)),
                 float(np.median(phases)), float(np.median(flights)), max(held))


def relayed(bound: PunctuationArrivals, members: set[str], sealed: bool, ends: list[int],
            whole: dict[int, tuple[int, int]]) -> float | None:
    """The share of ``members``' windows whose closing seal (or, unsealed, punctuation) can reach the
    application sooner through a relay than by the direct path alone (Union and aggregate replicas
    on the reporting server), from the trace; None where the reporting server hosts no such pair."""
    if REPORTING not in bound.unions or REPORTING not in bound.aggregates or bound.application != REPORTING:
        return None
    sooner = []
    for end in ends:
        if sealed:
            for producer in members:
                i, closer = bound.index(producer, end), bound.sealed(producer, end)
                direct = None if i is None else bound.at_union[bound.message[producer][i]][REPORTING]
                if closer is not None and direct is not None:
                    sooner.append(closer[1] < direct)
        elif end in whole:
            indices = [bound.index(p, end) for p in bound.sent]
            direct = [bound.at_union[bound.message[p][i]][REPORTING] for p, i in zip(bound.sent, indices)]
            if None not in direct:
                sooner.extend([whole[end][1] < max(direct)] * len(members))
    return sum(sooner) / len(sooner) if sooner else None


def compare(producers: tuple[str, ...], duration_s: int, seed: int, start_s: int, verbose: bool,
            replication: Replication = Replication()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wall = time.perf_counter()
        runs = {sealed: simulate(Path(tmp), producers, sealed, duration_s, seed, start_s, replication)
                for sealed in (True, False)}
        wall = time.perf_counter() - wall
    if runs[True].placement != runs[False].placement:
        raise SystemExit(f"seed {seed}, from {start_s} s: the sealed and unsealed runs were deployed differently: "
                         f"{runs[True].placement} / {runs[False].placement}")
    prepared = runs[True].prepared
    ends = sorted({record[0] for record in runs[False].records})
    bound = PunctuationArrivals(prepared, runs[True].placement)
    whole = bound.whole_stream(producers, ends)
    distance = {p: one_way_ms(prepared, p) for p in producers}
    middle = float(np.median(list(distance.values())))
    near = {p for p in producers if distance[p] < middle}
    identical = Counter(runs[True].records) == Counter(runs[False].records)
    groups = {"nearer": near, "farther": set(producers) - near, "all": set(producers)}
    figures = {(g, s): split(runs[s], m, producers, s, bound, whole) for g, m in groups.items() for s in (True, False)}
    via = {s: relayed(bound, near, s, ends, whole) for s in (True, False)}
    shown = {s: "–" if via[s] is None else f"{100 * via[s]:.0f}" for s in (True, False)}
    if verbose:
        deployed = ", ".join(f"{name} {'/'.join(runs[True].placement[name])}" for name in ("cpu", "load"))
        replicated = (f", kmax {replication.kmax} ({deployed}; entry replicas {replication.entry_replicas})"
                      if replication != Replication() else "")
        print(f"\n{len(producers)} producers, {duration_s} s of the Seattle trace from {start_s} s, seed {seed}, "
              f"reporting server {REPORTING}{replicated} ({wall:.0f} s wall for both runs)")
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
              f"({len(runs[True].records)} records; both equal the one-copy replay reference"
              f"{'; every aggregate replica closed the same windows' if replication.kmax > 1 else ''})")
        if replication.kmax > 1:
            print(f"  nearer keys' windows whose closing seal (punctuation) can arrive sooner through a relay "
                  f"than directly: {shown[True]} % sealed, {shown[False]} % unsealed (the trace's bound)")
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
            + (f"sooner via a relay {shown[True]}/{shown[False]} %   " if replication.kmax > 1 else "")
            + f"identical: {'yes' if identical else 'NO'}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=int, default=600)
    parser.add_argument("--producers", type=int, nargs="+", default=[5, 10], choices=[5, 10])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="the sources' phases and walks")
    parser.add_argument("--start-s", type=int, nargs="+", default=[0], help="where in the trace each run starts")
    parser.add_argument("--kmax", type=int, default=1, choices=[1, 2, 3, 4],
                        help="replicas of the Union and the aggregate (and of each entry point with --entry-replicas kmax)")
    parser.add_argument("--deployment", default="near", choices=DEPLOYMENTS,
                        help="near: on the reporting server and the nearest relays; min-cost: Alg. 5 places them")
    parser.add_argument("--entry-replicas", default="1", choices=["1", "kmax"],
                        help="1: each stream enters at its producer; kmax: also at kmax - 1 other servers")
    args = parser.parse_args()
    replication = Replication(args.kmax, args.deployment, args.entry_replicas)
    ok = True
    sweep = len(args.seeds) * len(args.start_s) > 1
    for n in args.producers:
        results = []
        for start_s in args.start_s:
            for seed in args.seeds:
                results.append(compare(PRODUCERS_5 if n == 5 else PRODUCERS_10, args.duration_s, seed, start_s,
                                       verbose=not sweep, replication=replication))
                ok &= results[-1]["identical"]
                if sweep:
                    print(f"{n} producers" + results[-1]["line"], flush=True)
        if sweep:
            replicated = (f"kmax {args.kmax} ({args.deployment}, entry replicas {args.entry_replicas}), "
                          if replication != Replication() else "")
            print(f"{n} producers, {replicated}{len(results)} runs ({len(args.seeds)} seeds × {len(args.start_s)} trace windows "
                  f"of {args.duration_s} s): median ratio punct./seal for the nearer keys: "
                  f"p50 {statistics.median(r['p50'] for r in results):.2f}x, "
                  f"p99 {statistics.median(r['p99'] for r in results):.2f}x "
                  f"(range {min(r['p99'] for r in results):.2f}–{max(r['p99'] for r in results):.2f}x); "
                  f"nearer keys whose own p99 halves: {sum(r['halved'] for r in results)} of "
                  f"{sum(r['near'] for r in results)}; held by the engine ≤ {max(r['held'] for r in results):.1f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
