"""Fuzz the node at scale (docs/performance.md): hostile wire frames into NodeCore and into a live cluster over
TCP, hostile MQTT payloads into a live entry point; reports crashes, silent streams and every
rejection counter.  The strategies are the tests' (tests/wire_strategies.py, Hypothesis).

    python3 benchmarks/fuzz.py                       # 10^5 core frames, 2*10^4 TCP frames, 10^4 payloads
    python3 benchmarks/fuzz.py --frames 2000 --tcp-frames 500 --payloads 500    # a quick look
    python3 benchmarks/fuzz.py --skip-core --seeds 30 --tcp-frames 0 --strangers 0 --payloads 0 \
        --hostile-sources 200                                     # only the source port's RSS

1. **Core**: one long-lived NodeCore (node b of a one-node placement; the frames come from a peer
   "a") gets ``--frames`` frames through FrameDecoder + decode + receive, then a genuine stream
   must still reach its application (else: a silent stream).
2. **Live**: a broker and nodes a, b (cpu on a and b, busy on b and a, alerts on b, written to a
   file); this process is node "c" of the same cluster file (it knows the secret), accepts a's and
   b's dials and sends them ``--tcp-frames`` hostile frames, tagged, so they meet the decoder and the
   core (each bad frame costs the link; the nodes dial again); strangers without the secret open
   connections and send raw hostile frames; ``--hostile-sources`` connections to a's source port
   send garbage without newlines (half 1 MiB, half just under the line limit: ``[source_connections]``,
   docs/node.md) while a's RSS is read before and during; ``--payloads`` hostile MQTT payloads go to
   the entry point.  All the while a source publishes genuine records (20 per 50 ms), then CLOSED.  Every
   genuine record must reach the application exactly once, the stream must close (no silent
   stream), no node may die or count a task failure; delivery latency (arrival − ts, median and
   p99) is compared with a quiet phase before the fuzzing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
import psutil  # noqa: E402
from tqdm import tqdm  # noqa: E402

from replicast.engine.entry import EntryPoint, decode_payload  # noqa: E402
from replicast.engine.node import Delivered, NodeCore, configure  # noqa: E402
from replicast.engine.query_file import parse_query  # noqa: E402
from replicast.engine.wire import MAX_FRAME, FrameDecoder, WireError, decode  # noqa: E402
from replicast.operators.record import CLOSED  # noqa: E402
from tests.integration.helpers import CPU_FILTER_QUERY, accept_as, free_ports, sealed, wait_port  # noqa: E402
from tests.wire_strategies import frames, payloads  # noqa: E402

SECRET = "fuzz-benchmark-secret"


def run_examples(strategy, count: int, body, desc: str) -> None:
    """Call ``body(example)`` for ``count`` examples of ``strategy`` (Hypothesis, generate phase only)."""
    bar = tqdm(total=count, desc=desc, unit="ex")

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(example):
        body(example)
        bar.update(1)

    run()
    bar.close()


def corpus(strategy, size: int, desc: str) -> list[bytes]:
    """``size`` examples drawn by Hypothesis (about 15 ms each: too slow for 10^5, so the rest are
    mutations of these)."""
    found: list[bytes] = []
    run_examples(strategy, size, found.append, desc)
    return found


def mutants(seeds: list[bytes], n: int, rng: random.Random):
    """``n`` inputs: the Hypothesis seeds, then seeds with a flipped byte, a cut, a lying length
    prefix, or two spliced together (a seeded random.Random, so a run can be repeated)."""
    for i in range(n):
        seed = seeds[i % len(seeds)]
        if i < len(seeds) or not seed:
            yield seed
            continue
        how = rng.randrange(5)
        if how == 0:
            j = rng.randrange(len(seed))
            yield seed[:j] + bytes([rng.randrange(256)]) + seed[j + 1:]
        elif how == 1:
            yield seed[:rng.randrange(len(seed))]
        elif how == 2:
            yield rng.choice([0, 1, len(seed), 2**20, 2**32 - 1]).to_bytes(4, "big") + seed[4:]
        elif how == 3:
            yield seed + rng.choice(seeds)
        else:
            yield seed


def malformed_only(candidates, n: int) -> tuple[list[bytes], int]:
    """The first ``n`` payloads the entry point rejects whole, and how many others were skipped:
    a payload with a valid record or punctuation is input (a punctuation of CLOSED from anyone on
    the topic ends the stream: in source-stamped mode whoever publishes there is a source)."""
    query = parse_query(CPU_FILTER_QUERY, "cpu-filter.toml")
    kept, skipped = [], 0
    for payload in candidates:
        if len(kept) == n:
            break
        try:
            items = decode_payload(payload)
        except Exception:
            kept.append(payload)
            continue
        segments, _ = EntryPoint(query.streams["cpu"]).on_items(items, now=1, stamping=False)
        if segments:
            skipped += 1
        else:
            kept.append(payload)
    return kept, skipped


def reason(error: WireError) -> str:
    text = str(error)
    for prefix, name in (("frame of", "oversized frame"), ("not msgpack", "not msgpack"), ("unknown message code", "unknown code"),
                         ("a frame must hold", "not an array"), ("message code", "field count"),
                         ("batch records", "bad records")):
        if text.startswith(prefix):
            return name
    return "field type"


# -- 1. core --------------------------------------------------------------------------------------
def fuzz_core(n: int, seeds: list[bytes]) -> dict:
    query = parse_query(CPU_FILTER_QUERY, "cpu-filter.toml")
    core = NodeCore("b", query, now=0)
    core.apply(configure(query, {"cpu": ["b"], "busy": ["b"], "alerts": ["b"]}, "b"), now=0)
    core.on_peer_up("a", now=1)
    outcome: Counter = Counter()
    clock = [10]

    def feed(frame: bytes) -> None:
        if True:
            clock[0] += 1000
            try:
                bodies = FrameDecoder(MAX_FRAME).feed(frame)
                if not bodies:
                    outcome["incomplete (link waits, then times out)"] += 1
                for b in bodies:
                    message = decode(b)
                    try:
                        core.receive("a", message, now=clock[0])
                        outcome[f"applied: {type(message).__name__}"] += 1
                    except Exception as error:                     # a crash of the core
                        outcome[f"CRASH {type(error).__name__}"] += 1
            except WireError as error:
                outcome[f"refused: {reason(error)}"] += 1
        core.messages_to_send()
        core.events()

    started = time.perf_counter()
    for frame in tqdm(mutants(seeds, n, random.Random(1)), total=n, desc="core frames", unit="frame"):
        feed(frame)
    elapsed = time.perf_counter() - started
    core.on_source("cpu", b'[{"ts": %d, "server": "ok", "load": 0.9}, {"punctuation": %d}]' % (clock[0] + 1, CLOSED),
                   now=clock[0] + 2)
    core.handle_timer(now=clock[0] + 3)
    delivered = [r for e in core.events() if isinstance(e, Delivered) for r in e.records]
    stats = core.statistics()
    return {"frames": n, "hypothesis_seeds": len(seeds), "seconds": round(elapsed, 1), "outcomes": dict(sorted(outcome.items())),
            "crashes": sum(v for k, v in outcome.items() if k.startswith("CRASH")),
            "silent_streams": 0 if any(r[1] == "ok" for r in delivered) else 1,
            "core_counters": {k: v for k, v in stats.items() if isinstance(v, int) and v}}


# -- 2. live --------------------------------------------------------------------------------------
CLUSTER = """query = "query.toml"
secret = "{secret}"
punctuation_ms = 50
[mqtt]
broker = "mqtt://127.0.0.1:{broker}"
[[nodes]]
name = "a"
port = {a}
metrics_port = {am}
source_port = {s}
[[nodes]]
name = "b"
port = {b}
metrics_port = {bm}
[[nodes]]
name = "c"
port = {c}
[placement]
cpu = ["a", "b"]
busy = ["b", "a"]
alerts = ["b"]
[outputs.alerts]
file = "alerts.jsonl"
mqtt = false
"""


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        lines = page.read().decode().splitlines()
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in lines if l.startswith("replicast_")}


class FakePeer:
    """Node "c": accepts a's and b's dials and feeds each link hostile frames, tagged."""

    def __init__(self, port: int):
        self.server = socket.create_server(("127.0.0.1", port))
        self.links: list = []
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            try:
                sock.settimeout(5)
                peer, sealer, _, _ = accept_as(sock, "c", SECRET.encode(), {"a", "b"})
            except (OSError, WireError):
                sock.close()
                continue
            threading.Thread(target=self._drain, args=(sock,), daemon=True).start()
            with self.lock:
                self.accepted += 1
                self.links.append((sock, sealer))

    @staticmethod
    def _drain(sock: socket.socket) -> None:
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass

    def send(self, frame: bytes) -> bool:
        """Send one tagged frame on some live link; False if none is up right now."""
        with self.lock:
            while self.links:
                sock, sealer = self.links[0]
                try:
                    sock.sendall(sealed(sealer, frame) if len(frame) >= 4 else frame)
                    self.links.append(self.links.pop(0))     # round robin between a and b
                    return True
                except OSError:
                    self.links.pop(0)
        return False


def stranger(port: int, frame: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(frame)
    except OSError:
        pass


class Source(threading.Thread):
    """Genuine records, 20 every 50 ms, until stopped; then CLOSED."""

    def __init__(self, broker: int):
        super().__init__(daemon=True)
        self.broker, self.stop = broker, threading.Event()
        self.sent = 0
        self.phase_starts: list[int] = []

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        import aiomqtt
        async with aiomqtt.Client("127.0.0.1", self.broker, identifier=f"fuzz-source-{os.getpid()}") as client:
            while not self.stop.is_set():
                now = time.time_ns() // 1000
                items = [{"ts": now + i, "server": f"s{self.sent + i}", "load": 0.9} for i in range(20)]
                await client.publish("replicast/in/cpu", json.dumps([*items, {"punctuation": now + 19}]), qos=1)
                self.sent += 20
                await asyncio.sleep(0.05)
            await client.publish("replicast/in/cpu", json.dumps({"punctuation": CLOSED}), qos=1)


def rss_mib(pid: int) -> float:
    """The resident set of process ``pid`` (psutil), in MiB."""
    return psutil.Process(pid).memory_info().rss / 2**20


def hostile_sources(port: int, pid: int, n: int, line_limit: int = 64 * 1024) -> dict:
    """``n`` connections to a source port sending garbage without a newline — every other one
    1 MiB (over the line limit), the rest ``line_limit - 1`` bytes (held) — and the node's RSS
    before and while they are open (the largest of 10 reads over 2 s, after 3 s to settle)."""
    before = rss_mib(pid)
    sockets = []
    for i in tqdm(range(n), desc="hostile sources", unit="conn"):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"\xff" * (2**20 if i % 2 else line_limit - 1))
            sockets.append(sock)
        except OSError:
            pass                                    # refused (a cap, or closed as it sent)
    time.sleep(3)
    during = 0.0
    for _ in range(10):
        during = max(during, rss_mib(pid))
        time.sleep(0.2)
    for sock in sockets:
        sock.close()
    return {"connections": n, "connected": len(sockets), "rss_before_mib": round(before, 1),
            "rss_during_mib": round(during, 1), "growth_mib": round(during - before, 1)}


def latency(lines: list[dict], since: int, until: int) -> dict:
    values = sorted(l["arrival"] - l["ts"] for l in lines if since <= l["ts"] < until)
    if not values:
        return {"records": 0}
    return {"records": len(values), "median_ms": round(statistics.median(values) / 1000, 2),
            "p99_ms": round(values[int(0.99 * (len(values) - 1))] / 1000, 2)}


def fuzz_live(tcp_frames: int, payload_count: int, strangers: int, seeds: list[bytes], payload_seeds: list[bytes],
              keep: Path | None = None, hostile: int = 0) -> dict:
    import aiomqtt
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        broker, a, am, b, bm, c, source_port = free_ports(7)
        (tmp / "query.toml").write_text(CPU_FILTER_QUERY)
        (tmp / "cluster.toml").write_text(CLUSTER.format(secret=SECRET, broker=broker, a=a, am=am, b=b, bm=bm, c=c,
                                                                s=source_port))
        peer = FakePeer(c)
        processes = [subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(broker)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        wait_port(broker)
        for name in ("a", "b"):
            log = (tmp / f"{name}.log").open("w")
            processes.append(subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config",
                                               str(tmp / "cluster.toml"), "--name", name, "--log-json"],
                                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        try:
            for port in (am, bm):
                wait_port(port, 60)
            deadline = time.monotonic() + 60
            while not all(scrape(p).get("replicast_ready") == 1.0 for p in (am, bm)):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not become ready")
                time.sleep(0.2)
            source = Source(broker)
            source.start()
            quiet_from = time.time_ns() // 1000
            time.sleep(5)                                    # the quiet phase: normal pace
            fuzz_from = time.time_ns() // 1000
            started = time.perf_counter()
            sent = Counter()

            rng = random.Random(2)
            for frame in tqdm(mutants(seeds, tcp_frames, rng), total=tcp_frames, desc="live frames", unit="frame"):
                if not peer.send(frame):
                    time.sleep(0.01)                    # both links are being re-dialled
                    sent["tcp frames (no link up)"] += 1
                else:
                    sent["tcp frames (tagged, from c)"] += 1
            for frame in tqdm(mutants(seeds, strangers, rng), total=strangers, desc="strangers", unit="conn"):
                stranger(a if sent["stranger connections"] % 2 else b, frame)
                sent["stranger connections"] += 1

            memory = hostile_sources(source_port, processes[1].pid, hostile) if hostile else None
            sent["hostile source connections"] = hostile

            async def publish_all(items):
                async with aiomqtt.Client("127.0.0.1", broker, identifier=f"fuzz-mqtt-{os.getpid()}") as client:
                    for payload in items:
                        await client.publish("replicast/in/cpu", payload, qos=1)

            hostile, legit = malformed_only(mutants(payload_seeds, payload_count * 2, rng), payload_count)
            sent["payloads not sent: valid input (a source's right)"] = legit
            for start in tqdm(range(0, len(hostile), 500), desc="mqtt payloads (x500)"):
                asyncio.run(publish_all(hostile[start:start + 500]))
                sent["mqtt payloads"] += len(hostile[start:start + 500])
            fuzz_until = time.time_ns() // 1000
            fuzz_seconds = time.perf_counter() - started
            source.stop.set()
            source.join(30)
            out = tmp / "alerts.jsonl"
            deadline = time.monotonic() + 120
            while scrape(bm).get('replicast_app_punctuation{app="alerts"}') != float(CLOSED):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            lines = [json.loads(l) for l in out.read_text().splitlines()] if out.exists() else []
            servers = Counter(l["server"] for l in lines)
            genuine = {f"s{i}" for i in range(source.sent)}
            metrics = {name: scrape(port) for name, port in (("a", am), ("b", bm))}
            alive = {name: p.poll() is None for name, p in zip(("broker", "a", "b"), processes)}
            counters = {}
            for name, values in metrics.items():
                for key, value in values.items():
                    name_only = key.split("{")[0]
                    if value and (name_only.endswith("_total") or name_only == "replicast_refused_connections") \
                            and not name_only.startswith("replicast_replica_"):
                        counters[f"{name}: {key}"] = value
            return {
                "sent": dict(sent), "fuzz_seconds": round(fuzz_seconds, 1), "links_accepted_by_c": peer.accepted,
                "genuine_records": source.sent, "delivered": sum(servers[s] for s in genuine),
                "lost": len(genuine - set(servers)), "duplicated": sum(1 for s in genuine if servers[s] > 1),
                "foreign_records_delivered": sum(v for s, v in servers.items() if s not in genuine),
                "silent_streams": 0 if metrics["b"].get('replicast_app_punctuation{app="alerts"}') == float(CLOSED) else 1,
                "crashes": sum(not v for v in alive.values()) + sum(
                    v for m in metrics.values() for k, v in m.items() if k.startswith("replicast_task_failures_total")),
                "alive": alive,
                "latency_quiet": latency(lines, quiet_from, fuzz_from),
                "latency_under_fuzz": latency(lines, fuzz_from, fuzz_until),
                "counters": dict(sorted(counters.items())),
                "hostile_sources": memory,
            }
        finally:
            for p in processes:
                p.terminate()
            for p in processes:
                p.wait(10)
            peer.server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="fuzz the node core and a live cluster; report crashes, silent "
                                                 "streams and rejection counters")
    parser.add_argument("--frames", type=int, default=100_000, help="hostile frames into NodeCore")
    parser.add_argument("--tcp-frames", type=int, default=20_000, help="hostile tagged frames into live nodes")
    parser.add_argument("--strangers", type=int, default=1_000, help="connections from peers without the secret")
    parser.add_argument("--payloads", type=int, default=10_000, help="hostile MQTT payloads into the entry point")
    parser.add_argument("--hostile-sources", type=int, default=200,
                        help="connections to a's source port sending garbage without newlines (RSS before/during)")
    parser.add_argument("--seeds", type=int, default=3000, help="frames drawn by Hypothesis; the rest are mutants")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--keep", type=Path, help="run the live cluster in this directory and keep its logs")
    parser.add_argument("--skip-core", action="store_true", help="only the live part")
    args = parser.parse_args()
    seeds = corpus(frames(), args.seeds, "hypothesis frames")
    payload_seeds = corpus(payloads, max(1, args.seeds // 3), "hypothesis payloads")
    core = {"frames": 0, "crashes": 0, "silent_streams": 0} if args.skip_core else fuzz_core(args.frames, seeds)
    live = fuzz_live(args.tcp_frames, args.payloads, args.strangers, seeds, payload_seeds, args.keep,
                     args.hostile_sources)
    report = {"core": core, "live": live,
              "load_average": os.getloadavg()}
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    bad = report["core"]["crashes"] + report["core"]["silent_streams"] + report["live"]["crashes"] \
        + report["live"]["silent_streams"] + report["live"]["lost"] + report["live"]["duplicated"] \
        + report["live"]["foreign_records_delivered"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
