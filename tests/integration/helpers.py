"""Real processes for integration tests: free ports, a private mosquitto, clusters via the CLI."""

from __future__ import annotations

import asyncio
import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from replicast.experiments.ports import free_loopback_ports
from replicast.operators.record import CLOSED

ROOT = Path(__file__).resolve().parents[2]

#: cpu -> filter busy (load > 0.5) -> application alerts: the smallest query that crosses a link.
CPU_FILTER_QUERY = """
[[streams]]
name = "cpu"
fields = { server = "str", load = "float" }

[[operators]]
name = "busy"
kind = "filter"
input = "cpu"
where = "load > 0.5"

[[applications]]
name = "alerts"
input = "busy"
"""


def two_node_cluster(directory: Path, *, secret: str, ports: list[int], broker_port: int, placement: str,
                     broker: str = "embedded", top: str = "", node_a: str = "", mqtt: str = "",
                     extra: str = "") -> Path:
    """Write CPU_FILTER_QUERY and a cluster file with nodes a and b into ``directory``; returns its path.

    ``ports`` are a's port, a's metrics port, b's port, b's metrics port; ``placement`` is the body of
    the [placement] table; ``top``, ``node_a``, ``mqtt`` and ``extra`` add lines to the top level,
    a's table, the [mqtt] table and the end of the file.
    """
    (directory / "query.toml").write_text(CPU_FILTER_QUERY)
    path = directory / "cluster.toml"
    path.write_text(f"""query = "query.toml"
secret = "{secret}"
punctuation_ms = 50
{top}
[mqtt]
broker = "{broker}"
port = {broker_port}
{mqtt}
[[nodes]]
name = "a"
port = {ports[0]}
metrics_port = {ports[1]}
{node_a}
[[nodes]]
name = "b"
port = {ports[2]}
metrics_port = {ports[3]}
[placement]
{placement}
{extra}""")
    return path


def authenticate(sock: socket.socket, name: str, secret: bytes, peer: str):
    """The dialer's side of the handshake (engine.handshake) on a connected socket, as node ``name``
    dialling ``peer``.  Returns (sealer, opener, decoder, early) for the authenticated link, ``early``
    the frames that came with the peer's proof; raises WireError if ``peer`` refuses (its proof does
    not check out, or it closes the connection)."""
    from replicast.engine.handshake import Handshake, Role
    shake = Handshake(secret, name, Role.DIALER, os.urandom(16), peers={name, peer}, expected=peer)
    return run_handshake(sock, shake)


def accept_as(sock: socket.socket, name: str, secret: bytes, peers: set[str]):
    """The acceptor's side of the handshake as node ``name`` on an accepted socket; returns
    (peer name, sealer, opener, decoder)."""
    from replicast.engine.handshake import Handshake, Role
    shake = Handshake(secret, name, Role.ACCEPTOR, os.urandom(16), peers=peers | {name})
    sealer, opener, decoder, _ = run_handshake(sock, shake)
    return shake.peer, sealer, opener, decoder


def run_handshake(sock: socket.socket, shake):
    """Blocking: run ``shake`` (engine.handshake.Handshake) on ``sock``; returns ``shake.link()``."""
    from replicast.engine.handshake import Stage
    sock.sendall(shake.start())
    while shake.stage is not Stage.DONE:
        sock.sendall(shake.feed(sock.recv(4096)))
    return shake.link()


def sealed(sealer, *frames: bytes) -> bytes:
    """``frames`` (from engine.wire.encode) tagged for an authenticated link."""
    return b"".join(bytes(piece) for frame in frames for piece in sealer.seal(frame))


def shut(*sockets: socket.socket, close: bool = True) -> None:
    """Shut both directions of each socket (the peer sees the connection end), then close it."""
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if close:
            s.close()


def free_ports(n: int) -> list[int]:
    """``n`` free loopback ports below the kernel's ephemeral range (experiments/ports.py says why)."""
    return free_loopback_ports(n)


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def wait_for(condition, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


@contextmanager
def mosquitto(tmp_path: Path, settings: str = ""):
    """A private mosquitto broker on a free loopback port (``settings``: more mosquitto.conf
    lines); yields the port."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(binary):
        pytest.skip("mosquitto is not installed (.ci/run installs it)")
    port = free_ports(1)[0]
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n{settings}")
    process = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def replicast(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replicast.engine.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def cluster(cluster_file: Path, run_dir: Path):
    """``replicast cluster up`` … ``down``, always down; yields the state (processes by name)."""
    up = replicast("cluster", "up", str(cluster_file), "--run-dir", str(run_dir))
    try:
        assert up.returncode == 0, up.stderr + "".join(p.read_text()[-3000:] for p in run_dir.glob("*.log"))
        state = json.loads((run_dir / "state.json").read_text())
        yield {p["name"]: p for p in state["processes"]}
    finally:
        if (run_dir / "state.json").exists():
            replicast("cluster", "down", "--run-dir", str(run_dir), "--grace", "5")


def metric(metrics_port: int, name: str) -> float:
    """The first sample of ``name`` on the node metrics endpoint at loopback ``metrics_port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


async def collect_outputs(sub, on_items, applications: int = 1) -> None:
    """Hand every message on ``replicast/out/#`` (``sub`` is subscribed) to ``on_items(app, items)``
    until ``applications`` applications have sent CLOSED."""
    closed: set[str] = set()
    async for message in sub.messages:
        app = str(message.topic).rsplit("/", 1)[-1]
        items = json.loads(message.payload)
        on_items(app, items)
        if any(i.get("punctuation") == CLOSED for i in items):
            closed.add(app)
            if len(closed) == applications:
                return


async def close_streams_and_collect(pub, published: dict[str, list], collector, closed: set[str],
                                    arrivals: dict[str, list], timeout: float = 90) -> None:
    """Publish CLOSED on every stream of ``published``, then wait for ``collector`` (a task running
    :func:`collect_outputs`); a timeout names the applications that closed and the records so far."""
    for stream in published:
        await pub.publish(f"replicast/in/{stream}", json.dumps({"punctuation": CLOSED}), qos=1)
    try:
        await asyncio.wait_for(collector, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"only {sorted(closed)} closed within {timeout:g} s; "
                             f"records: { {a: len(r) for a, r in arrivals.items()} }") from None


def kill(process: dict) -> None:
    os.kill(process["pid"], signal.SIGKILL)


def make_cluster_module():
    spec = importlib.util.spec_from_file_location("make_cluster_fig1", ROOT / "examples/make_cluster_fig1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fig1_cluster_toml(tmp_path: Path, broker_port: int, ports: list[int], *, punctuation_ms: float,
                      secret: str = "integration-secret", **options) -> str:
    """The Fig. 1 cluster file (examples/make_cluster_fig1.py) of a test run: 7 node ports then 7
    metrics ports from ``ports``, the test's own broker, outputs under ``tmp_path/out``, no sources
    (the test publishes); ``options`` go to ``cluster_toml`` (``min_cost``, ``sink_replicas`` …)."""
    return make_cluster_module().cluster_toml(
        query=str(ROOT / "examples/cluster-fig1-query.toml"), ports=ports[:7], metrics_ports=ports[7:],
        broker=f"mqtt://127.0.0.1:{broker_port}", broker_port=broker_port, secret=secret,
        output_dir=str(tmp_path / "out"), sources=False, punctuation_ms=punctuation_ms, **options)


async def publish_fig1_round(pub, servers: list[str], tick: int, published: dict[str, list]) -> None:
    """One round of the Fig. 1 cluster's sources over MQTT: a cpu record and two pings per server,
    then a punctuation on every stream; ``published`` collects what went out, by stream.  ``pub``: a
    client, or a list of clients that all get the same payloads (same records, same ``ts``)."""
    clients = pub if isinstance(pub, list) else [pub]

    async def send(stream: str, payload) -> None:
        await asyncio.gather(*(c.publish(f"replicast/in/{stream}", json.dumps(payload), qos=1) for c in clients))
    for n, server in enumerate(servers):
        ts = time.time_ns() // 1000
        cpu = {"ts": ts, "server": server, "load": round(((tick * 7 + n * 3) % 20) / 20, 2)}
        pings = [{"ts": ts, "src": server, "dst": servers[(n + d) % len(servers)], "rtt_ms": float(10 + (tick + d) % 30)}
                 for d in (1, 2)]
        for stream, items in ((f"cpu_{server}", [cpu]), (f"ping_{server}", pings)):
            published[stream] += items
            await send(stream, items)
    p = time.time_ns() // 1000 - 1
    for stream in published:
        await send(stream, {"punctuation": p})


def coordinated_cluster_toml(nodes: list[str], ports: list[int], broker_port: int, *, secret: str,
                             coordinator: str, output_file: Path) -> str:
    """A loopback cluster file with the placement coordinator on (docs/placement.md): ``nodes`` on
    ``ports`` (then their metrics ports), one mosquitto, ``[coordinator]`` with kmax = kmin = 2 and
    loopback timings plus the lines ``coordinator``, the application ``watch`` written to
    ``output_file`` (``{node}`` for one file per sink replica)."""
    listed = "".join(f'[[nodes]]\nname = "{n}"\nport = {ports[i]}\nmetrics_port = {ports[len(nodes) + i]}\n\n'
                     for i, n in enumerate(nodes))
    return f"""query = "query.toml"
secret = "{secret}"
punctuation_ms = 100
heartbeat_ms = 200
peer_timeout_ms = 2000
placement = "min-cost"

[mqtt]
broker = "mqtt://127.0.0.1:{broker_port}"

[coordinator]
kmax = 2
kmin = 2
dmin_ms = 0             # loopback: every pair is well under the paper's 30 ms
report_ms = 300
settle_s = 3
{coordinator.strip()}

[outputs.watch]
file = "{output_file}"

{listed}"""


def assert_fig1_reference(query, published: dict[str, list[dict]], arrivals: dict[str, list[dict]],
                          punctuation_ms: float) -> None:
    """Every application received exactly ``replay``'s reference of what was ``published`` (in order
    for ordered applications)."""
    from collections import Counter

    from replicast.engine.replay import replay

    streams = {name: [(r["ts"], *[v for k, v in r.items() if k != "ts"]) for r in records]
               for name, records in published.items()}
    reference = replay(query, streams, replicas=1, punctuation_us=round(punctuation_ms * 1000)).outputs
    for app, spec in query.applications.items():
        names = query.schemas[spec.input].names
        got = [(i["ts"], *[i[n] for n in names]) for i in arrivals.get(app, [])]
        assert len(reference[app]) > 0, app
        assert Counter(got) == Counter(reference[app]), \
            f"{app}: {len(got)} records vs {len(reference[app])}; missing {list(Counter(reference[app]) - Counter(got))[:3]}" \
            f"; extra {list(Counter(got) - Counter(reference[app]))[:3]}"
        if spec.ordered:
            assert got == reference[app], app


#: An output id as sinks publish it (docs/consume.md): "<ts>:<occurrence>:<16 hex digits>".
OUTPUT_ID = re.compile(r"^(-?\d+):(\d+):[0-9a-f]{16}$")


def without_output_id(item: dict) -> dict:
    """A published item without its output id, after checking that a record has one naming its own
    timestamp (punctuations carry none): for comparing outputs with a reference."""
    if "ts" not in item:
        assert "@id" not in item, item
        return item
    rest = dict(item)
    match = OUTPUT_ID.match(str(rest.pop("@id", "")))
    assert match and int(match.group(1)) == item["ts"], item
    return rest


def wheel_once(tmp_path_factory, name: str, arguments: list[str], env: dict | None = None) -> Path:
    """A wheel of this checkout (``python -m build`` with ``arguments``), built once per test run into
    the run's directory ``name``: pytest-xdist workers share it, and every build in the checkout waits
    for the one under way (two at once trip over its build/ and sdist trees)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                       # the run's directory, above every worker's
    with open(shared / "replicast-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = shared / name
        if not any(out.glob("replicast-*.whl")):
            done = subprocess.run([sys.executable, "-m", "build", *arguments, "--outdir", str(out), str(ROOT)],
                                  capture_output=True, text=True, timeout=600, env=env)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return next(out.glob("replicast-*.whl"))
