"""``replicast explain``: Blazes' coordination analysis of a query, in words and in a picture.

Prints each source's and operator's annotation, every edge's label with its derivation (Fig. 9
and 10 of the Blazes paper, ``Rep`` where a node has more than one replica), each node's
coordination and why, the operators that would let replicas disagree with their cheapest remedy,
and — with ``--trace`` — what each coordination costs in waiting on the servers a min-cost
deployment picks (:mod:`operators.coordination_cost` states the model).  Draws the labelled DAG to
``explain.png`` (matplotlib, the ``plot`` extra; the text needs none).  ``--verify N`` replays the
query under N seeds to check the verdict (:mod:`engine.explain_check`).

The analysis is pure (:mod:`operators.coordination`); this module reads files, builds the
deployment (as ``replicast place`` does) and draws.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
from pathlib import Path
from typing import Any

from replicast.operators.errors import ReplicastError

log = logging.getLogger("replicast.explain")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explain", help="which operators need coordination for replicas to agree, which one, and what it costs",
        description="Label every stream of QUERY with Blazes' coordination analysis (docs/explain.md): "
                    "annotations (CR, CW, OR_gate, OW_gate), stream labels (Seal_key, Async, Run, Inst, "
                    "Diverge) with their derivation, each operator's coordination (none, seal at "
                    "punctuation, sort at punctuation, seal per key, entry stamping) and why, the cheapest "
                    "remedy where replicas would disagree, and with --trace the waiting each coordination "
                    "costs.  Draws the labelled DAG to OUT/explain.png.")
    parser.add_argument("query", type=Path, help="query file (TOML, docs/queries.md)")
    parser.add_argument("--kmax", type=int, default=3, metavar="K",
                        help="replicas of every entry point and operator (default 3; K > 1 is Blazes' Rep)")
    parser.add_argument("--entry-mode", choices=("source", "entry"), default="source",
                        help="who stamps ts: the sources (default) or the entry points (docs/node.md)")
    parser.add_argument("--trace", metavar="NAME|DIR", help="estimate each coordination's waiting on this "
                        "latency trace, over a min-cost deployment (as replicast place makes it)")
    parser.add_argument("--servers", type=int, metavar="N", help="--trace: use N of its nodes, a seeded sample")
    parser.add_argument("--frames", type=int, default=500, metavar="F", help="--trace: frames used (default 500)")
    parser.add_argument("--rounds", type=int, default=1000, help="--trace: Vivaldi rounds (default 1000)")
    parser.add_argument("--punctuation-ms", type=float, default=1000.0, metavar="MS",
                        help="punctuation interval the estimate reports (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed for server sample, pins and Vivaldi (default 0)")
    parser.add_argument("--verify", type=int, default=0, metavar="SEEDS",
                        help="also replay the query under SEEDS seeds with random delays and crashes and "
                             "check the verdict (docs/explain.md)")
    parser.add_argument("--out", type=Path, help="output directory (default: out/explain/<query name>)")
    parser.add_argument("--no-plot", action="store_true", help="text only")
    parser.set_defaults(run=run, extra="plot")


def run(args: argparse.Namespace) -> int:
    from replicast.operators.coordination import analyse
    from replicast.engine.query_file import load_query

    if args.kmax < 1 or args.verify < 0 or args.punctuation_ms <= 0:
        raise ReplicastError("--kmax must be >= 1, --verify >= 0 and --punctuation-ms > 0")
    query = load_query(args.query)
    modes = {s: args.entry_mode for s in query.streams}
    analysis = analyse(query, args.kmax, modes)
    costs = _costs(args, analysis) if args.trace else None
    print(render(analysis, costs, args.punctuation_ms))
    out = args.out or Path("out") / "explain" / args.query.stem
    out.mkdir(parents=True, exist_ok=True)
    (out / "explain.json").write_text(json.dumps(as_json(analysis, costs), indent=2) + "\n")
    written = [out / "explain.json"]
    if not args.no_plot:
        from replicast.engine.explain_draw import draw
        from replicast.engine.extras import missing_extra

        try:
            written.append(draw(analysis, out / "explain.png", title=f"{args.query.name}, k = {args.kmax}"))
        except ModuleNotFoundError as error:       # the text needs no extra; the picture needs 'plot'
            line = missing_extra(error, "plot")
            if line is None:
                raise
            log.warning("no picture: %s", line)
    print(f"wrote {', '.join(map(str, written))}")
    if args.verify:
        return _verify(query, args)
    return 0


def _verify(query, args: argparse.Namespace) -> int:
    from replicast.engine.explain_check import check_verdict

    check = check_verdict(query, seeds=args.verify, replicas=max(args.kmax, 2))
    said = "agree" if check.predicted_agreement else "disagree"
    found = "no divergence" if check.diverged_at is None else f"a divergence at seed {check.diverged_at}: {check.problem}"
    print(f"verify: explain says replicas {said}; replay with k = {max(args.kmax, 2)}, random delays and crashes "
          f"found {found} in {check.seeds_run} seed(s) -> {'CONFIRMED' if check.confirmed else 'REFUTED'}")
    return 0 if check.confirmed else 1


# -- text ----------------------------------------------------------------------------------------

def render(analysis, costs: dict[str, Any] | None, punctuation_ms: float) -> str:
    """The report ``replicast explain`` prints."""
    from replicast.operators.blazes import key_text
    from replicast.operators.coordination import Coordination
    from replicast.operators.key_seals import key_sealing

    query = analysis.query
    lines = [f"{query.source}: coordination analysis (Blazes); docs/explain.md explains the notation", ""]
    width = max(map(len, analysis.nodes)) + 1
    lines.append("nodes")
    for report in analysis.nodes.values():
        annotation = str(report.annotation) if report.annotation else "source"
        lines.append(f"  {report.name:<{width}} {report.kind:<11} k={report.replicas}  {annotation:<22} "
                     f"{report.coordination.value:<22} -> {report.output}")
        lines.append(f"  {'':<{width}}   why: {report.why}")
        sealing = key_sealing(query, report.name) if report.kind == "operator" else None
        if sealing is not None and sealing.port_orders:
            ports = ", ".join(f"{query.inputs_of(report.name)[i]}" for i, o in enumerate(sealing.port_orders)
                              if o is not None)
            lines.append(f"  {'':<{width}}   seals per key of {ports} (sealed on its join fields) prune the other "
                         f"side's buffer per key; its outputs wait for nothing either way")
        if report.key_seal is not None and report.holds_output and report.coordination is not Coordination.SEAL_KEY:
            lines.append(f"  {'':<{width}}   seal per key {key_text(report.key_seal)} would also do: each partition "
                         f"released at its own producers' seal, not the slowest producer's (the engine seals per "
                         f"key built-in aggregates, and user operators that declare key_seals = \"close\")")
    lines += ["", "edges (label of the stream, Rep where its producer is replicated)"]
    for edge in analysis.edges:
        rep = ", Rep" if edge.rep else ""
        lines.append(f"  {edge.source} -> {edge.target}[{edge.port}]: {edge.label}{rep}")
    lines += ["", "derivations (input label, annotation, rule, derived label; (p): preserved)"]
    for report in analysis.nodes.values():
        for step in report.steps:
            lines.append(f"  {report.name}: {step}")
    lines.append("")
    problems = [r for r in analysis.nodes.values() if r.problem]
    if not problems:
        lines.append("verdict: every application receives the same records on every replica and run "
                     "(labels Seal/Async only)")
    else:
        lines.append("verdict: replicas may disagree")
        for report in problems:
            lines.append(f"  {report.problem}")
            lines.append(f"    remedy: {report.remedy}")
    finals = ", ".join(f"{a} {analysis.nodes[a].output}" for a in query.applications)
    lines.append(f"applications: {finals}")
    if costs is not None:
        lines += ["", *_render_costs(costs, punctuation_ms)]
    return "\n".join(lines)


def _render_costs(costs: dict[str, Any], punctuation_ms: float) -> list[str]:
    from replicast.operators.coordination import Coordination
    lines = [f"waiting on {costs['trace']} ({len(costs['servers'])} servers, min-cost deployment, kmax = "
             f"{costs['kmax']}; one-way delays, first copy wins, no CPU time), waits upstream included, plus up to one "
             f"punctuation interval ({punctuation_ms:g} ms) wherever output waits for a punctuation:"]
    if not costs["waits"] and not costs["stamping"]:
        lines.append("  no coordination holds output back: nothing waits")
    for wait in costs["waits"]:
        if wait["coordination"] == Coordination.SEAL_KEY.value:
            lines.append(f"  {wait['name']} (seal per key): each key waits for its own producer's seal; whole-stream "
                         f"punctuations would hold it for {wait['slowest']}'s, the slowest of its sources")
            for source, ms in wait["extra_ms"].items():
                lines.append(f"    records of {source}: leave +{wait['keyed_ms'][source]:.1f} ms later than their own "
                             f"fastest path allows (whole-stream punctuations: +{ms:.1f} ms)")
            continue
        lines.append(f"  {wait['name']} ({wait['coordination']}): waits for the punctuation of {wait['slowest']}, "
                     f"the slowest of its sources")
        for source, ms in wait["extra_ms"].items():
            keyed = "" if wait["keyed_ms"] is None else f"; sealed per key: +{wait['keyed_ms'][source]:.1f} ms"
            lines.append(f"    records of {source}: leave +{ms:.1f} ms later than their own fastest path allows{keyed}")
    for stream, ms in costs["stamping"].items():
        peers = len(costs["placement"][stream]) - 1
        lines.append(f"  {stream} (entry stamping): +{ms:.1f} ms, a round trip to the farthest entry replica"
                     + ("" if peers else " (placement pins one entry replica per stream: no peer to wait for)"))
    return lines


def as_json(analysis, costs: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "query": analysis.query.source, "agrees": analysis.agrees,
        "nodes": {r.name: {"kind": r.kind, "replicas": r.replicas,
                           "annotation": str(r.annotation) if r.annotation else None,
                           "coordination": r.coordination.value, "why": r.why, "output": str(r.output),
                           "steps": r.steps, "problem": r.problem, "remedy": r.remedy,
                           "seal_per_key": sorted(r.key_seal) if r.key_seal else None}
                  for r in analysis.nodes.values()},
        "edges": [{"from": e.source, "to": e.target, "port": e.port, "label": str(e.label), "rep": e.rep}
                  for e in analysis.edges],
        "costs": costs,
    }


# -- the trace estimate ------------------------------------------------------------------------------

def _costs(args: argparse.Namespace, analysis) -> dict[str, Any]:
    from replicast.operators.coordination_cost import first_arrivals, stamping_ms, waits
    from replicast.placement.constraints import DeployConfig
    from replicast.placement.deployment import min_cost
    from replicast.placement.from_trace import network_from_frames
    from replicast.placement.workload import from_query
    from replicast.traces.plot import sampled_frames
    from replicast.traces.store import TraceStore

    if (args.servers is not None and args.servers < 2) or args.frames < 1 or args.rounds < 1:
        raise ReplicastError("--servers must be >= 2, --frames and --rounds >= 1")
    query = analysis.query
    store = TraceStore.open(args.trace)
    rng = random.Random(args.seed)
    chosen = sorted(rng.sample(range(store.n_nodes), min(args.servers or store.n_nodes, store.n_nodes)))
    names = [store.nodes[i] for i in chosen]
    frames = sampled_frames(store, args.frames)[:, chosen][:, :, chosen]
    network, _ = network_from_frames(names, frames, rng, rounds=args.rounds)
    pins = {name: rng.randrange(len(names)) for name in (*query.streams, *query.applications)}
    workload = from_query(query, pins)
    deployment = min_cost(network, workload, DeployConfig(kmax=args.kmax))
    latency = network.latency_ms
    arrivals = first_arrivals(analysis, deployment.hosts, latency, deployment.streams)
    entry = [s for s in query.streams if analysis.nodes[s].coordination.value == "entry stamping"]
    return {
        "trace": store.meta.name, "servers": list(network.servers), "kmax": args.kmax,
        "placement": deployment.placement(network.servers),
        "waits": [{"name": w.name, "coordination": w.coordination.value, "slowest": w.slowest,
                   "extra_ms": dict(w.extra_ms), "keyed_ms": None if w.keyed_ms is None else dict(w.keyed_ms)}
                  for w in waits(analysis, arrivals)],
        "stamping": stamping_ms(analysis, deployment.hosts, latency, entry),
    }
