"""``replicast cluster up|down|status|restart`` for nodes on remote hosts (``ssh = {…}`` in ``[[nodes]]``).

``up`` works like Spark's ``start-all.sh`` or Dask's ``SSHCluster``, over asyncssh, every host at once:

1. connect to every host (one ssh connection each) and check its Python (≥ 3.11) and that every
   port the cluster will listen on there is free (:mod:`cluster.host_agent`);
2. make a venv in the host's directory and install the one wheel (pushed by SFTP; with
   ``--wheelhouse`` its dependencies too, with ``pip --no-index``: hosts need no internet);
3. push the cluster file (without its ``ssh`` tables; mode 0600), the query and the files sources
   name as ``{dir}/…``; the secrets of ``secret_env`` and ``[mqtt] password_env`` go to each node
   through the agent's stdin, as its environment;
4. start the embedded broker (on the host whose node address is ``[mqtt] host``), every node
   detached (``replicast node … --log-json --state-dir DIR/state``, log ``DIR/logs/NODE.log``),
   stream their logs prefixed by node name, wait until every node reports ``replicast_ready 1``,
   then start the sources.

A failure on any host is one line naming the host and what failed, and everything already started
on any host is stopped.  ``RUN_DIR/state.json`` (on the machine running ``cluster up``) records
each process and how to reach its host, for ``down``, ``status`` and ``restart``
(:mod:`cluster.remote_ops`).  See docs/cluster.md.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import os
import shlex
import sys
import time
import tomllib
from dataclasses import asdict
from pathlib import Path

import tomli_w

from replicast.cluster.processes import ClusterError, write_state
from replicast.cluster.remote_relays import RemoteWan, start_host_relays
from replicast.cluster.ssh_hosts import AGENT, Host, HostError, connect_all
from replicast.engine.cluster_config import ClusterConfig

#: replicast needs this Python on every host (tomllib).
MIN_PYTHON = (3, 11)
REMOTE_CLUSTER_FILE = "cluster/cluster.toml"


class NodeState(enum.Enum):
    """A remote process as ``cluster status`` and the readiness wait see it (from the host agent)."""
    STARTING = "starting"          # running, not yet replicast_ready 1
    READY = "ready"                # replicast_ready 1
    RUNNING = "running"            # a process with no metrics endpoint (a source, the broker)
    EXITED = "exited"              # not running (killed, crashed, or stopped)


#: What the readiness wait of ``up`` and ``restart`` accepts between two probes: a process that
#: exits while starting fails the command; a ready node may lose readiness (a peer restarting).
TRANSITIONS = {NodeState.STARTING: {NodeState.STARTING, NodeState.READY, NodeState.EXITED},
               NodeState.READY: {NodeState.READY, NodeState.STARTING, NodeState.EXITED},
               NodeState.RUNNING: {NodeState.RUNNING, NodeState.EXITED},
               NodeState.EXITED: {NodeState.EXITED}}


def is_remote(config: ClusterConfig) -> bool:
    """Whether ``config``'s nodes run on ssh hosts; a cluster is all remote or all local."""
    remote = [n for n, spec in config.nodes.items() if spec.ssh is not None]
    if remote and len(remote) != len(config.nodes):
        local = [n for n in config.nodes if n not in remote]
        raise ClusterError(f"{config.path}: nodes {', '.join(local)} have no ssh = {{…}} but {', '.join(remote)} do: "
                           f"'cluster up' starts a cluster either all on ssh hosts or all here")
    return bool(remote)


def hosts_of(config: ClusterConfig) -> dict[str, Host]:
    """One :class:`Host` per (ssh destination, directory), by node name."""
    by_key: dict[tuple, Host] = {}
    for name, spec in config.nodes.items():
        key = (spec.ssh.destination, spec.ssh.dir)
        if key in by_key:
            by_key[key].nodes.append(name)
        else:
            by_key[key] = Host(spec.ssh, [name])
    return {name: host for host in by_key.values() for name in host.nodes}


def unique(hosts: dict[str, Host]) -> list[Host]:
    return list({id(h): h for h in hosts.values()}.values())


# -- up -------------------------------------------------------------------------------------------
class RemoteCluster:
    """The processes ``up`` starts on remote hosts, and how to stop them all if anything fails."""

    def __init__(self, config: ClusterConfig, run_dir: Path, out=print):
        self.config, self.run_dir, self.out = config, run_dir, out
        self.hosts = hosts_of(config)
        self.processes: list[dict] = []
        self.followers: list[asyncio.Task] = []

    async def up(self, *, wheel: Path, wheelhouse: Path | None, system_site_packages: bool, timeout: float,
                 wan: RemoteWan | None = None) -> None:
        hosts = unique(self.hosts)
        try:
            await connect_all(hosts)
            await _each(hosts, lambda h: self._check(h))
            derived = self._derived_files()
            await _each(hosts, lambda h: self._install(h, wheel, wheelhouse, system_site_packages, derived))
            files: dict[str, str] = {}
            if wan is not None:                 # delay relays on every host; each node its own cluster file
                for found in await _each(hosts, lambda h: start_host_relays(self, h, wan, derived[REMOTE_CLUSTER_FILE],
                                                                             timeout)):
                    files.update(found)
            if self.config.broker == "embedded":
                await self._start_broker()
            for name in self.config.nodes:
                host = self.hosts[name]
                argv = _node_argv(host, name, files.get(name, host.path(REMOTE_CLUSTER_FILE)))
                await self.start(host, name, argv, kind="node", node=name)
            self._save()
            await self.wait_ready([p for p in self.processes if p["kind"] == "node"], timeout)
            for i, source in enumerate(self.config.sources):
                host = self.hosts[source.node]
                await self.start(host, f"source-{source.node}-{i}", self._source_argv(host, source.node, source.command),
                                  kind="source", node=source.node)
            self._save()
            sources = [p for p in self.processes if p["kind"] == "source"]
            if sources:                         # a source that dies at once (a typo) fails 'up', as locally
                await asyncio.sleep(1.0)
                await self.blame_exited(sources, "exited at start")
        except BaseException:
            await self.stop_all()
            (self.run_dir / "state.json").unlink(missing_ok=True)
            raise
        finally:
            for task in self.followers:
                task.cancel()
            await asyncio.gather(*self.followers, return_exceptions=True)
            for host in hosts:
                host.close()

    async def _check(self, host: Host) -> None:
        """The host's Python, and every port the cluster listens on there is free."""
        python = shlex.quote(host.ssh.python)
        try:
            version = await host.run(f"command -v {python} >/dev/null || exit 127; {python} -c "
                                     f"'import sys; print(*sys.version_info[:2])'", what="python")
        except HostError as error:
            raise host.fail(f"no Python: {host.ssh.python!r} is not a program there "
                            f"(install Python ≥ 3.11, or set ssh.python in [[nodes]])") if "exit status 127" in str(error) \
                else error from None
        if tuple(int(v) for v in version.split()) < MIN_PYTHON:
            raise host.fail(f"Python {version.strip().replace(' ', '.')} ({host.ssh.python}) is too old: "
                            f"replicast needs ≥ {'.'.join(map(str, MIN_PYTHON))}")
        await host.put({"host_agent.py": AGENT})
        listeners = [[f"node {n}", key, self.config.nodes[n].host, getattr(self.config.nodes[n], key)]
                     for n in host.nodes for key in ("port", "metrics_port", "source_port")
                     if getattr(self.config.nodes[n], key) is not None]
        if self.config.broker == "embedded" and self.hosts[self._broker_node()] is host:
            listeners.append(["the embedded broker", "[mqtt] port", self.config.broker_host, self.config.broker_port])
        problems = (await host.agent("check", {"listeners": listeners}))["problems"]
        if problems:
            raise host.fail(problems[0])

    def _broker_node(self) -> str:
        for name, spec in self.config.nodes.items():
            if spec.host == self.config.broker_host:
                return name
        raise ClusterError(f"{self.config.path}: [mqtt] broker = \"embedded\" on {self.config.broker_host}, which is no "
                           f"node's host: set [mqtt] host to the node host that should run it, or name a broker "
                           f"(broker = \"mqtt://host:port\")")

    def _derived_files(self) -> dict[str, Path]:
        """The files every host gets under its ``cluster/``: the cluster file as the nodes read it
        there (no ``ssh`` tables; the query, TLS files and the files here that sources name as
        ``{dir}/…`` beside it), by remote name."""
        config = self.config
        doc = tomllib.loads(config.path.read_text(encoding="utf-8"))
        files = {"cluster/query.toml": config.query_path}
        doc["query"] = "query.toml"
        for table in doc["nodes"]:
            table.pop("ssh", None)
        # Certificate files of [tls] and [mqtt] ({node} in a path: each node's own) go to tls/ beside it.
        for table in (doc.get("tls", {}), doc.get("mqtt", {})):
            for key in ("ca", "cert", "key"):
                if isinstance(table.get(key), str):
                    pattern = table[key]
                    table[key] = f"tls/{pattern.lstrip('/')}"
                    for node in config.nodes:
                        local = config.path.parent / pattern.replace("{node}", node)
                        files[f"cluster/tls/{pattern.replace('{node}', node).lstrip('/')}"] = local
        for source in config.sources:          # its script and input files; a path that is not here may be an output
            for arg in source.command:
                local = config.path.parent / arg[len("{dir}/"):]
                if arg.startswith("{dir}/") and local.is_file():
                    files[f"cluster/{arg[len('{dir}/'):]}"] = local
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise ClusterError(f"{config.path}: cannot push {missing[0]} to the hosts: no such file")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        derived = self.run_dir / "cluster.toml"
        derived.write_bytes(f"# pushed by 'replicast cluster up' from {config.path.resolve()}\n".encode()
                            + tomli_w.dumps(doc).encode())
        return {REMOTE_CLUSTER_FILE: derived, **files}

    async def _install(self, host: Host, wheel: Path, wheelhouse: Path | None, system_site: bool,
                       derived: dict[str, Path]) -> None:
        """The venv with ``wheel`` installed (skipped when this very wheel is installed already), then
        the cluster's files; the host's state directory is emptied (a new cluster: no node rejoins)
        and the last cluster's logs are kept in ``logs.previous``."""
        venv_python = shlex.quote(host.path("venv", "bin", "python"))
        stamp = hashlib.sha256(wheel.read_bytes()).hexdigest() + (" system-site-packages" if system_site else "")
        stamp_file = shlex.quote(host.path("venv", "replicast-wheel"))
        installed = await host.run(f"cat {stamp_file} 2>/dev/null || true", what="reading the venv's stamp")
        if installed.strip() != stamp:
            wheels = {f"wheels/{wheel.name}": wheel}
            if wheelhouse is not None:
                wheels.update({f"wheels/{w.name}": w for w in sorted(wheelhouse.glob("*.whl"))})
            await host.put(wheels)
            venv = shlex.quote(host.path("venv"))
            await host.run(f"{shlex.quote(host.ssh.python)} -m venv --clear --without-pip"
                           f"{' --system-site-packages' if system_site else ''} {venv}",
                           what="cannot create the venv")
            await host.run(f"{venv_python} -m pip --version >/dev/null 2>&1 || {venv_python} -m ensurepip -q",
                           what="the venv has no pip (is python3-venv installed?)")
            index = f"--no-index --find-links {shlex.quote(host.path('wheels'))} " if wheelhouse is not None else ""
            await host.run(f"{venv_python} -m pip install -q --disable-pip-version-check {index}"
                           f"{shlex.quote(host.path('wheels', wheel.name))}", what=f"pip install {wheel.name} failed")
            where = await host.run(f"cd / && {venv_python} -c 'import replicast; print(replicast.__file__)'",
                                   what="replicast does not import in the venv")
            if not where.strip().startswith(host.path("venv") + "/"):
                raise host.fail(f"the venv imports replicast from {where.strip()}, not from the installed wheel")
            await host.run(f"echo {shlex.quote(stamp)} > {stamp_file}", what="writing the venv's stamp")
        await host.put({k: v for k, v in derived.items() if k != REMOTE_CLUSTER_FILE})
        await host.put({REMOTE_CLUSTER_FILE: derived[REMOTE_CLUSTER_FILE]}, mode=0o600)   # it may hold the secret
        state, logs = shlex.quote(host.path("state")), shlex.quote(host.path("logs"))
        await host.run(f"rm -rf {state} {logs}.previous && if [ -d {logs} ]; then mv {logs} {logs}.previous; fi",
                       what="cannot empty the state directory and set the last logs aside")

    async def _start_broker(self) -> None:
        node = self._broker_node()
        host = self.hosts[node]
        argv = [host.path("venv", "bin", "python"), "-m", "replicast.engine.aio.broker", "--host",
                self.config.broker_host, "--port", str(self.config.broker_port)]
        await self.start(host, "broker", argv, kind="broker", node=node)

    def _source_argv(self, host: Host, node: str, command: list[str]) -> list[str]:
        """A source's command with its placeholders (docs/node.md) as they are on ``host``."""
        config = self.config
        nodes = ",".join(f"{n.name}={n.host}:{n.port}" for n in config.nodes.values())
        return [arg.format(python=host.path("venv", "bin", "python"), dir=host.path("cluster"), node=node,
                           nodes=nodes, broker_host=config.broker_host, broker_port=config.broker_port,
                           punctuation_ms=config.punctuation_ms) for arg in command]

    async def start(self, host: Host, name: str, argv: list[str], *, kind: str, node: str) -> dict:
        process = await launch(host, name, argv, kind=kind, node=node, config=self.config)
        self.processes.append(process)
        self.followers.append(asyncio.create_task(follow_log(host, process, self.out)))
        return process

    def _save(self) -> None:
        write_state(self.run_dir / "state.json", [], remote=self.processes, cluster=str(self.config.path.resolve()),
                    environment=environment_names(self.config))

    async def wait_ready(self, nodes: list[dict], timeout: float) -> None:
        await wait_ready(self.hosts_by_process(nodes), nodes, timeout)

    def hosts_by_process(self, processes: list[dict]) -> dict[str, Host]:
        return {p["name"]: self.hosts[p["node"]] for p in processes}

    async def blame_exited(self, processes: list[dict], what: str) -> None:
        hosts = self.hosts_by_process(processes)
        for process, state in zip(processes, await probe(hosts, processes)):
            if state["state"] == NodeState.EXITED.value:
                raise hosts[process["name"]].fail(f"{process['name']} {what}: {state['last']}")

    async def stop_all(self) -> None:
        """Stop every process started so far, on every host (the failure path of ``up``)."""
        by_host: dict[int, tuple[Host, list[dict]]] = {}
        for p in self.processes:
            host = self.hosts[p["node"]]
            by_host.setdefault(id(host), (host, []))[1].append(p)
        await asyncio.gather(*(host.agent("stop", {"processes": ps, "grace": 5}) for host, ps in by_host.values()
                               if host.connection is not None), return_exceptions=True)


def _node_argv(host: Host, name: str, cluster_file: str) -> list[str]:
    """The node under its keeper (cluster.keeper: restarted when it stops itself on a bug), as locally."""
    python = host.path("venv", "bin", "python")
    return [python, "-m", "replicast.cluster.keeper", "--name", name, "--", python, "-m", "replicast.engine.cli", "node",
            "--config", cluster_file, "--name", name, "--log-json", "--state-dir", host.path("state")]


def environment_names(config: ClusterConfig) -> list[str]:
    """The environment variables the cluster file takes secrets from: ``secret_env``, ``[mqtt] password_env``."""
    doc = tomllib.loads(config.path.read_text(encoding="utf-8"))
    names = [doc.get("secret_env"), doc.get("mqtt", {}).get("password_env")]
    return [n for n in names if isinstance(n, str)]


async def launch(host: Host, name: str, argv: list[str], *, kind: str, node: str, config: ClusterConfig | None = None,
                 environment: list[str] | None = None) -> dict:
    """Start ``argv`` detached on ``host`` (log ``DIR/logs/NAME.log``); the secrets (``environment``,
    default: the cluster file's) travel in the agent's stdin as environment variables of the
    process, never on a command line nor in a file."""
    names = environment if environment is not None else environment_names(config) if config is not None else []
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise ClusterError(f"${missing[0]} is not set here: {name} takes it from this environment, as 'cluster up' did")
    env = {n: os.environ[n] for n in names}
    log = host.path("logs", f"{name}.log")
    pid = (await host.agent("launch", {"argv": argv, "log": log, "cwd": host.path("cluster"), "env": env}))["pid"]
    spec = config.nodes[node] if config is not None else None
    return {"name": name, "kind": kind, "node": node, "pid": pid, "argv": argv, "log": log,
            "address": spec.host if spec else None, "metrics_port": spec.metrics_port if spec and kind == "node" else None,
            "ssh": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(host.ssh).items()}}


async def follow_log(host: Host, process: dict, out, *, from_byte: int | None = 0) -> None:
    """Print each line of a remote process's log from ``from_byte`` on (None: from its end), as it
    comes, prefixed by its name."""
    start = "-n 0" if from_byte is None else f"-c +{from_byte + 1}"
    try:
        async for line in host.lines(f"tail {start} -F {shlex.quote(process['log'])} 2>/dev/null"):
            out(f"[{process['name']}] {_readable(line)}")
    except Exception as error:               # a broken ssh channel ends following, never the command
        out(f"[{process['name']}] (log no longer followed: {error})")


def _readable(line: str) -> str:
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if not isinstance(entry, dict) or "message" not in entry:
        return line
    level = entry.get("level", "")
    return (f"{level} " if level and level != "INFO" else "") + str(entry["message"])


async def probe(hosts: dict[str, Host], processes: list[dict]) -> list[dict]:
    """The agent's state of each process (``{"state": …, "last": …}``), one agent run per host."""
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(processes):
        groups.setdefault(id(hosts[p["name"]]), []).append(i)
    answers = await asyncio.gather(*(
        hosts[processes[idx[0]]["name"]].agent("probe", {"processes": [
            {"pid": processes[i]["pid"], "argv": processes[i]["argv"], "log": processes[i]["log"],
             "host": processes[i]["address"], "metrics_port": processes[i]["metrics_port"]} for i in idx]})
        for idx in groups.values()))
    states: list[dict] = [{}] * len(processes)
    for idx, answer in zip(groups.values(), answers):
        for i, state in zip(idx, answer["states"]):
            states[i] = state
    return states


async def wait_ready(hosts: dict[str, Host], nodes: list[dict], timeout: float) -> None:
    """Until every node reports ``replicast_ready 1``; a node that exits meanwhile fails at once, by name."""
    deadline = time.monotonic() + timeout
    seen = {p["name"]: NodeState.STARTING for p in nodes}
    while True:
        for p, state in zip(nodes, await probe(hosts, nodes)):
            now = NodeState(state["state"])
            if now not in TRANSITIONS[seen[p["name"]]]:
                raise hosts[p["name"]].fail(f"{p['name']} went from {seen[p['name']].value} to {now.value}")
            seen[p["name"]] = now
            if now is NodeState.EXITED:
                raise hosts[p["name"]].fail(f"node {p['name']} exited at start: {state['last']} (log: {p['log']})")
        waiting = [n for n, s in seen.items() if s is not NodeState.READY]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"not ready within {timeout:.0f} s: "
                               + ", ".join(f"{n} ({hosts[n].ssh.destination})" for n in waiting))
        await asyncio.sleep(0.3)


async def _each(hosts: list[Host], step) -> list:
    """Run ``step(host)`` on every host at once; raise the first failure once all have finished."""
    results = await asyncio.gather(*(step(h) for h in hosts), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def run(coroutine) -> int:
    """Run a remote command; Ctrl-C stops it with one line instead of a traceback."""
    try:
        return asyncio.run(coroutine)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
