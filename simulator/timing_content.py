"""The timing tier's content: the reference run's rows with lineage, a window at a time (§III:
replication transparency fixes what every application gets; docs/simulator.md, "The timing tier")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replicast.operators.count_aggregate import CountWindowAggregate
from replicast.operators.record import CLOSED, Record, canonical_bytes
from replicast.simulator.scenario import ScenarioError
from replicast.simulator.sources import messages
from replicast.simulator.timing_join import keyed_pairs, pair_records
from replicast.simulator.timing_sources import SourceRows, ping_samples

#: Operator kinds whose output rows follow from input rows without waiting for punctuations.
TIMED_KINDS = ("union", "filter", "map", "join", "aggregate")


class TimingUnsupported(ScenarioError):
    """The scenario uses something the timing tier does not time (the reference tier does)."""


class Rows:
    """The rows of one logical stream (a source stream, an operator's or an application's output).

    ``parents`` holds, per input port, the input row of each row (Join: left and right; Union: the
    row in the input ``port`` says).  A Filter's rows are its input's rows: their records are made
    only when asked for (an application's input needs only times), and so is the tagged copy an
    operator reads (:func:`_tagged`, made once for every consumer)."""

    def __init__(self, records: list[Record] | None, ts: np.ndarray, parents: tuple[np.ndarray, ...] = (),
                 port: np.ndarray | None = None, of: "Rows | None" = None, make: Any = None):
        self._records, self.ts, self.parents, self.port, self._of = records, ts, parents, port, of
        self._make = make           # makes the records when asked for (a Join's pairs)
        self._tagged: list[Record] | None = None
        self._stacked: np.ndarray | None = None
        #: every row of the input, in its order (a Filter that passed them all: parents is a range)
        self.whole = of is not None and len(ts) == len(of.ts) and bool((parents[0] == np.arange(len(ts))).all())

    @property
    def records(self) -> list[Record]:
        if self._records is None and self._make is not None:
            self._records = self._make()
        elif self._records is None:
            source = self._of.records
            self._records = [source[i] for i in self.parents[0].tolist()]
        return self._records

    def stacked(self) -> np.ndarray:
        """A Union's rows as positions in its inputs' rows laid end to end, port after port (made
        once for every configuration)."""
        if self._stacked is None:
            sizes = np.bincount(self.port, minlength=int(self.port.max(initial=-1)) + 1)
            offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
            self._stacked = offsets[self.port] + self.parents[0]
        return self._stacked

    def tagged(self) -> list[Record]:
        if self._tagged is None:
            self._tagged = _tagged(self.records)
        return self._tagged

    def __len__(self) -> int:
        return len(self.ts)


# -- 1. content with lineage ----------------------------------------------------------------------

def _tagged(records: list[Record]) -> list[Record]:
    """Each record with its row number appended (operators address fields by position, so a trailing
    field changes nothing they compute and comes back in their outputs)."""
    return [(*r, i) for i, r in enumerate(records)]


@dataclass
class Span:
    """What an operator's rows of one window may use: input rows with ts in ``[warm, end)``; time
    windows close up to ``closes`` (``end − 1``, or CLOSED at the run's end); count aggregates keep
    their operator across windows in ``kept`` (a count window may span any number of windows)."""

    begin: int
    end: int
    closes: int
    kept: dict[str, Any]


def operator_rows(query: Any, name: str, inputs: list[Rows], span: Span) -> Rows:
    """``name``'s output rows from its inputs' rows, by the operator's own code, with lineage
    (aggregates: none, their rows are timed by the punctuations that close them)."""
    spec = query.operators[name]
    if spec.kind not in TIMED_KINDS:
        raise TimingUnsupported(f"{query.source}: operator {name!r} is a {spec.kind}; the timing tier times "
                                f"{', '.join(TIMED_KINDS)}; use the reference tier")
    if spec.kind == "union":
        records = [r for rows in inputs for r in rows.records]
        port = np.concatenate([np.full(len(rows), p, np.int32) for p, rows in enumerate(inputs)]
                              or [np.empty(0, np.int32)])
        row = np.concatenate([np.arange(len(rows)) for rows in inputs] or [np.empty(0, np.int64)])
        ts = np.concatenate([rows.ts for rows in inputs] or [np.empty(0, np.int64)])
        return Rows(records, ts, (row,), port)
    if spec.kind == "aggregate":
        return aggregate_rows(query, name, inputs[0], span)
    operator = query.new_operator(name)
    if spec.kind == "filter":
        out = operator.on_batch(0, inputs[0].tagged())
        parent = np.array([r[-1] for r in out], np.int64)
        return Rows(None, inputs[0].ts[parent], (parent,), of=inputs[0])
    if spec.kind == "map":          # a new record per input: one call per record keeps the lineage
        records, parent = [], []
        for i, record in enumerate(inputs[0].records):
            made = operator.on_batch(0, [record])
            records.extend(made)
            parent.extend([i] * len(made))
        return Rows(records, np.array([r[0] for r in records], np.int64), (np.array(parent, np.int64),))
    # Join: every left row buffered, then every right row probes them: each pair once (Alg. 2).
    pairs = keyed_pairs(operator, inputs[0], inputs[1])
    if pairs is not None:                 # over columns (simulator/timing_join.py), records when asked
        left, right = inputs

        def make() -> list[Record]:
            return pair_records(left.records, right.records, *pairs)

        return Rows(None, np.maximum(left.ts[pairs[0]], right.ts[pairs[1]]), pairs, make=make)
    width = len(query.schemas[spec.inputs[0]].names) + 1        # ts, left fields (then the tag)
    pairs = operator.on_batch(0, inputs[0].tagged())
    pairs += operator.on_batch(1, inputs[1].tagged())
    records = [(p[0], *p[1:width], *p[width + 1:-1]) for p in pairs]
    left = np.array([p[width] for p in pairs], np.int64)
    right = np.array([p[-1] for p in pairs], np.int64)
    return Rows(records, np.array([r[0] for r in records], np.int64), (left, right))


def aggregate_rows(query: Any, name: str, rows: Rows, span: Span) -> Rows:
    """An aggregate's outputs over a window: a time aggregate sees every row and closes the windows
    that end by ``span.closes`` (Alg. 3; those before ``begin`` are partial and never delivered); a
    count aggregate sees the rows of ``[begin, end)`` once, in the sorter's unique order (Alg. 4)."""
    operator = span.kept.get(name) or query.new_operator(name)
    if isinstance(operator, CountWindowAggregate):
        span.kept[name] = operator
        mine = [r for r, ts in zip(rows.records, rows.ts.tolist()) if span.begin <= ts < span.end]
        out = operator.on_batch(0, sorted(mine, key=lambda r: (r[0], canonical_bytes(r))))
    else:
        operator.on_batch(0, rows.records)
        out, _ = operator.on_punctuation(0, span.closes)
    out.sort(key=lambda r: r[0])
    return Rows(out, np.array([r[0] for r in out], np.int64), ())


@dataclass
class Window:
    """The content of one window of the run: rows with ts in ``[warm, end)``; deliveries are kept for
    ts in ``[begin, end)`` (the rows before ``begin`` are there for Joins and FIFO links)."""

    warm: int
    begin: int
    end: int
    rows: dict[str, Rows]
    published: dict[str, np.ndarray]
    homes: dict[str, str]
    #: per source stream, its punctuations: (send times, values), from ``warm`` to past ``end``
    punctuations: dict[str, tuple[np.ndarray, np.ndarray]]
    #: deliveries are kept for ts below this (``end``; the last window: every ts, CLOSED flushes)
    until: int
    #: per stream, which of its rows are kept (ts in ``[begin, until)``), made once for every sink
    kept_rows: dict = field(default_factory=dict)

    def kept(self, name: str) -> np.ndarray:
        mask = self.kept_rows.get(name)
        if mask is None:
            ts = self.rows[name].ts
            mask = self.kept_rows[name] = (ts >= self.begin) & (ts < self.until)
        return mask


def warmup_us(query: Any) -> int:
    """How far before a window its rows must start: every Join window and time window added up (a
    pair's rows lie within one Join window of its ``ts``; a time window's within its size; chained,
    the spans add)."""
    total = 0
    for name, spec in query.operators.items():
        operator = query.new_operator(name) if spec.kind in ("join", "aggregate") else None
        total += getattr(operator, "window_us", 0) + getattr(operator, "size_us", 0)
    return total + 1


def punctuation_lookahead_us(prepared: Any) -> int:
    """How far past a window its sources' punctuations are needed: a row near the window's end is
    released by the next punctuation of every source (at most a punctuation interval and a period
    later), and a window's last time windows by the one after (§IV-A)."""
    return max((2 * (s.punctuation_us + s.period_us) for s in prepared.sources), default=0)


def punctuations(feed: Any, carried: list, until: int) -> tuple[Any, list]:
    """Read ``feed``'s punctuations sent before ``until`` onto ``carried`` ((sent, value) pairs)."""
    for when, items in feed:
        # plain punctuations only (a key seal, {"punctuation": p, "key": …}, is refused upstream)
        carried.extend((when, item["punctuation"]) for item in items if len(item) == 1 and "punctuation" in item)
        if when >= until:
            break
    return feed, carried


def windows(prepared: Any, window_us: int) -> Any:
    """The run's content, a window of ``window_us`` simulated µs at a time (memory: one window)."""
    trace, servers, origin, query = prepared.trace, prepared.servers, prepared.origin, prepared.query

    def rtt(a: str, b: str, t: int) -> float | None:
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    for source in prepared.sources:
        if getattr(source, "seal", ()):
            raise TimingUnsupported(f"{prepared.scenario.path}: stream {source.stream!r} declares seal = "
                                    f"{list(source.seal)}; the timing tier does not model seals per key (windows and "
                                    f"sorters wait for the punctuation here): use the reference tier")
        if not source.stamped:
            raise TimingUnsupported(f"{prepared.scenario.path}: the timing tier needs source-stamped streams "
                                    f"(entry_mode = \"source\"), got entry-stamped {source.stream!r}")
    warm = warmup_us(query)
    made = {s.stream: SourceRows(s, query.streams[s.stream].schema, prepared.start, prepared.end, rtt)
            for s in prepared.sources}
    # the same messages again, read ahead of the records for their punctuations (CLOSED at the end)
    marks = {s.stream: (messages(s, prepared.start, prepared.end, rtt, close=True), []) for s in prepared.sources}
    ahead = punctuation_lookahead_us(prepared)
    waits = any(spec.kind == "aggregate" for spec in query.operators.values()) or \
        any(spec.ordered for spec in query.applications.values())
    kept: dict[str, Any] = {}
    homes = {s.stream: s.server for s in prepared.sources}
    carried: dict[str, tuple[list, list]] = {stream: ([], []) for stream in made}
    pings = [s for s in prepared.sources if made[s.stream].direct and s.kind == "ping"]
    begin = prepared.start
    while begin < prepared.end:
        end = min(prepared.end, begin + window_us)
        rows, published, punctuated = {}, {}, {}
        asks = []
        for source in pings:
            steps = made[source.stream].steps(end)
            asks.append((source.server, made[source.stream].peers_at(len(steps)), steps))
        samples = dict(zip((s.stream for s in pings), ping_samples(trace, servers, origin, asks)))
        for source in prepared.sources:
            stream = source.stream
            records, sent = carried[stream]
            new, new_sent = made[stream].take(end, samples.get(stream))
            records.extend(new)
            sent.extend(new_sent)
            ts = np.array([r[0] for r in records], np.int64)
            rows[stream] = Rows(records, ts, ())
            published[stream] = np.array(sent, np.int64)
            tail = int(np.searchsorted(ts, end - warm)) if len(ts) else 0
            carried[stream] = (records[tail:], sent[tail:])
            if not waits:                  # nothing waits for punctuations: none are read
                punctuated[stream] = (np.empty(0, np.int64), np.empty(0, np.int64))
                continue
            feed, marked = marks[stream] = punctuations(*marks[stream], end + ahead)
            marked[:] = [m for m in marked if m[0] >= begin - warm]
            pairs = np.array(marked, np.int64).reshape(-1, 2)
            punctuated[stream] = (pairs[:, 0].copy(), pairs[:, 1].copy())
        last = end >= prepared.end
        span = Span(begin, end, CLOSED if last else end - 1, kept)
        same: dict[tuple, Rows] = {}         # Filters with one input and condition pass the same rows
        for name, spec in query.operators.items():
            key = (spec.inputs, repr(sorted(spec.params.items()))) if spec.kind == "filter" else None
            if key is not None and key in same:
                rows[name] = same[key]
                continue
            rows[name] = operator_rows(query, name, [rows[i] for i in spec.inputs], span)
            if key is not None:
                same[key] = rows[name]
        yield Window(begin - warm, begin, end, rows, published, homes, punctuated, CLOSED if last else end)
        begin = end
