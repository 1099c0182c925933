"""Wide-area emulation with network namespaces and netem (``cluster up --emulate-wan TRACE --wan-via netem``).

Every node runs in its own network namespace; a *hub* namespace holds a bridge (and the MQTT
broker) and one veth pair joins each node namespace to it.  Inside a node namespace, egress on
``eth0`` goes through an HTB root with one class per other node, selected by a u32 filter on the
destination address; each class ends in a ``netem`` qdisc that delays by the trace's one-way delay
``src -> dst`` at the chosen trace time (an outage is ``loss 100%``).  Traffic to the hub (broker,
readiness probes) is not delayed.  So the RTT between two nodes is the trace's
``one_way(a, b) + one_way(b, a)``, like the simulator's network.

Everything lives in namespaces this module creates (addresses from 10.231.0.0/24 exist only
there); tearing down deletes the namespaces, which deletes every link in them.  Needs root,
``ip``/``tc`` (iproute2) and a kernel with ``sch_netem``, ``sch_htb``, ``cls_u32``, veth and
bridge; :func:`probe` says in one line what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from replicast.cluster.cluster_file import write_derived
from replicast.operators.errors import ReplicastError

SUBNET = "10.231.0"
HUB_ADDRESS = f"{SUBNET}.1"
MAX_NODES = 240


class WanError(ReplicastError):
    """Wide-area emulation cannot be set up or torn down."""


@dataclass(frozen=True)
class WanPlan:
    """Namespaces, addresses and one-way delays (µs, None = outage) for one emulated cluster."""
    hub: str                                    # namespace holding the bridge and the broker
    namespaces: dict[str, str]                  # node -> namespace
    addresses: dict[str, str]                   # node -> IPv4 address
    delays_us: dict[tuple[str, str], int | None]

    def to_json(self) -> dict:
        return {"hub": self.hub, "namespaces": self.namespaces, "addresses": self.addresses,
                "delays_us": [[a, b, d] for (a, b), d in self.delays_us.items()]}

    @classmethod
    def from_json(cls, doc: dict) -> "WanPlan":
        return cls(doc["hub"], doc["namespaces"], doc["addresses"], {(a, b): d for a, b, d in doc["delays_us"]})


def plan(nodes: list[str], one_way_us, n_trace_nodes: int, tag: str) -> WanPlan:
    """Node ``k`` (cluster file order) is trace node ``k``; ``one_way_us(src, dst)`` gives delays."""
    if len(nodes) > min(n_trace_nodes, MAX_NODES):
        raise WanError(f"the cluster has {len(nodes)} nodes but the trace has {n_trace_nodes} "
                       f"(emulation supports at most {MAX_NODES})")
    namespaces = {n: f"replicast-{tag}-{i}" for i, n in enumerate(nodes)}
    addresses = {n: f"{SUBNET}.{10 + i}" for i, n in enumerate(nodes)}
    delays = {(a, b): one_way_us(i, j) for i, a in enumerate(nodes) for j, b in enumerate(nodes) if a != b}
    return WanPlan(f"replicast-{tag}-hub", namespaces, addresses, delays)


def run_tag(run_dir: Path) -> str:
    """A short tag naming one run directory's namespaces (two clusters never share one)."""
    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise WanError(f"'{' '.join(command)}' failed: {(result.stderr or result.stdout).strip()}")


def probe() -> str | None:
    """None if namespaces, veth, HTB, u32 and netem all work here, else the reason in one line."""
    if os.geteuid() != 0:
        return "wide-area emulation needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"wide-area emulation needs '{tool}' (apt-get install iproute2)"
    ns = f"replicast-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        _run("tc", "-n", ns, "qdisc", "add", "dev", "p0", "root", "handle", "1:", "htb", "default", "1")
        _run("tc", "-n", ns, "class", "add", "dev", "p0", "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit")
        _run("tc", "-n", ns, "filter", "add", "dev", "p0", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{HUB_ADDRESS}/32", "flowid", "1:10")
        try:
            _run("tc", "-n", ns, "qdisc", "add", "dev", "p0", "parent", "1:10", "handle", "10:", "netem",
                 "delay", "1ms")
        except WanError as error:
            return (f"wide-area emulation needs the netem qdisc, which kernel {platform.release()} does not "
                    f"provide ({str(error).rsplit(': ', 1)[-1].rstrip('.')}; try 'modprobe sch_netem')")
    except WanError as error:
        return f"wide-area emulation is not possible here: {error}"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    return None


def setup(wan: WanPlan, *, netem: bool = True) -> None:
    """Create the hub, one namespace per node, the links and the per-destination delays (without
    ``netem``: the same classes and filters, no delay — for checking the topology where the kernel
    has no netem)."""
    _run("ip", "netns", "add", wan.hub)
    _run("ip", "-n", wan.hub, "link", "set", "lo", "up")
    _run("ip", "-n", wan.hub, "link", "add", "br0", "type", "bridge")
    _run("ip", "-n", wan.hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
    _run("ip", "-n", wan.hub, "link", "set", "br0", "up")
    nodes = list(wan.namespaces)
    for i, node in enumerate(nodes):
        ns, port = wan.namespaces[node], f"v{i}"
        _run("ip", "netns", "add", ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", wan.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "-n", wan.hub, "link", "set", port, "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{wan.addresses[node]}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1")
        _run("tc", "-n", ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit")
        for j, other in enumerate(nodes):
            if other == node:
                continue
            classid, delay = f"{10 + j:x}", wan.delays_us[(node, other)]
            _run("tc", "-n", ns, "class", "add", "dev", "eth0", "parent", "1:", "classid", f"1:{classid}",
                 "htb", "rate", "10gbit")
            impairment = ["loss", "100%"] if delay is None else ["delay", f"{delay}us"]
            if netem:
                _run("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "parent", f"1:{classid}", "handle", f"{classid}:",
                     "netem", *impairment, "limit", "100000")
            _run("tc", "-n", ns, "filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
                 "u32", "match", "ip", "dst", f"{wan.addresses[other]}/32", "flowid", f"1:{classid}")


def teardown(wan: WanPlan) -> list[str]:
    """Delete the namespaces of ``wan`` that exist (their links go with them); returns those deleted."""
    existing = set(namespaces())
    deleted = []
    for ns in [*wan.namespaces.values(), wan.hub]:
        if ns in existing:
            _run("ip", "netns", "del", ns)
            deleted.append(ns)
    return deleted


def namespaces() -> list[str]:
    """The names of the network namespaces ``ip netns`` knows."""
    if shutil.which("ip") is None:
        return []
    result = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [entry["name"] for entry in json.loads(result.stdout or "[]")]


def netns_command(ns: str, command: list[str]) -> list[str]:
    """``command`` run inside namespace ``ns`` (``ip netns exec`` execs it: the pid and cmdline are its own)."""
    return ["ip", "netns", "exec", ns, *command]


def emulated_cluster_file(source: Path, wan: WanPlan, out: Path) -> Path:
    """Write ``source`` with every node at its namespace address and the broker in the hub to ``out``."""
    import tomllib
    broker = tomllib.loads(source.read_text(encoding="utf-8")).get("mqtt", {}).get("broker", "embedded")
    if broker != "embedded":
        raise WanError(f"{source}: --emulate-wan with netem runs the embedded broker in the hub namespace; "
                       f"set [mqtt] broker = \"embedded\" (got {broker!r})")
    return write_derived(source, out, addresses={n: (a, None) for n, a in wan.addresses.items()},
                         mqtt_host=HUB_ADDRESS, by="replicast cluster up --emulate-wan")
