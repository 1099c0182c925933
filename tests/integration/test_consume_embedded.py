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
from tests.integration.helpers import ROOT, free_ports, wait_for, wait_port


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
