"""Simulator speed: message hops per second and wall time of sim-fig1 over the Seattle trace.

Two figures:
1. the network layer alone (``simulator.network.Network``: FIFO links, trace-delay cache, one SimPy
   callback per link batch) moving items between 30 servers of the Seattle trace — the simulator's
   own per-hop overhead;
2. end to end: ``examples/sim-fig1.toml`` at kmax = 1..5 over the whole shipped trace (or
   ``--duration-s``), where the node cores (dedup, operators, acks) do the work.

Run: python3 benchmarks/simulator.py [--duration-s S] [--kmax 1 2 3 4 5] [--hops N]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, help="simulated seconds (default: the whole Seattle trace)")
    parser.add_argument("--kmax", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--hops", type=int, default=1_000_000, help="hops for the network-layer figure")
    args = parser.parse_args()
    rates = [network_hops(args.hops) for _ in range(3)]    # best of 3: the machine is shared
    print(f"network layer alone: {max(rates) / 1e6:.2f} M hops/s, best of 3 "
          f"({', '.join(f'{r / 1e6:.2f}' for r in rates)}; {args.hops} hops, 30 servers)")
    scenario = load_scenario(SCENARIO)
    scenario.duration_s = args.duration_s or None
    prepared = Prepared(scenario)
    span = (prepared.end - prepared.start) / 1e6
    print(f"sim-fig1 end to end, {span:.0f} simulated s ({span / 3600:.2f} h) of trace {scenario.trace}:")
    print(f"{'kmax':>4} {'wall s':>8} {'hops':>10} {'messages':>10} {'hops/s':>9} {'sim s / wall s':>15}")
    for k in args.kmax:
        s = run(prepared, k).summary
        print(f"{k:>4} {s['wall_s']:>8.1f} {s['hops']:>10} {s['messages']:>10} {s['hops_per_s']:>9} "
              f"{s['simulated_s'] / s['wall_s']:>15.0f}")


if __name__ == "__main__":
    main()
