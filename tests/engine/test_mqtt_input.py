"""The contract engine/aio/mqtt_input.py and mqtt_session.py rely on in the installed paho-mqtt,
through its public API only (engine/aio/paho_link.py): a real mosquitto redelivers a message that
was not acknowledged, and the link reports it with DUP set on a resumed session (CONNACK's
session-present flag); a clean start reports no session.  A paho upgrade that loses either flag
fails here, not in production.  Then the redelivery filter's rule (§IV-B: a redelivery is not a
second occurrence)."""

from __future__ import annotations

import asyncio

import pytest

from replicast.engine.aio.mqtt_input import RedeliveryFilter
from replicast.engine.aio.paho_link import Delivery, Link, Protocol
from replicast.engine.mqtt_config import BrokerAddress
from tests.integration.helpers import mosquitto

TOPIC = "replicast/in/cpu"


async def _open(broker, identifier: str, protocol: Protocol, *, clean: bool, inbox: asyncio.Queue,
                subscribe: bool = False, on_published=lambda mid: None) -> Link:
    subscribed = asyncio.Event()
    link = Link(broker, identifier, protocol, clean=clean, deliver=inbox.put_nowait, on_subscribed=subscribed.set,
                on_published=on_published)
    await link.open(10)
    if subscribe:
        link.subscribe(TOPIC)
        await asyncio.wait_for(subscribed.wait(), 10)
    return link


async def _redelivered(port: int, protocol: Protocol) -> tuple[Delivery, bool, Delivery, bool]:
    """Receive one message without acknowledging it, reconnect: (first copy, session present then,
    second copy, session present on the resumed connection)."""
    broker = BrokerAddress(f"mqtt://127.0.0.1:{port}", "127.0.0.1", port)
    inbox: asyncio.Queue[Delivery] = asyncio.Queue()
    node = await _open(broker, "node", protocol, clean=True, inbox=inbox)
    node.close()                                      # the clean start discards any session
    node = await _open(broker, "node", protocol, clean=False, inbox=inbox, subscribe=True)
    fresh = node.session_present
    acked = asyncio.get_running_loop().create_future()
    sender = await _open(broker, "sender", protocol, clean=True, inbox=asyncio.Queue(), on_published=acked.set_result)
    mid = sender.publish(TOPIC, b"42")
    assert await asyncio.wait_for(acked, 10) == mid
    first = await asyncio.wait_for(inbox.get(), 10)
    node.close()                                      # no PUBACK went: the broker keeps it for the session
    node = await _open(broker, "node", protocol, clean=False, inbox=inbox)
    second = await asyncio.wait_for(inbox.get(), 10)
    resumed = node.session_present
    node.close()
    sender.close()
    return first, fresh, second, resumed


@pytest.mark.parametrize("protocol", [Protocol.V5, Protocol.V311])
def test_a_redelivery_comes_with_dup_set_on_a_resumed_session(tmp_path, protocol):
    with mosquitto(tmp_path) as port:
        first, fresh, second, resumed = asyncio.run(_redelivered(port, protocol))
    assert (first.topic, first.payload, first.dup) == (TOPIC, b"42", False)
    assert fresh is False                             # after the clean start, no session was kept
    assert (second.topic, second.payload, second.mid, second.dup) == (TOPIC, b"42", first.mid, True)
    assert resumed is True


def test_a_redelivery_is_dropped_only_with_dup_set_and_a_remembered_id_and_content():
    seen = RedeliveryFilter(capacity=2)
    assert not seen.is_redelivery(1, False, "t", b"x")
    assert seen.is_redelivery(1, True, "t", b"x")
    assert not seen.is_redelivery(1, False, "t", b"x")          # without DUP: a second, identical event
    assert not seen.is_redelivery(1, True, "t", b"y")           # other content under the same id
    assert seen.redeliveries == 1
