"""Node throughput: distinct records/s through one node process over TCP on loopback, and MQTT ingest.

    python3 benchmarks/node.py                   # k = 1, 2, 3 upstream replicas, then MQTT ingest
    python3 benchmarks/node.py --records 200000 --batch 1000

TCP: one ``replicast node`` process hosts a Filter (``where = "load >= 0.0"``, passes everything)
and the application after it.  This process plays k upstream nodes: it does the real handshake,
then each upstream sends the *same* N records in batches (frames pre-encoded, one punctuation per
batch), as the k replicas of an upstream operator would.  The node de-duplicates the k copies, so
distinct records/s = N / (time until the node has acknowledged every stream replica's last offset).

MQTT: the node hosts the entry point (source-stamped) before the same Filter; this process
publishes N records as JSON lists of ``--batch`` records to a private mosquitto (QoS 1), then the
CLOSED punctuation; the clock stops when the application's punctuation gauge reports CLOSED.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster.readiness import node_ready  # noqa: E402
from engine.handshake import Handshake, Role, Stage  # noqa: E402
from engine.messages import Ack, Batch, Resume, StreamHead  # noqa: E402
from engine.wire import decode, encode  # noqa: E402
from operators.base import NO_PUNCTUATION  # noqa: E402
from operators.plan import ReplicaId, StreamReplica  # noqa: E402
from operators.record import CLOSED  # noqa: E402

SECRET = "benchmark-secret"
QUERY = """
[[streams]]
name = "s"
fields = { server = "str", load = "float" }
[[operators]]
name = "f"
kind = "filter"
input = "s"
where = "load >= 0.0"
[[applications]]
name = "app"
input = "f"
"""


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def write_cluster(tmp: Path, k: int, mqtt_port: int, entry_on_target: bool) -> tuple[Path, int, int]:
    ports = free_ports(2 + k)
    (tmp / "query.toml").write_text(QUERY)
    nodes = "".join(f'[[nodes]]\nname = "u{i}"\nport = {ports[2 + i]}\n' for i in range(k))
    entry = '["z"]' if entry_on_target else "[" + ", ".join(f'"u{i}"' for i in range(k)) + "]"
    (tmp / "cluster.toml").write_text(f"""
query = "query.toml"
secret = "{SECRET}"
[mqtt]
broker = "mqtt://127.0.0.1:{mqtt_port}"
[[nodes]]
name = "z"
port = {ports[0]}
metrics_port = {ports[1]}
{nodes}
[placement]
s = {entry}
f = ["z"]
app = ["z"]
[outputs.app]
mqtt = false
""")
    return tmp / "cluster.toml", ports[0], ports[1]


def start_node(cluster: Path, port: int) -> subprocess.Popen:
    node = subprocess.Popen([sys.executable, "-m", "engine.cli", "-q", "node", "--config", str(cluster), "--name", "z"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return node
        except OSError:
            time.sleep(0.05)
    node.kill()
    raise RuntimeError("node did not start")


async def upstream(name: str, port: int, frames: list[bytes], last_offset: int) -> None:
    """Node ``name``: the real handshake (engine.handshake), then ``frames``, tagged, until acked."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    shake = Handshake(SECRET.encode(), name, Role.DIALER, os.urandom(16), peers={name, "z"}, expected="z")
    writer.write(shake.start())
    while shake.stage is not Stage.DONE:
        writer.write(shake.feed(await reader.read(4096)))
    sealer, opener, decoder, early = shake.link()
    got = [decode(opener.open(body)) for body in early]
    while not any(isinstance(m, Resume) for m in got):      # the node asks for the stream first
        got += [decode(opener.open(body)) for body in decoder.feed(await reader.read(65536))]
    resume = next(m for m in got if isinstance(m, Resume))
    writer.write(b"".join(sealer.seal(encode(StreamHead(resume.stream, 0, 0, NO_PUNCTUATION)))))
    for i in range(0, len(frames), 64):
        writer.write(b"".join([piece for frame in frames[i:i + 64] for piece in sealer.seal(frame)]))
        await writer.drain()
    while True:
        data = await reader.read(65536)
        if not data:
            raise RuntimeError("node closed the link")
        for body in decoder.feed(data):
            message = decode(opener.open(body))
            if isinstance(message, Ack) and message.offset >= last_offset:
                writer.close()
                return


def tcp_run(k: int, records: int, batch: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cluster, port, _ = write_cluster(Path(tmp), k, 1, entry_on_target=False)
        node = start_node(cluster, port)
        try:
            rows = [(1_000_000 + i, f"s{i % 50}", (i % 100) / 100) for i in range(records)]
            streams = [StreamReplica(ReplicaId("s", i), ReplicaId("f", 0), 0) for i in range(k)]
            frames, offsets = [], []
            for stream in streams:
                out, offset = [], 0
                for start in range(0, records, batch):
                    chunk = rows[start:start + batch]
                    p = CLOSED if start + batch >= records else chunk[-1][0]
                    out.append(encode(Batch(stream, 0, offset, chunk, p)))
                    offset += len(chunk) + 1
                frames.append(out)
                offsets.append(offset)

            async def main() -> float:
                start = time.perf_counter()
                await asyncio.gather(*(upstream(f"u{i}", port, frames[i], offsets[i]) for i in range(k)))
                return time.perf_counter() - start

            return records / asyncio.run(main())
        finally:
            node.terminate()
            node.wait(10)


def app_punctuation(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith('replicast_app_punctuation{app="app"}'):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def mqtt_run(records: int, batch: int) -> float:
    import aiomqtt
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with tempfile.TemporaryDirectory() as tmp:
        mqtt_port = free_ports(1)[0]
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"listener {mqtt_port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n")
        broker = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cluster, port, metrics_port = write_cluster(Path(tmp), 1, mqtt_port, entry_on_target=True)
        node = start_node(cluster, port)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not node_ready("127.0.0.1", metrics_port):
                time.sleep(0.1)
            payloads = [json.dumps([{"ts": 1_000_000 + i, "server": f"s{i % 50}", "load": (i % 100) / 100}
                                    for i in range(start, min(records, start + batch))]).encode()
                        for start in range(0, records, batch)]

            async def publish() -> float:
                async with aiomqtt.Client("127.0.0.1", mqtt_port, identifier="bench-pub") as client:
                    start = time.perf_counter()
                    for payload in payloads:
                        await client.publish("replicast/in/s", payload, qos=1)
                    await client.publish("replicast/in/s", json.dumps({"punctuation": CLOSED}), qos=1)
                    while app_punctuation(metrics_port) < 9e18:
                        await asyncio.sleep(0.02)
                    return time.perf_counter() - start

            return records / asyncio.run(publish())
        finally:
            node.terminate()
            node.wait(10)
            broker.terminate()
            broker.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--mqtt-records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is reported")
    args = parser.parse_args()
    print(f"node throughput, {args.records} records in batches of {args.batch} (best of {args.repeat})")
    for k in (1, 2, 3):
        rate = max(tcp_run(k, args.records, args.batch) for _ in range(args.repeat))
        print(f"  TCP, k={k} upstream replicas: {rate / 1000:8.1f} k distinct records/s "
              f"({k * rate / 1000:.1f} k record copies/s)")
    rate = max(mqtt_run(args.mqtt_records, args.batch) for _ in range(args.repeat))
    print(f"  MQTT ingest (mosquitto, QoS 1, {args.batch} records/message): {rate / 1000:8.1f} k records/s")


if __name__ == "__main__":
    main()
