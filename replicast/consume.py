"""``replicast.consume``: an application's records exactly once, from its sink replicas on one or
more brokers (docs/consume.md).

    async for record in consume("alerts", ["mqtt://127.0.0.1:1883"], position="alerts.pos"):
        ...

Each broker gets one MQTT session (QoS 1, a stable client id and a persistent session, so the
broker queues what is published while the consumer is away); every payload goes through
:class:`~replicast.consume_core.ExactlyOnce` (Alg. 1 on the output ids, §IV-B), and the position is
saved to ``position`` (atomically: a temporary file renamed over it) after each payload's records
were handed out — a consumer restarted with the same ``position`` and ``client_id`` neither skips
nor repeats, except the records of the one payload it was handing out when it was killed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aiomqtt
import msgspec
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from replicast.consume_core import ExactlyOnce, Order, Position
from replicast.engine.mqtt_config import BrokerAddress, parse_broker_url
from replicast.operators.errors import ReplicastError
from replicast.operators.record import CLOSED

__all__ = ["consume", "Consumer", "Order", "Position", "load_position", "save_position"]

log = logging.getLogger("replicast.consume")

OUT_TOPIC = "replicast/out/{app}"
#: CONNACK codes for "this protocol version is not spoken here" (as engine.aio.mqtt_session).
UNSUPPORTED_VERSION = (1, 132)
SESSION_EXPIRY_S = 3600
#: Seconds an MQTT 5 CONNECT may wait for its CONNACK before the next attempt speaks 3.1.1: a
#: 3.1.1-only broker (amqtt, the embedded one) answers an MQTT 5 CONNECT with properties by waiting
#: for more bytes, not by refusing its version.
V5_CONNECT_PROBE_S = 3


#: A payload as JSON (msgspec: a few times faster than the standard library's ``json`` here).
_json = msgspec.json.Decoder()


def _decode(payload: bytes):
    try:
        return _json.decode(payload)
    except msgspec.DecodeError as error:
        raise ValueError(str(error)) from None


class ConsumeError(ReplicastError):
    """A bad broker URL or position file (one line naming it)."""


def load_position(path: Path) -> Position:
    """The position saved at ``path``, or the start if there is none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Position()
    except OSError as error:
        raise ConsumeError(f"position {path}: {error.strerror or error}") from None
    try:
        return Position.from_json(text, str(path))
    except ValueError as error:
        raise ConsumeError(str(error)) from None


def save_position(path: Path, position: Position) -> None:
    """Write ``position`` to ``path`` atomically (a process killed meanwhile leaves the old one)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(position.to_json())
    os.replace(temporary, path)


class Consumer:
    """The sessions and the filter behind :func:`consume`; :meth:`records` iterates."""

    def __init__(self, app: str, brokers: Sequence[str] = ("mqtt://127.0.0.1:1883",), *,
                 order: Order = Order.ARRIVAL, position: str | Path | None = None, client_id: str | None = None,
                 until_closed: bool = True, before_save=None):
        if not brokers:
            raise ConsumeError("consume: name at least one broker")
        self.app, self.until_closed = app, until_closed
        #: Called after a payload's records were handed out, before its position is saved (flush here).
        self.before_save = before_save
        self.brokers = [parse_broker_url(url, "consume", ConsumeError) for url in brokers]
        self.position_path = Path(position) if position is not None else None
        start = load_position(self.position_path) if self.position_path is not None else Position()
        self.filter = ExactlyOnce(order, start)
        self.client_id = client_id or f"replicast-consume-{app}"
        self._queue: asyncio.Queue = asyncio.Queue()    # payloads, or a session task that ended
        self.bad_payloads = 0

    async def records(self) -> AsyncIterator[dict]:
        """Each record once (with its ``"@id"``); ends when the application closes (if
        ``until_closed``).  The position is saved after each payload."""
        async for batch in self.batches():
            for record in batch:
                yield record

    async def batches(self) -> AsyncIterator[list[dict]]:
        """As :meth:`records`, a payload's new records at a time (never an empty list): one step of
        the iteration per MQTT message rather than per record.  The position is saved once the
        consumer asks for the next batch — after it handled this one."""
        tasks = [asyncio.create_task(self._session(i, broker), name=f"consume {broker.url}")
                 for i, broker in enumerate(self.brokers)]
        for task in tasks:             # a session task never ends but by a bug: raise it here
            task.add_done_callback(lambda task: task.cancelled() or self._queue.put_nowait(task))
        queue, offer, decode = self._queue, self.filter.offer_payload, _decode
        try:
            while not (self.until_closed and self.filter.frontier == CLOSED):
                payload = queue.get_nowait() if queue.qsize() else await queue.get()
                if isinstance(payload, asyncio.Task):
                    payload.result()
                    raise RuntimeError(f"{payload.get_name()} ended")
                try:
                    records = offer(payload, decode)
                except ValueError:
                    self.bad_payloads += 1
                    continue
                if records:
                    yield records
                if self.before_save is not None:
                    self.before_save()
                if self.position_path is not None:
                    save_position(self.position_path, self.filter.position())
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _session(self, index: int, broker: BrokerAddress) -> None:
        """One broker: connect, subscribe, queue payloads; reconnect for ever."""
        identifier = self.client_id if len(self.brokers) == 1 else f"{self.client_id}-{index}"
        protocol = await self._protocol(broker, identifier)
        delay = 0.05
        while True:
            try:
                if protocol is aiomqtt.ProtocolVersion.V5:
                    properties = Properties(PacketTypes.CONNECT)
                    properties.SessionExpiryInterval = SESSION_EXPIRY_S
                    client = aiomqtt.Client(broker.host, broker.port, identifier=identifier, protocol=protocol,
                                            clean_start=False, properties=properties, keepalive=10, timeout=10)
                else:
                    client = aiomqtt.Client(broker.host, broker.port, identifier=identifier, protocol=protocol,
                                            clean_session=False, keepalive=10, timeout=10)
                async with client:
                    # No time-out: a resumed session's queued messages come before the SUBACK, and
                    # a subscription given up on would drop the messages received (and acknowledged)
                    # meanwhile.  They wait in the client's queue; a dead link still ends the wait.
                    await client.subscribe(OUT_TOPIC.format(app=self.app), qos=1, timeout=math.inf)
                    log.info("subscribed to %s on %s", OUT_TOPIC.format(app=self.app), broker.url)
                    delay = 0.05
                    async for message in client.messages:
                        payload = message.payload
                        self._queue.put_nowait(payload if isinstance(payload, bytes) else str(payload).encode())
            except aiomqtt.MqttCodeError as error:
                code = getattr(error.rc, "value", error.rc)
                if code in UNSUPPORTED_VERSION and protocol is aiomqtt.ProtocolVersion.V5:
                    protocol = aiomqtt.ProtocolVersion.V311
                    continue
                log.warning("broker %s: %s", broker.url, error)
            except aiomqtt.MqttError as error:
                log.warning("broker %s: %s", broker.url, error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _protocol(self, broker: BrokerAddress, identifier: str) -> aiomqtt.ProtocolVersion:
        """The MQTT version to speak to ``broker``, learnt on a throwaway clean session of its own
        (``<client id>-probe``).  Never on the consumer's session: a CONNECT that times out on this
        side may still have resumed that session on the broker's, which then sends what it queued
        and takes paho's automatic acknowledgements for messages this side drops.  A broker that
        leaves an MQTT 5 CONNECT unanswered for ``V5_CONNECT_PROBE_S`` (amqtt) speaks 3.1.1."""
        delay = 0.05
        while True:
            try:
                async with aiomqtt.Client(broker.host, broker.port, identifier=f"{identifier}-probe",
                                          protocol=aiomqtt.ProtocolVersion.V5, clean_start=True,
                                          timeout=V5_CONNECT_PROBE_S):
                    return aiomqtt.ProtocolVersion.V5
            except aiomqtt.MqttCodeError as error:
                if getattr(error.rc, "value", error.rc) in UNSUPPORTED_VERSION:
                    return aiomqtt.ProtocolVersion.V311
                log.warning("broker %s: %s", broker.url, error)
            except aiomqtt.MqttError as error:
                if "timed out" in str(error):
                    log.info("broker %s: no answer to an MQTT 5 CONNECT; speaking 3.1.1", broker.url)
                    return aiomqtt.ProtocolVersion.V311
                log.warning("broker %s: %s", broker.url, error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def consume(app: str, brokers: Sequence[str] = ("mqtt://127.0.0.1:1883",), **options) -> AsyncIterator[dict]:
    """Iterate application ``app``'s records exactly once (module docstring; options as
    :class:`Consumer`)."""
    async for record in Consumer(app, brokers, **options).records():
        yield record

