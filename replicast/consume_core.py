"""The pure part of the consumer library (docs/consume.md): Alg. 1 (§IV-B) on output ids, the
punctuation frontier, timestamp ordering and the resumable position.  No clocks, no I/O.

Every record an application sink publishes carries its output id ``"<ts>:<occurrence>:<digest>"``
(:mod:`engine.sinks`): the same on every sink replica and every run.  :class:`ExactlyOnce` takes the
payloads of one application from any number of sink replicas and brokers, in any interleaving, and
passes each id once:

* a record at or below the *frontier* (the highest punctuation seen, from any sink replica) is a
  copy (Alg. 1 line 2): the sink that sent that punctuation had sent everything up to it before;
* otherwise the first copy of an id passes and is remembered (lines 3–6: the occurrence is part of
  the id, so equal records are counted by their ids);
* a punctuation above the frontier raises it and forgets the ids at or below it (line 11): memory
  is the distinct ids of one punctuation interval.

``Order.TIMESTAMP`` holds the passed records and releases them at each punctuation, sorted by
(ts, id) — the same order on every run.  :class:`Position` is what a restarted consumer needs to
neither skip nor repeat: the frontier, the ids above it already handed to the user, and (in
timestamp order) the records passed but still held — the broker will not send those again.
"""

from __future__ import annotations

import enum
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The key of a record's output id in a payload (engine.sinks.ID_KEY).
ID_KEY = "@id"


class Order(enum.Enum):
    """How records are handed out."""

    ARRIVAL = "arrival"          # as their first copy arrives (no added latency)
    TIMESTAMP = "timestamp"      # sorted by (ts, id), released at each punctuation


@dataclass(frozen=True)
class Position:
    """Where a consumer stands: every record at or below ``frontier`` was handed out, and above it
    exactly those with ``ids``; ``held`` are records accepted but not yet handed out (timestamp
    order), to be handed out at the next punctuation."""

    frontier: int | None = None
    ids: frozenset[str] = field(default_factory=frozenset)
    held: tuple[dict, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"frontier": self.frontier, "ids": sorted(self.ids), "held": list(self.held)},
                          ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str, where: str = "position") -> "Position":
        try:
            data = json.loads(text)
            frontier, ids, held = data["frontier"], data["ids"], data.get("held", [])
            if (not (frontier is None or isinstance(frontier, int)) or not all(isinstance(i, str) for i in ids)
                    or not all(isinstance(h, dict) and isinstance(h.get(ID_KEY), str) and isinstance(h.get("ts"), int)
                               for h in held)):
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"{where}: not a consumer position {{\"frontier\": int, \"ids\": [str…], "
                             f"\"held\": [record…]}}") from None
        return cls(frontier, frozenset(ids), tuple(held))


def id_ts(record_id: str) -> int:
    """The ts an output id names."""
    return int(record_id.split(":", 1)[0])


#: Bytes of payloads kept after the frontier passed them, so the copies lagging sink replicas send
#: later are dropped without being decoded (each sink replica publishes the same deliveries, usually
#: as byte-identical payloads); past this budget such a copy is decoded and its records dropped one
#: by one, as below the frontier — the same result, slower.
COVERED_BYTES = 1 << 20
#: Below every timestamp: the frontier before any punctuation.
_NO_FRONTIER = -(1 << 64)


class ExactlyOnce:
    """Alg. 1 on output ids for one application (module docstring).  Counters: ``copies`` (dropped
    as already passed), ``late`` (dropped below the frontier), ``unidentified`` (records without an
    id, from a sink older than ids: passed, at least once), ``copy_payloads`` (whole payloads
    dropped undecoded by :meth:`offer_payload`)."""

    def __init__(self, order: Order = Order.ARRIVAL, position: Position | None = None, *,
                 covered_bytes: int = COVERED_BYTES):
        self.order = order
        position = position or Position()
        self.frontier = position.frontier
        #: id -> the ts it names, above the frontier (forgetting needs no parsing of ids)
        self._seen: dict[str, int] = {rid: id_ts(rid) for rid in position.ids}
        self._held: list[tuple[int, str, dict]] = [(h["ts"], h[ID_KEY], h) for h in position.held]
        self._seen.update((rid, ts) for ts, rid, _ in self._held)
        #: payload -> the newest ts it carries (or its punctuation): offered whole, every record with an id
        self._payloads: dict[bytes, int] = {}
        #: payloads the frontier passed, oldest first, within ``covered_bytes``
        self._covered: OrderedDict[bytes, None] = OrderedDict()
        self._covered_bytes, self._covered_budget = 0, covered_bytes
        self.copies = self.late = self.unidentified = self.copy_payloads = 0
        self.closed = False

    @property
    def remembered(self) -> int:
        """Ids kept above the frontier (the memory bound)."""
        return len(self._seen)

    def position(self) -> Position:
        """The position after the records handed out so far."""
        if self._held:
            held = {rid for _, rid, _ in self._held}
            return Position(self.frontier, frozenset(self._seen.keys() - held), tuple(h[2] for h in self._held))
        return Position(self.frontier, frozenset(self._seen))

    def offer_payload(self, payload: bytes, decode: Callable[[bytes], Any]) -> list[dict]:
        """One payload as published (bytes), decoded with ``decode`` only if needed: a payload
        byte-identical to one offered before carries the same records, ids and punctuation, so it
        hands out nothing — it is dropped whole (a sink replica's copy of another's delivery).
        ``decode`` may raise ``ValueError`` (a bad payload: nothing is remembered)."""
        if payload in self._payloads or payload in self._covered:
            self.copy_payloads += 1
            return []
        items = decode(payload)
        if not isinstance(items, list):
            items = [items]
        unidentified = self.unidentified
        out = self.offer(items, newest := [])
        if self.unidentified == unidentified and newest:   # records without ids may repeat: never skipped
            if newest[0] <= (self.frontier if self.frontier is not None else _NO_FRONTIER):
                self._cover(payload)
            else:
                self._payloads[payload] = newest[0]
        return out

    def offer(self, items: list, newest: list | None = None) -> list[dict]:
        """One payload (records ``{"ts", fields…, "@id"}`` and punctuations ``{"punctuation": p}``):
        the records to hand out now, in order.  Items that are neither are ignored.  ``newest``, if
        given, receives the largest ts or punctuation of the payload."""
        out: list[dict] = []
        seen = self._seen
        floor = self.frontier if self.frontier is not None else _NO_FRONTIER
        top = _NO_FRONTIER
        timestamp_order = self.order is Order.TIMESTAMP
        for item in items:
            try:                             # the common case: a record with its id
                ts, rid = item["ts"], item[ID_KEY]
                if type(ts) is not int or type(rid) is not str:
                    raise TypeError
            except (KeyError, TypeError, IndexError):
                p = self._other(item, out)
                if p is not None:
                    top = max(top, p)
                    if p > floor:
                        floor = self.frontier = p
                        self._advance(p, out)
                        seen = self._seen
                continue
            if ts > top:
                top = ts
            if ts <= floor:
                self.late += 1
            elif rid in seen:
                self.copies += 1
            else:
                seen[rid] = ts
                if timestamp_order:
                    self._held.append((ts, rid, item))
                else:
                    out.append(item)
        if newest is not None and top != _NO_FRONTIER:
            newest.append(top)
        return out

    def _other(self, item, out: list[dict]) -> int | None:
        """An item that is not a record with an id: a record without one (passed, counted), a
        punctuation (returned), or something else (ignored)."""
        if not isinstance(item, dict):
            return None
        ts = item.get("ts")
        if isinstance(ts, int) and not isinstance(ts, bool):
            self.unidentified += 1
            out.append(item)
            return None
        p = item.get("punctuation")
        return p if isinstance(p, int) and not isinstance(p, bool) else None

    def _advance(self, p: int, out: list[dict]) -> None:
        """Line 11: forget the ids at or below ``p``; release the held records up to it."""
        self._seen = {rid: ts for rid, ts in self._seen.items() if ts > p}
        if self._payloads:
            passed = [payload for payload, newest in self._payloads.items() if newest <= p]
            for payload in passed:
                del self._payloads[payload]
                self._cover(payload)
        if self._held:
            ready = [h for h in self._held if h[0] <= p]
            if ready:
                self._held = [h for h in self._held if h[0] > p]
                ready.sort(key=lambda h: (h[0], h[1]))
                out.extend(h[2] for h in ready)

    def _cover(self, payload: bytes) -> None:
        """Keep a payload the frontier passed, within the budget (oldest forgotten first)."""
        covered = self._covered
        covered[payload] = None
        self._covered_bytes += len(payload)
        while self._covered_bytes > self._covered_budget and covered:
            self._covered_bytes -= len(covered.popitem(last=False)[0])
