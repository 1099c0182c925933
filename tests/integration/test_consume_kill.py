"""A ``replicast consume`` process SIGKILLed while it drains a backlog loses nothing and repeats
nothing (docs/consume.md, "The consumer"): it acknowledges a message to the broker only once its
saved position covers it, so what it had received but not yet printed comes again to the restarted
process — with MQTT's usual acknowledgement on receipt, the broker forgets it and it is lost.

A real mosquitto queues PAYLOADS sink payloads (ids and punctuations as engine.sinks builds them)
for the consumer's persistent session while it is away; the consumer is started, killed -9 once it
has printed a fifth of the records, and restarted with the same position file and client id.  Its
output over both lives must be the reference: every record, each once.

The one exception is exact, not a tolerance: the records of life 1's output that its position
file did not cover at the kill (a kill between printing a payload and renaming its position over
the old one, a few µs per payload) are printed again — the test computes that set from the files
and allows exactly it, and it is empty in almost every run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import paho.mqtt.publish as publish

from replicast.consume_core import ID_KEY, Position
from replicast.engine.core.events import Delivered
from replicast.engine.sinks import OutputIds, mqtt_items
from replicast.operators.record import CLOSED
from tests.integration.helpers import ROOT, mosquitto, wait_for

NAMES = ("server", "load")
PAYLOADS = 600
PER_PAYLOAD = 200
CLIENT_ID = "test-consume-kill"


def backlog() -> tuple[list[bytes], list[str]]:
    """The payloads of one sink (equal records included: occurrences 0 and 1) and the reference ids."""
    sink, payloads, reference, ts = OutputIds("alerts"), [], [], 1_000_000
    for n in range(PAYLOADS):
        rows = [(ts + i // 4, f"s{i % 2}", 0.5) for i in range(PER_PAYLOAD)]
        ts = rows[-1][0] + 1
        event = Delivered("alerts", rows, rows[-1][0], 0)
        ids = sink.ids(event)
        reference.extend(ids)
        payloads.append(mqtt_items(NAMES, event, ids))
    payloads.append(mqtt_items(NAMES, Delivered("alerts", [], CLOSED, 0)))
    return payloads, reference


def consumer(port: int, tmp_path, life: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "replicast.engine.cli", "consume", "alerts", "--broker",
                             f"mqtt://127.0.0.1:{port}", "--position", str(tmp_path / "alerts.pos"),
                             "--client-id", CLIENT_ID], cwd=ROOT, stdout=open(tmp_path / f"out-{life}.jsonl", "w"),
                            stderr=open(tmp_path / f"consume-{life}.log", "w"))


def printed(path) -> list[dict]:
    """The records of one life's output; a line torn by the kill (the last one only) is not one."""
    lines = path.read_text().split("\n")
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            assert i == len(lines) - 1, f"{path}: line {i + 1} is not JSON: {line[:80]!r}"
    return records


def line_count(path) -> int:
    with open(path, "rb") as file:
        return file.read().count(b"\n")


def test_a_consumer_killed_while_draining_a_backlog_prints_each_record_once(tmp_path):
    payloads, reference = backlog()
    # no limit on the messages mosquitto queues for the consumer's session while it is away
    with mosquitto(tmp_path, "max_queued_messages 0\n") as port:
        first = consumer(port, tmp_path, 0)       # makes the persistent session and its subscription
        wait_for(lambda: "subscribed to" in (tmp_path / "consume-0.log").read_text(), 30, "the subscription")
        first.send_signal(signal.SIGKILL)
        first.wait()
        publish.multiple([{"topic": "replicast/out/alerts", "payload": p, "qos": 1} for p in payloads],
                         hostname="127.0.0.1", port=port, client_id="test-sink")

        lives = [consumer(port, tmp_path, 1)]
        try:
            wait_for(lambda: lives[0].poll() is not None or line_count(tmp_path / "out-1.jsonl") >= len(reference) // 5,
                     60, "a fifth of the backlog printed")
            os.kill(lives[0].pid, signal.SIGKILL)
            lives[0].wait()
            at_kill = Position.from_json((tmp_path / "alerts.pos").read_text())
            lives.append(consumer(port, tmp_path, 2))
            assert lives[1].wait(120) == 0, (tmp_path / "consume-2.log").read_text()[-2000:]
        finally:
            for process in lives:
                if process.poll() is None:
                    process.kill()

    one, two = printed(tmp_path / "out-1.jsonl"), printed(tmp_path / "out-2.jsonl")
    assert 0 < len(one) < len(reference), "the kill came while the backlog was being printed"
    uncovered = Counter(r[ID_KEY] for r in one if r["ts"] > at_kill.frontier and r[ID_KEY] not in at_kill.ids)
    assert sum(uncovered.values()) <= PER_PAYLOAD, uncovered            # at most the payload being printed
    got = Counter(r[ID_KEY] for r in one + two)
    missing = Counter(reference) - got
    assert not missing, f"{sum(missing.values())} records missing, e.g. {list(missing)[:3]}"
    assert got == Counter(reference) + uncovered, f"repeated: {(got - Counter(reference) - uncovered).most_common(3)}"
