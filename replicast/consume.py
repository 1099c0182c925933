"""``replicast.consume``: an application's records exactly once, from its sink replicas on one or
more brokers (docs/consume.md).

    async for record in consume("alerts", ["mqtt://127.0.0.1:1883"], position="alerts.pos"):
        ...

Each broker gets one MQTT session (QoS 1, a stable client id and a persistent session, so the
broker queues what is published while the consumer is away); every payload goes through
:class:`~replicast.consume_core.ExactlyOnce` (Alg. 1 on the output ids, §IV-B), and the position is
saved to ``position`` (atomically: a temporary file renamed over it) after each payload's records
were handed out, and only then is the message acknowledged to its broker
(:mod:`replicast.engine.aio.paho_link`) — a consumer restarted with the same ``position`` and
``client_id`` neither skips nor repeats, except the records of the one payload it was handing out
when it was killed.  At most ``MAX_QUEUED`` messages wait to be handed out (flow control).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec

from replicast.consume_core import ExactlyOnce, Order, Position
from replicast.engine.aio.paho_link import (CONNACK_TIMEOUT_S, RECEIVE_MAXIMUM, ConnectRefused, Delivery, Link,
                                           NoConnack, Protocol)
from replicast.engine.mqtt_config import BrokerAddress, parse_broker_url
from replicast.operators.errors import ReplicastError
from replicast.operators.record import CLOSED

__all__ = ["consume", "Consumer", "Order", "Position", "load_position", "save_position"]

log = logging.getLogger("replicast.consume")

OUT_TOPIC = "replicast/out/{app}"
#: CONNACK codes for "this protocol version is not spoken here" (as engine.aio.mqtt_session).
UNSUPPORTED_VERSION = (1, 132)
#: Seconds an MQTT 5 CONNECT may wait for its CONNACK before the next attempt speaks 3.1.1: a
#: 3.1.1-only broker (amqtt, the embedded one) answers an MQTT 5 CONNECT with properties by waiting
#: for more bytes, not by refusing its version.
V5_CONNECT_PROBE_S = 3
#: Messages received and not yet handed out, from all brokers, past which the sockets are no longer
#: read (engine.aio.paho_link rule 2: brokers do not all keep MQTT 5's Receive Maximum).
MAX_QUEUED = 256


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


def stage_position(path: Path, position: Position) -> Path:
    """Write ``position`` beside ``path``; ``os.replace`` of the returned file commits it."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(position.to_json())
    return temporary


def save_position(path: Path, position: Position) -> None:
    """Write ``position`` to ``path`` atomically (a process killed meanwhile leaves the old one)."""
    os.replace(stage_position(path, position), path)


class Consumer:
    """The sessions and the filter behind :func:`consume`; :meth:`records` iterates."""

    def __init__(self, app: str, brokers: Sequence[str] = ("mqtt://127.0.0.1:1883",), *,
                 order: Order = Order.ARRIVAL, position: str | Path | None = None, client_id: str | None = None,
                 until_closed: bool = True, before_save=None, receive_maximum: int = RECEIVE_MAXIMUM):
        if not brokers:
            raise ConsumeError("consume: name at least one broker")
        self.app, self.until_closed = app, until_closed
        #: Called once a payload's records were handed out and its position written beside the
        #: position file, just before that file is renamed over it (write the output here: the
        #: window in which a kill repeats the payload is then this call's last write to the rename).
        self.before_save = before_save
        self.brokers = [parse_broker_url(url, "consume", ConsumeError) for url in brokers]
        self.position_path = Path(position) if position is not None else None
        start = load_position(self.position_path) if self.position_path is not None else Position()
        self.filter = ExactlyOnce(order, start)
        self.client_id = client_id or f"replicast-consume-{app}"
        self._queue: asyncio.Queue = asyncio.Queue()    # deliveries, or a session task that ended
        #: MQTT 5 Receive Maximum asked of each broker (unacknowledged messages it may send at once)
        self.receive_maximum = receive_maximum
        self._links: set[Link] = set()
        self._paused = False
        self.bad_payloads = 0
        #: The most messages that waited at once to be handed out (the flow control's bound)
        self.most_queued = 0

    async def records(self) -> AsyncIterator[dict]:
        """Each record once (with its ``"@id"``); ends when the application closes (if
        ``until_closed``).  The position is saved after each payload."""
        async for batch in self.batches():
            for record in batch:
                yield record

    async def batches(self) -> AsyncIterator[list[dict]]:
        """As :meth:`records`, a payload's new records at a time (never an empty list): one step of
        the iteration per MQTT message rather than per record.  Once the consumer asks for the next
        batch — after it handled this one — the position is saved and then the message is
        acknowledged to its broker: a consumer killed before that gets it again."""
        tasks = [asyncio.create_task(self._session(i, broker), name=f"consume {broker.url}")
                 for i, broker in enumerate(self.brokers)]
        for task in tasks:             # a session task never ends but by a bug: raise it here
            task.add_done_callback(lambda task: task.cancelled() or self._queue.put_nowait(task))
        queue, offer, decode = self._queue, self.filter.offer_payload, _decode
        try:
            while not (self.until_closed and self.filter.frontier == CLOSED):
                delivery = queue.get_nowait() if queue.qsize() else await queue.get()
                if isinstance(delivery, asyncio.Task):
                    delivery.result()
                    raise RuntimeError(f"{delivery.get_name()} ended")
                if self._paused:
                    self._resume_if_drained()
                try:
                    records = offer(delivery.payload, decode)
                except ValueError as error:
                    self.bad_payloads += 1
                    log.warning("broker %s: a payload on %s is not JSON (%s); skipped", delivery.link.broker.url,
                                OUT_TOPIC.format(app=self.app), error)
                    delivery.link.ack(delivery)
                    continue
                if records:
                    yield records
                self._commit(delivery)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _commit(self, delivery: Delivery) -> None:
        """The payload's records were handed out: save the position, then acknowledge the message
        (never before: the broker would not send it again to a consumer killed meanwhile)."""
        staged = stage_position(self.position_path, self.filter.position()) if self.position_path else None
        if self.before_save is not None:
            self.before_save()
        if staged is not None:
            os.replace(staged, self.position_path)
        delivery.link.ack(delivery)

    async def _session(self, index: int, broker: BrokerAddress) -> None:
        """One broker: connect, subscribe, queue deliveries; reconnect for ever.  A message is
        acknowledged by :meth:`_commit` once the saved position covers it (engine.aio.paho_link)."""
        identifier = self.client_id if len(self.brokers) == 1 else f"{self.client_id}-{index}"
        protocol = await self._protocol(broker, identifier)
        topic = OUT_TOPIC.format(app=self.app)
        delay = 0.05
        while True:
            link = Link(broker, identifier, protocol, clean=False, deliver=self._deliver,
                        on_subscribed=lambda: log.info("subscribed to %s on %s", topic, broker.url),
                        receive_maximum=self.receive_maximum)
            self._links.add(link)
            try:
                # A resumed session's queued messages may come before the SUBACK: they are queued
                # like any other, whenever the SUBACK comes (no time-out to give up on).
                await link.open(CONNACK_TIMEOUT_S)
                link.subscribe(topic)
                delay = 0.05
                if self._paused:
                    link.pause()
                await link.run()
                log.warning("broker %s: connection lost", broker.url)
            except ConnectRefused as error:
                if error.code in UNSUPPORTED_VERSION and protocol is Protocol.V5:
                    protocol = Protocol.V311
                    continue
                log.warning("broker %s: %s", broker.url, error)
            except (OSError, NoConnack) as error:
                log.warning("broker %s: %s", broker.url, error)
            finally:
                link.close()
                self._links.discard(link)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _deliver(self, delivery: Delivery) -> None:
        """A message from any link: queue it; past ``MAX_QUEUED`` stop reading every socket."""
        queue = self._queue
        queue.put_nowait(delivery)
        if queue.qsize() > self.most_queued:
            self.most_queued = queue.qsize()
        if queue.qsize() >= MAX_QUEUED and not self._paused:
            self._paused = True
            for link in self._links:
                link.pause()

    def _resume_if_drained(self) -> None:
        if self._paused and self._queue.qsize() <= MAX_QUEUED // 2:
            self._paused = False
            for link in self._links:
                link.resume()

    async def _protocol(self, broker: BrokerAddress, identifier: str) -> Protocol:
        """The MQTT version to speak to ``broker``, learnt on a throwaway clean session of its own
        (``<client id>-probe``).  Never on the consumer's session: a CONNECT that times out on this
        side may still have resumed that session on the broker's, which then sends what it queued.
        A broker that leaves an MQTT 5 CONNECT unanswered for ``V5_CONNECT_PROBE_S`` (amqtt)
        speaks 3.1.1."""
        delay = 0.05
        while True:
            probe = Link(broker, f"{identifier}-probe", Protocol.V5, clean=True, deliver=lambda delivery: None)
            try:
                await probe.open(V5_CONNECT_PROBE_S)
                return Protocol.V5
            except ConnectRefused as error:
                if error.code in UNSUPPORTED_VERSION:
                    return Protocol.V311
                log.warning("broker %s: %s", broker.url, error)
            except NoConnack:
                log.info("broker %s: no answer to an MQTT 5 CONNECT; speaking 3.1.1", broker.url)
                return Protocol.V311
            except OSError as error:
                log.warning("broker %s: %s", broker.url, error)
            finally:
                probe.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


async def consume(app: str, brokers: Sequence[str] = ("mqtt://127.0.0.1:1883",), **options) -> AsyncIterator[dict]:
    """Iterate application ``app``'s records exactly once (module docstring; options as
    :class:`Consumer`)."""
    async for record in Consumer(app, brokers, **options).records():
        yield record

