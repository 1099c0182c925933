"""``replicast cluster up|down``: a local cluster of node processes on loopback, for trying things out.

``up`` starts the embedded amqtt broker (unless the cluster file names a broker URL), one
``replicast node`` process per node, and the cluster file's ``[[sources]]``; it waits until every
node reports ready on its metrics endpoint, records the processes in ``RUN_DIR/state.json`` and
returns.  ``down`` stops exactly those processes (SIGTERM, then SIGKILL after a grace period).

With ``--emulate-wan TRACE`` every node runs in its own network namespace with the trace's delays
between them (:mod:`engine.wan`); ``down`` also deletes those namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from engine.cluster_config import ClusterConfig, load_cluster
from engine.wan import WanPlan, emulated_cluster_file, netns_command, plan, probe, run_tag, setup, teardown
from operators.errors import ReplicastError

DEFAULT_RUN_DIR = Path(".replicast/cluster")


class ClusterError(ReplicastError):
    """The local cluster cannot be started or stopped."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="start or stop a local cluster of nodes on loopback")
    commands = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = commands.add_parser("up", help="start the broker, the nodes and the sources of a cluster file")
    up.add_argument("cluster", type=Path, help="cluster file (TOML)")
    up.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help=f"logs and state (default {DEFAULT_RUN_DIR})")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the nodes to be ready")
    up.add_argument("--emulate-wan", metavar="TRACE", help="run each node in its own network namespace, with "
                    "the one-way delays of TRACE (e.g. seattle) between them (tc netem; needs root)")
    up.add_argument("--trace-time", type=float, default=0.0, metavar="SECONDS",
                    help="with --emulate-wan: the trace frame to take the delays from (default 0)")
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
    if state_file.exists() and any(_alive(p) for p in json.loads(state_file.read_text())["processes"]):
        raise ClusterError(f"{run_dir}: a cluster is already running there; run 'replicast cluster down' first")
    run_dir.mkdir(parents=True, exist_ok=True)
    source_dir = config.path.parent.resolve()
    wan = None
    if args.emulate_wan is not None:
        config, wan = _emulate_wan(config, args, run_dir, state_file)
    processes: list[dict] = []
    try:
        if config.broker == "embedded":
            host, port = config.mqtt_address()
            processes.append(_spawn("broker", [sys.executable, "-m", "engine.aio.broker", "--host", host, "--port",
                                               str(port)], run_dir, wan and wan.hub))
            if wan is None:
                _wait_port(host, port, args.timeout, "the embedded MQTT broker", processes[-1])
        for name in config.nodes:
            processes.append(_spawn(name, [sys.executable, "-m", "engine.cli", "node", "--config",
                                           str(config.path.resolve()), "--name", name, "--log-json"], run_dir,
                                    wan and wan.namespaces[name]))
        _write_state(state_file, processes, wan)
        deadline = time.monotonic() + args.timeout
        if wan is None:
            for process, name in zip(processes[-len(config.nodes):], config.nodes):
                _wait_ready(config, name, deadline, process)
        else:
            _wait_ready_in(wan.hub, config, args.timeout, processes)
        sources = []
        for i, source in enumerate(config.sources):
            command = [_expand(a, config, source.node, source_dir) for a in source.command]
            sources.append(_spawn(f"source-{source.node}-{i}", command, run_dir, wan and wan.namespaces[source.node]))
        processes.extend(sources)
        _write_state(state_file, processes, wan)
        _check_sources_started(sources)
    except BaseException:
        _stop(processes, grace=2.0)
        if wan is not None:
            teardown(wan)
        state_file.unlink(missing_ok=True)
        raise
    host, port = config.mqtt_address()
    print(f"cluster up: {len(config.nodes)} nodes, broker {host}:{port}, logs in {run_dir}/")
    if wan is not None:
        print(f"  wide-area emulation ({args.emulate_wan} at {args.trace_time:g} s): namespaces {wan.hub}, "
              + ", ".join(wan.namespaces.values()))
        print(f"  watch:  ip netns exec {wan.hub} mosquitto_sub -h {host} -p {port} -t 'replicast/out/#' -v")
    else:
        print(f"  watch:  mosquitto_sub -h {host} -p {port} -t 'replicast/out/#' -v")
    print(f"  stop:   replicast cluster down --run-dir {run_dir}")
    return 0


def _emulate_wan(config: ClusterConfig, args: argparse.Namespace, run_dir: Path, state_file: Path):
    """Probe, plan and build the namespaces; returns the cluster config as the nodes will see it."""
    reason = probe()
    if reason is not None:
        raise ClusterError(reason)
    from traces.store import TraceStore
    try:
        trace = TraceStore.open(args.emulate_wan)
    except Exception as error:                 # unknown name, unreadable directory: one clear line
        raise ClusterError(f"--emulate-wan {args.emulate_wan}: cannot open the trace: {error}") from None
    t_us = round(args.trace_time * 1e6)
    if not 0 <= t_us < trace.duration_us:
        raise ClusterError(f"--trace-time {args.trace_time:g}: the trace {args.emulate_wan} covers "
                           f"0 … {trace.duration_us / 1e6:g} s")
    wan = plan(list(config.nodes), lambda i, j: trace.one_way_us(i, j, t_us), trace.n_nodes, run_tag(run_dir))
    emulated = emulated_cluster_file(config.path, wan, run_dir / "cluster-wan.toml")
    _write_state(state_file, [], wan)           # so 'down' can clean up even if 'up' dies half-way
    try:
        setup(wan)
        return load_cluster(emulated), wan
    except BaseException:
        teardown(wan)
        state_file.unlink(missing_ok=True)
        raise


def _wait_ready_in(ns: str, config: ClusterConfig, timeout: float, processes: list[dict]) -> None:
    """Wait for every node's readiness from inside namespace ``ns`` (the host cannot reach the nodes)."""
    targets = []
    for spec in config.nodes.values():
        if spec.metrics_port is None:
            raise ClusterError(f"{config.path}: node {spec.name}: --emulate-wan needs a metrics_port on every node")
        targets.append(f"{spec.host}:{spec.metrics_port}")
    result = subprocess.run(netns_command(ns, [sys.executable, "-m", "engine.wan", "ready", str(timeout), *targets]),
                            capture_output=True, text=True, env=_env(), timeout=timeout + 30)
    if result.returncode != 0:
        dead = [p["name"] for p in processes if not _running(p)]
        raise ClusterError(f"nodes not ready within {timeout:.0f} s ({result.stderr.strip()}"
                           + (f"; exited: {', '.join(dead)}" if dead else "") + f"); see the logs in {processes[0]['log']}")


def _expand(arg: str, config: ClusterConfig, node: str, directory: Path) -> str:
    host, port = config.mqtt_address()
    nodes = ",".join(f"{n.name}={n.host}:{n.port}" for n in config.nodes.values())
    return arg.format(python=sys.executable, dir=directory, broker_host=host, broker_port=port,
                      node=node, nodes=nodes, punctuation_ms=config.punctuation_ms)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                      os.environ.get("PYTHONPATH")])))


def _spawn(name: str, command: list[str], run_dir: Path, netns: str | None = None) -> dict:
    """Start ``command`` (inside network namespace ``netns`` if given; ``ip netns exec`` execs it, so
    the recorded pid and command line are the command's own)."""
    log = (run_dir / f"{name}.log").open("ab")
    process = subprocess.Popen(command if netns is None else netns_command(netns, command), stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=_env())
    _POPEN[process.pid] = process
    return {"name": name, "pid": process.pid, "command": command, "log": str(run_dir / f"{name}.log")}


#: Processes started by this command, by pid: right after fork /proc still shows our own command line.
_POPEN: dict[int, subprocess.Popen] = {}


def _running(process: dict) -> bool:
    popen = _POPEN.get(process["pid"])
    return popen.poll() is None if popen is not None else _alive(process)


def _wait_port(host: str, port: int, timeout: float, what: str, process: dict) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _running(process):
            raise ClusterError(f"{what} exited at start; see {process['log']}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise ClusterError(f"{what} did not listen on {host}:{port} within {timeout:.0f} s; see {process['log']}")


#: How long a source must survive after start for 'cluster up' to call it started.
SOURCE_GRACE_S = 1.0


def _check_sources_started(sources: list[dict]) -> None:
    """Fail 'up' when a source dies at once (a typo in its command, a missing script): otherwise the
    cluster looks healthy and simply never produces anything.  A source that finishes successfully
    within the grace period (it sent a file and exited 0) is fine."""
    deadline = time.monotonic() + SOURCE_GRACE_S
    while time.monotonic() < deadline and any(_running(p) for p in sources):
        time.sleep(0.05)
    for process in sources:
        popen = _POPEN.get(process["pid"])
        if popen is not None and popen.poll() not in (None, 0):
            tail = Path(process["log"]).read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            raise ClusterError(f"source {process['name']} exited with status {popen.returncode} at start: "
                               f"{tail[0]} (command: {' '.join(process['command'])})")


def _wait_ready(config: ClusterConfig, name: str, deadline: float, process: dict) -> None:
    spec = config.nodes[name]
    while time.monotonic() < deadline:
        if not _running(process):
            raise ClusterError(f"node {name} exited at start; see {process['log']}")
        if spec.metrics_port is None:
            try:
                socket.create_connection((spec.host, spec.port), timeout=0.5).close()
                return
            except OSError:
                pass
        elif node_ready(spec.host, spec.metrics_port):
            return
        time.sleep(0.1)
    raise ClusterError(f"node {name} was not ready in time; see {process['log']}")


def node_ready(host: str, metrics_port: int) -> bool:
    """Whether the node whose metrics are at ``host:metrics_port`` reports ``replicast_ready 1``."""
    try:
        with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=1) as page:
            return b"\nreplicast_ready 1.0" in page.read()
    except OSError:
        return False


def _write_state(path: Path, processes: list[dict], wan: WanPlan | None = None) -> None:
    state = {"processes": processes}
    if wan is not None:
        state["wan"] = wan.to_json()
    path.write_text(json.dumps(state, indent=1))


# -- down -----------------------------------------------------------------------------------------
def run_down(args: argparse.Namespace) -> int:
    state_file = args.run_dir / "state.json"
    if not state_file.exists():
        raise ClusterError(f"{args.run_dir}: no cluster state here (was 'replicast cluster up' run with this --run-dir?)")
    state = json.loads(state_file.read_text())
    stopped = _stop(state["processes"], args.grace)
    deleted = teardown(WanPlan.from_json(state["wan"])) if "wan" in state else []
    state_file.unlink()
    print(f"cluster down: stopped {stopped} process(es)" + (f", deleted {len(deleted)} namespace(s)" if deleted else ""))
    return 0


def _alive(process: dict) -> bool:
    """Whether ``process`` still runs *and* is the process we started (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{process['pid']}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{process['pid']}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and [c.decode() for c in cmdline if c] == process["command"]


def _stop(processes: list[dict], grace: float) -> int:
    live = [p for p in reversed(processes) if _running(p)]
    for process in live:
        os.kill(process["pid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p) for p in live):
        for p in live:
            _reap(p)
        time.sleep(0.05)
    for process in live:
        if _running(process):
            os.kill(process["pid"], signal.SIGKILL)
        _reap(process)
    return len(live)


def _reap(process: dict) -> None:
    try:
        os.waitpid(process["pid"], os.WNOHANG)
    except ChildProcessError:
        pass
