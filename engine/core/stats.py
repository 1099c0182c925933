"""Statistics of a node core: counters per replica and application, latencies (§V-B weights, §VI-B latency)."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from operators.record import Record

if TYPE_CHECKING:
    from engine.core.node import NodeCore

_ts = itemgetter(0)

#: Counters every node core keeps (all start at 0; ``docs/node.md`` says what each counts).
COUNTERS = ("dead_letters", "unknown_streams", "malformed_batches", "protocol_errors", "gaps", "stale_batches",
            "stale_requests", "known_batches", "refused_control", "streams_cut", "snapshots_given",
            "snapshots_taken", "rebuilt_without_peer", "rejoins", "continued_streams")


class Latency:
    """Delivered records' latency = arrival − ts (§VI-B), summarised."""

    __slots__ = ("count", "total", "max")

    def __init__(self) -> None:
        self.count = self.total = self.max = 0

    def add(self, now: int, records: list[Record]) -> None:
        if not records:
            return
        stamps = list(map(_ts, records))               # in C: sum and min, no Python loop per record
        self.total += now * len(stamps) - sum(stamps)
        if now - min(stamps) > self.max:
            self.max = now - min(stamps)
        self.count += len(stamps)


def statistics(core: "NodeCore") -> dict[str, Any]:
    """Counters per replica and application (plain data, for reports and metrics)."""
    replicas = {}
    for replica, h in core.hosted.items():
        filters = h.logic.filters if h.logic is not None else []
        inputs = {i.index: f"{s.source}@{i.epoch}" for s, i in core.inbound.items()
                  if s.target == replica and i.index is not None}
        replicas[str(replica)] = {
            "kind": h.kind, "state": h.state.value, "epoch": h.epoch,
            "records_in": h.records_in, "records_out": h.records_out,
            "duplicates": sum(f.duplicates + f.below_punctuation for f in filters),
            "weights": [f.weights() for f in filters],
            "inputs": [[inputs.get(i, "") for i in range(f.k)] for f in filters],
            "retained": len(h.log), "late": h.entry.late if h.entry else 0,
            "accepted": h.entry.accepted if h.entry else 0, "malformed": h.entry.malformed if h.entry else 0,
            "stamping": h.stamping}
    latency = {app: {"count": l.count, "mean_us": l.total // l.count if l.count else None, "max_us": l.max}
               for app, l in core.latency.items()}
    return {"replicas": replicas, "latency": latency, "rtt_us": dict(core.rtt_us), **core.counters}
