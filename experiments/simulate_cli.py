"""``replicast simulate``: run a scenario at each kmax and write deliveries, bandwidth, summary and plots.

The runs themselves are the simulator's (:mod:`simulator.runs`: each kmax in a worker process,
``--jobs``; :mod:`simulator.sweep` for segments and Spark; :mod:`simulator.timing` for the timing
tier); this command checks its options, and writes what spans the runs: ``summary.json`` with the
ratios, ``latency.png`` (Fig. 4's view, :mod:`experiments.latency`) and ``cost.png``
(:mod:`experiments.cost`).  It lives with the plots, above the simulator, so the simulator never
imports ``experiments`` (``tests/test_layering.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicast.engine.node import MODES, parse_mode
from replicast.examples import example_path
from replicast.operators.errors import ReplicastError
from replicast.simulator.runs import cpus, simulate_runs
from replicast.simulator.trace_queries import trace_queries

if TYPE_CHECKING:
    from replicast.simulator.latency import Histogram

log = logging.getLogger("replicast.simulate")
DEFAULT_SCENARIO = example_path("sim-fig1.toml")

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
    parser.add_argument("--out", type=_output, help="output directory (default: out/simulate/<scenario name>); "
                        "with --spark also a URL every worker reaches (file:///shared/out, s3://bucket/out)")
    parser.add_argument("--duration-s", type=float, metavar="S", help="simulate S seconds of the trace "
                        "(default: the scenario's duration_s, else the whole trace)")
    parser.add_argument("--check", action="store_true",
                        help="also compute the non-replicated replay reference of the same input and exit 1 "
                             "unless every run delivered exactly it")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="run up to N kmax values at once, each in its own worker process (default: one per "
                             "kmax value, at most the number of CPUs; 1: one after the other in this process)")
    parser.add_argument("--trace", metavar="TRACE", help="replay this trace (a name or a trace directory) instead of "
                        "the scenario's; unless --duration-s is given, the whole of it")
    parser.add_argument("--mode", choices=MODES,
                        help="engine mode of every run, replacing the scenario's 'mode' (docs/modes.md): "
                             "replication (default), or a baseline of the paper's Fig. 2")
    parser.add_argument("--deployment", action="append", metavar="KIND",
                        help="deployment kind to run (repeatable; default: the scenario's)")
    parser.add_argument("--segments", type=int, metavar="N",
                        help="split each run into N time segments simulated independently, each started a warmup "
                             "earlier, and merge them (docs/simulator.md, 'Time segments'); writes one dataset "
                             "partitioned by kmax, deployment and segment")
    parser.add_argument("--warmup-s", type=float, metavar="S",
                        help="with --segments: the warmup (default: derived from the scenario and the trace)")
    parser.add_argument("--spark", nargs="?", const="local[*]", metavar="MASTER",
                        help="run the kmax values, deployments and segments as Spark tasks on MASTER (default "
                             "local[*]; e.g. spark://host:7077) and summarise the dataset with PySpark")
    parser.add_argument("--spark-python", metavar="PATH",
                        help="the Python the Spark workers run (spark.pyspark.python; default: this interpreter's "
                             "path); replicast and what its tasks import are shipped to it")
    parser.add_argument("--tier", choices=("reference", "timing"), default="reference",
                        help="reference (default): the node cores process every message; timing: only the delivery "
                             "times of the reference content, over arrays (simulator/timing.py; docs/simulator.md, "
                             "'The timing tier')")
    parser.add_argument("--trace-query", action="append", metavar="FILE_OR_TEXT",
                        help="evaluate this trace query (docs/tracing.md; a file holding one, or its text) at every "
                             "node over each run (repeatable); answers in k<K>/trace-queries.json")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(run=run, extra="sim")


def run(args: argparse.Namespace) -> int:
    from replicast.experiments.latency import plot_ccdf
    from replicast.simulator.run import Prepared
    from replicast.simulator.scenario import load_scenario

    path = args.scenario or DEFAULT_SCENARIO
    if args.scenario is None and not path.is_file():
        raise ReplicastError(f"the default scenario {path} is missing; pass a scenario file (docs/simulator.md)")
    scenario = load_scenario(path)
    if args.trace:
        scenario.trace = args.trace
        scenario.duration_s = None            # the scenario's duration was chosen for its own trace
    if args.deployment:
        from replicast.simulator.scenario import DEPLOYMENTS
        bad = [d for d in args.deployment if d not in DEPLOYMENTS]
        if bad:
            raise ReplicastError(f"--deployment must be one of {', '.join(DEPLOYMENTS)}, got {bad[0]!r}")
    if args.mode is not None:
        scenario.mode = parse_mode(args.mode)
    if args.duration_s is not None:
        if args.duration_s <= 0:
            raise ReplicastError(f"--duration-s must be positive, got {args.duration_s}")
        scenario.duration_s = args.duration_s
    if args.kmax:
        bad = [k for k in args.kmax if k < 1]
        if bad:
            raise ReplicastError(f"--kmax must be at least 1, got {bad[0]}")
        scenario.kmax = tuple(args.kmax)
    twice = [k for k, n in Counter(scenario.kmax).items() if n > 1]
    if twice:
        raise ReplicastError(f"kmax {twice[0]} is given twice; each run writes its own k{twice[0]}/ directory")
    if args.check and scenario.entry_mode != "source":
        raise ReplicastError("--check needs source-stamped streams (entry-stamped timestamps depend on the run)")
    if args.jobs is not None and args.jobs < 1:
        raise ReplicastError(f"--jobs must be at least 1, got {args.jobs}")
    queries = trace_queries(args.trace_query or ())
    out = args.out or Path("out") / "simulate" / scenario.name
    if isinstance(out, str) and args.spark is None:
        raise ReplicastError(f"--out {out}: only a Spark sweep (--spark) writes to a URL other than file://; "
                             f"give a directory")
    if queries and (args.tier == "timing" or args.segments is not None or args.spark is not None or args.deployment):
        raise ReplicastError("--trace-query needs whole runs of the node cores; drop --tier timing, --segments, "
                             "--spark and --deployment")
    if args.tier == "timing":
        if args.segments is not None or args.spark is not None or args.check:
            raise ReplicastError("--tier timing runs whole windows in this process; drop --segments, --spark and "
                                 "--check (the timing tier's content is the reference run's by construction)")
        return _timing(args, scenario, path, out)
    if args.segments is not None or args.spark is not None or args.deployment:
        if scenario.coordinator is not None:
            raise ReplicastError(f"{path}: a scenario with a [coordinator] runs whole (its replicas change during "
                                 f"the run); drop --segments, --spark and --deployment")
        if args.check:
            raise ReplicastError("--check compares whole runs; it cannot be combined with --segments, --spark or "
                                 "--deployment")
        return _sweep(args, scenario, path, out)
    # Built here even when workers build their own: a bad scenario fails before any process starts,
    # and the log line and plot title need the servers.
    prepared = Prepared(scenario)
    jobs = min(args.jobs or cpus(), len(scenario.kmax))
    log.info("scenario %s: %d servers of trace %s, %.0f s simulated, kmax %s, %s", scenario.name,
             len(prepared.servers), scenario.trace, (prepared.end - prepared.start) / 1e6,
             ", ".join(map(str, scenario.kmax)), f"{jobs} worker processes" if jobs > 1 else "in this process")
    outcomes = simulate_runs(prepared, out, jobs=jobs, check=args.check, progress=not args.no_progress,
                             trace_queries=queries)
    runs, curves, failures = [], [], 0
    for k, outcome in zip(scenario.kmax, outcomes):
        if args.check:
            problems = outcome.mismatched
            failures += bool(problems)
            print(f"kmax={k}: " + (f"MISMATCH in {', '.join(problems)}" if problems else
                                   f"OK, {outcome.summary['delivered']} records equal the replay reference"))
        runs.append(outcome.summary)
        curves.append((k, outcome.latency))
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
    cost_png = _plot_cost(runs, out, scenario, len(prepared.servers))
    for s in runs:
        q = s["latency_ms"]
        print(f"kmax={s['kmax']}: {s['delivered']} records, latency p50 {q['p50']} ms, p99 {q['p99']} ms, "
              f"max {q['max']} ms; bandwidth {s['bandwidth_ratio']:.2f}x, cost {s['cost_ratio']:.2f}x; "
              f"{s['wall_s']:.1f} s wall")
        _warn_dead_letters(s)
        if "coordinator" in s:
            static = s.get("static")
            print(f"  coordinator: {_decisions(s['coordinator']['decisions'])}; network cost {s['network_cost']:.0f}"
                  + (f" against {static['network_cost']:.0f} static ({static['latency_ms']['p99']} ms p99 static)"
                     if static else ""))
    print(f"wrote {out}/ (deliveries.parquet, bandwidth.parquet, summary.json"
          + (", trace-queries.json" if queries else "") + f" per kmax), {png} and {cost_png}")
    return 1 if failures else 0


def _sweep(args: argparse.Namespace, scenario: Any, path: Path, out: Path) -> int:
    """kmax × deployment × segment tasks, locally or on Spark, into one dataset under ``out``."""
    import shutil
    import tempfile

    from replicast.simulator import sweep, sweep_local
    from replicast.simulator.run import Prepared
    from replicast.simulator.spark_files import Location, local_trace

    segments = args.segments or 1
    scenario = sweep.portable(scenario)
    if args.warmup_s is not None and args.warmup_s < 0:
        raise ReplicastError(f"--warmup-s must not be negative, got {args.warmup_s}")
    prepared = Prepared(local_trace(scenario))      # tasks fetch a trace URL themselves
    dataset = Location.of(out)
    if isinstance(out, str):         # an object store: summary and plots made here, then uploaded
        out = Path(tempfile.mkdtemp(prefix="replicast-summary-"))
    deployments = tuple(dict.fromkeys(args.deployment or [scenario.deployment]))
    warmup = None if args.warmup_s is None else round(args.warmup_s * 1e6)
    tasks, warmup = sweep.plan_tasks(prepared, scenario.kmax, deployments, segments, warmup)
    span = (prepared.end - prepared.start) / 1e6
    for table in sweep.TABLES:
        dataset.child(table).remove()
    dataset.make()
    log.info("scenario %s: %d servers of trace %s, %.0f s simulated, kmax %s, %s deployment, %d segment(s) with "
             "%.0f s warmup: %d tasks %s", scenario.name, len(prepared.servers), scenario.trace, span,
             ", ".join(map(str, scenario.kmax)), "/".join(deployments), segments, warmup / 1e6, len(tasks),
             f"on Spark {args.spark}" if args.spark else "in local worker processes")
    if args.spark:
        from replicast.simulator import spark as on_spark
        summaries = on_spark.run_tasks(args.spark, scenario, tasks, dataset, progress=not args.no_progress,
                                       python=args.spark_python)
        runs, histograms = on_spark.summarise(args.spark, dataset, summaries, scenario, span)
    else:
        jobs = min(args.jobs or cpus(), len(tasks))
        summaries = sweep_local.run_local(scenario, tasks, out, jobs, progress=not args.no_progress)
        runs, histograms = sweep.merge(out, summaries, scenario, span)
    shutil.rmtree(out / "_tasks", ignore_errors=True)
    title = (f"{scenario.name}: {len(prepared.servers)} servers, trace {scenario.trace}, "
             f"{'/'.join(deployments)} deployment")
    png = _write_sweep(out, path, runs, histograms, title)
    if dataset.local_path is None:
        for name in ("summary.json", png.name):
            dataset.upload(out / name, name)
        out, png = dataset.uri, f"{dataset.uri}/{png.name}"
    _print_sweep(runs, out, png)
    return 0


def _output(text: str) -> Path | str:
    """``--out``: a directory (a ``file://`` URL is one), or another filesystem's URL as it is."""
    from replicast.simulator.spark_files import Location, is_url

    if not is_url(text):
        return Path(text)
    here = Location.of(text).local_path
    return text if here is None else here


def _timing(args: argparse.Namespace, scenario: Any, path: Path, out: Path) -> int:
    """``--tier timing``: every kmax × deployment timed over arrays a simulated hour at a time (the
    content of an hour is made once for all of them), each streamed to ``k<K>/`` (or
    ``<deployment>-k<K>/`` with several deployments) as a plain run's ``deliveries.parquet`` and
    ``summary.json``; then ``summary.json`` and ``latency.png`` for all runs."""
    from tqdm import tqdm

    from replicast.experiments.latency import plot_ccdf
    from replicast.simulator.run import Prepared
    from replicast.simulator.sweep_local import curve_sample
    from replicast.simulator.timing import run_configs

    prepared = Prepared(scenario)
    deployments = tuple(dict.fromkeys(args.deployment or [scenario.deployment]))
    span = (prepared.end - prepared.start) / 1e6
    log.info("scenario %s: %d servers of trace %s, %.0f s simulated, kmax %s, %s deployment, timing tier",
             scenario.name, len(prepared.servers), scenario.trace, span, ", ".join(map(str, scenario.kmax)),
             "/".join(deployments))

    def directory(k: int, deployment: str) -> Path:
        return out / (f"k{k}" if len(deployments) == 1 else f"{deployment}-k{k}")

    configs = [(k, d) for d in deployments for k in scenario.kmax]
    with tqdm(total=round(span), desc="timing", unit="sim s", disable=args.no_progress) as bar:
        sinks = run_configs(prepared, configs, out=directory,
                            on_window=lambda done, total: bar.update(round(done / 1e6) - bar.n))
    runs, curves = [], []
    for sink in sinks:
        summary = sink.summary(prepared)
        k, deployment = sink.config.kmax, sink.config.deployment
        (directory(k, deployment) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        runs.append(summary)
        curves.append((f"kmax = {k}" + (f", {deployment}" if len(deployments) > 1 else ""),
                       curve_sample(sink.totals.histogram)))
        q = summary["latency_ms"]
        print(f"{deployment} kmax={k}: {summary['delivered']} records, latency p50 {q['p50']} ms, p99 {q['p99']} ms, "
              f"p99.9 {q['p99.9']} ms, max {q['max']} ms; {summary['wall_s']:.1f} s wall")
    (out / "summary.json").write_text(json.dumps({"scenario": str(path), "tier": "timing", "runs": runs}, indent=2)
                                      + "\n", encoding="utf-8")
    png = plot_ccdf(curves, out / "latency.png", f"{scenario.name}: {len(prepared.servers)} servers, trace "
                    f"{scenario.trace}, timing tier")
    print(f"wrote {out}/ (deliveries.parquet, summary.json per run), {png}")
    return 0


def _write_sweep(out: Path, scenario_path: Path, runs: list[dict[str, Any]], histograms: list[Histogram],
                  title: str) -> Path:
    """``summary.json`` (with bandwidth and cost ratios per deployment against its smallest kmax)
    and ``latency.png``; returns the plot's path."""
    from replicast.experiments.latency import plot_ccdf
    from replicast.simulator.sweep_local import curve_sample

    for run in runs:
        base = min((r for r in runs if r["deployment"] == run["deployment"]), key=lambda r: r["kmax"])
        run["bandwidth_ratio"] = _ratio(run["records_sent"], base["records_sent"])
        run["cost_ratio"] = _ratio(run["network_cost"], base["network_cost"])
    (out / "summary.json").write_text(json.dumps({"scenario": str(scenario_path), "runs": runs}, indent=2) + "\n",
                                      encoding="utf-8")
    labels = [(f"kmax = {r['kmax']} {r['deployment']} ({r['bandwidth_ratio']:.2f}x, {r['cost_ratio']:.2f}x)",
               curve_sample(h)) for r, h in zip(runs, histograms)]
    return plot_ccdf(labels, out / "latency.png", title)


def _print_sweep(runs: list[dict[str, Any]], out: Path, png: Path) -> None:
    for s in runs:
        q = s["latency_ms"]
        print(f"kmax={s['kmax']} {s['deployment']}: {s['delivered']} records in {s['segments']} segment(s), latency "
              f"p50 {q['p50']} ms, p99 {q['p99']} ms, max {q['max']} ms; bandwidth {s['bandwidth_ratio']:.2f}x, "
              f"cost {s['cost_ratio']:.2f}x; {s['wall_s']:.1f} s of task time")
        _warn_dead_letters(s)
    print(f"wrote {out}/ (deliveries/ and bandwidth/: Parquet partitioned by kmax, deployment, segment; "
          f"summary.json) and {png}")
    with contextlib.suppress(Exception):
        sys.stdout.flush()


def _warn_dead_letters(summary: dict[str, Any]) -> None:
    """A run whose entry points rejected input items says so, with why (docs/simulator.md, "Outputs"):
    a scenario whose every record is rejected would otherwise just print 0 records."""
    count = summary.get("dead_letters", 0)
    if not count:
        return
    reasons = "; ".join(f"{reason} ({n})" for reason, n in list(summary.get("dead_letter_reasons", {}).items())[:3])
    log.warning("kmax=%s%s: %d input items rejected as dead letters%s — %s", summary["kmax"],
                f" {summary['deployment']}" if "deployment" in summary else "", count,
                ", nothing delivered" if not summary.get("delivered") else "", reasons or "reasons not recorded")


def _plot_cost(runs: list[dict[str, Any]], out: Path, scenario: Any, servers: int) -> Path:
    """``cost.png``: each run's network cost over time (and its static counterpart's, if simulated)."""
    from replicast.experiments.cost import plot_cost

    lines = [(f"kmax = {s['kmax']}" + (", coordinator" if "coordinator" in s else ""), s["cost_over_time"],
              s.get("static", {}).get("cost_over_time")) for s in runs]
    return plot_cost(lines, out / "cost.png", f"{scenario.name}: {servers} servers, trace {scenario.trace}, "
                     f"{scenario.deployment} deployment")


def _decisions(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {key.replace(':', ' ')}" for key, n in counts.items()) or "no decisions"


def _ratio(value: float, base: float) -> float:
    return round(value / base, 3) if base else float("nan")
