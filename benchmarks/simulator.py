"""Simulator speed: message hops per second and wall time of sim-fig1 over the Seattle trace.

Two figures:
1. the network layer alone (``simulator.network.Network``: FIFO links, trace-delay cache, one SimPy
   callback per link batch) moving items between 30 servers of the Seattle trace — the simulator's
   own per-hop overhead;
2. end to end: ``examples/sim-fig1.toml`` at kmax = 1..5 over the whole shipped trace (or
   ``--duration-s``), where the node cores (dedup, operators, acks) do the work.  ``--trace PATH``
   runs the same scenario on another trace (e.g. a 30-day synthetic one from ``replicast trace
   synth``); the last columns extrapolate the measured rate to 30 simulated days.

3. ``--items``: link items (everything one node sends to one node at once) and messages per
   simulated second, by message kind, for sim-fig1 at each kmax — deterministic counts, not times,
   so two versions of the node core compare exactly (default: the scenario's first 1800 s of the
   Seattle trace; ``--duration-s`` and ``--trace`` as above).

Each line also gives the run's CPU time (process time: what the run itself used; on the shared
2-core machine wall time also counts waiting for a core) and the load average after it.

Run: python3 benchmarks/simulator.py [--duration-s S] [--kmax 1 2 3 4 5] [--hops N] [--trace PATH]
     [--no-network] [--items]
e.g. the 30-day case, measured over one simulated day:
     replicast trace synth --nodes 30 --duration 30d --out /tmp/synth30-30d
     python3 benchmarks/simulator.py --no-network --trace /tmp/synth30-30d --duration-s 86400 --kmax 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# simulator package (as in benchmarks/traces.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


from simulator.network import LinkEnvironment, Network  # noqa: E402
from simulator.run import Prepared, run  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from traces.store import TraceStore  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "sim-fig1.toml"


def network_hops(n: int) -> float:
    """Hops/s of the network layer: 30 servers, each delivery triggers the next send on another link."""
    trace = TraceStore.open("seattle")
    servers = {name: i for i, name in enumerate(trace.nodes[:30])}
    names = list(servers)
    position = {name: i for i, name in enumerate(names)}
    env = LinkEnvironment()
    count = 0

    def deliver(dst: str, src: str, items: list) -> None:
        nonlocal count
        count += 1
        if count < n:
            nxt = names[(position[dst] * 7 + count) % len(names)]
            net.send(dst, nxt if nxt != dst else src, items, env.now)

    net = Network(env, trace, servers, deliver)
    trace.frame(0)                              # the first chunk's file read is not a hop
    for i, name in enumerate(names):            # 30 messages circulate concurrently
        net.send(name, names[(i + 1) % 30], ["m"], 0)
    start = time.perf_counter()
    env.run()
    return net.hops / (time.perf_counter() - start)


def link_items(prepared: Prepared, kmax: list[int]) -> None:
    """Print link items and messages per simulated second, by message kind, for each kmax."""
    from collections import Counter

    import simulator.run as run_module
    from simulator.recorder import Recorder

    kinds: Counter = Counter()

    class Counting(Recorder):
        def sent(self, src, dst, messages, now, delay):
            for message in messages:
                name = type(message).__name__
                kinds[name if name != "Batch" or message.records else "Batch (punctuation only)"] += 1
            super().sent(src, dst, messages, now, delay)

    span = (prepared.end - prepared.start) / 1e6
    names = ["Batch", "Batch (punctuation only)", "Ack", "Heartbeat"]
    print(f"link items and messages per simulated second, sim-fig1, {span:.0f} simulated s of trace "
          f"{prepared.scenario.trace} (deterministic counts):")
    labels = ["batches/s", "punct-only/s", "acks/s", "heartbeats/s"]
    print(f"{'kmax':>4} {'link items/s':>12} {'messages/s':>10}  " + "  ".join(f"{n:>12}" for n in labels))
    plain, run_module.Recorder = run_module.Recorder, Counting
    try:
        for k in kmax:
            kinds.clear()
            s = run(prepared, k).summary
            other = sum(v for n, v in kinds.items() if n not in names)
            print(f"{k:>4} {s['hops'] / span:>12.1f} {s['messages'] / span:>10.1f}  "
                  + "  ".join(f"{kinds[n] / span:>12.1f}" for n in names)
                  + (f"  other {other / span:.1f}/s" if other else ""), flush=True)
    finally:
        run_module.Recorder = plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, help="simulated seconds (default: the whole Seattle trace)")
    parser.add_argument("--kmax", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--hops", type=int, default=1_000_000, help="hops for the network-layer figure")
    parser.add_argument("--trace", help="trace name or directory instead of the scenario's (seattle)")
    parser.add_argument("--no-network", action="store_true", help="skip the network-layer figure")
    parser.add_argument("--items", action="store_true",
                        help="only count link items and messages per simulated second (default 1800 s)")
    args = parser.parse_args()
    if args.items:
        scenario = load_scenario(SCENARIO)
        scenario.duration_s = args.duration_s or scenario.duration_s
        scenario.trace = args.trace or scenario.trace
        link_items(Prepared(scenario), args.kmax)
        return
    print(f"load average at start: {_load()}")
    if not args.no_network:
        rates = [network_hops(args.hops) for _ in range(3)]    # best of 3: the machine is shared
        print(f"network layer alone: {max(rates) / 1e6:.2f} M hops/s, best of 3 "
              f"({', '.join(f'{r / 1e6:.2f}' for r in rates)}; {args.hops} hops, 30 servers)")
    scenario = load_scenario(SCENARIO)
    scenario.duration_s = args.duration_s or None
    if args.trace:
        scenario.trace = args.trace
    prepared = Prepared(scenario)
    span = (prepared.end - prepared.start) / 1e6
    print(f"sim-fig1 end to end, {span:.0f} simulated s ({span / 3600:.2f} h) of trace {scenario.trace} "
          f"({len(prepared.servers)} servers):")
    print(f"{'kmax':>4} {'wall s':>8} {'cpu s':>8} {'hops':>10} {'messages':>10} {'hops/s':>9} "
          f"{'sim s/wall s':>12} {'sim s/cpu s':>11} {'30 d extrapolated (wall, cpu)':>30}  load")
    for k in args.kmax:
        cpu = time.process_time()
        s = run(prepared, k).summary
        cpu = time.process_time() - cpu
        rate, cpu_rate = s["simulated_s"] / s["wall_s"], s["simulated_s"] / cpu
        month = f"{30 * 86400 / rate / 3600:.1f} h, {30 * 86400 / cpu_rate / 3600:.1f} h"
        print(f"{k:>4} {s['wall_s']:>8.1f} {cpu:>8.1f} {s['hops']:>10} {s['messages']:>10} {s['hops_per_s']:>9} "
              f"{rate:>12.0f} {cpu_rate:>11.0f} {month:>30}  {_load()}", flush=True)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
