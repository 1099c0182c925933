"""``replicast place``: deploy a query's replicas over a trace's servers and show the result.

The non-replicated baseline (kmax = 1) is the spring-relaxation placement, refined; the chosen
strategy then brings every operator to ``kmax`` replicas starting from it (``optimal`` solves the
whole kmax problem exactly instead).  Prints the deployment with its network cost and bandwidth as
ratios against the baseline (the paper's Fig. 4 labels), writes ``deployment.json`` and draws
``deployment.png``.

This module is the command's driver: it reads files, times the steps and makes the
``random.Random`` the pure placement modules are handed; it lives here, beside the other drivers,
so that ``placement/`` holds only pure modules (tests/test_purity.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.place")
STRATEGIES = ("min-cost", "random", "optimal")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "place", help="deploy a query's replicas over a trace's servers (Alg. 5, random, or the exact optimum)",
        description="Place QUERY's replicas on servers of a latency trace: entry points and applications are "
                    "pinned to seeded random servers (or --pin), operators start from a spring-relaxation "
                    "placement over Vivaldi coordinates (kmax = 1) and are replicated up to kmax by the "
                    "strategy.  Prints the deployment, its network cost (rate x latency) and bandwidth as "
                    "ratios against kmax = 1, and writes deployment.json and deployment.png "
                    "(see docs/placement.md).")
    parser.add_argument("query", type=Path, help="query file (TOML, docs/queries.md)")
    parser.add_argument("--trace", required=True, metavar="NAME|DIR", help="trace name (seattle, ...) or directory")
    parser.add_argument("--servers", type=int, metavar="N", help="use N of the trace's nodes, a seeded sample "
                        "(default: all)")
    parser.add_argument("--kmax", type=int, default=3, metavar="K", help="replicas of every operator (default 3)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="min-cost",
                        help="min-cost: Alg. 5 then refinement (default); random: random candidate servers; "
                             "optimal: integer program (HiGHS), for small instances")
    parser.add_argument("--no-refine", action="store_true", help="min-cost: the paper's Alg. 5 alone, no refinement")
    parser.add_argument("--alpha", type=float, default=0.9, help="load(s) + load(o) < alpha x capacity(s) (default 0.9)")
    parser.add_argument("--dmin-ms", type=float, default=30.0, metavar="MS",
                        help="minimum one-way latency between peer replicas (default 30; the paper: 30-70)")
    parser.add_argument("--source-rate", type=float, default=1.0, metavar="R", help="records/s of every source "
                        "stream (default 1)")
    parser.add_argument("--rates", type=Path, metavar="FILE", help="TOML table name = records/s overriding the "
                        "estimated rate of streams and operators")
    parser.add_argument("--cpu-us", type=float, default=10.0, metavar="US", help="CPU per record, for loads (default 10)")
    parser.add_argument("--capacity", type=float, default=1.0, help="CPU cores per server (default 1)")
    parser.add_argument("--pin", action="append", default=[], metavar="NAME=SERVER",
                        help="put stream NAME's entry point or application NAME on SERVER (repeatable)")
    parser.add_argument("--frames", type=int, default=2000, metavar="F", help="use at most F evenly spaced frames "
                        "of the trace (default 2000)")
    parser.add_argument("--rounds", type=int, default=3000, help="Vivaldi rounds (default 3000)")
    parser.add_argument("--time-limit", type=float, default=120.0, metavar="S", help="optimal: solver time limit")
    parser.add_argument("--seed", type=int, default=0, help="seed for server sample, pins, Vivaldi, random (default 0)")
    parser.add_argument("--out", type=Path, help="output directory (default: out/place/<query name>)")
    parser.set_defaults(run=run, extra="all")


def run(args: argparse.Namespace) -> int:
    from replicast.engine.query_file import load_query
    from replicast.placement import cost
    from replicast.placement.constraints import DeployConfig
    from replicast.placement.deployment import min_cost, random_deployment
    from replicast.engine.place_draw import draw
    from replicast.placement.from_trace import network_from_frames
    from replicast.placement.optimal import optimal
    from replicast.placement.workload import from_query
    from replicast.traces.plot import sampled_frames
    from replicast.traces.store import TraceStore

    if args.kmax < 1 or (args.servers is not None and args.servers < 2) or args.frames < 1 or args.rounds < 1:
        raise ReplicastError("--kmax, --frames and --rounds must be >= 1 and --servers >= 2")
    config = DeployConfig(kmax=args.kmax, alpha=args.alpha, dmin_ms=args.dmin_ms)
    query = load_query(args.query)
    store = TraceStore.open(args.trace)
    rng = random.Random(args.seed)
    chosen = sorted(rng.sample(range(store.n_nodes), min(args.servers or store.n_nodes, store.n_nodes)))
    names = [store.nodes[i] for i in chosen]
    frames = sampled_frames(store, args.frames)[:, chosen][:, :, chosen]
    started = time.perf_counter()
    network, error = network_from_frames(names, frames, rng, rounds=args.rounds, capacity=args.capacity)
    fitted = time.perf_counter() - started
    workload = from_query(query, _pins(query, names, args.pin, rng), source_rate=args.source_rate,
                          rates=_rates(args.rates), cpu_us=args.cpu_us)
    started = time.perf_counter()
    baseline = min_cost(network, workload, DeployConfig(kmax=1, alpha=args.alpha, dmin_ms=args.dmin_ms))
    if args.strategy == "min-cost":
        deployment = min_cost(network, workload, config, start=baseline, refined=not args.no_refine)
    elif args.strategy == "random":
        deployment = random_deployment(network, workload, config, rng, start=baseline)
    else:
        if network.n > 30:
            log.warning("optimal over %d servers may take long (limit %g s)", network.n, args.time_limit)
        deployment = optimal(network, workload, config, time_limit_s=args.time_limit).deployment
    placed = time.perf_counter() - started
    summary = _summary(args, store, network, workload, deployment, baseline, error, cost)
    summary["seconds"] = {"coordinates": round(fitted, 3), "placement": round(placed, 3)}
    out = args.out or Path("out") / "place" / args.query.stem
    out.mkdir(parents=True, exist_ok=True)
    (out / "deployment.json").write_text(json.dumps(summary, indent=2) + "\n")
    ratios = summary["ratios"]
    title = (f"{args.query.name} on {store.meta.name}: {args.strategy}, kmax = {args.kmax} "
             f"({ratios['bandwidth']:.2f}x bandwidth, {ratios['cost']:.2f}x cost)")
    draw(deployment, network, workload, out / "deployment.png", title=title)
    _print(summary, out)
    return 0


def _pins(query, names: list[str], pins: list[str], rng: random.Random) -> dict[str, int]:
    pinned: dict[str, int] = {}
    for text in pins:
        name, _, server = text.partition("=")
        if name not in query.streams and name not in query.applications:
            raise ReplicastError(f"--pin {text!r}: {name!r} is not a stream or application of {query.source}")
        if server not in names:
            raise ReplicastError(f"--pin {text!r}: server {server!r} is not among the {len(names)} servers used")
        pinned[name] = names.index(server)
    for name in (*query.streams, *query.applications):
        pinned.setdefault(name, rng.randrange(len(names)))
    return pinned


def _rates(path: Path | None) -> dict[str, float]:
    if path is None:
        return {}
    from replicast.engine.toml_file import read_toml

    return dict(read_toml(path))


def _summary(args, store, network, workload, deployment, baseline, error, cost) -> dict[str, Any]:
    hosts = deployment.hosts
    total, base_cost = cost.total_cost(deployment, network, workload), cost.total_cost(baseline, network, workload)
    band, base_band = cost.bandwidth(deployment, workload), cost.bandwidth(baseline, workload)
    return {
        "query": str(args.query), "trace": store.meta.name, "strategy": args.strategy, "kmax": args.kmax,
        "refined": args.strategy == "min-cost" and not args.no_refine, "seed": args.seed,
        "alpha": args.alpha, "dmin_ms": args.dmin_ms, "servers": list(network.servers),
        "coordinates": {"median_relative_error": round(error, 4), "frames": int(min(args.frames, store.n_frames))},
        "placement": {name: deployment.placement(network.servers)[name] for name in workload.nodes()},
        "stream_replicas": [
            {"source": str(s.source), "target": str(s.target), "port": s.port,
             "from": network.servers[hosts[s.source]], "to": network.servers[hosts[s.target]],
             "rate": workload.rate[s.source.name], "latency_ms": round(float(network.latency_ms[hosts[s.source], hosts[s.target]]), 3),
             "cost": round(cost.stream_cost(s, deployment, network, workload), 3)}
            for s in sorted(deployment.streams, key=lambda s: (s.source, s.target, s.port))],
        "cost": round(total, 3), "bandwidth": round(band, 3),
        "baseline": {"cost": round(base_cost, 3), "bandwidth": round(base_band, 3),
                     "placement": baseline.placement(network.servers)},
        "ratios": {"cost": round(total / base_cost, 3) if base_cost else None,
                   "bandwidth": round(band / base_band, 3) if base_band else None},
    }


def _print(summary: dict[str, Any], out: Path) -> None:
    width = max(len(n) for n in summary["placement"]) + 1
    print(f"{summary['strategy']} deployment, kmax = {summary['kmax']}, {len(summary['servers'])} servers of "
          f"{summary['trace']} (coordinates: median relative RTT error {summary['coordinates']['median_relative_error']:.1%})")
    for name, servers in summary["placement"].items():
        print(f"  {name:<{width}}  {', '.join(servers)}")
    r = summary["ratios"]
    print(f"network cost {summary['cost']:.1f} (records/s x ms), {r['cost']:.2f}x kmax = 1; "
          f"bandwidth {summary['bandwidth']:.1f} records/s, {r['bandwidth']:.2f}x kmax = 1")
    print(f"wrote {out / 'deployment.json'} and {out / 'deployment.png'}")
