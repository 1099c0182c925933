"""Tracepoints of the node core and the trace queries evaluated at them (Pivot Tracing; docs/tracing.md).

The node core calls its hooks, each behind one ``if … tracer is not None`` — the whole cost of
tracing while no query is installed (``NodeCore.tracer`` is None then):

* :meth:`Tracer.arrival` from the receiver, for every batch a replica's port takes: each copy of
  a sampled record reaching the duplicate filter (§IV-B, Alg. 1) is an ``Arrival`` event (pass or
  drop, from which upstream replica, its rank among the copies, how much later than the first),
  and a passed record that waits in a sorter (§IV-C) is a ``Wait`` event when its punctuation
  releases it (an entry-stamped stream's records waiting for every member to hold their stamp
  are ``Wait`` events of kind ``stamper``, from :meth:`Tracer.emit`; a window closed by its
  producers' seals per key is one of kind ``seal``, from :meth:`Tracer.sealed`: rule 8);
* :meth:`Tracer.emit` from the sender, for every batch a replica emits: ``Source`` (an entry
  point's records), ``Emit`` (an operator's), ``Send`` (the batch, to each downstream replica) and
  ``Deliver`` (an application's records, with their latency and the path of first arrivals).

Rules of this module (pure: no clock, no I/O; ``now`` comes with every call):

1. Sampling is by record timestamp, and deterministic: a record is sampled at ``Sample 1/N`` when
   a hash of its time slot (``ts >> SLOT_SHIFT``: 256 µs) is 0 modulo N (:func:`sampled`), so every
   replica samples the same records and every copy of a sampled record is seen at every duplicate
   filter.  A batch costs its oldest and newest timestamps and a test that no sampled slot lies
   between them; only a batch that touches a sampled slot is read (benchmarks/tracing_overhead.py).
   The oldest and newest come from the port's duplicate filter, which had them for Alg. 1
   already (``DuplicateFilter.span``); only a batch it did not sort (one taken record by record)
   costs the tracer a sort of its own (the filter then has no span).  The test is two integer
   comparisons: the tracer keeps the cold stretch the last batch fell in — the slots up to the
   next sampled one — as two timestamps.  A batch outside it finds its own among the last
   :data:`RECENT_STRETCHES`, or has it computed from its oldest slot on: the next sampled slot
   follows from the hash in O(log N) steps (:mod:`engine.core.trace_sampling`: Euclid's
   algorithm on the multiplier), so no slot is scanned and lagging ports and copies cost no more
   than leading ones; a hot batch leaves the stretch after its last sampled slot for the next.
   A hot batch in time order has each sampled slot's records found by bisection on the filter's
   sorted timestamps, and only those are read; another is read in one C-level pass.  Batches a
   port already saw whole (equal content keys: the k copies of one emission, DESIGN.md
   "Identical batches") are sampled once; their copies reuse the answer and are never decoded
   for it.  A copy the filter takes unread, by key, is read only if its key's hash is among the
   hot batches' (the last :data:`MAX_KEYS` / 2 to :data:`MAX_KEYS` that had a sampled record):
   nothing is remembered of a cold batch.  (A copy whose first came before the query was
   installed is taken for a cold one.)
2. A port's first copy of a sampled record is the one its duplicate filter passes (Alg. 1 passes
   the first copy of each occurrence); the tracer remembers first arrivals of sampled records for
   :data:`REMEMBER_US` (and at most :data:`MAX_REMEMBERED`), so a copy later than that counts as
   a first arrival again.  A record equal to an earlier one (a second occurrence) counts as a copy.
   A batch's sampled records that are all newer than any the port remembers and distinct (by
   their timestamps, or because the filter took the batch as a run) are remembered together, as
   a *run* (:mod:`engine.core.trace_memory`): every record's copies so far is the run's count
   and its first arrival the run's, so the next copy of the same batch (the same sampled
   records, by content key) is one count, not one table update per record.  Otherwise the port
   knows a record by its hash (hashed once per sampled copy; two records whose 64-bit hashes
   collide would share their counts) in a table of first arrival times and one of copies,
   updated for a batch's sampled records at once (in C); runs a batch overlaps are turned into
   such entries first.  Each batch's new records (or run) are forgotten together.
3. Events go only to the queries installed on their tracepoint; a hook whose tracepoint has no
   query returns at once.  :func:`install` makes the tracer, :func:`remove` drops it with the last
   query: removing a query removes its cost.
4. Baggage (Pivot Tracing's, for the happened-before view of one record's trip): while a
   ``Hop`` query is installed, an entry point's batch holding a sampled record
   leaves with a path of one timed hop, ``replica@node@µs`` (when it was emitted), and every
   emission caused by a batch with baggage adds its own hop, the last :data:`MAX_HOPS` kept (an
   emission holding a sampled record whose cause had none starts a chain of its own).  The
   path travels in the batch frame (engine/wire.py) and the output log; at the application each
   sampled record's hops become ``Hop`` events: how long the record spent from the hop before (its
   timestamp, for the first) to each emission — queueing, waits, the link.  An emission is caused
   by one input batch (engine/messages.py rule 5).  An application that delivers a record after
   the batch that brought it (sorted, released by a punctuation) uses the baggage it came with.
5. An external producer's trace (W3C Trace Context): the driver hands the ``traceparent`` of a
   source message to :func:`source_context` around ``on_source``; while a ``Hop`` query is
   installed, the entry point's batch of that message then starts baggage whatever the sampling,
   its first entry ``trace:<trace id>``, which every hop keeps.  A delivery whose baggage has one
   carries it out again (engine/aio: a ``traceparent`` user property on the application's MQTT 5
   message).  Stateless operators, joins and sorted applications keep the chain; an aggregate's
   window, closed by a punctuation, starts a new one without it.
6. :meth:`Tracer.take` hands out, per query, the partial table since the last call (plain data:
   :mod:`engine.core.trace_aggregate` rule 2); the driver calls it on its own schedule.
7. A batch's ``Arrival`` events are aggregated before they reach a query's table: each event
   holds only the fields its query reads (``Partial.fields``), and equal events are added once
   with their count (:mod:`engine.core.trace_aggregate` rule 4) — with ``GroupBy`` on the
   stream replica and ``Where`` on the outcome, a batch is one or two table updates, not one
   per sampled copy.  The table is the one per-event adds would give.
8. Seal waits (Blazes' seal per key, docs/explain.md "Seal per key in the engine"): while a ``Wait``
   query is installed, each port of a replica whose windows close at seals per key remembers when
   its input first carried each new newest timestamp (from the batch's span: no record read),
   forgetting what its punctuation closes.  A window a seal closes emits outputs whose ``ts`` is
   the window's end (a count window's: its last record's); each sampled output is a ``Wait``
   event of kind ``seal`` whose ``wait_us`` is the seal's arrival less the first arrival at that
   port of a record with a timestamp at least the output's — how long the window's end had
   already passed at this replica (other keys' records were past it) when its own producer's
   seal closed it; 0 when the seal came first.  The event names the output's ``key``: the seal
   key's values at the output's group (an aggregate's ``(ts, *group, …)``), else the one key the
   message sealed.  The relay calls :meth:`Tracer.sealed` for every seal message, with its seals,
   behind its ``tracer is not None`` test; a window closed by a punctuation has no seal wait.  On
   a sorted port (a count window) a seal per key releases its key's records from the sorter early
   (operators/replica.py): their ``sorter`` waits end at the seal, not at the next punctuation.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, deque
from itertools import compress, repeat
from math import gcd
from operator import add, itemgetter, not_
from typing import TYPE_CHECKING, Any, Protocol

from replicast.engine.core.hosted import ReplicaKind
from replicast.engine.core.baggage import MAX_HOPS, TRACE_ID, TRACE_PREFIX, hops as _hops, is_baggage, trace_id
from replicast.engine.core.trace_aggregate import Partial
from replicast.engine.core.trace_memory import PortMemory, Run
from replicast.engine.core.trace_sampling import MIX, SLOT_SHIFT, Chosen, in_slots, next_sampled, sampled
from replicast.engine.core.trace_language import TraceQuery, TraceQueryError

if TYPE_CHECKING:
    from replicast.engine.core.hosted import Hosted, Inbound
    from replicast.operators.plan import StreamReplica

#: How long a port remembers a sampled record's first arrival (µs): wide-area copies differ by
#: hundreds of ms at most (§VI); a copy later than this is counted as a first arrival (rule 2).
REMEMBER_US = 30_000_000
#: At most this many first arrivals remembered per node (oldest forgotten first).
MAX_REMEMBERED = 200_000
#: Sampled records waiting in sorters, per port, at most (oldest forgotten first).
MAX_WAITING = 10_000
#: Batches whose sampled records are remembered by content key (rule 1).
MAX_KEYS = 4_096
#: Queries one node evaluates at once.
MAX_QUERIES = 32
#: Cold stretches (the slots between two sampled ones) remembered, for ports and copies in
#: different times (rule 1).
RECENT_STRETCHES = 8
#: Below this N a batch's slots are tested one by one (many are sampled); from it on, the next
#: sampled slot is computed (rule 1).
SCAN_BELOW = 16
_ts = itemgetter(0)
#: Tracepoints fired by an emission (Tracer.emit) other than an application's.
_EMITTED = frozenset(("Wait", "Source", "Emit", "Send"))
#: Arrival fields that differ between the copies of one batch (rule 7).
_PER_COPY = frozenset(("outcome", "rank", "later_us", "age_us", "ts"))
_OUTCOME_ONLY = frozenset(("outcome",))
#: Tracepoints fired by any emission (Tracer.emit).
_EMITTING = _EMITTED | {"Deliver", "Hop"}


def _per_copy(fields: frozenset, records: list, firsts: list | None, before: list,
              now: int) -> tuple[list[str], Any]:
    """The ``Arrival`` fields a query reads that differ between copies, and each distinct
    combination's count (rule 7); ``firsts``: each record's first arrival (when timed)."""
    names, columns = [], []
    if "outcome" in fields:
        names.append("outcome")
        columns.append(["drop" if c else "pass" for c in before])
    if "rank" in fields:
        names.append("rank")
        columns.append([c + 1 for c in before])
    if "later_us" in fields:
        names.append("later_us")
        columns.append([now - at for at in firsts])
    if "age_us" in fields:
        names.append("age_us")
        columns.append([now - r[0] for r in records])
    if "ts" in fields:
        names.append("ts")
        columns.append(list(map(_ts, records)))
    return names, Counter(zip(*columns)).items()


def _key_text(key: tuple | None) -> str | None:
    """A seal key as a ``Wait`` event's ``key``: its values in the key's order (its attribute
    names sorted, operators/key_seals.py rule 1), comma-separated."""
    return None if key is None else ",".join(map(str, key))


#: The sampled records of a batch without any (shared: never changed).
_NONE: list = Chosen()


class TracedCore(Protocol):
    """What installing and removing queries reads of a node core (engine.core.node.NodeCore is one)."""

    name: str
    inbound: "dict[StreamReplica, Inbound]"
    tracer: "Tracer | None"


class Tracer:
    """The installed queries of one node and the state their tracepoints keep; it reads the node's
    name and its inbound table.  (Slots: the hooks' test of a batch without a sampled record
    reads a few of them, from one object.)"""

    __slots__ = ("_plain", "_low", "_high", "_hot_keys", "emitting",   # the hooks' (one cache line)
                 "name", "inbound", "queries", "points", "ports", "remembered", "generations", "_recent",
                 "_timed", "waiting", "_keys", "events", "baggage", "arrival_sample",
                 "overflow", "context", "passed")

    def __init__(self, name: str, inbound: "dict[StreamReplica, Inbound]"):
        self.name, self.inbound = name, inbound
        self.queries: dict[str, Partial] = {}
        #: tracepoint -> [(sample N, partial)], for the hooks
        self.points: dict[str, list[tuple[int, Partial]]] = {}
        self.ports: dict[tuple[str, int], PortMemory] = {}  # (replica's name, port) -> its first arrivals
        self.remembered = 0                            # records in all ports' first arrivals
        self.generations: deque = deque()              # (now, port, the records a batch added), oldest first
        #: the cold stretch a batch fell in last, as timestamps [_low, _high): no slot sampled at
        #: ``arrival_sample`` in between (rule 1)
        self._low = self._high = 0
        #: the maximal cold stretches found last, newest first: (N, from slot, to slot)
        self._recent: deque = deque(maxlen=RECENT_STRETCHES)
        #: hashes of the content keys of the last MAX_KEYS / 2 to MAX_KEYS batches that had a sampled
        #: record, oldest first (rule 1): a copy its filter takes unread is read only if one of them
        self._hot_keys: dict[int, None] = {}
        self._timed = False                            # whether an Arrival query reads later_us
        self.emitting = False                          # whether any query listens to emissions (the sender's test)
        self._plain = False                            # only Arrival queries are installed
        self.waiting: dict[tuple, list] = {}           # (replica, port) -> [(ts, passed at, seal key)]
        #: (replica, port) of a window closed by seals -> ([newest ts], [when it first arrived]): the
        #: times its input first passed each timestamp, both ascending (rule 8)
        self.passed: dict[tuple, tuple[list[int], list[int]]] = {}
        self._keys: dict[tuple[int, int], list] = {}   # (key's hash, N) -> sampled records
        self.events = 0
        self.baggage = self.arrival_sample = 0
        self.overflow: dict[str, int] = {}             # query id -> events of groups past MAX_GROUPS
        #: (stream, trace id) of the source message being taken (rule 5), set by the driver around on_source
        self.context: tuple[str, str] | None = None

    # -- queries (rule 3) ---------------------------------------------------------------------------
    def add(self, qid: str, query: TraceQuery) -> None:
        if qid not in self.queries and len(self.queries) >= MAX_QUERIES:
            raise TraceQueryError(f"query {qid!r}: this node already evaluates {MAX_QUERIES} queries")
        self.queries[qid] = Partial(query)
        self._index()

    def drop(self, qid: str) -> bool:
        found = self.queries.pop(qid, None) is not None
        self._index()
        return found

    def _index(self) -> None:
        points: dict[str, list] = {}
        for partial in self.queries.values():
            points.setdefault(partial.query.tracepoint, []).append((partial.query.sample, partial))
        self.points = points
        #: The N that samples what every Arrival and Wait query samples (0: none is installed)
        self.arrival_sample = 0
        for sample, _ in points.get("Arrival", []) + points.get("Wait", []):
            self.arrival_sample = gcd(self.arrival_sample, sample)
        #: Entry points start baggage on batches with a record sampled at this N (0: none needs it)
        self.baggage = 0
        for sample, _ in points.get("Hop", []):
            self.baggage = gcd(self.baggage, sample)
        if "Arrival" not in points and "Wait" not in points and not self.baggage:
            self.ports.clear()                         # nothing reads first arrivals any more
            self.generations.clear()
            self.remembered = 0
        else:                                          # the ports' memories now, not in a hot batch
            for stream in self.inbound:
                self.ports.setdefault((str(stream.target), stream.port), PortMemory())
        self._timed = any("later_us" in partial.fields for _, partial in points.get("Arrival", []))
        self._low = self._high = 0                     # (caches for one N)
        self._hot_keys = {}
        self.emitting = bool(self.baggage or points.keys() & _EMITTING)
        #: only Arrival queries: a batch without a sampled slot returns at once (rule 1)
        self._plain = "Arrival" in points and "Wait" not in points and not self.baggage
        if "Wait" not in points:
            self.waiting.clear()
            self.passed.clear()

    def take(self) -> dict[str, list]:
        """Per query id, its partial table since the last call (rule 6); events beyond a table's
        groups (trace_aggregate.MAX_GROUPS) are added up in :attr:`overflow`."""
        for qid, partial in self.queries.items():
            if partial.overflow:
                self.overflow[qid] = self.overflow.get(qid, 0) + partial.overflow
                partial.overflow = 0
        return {qid: partial.take() for qid, partial in self.queries.items()}

    # -- sampling (rule 1) --------------------------------------------------------------------------
    def _sample(self, records, key, n: int, span: tuple | None = None) -> list:
        """The records of a batch sampled at ``Sample 1/n``; ``span``: its oldest and newest
        timestamps, if known, and maybe all of them sorted (rule 1)."""
        if n == 1 or not records:
            return list(records)                       # nothing to choose: nothing to remember
        if key is not None:         # by the bytes' hash: the cache keeps no batch's bytes alive
            key = (hash(key), n)
            cached = self._keys.get(key)
            if cached is not None:
                return cached
        if span is None:                               # the batch's time slots first: in C
            stamps = getattr(records, "stamps", None)
            stamps = sorted(map(_ts, records) if stamps is None else stamps)
            span = stamps[0], stamps[-1], stamps
        low, high = span[0] >> SLOT_SHIFT, span[1] >> SLOT_SHIFT
        if high - low < len(records):
            hot = self._hot_slots(low, high, n)
        else:                                          # spread thinly over time: record by record
            hot = {r[0] >> SLOT_SHIFT for r in records if sampled(r[0], n)}
        ordered = span[2] if len(span) > 2 else None
        if key is None:
            return in_slots(records, hot, ordered) if hot else []
        chosen = in_slots(records, hot, ordered) if hot else _NONE
        keys = self._keys
        if len(keys) >= MAX_KEYS:
            keys.clear()                               # copies come within seconds: start afresh
        keys[key] = chosen
        return chosen

    def _hot_slots(self, low: int, high: int, n: int) -> list[int]:
        """The slots in ``low … high`` sampled at 1/``n``, found from the cold stretch ``low``
        lies in and computed next sampled slots (rule 1); slot by slot where ``n`` is small."""
        if n < SCAN_BELOW:
            return [slot for slot in range(low, high + 1) if not ((slot * MIX) >> 16) % n]
        stretch = self._cold_stretch(low, n)
        slot = low if stretch is None else stretch[2]
        hot = []
        while slot <= high:                            # the stretch after each: the next batch's, and
            hot.append(slot)                           # the other ports' (found, not computed again)
            stretch = self._cold_stretch(slot + 1, n)
            slot = slot + 1 if stretch is None else stretch[2]
        return hot

    def _cold_stretch(self, slot: int, n: int) -> tuple[int, int, int] | None:
        """(``n``, first, end): slots ``first … end - 1`` from at most ``slot`` on, none sampled at
        1/``n`` (``end`` is the next sampled one), or None if ``slot`` is sampled.  One of the last
        :data:`RECENT_STRETCHES` found (a hot batch leaves the one after its last sampled slot),
        else computed from ``slot`` on: the next sampled slot only, as ports and copies lag rather
        than lead (rule 1)."""
        for stretch in self._recent:
            if stretch[1] <= slot < stretch[2] and stretch[0] == n:
                return stretch
        end = next_sampled(slot, n)
        if end == slot:
            return None
        stretch = (n, slot, end)
        self._recent.appendleft(stretch)
        return stretch

    def _fire(self, listeners: list[tuple[int, Partial]], records, key, make) -> None:
        """Events ``make(record)`` for each record sampled by each listening query."""
        for n, partial in listeners:
            for record in self._sample(records, key, n):
                partial.add(make(record))
                self.events += 1

    def _cold(self, oldest: int, newest: int) -> bool:
        """Whether no record from ``oldest`` to ``newest`` (timestamps) is sampled at 1/``arrival_sample``;
        if so, their cold stretch is the one the next batch is tested against."""
        stretch = self._cold_stretch(oldest >> SLOT_SHIFT, self.arrival_sample)
        if stretch is None or newest >> SLOT_SHIFT >= stretch[2]:
            return False
        self._low, self._high = stretch[1] << SLOT_SHIFT, stretch[2] << SLOT_SHIFT
        return True

    # -- hooks --------------------------------------------------------------------------------------
    def arrival(self, stream: "StreamReplica", hosted: "Hosted", records, key, punctuation: int | None,
                now: int, path: tuple[str, ...] = ()) -> None:
        """A batch of stream replica ``stream`` came along ``path`` to ``hosted``'s port (after its
        duplicate filter ran)."""
        # an application delivers a record, sorted, after the batch that brought it: remember its baggage
        if self._plain:                                # only Arrival queries: rule 1's constant-time test first
            span = hosted.logic.filters[stream.port].span
            if span is None:
                pass                                   # read record by record (or none yet): sampled below
            elif span[0] is records:
                if self._low <= span[1] and span[2] < self._high or self._cold(span[1], span[2]):
                    return
            elif key is not None and hash(key) not in self._hot_keys:
                return                                 # taken unread, by key: a copy of a cold batch
        keep = 0
        if self.baggage and hosted.kind is ReplicaKind.APPLICATION and path and is_baggage(path):
            keep = 1 if path[0].startswith(TRACE_PREFIX) else self.baggage     # a traced input: every record
        n = self.arrival_sample
        if not n and not keep:
            return
        points = self.points
        arrivals, waits = points.get("Arrival"), points.get("Wait")
        port, replica, logic = stream.port, hosted.replica, hosted.logic
        if waits is not None and records and logic is not None and logic.sealing is not None:
            self._passing(replica, port, records, logic.filters[port].span, logic.operator.frontier, now)
        sorted_port = waits is not None and logic is not None and logic.sorters is not None
        if records and (arrivals is not None or sorted_port or keep):
            if keep:
                n = gcd(keep, n)                       # sampled at every query's N divides it
            where = logic.filters[port] if logic is not None else None
            span = where.span if where is not None else None
            chosen = self._sample(records, key, n, span[1:] if span is not None and span[0] is records else None)
            if chosen:
                if key is not None:                    # its copies are read too, where taken unread
                    hot = self._hot_keys
                    if len(hot) >= MAX_KEYS:           # the older half forgotten
                        hot = self._hot_keys = dict.fromkeys(list(hot)[MAX_KEYS // 2:])
                    hot[hash(key)] = None
                distinct = key is not None and where is not None and where.knows(key)
                self._arrived(stream, hosted, chosen, n, arrivals, sorted_port, keep, path, now, distinct)
        if sorted_port and punctuation is not None:
            self._release(waits, replica, str(replica), port, hosted.logic.filters[port].max_punctuation, now)

    def _arrived(self, stream, hosted, chosen: list, n: int, arrivals, sorted_port: bool, keep: int,
                 path: tuple[str, ...], now: int, distinct: bool = False) -> None:
        """The sampled records of a batch at a port: first arrivals remembered, events made (rules 2,
        7); ``distinct``: its records are known to be (its duplicate filter took it as a run)."""
        port, replica = stream.port, hosted.replica
        name = str(replica)
        memory = self.ports.get((name, port))
        if memory is None:
            memory = self.ports[(name, port)] = PortMemory()
        size = len(chosen)
        self._forget(now, size)
        timed, firsts = self._timed, None
        run = memory.runs.get(id(chosen))
        if run is not None and run.records is chosen and not keep:    # a copy of a run: one count
            before = [run.copies] * size
            run.copies += 1
            if timed:
                firsts = [run.at] * size
            new: Any = ()
        else:
            stamps = getattr(chosen, "stamps", None)
            if stamps is None:
                stamps = list(map(_ts, chosen))
            if getattr(chosen, "ordered", False):      # in time order (in_slots)
                oldest, newest = stamps[0], stamps[-1]
            else:
                oldest, newest = min(stamps), max(stamps)
            if not keep and oldest > memory.newest and (distinct or len(set(stamps)) == size):
                run = Run(chosen if type(chosen) is Chosen else Chosen(chosen), oldest, newest, now)
                memory.runs[id(run.records)] = run     # all first copies, no record remembered among them
                memory.order.append(run)
                memory.newest = newest
                self.generations.append((now, memory, run))
                self.remembered += size
                before, new = [0] * size, chosen
                if timed:
                    firsts = [now] * size
            else:
                before, new = self._by_record(memory, chosen, oldest, newest, keep, path, now)
                if timed:
                    firsts = list(map(memory.at.__getitem__, chosen.hashes if type(chosen) is Chosen
                                      else list(map(hash, chosen))))
        if sorted_port and new:
            sealing = hosted.logic.sealing
            positions = sealing.positions(port) if sealing is not None and sealing.closes else None
            for record in (new if new is chosen else compress(chosen, map(not_, before))):
                self._wait(replica, port, record, now, positions)
        if arrivals is not None:
            self._arrival_events(arrivals, n, {
                "node": self.name, "replica": name, "port": port, "upstream": str(stream.source),
                "upstream_node": self.inbound[stream].node}, chosen, firsts, before, now)

    def _by_record(self, memory: PortMemory, chosen: list, oldest: int, newest: int, keep: int,
                   path: tuple[str, ...], now: int) -> tuple[list[int], Any]:
        """The copies each of ``chosen`` had before (its rank - 1), remembered record by record,
        and whether any was new (rule 2); runs its records overlap are remembered so first."""
        overlapping = []
        for run in reversed(memory.order):             # newest first; runs do not overlap
            if run.newest < oldest:
                break
            if run.oldest <= newest:
                overlapping.append(run)
        for run in overlapping:
            memory.unrun(run)
        keyed = type(chosen) is Chosen
        hashes = getattr(chosen, "hashes", None)       # each record hashed once, for all copies
        if hashes is None:
            hashes, distinct = list(map(hash, chosen)), None
            if keyed:
                chosen.hashes = hashes
        else:
            distinct = chosen.distinct
        copies, size = memory.copies, len(hashes)
        before = list(map(copies.get, hashes, repeat(0)))       # copies each record had: rank - 1
        if distinct is None:
            distinct = len(set(hashes)) == size
            if keyed:
                chosen.distinct = distinct
        if not distinct:                               # equal records in one batch: copies in order
            counted: dict = {}
            for i, (h, seen) in enumerate(zip(hashes, before)):
                before[i] = counted[h] = counted.get(h, seen - 1) + 1
        copies.update(zip(hashes, map(add, before, repeat(1))))   # the last of equal ones: their total
        if newest > memory.newest:
            memory.newest = newest
        firsts = before.count(0)
        new = hashes if firsts == size else list(compress(hashes, map(not_, before))) if firsts else []
        if new:
            memory.at.update(zip(new, repeat(now)))
            if keep:
                memory.baggage.update(zip(new, repeat(path)))
            self.generations.append((now, memory, new))
            self.remembered += len(new)
        return before, new

    def _arrival_events(self, arrivals, n: int, common: dict, chosen: list, firsts: list | None, before: list,
                        now: int) -> None:
        """One batch's ``Arrival`` events, aggregated per query (rule 7): ``common`` holds the
        fields every event of the batch shares; the others come per sampled copy (``before``: the
        copies each had before this one; ``firsts``: when each came first, if a query reads it),
        computed only where a query reads them."""
        for sample, partial in arrivals:
            records, known, seen = chosen, firsts, before
            if sample != n:                            # a sparser query than the batch was sampled for
                pick = [i for i, r in enumerate(chosen) if sampled(r[0], sample)]
                if not pick:
                    continue
                records, seen = [chosen[i] for i in pick], [before[i] for i in pick]
                known = None if firsts is None else [firsts[i] for i in pick]
            fields = partial.fields
            if fields.isdisjoint(_PER_COPY):           # every event of the batch is the same
                names, groups = (), [((), len(seen))]
            elif fields & _PER_COPY == _OUTCOME_ONLY:  # the win-share query's case: two counts
                passed = seen.count(0)
                names, groups = ("outcome",), [(("pass",), passed), (("drop",), len(seen) - passed)]
            else:
                names, groups = _per_copy(fields, records, known, seen, now)
            for values, number in groups:
                if not number:
                    continue
                event = dict(common)
                event.update(zip(names, values))
                partial.add(event, number)
                self.events += number

    def _forget(self, now: int, room: int) -> None:
        """Forget first arrivals older than :data:`REMEMBER_US`, and the oldest beyond
        :data:`MAX_REMEMBERED` less ``room``, a batch's new records at a time (rule 2)."""
        generations, limit = self.generations, MAX_REMEMBERED - room
        while generations and (self.remembered > limit or now - generations[0][0] > REMEMBER_US):
            _, memory, records = generations.popleft()
            if type(records) is Run:
                run = records
                if run.hashes is None:                 # still a run: forgotten whole
                    del memory.runs[id(run.records)]
                    memory.order.remove(run)
                    self.remembered -= len(run.records)
                    continue
                records = run.hashes
            for table in (memory.at, memory.copies, memory.baggage):
                deque(map(table.pop, records, repeat(None)), 0)
            self.remembered -= len(records)

    def _wait(self, replica, port: int, record, now: int, positions: tuple[int, ...] | None) -> None:
        """A sampled record passed a sorted port and waits; ``positions``: where its seal key is,
        where seals per key release the port's records early (rule 8)."""
        waiting = self.waiting.setdefault((replica, port), [])
        if len(waiting) >= MAX_WAITING:
            del waiting[0]
        waiting.append((record[0], now, None if positions is None else tuple(record[i] for i in positions)))

    def _release(self, waits, replica, name: str, port: int, p: int | None, now: int,
                 key: tuple | None = None) -> None:
        """The port's sampled records with ``ts ≤ p`` leave its sorter: a ``Wait`` event of kind
        ``sorter`` each; ``key``: only those of this seal key (a seal per key released them)."""
        waiting = self.waiting.get((replica, port))
        if not waiting or p is None:
            return
        keep = []
        for ts, since, sealed in waiting:
            if ts > p or key is not None and sealed != key:
                keep.append((ts, since, sealed))
                continue
            event = {"node": self.name, "replica": name, "port": port, "kind": "sorter",
                     "wait_us": now - since, "ts": ts, "key": _key_text(sealed)}
            for sample, partial in waits:
                if sampled(ts, sample):
                    partial.add(event)
                    self.events += 1
        self.waiting[(replica, port)] = keep

    def _passing(self, replica, port: int, records, span, frontier: int, now: int) -> None:
        """A batch reached a port of a window closed by seals: remember when its input first
        carried a timestamp this high, and forget what the operator's ``frontier`` closed (rule 8)."""
        newest = span[2] if span is not None and span[0] is records else max(map(_ts, records))
        remembered = self.passed.get((replica, port))
        if remembered is None:
            remembered = self.passed[(replica, port)] = ([], [])
        stamps, times = remembered
        if not stamps or newest > stamps[-1]:
            if len(stamps) >= MAX_WAITING:             # oldest forgotten first
                del stamps[:MAX_WAITING // 2], times[:MAX_WAITING // 2]
            stamps.append(newest)
            times.append(now)
        if stamps[0] <= frontier + 1:                  # windows ending there are closed: no seal to come
            cut = bisect_right(stamps, frontier + 1)
            del stamps[:cut], times[:cut]

    def sealed(self, hosted: "Hosted", port: int, records, now: int, seals=()) -> None:
        """Seals per key ``seals`` (``(key, p)`` each) came to ``port`` of ``hosted``, which emits
        ``records`` for them (the outputs of the windows they closed): a ``Wait`` event of kind
        ``seal`` for each sampled output, naming its key; and on a sorted port, a ``Wait`` of kind
        ``sorter`` ending now for each sampled record of a sealed key the seal released (rule 8)."""
        waits = self.points.get("Wait")
        if waits is None:
            return
        replica, logic = hosted.replica, hosted.logic
        node, name = self.name, str(replica)
        sealing = logic.sealing if logic is not None else None
        if sealing is not None and sealing.closes and logic.sorters is not None:
            for key, p in seals:                       # released from the sorter early (operators/replica.py)
                self._release(waits, replica, name, port, p, now, tuple(key))
        if not records:
            return
        stamps, times = self.passed.get((replica, port), ((), ()))
        group = sealing.group_positions if sealing is not None else ()
        keys = {tuple(key) for key, _ in seals}
        one = _key_text(next(iter(keys))) if len(keys) == 1 else None

        def event(record) -> dict:
            ts = record[0]
            i = bisect_left(stamps, ts)                # the first arrival of a timestamp ≥ the output's
            return {"node": node, "replica": name, "port": port, "kind": "seal",
                    "wait_us": now - times[i] if i < len(times) else 0, "ts": ts,
                    "key": _key_text(tuple(record[1 + j] for j in group)) if group else one}
        self._fire(waits, records, None, event)

    def emit(self, hosted: "Hosted", records, punctuation: int | None, now: int,
             path: tuple[str, ...]) -> tuple[str, ...]:
        """``hosted`` emits ``records`` (then maybe ``punctuation``), caused by a batch that came
        along ``path``; returns the path the emitted batch carries (with baggage: rule 4)."""
        if not self.emitting:
            return path                                # no query listens to an emission
        points, kind = self.points, hosted.kind
        if kind is ReplicaKind.APPLICATION:
            if records and ("Deliver" in points or "Hop" in points):
                if self.baggage and not is_baggage(path):     # released by a later batch: a record's own
                    path = self._record_baggage(hosted, records, path)
                self._deliver(hosted, records, now, path)
            return path
        if not self.baggage and not (points.keys() & _EMITTED):
            return path                                # no query listens to an emission
        node, name = self.name, str(hosted.replica)
        waits = points.get("Wait")
        if waits and kind is ReplicaKind.ENTRY and hosted.stamp is not None and records:    # entry-stamped: held until
            port = 0                                                                # every member had it
            self._fire(waits, records, None, lambda r: {
                "node": node, "replica": name, "port": port, "kind": "stamper", "wait_us": now - r[0], "ts": r[0],
                "key": None})
        point = "Source" if kind is ReplicaKind.ENTRY else "Emit"
        listeners = points.get(point)
        if listeners and records:
            if kind is ReplicaKind.ENTRY:
                stream = hosted.replica.name
                self._fire(listeners, records, None, lambda r: {
                    "node": node, "replica": name, "stream": stream, "ts": r[0], "age_us": now - r[0]})
            else:
                self._fire(listeners, records, None, lambda r: {
                    "node": node, "replica": name, "ts": r[0], "age_us": now - r[0]})
        sends = points.get("Send")
        if sends:
            offset = hosted.log.end
            for n, partial in sends:
                if offset % n:
                    continue
                for stream, route in hosted.routes.items():
                    partial.add({"node": node, "replica": name, "to_node": route.node,
                                 "to_replica": str(stream.target), "records": len(records),
                                 "punctuation": int(punctuation is not None)})
                    self.events += 1
        carried = self.baggage
        if carried and not hosted.hop and records:
            hop = f"{name}@{node}@{now}"
            if path and is_baggage(path):
                kept = path[:1] if path[0].startswith(TRACE_PREFIX) else ()
                path = (*kept, *path[len(kept):][len(kept) + 1 - MAX_HOPS:], hop)     # at most MAX_HOPS
            elif kind is ReplicaKind.ENTRY and self.context is not None and self.context[0] == hosted.replica.name:
                path = (TRACE_PREFIX + self.context[1], hop)        # an external producer's trace (rule 5)
            elif self._sample(records, None, carried):      # an entry point, or a cause without baggage
                path = (hop,)
        return path

    def _record_baggage(self, hosted: "Hosted", records, path: tuple[str, ...]) -> tuple[str, ...]:
        """The baggage the first of ``records`` that brought any arrived with (else ``path``)."""
        memory = self.ports.get((str(hosted.replica), 0))
        if memory is not None:
            baggage = memory.baggage
            for record in records:
                came = baggage.get(hash(record))
                if came is not None:
                    return came
        return path

    def _deliver(self, hosted: "Hosted", records, now: int, path: tuple[str, ...]) -> None:
        """``Deliver`` for each sampled record, and ``Hop`` for each hop of its baggage (rule 4)."""
        points, node, app = self.points, self.name, hosted.replica.name
        timed = is_baggage(path)
        hops = _hops(path) if timed else [(hop, None) for hop in path]
        route = " > ".join(h for h, _ in hops)
        listeners = points.get("Deliver")
        if listeners:
            self._fire(listeners, records, None, lambda r: {
                "node": node, "app": app, "ts": r[0], "latency_us": now - r[0], "path": route})
        listeners = points.get("Hop")
        if not listeners:
            return
        memory = self.ports.get((str(hosted.replica), 0))
        for n, partial in listeners:
            for record in self._sample(records, None, n):
                if not timed:                          # released by a later batch: the record's own baggage
                    came = memory.baggage.get(hash(record)) if memory is not None else None
                    if came is None:
                        continue
                    path = came
                    hops = _hops(path)
                    route = " > ".join(h for h, _ in hops)
                ts = previous = record[0]
                for i, (hop, at) in enumerate([*hops, (f"{hosted.replica}@{node}", now)]):
                    at = int(at)
                    replica, _, where = hop.rpartition("@")
                    partial.add({"node": where, "app": app, "hop": i, "replica": replica,
                                 "hop_us": at - previous, "latency_us": now - ts, "path": route})
                    previous = at
                    self.events += 1


# -- installing and removing (rule 3) ---------------------------------------------------------------
def install(core: TracedCore, qid: str, query: TraceQuery) -> None:
    """Evaluate ``query`` at ``core``'s tracepoints from now on (replacing a query of the same id)."""
    tracer = core.tracer
    if tracer is None:
        tracer = Tracer(core.name, core.inbound)
    tracer.add(qid, query)
    core.tracer = tracer


def remove(core: TracedCore, qid: str) -> bool:
    """Stop evaluating query ``qid``; with the last one gone, tracing costs nothing again."""
    tracer = core.tracer
    if tracer is None:
        return False
    found = tracer.drop(qid)
    if not tracer.queries:
        core.tracer = None
    return found


def take(core: TracedCore) -> dict[str, list]:
    """Each installed query's partial table since the last call (empty when none is installed)."""
    return {} if core.tracer is None else core.tracer.take()


def installed(core: TracedCore) -> dict[str, Any]:
    """Query id -> its text, for listings."""
    return {} if core.tracer is None else {qid: p.query.text for qid, p in core.tracer.queries.items()}


def source_context(core: TracedCore, stream: str | None, traceparent: str | None) -> bool:
    """The source message on ``stream`` about to be taken came with W3C ``traceparent`` (None after
    it: cleared).  Returns whether it is carried (a Hop query is installed and the header is valid)."""
    tracer = core.tracer
    if tracer is None:
        return False
    match = TRACE_ID.match(traceparent or "")
    tracer.context = (stream, match.group(1)) if match and stream is not None and tracer.baggage else None
    return tracer.context is not None
