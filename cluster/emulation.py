"""``cluster up --emulate-wan TRACE``: put a trace's wide-area delays between the nodes of a local cluster.

Two ways, chosen by ``--wan-via``:

* ``netem`` (:mod:`cluster.netem`): every node in its own network namespace, kernel qdiscs delay
  by one trace frame.  Needs root and a kernel with netem.
* ``relay`` (:mod:`cluster.relay`): the nodes stay on loopback and every node pair's connection
  crosses a user-space relay that follows the trace over time.  Needs nothing from the kernel.

``auto`` (the default) takes netem where :func:`cluster.netem.probe` says it works, relays
otherwise.  Which trace node each cluster node is comes from ``--trace-nodes``
(:func:`trace_nodes`).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from replicast.cluster import netem
from replicast.cluster.cluster_file import write_derived
from replicast.cluster.processes import ClusterError, blame_dead, exit_status, last_log_line, running, spawn, write_state
from replicast.cluster.relay import RelayLink, RelayPlan, ports_path
from replicast.engine.cluster_config import ClusterConfig, load_cluster

VIAS = ("auto", "netem", "relay")


class Emulation:
    """What ``cluster up`` needs from a way of emulating: per-node cluster files and command
    prefixes, extra processes, readiness, what to print, and how to undo it."""

    via: str
    processes: list[dict]
    hint: str                       # why nodes may never be ready (links in an outage), or ""

    def config_path(self, node: str) -> Path: ...
    def wrap(self, node: str | None) -> list[str] | None: ...
    def state(self) -> dict: ...
    def describe(self) -> list[str]: ...
    def teardown(self) -> None: ...


def open_trace(name: str, trace_time_s: float):
    """The trace and the trace time in µs, or a one-line :class:`ClusterError`."""
    from replicast.traces.store import TraceStore
    try:
        trace = TraceStore.open(name)
    except Exception as error:                 # unknown name, unreadable directory: one clear line
        raise ClusterError(f"--emulate-wan {name}: cannot open the trace: {error}") from None
    t_us = round(trace_time_s * 1e6)
    if not 0 <= t_us < trace.duration_us:
        raise ClusterError(f"--trace-time {trace_time_s:g}: the trace {name} covers 0 … {trace.duration_us / 1e6:g} s")
    return trace, t_us


def trace_nodes(config: ClusterConfig, trace, spec: str) -> dict[str, int]:
    """Cluster node -> trace node index: ``first`` (node k is trace node k), ``reliable`` (the nodes
    with the fewest missing samples, as the simulator's ``servers = n``, in trace order) or a
    comma-separated list of trace node names, one per cluster node in file order."""
    nodes = list(config.nodes)
    if len(nodes) > trace.n_nodes:
        raise ClusterError(f"the cluster has {len(nodes)} nodes but the trace has {trace.n_nodes}")
    if spec == "first":
        return {name: i for i, name in enumerate(nodes)}
    if spec == "reliable":
        return dict(zip(nodes, trace.reliable_nodes(len(nodes))))
    names = [n.strip() for n in spec.split(",")]
    index = {name: i for i, name in enumerate(trace.nodes)}
    unknown = [n for n in names if n not in index]
    if unknown or len(names) != len(nodes) or len(set(names)) != len(names):
        raise ClusterError(f"--trace-nodes {spec}: expected first, reliable or {len(nodes)} distinct trace node "
                           f"names (e.g. {', '.join(trace.nodes[:3])})" + (f"; unknown: {unknown}" if unknown else ""))
    return {name: index[n] for name, n in zip(nodes, names)}


def outages_at_start(trace, indexes: dict[str, int], t_us: int) -> str:
    """The links in an outage at trace time ``t_us`` and when each comes back, or ""."""
    cut = []
    for a, i in indexes.items():
        for b, j in indexes.items():
            if a != b and trace.one_way_us(i, j, t_us) is None:
                ends = [end for start, end in trace.outages(i, j) if start <= t_us < end]
                cut.append(f"{a}>{b} until {ends[0] / 1e6:g} s" if ends else f"{a}>{b}")
    return "" if not cut else ("the trace has links in an outage at the start: " + ", ".join(cut[:6])
                               + (" …" if len(cut) > 6 else "") + " (try --trace-nodes reliable or another --trace-time)")


def choose(via: str) -> tuple[str, str | None]:
    """``(netem or relay, why relays were chosen or None)``; ``--wan-via netem`` without netem fails."""
    if via == "relay":
        return "relay", None
    reason = netem.probe()
    if reason is None:
        return "netem", None
    if via == "netem":
        raise ClusterError(reason)
    return "relay", reason


class NetemEmulation(Emulation):
    via = "netem"

    def __init__(self, config: ClusterConfig, trace, indexes: dict[str, int], t_us: int, run_dir: Path,
                 state_file: Path):
        self.hint = outages_at_start(trace, indexes, t_us)
        k = list(indexes.values())
        self.plan = netem.plan(list(config.nodes), lambda i, j: trace.one_way_us(k[i], k[j], t_us), trace.n_nodes,
                               netem.run_tag(run_dir))
        self.path = netem.emulated_cluster_file(config.path, self.plan, run_dir / "cluster-wan.toml")
        self.config = load_cluster(self.path)
        self.processes = []
        write_state(state_file, [], **self.state())     # so 'down' can clean up even if 'up' dies half-way
        try:
            netem.setup(self.plan)
        except BaseException:
            netem.teardown(self.plan)
            state_file.unlink(missing_ok=True)
            raise

    def config_path(self, node: str) -> Path:
        return self.path

    def wrap(self, node: str | None) -> list[str]:
        return netem.netns_command(self.plan.namespaces[node] if node else self.plan.hub, [])

    def state(self) -> dict:
        return {"wan": self.plan.to_json()}

    def describe(self) -> list[str]:
        host, port = self.config.mqtt_address()
        return [f"namespaces {self.plan.hub}, " + ", ".join(self.plan.namespaces.values()),
                f"watch:  ip netns exec {self.plan.hub} mosquitto_sub -h {host} -p {port} -t 'replicast/out/#' -v"]

    def teardown(self) -> None:
        netem.teardown(self.plan)

    def wait_ready(self, timeout: float, nodes: dict[str, dict]) -> None:
        """Readiness seen from the hub namespace (the host cannot reach the nodes), watching the
        node processes meanwhile so a node that dies is blamed at once."""
        targets = []
        for spec in self.config.nodes.values():
            if spec.metrics_port is None:
                raise ClusterError(f"{self.config.path}: node {spec.name}: --emulate-wan with netem needs a "
                                   "metrics_port on every node")
            targets.append(f"{spec.host}:{spec.metrics_port}")
        checker = subprocess.Popen(self.wrap(None) + [sys.executable, "-m", "replicast.cluster.readiness", str(timeout),
                                                      *targets], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        try:
            while checker.poll() is None:
                blame_dead(nodes)
                time.sleep(0.1)
        finally:
            if checker.poll() is None:
                checker.kill()
        if checker.returncode != 0:
            blame_dead(nodes)
            raise ClusterError(f"nodes not ready within {timeout:.0f} s ({checker.stderr.read().strip()}); "
                               f"see the logs in {Path(next(iter(nodes.values()))['log']).parent}"
                               + (f"; {self.hint}" if self.hint else ""))


class RelayEmulation(Emulation):
    via = "relay"

    def __init__(self, config: ClusterConfig, trace, indexes: dict[str, int], t_us: int, run_dir: Path,
                 timeout: float, reason: str | None):
        nodes = list(config.nodes)
        self.reason, self.t_us = reason, t_us
        self.hint = outages_at_start(trace, indexes, t_us)
        specs = config.nodes
        links = [RelayLink(a, b, indexes[a], indexes[b], specs[b].host, specs[b].host, specs[b].port)
                 for a in nodes for b in nodes if a != b]
        plan_path = RelayPlan(str(trace.path), t_us, links).write(run_dir / "relays.json")
        ports_file = ports_path(plan_path)
        ports_file.unlink(missing_ok=True)
        self.processes = [spawn("relays", [sys.executable, "-m", "replicast.cluster.relay", str(plan_path)], run_dir)]
        self.ports = _wait_for_ports(ports_file, self.processes[0], timeout)["ports"]
        self.paths = {}
        for a in nodes:
            addresses = {b: (specs[b].host, self.ports[f"{a}>{b}"]) for b in nodes if b != a}
            self.paths[a] = write_derived(config.path, run_dir / f"cluster-{a}.toml", addresses=addresses,
                                          by="replicast cluster up --emulate-wan (relays)")

    def config_path(self, node: str) -> Path:
        return self.paths[node]

    def wrap(self, node: str | None) -> None:
        return None

    def state(self) -> dict:
        return {"relays": self.ports}

    def describe(self) -> list[str]:
        why = f" (netem: {self.reason})" if self.reason else ""
        return [f"{len(self.ports)} delay relays follow the trace from {self.t_us / 1e6:g} s{why}; "
                f"log in {Path(self.processes[0]['log'])}"]

    def teardown(self) -> None:
        pass                                        # the relay process is stopped with the others


def _wait_for_ports(path: Path, process: dict, timeout: float) -> dict:
    import json
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not running(process):
            raise ClusterError(f"the delay relays exited at start (status {exit_status(process)}): "
                               f"{last_log_line(process)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"the delay relays did not start within {timeout:.0f} s; see {process['log']}")
        time.sleep(0.05)
    return json.loads(path.read_text(encoding="utf-8"))
