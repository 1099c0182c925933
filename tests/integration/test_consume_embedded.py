"""``replicast consume`` against the embedded amqtt broker (what ``cluster up`` starts without a
broker URL, e.g. examples/cluster-fig1-eo.toml): amqtt speaks only MQTT 3.1.1 and answers an MQTT 5
CONNECT with properties by waiting, so the consumer must fall back to 3.1.1 by itself."""

from __future__ import annotations

import json
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
