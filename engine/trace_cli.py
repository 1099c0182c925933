"""``replicast trace-query CLUSTER 'From … Select …'``: a trace query on a running cluster (docs/tracing.md).

Installs the query on every node (no node restarts), prints the merged answer every ``--every``
seconds as the nodes' reports stream in, and removes the query when it stops (``--for`` elapsed,
or Ctrl-C) unless ``--keep``.  ``--list`` and ``--remove ID`` manage installed queries.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "trace-query", help="install a trace query on a running cluster and stream its answers",
        description="Install a Pivot-Tracing-style query (From a In TRACEPOINT Where … GroupBy … Select … "
                    "Sample 1/N) on every node of a running cluster, evaluated where its events happen, and "
                    "print the answer merged from all nodes as it streams in (docs/tracing.md).")
    parser.add_argument("cluster", help="the cluster file the nodes run (their metrics ports and secret)")
    parser.add_argument("query", nargs="?", help="the query text (or - to read it from standard input)")
    parser.add_argument("--id", help="the query's id on the nodes (default: a new one)")
    parser.add_argument("--every", type=float, default=2.0, metavar="S", help="print the answer every S seconds")
    parser.add_argument("--for", dest="duration", type=float, metavar="S", help="stop after S seconds "
                        "(default: until Ctrl-C)")
    parser.add_argument("--window", type=float, metavar="S", help="answer over the last S seconds "
                        "(default: everything since the query was installed)")
    parser.add_argument("--json", action="store_true", help="print each answer as one JSON line")
    parser.add_argument("--keep", action="store_true", help="leave the query installed when stopping")
    parser.add_argument("--list", action="store_true", help="list the queries installed on each node")
    parser.add_argument("--remove", metavar="ID", help="remove query ID from every node")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from replicast.engine.cluster_config import load_cluster
    from replicast.engine.trace_client import Answers, ClusterTrace, now_us
    from replicast.operators.errors import ReplicastError

    cluster = ClusterTrace(load_cluster(args.cluster))
    for node in cluster.untraceable:
        print(f"replicast trace-query: node {node} has no metrics_port: not traced", file=sys.stderr)
    if args.list:
        print(json.dumps(cluster.queries(), indent=2))
        _say_unreachable(cluster)
        return 0
    if args.remove:
        removed = cluster.remove(args.remove)
        print(f"removed {args.remove!r} from {sum(removed.values())} of {len(cluster.urls)} nodes")
        _say_unreachable(cluster)
        return 0
    text = sys.stdin.read() if args.query == "-" else args.query
    if not text:
        raise ReplicastError("trace-query: give a query (or --list, --remove ID)")
    qid = args.id or uuid.uuid4().hex[:8]
    query = cluster.install(qid, text)
    answers = Answers()
    answers.watch(qid, query)
    started = time.monotonic()
    print(f"query {qid} installed on {len(cluster.urls) - len(cluster.unreachable)} of {len(cluster.urls)} "
          f"nodes: {query.text}", file=sys.stderr)
    _say_unreachable(cluster)
    try:
        while args.duration is None or time.monotonic() - started < args.duration:
            time.sleep(args.every if args.duration is None else
                       max(0.0, min(args.every, args.duration - (time.monotonic() - started))))
            answers.add(cluster.poll())
            since = None if args.window is None else now_us() - int(args.window * 1e6)
            if since is not None:
                answers.trim(since)
            _print(answers.rows(qid, since), query, args.json)
            _say_unreachable(cluster)
    except KeyboardInterrupt:
        pass
    finally:
        if not args.keep:
            cluster.remove(qid)
    return 0


def _print(rows: list[dict], query, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"at_us": time.time_ns() // 1000, "rows": rows}), flush=True)
        return
    labels = [o.label for o in query.select]
    cells = [[_cell(row[label]) for label in labels] for row in rows]
    widths = [max([len(label)] + [len(c[i]) for c in cells]) for i, label in enumerate(labels)]
    print(time.strftime("%H:%M:%S"), f"({len(rows)} groups)")
    print("  ".join(label.ljust(w) for label, w in zip(labels, widths)))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(flush=True)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.0f}"
    return "-" if value is None else str(value)


def _say_unreachable(cluster) -> None:
    for node, why in sorted(cluster.unreachable.items()):
        print(f"replicast trace-query: node {node} did not answer ({why})", file=sys.stderr)
    for node, queries in sorted(cluster.overflow.items()):
        for qid, n in sorted(queries.items()):
            print(f"replicast trace-query: node {node}: query {qid} had more groups than a table keeps; "
                  f"{n} events not counted (group by fewer distinct values)", file=sys.stderr)
