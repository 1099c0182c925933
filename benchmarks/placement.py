"""Placement: time to deploy and to garbage-collect at scale, and Alg. 5's distance from the optimum.

    python3 benchmarks/placement.py                  # everything (a few minutes, mostly the optimum)
    python3 benchmarks/placement.py --instances 4    # fewer optimum instances

0. Coordinates: median relative RTT error of Vivaldi on the shipped Seattle trace (99 nodes, 688
   frames replayed for 3000 rounds) with Serf's constants, with the 25-sample latency filter
   ``replicast place`` uses, and fitted on the per-pair medians instead of the noisy frames.
1. Scale (targets in docs/performance.md): 100 servers x 20 operators x kmax 5 (<= 1 s) and 1,000 servers x 50
   operators x kmax 5 (<= 10 s).  Servers are a synthetic network calibrated on the shipped Seattle
   trace (``traces.synth.base_matrix``), the query a random DAG (10 sources, operators with one or two
   inputs, an application on every sink).  Timed, best of ``--repeat``: Vivaldi coordinates from the
   RTT matrix (3000 rounds), min-cost placement (relaxation + Alg. 5 + refinement), Alg. 5 alone, and
   the random baseline under the same constraints, whose time is the same-run reference the others are
   divided by (the machine is shared).
2. One GC round (<= 100 ms): Alg. 6 on the kmax-5 min-cost deployment with utilities from
   rank weights (each port credits its fastest stream 1, the next 1/2, ...): one round finds the least
   useful group among ``dependents(S)`` of every stream replica and discards it; also the time to
   collect down to half the cost.
3. Alg. 5 vs the exact optimum (``scipy.optimize.milp``, HiGHS) on ``--instances`` random subsets of
   ``--small`` Seattle servers running examples/fig1.toml, kmax 1..3, dmin 30 ms: the distribution of
   cost / optimum for relaxation (kmax 1), Alg. 5 alone and Alg. 5 + refinement (goal: median <= 1.15).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from replicast.engine.query_file import load_query  # noqa: E402
from replicast.placement.constraints import DeployConfig  # noqa: E402
from replicast.placement.coordinates import fit  # noqa: E402
from replicast.placement.cost import total_cost  # noqa: E402
from replicast.placement.deployment import min_cost, random_deployment  # noqa: E402
from replicast.placement.from_trace import network_from_frames  # noqa: E402
from replicast.placement.gc import GCConfig, collect  # noqa: E402
from replicast.placement.model import Workload, uniform_network  # noqa: E402
from replicast.placement.optimal import optimal  # noqa: E402
from replicast.placement.utility import utilities  # noqa: E402
from replicast.placement.workload import from_query  # noqa: E402


def best_of(repeat: int, action, setup=lambda: None):
    """Best wall time of ``action(setup())`` over ``repeat`` runs (``setup`` is not timed)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        argument = setup()
        start = time.perf_counter()
        result = action() if argument is None else action(argument)
        best = min(best, time.perf_counter() - start)
    return best, result


def synthetic_network(n: int, seed: int):
    from replicast.traces.calibrate import fit_store
    from replicast.traces.store import TraceStore
    from replicast.traces.synth import base_matrix

    params = fit_store(TraceStore.open("seattle"), max_frames=200)
    rtt = base_matrix(params, n, np.random.default_rng(seed))
    return rtt


def random_query(n_operators: int, n_servers: int, rng: random.Random, n_streams: int = 10) -> Workload:
    streams = tuple(f"s{i}" for i in range(n_streams))
    operators = tuple(f"op{i}" for i in range(n_operators))
    inputs, rate, load = {}, {s: rng.uniform(1, 10) for s in streams}, {s: 0.01 for s in streams}
    earlier = list(streams)
    for name in operators:
        recent = earlier[-8:]
        chosen = rng.sample(recent, rng.choice([1, 1, 2]) if len(recent) > 1 else 1)
        inputs[name] = tuple(chosen)
        rate[name] = sum(rate[i] for i in chosen) * rng.uniform(0.3, 1.0)
        load[name] = rng.uniform(0.02, 0.15)
        earlier.append(name)
    consumed = {i for ins in inputs.values() for i in ins}
    sinks = [o for o in operators if o not in consumed]
    applications = tuple(f"app{i}" for i in range(len(sinks)))
    for app, sink in zip(applications, sinks):
        inputs[app] = (sink,)
        load[app] = 0.01
    pinned = {x: rng.randrange(n_servers) for x in (*streams, *applications)}
    return Workload(streams, operators, applications, inputs, rate, load, pinned)


def rank_weights(deployment, network) -> dict:
    """Each port credits its stream replicas 1, 1/2, 1/3 ... by link latency (the fastest first)."""
    weights, groups = {}, {}
    for s in deployment.streams:
        groups.setdefault((s.target, s.port), []).append(s)
    for group in groups.values():
        group.sort(key=lambda s: network.latency_ms[deployment.hosts[s.source], deployment.hosts[s.target]])
        weights.update({s: 1.0 / rank for rank, s in enumerate(group, 1)})
    return weights


def scale(n_servers: int, n_operators: int, kmax: int, repeat: int, seed: int) -> None:
    rng = random.Random(seed)
    rtt = synthetic_network(n_servers, seed)
    fitted, coordinates = best_of(1, lambda: fit([rtt], n_servers, random.Random(seed)))
    network = uniform_network([f"n{i}" for i in range(n_servers)], rtt / 2, coordinates=coordinates)
    workload = random_query(n_operators, n_servers, rng)
    config = DeployConfig(kmax=kmax, alpha=0.9, dmin_ms=30)
    reference, _ = best_of(repeat, lambda: random_deployment(network, workload, config, random.Random(seed)))
    plain, _ = best_of(repeat, lambda: min_cost(network, workload, config, refined=False))
    full, deployment = best_of(repeat, lambda: min_cost(network, workload, config))
    u = utilities(deployment, workload, rank_weights(deployment, network))
    cost = total_cost(deployment, network, workload)
    one_round, _ = best_of(repeat, lambda copy: collect(copy, network, workload, u, GCConfig(kmin=2, theta=0.0),
                                                        max_groups=1), setup=deployment.copy)
    collected = deployment.copy()
    to_half, groups = best_of(1, lambda: collect(collected, network, workload, u, GCConfig(kmin=2, theta=cost / 2)))
    print(f"{n_servers} servers x {n_operators} operators x kmax {kmax} "
          f"({len(deployment.hosts)} replicas, {len(deployment.streams)} stream replicas):")
    print(f"  Vivaldi coordinates (3000 rounds)  {fitted:8.3f} s")
    print(f"  random deployment (reference)      {reference:8.3f} s   1.00x")
    print(f"  Alg. 5 alone (relaxation + phases) {plain:8.3f} s  {plain / reference:5.2f}x")
    print(f"  min-cost (Alg. 5 + refinement)     {full:8.3f} s  {full / reference:5.2f}x")
    print(f"  one GC round (Alg. 6, 1 group)     {one_round * 1000:8.1f} ms {one_round / reference:5.2f}x")
    print(f"  GC down to half the cost           {to_half:8.3f} s   ({len(groups)} groups, "
          f"{sum(len(g.streams) for g in groups)} stream replicas, {sum(len(g.replicas) for g in groups)} replicas)")


def coordinate_error(seed: int) -> None:
    from replicast.placement.coordinates import VivaldiConfig, relative_errors
    from replicast.placement.from_trace import TRACE_VIVALDI, median_rtt
    from replicast.traces.store import TraceStore

    store = TraceStore.open("seattle")
    frames = np.concatenate([chunk for _, chunk in store.chunks()]).astype(float)
    measured = median_rtt(frames)
    off = ~np.eye(store.n_nodes, dtype=bool)
    with np.errstate(invalid="ignore"):
        noise = np.nanpercentile((np.abs(frames - measured) / measured)[:, off], [50, 75])
    detour = np.min(measured[:, :, None] + measured[None, :, :], axis=1)       # best one-hop detour i -> k -> j
    violated = np.mean((detour < 0.8 * measured)[off & np.isfinite(measured)])
    print(f"seattle samples vs their pair's median RTT: median {noise[0]:.0%} off, p75 {noise[1]:.0%} off; "
          f"{violated:.0%} of pairs have a one-hop detour >= 20% shorter (triangle inequality violations)")
    print(f"Vivaldi on seattle ({store.n_nodes} nodes, {store.n_frames} frames, 3000 rounds), "
          f"median relative RTT error against the per-pair median RTT:")
    for label, source, config in (("frames, Serf's constants (filter 3)", frames, VivaldiConfig()),
                                  ("frames, filter 25 (replicast place)", frames, TRACE_VIVALDI),
                                  ("per-pair medians, Serf's constants", [measured], VivaldiConfig())):
        errors = [np.median(relative_errors(fit(source, store.n_nodes, random.Random(seed + r), config=config), measured))
                  for r in range(3)]
        print(f"  {label:<38} {np.median(errors):6.1%}  (seeds: {', '.join(f'{e:.1%}' for e in errors)})")


def versus_optimum(instances: int, n_small: int, time_limit: float, seed: int) -> None:
    from tqdm import tqdm

    from replicast.traces.store import TraceStore

    store = TraceStore.open("seattle")
    frames = np.concatenate([chunk for _, chunk in store.chunks()]).astype(float)
    query = load_query(ROOT / "examples" / "fig1.toml")
    ratios: dict[str, list[float]] = {}
    unproven = 0
    solve_time = []
    with tqdm(total=instances * 3, desc="optimum", unit="solve") as bar:
        for i in range(instances):
            rng = random.Random(seed + i)
            chosen = sorted(rng.sample(range(store.n_nodes), n_small))
            network, _ = network_from_frames([store.nodes[c] for c in chosen], frames[:, chosen][:, :, chosen], rng)
            workload = from_query(query, {x: rng.randrange(n_small) for x in (*query.streams, *query.applications)})
            for kmax in (1, 2, 3):
                config = DeployConfig(kmax=kmax, alpha=0.9, dmin_ms=30)
                start = time.perf_counter()
                best = optimal(network, workload, config, time_limit_s=time_limit)
                solve_time.append(time.perf_counter() - start)
                unproven += not best.proven
                for refined in (False, True):
                    ours = min_cost(network, workload, config, refined=refined)      # kmax 1: relaxation alone
                    label = f"{'relaxation' if kmax == 1 else 'Alg. 5'}{' + refinement' if refined else ''}, kmax {kmax}"
                    ratios.setdefault(label, []).append(total_cost(ours, network, workload) / best.cost)
                bar.update()
    print(f"cost / optimum on {instances} random {n_small}-server subsets of seattle, examples/fig1.toml, dmin 30 ms "
          f"(optimum: {np.median(solve_time):.1f} s median solve, {unproven} hit the {time_limit:g} s limit):")
    print(f"  {'':<32} {'min':>6} {'p25':>6} {'median':>6} {'p75':>6} {'max':>6}")
    for label, values in ratios.items():
        q = np.percentile(values, [0, 25, 50, 75, 100])
        print(f"  {label:<32} " + " ".join(f"{v:6.3f}" for v in q))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the timings (default 3)")
    parser.add_argument("--instances", type=int, default=10, help="instances for the optimum comparison (default 10)")
    parser.add_argument("--small", type=int, default=16, help="servers per optimum instance, <= 20 (default 16)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="solver limit per instance, s (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    coordinate_error(args.seed)
    scale(100, 20, 5, args.repeat, args.seed)
    scale(1000, 50, 5, args.repeat, args.seed)
    versus_optimum(args.instances, min(args.small, 20), args.time_limit, args.seed)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
