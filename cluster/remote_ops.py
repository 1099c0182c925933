"""``replicast cluster down|status|restart`` for a cluster ``cluster up`` started on ssh hosts
(:mod:`cluster.remote`): each reconnects to the hosts ``RUN_DIR/state.json`` records and asks their
host agents (:mod:`cluster.host_agent`) to stop, probe or start processes.  See docs/cluster.md.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from replicast.cluster.processes import ClusterError, read_state, write_state
from replicast.cluster.remote import NodeState, follow_log, launch, probe, unique, wait_ready
from replicast.cluster.ssh_hosts import Host, connect_all
from replicast.engine.cluster_config import SshSpec


def _hosts_from_state(processes: list[dict]) -> dict[str, Host]:
    """A :class:`Host` per process name, rebuilt from what ``up`` recorded (one per destination and dir)."""
    by_key: dict[tuple, Host] = {}
    hosts = {}
    for p in processes:
        ssh = SshSpec(**{k: (Path(v) if k in ("key", "known_hosts") and v is not None else v)
                         for k, v in p["ssh"].items()})
        key = (ssh.destination, ssh.dir)
        host = by_key.setdefault(key, Host(ssh, []))
        if p["node"] not in host.nodes:
            host.nodes.append(p["node"])
        hosts[p["name"]] = host
    return hosts


def _save_state(run_dir: Path, state: dict, remote: list[dict]) -> None:
    extra = {k: v for k, v in state.items() if k not in ("processes", "remote")}
    write_state(run_dir / "state.json", state.get("processes", []), **extra, remote=remote)


def load_remote_state(run_dir: Path) -> dict:
    state_file = run_dir / "state.json"
    if not state_file.exists():
        raise ClusterError(f"{run_dir}: no cluster state here (was 'replicast cluster up' run with this --run-dir?)")
    return read_state(state_file)


async def down(run_dir: Path, state: dict, grace: float, out=print) -> int:
    """Stop every recorded process on every host; a host that cannot be reached (or whose agent
    fails) is named, and its processes are kept in ``state.json`` for the next ``down``."""
    processes = state["remote"]
    hosts = _hosts_from_state(processes)

    async def stop_on(host: Host) -> int:
        try:
            await host.connect()
            mine = [p for p in processes if hosts[p["name"]] is host]
            return (await host.agent("stop", {"processes": mine, "grace": grace}))["stopped"]
        finally:
            host.close()

    every = unique(hosts)
    results = await asyncio.gather(*(stop_on(h) for h in every), return_exceptions=True)
    stopped = sum(r for r in results if isinstance(r, int))
    failed = [(h, r) for h, r in zip(every, results) if isinstance(r, BaseException)]
    if failed:
        lost = {id(h) for h, _ in failed}
        _save_state(run_dir, state, [p for p in processes if id(hosts[p["name"]]) in lost])
        raise ClusterError(f"stopped {stopped} process(es); {failed[0][1]} (its processes stay in {run_dir}/state.json)")
    (run_dir / "state.json").unlink()
    out(f"cluster down: stopped {stopped} process(es) on {len(every)} host(s)")
    return 0


async def status(state: dict, out=print) -> int:
    """One line per process: name, state, host, pid and where its metrics are."""
    processes = state["remote"]
    hosts = _hosts_from_state(processes)
    try:
        await connect_all(unique(hosts))
        states = await probe(hosts, processes)
    finally:
        for host in unique(hosts):
            host.close()
    for p, s in zip(processes, states):
        where = f"http://{p['address']}:{p['metrics_port']}/metrics" if p["metrics_port"] else ""
        last = f"  last log line: {s['last']}" if s["state"] == NodeState.EXITED.value else ""
        out(f"{p['name']:<16} {s['state']:<9} {hosts[p['name']].ssh.destination:<24} pid {p['pid']:<8} {where}{last}")
    return 0 if all(s["state"] != NodeState.EXITED.value for s in states) else 1


async def restart(run_dir: Path, state: dict, node: str, timeout: float, grace: float, out=print) -> int:
    """Stop node ``node`` if it runs, start it again with the same command and state directory (its
    replicas rejoin by snapshot, docs/lifecycle.md) and wait until it is ready."""
    processes = state["remote"]
    matches = [p for p in processes if p["name"] == node and p["kind"] == "node"]
    if not matches:
        names = [p["name"] for p in processes if p["kind"] == "node"]
        raise ClusterError(f"no node {node!r} in {run_dir}/state.json (nodes: {', '.join(names)})")
    old = matches[0]
    host = _hosts_from_state([old])[node]
    await host.connect()
    follower = None
    try:
        stopped = (await host.agent("stop", {"processes": [old], "grace": grace}))["stopped"]
        size = await host.run(f"stat -c %s {shlex.quote(old['log'])} 2>/dev/null || echo 0", what="reading the log")
        new = await launch(host, node, old["argv"], kind="node", environment=state.get("environment", []), node=node)
        new.update(address=old["address"], metrics_port=old["metrics_port"])
        processes[processes.index(old)] = new
        _save_state(run_dir, state, processes)
        follower = asyncio.create_task(follow_log(host, new, out, from_byte=int(size)))
        await wait_ready({node: host}, [new], timeout)
    finally:
        if follower is not None:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        host.close()
    out(f"cluster restart: {node} {'stopped and ' if stopped else ''}started again on {host.ssh.destination} "
        f"(pid {new['pid']}), ready")
    return 0




async def follow(state: dict, out=print) -> int:
    """Print every remote process's new log lines, prefixed by its name, until Ctrl-C (which stops
    following, not the cluster)."""
    processes = state["remote"]
    hosts = _hosts_from_state(processes)
    await connect_all(unique(hosts))
    out("following the logs; Ctrl-C stops following (the cluster keeps running)")
    try:
        await asyncio.gather(*(follow_log(hosts[p["name"]], p, out, from_byte=None) for p in processes))
    finally:
        for host in unique(hosts):
            host.close()
    return 0
