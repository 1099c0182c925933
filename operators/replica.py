"""One replica with its input machinery: what a node hosts for each operator replica (§III).

For every input port a :class:`~operators.dedup.DuplicateFilter` merges the port's stream
replicas; if the operator is order-sensitive a :class:`~operators.sorter.Sorter` follows it; then
the operator.  An application sink is the same machinery in front of a pass-through operator.
A driver feeds batches from stream replicas and routes the returned output to every downstream
replica.

Each batch becomes at most one *step* of the operator's input — records of one port, then maybe
that port's punctuation (:meth:`OperatorReplica.step`).  Two engine modes change the steps
(``engine/core/modes.py``): ``deterministic`` puts a :class:`~operators.merge.MergeSorter` across
all ports in place of the sorters, so every replica takes the same steps; ``synchronization``
gives a replica a ``tap`` that sees each step first (a primary records it as a determinant, a
backup takes its primary's steps instead of its own).

Seals per key (:mod:`operators.key_seals`, where the analysis gives the operator a
:class:`~operators.key_seals.KeySealing`): :meth:`OperatorReplica.on_key_seals` merges the seals of
a port's stream replicas (first wins), drops a later record of a sealed key at or below its seal
(counted in ``late_for_seal``: a source broke its promise), releases the key's prefix from the
sorter (count windows) and lets the operator close the key's windows, or passes the seals on.  In
the engine modes with one order across ports or process pairs, seals are not used (the punctuation
closes the same windows).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any

from replicast.operators.base import Operator
from replicast.operators.dedup import DuplicateFilter
from replicast.operators.key_seals import KeySeal, KeySealing, SealTable, record_key
from replicast.operators.merge import MergeSorter
from replicast.operators.record import Record
from replicast.operators.sorter import Sorter
from replicast.operators.union import Union


class OperatorReplica:
    """Duplicate filters (+ sorters) in front of one operator instance."""

    def __init__(self, operator: Operator, upstreams_per_port: list[int], sort_inputs: bool = False,
                 merged: bool = False, sealing: KeySealing | None = None):
        if len(upstreams_per_port) != operator.n_inputs:
            raise ValueError(f"{operator.kind} has {operator.n_inputs} inputs, got {len(upstreams_per_port)} ports")
        self.operator = operator
        self.filters = [DuplicateFilter(k) for k in upstreams_per_port]
        #: ``merged``: one deterministic order across all ports (it sorts, so no per-port sorters).
        self.merge = MergeSorter(len(upstreams_per_port)) if merged else None
        self.sorters = [Sorter() for _ in upstreams_per_port] if sort_inputs and not merged else None
        #: Sees every step before the operator does: ``tap(replica, port, records, p) -> (out, forwarded)``.
        self.tap: Callable[["OperatorReplica", int, list[Record], int | None], tuple[list[Record], int | None]] \
            | None = None
        #: What this operator does with seals per key (None: it ignores them), and each port's seals.
        self.sealing = sealing if sealing is not None and not merged else None
        self.key_seals = [SealTable() for _ in upstreams_per_port] if self.sealing is not None else None
        self.late_for_seal = 0
        if self.sealing is not None and self.sealing.closes:
            operator.key_seal_fields = self.sealing.key
            if hasattr(operator, "seal_positions"):            # a time-window aggregate
                operator.seal_positions = self.sealing.group_positions
            if hasattr(operator, "seal_orders"):               # a keyed join
                operator.seal_orders = self.sealing.port_orders

    def knows(self, port: int, key: Hashable) -> bool:
        """Whether a batch with this content key reached ``port`` whole from another stream replica
        and is still remembered: a copy of it needs no records (see :mod:`operators.dedup`)."""
        return self.filters[port].knows(key)

    def on_batch(self, port: int, upstream: int, records: Sequence[Record],
                 punctuation: int | None = None, key: Hashable | None = None) -> tuple[list[Record], int | None]:
        """A batch from stream replica ``upstream`` of ``port``: records, then maybe a punctuation.

        ``key`` optionally identifies the records' content (equal keys, equal records; the engine
        uses the frame's record bytes).  Returns the records the replica emits and the punctuation
        to forward after them (or None).  After calling this, send both to every downstream replica.
        """
        dedup = self.filters[port]
        fresh = dedup.on_batch(upstream, records, key) if records or key is not None else []
        p = None if punctuation is None else dedup.on_punctuation(upstream, punctuation)
        if self.key_seals is not None and self.key_seals[port].seals:
            fresh = self._unsealed(port, fresh)
        if self.merge is not None:
            return self._merged(port, fresh, p)
        if self.sorters is not None:
            self.sorters[port].add(fresh)
            fresh = self.sorters[port].release(p) if p is not None else []
        if self.tap is not None:
            return self.tap(self, port, fresh, p) if fresh or p is not None else ([], None)
        operator = self.operator                    # self.step, inlined: the hot path of every replica
        out = operator.on_batch(port, fresh) if fresh else []
        if p is None:
            return out, None
        emitted, forwarded = operator.on_punctuation(port, p)
        if forwarded is not None and self.key_seals is not None:
            for table in self.key_seals:
                table.prune(forwarded)
        return (out + emitted if emitted else out), forwarded

    def on_key_seals(self, port: int, upstream: int, seals: Sequence[KeySeal]) -> tuple[list[Record], list[KeySeal]]:
        """Seals per key from stream replica ``upstream`` of ``port``, each valid for the records that
        replica sent before it.  Returns the records the replica emits and the seals it forwards.
        After calling this, send the records, then the seals, to every downstream replica."""
        sealing, tables = self.sealing, self.key_seals
        if sealing is None or self.tap is not None:
            return [], []
        table, frontier = tables[port], self.operator.frontier
        out: list[Record] = []
        forwarded: list[KeySeal] = []
        for key, p in seals:
            if not table.raise_seal(key, p, frontier):
                continue                                    # a copy from another stream replica, or stale
            if sealing.closes:
                if self.sorters is not None:
                    released = self.sorters[port].release_key(p, sealing.positions(port), key)
                    if released:
                        out += self.operator.on_batch(port, released)
                out += self.operator.on_key_seal(port, key, p)
            if sealing.forwards and p > self.operator.frontier:
                # after what it emitted: its later outputs of this key have ts > p (a window still
                # open ends after p + 1; a count window's records all lie above p)
                forwarded.append((key if sealing.order is None else tuple(key[i] for i in sealing.order), p))
        return out, forwarded

    def _unsealed(self, port: int, records: list[Record]) -> list[Record]:
        """``records`` less those of a sealed key at or below its seal (a promise broken upstream)."""
        sealed, positions = self.key_seals[port].sealed, self.sealing.positions(port)
        kept = [r for r in records if r[0] > sealed(record_key(r, positions))]
        self.late_for_seal += len(records) - len(kept)
        return kept

    def skip_to(self, port: int, frontier: int) -> tuple[list[Record], int | None]:
        """``port`` gives up what lies at or below ``frontier`` (its inputs lost it) and goes on as
        if punctuation ``frontier`` had come: returns the records and punctuation to emit."""
        dedup = self.filters[port]
        dedup.adopt(frontier)
        p = dedup.max_punctuation
        if self.merge is not None:                  # deterministic: what the merge holds goes first, in order
            return self._merged(port, [], p)
        out: list[Record] = self.operator.on_batch(port, self.sorters[port].release(p)) if self.sorters else []
        emitted, forwarded = self.operator.on_punctuation(port, p)
        return out + emitted, forwarded

    def step(self, port: int, records: list[Record], p: int | None) -> tuple[list[Record], int | None]:
        """One step of the operator's input: ``records`` on ``port``, then punctuation ``p`` if not
        None; returns what it emits and the punctuation it forwards (or None)."""
        operator = self.operator
        out = operator.on_batch(port, records) if records else []
        if p is None:
            return out, None
        emitted, forwarded = operator.on_punctuation(port, p)
        return (out + emitted if emitted else out), forwarded

    def _merged(self, port: int, fresh: list[Record], p: int | None) -> tuple[list[Record], int | None]:
        """The deterministic merge: release in one order what every port's punctuation has passed."""
        self.merge.add(port, fresh)
        if p is None:
            return [], None
        runs, low = self.merge.punctuate(port, p)
        if low is None:
            return [], None
        out: list[Record] = []
        take = self.step if self.tap is None else partial(self.tap, self)
        for run_port, records in runs:
            out += take(run_port, records, None)[0]
        forwarded = None
        for q in range(len(self.filters)):          # every port is known up to the merged punctuation
            emitted, f = take(q, [], low)
            out += emitted
            forwarded = f if f is not None else forwarded
        return out, forwarded

    def given(self, port: int = 0) -> dict[Record, int]:
        """The records ``port`` has handed to the operator above its punctuation, with their
        multiplicities: what its filter passed less what its sorter still holds.  For an
        application sink this is what it delivered since its last punctuation."""
        given = Counter(self.filters[port].passed_counts())
        if self.sorters is not None:
            given.subtract(tuple(r) for r in self.sorters[port].snapshot())
        return {record: n for record, n in given.items() if n > 0}

    def snapshot(self) -> dict[str, Any]:
        return {"operator": self.operator.snapshot(),
                "filters": [f.snapshot() for f in self.filters],
                "sorters": None if self.sorters is None else [s.snapshot() for s in self.sorters],
                "merge": None if self.merge is None else self.merge.snapshot(),
                "key_seals": None if self.key_seals is None else [t.snapshot() for t in self.key_seals]}

    def restore(self, state: dict[str, Any]) -> None:
        self.operator.restore(state["operator"])
        self.filters = [DuplicateFilter.from_snapshot(s, min_run=f.min_run) for f, s in zip(self.filters, state["filters"])]
        if self.sorters is not None:
            for sorter, s in zip(self.sorters, state["sorters"]):
                sorter.restore(s)
        if self.merge is not None:
            self.merge.restore(state["merge"])
        if self.key_seals is not None:
            for table, s in zip(self.key_seals, state.get("key_seals") or [[] for _ in self.key_seals]):
                table.restore(s)


def application_sink(upstreams: int, ordered: bool) -> OperatorReplica:
    """An application's input: a duplicate filter over ``upstreams`` stream replicas, sorted if ``ordered``."""
    return OperatorReplica(Union(1), [upstreams], sort_inputs=ordered)


def entry_point(upstreams: int = 1, sealing: KeySealing | None = None) -> OperatorReplica:
    """The stream-processing side of an entry point: forwards the source's records and punctuations
    (and its seals per key, given the stream's ``sealing``)."""
    return OperatorReplica(Union(1), [upstreams], sealing=sealing)
