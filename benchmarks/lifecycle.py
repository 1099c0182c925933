"""Replica lifecycle costs (docs/lifecycle.md): snapshot size and time, and restart to live over real TCP.

Two states, each held by both replicas of one operator:
* ``aggregate`` — a time-window aggregate (count and sum per key) with 10,000 open groups;
* ``join`` — a keyed Join holding 100,000 buffered records (50,000 a side, no pair matches).

Part 1, in one process: the node core's own work.  A live donor core gives the snapshot
(``engine.core.lifecycle``), it is encoded as the wire frame, decoded, and a joining core restores
it; each step is timed (best of ``--repeat``) and the frame's size reported.

Part 2, real processes on loopback: ``replicast cluster up`` starts u (the entry point, fed through
its TCP source port), p and j (the operator's replicas) and app; the state is fed; j is SIGKILLed,
records keep coming (the backlog), and j is started again with ``replicast node``.  From j's JSON
log: the time from its process start to its replica being live, and from its node listening to
live (the join itself).  The target (the issue's): caught up within 2 × (snapshot size / link
bandwidth + RTT) plus the replay of the backlog, with the loopback bandwidth, the RTT and the
backlog's processing time measured in the same run.

    python3 benchmarks/lifecycle.py            # about a minute
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replicast.engine.core.configure import configure  # noqa: E402
from replicast.engine.messages import Batch, Snapshot, SnapshotRequest, StreamHead  # noqa: E402
from replicast.engine.node import NodeCore, ReplicaState  # noqa: E402
from replicast.engine.query_file import load_query  # noqa: E402
from replicast.engine.wire import FrameDecoder, decode, encode  # noqa: E402
from replicast.operators.base import NO_PUNCTUATION  # noqa: E402
from replicast.operators.plan import ReplicaId  # noqa: E402

T0 = 1_700_000_000_000_000          # µs: the records' time base
AGGREGATE_QUERY = """
[[streams]]
name = "s"
fields = { k = "int", v = "float" }
[[operators]]
name = "op"
kind = "aggregate"
input = "s"
group_by = ["k"]
window = { kind = "time", size_ms = 3600000, slide_ms = 3600000 }
compute = { n = "count()", total = "sum(v)" }
[[applications]]
name = "app"
input = "op"
"""
JOIN_QUERY = """
[[streams]]
name = "l"
fields = { k = "int", v = "float" }
[[streams]]
name = "r"
fields = { k = "int", v = "float" }
[[operators]]
name = "op"
kind = "join"
inputs = ["l", "r"]
window_ms = 3600000
on = "l.k == r.k"
[[applications]]
name = "app"
input = "op"
"""


def state_records(case: str, n: int) -> dict[str, list[dict]]:
    """Items per stream: ``n`` groups (aggregate) or ``n`` records split over the sides, no match (join)."""
    if case == "aggregate":
        return {"s": [{"ts": T0 + i, "k": i, "v": float(i)} for i in range(n)]}
    return {"l": [{"ts": T0 + i, "k": 2 * i, "v": 1.0} for i in range(n // 2)],
            "r": [{"ts": T0 + i, "k": 2 * i + 1, "v": 1.0} for i in range(n // 2)]}


def query_for(case: str, directory: Path):
    path = directory / f"{case}.toml"
    path.write_text(AGGREGATE_QUERY if case == "aggregate" else JOIN_QUERY)
    return path, load_query(path)


# -- part 1: the core's work ------------------------------------------------------------------------
def best(repeat: int, function):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def in_process(case: str, n: int, repeat: int, directory: Path) -> dict:
    _, query = query_for(case, directory)
    place = {s: ["u"] for s in query.streams} | {"op": ["p", "j"], "app": ["a"]}
    donor = NodeCore("p", query, now=0)
    donor.apply(configure(query, place, "p"), now=0)
    for node in ("u", "j", "a"):
        donor.on_peer_up(node, now=0)
    now = 0
    while donor.hosted and any(h.state is ReplicaState.JOINING for h in donor.hosted.values()):
        now = donor.next_timer()
        donor.handle_timer(now=now)                     # no peer answers: it starts on its own
    for stream in list(donor.inbound):
        donor.receive("u", StreamHead(stream, 1, 0, NO_PUNCTUATION), now=now)
    for name, items in state_records(case, n).items():
        stream = next(s for s in donor.inbound if s.source.name == name)
        records = [(i["ts"], i["k"], i["v"]) for i in items]
        for start in range(0, len(records), 1000):
            donor.receive("u", Batch(stream, 1, start, records[start:start + 1000], None), now=now)
    donor.messages_to_send(), donor.events()
    hosted = next(h for h in donor.hosted.values() if h.replica.name == "op")
    snap_s, state = best(repeat, lambda: donor.lifecycle.snapshot(hosted))
    message = Snapshot(ReplicaId("op", 1), hosted.replica, state)
    encode_s, frame = best(repeat, lambda: encode(message))
    decode_s, decoded = best(repeat, lambda: decode(FrameDecoder(max_frame=1 << 30).feed(frame)[0]))

    def restore():
        joiner = NodeCore("j", query, now=now)
        joiner.apply(configure(query, place, "j"), now=now)
        for node in ("u", "p", "a"):
            joiner.on_peer_up(node, now=now)
        assert any(isinstance(m, SnapshotRequest) for _, m in joiner.messages_to_send())
        start = time.perf_counter()
        joiner.receive("p", decoded, now=now)
        elapsed = time.perf_counter() - start
        assert all(h.state is ReplicaState.LIVE for h in joiner.hosted.values() if h.replica.name == "op")
        return elapsed
    restore_s = min(restore() for _ in range(repeat))
    # What replaying a backlog costs per record: more records through the live donor.
    stream = next(s for s in donor.inbound if s.source.name in ("s", "l"))
    offset = donor.inbound[stream].next
    extra = [(T0 + 10 * n + i, -1 - i, 0.0) for i in range(10_000)]
    start = time.perf_counter()
    for first in range(0, len(extra), 100):
        donor.receive("u", Batch(stream, 1, offset + first, extra[first:first + 100], None), now=now)
        donor.messages_to_send(), donor.events()
    per_record_s = (time.perf_counter() - start) / len(extra)
    return {"bytes": len(frame), "snapshot_s": snap_s, "encode_s": encode_s, "decode_s": decode_s,
            "restore_s": restore_s, "per_record_s": per_record_s}


# -- part 2: real processes --------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replicast.engine.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          **kwargs)


def metric(port: int, name: str, labels: str = "") -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:
            for line in page.read().decode().splitlines():
                if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
                    return float(line.rsplit(" ", 1)[1])
    except OSError:
        return None
    return None


def wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def live_at_of(log: list[dict]) -> float:
    return next(e["t"] for e in log if e.get("state") == "live" and e.get("replica") == "op#1")


def loopback_bandwidth(nbytes: int = 256 << 20) -> float:
    """Bytes per second through one loopback TCP connection (what a snapshot frame crosses)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = []

    def sink():
        conn, _ = server.accept()
        total = 0
        while chunk := conn.recv(1 << 20):
            total += len(chunk)
        received.append(total)
        conn.close()
    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(("127.0.0.1", port))
    block = b"x" * (1 << 20)
    start = time.perf_counter()
    for _ in range(nbytes >> 20):
        client.sendall(block)
    client.shutdown(socket.SHUT_WR)
    thread.join()
    elapsed = time.perf_counter() - start
    client.close()
    server.close()
    return received[0] / elapsed


def over_tcp(case: str, n: int, backlog: int, directory: Path, bytes_per_s: float, per_record_s: float,
             wan: str | None) -> dict:
    query_path, query = query_for(case, directory)
    names = ["u", "p", "j", "app"]
    ports = free_ports(10)
    port, metrics_port = dict(zip(names, ports[:4])), dict(zip(names, ports[4:8]))
    source_port, broker_port = ports[8], ports[9]
    lines = [f'query = "{query_path}"', 'secret = "lifecycle-benchmark"', "punctuation_ms = 100",
             "[mqtt]", 'broker = "embedded"', 'host = "127.0.0.1"', f"port = {broker_port}"]
    for name in names:
        lines += ["[[nodes]]", f'name = "{name}"', 'host = "127.0.0.1"', f"port = {port[name]}",
                  f"metrics_port = {metrics_port[name]}"] + ([f"source_port = {source_port}"] if name == "u" else [])
    lines += ["[placement]", *[f'{s} = ["u"]' for s in query.streams], 'op = ["p", "j"]', 'app = ["app"]',
              "[outputs.app]", f'file = "{directory}/{case}-out.jsonl"', "mqtt = false",
              "[source_connections]", f"max_line_bytes = {4 * 2**20}"]     # one line holds 2,000 records
    cluster_file = directory / f"{case}-cluster.toml"
    cluster_file.write_text("\n".join(lines) + "\n")
    run_dir = directory / f"{case}-run"
    emulation = ["--emulate-wan", wan, "--wan-via", "relay"] if wan else []
    up = cli("cluster", "up", str(cluster_file), "--run-dir", str(run_dir), *emulation, timeout=180)
    if up.returncode != 0:
        raise RuntimeError(up.stderr)
    restarted = None
    try:
        state = {p["name"]: p for p in json.loads((run_dir / "state.json").read_text())["processes"]}
        source = socket.create_connection(("127.0.0.1", source_port))
        items = state_records(case, n)
        for stream, records in items.items():
            for start in range(0, len(records), 2000):
                source.sendall(f"{stream} {json.dumps(records[start:start + 2000])}\n".encode())
        total = sum(map(len, items.values()))
        for replica, node in (("op#0", "p"), ("op#1", "j")):
            wait(lambda: (metric(metrics_port[node], "replicast_replica_records_in_total",
                                 f'{{kind="operator",replica="{replica}"}}') or 0) >= total, 120, f"{replica} to hold the state")
        os.kill(state["j"]["pid"], signal.SIGKILL)
        last = max(r["ts"] for records in items.values() for r in records)
        for stream in items:                             # the backlog: records j must replay after joining
            records = [{"ts": last + 1 + i, "k": -1 - i, "v": 0.0} for i in range(backlog)]
            source.sendall(f"{stream} {json.dumps(records)}\n".encode())
        log_path = directory / f"{case}-j.log"
        started = time.time()
        restarted = subprocess.Popen(state["j"]["command"], cwd=ROOT, stdout=open(log_path, "w"),
                                     stderr=subprocess.STDOUT)

        def live() -> bool:
            return any(json.loads(line).get("state") == "live" and json.loads(line).get("replica") == "op#1"
                       for line in log_path.read_text().splitlines() if line.startswith("{"))
        wait(live, 120, "j's replica to be live")
        log = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
        listening = next(e["t"] for e in log if e.get("event") == "listening")
        links = max(e["t"] for e in log if e.get("event") == "link_up" and e["t"] <= live_at_of(log))
        if os.environ.get("LIFECYCLE_LOG"):
            for e in log:
                print(f"    {e['t'] - listening:8.4f} {e.get('event')} {e.get('message')}")
        live_at = live_at_of(log)
        wait(lambda: metric(metrics_port["j"], "replicast_peer_rtt_seconds", '{peer="p"}') is not None, 30, "an RTT")
        rtt = metric(metrics_port["j"], "replicast_peer_rtt_seconds", '{peer="p"}')
        source.close()
    finally:
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(10)
        cli("cluster", "down", "--run-dir", str(run_dir), "--grace", "5", timeout=60)
    backlog_items = backlog * len(query.streams)
    return {"start_to_live_s": live_at - started, "join_s": live_at - listening, "links_to_live_s": live_at - links,
            "rtt_s": rtt,
            "backlog": backlog_items, "backlog_s": backlog_items * per_record_s, "bytes_per_s": bytes_per_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=10_000, help="open groups of the aggregate")
    parser.add_argument("--join-records", type=int, default=100_000, help="records buffered by the Join")
    parser.add_argument("--backlog", type=int, default=1_000, help="records per stream published while j is down")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-tcp", action="store_true", help="only part 1")
    parser.add_argument("--wan", metavar="TRACE", default="seattle",
                        help="links through delay relays that follow TRACE (cluster up --emulate-wan TRACE "
                             "--wan-via relay), so the RTT is a wide-area one; 'none': plain loopback")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    bandwidth = loopback_bandwidth()
    print(f"loopback TCP: {bandwidth / 1e6:.0f} MB/s")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for case, n in (("aggregate", args.groups), ("join", args.join_records)):
            core = in_process(case, n, args.repeat, directory)
            per_record = core["per_record_s"]          # the backlog's replay, per record (measured above)
            print(f"{case} ({n:,} {'open groups' if case == 'aggregate' else 'buffered records'}): snapshot "
                  f"{core['bytes'] / 1e6:.2f} MB; take {core['snapshot_s'] * 1e3:.0f} ms, encode "
                  f"{core['encode_s'] * 1e3:.0f} ms, decode {core['decode_s'] * 1e3:.0f} ms, restore "
                  f"{core['restore_s'] * 1e3:.0f} ms")
            if args.skip_tcp:
                continue
            tcp = over_tcp(case, n, args.backlog, directory, bandwidth, per_record,
                           None if args.wan == "none" else args.wan)
            target = 2 * (core["bytes"] / bandwidth + tcp["rtt_s"]) + tcp["backlog_s"]
            joined = tcp["links_to_live_s"]
            print(f"  restart over TCP{' (' + args.wan + ' delays)' if args.wan != 'none' else ''}: process start "
                  f"to live {tcp['start_to_live_s']:.2f} s; listening to live {tcp['join_s'] * 1e3:.0f} ms, of which "
                  f"links up to live (the join) {joined * 1e3:.0f} ms; RTT {tcp['rtt_s'] * 1e3:.1f} ms, backlog "
                  f"{tcp['backlog']:,} records; target 2 × (size / bandwidth + RTT) + backlog = {target * 1e3:.0f} ms"
                  f" -> {'met' if joined <= target else 'NOT met'} ({joined / target:.2f}x)")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
