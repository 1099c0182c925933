"""``replicast node``: run one node of a cluster file (on a VM, or under ``replicast cluster up``)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from replicast.engine.cluster_config import ClusterConfigError, load_cluster

if TYPE_CHECKING:
    from replicast.engine.node import Start

#: ``replicast node``'s exit status when the node stopped itself because of a bug — its core failed
#: (engine/node.py, crash-only) or a driver task was in a crash loop (engine.aio.supervise) — as
#: opposed to 2, an error in what it was given.  A supervisor restarts it on this status
#: (``cluster up``'s keeper: cluster.keeper; systemd: ``Restart=on-failure``); it rejoins by snapshot.
EXIT_BUG = 70


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "node", help="run one replicast node (one per server)",
        description="Run the node NAME of the cluster file: its replicas, entry points and applications, "
                    "its TCP links to the other nodes and its MQTT client. Stops on SIGTERM.")
    parser.add_argument("--config", required=True, type=Path, help="cluster file (TOML), the same on every node")
    parser.add_argument("--name", help="this node's name in the cluster file (default: the file's 'name' key)")
    parser.add_argument("--log-json", action="store_true", help="structured logs: one JSON object per line")
    parser.add_argument("--state-dir", type=Path, default=Path(".replicast/state"),
                        help="where the node notes that it has run and keeps its entry-stamping votes (default: "
                             ".replicast/state): started again with the same directory, its replicas know they "
                             "rejoin a running cluster (docs/lifecycle.md) and its votes are what it promised "
                             "(docs/modes.md); 'cluster up' gives each new cluster a fresh one")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = load_cluster(args.config)
    name = args.name or _name_in_file(args.config)
    if name not in config.nodes:
        raise ClusterConfigError(f"{args.config}: no node named {name!r} (nodes: {', '.join(config.nodes)})")
    if args.log_json:
        from replicast.engine.aio.logs import use_json_logs
        use_json_logs(name, logging.getLogger().level)
    from replicast.engine.aio.driver import NodeDriver, NodeFailed
    from replicast.engine.node import CoreFailed
    start = note_start(args.state_dir, config, name)

    async def main() -> None:
        driver = NodeDriver(config, name, start=start, state_dir=args.state_dir)
        tune_gc()
        await driver.run()

    try:
        asyncio.run(main())
    except (NodeFailed, CoreFailed) as error:          # CoreFailed: the core failed while being configured
        print(f"replicast node: error: {error}", file=sys.stderr)
        return EXIT_BUG
    return 0


#: Allocations between young collections (CPython's default is 700).  A node allocates a tuple per
#: record it decodes and drops most of them a batch later: at 700, every 1000-record batch set off
#: collections that promoted the batch's records before they died, and a full one every few
#: batches.  (docs/node.md, "Throughput": ~10% of a node's CPU per record.)
GC_YOUNG = 50_000


def tune_gc() -> None:
    """Move what the node has allocated so far (modules, the query, the core) out of the collector's
    reach, and collect young objects less often: a node is a long-lived process whose garbage is
    almost all acyclic records, freed by reference counting anyway."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, 20, 100)


def note_start(state_dir: Path, config, name: str) -> Start:
    """How node ``name`` of this cluster starts: ``RESTARTED`` if it ran before from ``state_dir``
    (then its entry points, with no live peer, do not claim their whole stream: docs/lifecycle.md),
    else ``FRESH``; notes this start."""
    import json
    import time
    from replicast.engine.node import Start
    path = state_dir / f"{name}.json"
    cluster = str(config.path.resolve())
    try:
        before = json.loads(path.read_text(encoding="utf-8")).get("cluster") == cluster
    except (OSError, ValueError, AttributeError):
        before = False
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"cluster": cluster, "node": name, "started_us": time.time_ns() // 1000}))
    except OSError as error:
        logging.getLogger("replicast.node").warning("cannot note the start in %s: %s", path, error)
    return Start.RESTARTED if before else Start.FRESH


def _name_in_file(path: Path) -> str:
    import tomllib
    name = tomllib.loads(path.read_text(encoding="utf-8")).get("name")
    if not isinstance(name, str):
        raise ClusterConfigError(f"{path}: give --name or a top-level name = \"…\" for this node")
    return name
