"""User-defined operators for the query files of docs/explain.md (``kind = "python"``).

One of each Blazes class, as a user would write them (docs/queries.md, "User-defined operators"):

* :class:`Scale` — CR: a stateless function of each record;
* :class:`Distinct` — CW: passes each distinct record once (a set grows; its contents never
  depend on the order);
* :class:`Rises` — OW_{server}: passes a record whose load exceeds that server's previous one —
  "previous" is an order, so replicas agree only when the input is sorted;
* :class:`EveryNth` — declares nothing (taken as OW_*): passes every n-th record it receives;
* :class:`LatestLoad` — OR: for each ping, the latest load its destination reported: a race
  between two inputs, which sorting each input cannot decide (Blazes' POOR query, §III-D);
* :class:`IntervalPeak` — OW_{window}: emits the largest load of each interval at the punctuation
  that closes it, so time punctuations seal it;
* :class:`ServerPeak` — OW_{server, window}, ``key_seals = "close"``: each server's largest load per
  interval, emitted once that server's seal (or a punctuation) closes the interval — a user-defined
  keyed window sealed per key (docs/explain.md, "Seal per key in the engine").
"""

from __future__ import annotations

from replicast.operators.base import Operator
from replicast.operators.record import Record


class Scale(Operator):
    """(ts, server, load) → (ts, server, load × factor)."""

    kind = "scale"
    label = "CR"

    def __init__(self, factor: float = 100.0):
        super().__init__(1)
        self.factor = factor

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        return [(r[0], r[1], r[2] * self.factor) for r in records]


class Distinct(Operator):
    """Each distinct record once."""

    kind = "distinct"
    label = "CW"

    def __init__(self):
        super().__init__(1)
        self.seen: set[Record] = set()

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        out = []
        for record in records:
            if record not in self.seen:
                self.seen.add(record)
                out.append(record)
        return out

    def snapshot_state(self):
        return sorted(self.seen)

    def restore_state(self, state) -> None:
        self.seen = set(map(tuple, state))


class Rises(Operator):
    """(ts, server, load) records whose load is above the server's previous record's."""

    kind = "rises"
    label = "OW"
    gate = ("server",)

    def __init__(self):
        super().__init__(1)
        self.last: dict[str, float] = {}

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        out = []
        for record in records:
            previous = self.last.get(record[1])
            if previous is not None and record[2] > previous:
                out.append(record)
            self.last[record[1]] = record[2]
        return out


class EveryNth(Operator):
    """Every ``n``-th record received (a sampler that declares no annotation)."""

    kind = "every_nth"

    def __init__(self, n: int = 3):
        super().__init__(1)
        self.n, self.count = n, 0

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        out = []
        for record in records:
            self.count += 1
            if self.count % self.n == 0:
                out.append(record)
        return out


class LatestLoad(Operator):
    """Port 0: (ts, server, load); port 1: (ts, src, dst, rtt_ms).  For each ping,
    (ts, dst, rtt_ms, load) with the latest load received from ``dst`` (-1.0 if none yet)."""

    kind = "latest_load"
    label = "OR"
    gate = ("dst",)

    def __init__(self):
        super().__init__(2)
        self.load: dict[str, float] = {}

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        if port == 0:
            for record in records:
                self.load[record[1]] = record[2]
            return []
        return [(r[0], r[2], r[3], self.load.get(r[2], -1.0)) for r in records]


class IntervalPeak(Operator):
    """The largest load of each ``interval_ms`` interval, emitted once a punctuation closes it,
    with the interval's last µs as ts."""

    kind = "interval_peak"
    label = "OW"
    gate = ("window",)

    def __init__(self, interval_ms: int = 1000):
        super().__init__(1)
        self.interval = interval_ms * 1000
        self.peaks: dict[int, float] = {}

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        for record in records:
            start = record[0] // self.interval * self.interval
            self.peaks[start] = max(self.peaks.get(start, record[2]), record[2])
        return []

    def on_frontier(self, p: int) -> list[Record]:
        closed = sorted(start for start in self.peaks if start + self.interval - 1 <= p)
        return [(start + self.interval - 1, self.peaks.pop(start)) for start in closed]


class ServerPeak(Operator):
    """(ts, server, load) → (interval's last µs, server, the server's largest load in the interval),
    once the interval is sealed for that server: by its seal per key (``on_key_seal``) or by a
    whole-stream punctuation (``on_frontier``).  ``max`` is exact, so any order gives the same value."""

    kind = "server_peak"
    label = "OW"
    gate = ("server", "window")
    key_seals = "close"            # it acts on seals per server: the engine hands them to on_key_seal

    def __init__(self, interval_ms: float = 1000):
        super().__init__(1)
        self.interval = round(interval_ms * 1000)
        self.peaks: dict[tuple[str, int], float] = {}       # (server, interval start) -> peak

    def on_batch(self, port: int, records: list[Record]) -> list[Record]:
        for ts, server, load in records:
            slot = (server, ts // self.interval * self.interval)
            self.peaks[slot] = max(self.peaks.get(slot, load), load)
        return []

    def on_frontier(self, p: int) -> list[Record]:
        return self._close(p, None)

    def on_key_seal(self, port: int, key: tuple, p: int) -> list[Record]:
        (server,) = key                                      # key_seal_fields == ("server",)
        return self._close(p, server)

    def _close(self, p: int, server: str | None) -> list[Record]:
        """The intervals wholly at or below ``p`` (of ``server`` only, unless None), in a fixed order."""
        closed = sorted(slot for slot in self.peaks
                        if (server is None or slot[0] == server) and slot[1] + self.interval - 1 <= p)
        return [(start + self.interval - 1, name, self.peaks.pop((name, start))) for name, start in closed]

    def snapshot_state(self):
        return [[name, start, peak] for (name, start), peak in self.peaks.items()]

    def restore_state(self, state) -> None:
        self.peaks = {(name, start): peak for name, start, peak in state}
