"""A restarted sink's read of its retained frontier (docs/consume.md, "A restarted sink"), against
both brokers replicast runs with: mosquitto and the embedded amqtt.

"Nothing retained" must be known from the marker the reader publishes after its subscription, not
guessed from a time-out: a node busy restoring its snapshot (its event loop blocked for a while
after subscribing) still reads the retained frontier, and an empty topic answers None without
waiting for the give-up (``read_retained`` raises TimeoutError when it gives up, so None here can
only come from the marker)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from contextlib import contextmanager

import aiomqtt
import pytest

from replicast.engine.aio.mqtt_session import read_retained
from replicast.engine.mqtt_config import BrokerAddress, MqttSettings
from replicast.engine.sinks import FRONTIER_TOPIC, frontier_payload, parse_frontier
from tests.integration.helpers import ROOT, free_ports, mosquitto, wait_port


@contextmanager
def embedded(tmp_path):
    port = free_ports(1)[0]
    broker = subprocess.Popen([sys.executable, "-m", "replicast.engine.aio.broker", "--port", str(port)], cwd=ROOT)
    try:
        wait_port(port)
        yield port
    finally:
        broker.terminate()
        broker.wait(10)


BROKERS = {"mosquitto": mosquitto, "amqtt": embedded}


async def retain(port: int, topic: str, payload: bytes) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier="test-retain",
                              protocol=aiomqtt.ProtocolVersion.V311) as client:
        await client.publish(topic, payload, qos=1, retain=True)


async def read(port: int, topic: str, *, busy_s: float = 0.0) -> bytes | None:
    """``read_retained`` as a restarted node calls it, with the event loop blocked for ``busy_s``
    right after the reader has subscribed (a node restoring a large snapshot)."""
    settings = MqttSettings(default=BrokerAddress(f"mqtt://127.0.0.1:{port}", "127.0.0.1", port))

    async def block_soon() -> None:
        await asyncio.sleep(0.05)
        time.sleep(busy_s)

    blocker = asyncio.create_task(block_soon()) if busy_s else None
    try:
        return await read_retained(settings.default, settings, "app", topic, give_up_s=60, suffix="frontier-test")
    finally:
        if blocker is not None:
            await blocker


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_the_retained_frontier_is_read_and_an_empty_topic_is_known_empty(tmp_path, broker):
    topic = FRONTIER_TOPIC.format(app="alerts")
    with BROKERS[broker](tmp_path) as port:
        assert asyncio.run(read(port, topic)) is None                  # the marker came back: nothing retained
        asyncio.run(retain(port, topic, frontier_payload(1234)))
        assert parse_frontier(asyncio.run(read(port, topic))) == 1234
        for _ in range(3):
            assert parse_frontier(asyncio.run(read(port, topic, busy_s=1.0))) == 1234
        assert asyncio.run(read(port, FRONTIER_TOPIC.format(app="other"), busy_s=1.0)) is None
