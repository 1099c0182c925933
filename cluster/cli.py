"""``replicast cluster up|down``: a local cluster of node processes on loopback, for trying things out.

``up`` checks the whole cluster file and every port first (:mod:`cluster.preflight`), then starts
the embedded amqtt broker (unless the cluster file names a broker URL), one ``replicast node``
process per node, and the cluster file's ``[[sources]]``; it waits until every node reports ready
on its metrics endpoint, records the processes in ``RUN_DIR/state.json`` and returns.  A process
that dies meanwhile is named with the last line of its log.  ``down`` stops exactly those
processes (SIGTERM, then SIGKILL after a grace period).

With ``--emulate-wan TRACE`` the links between nodes get the trace's delays
(:mod:`cluster.emulation`: netem namespaces or user-space relays); ``down`` also deletes
namespaces it made.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import sys
import time
from pathlib import Path

from replicast.cluster import netem
from replicast.cluster.emulation import VIAS, Emulation, NetemEmulation, RelayEmulation, choose, open_trace, trace_nodes
from replicast.cluster.preflight import check_ports
from replicast.cluster.processes import (ClusterError, alive, blame_dead, exit_status, last_log_line, read_state, running,
                               spawn, stop, write_state)
from replicast.cluster.readiness import node_ready
from replicast.engine.cluster_config import ClusterConfig, check_source_commands, load_cluster

DEFAULT_RUN_DIR = Path(".replicast/cluster")

#: How long a source must survive after start for 'cluster up' to call it started.
SOURCE_GRACE_S = 1.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="start or stop a local cluster of nodes on loopback")
    commands = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = commands.add_parser("up", help="start the broker, the nodes and the sources of a cluster file")
    up.add_argument("cluster", type=Path, help="cluster file (TOML)")
    up.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"logs and state (default {DEFAULT_RUN_DIR})")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the nodes to be ready")
    up.add_argument("--emulate-wan", metavar="TRACE", help="put the wide-area delays of TRACE (e.g. seattle) "
                    "between the nodes (see --wan-via)")
    up.add_argument("--wan-via", choices=VIAS, default="auto",
                    help="with --emulate-wan: 'netem' (network namespaces and tc netem, one trace frame; needs root "
                         "and a kernel with netem), 'relay' (delay relays on loopback that follow the trace over "
                         "time; needs nothing) or 'auto': netem where it works, else relays (default)")
    up.add_argument("--trace-time", type=float, default=0.0, metavar="SECONDS",
                    help="with --emulate-wan: the trace time at start (default 0)")
    up.add_argument("--trace-nodes", default="reliable", metavar="reliable|first|NAME,…",
                    help="with --emulate-wan: which trace node each cluster node is: 'reliable' (the trace's nodes "
                         "with the fewest missing samples, as the simulator picks servers; default), 'first' "
                         "(node k is trace node k) or trace node names, one per node in file order")
    up.set_defaults(run=run_up)
    down = commands.add_parser("down", help="stop the cluster started by 'cluster up'")
    down.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"as given to 'up' (default {DEFAULT_RUN_DIR})")
    down.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    down.set_defaults(run=run_down)


# -- up -------------------------------------------------------------------------------------------
def run_up(args: argparse.Namespace) -> int:
    config = load_cluster(args.cluster)
    run_dir: Path = args.run_dir
    state_file = run_dir / "state.json"
    if state_file.exists() and any(alive(p) for p in read_state(state_file)["processes"]):
        raise ClusterError(f"{run_dir}: a cluster is already running there; run 'replicast cluster down' first")
    via = trace = None
    if args.emulate_wan is not None:
        trace, t_us = open_trace(args.emulate_wan, args.trace_time)
        indexes = trace_nodes(config, trace, args.trace_nodes)
        via, reason = choose(args.wan_via)
    check_ports(config, bind=via != "netem")        # netem nodes listen inside their namespaces
    check_source_commands(config)                   # a missing program: one line, before anything starts
    run_dir.mkdir(parents=True, exist_ok=True)
    source_dir = config.path.parent.resolve()
    wan: Emulation | None = None
    processes: list[dict] = []
    try:
        if via == "netem":
            wan = NetemEmulation(config, trace, indexes, t_us, run_dir, state_file)
        elif via == "relay":
            wan = RelayEmulation(config, trace, indexes, t_us, run_dir, args.timeout, reason)
            processes.extend(wan.processes)
        extra = wan.state() if wan else {}
        node_config = wan.config if isinstance(wan, NetemEmulation) else config
        if node_config.broker == "embedded":
            host, port = node_config.mqtt_address()
            broker = spawn("broker", [sys.executable, "-m", "replicast.engine.aio.broker", "--host", host, "--port", str(port)],
                           run_dir, wan and wan.wrap(None))
            processes.append(broker)
            if via != "netem":
                _wait_port(host, port, args.timeout, {"the embedded MQTT broker": broker})
        nodes = {}
        state_dir = run_dir / "state"                 # a new cluster: no node has run before
        shutil.rmtree(state_dir, ignore_errors=True)
        for name in config.nodes:
            path = wan.config_path(name) if wan else config.path
            nodes[f"node {name}"] = spawn(name, [sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                                 str(path.resolve()), "--name", name, "--log-json",
                                                 "--state-dir", str(state_dir.resolve())],
                                          run_dir, wan and wan.wrap(name))
        processes.extend(nodes.values())
        write_state(state_file, processes, **extra)
        if via == "netem":
            wan.wait_ready(args.timeout, {**nodes, **_broker(processes)})
        else:
            _wait_ready(config, args.timeout, nodes, _broker(processes), wan.hint if wan else "")
        sources = []
        for i, source in enumerate(config.sources):
            command = [_expand(a, node_config, source.node, source_dir) for a in source.command]
            sources.append(spawn(f"source-{source.node}-{i}", command, run_dir, wan and wan.wrap(source.node)))
        processes.extend(sources)
        write_state(state_file, processes, **extra)
        _check_sources_started(sources)
    except BaseException:
        stop(processes, grace=2.0)
        if wan is not None:
            wan.teardown()
        state_file.unlink(missing_ok=True)
        raise
    host, port = config.mqtt_address()
    print(f"cluster up: {len(config.nodes)} nodes, broker {host}:{port}, logs in {run_dir}/")
    if wan is not None:
        lines = wan.describe()
        print(f"  wide-area emulation ({args.emulate_wan} via {wan.via}): {lines[0]}")
        print("  trace nodes: " + ", ".join(f"{name} = {trace.nodes[i]}" for name, i in indexes.items()))
        for line in lines[1:]:
            print(f"  {line}")
    if not isinstance(wan, NetemEmulation):
        print(f"  watch:  mosquitto_sub -h {host} -p {port} -t 'replicast/out/#' -v")
    print(f"  stop:   replicast cluster down --run-dir {run_dir}")
    return 0


def _broker(processes: list[dict]) -> dict[str, dict]:
    return {"the embedded MQTT broker": p for p in processes if p["name"] == "broker"}


def _expand(arg: str, config: ClusterConfig, node: str, directory: Path) -> str:
    host, port = config.mqtt_address()
    nodes = ",".join(f"{n.name}={n.host}:{n.port}" for n in config.nodes.values())
    return arg.format(python=sys.executable, dir=directory, broker_host=host, broker_port=port,
                      node=node, nodes=nodes, punctuation_ms=config.punctuation_ms)


def _wait_port(host: str, port: int, timeout: float, process: dict[str, dict]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        blame_dead(process)
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    (what, p), = process.items()
    raise ClusterError(f"{what} did not listen on {host}:{port} within {timeout:.0f} s; see {p['log']}")


def _wait_ready(config: ClusterConfig, timeout: float, nodes: dict[str, dict], others: dict[str, dict],
                hint: str = "") -> None:
    """Wait for every node at once; a process that exits meanwhile is blamed at once, by name."""
    deadline = time.monotonic() + timeout
    waiting = dict(zip(config.nodes, nodes.items()))
    while waiting:
        blame_dead({**nodes, **others})
        for name in list(waiting):
            spec = config.nodes[name]
            if spec.metrics_port is None:
                try:
                    socket.create_connection((spec.host, spec.port), timeout=0.5).close()
                    del waiting[name]
                except OSError:
                    pass
            elif node_ready(spec.host, spec.metrics_port):
                del waiting[name]
        if waiting and time.monotonic() > deadline:
            lines = "; ".join(f"{label}: {last_log_line(p)}" for label, p in waiting.values())
            raise ClusterError(f"not ready within {timeout:.0f} s: {', '.join(waiting)} (last log lines: {lines})"
                               + (f"; {hint}" if hint else ""))
        if waiting:
            time.sleep(0.1)


def _check_sources_started(sources: list[dict]) -> None:
    """Fail 'up' when a source dies at once (a typo in its command, a missing script): otherwise the
    cluster looks healthy and simply never produces anything.  A source that finishes successfully
    within the grace period (it sent a file and exited 0) is fine."""
    deadline = time.monotonic() + SOURCE_GRACE_S
    while time.monotonic() < deadline and any(running(p) for p in sources):
        time.sleep(0.05)
    for process in sources:
        status = exit_status(process)
        if status not in (None, 0):
            raise ClusterError(f"source {process['name']} exited with status {status} at start: "
                               f"{last_log_line(process)} (command: {' '.join(process['command'])})")


# -- down -----------------------------------------------------------------------------------------
def run_down(args: argparse.Namespace) -> int:
    state_file = args.run_dir / "state.json"
    if not state_file.exists():
        raise ClusterError(f"{args.run_dir}: no cluster state here (was 'replicast cluster up' run with this --run-dir?)")
    state = read_state(state_file)
    stopped = stop(state["processes"], args.grace)
    deleted = netem.teardown(netem.WanPlan.from_json(state["wan"])) if "wan" in state else []
    state_file.unlink()
    print(f"cluster down: stopped {stopped} process(es)" + (f", deleted {len(deleted)} namespace(s)" if deleted else ""))
    return 0
