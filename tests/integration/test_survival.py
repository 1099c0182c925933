"""A node never dies or goes silent from what a peer, a source or a sink does (docs/node.md,
dead letters included): real node processes and a real broker; the test plays the other peer.

* a 1,000-deep msgpack payload (it made the dead-letter path raise RecursionError inside the MQTT
  task, which died: input stopped for good while the node said "ready");
* one message of 20,000 bad items gives one bounded dead letter per node, with the count;
* a control frame the node cannot apply on a link it dialled drops that link (logged, counted) and
  the node dials again (it used to kill the dial task: never reconnected);
* a record with a bytes field reaches a FileSink (TypeError) and a failing callback sink: both
  counted, the next deliveries still happen.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import aiomqtt
import pytest

from replicast.engine.aio.driver import NodeDriver
from replicast.engine.cluster_config import load_cluster
from replicast.engine.messages import Batch, ConnectStream, Resume, StreamHead
from replicast.engine.wire import decode, encode
from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.plan import ReplicaId, StreamReplica
from replicast.operators.record import CLOSED
from tests.integration.helpers import (accept_as, authenticate, free_ports, metric, sealed,
                                       two_node_cluster, wait_for)

SECRET = "survival-test-secret"


def publish(port: int, payloads: list[bytes], topic: str = "replicast/in/cpu") -> None:
    async def send():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"survival-{os.getpid()}") as client:
            for payload in payloads:
                await client.publish(topic, payload, qos=1)
    asyncio.run(send())


def collect(port: int, topic: str, into: list, ready: threading.Event, stop: threading.Event) -> None:
    async def listen():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"survival-sub-{os.getpid()}") as client:
            await client.subscribe(topic, qos=1)
            # Ready once the broker delivers to us: a SUBACK can come before the subscription takes
            # effect in the broker, and a dead letter published in between is lost to this listener.
            while not ready.is_set():
                await client.publish(topic, b'{"probe": true}', qos=1)
                try:
                    message = await asyncio.wait_for(anext(client.messages), 0.5)
                except asyncio.TimeoutError:
                    continue
                if json.loads(message.payload) == {"probe": True}:
                    ready.set()
            while not stop.is_set():
                try:
                    message = await asyncio.wait_for(anext(client.messages), 0.2)
                except asyncio.TimeoutError:
                    continue
                item = json.loads(message.payload)
                if item != {"probe": True}:
                    into.append(item)
    asyncio.run(listen())


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """Node a hosts the entry point, the filter and the application (file + MQTT); b is absent
    (the tests play it), so a keeps dialling b's port."""
    tmp_path = tmp_path_factory.mktemp("survival")
    ports = free_ports(5)
    path = two_node_cluster(tmp_path, secret=SECRET, ports=ports[:4], broker_port=ports[4],
                            placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["a"]',
                            extra='[outputs.alerts]\nfile = "alerts.jsonl"')
    with cluster_without_b(path, tmp_path / "run", ports):
        yield {"dir": tmp_path, "a_metrics": ports[1], "b_port": ports[2], "broker": ports[4], "run": tmp_path / "run"}


class cluster_without_b:
    """``cluster up`` waits for every node to be ready; here b is played by the tests, so start
    the broker and node a the way ``cluster up`` does, from the same file, by hand."""

    def __init__(self, path, run_dir, ports):
        self.path, self.run_dir, self.ports = path, run_dir, ports

    def __enter__(self):
        import subprocess
        import sys
        from tests.integration.helpers import ROOT, wait_port
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.processes = [
            subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(self.ports[4])], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        wait_port(self.ports[4])
        log = (self.run_dir / "a.log").open("w")
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(self.path), "--name", "a", "--log-json"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        wait_port(self.ports[1])
        wait_for(lambda: metric(self.ports[1], "replicast_mqtt_connected") == 1.0, 30, "a's MQTT connection")
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(10)


def alerts(one_node) -> list[dict]:
    out = one_node["dir"] / "alerts.jsonl"
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def record(ts: int, server: str) -> dict:
    return {"ts": ts, "server": server, "load": 0.9}


def test_a_deeply_nested_payload_does_not_stop_the_input(one_node):
    deep = b"\x91" * 1000 + b"\xc0"                    # [[[…[nil]…]]], 1,000 deep, 1,001 bytes
    publish(one_node["broker"], [deep, json.dumps([record(1_000, "after-deep")]).encode()])
    wait_for(lambda: any(r["server"] == "after-deep" for r in alerts(one_node)), 30, "the record after the payload")
    assert metric(one_node["a_metrics"], "replicast_mqtt_connected") == 1.0


def test_twenty_thousand_bad_items_make_one_bounded_dead_letter(one_node):
    letters, ready, stop = [], threading.Event(), threading.Event()
    listener = threading.Thread(target=collect, args=(one_node["broker"], "replicast/dead-letter", letters, ready, stop))
    listener.start()
    try:
        assert ready.wait(20)
        bad = json.dumps([{"ts": 2_000 + i, "server": 7, "load": 0.5} for i in range(20_000)]).encode()
        # The node handles one session's messages in order and publishes their dead letters in order
        # on one session: once the last message's dead letter is here, any other would be too.
        last = json.dumps({"ts": 1, "last_of_the_test": 1}).encode()
        publish(one_node["broker"], [bad, json.dumps({"ts": 1, "nope": 1}).encode(), last])
        wait_for(lambda: any("last_of_the_test" in letter["reason"] for letter in letters), 30, "the last dead letter")
    finally:
        stop.set()
        listener.join(10)
    # (a dead letter of the test before may arrive too)
    letters = [l for l in letters if "'server' must be str" in l["reason"] or "nope" in l["reason"]]
    assert [letter["count"] for letter in letters] == [20_000, 1], [l["count"] for l in letters]
    assert "'server' must be str" in letters[0]["reason"]
    assert all(len(json.dumps(letter)) < 10_000 for letter in letters)


def test_a_control_frame_the_node_cannot_apply_drops_the_link_and_the_node_dials_again(one_node):
    server = socket.create_server(("127.0.0.1", one_node["b_port"]))
    server.settimeout(30)
    try:
        conn, _ = server.accept()                       # a dials b: we are b
        with conn:
            _, sealer, _, _ = accept_as(conn, "b", SECRET.encode(), {"a"})
            bogus = StreamReplica(ReplicaId("busy", 5), ReplicaId("nowhere", 3), 0)
            refused = metric(one_node["a_metrics"], "replicast_refused_control_total")
            conn.sendall(sealed(sealer, encode(ConnectStream(bogus, "b", "a"))))
            wait_for(lambda: metric(one_node["a_metrics"], "replicast_refused_control_total") > refused, 10,
                     "a to refuse the ConnectStream for a replica it does not host")
            conn.settimeout(10)
            assert conn.recv(65536) != b"", "a dropped the link for a frame it refused"   # keep-alives go on
        again, _ = server.accept()                      # we closed the link: the dial task lives, a dials again
        again.close()
    finally:
        server.close()
    # (The core refuses such a frame itself and counts it, never raising: an exception out of the
    # core is a bug, which stops the node (engine/node.py, tests/integration/test_crash_only.py).)
    assert metric(one_node["a_metrics"], "replicast_mqtt_connected") == 1.0


def test_a_sink_that_fails_is_counted_and_the_next_deliveries_still_happen(tmp_path):
    """In-process: node b hosts only the application, with a file sink and a callback sink that
    raises once; this test is node a and sends b batches with a bytes field, then a normal one."""
    ports = free_ports(5)
    path = two_node_cluster(tmp_path, secret=SECRET, ports=ports[:4], broker_port=ports[4],
                            placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["b"]',
                            extra='[outputs.alerts]\nfile = "alerts.jsonl"\nmqtt = false')
    seen = []

    def callback(event):
        seen.append(event)
        if len(seen) == 1:
            raise RuntimeError("the application's callback failed")

    async def main():
        driver = NodeDriver(load_cluster(path), "b", callbacks={"alerts": callback})
        task = asyncio.create_task(driver.run(install_signals=False))
        stream = StreamReplica(ReplicaId("busy", 0), ReplicaId("alerts", 0), 0)

        def peer():
            sock = socket.create_connection(("127.0.0.1", ports[2]), timeout=10)
            sealer, opener, decoder, early = authenticate(sock, "a", SECRET.encode(), "b")
            got = [decode(opener.open(body)) for body in early]
            while not any(isinstance(m, Resume) for m in got):      # b asks for the stream first
                got += [decode(opener.open(body)) for body in decoder.feed(sock.recv(65536))]
            sock.sendall(sealed(sealer, encode(StreamHead(stream, 0, 0, NO_PUNCTUATION)),
                                encode(Batch(stream, 0, 0, [(1_000, b"\xffbytes", 0.9)], None)),
                                encode(Batch(stream, 0, 1, [(1_001, "plain", 0.9)], CLOSED))))
            return sock

        for _ in range(100):
            try:
                sock = await asyncio.to_thread(peer)
                break
            except OSError:
                await asyncio.sleep(0.1)
        for _ in range(100):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.1)
        sock.close()
        driver.stop()
        await task
        return driver

    driver = asyncio.run(main())
    lines = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [line["server"] for line in lines] == ["\ufffdbytes", "plain"]
    assert len(seen) == 2
    assert driver.metrics.sink_errors.labels("alerts")._value.get() == 1


def test_a_dead_letter_item_holding_bytes_is_published(one_node):
    """Found by benchmarks/fuzz.py: a rejected msgpack item with a bytes value made the dead letter's
    JSON raise TypeError inside the MQTT task (restarted by its supervisor, but the message was lost)."""
    import msgpack
    before = metric(one_node["a_metrics"], "replicast_dead_letter_messages_total")
    publish(one_node["broker"], [msgpack.packb({"ts": 1, "server": b"\xffraw", "load": 0.5}, use_bin_type=True)])
    wait_for(lambda: metric(one_node["a_metrics"], "replicast_dead_letter_messages_total") == before + 1, 20,
             "the dead letter")
    assert '"event": "task_failed"' not in (one_node["run"] / "a.log").read_text()
