"""``replicast dashboard CLUSTER``: a web page of a running cluster, served locally (docs/tracing.md)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dashboard", help="serve a live web page of a running cluster",
        description="Serve a web page (one command, no build step) showing a running cluster: the query DAG with "
                    "each replica's server and state, each application's latency CCDF, the win share of every "
                    "stream replica, and the answers of installed trace queries (docs/tracing.md).  The "
                    "dashboard installs two sampled trace queries on the nodes and removes them when it stops.")
    parser.add_argument("cluster", nargs="?", help="the cluster file the nodes run (their metrics ports and secret)")
    parser.add_argument("--run", dest="recorded", metavar="PATH", help="show a recorded run instead of a running cluster: a "
                        "simulated run (deliveries.parquet or its k<K>/ directory) or applications' output files "
                        "(*.jsonl, or their directory)")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve the page on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port to serve the page on (default 8765; 0: any)")
    parser.add_argument("--every", type=float, default=1.0, metavar="S", help="poll the nodes every S seconds")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from replicast.engine.cluster_config import load_cluster
    from replicast.engine.dashboard import ClusterView, RecordedView, serve
    from replicast.operators.errors import ReplicastError

    if (args.cluster is None) == (args.recorded is None):
        raise ReplicastError("dashboard: give a cluster file, or --run PATH for a recorded run")
    view = RecordedView(Path(args.recorded)) if args.recorded else ClusterView(load_cluster(args.cluster))
    if args.recorded:
        view.refresh()                              # a bad file is one line before anything is served
    try:
        serve(view, args.host, args.port, args.every)
    except KeyboardInterrupt:
        pass
    return 0
