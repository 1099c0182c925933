"""The consumer's memory stays bounded while it drains a backlog slower than the broker sends it
(docs/consume.md, "The consumer"): a real mosquitto holds PAYLOADS messages for the consumer's
session, and a program that takes 2 ms per batch iterates over them.  The most messages waiting in
the library at once stay within ``MAX_QUEUED``: past it the library stops reading the socket.

The session also asks for MQTT 5's Receive Maximum, but that alone does not bound it: mosquitto
2.0.11 keeps it for a resumed session's backlog until the first PUBACK, then sends several queued
messages per PUBACK (seen: 160 unacknowledged with a Receive Maximum of 5).  Every record is
handed out once.
"""

from __future__ import annotations

import asyncio

import paho.mqtt.publish as publish

from replicast.consume import MAX_QUEUED, Consumer
from replicast.engine.core.events import Delivered
from replicast.engine.sinks import OutputIds, mqtt_items
from replicast.operators.record import CLOSED
from tests.integration.helpers import mosquitto

PAYLOADS = 1000
PER_PAYLOAD = 20


def backlog() -> list[bytes]:
    sink, out = OutputIds("alerts"), []
    for n in range(PAYLOADS):
        rows = [(1_000_000 + n * PER_PAYLOAD + i, f"s{i % 3}") for i in range(PER_PAYLOAD)]
        event = Delivered("alerts", rows, rows[-1][0], 0)
        out.append(mqtt_items(("server",), event, sink.ids(event)))
    return out + [mqtt_items(("server",), Delivered("alerts", [], CLOSED, 0))]


def test_a_slow_consumer_holds_a_bounded_number_of_messages(tmp_path):
    with mosquitto(tmp_path, "max_queued_messages 0\n") as port:
        async def drain() -> tuple[int, int]:
            def consumer():
                return Consumer("alerts", [f"mqtt://127.0.0.1:{port}"], client_id="test-flow")
            first = consumer().batches()
            waiting = asyncio.ensure_future(first.__anext__())
            await asyncio.sleep(1.5)                  # the persistent session and its subscription exist
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            await first.aclose()
            await asyncio.to_thread(publish.multiple, [{"topic": "replicast/out/alerts", "payload": p, "qos": 1}
                                                       for p in backlog()], hostname="127.0.0.1", port=port)
            slow, seen = consumer(), 0
            async for batch in slow.batches():
                seen += len(batch)
                await asyncio.sleep(0.002)            # the program's work on a batch
            return seen, slow.most_queued
        seen, most = asyncio.run(drain())
    assert seen == PAYLOADS * PER_PAYLOAD
    assert 1 < most <= MAX_QUEUED, most
