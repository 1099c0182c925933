"""``replicast plot latency RUN_DIR_OR_FILE…``: overlay the latency distributions of any runs.

Simulated runs, live application outputs (FileSink JSON lines, MQTT captures) and Parquet files
(:mod:`experiments.runs`), drawn by :mod:`experiments.latency` — the code behind ``replicast
simulate``'s ``latency.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from replicast.experiments.plot_kinds import KINDS
from replicast.operators.errors import ReplicastError

DEFAULT_OUT = Path("out/plot/latency.png")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plot", help="plots of finished runs")
    parser.set_defaults(extra="plot")
    kinds = parser.add_subparsers(dest="plot", metavar="PLOT", required=True)
    latency = kinds.add_parser(
        "latency", help="overlay the latency distributions of simulated and live runs",
        description="One curve per run: a simulated run's directory (k<K>/ or the whole 'replicast simulate' "
                    "output), a Parquet file (latency_us, or ts and arrival), a node's FileSink JSON lines, an "
                    "MQTT capture of replicast/out/# made with mosquitto_sub -F %J or -F '%U %t %p', or a "
                    "directory of JSON-lines outputs. Labels come from each run's summary (or its name).")
    latency.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR_OR_FILE")
    shape = latency.add_mutually_exclusive_group()
    for kind, text in KINDS.items():
        shape.add_argument(f"--{kind}", dest="kind", action="store_const", const=kind, help=text)
    latency.set_defaults(kind="ccdf")
    latency.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"PNG to write (default {DEFAULT_OUT})")
    latency.add_argument("--label", action="append", default=[], metavar="TEXT",
                         help="label of the next run instead of its summary's (repeat, in order)")
    latency.add_argument("--title", default="", help="plot title")
    latency.set_defaults(run=run_latency)


def run_latency(args: argparse.Namespace) -> int:
    from replicast.experiments.latency import plot_latency
    from replicast.experiments.runs import load_runs

    runs = [run for path in args.runs for run in load_runs(path)]
    if len(args.label) > len(runs):
        raise ReplicastError(f"{len(args.label)} --label given for {len(runs)} runs")
    for run, label in zip(runs, args.label):
        run.label = label
    path = plot_latency(runs, args.out, kind=args.kind, title=args.title)
    for run in runs:
        ms = run.latency_us / 1000.0
        print(f"{run.label}: {len(ms)} records, latency p50 {_q(ms, 0.5)} ms, p99 {_q(ms, 0.99)} ms, "
              f"max {ms.max():.1f} ms ({run.source})")
    print(f"wrote {path}")
    return 0


def _q(values, q: float) -> str:
    import numpy as np
    return f"{float(np.quantile(values, q)):.1f}"
