"""The sending side of a node core: emitting into output logs, serving routes, acks and retention (§II-B).

Rules of this module:

1. Every upstream replica feeds every downstream replica (§III): an emitted batch is appended once
   to the replica's :class:`~engine.core.output_log.OutputLog` and sent on each route that is
   sending (``ACTIVE`` or ``CUT``), as one :class:`~engine.messages.Batch` per remote route.
2. A route sends nothing until its receiver says where to start (messages rule 6): a
   :class:`~engine.messages.Resume` is answered with a :class:`~engine.messages.StreamHead` and the
   retained items from there; a :class:`~engine.messages.Hold` pins the log and stops sending; a
   :class:`~engine.messages.Standby` stops sending and pins the log where the receiver's port
   would lack something (failover modes, messages rule 7).
3. The log is kept from the lowest acknowledgement of the routes that retain (remote sending routes
   and pending ones); a route that lags past ``retention_items`` is cut off (it stops retaining,
   logged and counted), so memory never grows with what a peer fails to do.
4. A coordinator connects a stream replica at both ends with two messages on two links, so the
   receiver's request may come before the sender's own :class:`~engine.messages.ConnectStream`.
   Such an *early* request is kept (at most :data:`EARLY_REQUESTS`, for ``join_timeout_us``) and
   answered once the route exists.
5. A process-pair primary (mode ``synchronization``, :mod:`engine.core.pairs`) holds its output:
   items from its ``gate`` on are appended to the log but neither sent nor trimmed until
   :meth:`Sender.release` lets them go, once its backup acknowledged the steps that made them.
6. A request for a replica this node does not host (it restarted without a replica a coordinator
   had placed here) is answered :class:`~engine.messages.NotHosted` — and still kept as rule 4
   says, for a deployment that may yet come: the receiver stops waiting for the stream replica
   (receiver rule 6) and a later stream head positions it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replicast.engine.core.events import Delivered, StreamCutOff
from replicast.engine.core.outbox import Outbox
from replicast.engine.core.hosted import Hosted, ReplicaKind, Route
from replicast.engine.core.states import ReplicaState, RouteEvent, RouteState, advance
from replicast.engine.messages import Ack, Batch, Hold, NotHosted, Resume, Standby, StreamHead
from replicast.engine.wire import EncodedRecords
from replicast.operators.plan import StreamReplica
from replicast.operators.record import Record

if TYPE_CHECKING:
    from replicast.engine.core.pairs import Pairs, Unpaired
    from replicast.engine.core.stats import Latency
    from replicast.operators.plan import ReplicaId

_SENDING = (RouteState.ACTIVE, RouteState.CUT)
#: Requests for stream replicas this node was not told about yet, kept for the ConnectStream (rule 4).
EARLY_REQUESTS = 256


class Sender:
    """Routes and output logs of one node's hosted replicas.  It reads the hosted replicas, two
    limits (``retention_items``, ``join_timeout_us``) and whether the mode keeps standbys
    (:class:`~engine.core.modes.Traits` ``follows_one``), sends through the outbox, keeps the
    applications' latencies, and asks the mode's pairs plug-in whether output behind a gate may go
    out (:meth:`engine.core.pairs.Pairs.held` answers with an offset: an intent, not a call back)."""

    def __init__(self, hosted: "dict[ReplicaId, Hosted]", outbox: Outbox, counters: dict[str, int],
                 latency: "dict[str, Latency]", *, retention_items: int, join_timeout_us: int, standbys: bool,
                 pairs: "Pairs | Unpaired"):
        self.hosted, self.out, self.counters, self.latency = hosted, outbox, counters, latency
        self.retention_items, self.join_timeout_us, self.standbys = retention_items, join_timeout_us, standbys
        self.pairs = pairs
        #: Installed trace queries' tracepoints (engine.core.tracepoints), set by the node core; None while none.
        self.tracer: Any = None          # a tracepoints.Tracer while a trace query is installed
        self.early: dict[StreamReplica, tuple[str, Resume | Hold | Standby, int]] = {}   # rule 4

    # -- emitting ---------------------------------------------------------------------------------
    def emit(self, hosted: Hosted, records: list[Record], punctuation: int | None, now: int,
             path: tuple[str, ...] = ()) -> None:
        """``hosted`` outputs ``records`` then ``punctuation``, caused by a batch that came along ``path``."""
        if not records and punctuation is None:
            return
        hosted.records_out += len(records)
        if hosted.hop:
            path += hosted.hop
        if self.tracer is not None and self.tracer.emitting:
            path = self.tracer.emit(hosted, records, punctuation, now, path)         # docs/tracing.md
        if hosted.kind is ReplicaKind.APPLICATION:
            self.deliver(hosted, records, punctuation, now, path)
            return
        records = EncodedRecords(records)          # one encoding for every stream replica (wire rule 4)
        log = hosted.log
        offset = log.append(records, punctuation, path)
        if hosted.gate is not None:
            upto = self.pairs.held(hosted)             # a process-pair primary: out once acknowledged (rule 4)
            if upto is not None:
                self.release(hosted, upto)
        else:
            out = self.out
            epoch, name, local, outbox, connected = hosted.epoch, out.name, out.local, out.messages, out.connected
            for stream, route in hosted.routes.items():
                if route.state in _SENDING:
                    node = route.node
                    if node == name:
                        local.append((stream, epoch, offset, records, punctuation, path))
                    elif node in connected:
                        outbox.append((node, Batch(stream, epoch, offset, records, punctuation, path)))
        if punctuation is not None and self.standbys:
            self._cover_standbys(hosted)
        if log.frontier is None and punctuation is not None and hosted.kind is ReplicaKind.ENTRY \
                and hosted.state is ReplicaState.LIVE:
            log.frontier = punctuation                 # a (re)started entry point: lifecycle rule 5
            self.serve_parked(hosted)
        if not hosted.retained:
            log.trim(log.end if hosted.gate is None else hosted.gate)
        elif len(log) > self.retention_items:
            self._cut_laggards(hosted)

    def deliver(self, hosted: Hosted, records: list[Record], punctuation: int | None, now: int,
                path: tuple[str, ...]) -> None:
        """An application's output: its latency noted, the delivery an event for the driver."""
        self.latency[hosted.replica.name].add(now, records)
        self.out.event(Delivered(hosted.replica.name, records, punctuation, now, path))

    def release(self, hosted: Hosted, upto: int | None) -> None:
        """A process-pair primary's held output below offset ``upto`` goes out (rule 4); ``upto`` None:
        all of it, and nothing is held any more."""
        gate = hosted.gate
        if gate is None:
            return
        log = hosted.log
        end = log.end if upto is None else min(upto, log.end)
        if end > gate:
            epoch, name = hosted.epoch, self.out.name
            for first, records, punctuation, path, _, _ in log.since(gate):
                if first >= end:
                    break
                for stream, route in hosted.routes.items():
                    if route.state in _SENDING:
                        if route.node == name:
                            self.out.local.append((stream, epoch, first, records, punctuation, path))
                        elif route.node in self.out.connected:
                            self.out.messages.append((route.node, Batch(stream, epoch, first, records, punctuation, path)))
        hosted.gate = None if upto is None else max(gate, end)
        if not hosted.retained:
            log.trim(log.end if hosted.gate is None else hosted.gate)

    # -- the receiver says where to start (rule 2) ------------------------------------------------
    def on_resume(self, src: str, message: Resume, now: int) -> None:
        hosted, route = self._route(src, message, now)
        if route is None:
            return
        if hosted.log.frontier is None or hosted.state is ReplicaState.JOINING:
            hosted.parked[message.stream] = (message.epoch, message.offset)
            return
        self.serve(hosted, message.stream, route, message.epoch, message.offset)

    def serve(self, hosted: Hosted, stream: StreamReplica, route: Route, epoch: int | None, offset: int) -> None:
        """Start sending ``stream`` from ``offset`` of incarnation ``epoch`` (or from the log's start)."""
        log = hosted.log
        start = offset if epoch == hosted.epoch and log.base <= offset <= log.end else log.base
        route.state = advance(route.state, RouteEvent.SERVE)
        route.acked, route.standby = start, None
        send = self.out.send
        send(route.node, StreamHead(stream, hosted.epoch, start, log.frontier, log.lineage_at(start)))
        gate = hosted.gate
        for first, records, punctuation, path, _, _ in log.since(start):
            if gate is not None and first >= gate:
                break                                  # held for a process pair's backup (rule 4)
            send(route.node, Batch(stream, hosted.epoch, first, records, punctuation, path))
        # Only now: an active route to this node itself retains nothing, so trimming first would drop
        # the very batches its StreamHead promised (tests/engine/test_local_stream_replay.py).
        self.retrim(hosted)

    def serve_parked(self, hosted: Hosted) -> None:
        """The log's frontier is known now: answer the Resume requests that waited for it."""
        if hosted.log.frontier is None:
            return
        parked, hosted.parked = hosted.parked, {}
        for stream, (epoch, offset) in parked.items():
            route = hosted.routes.get(stream)
            if route is not None:
                self.serve(hosted, stream, route, epoch, offset)

    def on_hold(self, src: str, message: Hold, now: int) -> None:
        hosted, route = self._route(src, message, now)
        if route is None:
            return
        hosted.parked.pop(message.stream, None)
        route.state = advance(route.state, RouteEvent.HOLD)
        route.acked, route.standby = hosted.log.base, None   # keep everything retained now, until it resumes
        self.retrim(hosted)

    def on_standby(self, src: str, message: Standby, now: int) -> None:
        """A failover standby (messages rule 7): stop sending; retain only what a switch would need."""
        hosted, route = self._route(src, message, now)
        if route is None:
            return
        hosted.parked.pop(message.stream, None)
        route.state = advance(route.state, RouteEvent.STANDBY)
        route.standby = message.punctuation if route.state is RouteState.PENDING else None
        if route.standby is not None:
            route.acked = hosted.log.covered(route.standby)
            self.retrim(hosted)

    def _cover_standbys(self, hosted: Hosted) -> None:
        """A punctuation was emitted: what standby receivers already have need not be kept for them
        (a standby often lags the replica its receiver follows)."""
        changed = False
        for route in hosted.routes.values():
            if route.standby is not None and route.state is RouteState.PENDING:
                covered = hosted.log.covered(route.standby)
                if covered > route.acked:
                    route.acked, changed = covered, True
        if changed:
            self.retrim(hosted)

    def _route(self, src: str, message: Resume | Hold | Standby, now: int) -> tuple[Hosted | None, Route | None]:
        stream = message.stream
        hosted = self.hosted.get(stream.source)
        route = hosted.routes.get(stream) if hosted is not None else None
        if route is None or route.node != src:
            self.counters["stale_requests"] += 1     # removed, or not connected here (yet: rule 4)
            if hosted is None:
                self.out.send(src, NotHosted(stream))     # rule 6: the receiver must not wait for it
            if route is None:
                early = self.early
                early.pop(stream, None)
                early[stream] = (src, message, now)
                while len(early) > EARLY_REQUESTS:
                    del early[next(iter(early))]
            return None, None
        return hosted, route

    def connected(self, stream: StreamReplica, route: Route, now: int) -> None:
        """``stream`` was just connected here: answer its receiver's early request, if any (rule 4)."""
        request = self.early.pop(stream, None)
        if request is None:
            return
        src, message, at = request
        if src == route.node and now - at <= self.join_timeout_us:
            self.counters["early_requests"] += 1
            handler = {Resume: self.on_resume, Hold: self.on_hold, Standby: self.on_standby}[type(message)]
            handler(src, message, now)

    # -- connections ------------------------------------------------------------------------------
    def on_peer_down(self, node: str) -> None:
        for hosted in self.hosted.values():
            changed = False
            for stream, route in hosted.routes.items():
                if route.node == node:
                    hosted.parked.pop(stream, None)
                    if route.state in (RouteState.ACTIVE, RouteState.CUT):
                        route.state = advance(route.state, RouteEvent.PEER_DOWN)
                        changed = True
            if changed:
                self.retrim(hosted)

    # -- acknowledgements and retention (rule 3) --------------------------------------------------
    def on_ack(self, src: str, ack: Ack, now: int) -> None:
        hosted = self.hosted.get(ack.stream.source)
        route = hosted.routes.get(ack.stream) if hosted is not None else None
        if route is None or route.node != src or ack.epoch != hosted.epoch or route.state is not RouteState.ACTIVE:
            return
        previous = route.acked
        if ack.offset <= previous or ack.offset > hosted.log.end:
            return
        route.acked = ack.offset
        if previous == hosted.floor:
            hosted.lagging -= 1
        if hosted.floor is None or hosted.lagging <= 0:
            self.retrim(hosted)

    def retrim(self, hosted: Hosted) -> None:
        """Recompute the floor over the retaining routes and trim the log to it."""
        name = self.out.name
        offsets = [r.acked for r in hosted.routes.values()
                   if r.state is RouteState.PENDING or (r.state is RouteState.ACTIVE and r.node != name)]
        hosted.retained = bool(offsets)
        limit = hosted.log.end if hosted.gate is None else hosted.gate    # never what is held (rule 4)
        if not offsets:
            hosted.floor, hosted.lagging = None, 0
            hosted.log.trim(limit)
            return
        hosted.floor = floor = min(offsets)
        hosted.lagging = offsets.count(floor)
        hosted.log.trim(min(floor, limit))

    def _cut_laggards(self, hosted: Hosted) -> None:
        """The log outgrew the retention limit: stop waiting for the routes at the floor."""
        limit = self.retention_items
        while hosted.retained and len(hosted.log) > limit:
            floor = hosted.floor
            for stream, route in hosted.routes.items():
                if route.acked == floor and route.state in (RouteState.ACTIVE, RouteState.PENDING) \
                        and (route.state is RouteState.PENDING or route.node != self.out.name):
                    route.state = advance(route.state, RouteEvent.LAGGED)
                    self.counters["streams_cut"] += 1
                    self.out.event(StreamCutOff(stream, route.node, len(hosted.log)))
            self.retrim(hosted)
