"""``replicast simulate``: run a scenario at each kmax and write deliveries, bandwidth, summary and plot."""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

from operators.errors import ReplicastError

log = logging.getLogger("replicast.simulate")
DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "sim-fig1.toml"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate a replicated query over a latency trace (SimPy drives the real node cores)",
        description="Run SCENARIO (TOML, see docs/simulator.md) once per kmax: the node cores of every server run "
                    "over a simulated wide-area network whose delays come from the trace.  Writes, per run, "
                    "deliveries.parquet, bandwidth.parquet and summary.json, plus summary.json and latency.png "
                    "(P(latency > x), like the paper's Fig. 4) for all runs.  Without SCENARIO: "
                    "examples/sim-fig1.toml on the shipped Seattle trace.")
    parser.add_argument("scenario", nargs="?", type=Path, default=None, help="scenario file (default: sim-fig1)")
    parser.add_argument("--kmax", type=int, action="append", metavar="K",
                        help="degree of replication to run (repeatable; default: the scenario's list)")
    parser.add_argument("--out", type=Path, help="output directory (default: out/simulate/<scenario name>)")
    parser.add_argument("--duration-s", type=float, metavar="S", help="simulate S seconds of the trace "
                        "(default: the scenario's duration_s, else the whole trace)")
    parser.add_argument("--check", action="store_true",
                        help="also compute the non-replicated replay reference of the same input and exit 1 "
                             "unless every run delivered exactly it")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.replay import replay
    from experiments.latency import plot_ccdf
    from simulator.run import Prepared, run as simulate
    from simulator.scenario import load_scenario

    path = args.scenario or DEFAULT_SCENARIO
    if args.scenario is None and not path.is_file():
        raise ReplicastError(f"the default scenario {path} is missing; pass a scenario file (docs/simulator.md)")
    scenario = load_scenario(path)
    if args.duration_s is not None:
        if args.duration_s <= 0:
            raise ReplicastError(f"--duration-s must be positive, got {args.duration_s}")
        scenario.duration_s = args.duration_s
    if args.kmax:
        bad = [k for k in args.kmax if k < 1]
        if bad:
            raise ReplicastError(f"--kmax must be at least 1, got {bad[0]}")
        scenario.kmax = tuple(args.kmax)
    if args.check and scenario.entry_mode != "source":
        raise ReplicastError("--check needs source-stamped streams (entry-stamped timestamps depend on the run)")
    out = args.out or Path("out") / "simulate" / scenario.name
    prepared = Prepared(scenario)
    log.info("scenario %s: %d servers of trace %s, %.0f s simulated, kmax %s", scenario.name,
             len(prepared.servers), scenario.trace, (prepared.end - prepared.start) / 1e6,
             ", ".join(map(str, scenario.kmax)))
    runs, curves, failures = [], [], 0
    for k in scenario.kmax:
        result = simulate(prepared, k, keep_records=args.check, progress=not args.no_progress)
        result.recorder.write(out / f"k{k}")
        if args.check:
            reference = replay(prepared.query, result.inputs, replicas=1,
                               punctuation_us=round(scenario.punctuation_ms * 1000))
            problems = [app for app, records in reference.outputs.items()
                        if Counter(records) != Counter(result.recorder.outputs[app])]
            result.summary["equals_reference"] = not problems
            failures += bool(problems)
            print(f"kmax={k}: " + (f"MISMATCH in {', '.join(problems)}" if problems else
                                   f"OK, {result.summary['delivered']} records equal the replay reference"))
        (out / f"k{k}" / "summary.json").write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8")
        runs.append(result.summary)
        curves.append((k, result.recorder.deliveries().column("latency_us").to_numpy()))
    base = min(runs, key=lambda r: r["kmax"])
    for summary in runs:
        summary["bandwidth_ratio"] = _ratio(summary["records_sent"], base["records_sent"])
        summary["cost_ratio"] = _ratio(summary["network_cost"], base["network_cost"])
    (out / "summary.json").write_text(json.dumps({"scenario": str(path), "runs": runs}, indent=2) + "\n",
                                      encoding="utf-8")
    labels = [(f"kmax = {s['kmax']} ({s['bandwidth_ratio']:.2f}x, {s['cost_ratio']:.2f}x)", latency)
              for s, (_, latency) in zip(runs, curves)]
    png = plot_ccdf(labels, out / "latency.png", f"{scenario.name}: {len(prepared.servers)} servers, trace "
                    f"{scenario.trace}, {scenario.deployment} deployment")
    for s in runs:
        q = s["latency_ms"]
        print(f"kmax={s['kmax']}: {s['delivered']} records, latency p50 {q['p50']} ms, p99 {q['p99']} ms, "
              f"max {q['max']} ms; bandwidth {s['bandwidth_ratio']:.2f}x, cost {s['cost_ratio']:.2f}x; "
              f"{s['wall_s']:.1f} s wall")
    print(f"wrote {out}/ (deliveries.parquet, bandwidth.parquet, summary.json per kmax) and {png}")
    return 1 if failures else 0


def _ratio(value: float, base: float) -> float:
    return round(value / base, 3) if base else float("nan")
