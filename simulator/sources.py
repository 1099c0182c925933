"""Simulated external sources: what publishes records to the entry points (the MQTT role).

A source belongs to one server and one stream.  It is source-stamped (DESIGN.md §6, §IV-A): it
puts ``ts = now`` on each record and punctuates in-band, so every entry replica gets the same
stream; in entry-stamped mode it sends bare values and the stamping entry replica stamps them.
Kinds:

* ``cpu`` — the server's CPU load every period: ``{server, load}`` (a seeded pseudo-random walk).
* ``ping`` — the RTT the server measures to the next server in turn, from the trace itself:
  ``{src, dst, rtt_ms}`` (nothing when the trace shows an outage).
* ``events`` — replays one stream of a JSON-lines events file (the ``replicast replay`` input) at
  its timestamps, punctuated as :func:`engine.replay.source_messages` does.

A source whose stream declares ``seal = [fields]`` (kinds ``cpu`` and ``ping``, source-stamped)
sends with each punctuation a seal per key value it has produced, at the same ``p``
(``{"punctuation": p, "key": {…}}``, operators/key_seals.py): the same cadence as its
punctuations, so a run with seals differs from one without only in what the consumers may close
per key.

Every record a source produces is also kept (``produced``) when asked, so a run can be compared
with the :func:`engine.replay.replay` reference of exactly the same input.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import msgpack

from replicast.engine.replay import source_messages
from replicast.operators.record import CLOSED, Record, make_record


@dataclass
class Source:
    """One source: ``stream`` published from ``server``; ``items()`` yields ``(when, records, punctuation)``."""

    stream: str
    server: str
    kind: str
    period_us: int = 10_000_000
    punctuation_us: int = 10_000_000
    stamped: bool = True                       # False: entry-stamped (no ts, no punctuations)
    records: list[Record] = field(default_factory=list)   # kind "events"
    peers: list[str] = field(default_factory=list)          # kind "ping": the servers it measures
    names: tuple[str, ...] = ()                             # kind "events": field names
    seed: int = 0
    seal: tuple[str, ...] = ()                              # the stream's declared seal key

    def rng(self) -> random.Random:
        return random.Random(zlib.crc32(f"{self.seed}/{self.stream}/{self.server}".encode()))


def messages(source: Source, start: int, end: int, trace_rtt, *, begin: int | None = None,
             close: bool = True) -> Iterator[tuple[int, list[dict]]]:
    """``(when, items)`` payloads of ``source`` in ``[start, end)``, then a CLOSED punctuation.

    Items are what an entry point accepts (:mod:`engine.entry`): record dicts (with ``ts`` when
    source-stamped) and ``{"punctuation": p}``.  ``trace_rtt(a, b, t)`` is the RTT (ms) a ``ping``
    source reports, or None during an outage.  A time segment (:mod:`simulator.segments`) asks
    for the payloads from ``begin`` on, generated from ``start`` as always (the same records, the
    same punctuations, the same random walk), and without the CLOSED punctuation unless it ends
    the run (``close``).
    """
    begin = start if begin is None else begin
    if source.kind == "events":
        names = source.names
        for when, records, punctuation in source_messages(source.records, source.punctuation_us):
            if when >= end:
                break
            if punctuation == CLOSED or when < begin:
                continue
            if not source.stamped:                 # entry-stamped: bare values, the entry point stamps them
                if records:
                    yield when, [dict(zip(names, r[1:])) for r in records]
                continue
            items: list[dict] = [{"ts": r[0], **dict(zip(names, r[1:]))} for r in records]
            if punctuation is not None:
                items.append({"punctuation": punctuation})
            yield when, items
        if close and source.stamped:
            yield max(begin, min(end, source.records[-1][0] + 1 if source.records else start)), [{"punctuation": CLOSED}]
        return
    rng = source.rng()
    phase = rng.randrange(source.period_us)    # sources are not synchronised
    load, turn, last_window = rng.random(), 0, None
    keys: set[tuple] = set()                   # the seal key values it has produced
    when = start + phase
    while when < end:
        if source.kind == "cpu":
            load = min(1.0, max(0.0, load + rng.uniform(-0.1, 0.1)))
            items = [{"server": source.server, "load": round(load, 3)}] if when >= begin else []
        else:
            peer = source.peers[turn % len(source.peers)]
            turn += 1
            rtt = trace_rtt(source.server, peer, when) if when >= begin else None
            items = [] if rtt is None else [{"src": source.server, "dst": peer, "rtt_ms": round(rtt, 3)}]
        if source.stamped:
            items = [{"ts": when, **item} for item in items]
            for item in items if source.seal else ():
                keys.add(tuple(item[f] for f in source.seal))
            window = when // source.punctuation_us
            if window != last_window:          # §IV-A: every later record of this source has ts > when
                items.append({"punctuation": when})
                items += [{"punctuation": when, "key": dict(zip(source.seal, key))} for key in sorted(keys)]
                last_window = window
        if when >= begin:
            yield when, items
        when += source.period_us
    if source.stamped and close:
        yield end, [{"punctuation": CLOSED}]


def payload(items: list[dict]) -> bytes:
    return msgpack.packb(items)


def reference_records(schema, items: list[dict], when: int, where: str) -> list[Record]:
    """The records an entry point makes of ``items`` (for the reference input)."""
    return [make_record(schema, item["ts"] if "ts" in item else when,
                        {k: v for k, v in item.items() if k != "ts"}, where)
            for item in items if "punctuation" not in item]
