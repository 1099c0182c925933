"""``replicast experiment fig2|fig3|table1|fig4|fig5|all``: the paper's evaluation (§VI) as commands.

Each writes its CSV and PNG files into ``--out`` (default ``out/experiments``); simulations are kept
under ``OUT/runs/`` and reused by later invocations (:mod:`experiments.simulations`).  ``all`` runs
every one and writes ``report.md`` with the paper's numbers alongside (:mod:`experiments.report`).
Heavy imports happen inside the commands, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from replicast.operators.errors import ReplicastError

DEFAULT_OUT = Path("out/experiments")


def register(subparsers: argparse._SubParsersAction) -> None:
    experiment = subparsers.add_parser(
        "experiment", help="reproduce the paper's figures and tables (CSV + PNG)",
        description="The evaluation of Hwang, Cetintemel, Zdonik (ICDE 2008, section VI) as commands.  Defaults "
                    "run on the shipped Seattle trace in minutes (docs/experiments.md has the measured times); "
                    "--trace and --duration scale the simulated ones up.")
    experiment.set_defaults(extra="all")
    figures = experiment.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)

    fig2 = figures.add_parser(
        "fig2", help="latency over time with a crash at t = 60 s, one curve per engine mode (TCP cluster or simulator)",
        description="Fig. 2: the Fig. 1 query's Unions at W and P and Join at O (replicated at P, W and Q), sources "
                    "every half second, W crashed at --crash-at; one run per engine mode.  By default on real TCP "
                    "clusters on loopback (one per mode, all at once) whose links follow the trace (delay relays, "
                    "'cluster up --emulate-wan'); --simulate runs the simulator instead.  Writes fig2.csv, "
                    "fig2_summary.csv and fig2.png.")
    _common(fig2)
    fig2.add_argument("--simulate", action="store_true", help="run the simulator instead of TCP clusters")
    fig2.add_argument("--mode", action="append", metavar="MODE",
                      help="an engine mode to run (repeatable; default every mode the engine has: "
                           "none, replication, synchronization, deterministic, failover)")
    fig2.add_argument("--duration", default="80s", metavar="DURATION", help="how long the sources run (default 80s)")
    fig2.add_argument("--crash-at", default="60s", metavar="TIME", help="when W crashes (default 60s)")
    fig2.add_argument("--drain", default="10s", metavar="DURATION",
                      help="how long to keep collecting after the sources end (default 10s)")
    fig2.add_argument("--peer-timeout-ms", type=float, default=2000.0,
                      help="the failure detector's time-out (default 2000; heartbeats every 250 ms)")
    fig2.add_argument("--trace", default="seattle", help="the trace whose delays the links follow (default seattle)")
    fig2.add_argument("--trace-time", default="0s", metavar="TIME", help="where in the trace to start (default 0s)")
    fig2.add_argument("--wan-via", choices=("relay", "netem", "auto"), default="relay",
                      help="how TCP clusters emulate the trace's delays: user-space relays (default), netem, or auto "
                           "(netem where it works; see 'replicast cluster up --help')")
    fig2.set_defaults(run=run_fig2)

    fig3 = _simulated_figure(
        figures, "fig3", run_fig3, "1, 2, 3", "the whole trace",
        "latency per record and its 10-minute average over hours, kmax 1-3 (simulator)",
        "Fig. 3: the shipped Fig. 4 scenario with min-cost deployment, simulated once per kmax over the whole trace "
        "(1.9 h of Seattle by default); one application's latency per record and its average per window.  Writes "
        "fig3.csv, fig3_average.csv and fig3.png.")
    fig3.add_argument("--app", default="app_0", help="the application whose records are plotted (default app_0)")
    fig3.add_argument("--average", default="10min", metavar="DURATION", help="averaging window (default 10min)")

    table1 = figures.add_parser(
        "table1", help="CPU cost per replica of Union, Filter, Aggregate, Join at degrees 1-4 (node core)",
        description="Table I: one replica on a node core receives each input as k stream replicas (1 K tuples/s "
                    "per input, one tuple and punctuation per ms) and sends its output to k downstream replicas; "
                    "the process CPU time of that node alone, replayed from a recorded run, is its cost.  "
                    "Writes table1.csv and table1.png.")
    _common(table1)
    table1.add_argument("--seconds", type=float, default=2.0,
                        help="seconds of stream per operator and degree (default 2; the first 0.5 are not counted)")
    table1.add_argument("--repeats", type=int, default=3, help="replays per case, the least CPU kept (default 3)")
    table1.add_argument("--operator", action="append", choices=("union", "filter", "aggregate", "join"),
                        help="only these operators (repeatable; default all four)")
    table1.set_defaults(run=run_table1)

    fig4 = _simulated_figure(
        figures, "fig4", run_fig4, "1-5", "30min", "P(latency > x) for kmax 1-5, random vs min-cost deployment (simulator)",
        "Fig. 4: the shipped Fig. 4 scenario simulated once per kmax and deployment (30 min of trace): (a) random - "
        "the optimal non-replicated placement, further replicas on random candidate servers; (b) min-cost - Alg. 5.  "
        "Bandwidth and network cost ratios against kmax 1 in the legends.  Writes fig4.csv, fig4_ccdf.csv and "
        "fig4.png.")
    fig4.add_argument("--paper-scale", action="store_true",
                      help="the paper's scale on the timing tier: 100 servers, 10 applications, a month of a synthetic "
                           "PlanetLab-like trace (generated in process as it is read; --trace, --duration, --servers "
                           "change it); writes fig4_paper.csv, fig4_paper_ccdf.csv and the report fig4_paper.md")
    fig4.add_argument("--servers", type=int, metavar="N", help="with --paper-scale: servers (default 100)")
    fig5 = _simulated_figure(
        figures, "fig5", run_fig5, "1-5", "30min",
        "network cost of static min-cost vs garbage collection vs GC + revival, per kmax (simulator)",
        "Fig. 5: min-cost deployments simulated over 30 min of trace, left static (Fig. 4's runs), with the "
        "coordinator's garbage collection (kmin 2, no revival), and with garbage collection and revival (kmin 1), "
        "both under the latency objective p99 within 25 % of static; the network cost each ends at, against static "
        "kmax 1, the p99 against static and the GC and revival decisions.  Writes fig5.csv and fig5.png.")
    fig5.add_argument("--paper-scale", action="store_true",
                      help="the static min-cost bars at the paper's scale on the reference tier, in time segments: 100 "
                           "servers, 10 applications, a month of fig4 --paper-scale's trace (--trace, --duration, "
                           "--servers change it); writes fig5_paper.csv and the report fig5_paper.md")
    fig5.add_argument("--servers", type=int, metavar="N", help="with --paper-scale: servers (default 100)")
    fig5.add_argument("--segments", type=int, metavar="N",
                      help="with --paper-scale: time segments per kmax (default: one per simulated day)")
    fig5.add_argument("--spark", nargs="?", const="local[*]", metavar="MASTER",
                      help="with --paper-scale: the segments as Spark tasks on MASTER (default local[*]; e.g. "
                           "spark://host:7077, whose workers see OUT at the same path)")
    fig5.add_argument("--spark-python", metavar="PATH", help="with --spark: the Python the Spark workers run")

    every = figures.add_parser(
        "all", help="every experiment, then report.md with the paper's numbers alongside",
        description="table1, fig2 (TCP clusters), fig3, fig4 and fig5 with their defaults, then OUT/report.md: every "
                    "figure and a table putting replicast's numbers next to the paper's, each difference explained.  "
                    "--trace and --duration apply to the simulated figures; --simulate runs fig2 in the simulator.")
    _simulated(every, "each experiment's own: the whole trace for fig3, 30min for fig4 and fig5")
    every.add_argument("--simulate", action="store_true", help="fig2 in the simulator instead of TCP clusters")
    every.set_defaults(run=run_all)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _simulated_figure(figures: argparse._SubParsersAction, name: str, run, kmax: str, duration: str, summary: str,
                      description: str) -> argparse.ArgumentParser:
    """A simulated figure's subcommand: the scaling options and ``--kmax``."""
    parser = figures.add_parser(name, help=summary, description=description)
    _simulated(parser, duration)
    parser.add_argument("--kmax", type=int, action="append", metavar="K", help=f"degrees to compare (default {kmax})")
    parser.set_defaults(run=run)
    return parser


def _simulated(parser: argparse.ArgumentParser, default_duration: str) -> None:
    _common(parser)
    parser.add_argument("--trace", metavar="TRACE", help="a trace name or directory (default: seattle, shipped); "
                        "'replicast trace synth --duration 30d' makes a month")
    parser.add_argument("--duration", metavar="DURATION", help=f"simulated time, e.g. 30min, 2h, 30d (default "
                        f"{default_duration}; at most the trace's length)")
    parser.add_argument("--jobs", type=int, metavar="N", help="simulations at once (default: the number of CPUs)")
    parser.add_argument("--fresh", action="store_true", help="simulate again even if OUT/runs has the runs")


def _scale(args: argparse.Namespace):
    from replicast.experiments.simulations import Scale

    duration_s = _seconds(args.duration, "--duration") if args.duration else None
    if args.jobs is not None and args.jobs < 1:
        raise ReplicastError(f"--jobs must be at least 1, got {args.jobs}")
    return Scale(trace=args.trace, duration_s=duration_s, jobs=args.jobs, progress=not args.no_progress,
                 fresh=args.fresh)


def _kmax(values: list[int] | None, default: tuple[int, ...]) -> tuple[int, ...]:
    kmax = tuple(sorted(set(values or default)))
    if kmax[0] < 1:
        raise ReplicastError(f"--kmax must be at least 1, got {kmax[0]}")
    return kmax


def _seconds(text: str, option: str) -> float:
    from replicast.traces.cli import parse_duration_us
    from replicast.traces.errors import TraceError

    try:
        return parse_duration_us(text) / 1e6
    except TraceError as error:
        raise ReplicastError(f"{option}: {error}") from None


def _done(name: str, started: float, paths: list[Path]) -> None:
    print(f"{name}: wrote {', '.join(str(p) for p in paths)} in {time.monotonic() - started:.0f} s")


def run_fig2(args: argparse.Namespace) -> int:
    from replicast.experiments import fig2

    available = fig2.available_modes()
    modes = tuple(dict.fromkeys(args.mode or available))
    unknown = [m for m in modes if m not in available]
    if unknown:
        raise ReplicastError(f"--mode {unknown[0]}: the engine has modes {', '.join(available)}")
    duration, crash = _seconds(args.duration, "--duration"), _seconds(args.crash_at, "--crash-at")
    if not 0 < crash < duration:
        raise ReplicastError(f"--crash-at {args.crash_at} must fall inside the run (--duration {args.duration})")
    if args.peer_timeout_ms <= 250:
        raise ReplicastError(f"--peer-timeout-ms must exceed the 250 ms heartbeat, got {args.peer_timeout_ms:g}")
    trace_time = 0.0 if args.trace_time in ("0", "0s") else _seconds(args.trace_time, "--trace-time")
    settings = fig2.Settings(modes=modes, duration_s=duration, crash_s=crash, peer_timeout_ms=args.peer_timeout_ms,
                             trace=args.trace, trace_time_s=trace_time, drain_s=_seconds(args.drain, "--drain"),
                             wan_via=args.wan_via)
    started = time.monotonic()
    result = fig2.run(args.out, settings, simulate=args.simulate, progress=not args.no_progress)
    for row in result["rows"]:
        print(f"{row['mode']:<16} {row['records']} records ({row['records_after_crash']} after the crash); mean "
              f"latency {row['mean_latency_before_ms']} ms before, {row['mean_latency_after_ms'] or '-'} ms after; "
              f"longest pause after the crash {row['longest_gap_after_s']} s")
    _done("fig2", started, [args.out / n for n in ("fig2.csv", "fig2_summary.csv", "fig2.png")])
    return 0


def run_fig3(args: argparse.Namespace) -> int:
    from replicast.experiments import fig3

    started = time.monotonic()
    result = fig3.run(args.out, _scale(args), kmax=_kmax(args.kmax, fig3.KMAX), app=args.app,
                      average_s=_seconds(args.average, "--average"))
    for k, s in result["per_kmax"].items():
        print(f"kmax={k}: {s['records']} records at {result['app']}, latency mean {s['mean_ms']:.0f} ms, "
              f"std {s['std_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms, max {s['max_ms']:.0f} ms")
    _done("fig3", started, [args.out / n for n in ("fig3.csv", "fig3_average.csv", "fig3.png")])
    return 0


def run_fig4(args: argparse.Namespace) -> int:
    from replicast.experiments import fig4

    started = time.monotonic()
    if args.paper_scale:
        return run_fig4_paper(args, started)
    result = fig4.run(args.out, _scale(args), kmax=_kmax(args.kmax, fig4.KMAX))
    for row in result["rows"]:
        print(f"{row['deployment']:<9} kmax={row['kmax']}: bandwidth {row['bandwidth_ratio']:.2f}x, cost "
              f"{row['cost_ratio']:.2f}x; latency p99 {row['p99_ms']:.0f} ms, max {row['max_ms']:.0f} ms, "
              f"P(> 1 s) {row['p_over_1s']:.2e}")
    _done("fig4", started, [args.out / n for n in ("fig4.csv", "fig4_ccdf.csv", "fig4.png")])
    return 0


def run_fig4_paper(args: argparse.Namespace, started: float) -> int:
    from replicast.experiments import fig4_paper

    servers = args.servers if args.servers is not None else fig4_paper.SERVERS
    if servers < 2:
        raise ReplicastError(f"--servers must be at least 2, got {servers}")
    if args.jobs is not None and args.jobs < 1:
        raise ReplicastError(f"--jobs must be at least 1, got {args.jobs}")
    days = _seconds(args.duration, "--duration") / 86400 if args.duration else fig4_paper.DAYS
    result = fig4_paper.run(args.out, trace=args.trace, servers=servers, days=days,
                            kmax=_kmax(args.kmax, fig4_paper.KMAX), progress=not args.no_progress, jobs=args.jobs)
    for row in result["rows"]:
        print(f"{row['deployment']:<9} kmax={row['kmax']}: cost {row['cost_ratio']:.2f}x; latency p99 "
              f"{row['p99_ms']:.0f} ms, p99.9 {row['p999_ms']:.0f} ms, max {row['max_ms']:.0f} ms, "
              f"P(> 1 s) {row['p_over_1s']:.2e}, P(> 16 s) {row['p_over_16s']:.2e}")
    _done("fig4 --paper-scale", started,
          [args.out / n for n in ("fig4_paper.csv", "fig4_paper_ccdf.csv", "fig4_paper.md")])
    return 0


def run_fig5(args: argparse.Namespace) -> int:
    from replicast.experiments import fig5

    started = time.monotonic()
    if args.paper_scale:
        return run_fig5_paper(args, started)
    if args.servers is not None or args.segments is not None or args.spark is not None:
        raise ReplicastError("--servers, --segments and --spark go with fig5 --paper-scale")
    result = fig5.run(args.out, _scale(args), kmax=_kmax(args.kmax, fig5.KMAX))
    for row in result["rows"]:
        print(f"kmax={row['kmax']} {row['variant']:<29} cost {row['final_cost_ratio']:.2f}x static kmax 1 "
              f"(saves {row['saving_vs_static']:.0%} of static), p99 {row['p99_ms']:.0f} ms")
    _done("fig5", started, [args.out / "fig5.csv", args.out / "fig5.png"])
    return 0


def run_fig5_paper(args: argparse.Namespace, started: float) -> int:
    from replicast.experiments import fig5_paper

    servers = args.servers if args.servers is not None else fig5_paper.SERVERS
    if servers < 2:
        raise ReplicastError(f"--servers must be at least 2, got {servers}")
    if args.segments is not None and args.segments < 1:
        raise ReplicastError(f"--segments must be at least 1, got {args.segments}")
    if args.jobs is not None and args.jobs < 1:
        raise ReplicastError(f"--jobs must be at least 1, got {args.jobs}")
    days = _seconds(args.duration, "--duration") / 86400 if args.duration else fig5_paper.DAYS
    result = fig5_paper.run(args.out, trace=args.trace, servers=servers, days=days,
                            kmax=_kmax(args.kmax, fig5_paper.KMAX), segments=args.segments, spark=args.spark,
                            spark_python=args.spark_python, jobs=args.jobs, progress=not args.no_progress)
    for row in result["rows"]:
        print(f"min-cost kmax={row['kmax']}: cost {row['cost_ratio']:.2f}x kmax {result['rows'][0]['kmax']} "
              f"(paper {row['paper_cost_ratio'] or '?'}x); latency p99 {row['p99_ms']:.0f} ms, p99.9 "
              f"{row['p999_ms']:.0f} ms, max {row['max_ms']:.0f} ms, P(> 1 s) {row['p_over_1s']:.2e}")
    _done("fig5 --paper-scale", started, [args.out / n for n in ("fig5_paper.csv", "fig5_paper.md")])
    return 0


def run_all(args: argparse.Namespace) -> int:
    from replicast.experiments import report

    path = report.run_all(args.out, _scale(args), simulate_fig2=args.simulate)
    print(f"all: wrote {path}")
    return 0


def run_table1(args: argparse.Namespace) -> int:
    from replicast.experiments import table1

    if args.seconds <= 0.5:
        raise ReplicastError(f"--seconds must be more than the 0.5 s warm-up, got {args.seconds}")
    if args.repeats < 1:
        raise ReplicastError(f"--repeats must be at least 1, got {args.repeats}")
    started = time.monotonic()
    settings = table1.Settings(seconds=args.seconds, repeats=args.repeats,
                               operators=tuple(dict.fromkeys(args.operator or table1.OPERATORS)))
    rows = table1.run(args.out, settings, progress=not args.no_progress)
    for row in rows:
        print(f"{row['operator']:<10} degree {row['degree']}: {row['cpu_percent']:6.2f} % CPU "
              f"({row['ratio_to_degree1']:.2f}x degree 1; paper {row['paper_cpu_percent']} %, "
              f"{row['paper_ratio_to_degree1']:.2f}x)")
    _done("table1", started, [args.out / "table1.csv", args.out / "table1.png"])
    return 0
