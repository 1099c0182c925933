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


def _done(name: str, started: float, paths: list[Path]) -> None:
    print(f"{name}: wrote {', '.join(str(p) for p in paths)} in {time.monotonic() - started:.0f} s")


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
