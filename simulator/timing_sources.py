"""The timing tier's source records, a window at a time, without a message per record
(docs/simulator.md, "The timing tier").

:func:`simulator.sources.messages` makes the payloads an entry point receives, one dict per
record, and :func:`simulator.sources.reference_records` the records it accepts: right for the
reference tier, whose entry points receive those payloads, but most of the timing tier's content
cost.  :class:`SourceRows` makes exactly the same records (the same seeded walk, the same trace
samples, the same rounding) for the ``cpu`` and ``ping`` kinds whose stream declares the fields
in the order the source writes them, straight as tuples; a ``ping`` source's trace samples are
read for a whole window at once (:func:`ping_samples`).  Anything else — ``events`` sources,
fields in another order or of other types — goes through ``messages`` as before.
``tests/simulator/test_timing_sources.py`` checks the records are the same.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from replicast.operators.record import Record, make_record
from replicast.simulator.sources import Source, messages, reference_records

#: The fields each kind writes, in its order, with their types (simulator.sources.messages).
FIELDS = {"cpu": (("server", "load"), ("str", "float")), "ping": (("src", "dst", "rtt_ms"), ("str", "str", "float"))}


class SourceRows:
    """One source's records from ``start`` on, taken a window at a time (:meth:`take`)."""

    def __init__(self, source: Source, schema: Any, start: int, end: int, trace_rtt: Any):
        self.source, self.schema, self.end = source, schema, end
        self.direct = source.stamped and FIELDS.get(source.kind) == (tuple(schema.names), tuple(schema.types))
        self.where = f"source {source.stream}"
        if not self.direct:
            self._feed: Iterator = messages(source, start, end, trace_rtt, close=False)
            self._pending = next(self._feed, None)
            return
        rng = source.rng()
        self._rng = rng
        self._when = start + rng.randrange(source.period_us)      # as messages(): the phase, then the load
        self._load = rng.random()
        self._turn = 0
        self._checked = False

    def steps(self, until: int) -> np.ndarray:
        """The send times of the records (ping: the samples) before ``until`` not taken yet."""
        until = min(until, self.end)
        if self._when >= until:
            return np.empty(0, np.int64)
        period = self.source.period_us
        return np.arange(self._when, until, period, dtype=np.int64)

    def take(self, until: int, samples: np.ndarray | None = None) -> tuple[list[Record], list[int]]:
        """The records sent before ``until`` and their send times; a ``ping`` source is given the
        RTT (ms, NaN: an outage) of each of :meth:`steps` (:func:`ping_samples`)."""
        if not self.direct:
            records: list[Record] = []
            sent: list[int] = []
            item = self._pending
            while item is not None and item[0] < until:
                made = reference_records(self.schema, item[1], item[0], self.where)
                records.extend(made)
                sent.extend([item[0]] * len(made))
                item = next(self._feed, None)
            self._pending = item
            return records, sent
        whens = self.steps(until).tolist()
        if not whens:
            return [], []
        self._when = whens[-1] + self.source.period_us
        server = self.source.server
        if self.source.kind == "cpu":
            uniform, load, records = self._rng.uniform, self._load, []
            for when in whens:                # the walk of messages(), step by step
                load = min(1.0, max(0.0, load + uniform(-0.1, 0.1)))
                records.append((when, server, round(load, 3)))
            self._load = load
        else:
            peers, turn = self.source.peers, self._turn
            records = [(when, server, peers[(turn + i) % len(peers)], round(rtt, 3))
                       for i, (when, rtt) in enumerate(zip(whens, samples.tolist())) if rtt == rtt]
            self._turn = turn + len(whens)
        if records and not self._checked:     # the entry point's own check, once: the types are the kind's
            first = records[0]
            names = self.schema.names
            made = make_record(self.schema, first[0], dict(zip(names, first[1:])), self.where)
            if made != first:
                raise AssertionError(f"{self.where}: {made!r} != {first!r}")
            self._checked = True
        return records, [r[0] for r in records]

    def peers_at(self, count: int) -> list[str]:
        """The peers a ``ping`` source measures at its next ``count`` steps."""
        peers = self.source.peers
        return [peers[(self._turn + i) % len(peers)] for i in range(count)]


def ping_samples(trace: Any, servers: dict[str, int], origin: int, asks: list[tuple[str, list[str], np.ndarray]]
                 ) -> list[np.ndarray]:
    """The RTT (ms, float64 of the trace's float32; NaN: an outage) each ``(server, peers, times)``
    of ``asks`` reads, as :meth:`traces.store.TraceStore.latency_ms` reads one (time clamped to the
    trace's frames; a server measuring itself: 0): every frame of the window read once."""
    if not asks:
        return []
    src = np.concatenate([np.full(len(t), servers[s], np.intp) for s, _, t in asks])
    dst = np.concatenate([np.array([servers[p] for p in peers], np.intp) for _, peers, _ in asks]
                         or [np.empty(0, np.intp)])
    times = np.concatenate([t for _, _, t in asks])
    out = np.empty(len(times), np.float64)
    if len(times):
        frame = np.minimum(np.maximum(times - origin, 0) // trace.interval_us, trace.n_frames - 1)
        first, last = int(frame.min()), int(frame.max())
        block = np.stack([trace.frame(f) for f in range(first, last + 1)])
        out[:] = block[frame - first, src, dst]
        out[src == dst] = 0.0
    pieces, at = [], 0
    for _, _, t in asks:
        pieces.append(out[at:at + len(t)])
        at += len(t)
    return pieces
