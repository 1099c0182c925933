"""QoS-1 redelivery is not a second occurrence (docs/node.md): a real mosquitto, a real node,
and between them a proxy that loses the node's PUBACK for one message and breaks the connection, so
mosquitto delivers that message again (DUP set, same packet id) when the node reconnects.  The
record must be delivered once; the same payload published again as a new message is a second
occurrence and must be delivered again."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading

import aiomqtt

from replicast.operators.record import CLOSED
from tests.integration.helpers import ROOT, free_ports, metric, mosquitto, shut, two_node_cluster, wait_for, wait_port

PUBACK = 4


class PubackLosingProxy:
    """Forwards node <-> broker; once armed, drops the node's next PUBACK and cuts the connection."""

    def __init__(self, listen: int, broker: int):
        self.server = socket.create_server(("127.0.0.1", listen))
        self.broker = broker
        self.armed, self.cut = threading.Event(), threading.Event()
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def break_connections(self) -> None:
        """Cut every connection (nothing lost): the node reconnects, now resuming its session."""
        shut(*self.connections, close=False)

    def _serve(self) -> None:
        while True:
            try:
                node, _ = self.server.accept()
            except OSError:
                return
            broker = socket.create_connection(("127.0.0.1", self.broker))
            self.connections += [node, broker]
            threading.Thread(target=self._node_to_broker, args=(node, broker), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, node), daemon=True).start()

    @staticmethod
    def _packets(buffer: bytes):
        """Whole MQTT packets at the front of ``buffer`` and the rest (fixed header + varint length)."""
        packets = []
        while len(buffer) >= 2:
            length, multiplier, i = 0, 1, 1
            while True:
                if i >= len(buffer):
                    return packets, buffer
                byte = buffer[i]
                length += (byte & 0x7F) * multiplier
                multiplier *= 128
                i += 1
                if not byte & 0x80:
                    break
            if len(buffer) < i + length:
                break
            packets.append(buffer[:i + length])
            buffer = buffer[i + length:]
        return packets, buffer

    def _node_to_broker(self, node: socket.socket, broker: socket.socket) -> None:
        buffer = b""
        try:
            while data := node.recv(65536):
                packets, buffer = self._packets(buffer + data)
                for packet in packets:
                    if packet[0] >> 4 == PUBACK and self.armed.is_set() and not self.cut.is_set():
                        self.cut.set()                  # lost: the broker never hears of it
                        raise OSError("cut")
                    broker.sendall(packet)
        except OSError:
            pass
        finally:
            shut(node, broker)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()


def closed(metrics_port: int) -> bool:
    try:
        return metric(metrics_port, "replicast_app_punctuation") == float(CLOSED)
    except KeyError:                    # nothing delivered with a punctuation yet
        return False


def publish(port: int, payloads: list[str]) -> None:
    async def send():
        async with aiomqtt.Client("127.0.0.1", port, identifier=f"redelivery-{os.getpid()}") as client:
            for payload in payloads:
                await client.publish("replicast/in/cpu", payload, qos=1)
    asyncio.run(send())


def test_a_qos1_redelivery_is_delivered_once_and_a_new_identical_message_again(tmp_path):
    with mosquitto(tmp_path) as broker:
        proxy_port, *ports = free_ports(5)
        path = two_node_cluster(tmp_path, secret="redelivery-secret", ports=ports, broker_port=proxy_port,
                                broker=f"mqtt://127.0.0.1:{proxy_port}",
                                placement='cpu = ["a"]\nbusy = ["a"]\nalerts = ["a"]',
                                extra='[outputs.alerts]\nfile = "alerts.jsonl"\nmqtt = false')
        proxy = PubackLosingProxy(proxy_port, broker)
        log = (tmp_path / "a.log").open("w")
        node = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "node", "--config", str(path), "--name", "a",
                                 "--log-json"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_port(ports[1])
            wait_for(lambda: metric(ports[1], "replicast_mqtt_connected") == 1.0, 30, "a's MQTT connection")
            # Break the node's connection once, so the PUBACK is lost on a resumed session (where
            # QoS 1 redelivers), as after any broken connection.
            proxy.break_connections()
            wait_for(lambda: log.flush() or (tmp_path / "a.log").read_text().count('"event": "mqtt_up"') >= 2, 30,
                     "a's second MQTT session")
            wait_for(lambda: metric(ports[1], "replicast_mqtt_connected") == 1.0, 30, "a's MQTT connection")
            out = tmp_path / "alerts.jsonl"
            payload = json.dumps({"ts": 1_000, "server": "once", "load": 0.9})
            proxy.armed.set()
            publish(broker, [payload])
            wait_for(proxy.cut.is_set, 20, "the proxy to lose the node's PUBACK")
            wait_for(lambda: metric(ports[1], "replicast_mqtt_redeliveries_total") == 1.0, 30,
                     "mosquitto's redelivery to reach the node and be recognised")
            publish(broker, [payload, json.dumps({"punctuation": CLOSED})])    # a real second occurrence
            wait_for(lambda: closed(ports[1]), 30, "the stream to close")
            lines = [json.loads(line) for line in out.read_text().splitlines()]
            assert [line["server"] for line in lines] == ["once", "once"], lines
        finally:
            node.terminate()
            node.wait(10)
            proxy.close()
