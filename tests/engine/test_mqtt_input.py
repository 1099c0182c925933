"""The contract engine/aio/mqtt_input.py relies on in the installed aiomqtt: its two callback hooks,
wrapped, still queue each message for the public ``messages`` iterator, and the wrapper reads the
DUP and session-present flags beside them (an aiomqtt upgrade that changes the hooks fails here)."""

from __future__ import annotations

import asyncio

import paho.mqtt.client as paho
from paho.mqtt.client import ConnectFlags
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.packettypes import PacketTypes

from replicast.engine.aio.mqtt_input import DupAwareClient, RedeliveryFilter


def publish(mid: int, payload: bytes, dup: bool) -> paho.MQTTMessage:
    message = paho.MQTTMessage(mid, b"replicast/in/cpu")
    message.payload, message.qos, message.dup = payload, 1, dup
    return message


def test_messages_come_through_the_public_iterator_with_their_dup_flags_in_order():
    async def main():
        client = DupAwareClient("127.0.0.1", 1)
        # The broker may reuse packet id 7 once acknowledged, before we read the first message.
        for mid, payload, dup in ((7, b"a", False), (8, b"b", True), (7, b"c", True), (7, b"d", False)):
            client._on_message(None, None, publish(mid, payload, dup))      # noqa: SLF001 (the hook under test)
        got = []
        async for message in client.messages:
            got.append((message.mid, message.payload, client.was_dup(message)))
            if len(got) == 4:
                break
        return got, client

    got, client = asyncio.run(main())
    assert got == [(7, b"a", False), (8, b"b", True), (7, b"c", True), (7, b"d", False)]
    assert client._dups == {}                                                # noqa: SLF001 (nothing left behind)


def test_the_connack_session_present_flag_is_kept():
    async def main():
        client = DupAwareClient("127.0.0.1", 1)
        assert client.session_present is False
        client._on_connect(None, None, ConnectFlags(session_present=True),  # noqa: SLF001 (the hook under test)
                           ReasonCode(PacketTypes.CONNACK, identifier=0))
        return client.session_present

    assert asyncio.run(main()) is True


def test_a_redelivery_is_dropped_only_with_dup_set_and_a_remembered_id_and_content():
    seen = RedeliveryFilter(capacity=2)
    assert not seen.is_redelivery(1, False, "t", b"x")
    assert seen.is_redelivery(1, True, "t", b"x")
    assert not seen.is_redelivery(1, False, "t", b"x")          # without DUP: a second, identical event
    assert not seen.is_redelivery(1, True, "t", b"y")           # other content under the same id
    assert seen.redeliveries == 1
