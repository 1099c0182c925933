"""``replicast experiment …``: the paper's evaluation (§VI) as commands, one per figure or table.

Each writes its CSV and PNG files into ``--out`` (default ``out/experiments``).  Heavy imports
happen inside the commands, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from operators.errors import ReplicastError

DEFAULT_OUT = Path("out/experiments")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "experiment", help="reproduce the paper's figures and tables (CSV + PNG)",
        description="The evaluation of Hwang, Cetintemel, Zdonik (ICDE 2008, section VI) as commands.  Defaults "
                    "run on the shipped Seattle trace in minutes (docs/experiments.md has the measured times); "
                    "--trace and --duration scale the simulated ones up.")
    figures = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)

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


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _seconds(text: str, option: str) -> float:
    from traces.cli import parse_duration_us
    from traces.errors import TraceError

    try:
        return parse_duration_us(text) / 1e6
    except TraceError as error:
        raise ReplicastError(f"{option}: {error}") from None


def _done(name: str, started: float, paths: list[Path]) -> None:
    print(f"{name}: wrote {', '.join(str(p) for p in paths)} in {time.monotonic() - started:.0f} s")


def run_fig2(args: argparse.Namespace) -> int:
    from experiments import fig2

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


def run_table1(args: argparse.Namespace) -> int:
    from experiments import table1

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
