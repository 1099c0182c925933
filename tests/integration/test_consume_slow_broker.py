"""The consumer loses nothing when a broker's answers are slow (docs/consume.md, "The consumer").

A broker draining a resumed session's backlog, or just a loaded one, may answer a SUBSCRIBE long
after it started sending the subscription's messages.  Here a proxy in front of a real mosquitto
holds every SUBACK back for longer than the consumer's MQTT time-out (10 s) while it passes
everything else, and records are published meanwhile: paho acknowledges each message as it arrives,
so a consumer that gave up on its subscription would have dropped them for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiomqtt

from replicast.consume import Consumer
from replicast.engine.core.events import Delivered
from replicast.engine.sinks import OutputIds, mqtt_items
from replicast.operators.record import CLOSED
from tests.integration.helpers import free_ports, mosquitto

#: Longer than the consumer's 10 s time-out on an MQTT exchange.
HOLD_SUBACK_S = 11.0
SUBACK = 9          # MQTT control packet type


async def read_packet(reader: asyncio.StreamReader) -> bytes:
    """One MQTT control packet: fixed header, remaining length (varint), body."""
    packet = bytearray(await reader.readexactly(1))
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        packet.append(byte)
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    packet += await reader.readexactly(length)
    return bytes(packet)


async def slow_suback_proxy(listen: int, broker: int) -> asyncio.Server:
    async def handle(client_reader, client_writer):
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", broker)
        loop = asyncio.get_running_loop()

        async def upstream():
            while data := await client_reader.read(65536):
                broker_writer.write(data)
            broker_writer.close()

        async def downstream():
            while True:
                packet = await read_packet(broker_reader)
                if packet[0] >> 4 == SUBACK:
                    loop.call_later(HOLD_SUBACK_S, lambda p=packet: client_writer.is_closing() or client_writer.write(p))
                else:
                    client_writer.write(packet)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await asyncio.gather(upstream(), downstream())
        client_writer.close()
        broker_writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", listen)


def payloads(n: int) -> list[bytes]:
    ids, out = OutputIds("slow"), []
    for i in range(n):
        event = Delivered("slow", [(1_000 + i, "s", float(i)), (1_000 + i, "s", float(i))], 1_000 + i, 0)
        out.append(mqtt_items(("server", "load"), event, ids.ids(event)))
    return out + [mqtt_items(("server", "load"), Delivered("slow", [], CLOSED, 0))]


def test_records_published_while_the_suback_is_late_are_handed_out(tmp_path):
    async def run(broker: int) -> list[dict]:
        port = free_ports(1)[0]
        proxy = await slow_suback_proxy(port, broker)
        got: list[dict] = []
        consumer = Consumer("slow", [f"mqtt://127.0.0.1:{port}"], client_id="slow-consumer")

        async def consume():
            async for record in consumer.records():
                got.append(record)
        reader = asyncio.create_task(consume())
        await asyncio.sleep(2.0)                  # the probe, the session, its SUBSCRIBE (answered late)
        async with aiomqtt.Client("127.0.0.1", broker, identifier="slow-publisher") as pub:
            for payload in payloads(50):         # the broker sends these before the SUBACK gets through
                await pub.publish("replicast/out/slow", payload, qos=1)
        try:
            await asyncio.wait_for(reader, HOLD_SUBACK_S + 20)
        finally:
            reader.cancel()
            proxy.close()
        return got

    with mosquitto(tmp_path) as broker:
        got = asyncio.run(run(broker))
    assert sorted((r["ts"], r["load"]) for r in got) == sorted((1_000 + i, float(i)) for i in range(50) for _ in (0, 1))
    assert len({r["@id"] for r in got}) == 100
