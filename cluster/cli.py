"""``replicast cluster up|down|status|restart|init``: a local cluster of node processes on loopback, for
trying things out, or — for cluster files whose nodes name an ssh destination — a cluster on remote
hosts (:mod:`cluster.remote`, :mod:`cluster.remote_ops`, docs/cluster.md).  What follows is the local case.

``up`` checks the whole cluster file and every port first (:mod:`cluster.preflight`), then starts
the embedded amqtt broker (unless the cluster file names a broker URL), one ``replicast node``
process per node under a keeper that restarts it when it stops itself on a bug (:mod:`cluster.keeper`),
and the cluster file's ``[[sources]]``; it waits until every node reports ready
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

from replicast.cluster import netem, remote, remote_ops
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
    parser = subparsers.add_parser("cluster", help="start or stop a cluster: on loopback, or on ssh hosts "
                                   "(nodes with ssh = {…}, docs/cluster.md)")
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
    ssh_group = up.add_argument_group("ssh hosts (nodes with ssh = {…}; docs/cluster.md)")
    ssh_group.add_argument("--wheel", type=Path, help="the replicast wheel to install on every host (default: built "
                        "from this checkout with 'python3 -m build --wheel')")
    ssh_group.add_argument("--wheelhouse", type=Path, metavar="DIR", help="push DIR's wheels too and install with "
                        "'pip --no-index --find-links' (hosts without internet)")
    ssh_group.add_argument("--system-site-packages", action="store_true", help="make the hosts' venvs with "
                        "--system-site-packages (dependencies installed on the host already)")
    ssh_group.add_argument("--follow", action="store_true", help="keep printing the nodes' logs after they are ready")
    up.set_defaults(run=run_up)
    down = commands.add_parser("down", help="stop the cluster started by 'cluster up'")
    down.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"as given to 'up' (default {DEFAULT_RUN_DIR})")
    down.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    down.set_defaults(run=run_down)
    status = commands.add_parser("status", help="each process of the cluster: its state and pid (on ssh hosts: "
                                 "also its host and metrics)")
    status.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"as given to 'up' (default {DEFAULT_RUN_DIR})")
    status.set_defaults(run=run_status)
    restart = commands.add_parser("restart", help="stop one node of an ssh cluster and start it again: it rejoins "
                                  "by snapshot (docs/lifecycle.md)")
    restart.add_argument("node", help="the node's name")
    restart.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"as given to 'up' (default {DEFAULT_RUN_DIR})")
    restart.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to be ready")
    restart.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    restart.set_defaults(run=run_restart)
    logs = commands.add_parser("logs", help="print the new log lines of every process of an ssh cluster, prefixed "
                               "by its name, until Ctrl-C")
    logs.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"as given to 'up' (default {DEFAULT_RUN_DIR})")
    logs.set_defaults(run=lambda args: remote.run(remote_ops.follow(_remote_state(args.run_dir, "logs"))))
    init = commands.add_parser("init", help="write a cluster file for a list of ssh hosts")
    init.add_argument("--hosts", required=True, help="[user@]host[:sshport],… one node per host")
    init.add_argument("--query", required=True, type=Path, help="query file (TOML)")
    init.add_argument("--kmax", type=int, default=2, help="replicas of every operator (default 2)")
    init.add_argument("--placement", choices=("min-cost", "manual"), default="min-cost",
                      help="min-cost: the placement coordinator places the operators (default); manual: written out")
    init.add_argument("--key", help="ssh private key file for every host (default: the ssh agent and ~/.ssh)")
    init.add_argument("--base-port", type=int, default=17000, help="node ports from here, metrics ports from +100")
    init.add_argument("--broker-port", type=int, default=1883, help="the embedded broker's port, on the first host")
    init.add_argument("--out", type=Path, default=Path("cluster.toml"), help="the file to write (default cluster.toml)")
    init.set_defaults(run=run_init)


# -- up -------------------------------------------------------------------------------------------
def run_up(args: argparse.Namespace) -> int:
    config = load_cluster(args.cluster)
    if remote.is_remote(config):
        return run_remote_up(config, args)
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
            # Under a keeper (cluster.keeper): a node that stops itself on a bug is started again and rejoins.
            nodes[f"node {name}"] = spawn(name, [sys.executable, "-m", "replicast.cluster.keeper", "--name", name, "--",
                                                 sys.executable, "-m", "replicast.engine.cli", "node", "--config",
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
    state = remote_ops.load_remote_state(args.run_dir)
    state_file = args.run_dir / "state.json"
    if "remote" in state:
        return remote.run(remote_ops.down(args.run_dir, state, args.grace))
    stopped = stop(state["processes"], args.grace)
    deleted = netem.teardown(netem.WanPlan.from_json(state["wan"])) if "wan" in state else []
    state_file.unlink()
    print(f"cluster down: stopped {stopped} process(es)" + (f", deleted {len(deleted)} namespace(s)" if deleted else ""))
    return 0


# -- status, restart ------------------------------------------------------------------------------
def run_status(args: argparse.Namespace) -> int:
    state = remote_ops.load_remote_state(args.run_dir)
    if "remote" in state:
        return remote.run(remote_ops.status(state))
    for process in state["processes"]:
        print(f"{process['name']:<16} {'running' if alive(process) else 'exited':<9} pid {process['pid']:<8} "
              f"log {process['log']}")
    return 0 if all(alive(p) for p in state["processes"]) else 1


def run_restart(args: argparse.Namespace) -> int:
    state = _remote_state(args.run_dir, "restart", "; here, start the node again with its command in "
                          f"{args.run_dir}/state.json (docs/deploy.md, 'Restarting a node')")
    return remote.run(remote_ops.restart(args.run_dir, state, args.node, args.timeout, args.grace))


def _remote_state(run_dir: Path, command: str, local_hint: str = "; a local cluster's logs are in the run dir") -> dict:
    state = remote_ops.load_remote_state(run_dir)
    if "remote" not in state:
        raise ClusterError(f"{run_dir}: 'cluster {command}' is for clusters on ssh hosts{local_hint}")
    return state


# -- ssh hosts ------------------------------------------------------------------------------------
def run_remote_up(config: ClusterConfig, args: argparse.Namespace) -> int:
    wan = None
    if args.emulate_wan is not None:
        from replicast.cluster.remote_relays import remote_wan
        wan = remote_wan(config, args.emulate_wan, args.trace_time, args.trace_nodes, args.wan_via)
    run_dir: Path = args.run_dir
    if (run_dir / "state.json").exists():
        raise ClusterError(f"{run_dir}: a cluster was started from here; run 'replicast cluster down' first")
    wheel = args.wheel or build_wheel(run_dir / "dist")
    if not wheel.is_file() or wheel.suffix != ".whl":
        raise ClusterError(f"--wheel {wheel}: not a wheel file")
    cluster = remote.RemoteCluster(config, run_dir)
    code = remote.run(cluster.up(wheel=wheel, wheelhouse=args.wheelhouse, system_site_packages=args.system_site_packages,
                                 timeout=args.timeout, wan=wan))
    if code:
        return code
    hosts = remote.unique(cluster.hosts)
    print(f"cluster up: {len(config.nodes)} nodes on {len(hosts)} host(s), wheel {wheel.name}; state in {run_dir}/")
    for name, spec in config.nodes.items():
        metrics = f"http://{spec.host}:{spec.metrics_port}/metrics" if spec.metrics_port else "(no metrics_port)"
        print(f"  {name:<10} {spec.ssh.destination:<24} {metrics}   log {cluster.hosts[name].path('logs', name + '.log')}")
    host, port = config.mqtt_address()
    if wan is not None:
        print(f"  wide-area emulation ({args.emulate_wan} via relays on the hosts, from trace time {args.trace_time:g} s): "
              + ", ".join(f"{name} = trace node {i}" for name, i in wan.indexes.items()))
    print(f"  watch:   mosquitto_sub -h {host} -p {port} -t 'replicast/out/#' -v")
    print(f"  status:  replicast cluster status --run-dir {run_dir}")
    print(f"  stop:    replicast cluster down --run-dir {run_dir}")
    if args.follow:
        return remote.run(remote_ops.follow(remote_ops.load_remote_state(run_dir)))
    return 0


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built with ``python -m build --wheel`` (an installed replicast
    has no sources to build from: then ``--wheel`` is needed)."""
    import subprocess
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file() or not (root / "setup.cfg").is_file():
        raise ClusterError("cluster up on ssh hosts installs a wheel there: give --wheel dist/replicast-….whl "
                           "(this replicast is not a checkout to build one from)")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("replicast-*.whl"):
        old.unlink()
    result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(root)],
                            capture_output=True, text=True)
    wheels = sorted(out.glob("replicast-*.whl"))
    if result.returncode != 0 or not wheels:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"cannot build the wheel (python -m build --wheel {root}): {lines[-1] if lines else '?'}; "
                           f"or give --wheel")
    return wheels[-1]


def run_init(args: argparse.Namespace) -> int:
    from replicast.cluster.init_file import cluster_document, write_cluster_file
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if not hosts:
        raise ClusterError("--hosts: give at least one host")
    doc = cluster_document(hosts, args.query, args.out, kmax=args.kmax, placement=args.placement,
                           base_port=args.base_port, key=args.key, broker_port=args.broker_port)
    write_cluster_file(args.out, doc)
    print(f"wrote {args.out}: {len(hosts)} node(s), kmax {args.kmax}, placement {args.placement}; "
          f"export REPLICAST_SECRET, then: replicast cluster up {args.out}")
    return 0
