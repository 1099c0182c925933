"""The node core: replicas, entry points and applications of one server, with no I/O (DESIGN.md §6).

Rules of this module (h11 style):

1. No clock, socket, thread, asyncio, simpy, time or random.  Time enters as ``now`` (int µs,
   keyword-only) on every call; the core never asks for it.
2. Inputs are calls: :meth:`NodeCore.receive` (a message from a node, by name),
   :meth:`~NodeCore.on_source` (a payload from an external source), :meth:`~NodeCore.on_peer_up` /
   :meth:`~NodeCore.on_peer_down` (the driver's connection state) and :meth:`~NodeCore.handle_timer`.
3. Outputs are drained: :meth:`~NodeCore.messages_to_send` (``(node, message)`` pairs, in order per
   node), :meth:`~NodeCore.events` (deliveries, dead letters, time-outs) and
   :meth:`~NodeCore.next_timer`.  After any input call the driver drains all three.
4. The core assumes per-node FIFO delivery and nothing else: messages to a disconnected node are
   not queued; :meth:`on_peer_up` replays every stream replica to that node from its last
   acknowledged offset (:mod:`engine.output_log`), and receivers skip offsets they already hold.
5. Every upstream replica feeds every downstream replica (§III); each input port merges its stream
   replicas with a DuplicateFilter, sorted when the consumer is order-sensitive (§IV-B, §IV-C) —
   the same :class:`~operators.replica.OperatorReplica` the replay harness runs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from engine.entry import EntryPoint, decode_payload
from engine.messages import (Ack, Batch, ConnectStream, DeployReplica, DisconnectStream, Heartbeat, Message,
                             RemoveReplica, Statistics, StatisticsRequest)
from engine.output_log import OutputLog
from engine.wire import EncodedRecords, PackedRecords, WireError
from operators.errors import InputError, QueryError
from operators.plan import PhysicalPlan, ReplicaId, StreamReplica, plan
from operators.query import Query
from operators.record import Record
from operators.replica import OperatorReplica, application_sink


# -- options and events ---------------------------------------------------------------------------
_KEYED = (EncodedRecords, PackedRecords)      # records that may carry their bytes as a content key


@dataclass(frozen=True)
class NodeOptions:
    """Timing of a node.  ``entry_modes`` maps a stream to ``source`` or ``entry`` (default ``source``)."""

    punctuation_us: int = 100_000
    heartbeat_us: int = 500_000
    peer_timeout_us: int = 3_000_000
    entry_modes: dict[str, str] = field(default_factory=dict)
    #: Fill batches' and deliveries' ``path`` (engine.messages rule 5): which replicas' emissions led
    #: to each delivery — the fastest path, since the first copy is the one that passes (§IV-B).
    trace_paths: bool = False


@dataclass(frozen=True, slots=True)
class Delivered:
    """Records (then maybe a punctuation) delivered to application ``app`` at ``now``."""

    app: str
    records: list[Record]
    punctuation: int | None
    now: int
    path: tuple[str, ...] = ()       # replicas from entry point to application (NodeOptions.trace_paths)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A rejected input item: published to ``replicast/dead-letter`` by the driver."""

    stream: str
    reason: str
    item: Any


@dataclass(frozen=True, slots=True)
class PeerTimedOut:
    """No heartbeat from ``node`` within the time-out: the driver should drop the connection."""

    node: str


Event = Delivered | DeadLetter | PeerTimedOut


# -- per-replica state ----------------------------------------------------------------------------
class _Hosted:
    """One replica hosted here: its logic, output log and routes."""

    def __init__(self, replica: ReplicaId, kind: str, logic: OperatorReplica | None,
                 entry: EntryPoint | None, peers: tuple[str, ...]):
        self.replica, self.kind, self.logic, self.entry, self.peers = replica, kind, logic, entry, peers
        self.hop: tuple[str, ...] = ()                 # (replica@node,) when the core traces paths
        self.log = OutputLog()
        self.routes: dict[StreamReplica, str] = {}     # downstream stream replica -> node
        self.acked: dict[StreamReplica, int] = {}      # remote downstream -> acknowledged offset
        # The log is trimmed to the lowest remote ack (the floor).  ``lagging`` counts the remote
        # routes still at the floor, so an ack rescans the routes only when the floor can rise
        # (amortised O(1) per ack); None = routes changed, rescan on the next ack.
        self.floor: int | None = None
        self.lagging = 0
        self.records_in = 0
        self.records_out = 0
        self.stamping = False                          # entry-stamped mode: this replica stamps
        #: Joined mid-stream with an operator whose outputs summarise complete input (aggregates):
        #: it acknowledges and discards its input and emits nothing, so it can never deliver a
        #: window computed from part of its records (§III); its peer replicas keep the output whole.
        self.muted = False


class _Inbound:
    """What a receiver knows about one incoming stream replica."""

    __slots__ = ("node", "index", "next", "started", "gapped")

    def __init__(self, node: str, index: int):
        self.node, self.index = node, index
        self.next = 0            # offset of the next item we do not hold
        self.started = False
        self.gapped = False      # items were lost: its punctuations can no longer be trusted


class _Latency:
    __slots__ = ("count", "total", "max")

    def __init__(self) -> None:
        self.count = self.total = self.max = 0

    def add(self, now: int, records: list[Record]) -> None:
        for record in records:
            latency = now - record[0]          # §VI-B: arrival − ts
            self.total += latency
            if latency > self.max:
                self.max = latency
        self.count += len(records)


# -- the core -------------------------------------------------------------------------------------
class NodeCore:
    """The pure node: see the module docstring for its contract."""

    def __init__(self, name: str, query: Query, options: NodeOptions = NodeOptions(), *, now: int):
        self.name = name
        self.query = query
        self.options = options
        self.hosted: dict[ReplicaId, _Hosted] = {}
        self._inbound: dict[StreamReplica, _Inbound] = {}
        self._connected: set[str] = set()
        self._last_heard: dict[str, int] = {}
        self.rtt_us: dict[str, int] = {}
        self._outbox: list[tuple[str, Message]] = []
        self._events: list[Event] = []
        self._local: deque[tuple[StreamReplica, int, list[Record], int | None, tuple[str, ...]]] = deque()
        self._heartbeat_at = now
        self._punctuate_at = now + options.punctuation_us
        self._stamps = False             # some hosted entry replica stamps (kept by _elect, _remove)
        self.latency: dict[str, _Latency] = {app: _Latency() for app in query.applications}
        self.counters = {"dead_letters": 0, "unknown_streams": 0, "malformed_batches": 0, "gaps": 0, "muted_replicas": 0,
                         "stale_batches": 0, "known_batches": 0}
        self._handlers: dict[type, Callable[[str, Any, int], None]] = {
            Batch: self._on_batch, Ack: self._on_ack, Heartbeat: self._on_heartbeat,
            StatisticsRequest: self._on_statistics_request, Statistics: lambda src, m, now: None,
            DeployReplica: self._deploy, RemoveReplica: self._remove,
            ConnectStream: self._connect, DisconnectStream: self._disconnect,
        }

    # -- inputs ---------------------------------------------------------------------------------
    def receive(self, src: str, message: Message, *, now: int) -> None:
        """A message from node ``src`` (control messages may come from the node itself)."""
        self._last_heard[src] = now
        self._handlers[type(message)](src, message, now)
        self._drain_local(now)

    def apply(self, messages: Iterable[Message], *, now: int) -> None:
        """Apply control messages from the node's own configuration."""
        for message in messages:
            self._handlers[type(message)](self.name, message, now)
        self._drain_local(now)

    def on_source(self, stream: str, payload: bytes, *, now: int) -> bool:
        """A payload for ``stream`` from an external source; returns whether an entry point here took it."""
        if stream not in self.query.streams:
            self.counters["unknown_streams"] += 1
            self._dead_letter(stream, f"unknown stream {stream!r} (the query's streams: "
                                      f"{', '.join(self.query.streams)})", payload)
            return False
        entries = [h for h in self.hosted.values() if h.kind == "entry" and h.replica.name == stream]
        if not entries:
            return False
        try:
            items = decode_payload(payload)
        except InputError as error:
            self._dead_letter(stream, f"malformed: {error}", payload)
            return True
        for i, hosted in enumerate(entries):
            segments, rejects = hosted.entry.on_items(items, now=now, stamping=hosted.stamping)
            if i == 0:
                for reason, item in rejects:
                    self._dead_letter(stream, reason, item)
            for records, punctuation in segments:
                self._emit(hosted, records, punctuation, now)
        self._drain_local(now)
        return True

    def on_peer_up(self, node: str, *, now: int) -> None:
        """The driver has a (new) authenticated connection to ``node``: replay what it lacks."""
        self._connected.add(node)
        self._last_heard[node] = now
        for hosted in self.hosted.values():
            for stream, target in hosted.routes.items():
                if target == node:
                    self._replay(hosted, stream, hosted.acked.get(stream, 0))
        self._elect(now)
        self._drain_local(now)

    def on_peer_down(self, node: str, *, now: int) -> None:
        """The connection to ``node`` is gone; nothing is sent to it until :meth:`on_peer_up`."""
        self._connected.discard(node)
        self._elect(now)
        self._drain_local(now)

    def handle_timer(self, *, now: int) -> None:
        """Heartbeats, peer time-outs and entry-stamped punctuations that are due at ``now``."""
        if now >= self._heartbeat_at:
            self._heartbeat_at = now + self.options.heartbeat_us
            for node in sorted(self._connected):
                self._outbox.append((node, Heartbeat(now)))
                if now - self._last_heard.get(node, now) > self.options.peer_timeout_us:
                    self._events.append(PeerTimedOut(node))
        if now >= self._punctuate_at:
            self._punctuate_at = now + self.options.punctuation_us
            for hosted in self.hosted.values():
                if hosted.stamping:
                    for records, p in hosted.entry.punctuate(now):
                        self._emit(hosted, records, p, now)
        self._drain_local(now)

    # -- outputs --------------------------------------------------------------------------------
    def messages_to_send(self) -> list[tuple[str, Message]]:
        """``(node, message)`` pairs to send, in order; drains the outbox."""
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out

    def next_timer(self) -> int:
        """When :meth:`handle_timer` must next be called (µs)."""
        if self._stamps:
            return min(self._heartbeat_at, self._punctuate_at)
        return self._heartbeat_at

    # -- data path ------------------------------------------------------------------------------
    def _on_batch(self, src: str, batch: Batch, now: int) -> None:
        inbound = self._inbound.get(batch.stream)
        if inbound is None:
            self.counters["stale_batches"] += 1        # removed, or never connected here
            return
        records, stream = batch.records, batch.stream
        logic = self.hosted[stream.target].logic
        if type(records) is EncodedRecords:
            pass                                           # another node core's output, in this process
        elif type(records) is PackedRecords and logic is not None and logic.knows(stream.port, records.key):
            self.counters["known_batches"] += 1            # bytes a duplicate filter knows: not read
        else:                                              # (they were checked when they first came)
            width = len(self.query.schemas[batch.stream.source.name]) + 1
            try:
                malformed = any(len(r) != width for r in batch.records)
            except WireError:
                malformed = True
            if malformed:
                self.counters["malformed_batches"] += 1
                return
        self._accept(batch.stream, inbound, batch.offset, batch.records, batch.punctuation, now, batch.path)
        if batch.punctuation is not None and src != self.name:
            self._outbox.append((src, Ack(batch.stream, inbound.next)))   # cumulative, by punctuation

    def _accept(self, stream: StreamReplica, inbound: _Inbound, offset: int, records, punctuation, now: int,
                path: tuple[str, ...]) -> None:
        skip = inbound.next - offset
        hosted = self.hosted[stream.target]
        if skip < 0:
            if inbound.started:          # items lost (retention overflow): stop trusting punctuations
                inbound.gapped = True
                self.counters["gaps"] += 1
            elif hosted.logic is not None and hosted.logic.operator.complete_input_required and not hosted.muted:
                hosted.muted = True      # a fresh replica that missed the stream's beginning
                self.counters["muted_replicas"] += 1
            skip = 0
        inbound.started = True
        n = len(records) + (punctuation is not None)
        if skip >= n:
            return
        inbound.next = offset + n
        key = records.key if type(records) in _KEYED else None
        if skip:
            records, key = records[skip:], None
        if hosted.muted:
            return
        if inbound.gapped:
            punctuation = None
        hosted.records_in += len(records)
        if hosted.kind == "entry":                     # entry-stamped: the stamper's output
            if hosted.stamping or stream.source.index != self._stamper(hosted):
                return
            for segment in hosted.entry.on_stamped(list(records), punctuation):
                self._emit(hosted, *segment, now, path)
            return
        out, forwarded = hosted.logic.on_batch(stream.port, inbound.index, records, punctuation, key)
        self._emit(hosted, out, forwarded, now, path)

    def _emit(self, hosted: _Hosted, records: list[Record], punctuation: int | None, now: int,
              path: tuple[str, ...] = ()) -> None:
        """``hosted`` outputs ``records`` then ``punctuation``, caused by a batch that came along ``path``."""
        if not records and punctuation is None:
            return
        hosted.records_out += len(records)
        if hosted.hop:
            path += hosted.hop
        if hosted.kind == "application":
            self.latency[hosted.replica.name].add(now, records)
            self._events.append(Delivered(hosted.replica.name, records, punctuation, now, path))
            return
        records = EncodedRecords(records)          # one encoding for every stream replica (wire rule 4)
        offset = hosted.log.append(records, punctuation, path)
        remote = False
        for stream, node in hosted.routes.items():
            if node == self.name:
                self._local.append((stream, offset, records, punctuation, path))
            else:
                remote = True
                if node in self._connected:
                    self._outbox.append((node, Batch(stream, offset, records, punctuation, path)))
        if not remote:
            hosted.log.trim(hosted.log.end)

    def _drain_local(self, now: int) -> None:
        local = self._local
        while local:
            stream, offset, records, punctuation, path = local.popleft()
            inbound = self._inbound.get(stream)
            if inbound is not None:
                self._accept(stream, inbound, offset, records, punctuation, now, path)

    def _replay(self, hosted: _Hosted, stream: StreamReplica, offset: int) -> None:
        node = hosted.routes[stream]
        for start, records, punctuation, path in hosted.log.since(offset):
            self._outbox.append((node, Batch(stream, start, records, punctuation, path)))

    def _on_ack(self, src: str, ack: Ack, now: int) -> None:
        hosted = self.hosted.get(ack.stream.source)
        if hosted is None or ack.stream not in hosted.routes:
            return
        previous = hosted.acked.get(ack.stream, 0)
        if ack.offset > previous:
            hosted.acked[ack.stream] = ack.offset
            if previous == hosted.floor:
                hosted.lagging -= 1
        if hosted.floor is None or hosted.lagging <= 0:
            acked, name = hosted.acked, self.name
            offsets = [acked.get(s, 0) for s, node in hosted.routes.items() if node != name]
            hosted.floor = floor = min(offsets)
            hosted.lagging = offsets.count(floor)
            hosted.log.trim(floor)

    def _dead_letter(self, stream: str, reason: str, item: Any) -> None:
        self.counters["dead_letters"] += 1
        self._events.append(DeadLetter(stream, reason, item))

    # -- entry-stamped mode (§II-B) -------------------------------------------------------------
    def _stamper(self, hosted: _Hosted) -> int:
        """The lowest-indexed replica of this entry point whose node is alive."""
        for index, node in enumerate(hosted.peers):
            if node == self.name or node in self._connected:
                return index
        return hosted.replica.index

    def _elect(self, now: int) -> None:
        for hosted in self.hosted.values():
            if hosted.entry is None or hosted.entry.mode != "entry":
                continue
            stamping = self._stamper(hosted) == hosted.replica.index
            if stamping and not hosted.stamping:
                hosted.stamping = True
                for segment in hosted.entry.take_over(now):
                    self._emit(hosted, *segment, now)
            hosted.stamping = stamping
        self._stamps = any(h.stamping for h in self.hosted.values())

    # -- control --------------------------------------------------------------------------------
    def _deploy(self, src: str, message: DeployReplica, now: int) -> None:
        replica, query = message.replica, self.query
        if replica in self.hosted:
            return
        name = replica.name
        entry = logic = None
        if name in query.streams:
            kind = "entry"
            entry = EntryPoint(query.streams[name], self.options.entry_modes.get(name, "source"))
        elif name in query.applications:
            kind = "application"
            logic = application_sink(0, query.applications[name].ordered)
        elif name in query.operators:
            kind = "operator"
            logic = OperatorReplica(query.new_operator(name), [0] * len(query.inputs_of(name)),
                                    query.order_sensitive(name))
        else:
            raise QueryError(f"node {self.name}: cannot deploy {replica}: {name!r} is not in the query")
        hosted = self.hosted[replica] = _Hosted(replica, kind, logic, entry, message.peers)
        if self.options.trace_paths:
            hosted.hop = (f"{replica}@{self.name}",)
        self._elect(now)

    def _remove(self, src: str, message: RemoveReplica, now: int) -> None:
        self.hosted.pop(message.replica, None)
        self._stamps = any(h.stamping for h in self.hosted.values())
        for stream in [s for s in self._inbound if s.target == message.replica]:
            del self._inbound[stream]

    def _connect(self, src: str, message: ConnectStream, now: int) -> None:
        stream = message.stream
        source = self.hosted.get(stream.source) if message.source_node == self.name else None
        if message.target_node == self.name and stream not in self._inbound:
            target = self.hosted.get(stream.target)
            if target is None:
                raise QueryError(f"node {self.name}: stream replica {stream.source} -> {stream.target} "
                                 f"targets a replica not deployed here")
            index = 0 if target.kind == "entry" else target.logic.filters[stream.port].add_replica()
            self._inbound[stream] = _Inbound(message.source_node, index)
        if source is not None and stream not in source.routes:
            source.routes[stream] = message.target_node
            source.floor = None
            if message.target_node == self.name:
                for start, records, punctuation, path in source.log.since(0):
                    self._local.append((stream, start, records, punctuation, path))
            elif message.target_node in self._connected:
                self._replay(source, stream, 0)      # a new downstream replica gets the retained log

    def _disconnect(self, src: str, message: DisconnectStream, now: int) -> None:
        self._inbound.pop(message.stream, None)
        source = self.hosted.get(message.stream.source)
        if source is not None:
            source.routes.pop(message.stream, None)
            source.acked.pop(message.stream, None)
            source.floor = None

    # -- statistics -----------------------------------------------------------------------------
    def _on_heartbeat(self, src: str, message: Heartbeat, now: int) -> None:
        if message.echo_us is None:
            self._outbox.append((src, Heartbeat(now, message.sent_us)))
        else:
            self.rtt_us[src] = now - message.echo_us

    def _on_statistics_request(self, src: str, message: StatisticsRequest, now: int) -> None:
        self._outbox.append((src, Statistics(self.name, self.statistics())))

    def statistics(self) -> dict[str, Any]:
        """Counters per replica and application (plain data, for reports and metrics)."""
        replicas = {}
        for replica, h in self.hosted.items():
            filters = h.logic.filters if h.logic is not None else []
            replicas[str(replica)] = {
                "kind": h.kind, "records_in": h.records_in, "records_out": h.records_out,
                "duplicates": sum(f.duplicates + f.below_punctuation for f in filters),
                "weights": [f.weights() for f in filters], "retained": len(h.log),
                "late": h.entry.late if h.entry else 0, "accepted": h.entry.accepted if h.entry else 0,
                "malformed": h.entry.malformed if h.entry else 0, "stamping": h.stamping}
        latency = {app: {"count": l.count, "mean_us": l.total // l.count if l.count else None, "max_us": l.max}
                   for app, l in self.latency.items()}
        return {"replicas": replicas, "latency": latency, "rtt_us": dict(self.rtt_us), **self.counters}


# -- configuration ---------------------------------------------------------------------------------
def configure(query: Query, placement: dict[str, list[str]], node: str,
              entry_modes: dict[str, str] | None = None, physical: PhysicalPlan | None = None) -> list[Message]:
    """The control messages that set up ``node``'s part of a manual placement.

    ``placement`` maps every stream, operator and application to the nodes of its replicas (index
    order); its length is the replica count (applications: exactly one node).  In entry-stamped
    mode every entry-point replica also feeds its peers; those routes come first, so a stamper
    sends to its peers before it sends downstream (§II-B).  A caller configuring several nodes in
    one process may pass ``physical = placement_plan(query, placement)`` once: the nodes then share
    the replica and stream-replica ids, so their dict lookups match by identity.
    """
    missing = [n for n in (*query.streams, *query.operators, *query.applications) if not placement.get(n)]
    if missing:
        raise QueryError(f"placement: no nodes given for {', '.join(missing)}")
    if physical is None:
        physical = placement_plan(query, placement)
    where = {r: placement[r.name][r.index] for ids in physical.replicas.values() for r in ids}
    messages: list[Message] = [DeployReplica(r, tuple(placement[r.name])) for r, n in where.items() if n == node]
    for stream in (entry_modes or {}):
        if entry_modes[stream] != "entry":
            continue
        ids = physical.replicas[stream]
        for a in ids:
            for b in ids:
                if a != b and node in (where[a], where[b]):
                    messages.append(ConnectStream(StreamReplica(a, b, 0), where[a], where[b]))
    for s in physical.stream_replicas:
        if node in (where[s.source], where[s.target]):
            messages.append(ConnectStream(s, where[s.source], where[s.target]))
    return messages


def placement_plan(query: Query, placement: dict[str, list[str]]) -> PhysicalPlan:
    """The physical plan of a manual placement (its lengths are the replica counts)."""
    return plan(query, {name: len(nodes) for name, nodes in placement.items()})
