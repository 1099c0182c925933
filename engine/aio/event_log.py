"""What the asyncio driver does with the core's events other than deliveries and dead letters.

Each event becomes one structured log line (``extra={"event": …}``, docs/node.md); two of them
also act: :class:`~engine.node.PeerTimedOut` and :class:`~engine.node.ProtocolError` drop the link
to that peer (``drop(node)``), which its dialer then dials again.  Refused control messages are
logged at most :data:`REFUSAL_LOG_BURST` a minute (the core counts them all).
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from replicast.engine.aio.logs import LogBudget
from replicast.engine.handshake import shorten
from replicast.engine.node import ControlRefused, Decided, Event, PeerTimedOut, ProtocolError, ReplicaChanged, StreamCutOff

log = logging.getLogger("replicast.node")

REFUSAL_LOG_BURST = 20


class EventLog:
    """Logs (and for two kinds acts on) the core's events; ``drop(node)`` closes a peer's link."""

    def __init__(self, drop: Callable[[str], None]):
        self._drop = drop
        self._control_log = LogBudget(log, "refused control messages", "control_refused", REFUSAL_LOG_BURST)
        self._handlers: dict[type, Callable] = {
            PeerTimedOut: self._peer_timed_out, ProtocolError: self._protocol_error,
            ReplicaChanged: self._replica_changed, ControlRefused: self._control_refused,
            Decided: self._decided, StreamCutOff: self._stream_cut_off,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _peer_timed_out(self, event: PeerTimedOut) -> None:
        log.warning("no heartbeat from %s; dropping the link", event.node, extra={"event": "peer_timeout"})
        self._drop(event.node)

    def _protocol_error(self, event: ProtocolError) -> None:
        log.warning("dropping the link to %s: %s", event.node, event.reason,
                    extra={"event": "protocol_error", "peer": event.node})
        self._drop(event.node)

    def _replica_changed(self, event: ReplicaChanged) -> None:
        log.info("replica %s: %s -> %s (%s)", event.replica, event.old, event.new, event.reason,
                 extra={"event": "replica_state", "replica": str(event.replica), "state": event.new})

    def _control_refused(self, event: ControlRefused) -> None:
        if self._control_log.allow(int(time.monotonic() // 60)):
            log.warning("refused a control message from %s: %s", shorten(event.node), shorten(event.reason, 200),
                        extra={"event": "control_refused", "peer": shorten(event.node)})

    def _decided(self, event: Decided) -> None:
        decision = event.decision
        kind = type(decision).__name__.lower()
        log.info("placement (%s): %s %s on %s", decision.reason, kind, decision.target, ", ".join(decision.nodes),
                 extra={"event": "placement_decision", "reason": decision.reason, "decision": kind,
                        "target": decision.target, "nodes": list(decision.nodes)})

    def _stream_cut_off(self, event: StreamCutOff) -> None:
        log.warning("stream replica %s -> %s on %s lagged past the retention limit (%d items kept); "
                    "its log no longer waits for it", event.stream.source, event.stream.target, event.node,
                    event.retained, extra={"event": "stream_cut", "peer": event.node})
