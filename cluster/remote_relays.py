"""Wide-area delays for a cluster on ssh hosts: the project's delay relays (:mod:`cluster.relay`),
run on the hosts themselves (``cluster up --emulate-wan TRACE`` with ``ssh = {…}`` nodes).

Each host runs one relay process for the links its nodes dial: for node ``a`` on it and every other
node ``b``, a relay listens on ``a``'s own address and forwards to ``b``'s real address, delaying
bytes ``a -> b`` by the trace's one-way delay ``a -> b`` and bytes back by ``b -> a`` — the same
relays, plans and link delays as on one machine (docs/node.md), only spread over the hosts.  Node
``a`` then reads a cluster file of its own, ``DIR/cluster/cluster-a.toml``, in which every peer is
at its relay port on ``a``'s host, so every connection ``a`` makes crosses ``a``'s relay.  The
relays open the trace by name on the host: the hosts need the ``sim`` extra (pyarrow, numpy).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from replicast.cluster.processes import ClusterError
from replicast.cluster.relay import RelayLink, RelayPlan
from replicast.cluster.ssh_hosts import Host


@dataclass(frozen=True)
class RemoteWan:
    """What the relays follow: a shipped trace (by name: the hosts open their own copy), the trace
    time at start (µs) and which trace node each cluster node is."""
    trace: str
    t_us: int
    indexes: dict[str, int]


async def start_host_relays(cluster, host: Host, wan: RemoteWan, base_file: Path, timeout: float) -> dict[str, str]:
    """Start ``host``'s relay process (through ``cluster``, which records and follows it), wait for its
    ports and push its nodes' cluster files; returns each of its nodes' remote cluster file."""
    specs = cluster.config.nodes
    links = [RelayLink(a, b, wan.indexes[a], wan.indexes[b], specs[a].host, specs[b].host, specs[b].port)
             for a in host.nodes for b in specs if b != a]
    name = f"relays-{host.nodes[0]}"
    plan = RelayPlan(wan.trace, wan.t_us, links).write(cluster.run_dir / f"{name}.json")
    await host.put({f"cluster/{name}.json": plan})
    ports_file = host.path("cluster", f"{name}.ports")
    await host.run(f"rm -f {shlex.quote(ports_file)}", what="cannot remove an old relay ports file")
    process = await cluster.start(host, name, [host.path("venv", "bin", "python"), "-m", "replicast.cluster.relay",
                                               host.path("cluster", f"{name}.json")], kind="relay", node=host.nodes[0])
    ports = await _wait_for_ports(cluster, host, process, ports_file, timeout)
    base = tomllib.loads(base_file.read_text(encoding="utf-8"))
    files = {}
    for a in host.nodes:
        doc = json.loads(json.dumps(base))                        # a deep copy of plain TOML data
        for table in doc["nodes"]:
            if table["name"] != a:
                table["host"], table["port"] = specs[a].host, ports[f"{a}>{table['name']}"]
        local = cluster.run_dir / f"cluster-{a}.toml"
        local.write_bytes(f"# pushed by 'replicast cluster up --emulate-wan {wan.trace}': node {a}'s peers at "
                          f"its host's delay relays\n".encode() + tomli_w.dumps(doc).encode())
        await host.put({f"cluster/cluster-{a}.toml": local}, mode=0o600)
        files[a] = host.path("cluster", f"cluster-{a}.toml")
    return files


async def _wait_for_ports(cluster, host: Host, process: dict, ports_file: str, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        found = await host.run(f"cat {shlex.quote(ports_file)} 2>/dev/null || true", what="reading the relay ports")
        if found.strip():
            return json.loads(found)["ports"]
        await cluster.blame_exited([process], "exited at start")
        if time.monotonic() > deadline:
            raise host.fail(f"the delay relays did not start within {timeout:.0f} s; see {process['log']}")
        await asyncio.sleep(0.2)


def remote_wan(config, trace_name: str, trace_time_s: float, trace_nodes_spec: str, wan_via: str) -> RemoteWan:
    """``--emulate-wan`` for ssh hosts: relays only (netem namespaces are this machine's), a trace by name."""
    from replicast.cluster.emulation import open_trace, trace_nodes
    if wan_via == "netem":
        raise ClusterError("--wan-via netem makes namespaces on this machine; nodes on ssh hosts take "
                           "--wan-via relay (delay relays on the hosts)")
    if Path(trace_name).exists():
        raise ClusterError(f"--emulate-wan {trace_name}: on ssh hosts, name a shipped trace (e.g. seattle): the "
                           f"hosts open their own copy")
    trace, t_us = open_trace(trace_name, trace_time_s)
    return RemoteWan(trace_name, t_us, trace_nodes(config, trace, trace_nodes_spec))
