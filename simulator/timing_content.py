"""The timing tier's content: the reference run's rows with lineage, a window at a time (§III:
replication transparency fixes what every application gets; docs/simulator.md, "The timing tier")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from replicast.operators.record import Record
from replicast.simulator.scenario import ScenarioError
from replicast.simulator.sources import messages, reference_records

#: Operator kinds whose output rows follow from input rows without waiting for punctuations.
TIMED_KINDS = ("union", "filter", "map", "join")


class TimingUnsupported(ScenarioError):
    """The scenario uses something the timing tier does not time (the reference tier does)."""


class Rows:
    """The rows of one logical stream (a source stream, an operator's or an application's output).

    ``parents`` holds, per input port, the input row of each row (Join: left and right; Union: the
    row in the input ``port`` says).  A Filter's rows are its input's rows: their records are made
    only when asked for (an application's input needs only times), and so is the tagged copy an
    operator reads (:func:`_tagged`, made once for every consumer)."""

    def __init__(self, records: list[Record] | None, ts: np.ndarray, parents: tuple[np.ndarray, ...] = (),
                 port: np.ndarray | None = None, of: "Rows | None" = None):
        self._records, self.ts, self.parents, self.port, self._of = records, ts, parents, port, of
        self._tagged: list[Record] | None = None

    @property
    def records(self) -> list[Record]:
        if self._records is None:
            source = self._of.records
            self._records = [source[i] for i in self.parents[0].tolist()]
        return self._records

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


def operator_rows(query: Any, name: str, inputs: list[Rows]) -> Rows:
    """``name``'s output rows from its inputs' rows, by the operator's own code, with lineage."""
    spec = query.operators[name]
    if spec.kind not in TIMED_KINDS:
        raise TimingUnsupported(f"{query.source}: operator {name!r} is a {spec.kind}; the timing tier times "
                                f"{', '.join(TIMED_KINDS)} (its outputs wait for punctuations); use the "
                                f"reference tier")
    if spec.kind == "union":
        records = [r for rows in inputs for r in rows.records]
        port = np.concatenate([np.full(len(rows), p, np.int32) for p, rows in enumerate(inputs)]
                              or [np.empty(0, np.int32)])
        row = np.concatenate([np.arange(len(rows)) for rows in inputs] or [np.empty(0, np.int64)])
        ts = np.concatenate([rows.ts for rows in inputs] or [np.empty(0, np.int64)])
        return Rows(records, ts, (row,), port)
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
    width = len(query.schemas[spec.inputs[0]].names) + 1        # ts, left fields (then the tag)
    pairs = operator.on_batch(0, inputs[0].tagged())
    pairs += operator.on_batch(1, inputs[1].tagged())
    records = [(p[0], *p[1:width], *p[width + 1:-1]) for p in pairs]
    left = np.array([p[width] for p in pairs], np.int64)
    right = np.array([p[-1] for p in pairs], np.int64)
    return Rows(records, np.array([r[0] for r in records], np.int64), (left, right))


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


def warmup_us(query: Any) -> int:
    """How far before a window its rows must start: the longest Join window (a pair's rows lie
    within one window of its ``ts``, the later of the two)."""
    windows = [query.new_operator(name).window_us for name, spec in query.operators.items() if spec.kind == "join"]
    return max(windows, default=0) + 1


def windows(prepared: Any, window_us: int) -> Any:
    """The run's content, a window of ``window_us`` simulated µs at a time (memory: one window)."""
    trace, servers, origin, query = prepared.trace, prepared.servers, prepared.origin, prepared.query

    def rtt(a: str, b: str, t: int) -> float | None:
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    for source in prepared.sources:
        if not source.stamped:
            raise TimingUnsupported(f"{prepared.scenario.path}: the timing tier needs source-stamped streams "
                                    f"(entry_mode = \"source\"), got entry-stamped {source.stream!r}")
    warm = warmup_us(query)
    feeds = {s.stream: messages(s, prepared.start, prepared.end, rtt, close=False) for s in prepared.sources}
    homes = {s.stream: s.server for s in prepared.sources}
    pending: dict[str, Any] = {stream: next(feed, None) for stream, feed in feeds.items()}
    carried: dict[str, tuple[list, list]] = {stream: ([], []) for stream in feeds}
    begin = prepared.start
    while begin < prepared.end:
        end = min(prepared.end, begin + window_us)
        rows, published = {}, {}
        for source in prepared.sources:
            stream = source.stream
            schema = query.streams[stream].schema
            records, sent = carried[stream]
            item = pending[stream]
            while item is not None and item[0] < end:
                made = reference_records(schema, item[1], item[0], f"source {stream}")
                records.extend(made)
                sent.extend([item[0]] * len(made))
                item = next(feeds[stream], None)
            pending[stream] = item
            ts = np.array([r[0] for r in records], np.int64)
            rows[stream] = Rows(records, ts, ())
            published[stream] = np.array(sent, np.int64)
            tail = int(np.searchsorted(ts, end - warm)) if len(ts) else 0
            carried[stream] = (records[tail:], sent[tail:])
        for name in query.operators:
            rows[name] = operator_rows(query, name, [rows[i] for i in query.operators[name].inputs])
        yield Window(begin - warm, begin, end, rows, published, homes)
        begin = end
