"""``replicast consume`` against the embedded amqtt broker (what ``cluster up`` starts without a
broker URL, e.g. examples/cluster-fig1-eo.toml): amqtt speaks only MQTT 3.1.1 and answers an MQTT 5
CONNECT with properties by waiting, so the consumer must fall back to 3.1.1 by itself."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import paho.mqtt.publish as publish

from replicast.operators.record import CLOSED
from tests.integration.helpers import ROOT, free_ports, mosquitto, wait_for, wait_port


def test_consume_reaches_the_embedded_broker_and_prints_each_record_once(tmp_path):
    port = free_ports(1)[0]
    broker = subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(port)], cwd=ROOT)
    consumer = None
    try:
        wait_port(port)
        log = tmp_path / "consume.log"
        consumer = subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "consume", "alerts", "--broker",
                                     f"mqtt://127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=open(log, "w"),
                                    text=True)
        wait_for(lambda: "subscribed to" in log.read_text(), 30, "the consumer's subscription")
        records = [{"ts": 1, "server": "s1", "@id": "1:0:aa"}, {"ts": 2, "server": "s2", "@id": "2:0:bb"}]
        payload = json.dumps(records + [{"punctuation": 1}])
        for _ in range(2):                     # two sink replicas' copies
            publish.single("replicast/out/alerts", payload, qos=1, hostname="127.0.0.1", port=port)
        publish.single("replicast/out/alerts", json.dumps([{"punctuation": CLOSED}]), qos=1, hostname="127.0.0.1",
                       port=port)
        out, _ = consumer.communicate(timeout=30)
        assert consumer.returncode == 0, log.read_text()[-2000:]
        assert [json.loads(line) for line in out.splitlines()] == records
    finally:
        for process in (consumer, broker):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(10)


def test_a_consumer_killed_and_restarted_gets_what_was_published_while_it_was_away(tmp_path):
    """The embedded broker queues messages for a consumer's persistent session while the consumer
    is away (engine/aio/broker.py: no session flagged anonymous).  The consumer is SIGKILLed once
    subscribed and idle (nothing in flight: amqtt 0.12 forgets QoS-1 messages in flight at a
    disconnect, docs/consume.md), two sink replicas' copies are published, and the restarted
    consumer, same position and client id, prints each record once."""
    port = free_ports(1)[0]
    broker = subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(port)], cwd=ROOT,
                              stderr=open(tmp_path / "broker.log", "w"))
    command = [sys.executable, "-m", "replicast.engine.cli", "consume", "alerts", "--broker", f"mqtt://127.0.0.1:{port}",
               "--position", str(tmp_path / "alerts.pos"), "--client-id", "test-consume-embedded-kill"]
    lives = []
    try:
        wait_port(port)
        for life in range(2):
            log = tmp_path / f"consume-{life}.log"
            lives.append(subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True))
            if life == 0:
                wait_for(lambda: "subscribed to" in log.read_text(), 30, "the consumer's subscription")
                lives[0].send_signal(signal.SIGKILL)
                lives[0].wait()
                records = [{"ts": t, "server": f"s{t % 3}", "@id": f"{t}:0:{t:04x}"} for t in range(1, 301)]
                payloads = [json.dumps(records[i:i + 50] + [{"punctuation": records[i + 49]["ts"]}])
                            for i in range(0, len(records), 50)]
                messages = [p for p in payloads for _ in range(2)] + [json.dumps([{"punctuation": CLOSED}])]
                publish.multiple([{"topic": "replicast/out/alerts", "payload": p, "qos": 1} for p in messages],
                                 hostname="127.0.0.1", port=port, client_id="test-sink")
        out, _ = lives[1].communicate(timeout=60)
        assert lives[1].returncode == 0, (tmp_path / "consume-1.log").read_text()[-2000:]
        assert [json.loads(line) for line in out.splitlines()] == records
    finally:
        for process in (*lives, broker):
            if process.poll() is None:
                process.terminate()
                process.wait(10)


def resumed_session_gets_again(port: int, client_id: str, sent: int = 5) -> list[bytes]:
    """MQTT 3.1.1 §4.4: QoS-1 messages a client received but had not acknowledged when its
    connection broke are sent again when it resumes its session (``clean_session = false``).
    ``sent`` messages are published to a subscriber that never acknowledges them, its connection is
    cut (its socket shut, no DISCONNECT: as a SIGKILLed consumer's), and the same client id resumes
    the session; returns the payloads sent again before a marker published after the resumption
    (a broker sends a resumed session's in-flight messages before new ones, so the marker coming
    first means none will come)."""
    import socket
    import threading

    import paho.mqtt.client as mqtt

    def client(**options) -> mqtt.Client:
        return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False,
                           protocol=mqtt.MQTTv311, **options)

    received, subscribed = [], threading.Event()
    first = client(manual_ack=True)                           # never acknowledges: all stay in flight
    first.on_subscribe = lambda *_: subscribed.set()
    first.on_message = lambda _c, _u, message: received.append(message.payload)
    first.connect("127.0.0.1", port)
    first.subscribe("replicast/out/alerts", qos=1)
    first.loop_start()
    try:
        assert subscribed.wait(10), "no SUBACK"
        publish.multiple([{"topic": "replicast/out/alerts", "payload": f"m{i}", "qos": 1} for i in range(sent)],
                         hostname="127.0.0.1", port=port, client_id=f"{client_id}-pub")
        wait_for(lambda: len(received) == sent, 10, "the messages in flight")
        first.socket().shutdown(socket.SHUT_RDWR)
    finally:
        first.loop_stop()
    again, marker = [], threading.Event()
    second = client()

    def on_message(_c, _u, message) -> None:
        (marker.set() if message.payload == b"marker" else again.append(message.payload))
    second.on_message = on_message
    second.on_connect = lambda *_: publish.single("replicast/out/alerts", "marker", qos=1, hostname="127.0.0.1",
                                                  port=port, client_id=f"{client_id}-marker")
    second.connect("127.0.0.1", port)
    second.loop_start()
    try:
        assert marker.wait(20), "the marker published after the resumption never came"
    finally:
        second.disconnect()
        second.loop_stop()
    return again


def test_the_embedded_broker_forgets_messages_in_flight_at_a_disconnect_mosquitto_sends_them_again(tmp_path):
    """Why docs/consume.md names mosquitto where the consumer itself may be killed: amqtt 0.12.1
    (the newest release) drops a session's in-flight QoS-1 messages when its connection ends — its
    handler's ``stop`` cancels the PUBACK waits and ``_handle_qos1_message_flow`` then removes them
    from ``inflight_out`` — so a consumer resuming its session with the same client id and
    ``clean_session = false`` gets nothing again; no broker setting changes it.  mosquitto sends them
    again.  If this fails for amqtt, a release fixed it: docs/consume.md must say so."""
    port = free_ports(1)[0]
    broker = subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(port)], cwd=ROOT,
                              stderr=open(tmp_path / "broker.log", "w"))
    try:
        wait_port(port)
        assert resumed_session_gets_again(port, "test-in-flight-amqtt") == []
    finally:
        broker.terminate()
        broker.wait(10)
    with mosquitto(tmp_path) as port:
        assert resumed_session_gets_again(port, "test-in-flight-mosquitto") == [f"m{i}".encode() for i in range(5)]
