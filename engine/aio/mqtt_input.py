"""MQTT input without second occurrences from QoS-1 redelivery (docs/node.md, "QoS-1 redelivery"; §IV-B).

QoS 1 is at-least-once: when the connection breaks after the broker sent a PUBLISH but before it
got our PUBACK, it sends the message again after we reconnect (same session), with the same packet
identifier and the DUP flag set (MQTT 3.1.1 §4.4, §3.3.1.1).  The entry point cannot tell a
redelivery from a second, identical event, and the duplicate filter counts occurrences per stream
replica (§IV-B), so a redelivery would be delivered twice.

:class:`RedeliveryFilter` drops a message when the broker says it may be a redelivery (DUP set)
*and* one of the last :data:`REMEMBERED` messages had the same packet identifier, topic and
payload.  Limits, also in docs/node.md: a redelivery after more than ``REMEMBERED`` later messages
passes (brokers resend in-flight messages first after a reconnect, so it cannot happen with
mosquitto's default 20 in flight); a message this node handled before it restarted is not
remembered (a restart starts a clean session, so the broker does not redeliver to it anyway); a
message that reached us with DUP set without ever having been handled (its first copy was lost) is
taken, as it must be.

The DUP flag comes with each message from :class:`engine.aio.paho_link.Link` (paho's public
``MQTTMessage.dup``; aiomqtt 2.5 drops it and has no public way to read it, so the node's sessions
are driven on paho's external-event-loop API, as the consumer's are).  ``tests/engine/
test_mqtt_input.py`` makes a real broker redeliver a message and checks the installed paho reports
DUP and session-present on it, so an upgrade that loses either fails there, not in production.
A redelivery filter belongs to one broker session (packet identifiers are per session).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

#: How many recent messages (packet id, digest) are remembered.
REMEMBERED = 4096


class RedeliveryFilter:
    """Recognises QoS-1 redeliveries of messages already handled (module docstring)."""

    def __init__(self, capacity: int = REMEMBERED):
        self._seen: OrderedDict[int, bytes] = OrderedDict()
        self._capacity = capacity
        self.redeliveries = 0

    def is_redelivery(self, mid: int, dup: bool, topic: str, payload: bytes) -> bool:
        """Whether to drop this message; otherwise it is remembered as handled."""
        digest = hashlib.blake2b(topic.encode() + b"\0" + payload, digest_size=16).digest()
        if dup and mid and self._seen.get(mid) == digest:
            self.redeliveries += 1
            return True
        self._seen[mid] = digest
        self._seen.move_to_end(mid)
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return False
