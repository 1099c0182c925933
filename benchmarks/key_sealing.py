"""Seal per key against whole-stream punctuations: Blazes' sealing experiment (``papers/000_…``
§VIII-B3, Fig. 14, "independent seal") replayed in the simulator on the shipped Seattle trace.

A keyed time-window aggregate (each server's load per second) on one reporting server, fed by 5 and
then 10 producers at different distances (``examples/make_keyed_seal.py``).  Each configuration
runs twice on the node-core tier with the same trace, sources and deployment: with the streams
declaring ``seal = ["server"]`` (each producer seals its own server at every punctuation, and the
aggregate closes a server's window once that server's seal has arrived) and without (the window
closes once every producer's punctuation has).  Per-key latency is an output's arrival at the
application minus its timestamp (the window's end).  The *nearer* keys are the producers whose
median one-way delay to the reporting server (the trace, over the run) is below the median of all
producers'; the others are the *farther* keys.  Both runs must deliver the identical multiset of
records (checked; exit 1 otherwise), and so must the one-copy replay reference of the records the
sources produced.

    python3 benchmarks/key_sealing.py [--duration-s 600] [--producers 5 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replicast.engine.replay import replay  # noqa: E402
from replicast.examples.make_keyed_seal import (PRODUCERS_5, PRODUCERS_10, REPORTING, query_text,  # noqa: E402
                                                scenario_text)
from replicast.simulator.run import Prepared, run  # noqa: E402
from replicast.simulator.scenario import load_scenario  # noqa: E402


def simulate(directory: Path, producers: tuple[str, ...], sealed: bool, duration_s: int):
    """One run: (records delivered in order, their arrival µs, the sources' records, the prepared scenario)."""
    name = f"{len(producers)}-{'sealed' if sealed else 'punctuated'}"
    (directory / f"{name}.toml").write_text(query_text(len(producers), sealed))
    (directory / f"sim-{name}.toml").write_text(scenario_text(f"{name}.toml", producers, duration_s))
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
    return records, arrivals, prepared


def one_way_ms(prepared: Prepared, producer: str) -> float:
    """The median one-way delay producer → reporting server over the run (trace samples every 10 s)."""
    trace, servers = prepared.trace, prepared.servers
    samples = [trace.one_way_us(servers[producer], servers[REPORTING], t)
               for t in range(prepared.start, prepared.end, 10_000_000)]
    return float(np.median([s for s in samples if s is not None])) / 1000.0


def quantiles(latencies: list[float]) -> tuple[float, float]:
    return float(np.quantile(latencies, 0.5)), float(np.quantile(latencies, 0.99))


def compare(producers: tuple[str, ...], duration_s: int) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        wall = time.perf_counter()
        runs = {sealed: simulate(Path(tmp), producers, sealed, duration_s) for sealed in (True, False)}
        wall = time.perf_counter() - wall
    prepared = runs[True][2]
    distance = {p: one_way_ms(prepared, p) for p in producers}
    middle = float(np.median(list(distance.values())))
    near = {p for p in producers if distance[p] < middle}
    identical = Counter(runs[True][0]) == Counter(runs[False][0])
    print(f"\n{len(producers)} producers, {duration_s} s of the Seattle trace, reporting server {REPORTING} "
          f"({wall:.0f} s wall for both runs)")
    print("  one-way ms: " + ", ".join(f"{p} {distance[p]:.0f}{'*' if p in near else ''}" for p in producers)
          + "   (* nearer keys)")
    print(f"  {'keys':8} {'coordination':22} {'outputs':>8} {'p50 ms':>9} {'p99 ms':>9}")
    figures = {}
    for group, members in (("nearer", near), ("farther", set(producers) - near), ("all", set(producers))):
        for sealed in (True, False):
            records, arrivals, _ = runs[sealed]
            latencies = [(a - r[0]) / 1000.0 for r, a in zip(records, arrivals) if r[1] in members]
            p50, p99 = quantiles(latencies)
            figures[group, sealed] = (p50, p99)
            print(f"  {group:8} {'seal per key' if sealed else 'whole-stream punct.':22} {len(latencies):8d} "
                  f"{p50:9.1f} {p99:9.1f}")
        (s50, s99), (u50, u99) = figures[group, True], figures[group, False]
        print(f"  {group:8} {'ratio punct./seal':22} {'':8} {u50 / s50:8.2f}x {u99 / s99:8.2f}x")
    print(f"  outputs identical with and without seals: {'yes' if identical else 'NO'} "
          f"({len(runs[True][0])} records; both equal the one-copy replay reference)")
    return identical


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=int, default=600)
    parser.add_argument("--producers", type=int, nargs="+", default=[5, 10], choices=[5, 10])
    args = parser.parse_args()
    ok = True
    for n in args.producers:
        ok &= compare(PRODUCERS_5 if n == 5 else PRODUCERS_10, args.duration_s)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
