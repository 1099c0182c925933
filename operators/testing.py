"""Tools for testing operators, including users' own (DESIGN.md §5: "the library checks replica
consistency of any operator with a property test").

:func:`disorder` turns an ordered input into one of the arrival orders a replica may see
(records shuffled, each punctuation still after every record it covers); :func:`run_operator`
drives an operator through such an arrival sequence; :func:`check_replica_consistency` runs an
operator on many arrival orders and reports any two that emit different output multisets.

Seals per key (:mod:`operators.key_seals`): for an operator that acts on them (a user operator
declaring ``key_seals = "close"``), ``check_replica_consistency(..., key_seals={"server": 1})``
also sends, at random points of each disordered trial, the highest seal of every key its records
allow (:func:`add_seals`) and compares with the first trial, which has none: closing a key at its
seal must give what the whole-stream punctuation gives.

Randomness comes from a ``random.Random`` the caller passes in, so this module stays pure.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from replicast.operators.base import NO_PUNCTUATION, Operator
from replicast.operators.record import CLOSED, Punctuation, Record


@dataclass(frozen=True)
class Seal:
    """A seal per key in an arrival sequence: no more records of ``key`` with ``ts ≤ p`` on this port."""

    key: tuple
    p: int


Item = Record | Punctuation | Seal


def punctuate(records: Sequence[Record], every_us: int) -> list[Item]:
    """The ordered stream ``records`` with a punctuation before each ``every_us`` boundary and at the end."""
    items: list[Item] = []
    last = None
    for record in sorted(records, key=lambda r: r[0]):
        boundary = (record[0] // every_us) * every_us - 1
        if last is None or boundary > last:
            items.append(Punctuation(boundary))
            last = boundary
        items.append(record)
    items.append(Punctuation(CLOSED))
    return items


def disorder(items: Sequence[Item], rng: Any) -> list[Item]:
    """A random arrival order of ``items`` that keeps every punctuation's promise (§IV-A).

    Records are shuffled freely; each punctuation ``p`` is placed right after the last record with
    ``ts ≤ p`` (or where it was, if later), so records after it all have ``ts > p``.
    """
    records = [item for item in items if type(item) is not Punctuation]
    punctuations = sorted(item.ts for item in items if type(item) is Punctuation)
    rng.shuffle(records)
    # For each punctuation, the position just after the last shuffled record with ts <= p: sort the
    # records' (ts, position) once and keep a running maximum of positions (O(n log n)).
    by_ts = sorted((record[0], position) for position, record in enumerate(records))
    keys = [ts for ts, _ in by_ts]
    running, last = [], -1
    for _, position in by_ts:
        last = max(last, position)
        running.append(last)
    out: list[Item] = []
    emitted = 0
    for p in punctuations:
        covered = bisect_right(keys, p)
        end = running[covered - 1] + 1 if covered else 0
        if end > emitted:
            out.extend(records[emitted:end])
            emitted = end
        out.append(Punctuation(p))
    out.extend(records[emitted:])
    return out


def interleave(per_port: Sequence[Sequence[Item]], rng: Any) -> list[tuple[int, Item]]:
    """Merge per-port arrival sequences into one ``(port, item)`` sequence, keeping each port's order."""
    cursors = [0] * len(per_port)
    merged = []
    while True:
        open_ports = [p for p, seq in enumerate(per_port) if cursors[p] < len(seq)]
        if not open_ports:
            return merged
        port = rng.choice(open_ports)
        merged.append((port, per_port[port][cursors[port]]))
        cursors[port] += 1


def add_seals(items: Sequence[Item], positions: Sequence[int], rng: Any, rate: float = 0.3) -> list[Item]:
    """``items`` (one port's arrival order) with, after a random third of its records, a seal of
    every key seen so far, as high as that key's later records allow (just below the next one; the
    largest ts of the port if none): the seals a sealing source would send (Blazes §V-B1)."""
    records = [item for item in items if type(item) not in (Punctuation, Seal)]
    last = max((r[0] for r in records), default=0)
    following: list[dict[tuple, int]] = []         # per item: key -> smallest ts of its later records
    later: dict[tuple, int] = {}
    for item in reversed(items):
        following.append(dict(later))
        if type(item) not in (Punctuation, Seal):
            key = tuple(item[i] for i in positions)
            later[key] = min(later.get(key, item[0]), item[0])
    following.reverse()
    out: list[Item] = []
    seen: dict[tuple, int] = {}
    for item, after in zip(items, following):
        out.append(item)
        if type(item) in (Punctuation, Seal):
            continue
        seen.setdefault(tuple(item[i] for i in positions), NO_PUNCTUATION)
        if rng.random() < rate:
            for key in sorted(seen, key=repr):
                p = after[key] - 1 if key in after else last
                if p > seen[key]:
                    seen[key] = p
                    out.append(Seal(key, p))
    return out


def run_operator(operator: Operator, arrivals: Sequence[tuple[int, Item]]) -> list[Item]:
    """Feed ``arrivals`` to ``operator`` one at a time; returns everything it emitted, in order.
    A :class:`Seal` reaches ``on_key_seal`` as a replica hands it on: only if it raises its key on
    that port and is not below the operator's frontier (:class:`~operators.key_seals.SealTable`)."""
    out: list[Item] = []
    sealed: dict[tuple[int, tuple], int] = {}
    for port, item in arrivals:
        if type(item) is Seal:
            if item.p >= operator.frontier and item.p > sealed.get((port, item.key), item.p - 1):
                sealed[port, item.key] = item.p
                out.extend(operator.on_key_seal(port, item.key, item.p))
            continue
        if type(item) is Punctuation:
            records, forwarded = operator.on_punctuation(port, item.ts)
            out.extend(records)
            if forwarded is not None:
                out.append(Punctuation(forwarded))
        else:
            out.extend(operator.on_record(port, item))
    return out


def check_replica_consistency(factory: Callable[[], Operator], inputs: Sequence[Sequence[Record]], rng: Any, *,
                              trials: int = 20, punctuation_us: int = 1_000_000,
                              sorted_input: bool | None = None,
                              key_seals: Mapping[str, int] | None = None) -> list[str]:
    """Run a fresh operator from ``factory`` on ``trials`` arrival orders of ``inputs`` (one list per port).

    Returns a list of problems (empty if the operator was replica-consistent on every trial):
    outputs whose multisets differ, or punctuations forwarded before records they cover.
    Sorted input is fed where the planner would sort: pass ``sorted_input=query.order_sensitive(name)``
    (the coordination analysis's verdict, docs/explain.md); by default, where the operator declares
    ``order_sensitive``.  Each port is sorted on its own, as the planner's sorters do, so an
    order-sensitive operator with several inputs still sees them interleaved in any order.
    ``key_seals`` (sealed field → its position in every input record, ``ts`` being 0): every trial
    but the first also sends seals per key (:func:`add_seals`) to the operator's ``on_key_seal``.
    """
    ordered = [punctuate(records, punctuation_us) for records in inputs]
    names = tuple(sorted(key_seals or ()))
    positions = tuple(key_seals[n] for n in names)
    reference: Counter | None = None
    problems = []
    for trial in range(trials):
        operator = factory()
        sort = operator.order_sensitive if sorted_input is None else sorted_input
        per_port = ordered if (sort or trial == 0) else [disorder(s, rng) for s in ordered]
        if names and trial > 0:
            operator.key_seal_fields = names
            per_port = [add_seals(s, positions, rng) for s in per_port]
        output = run_operator(operator, interleave(per_port, rng))
        problems.extend(f"trial {trial}: {p}" for p in punctuation_violations(output))
        multiset = Counter(item for item in output if type(item) not in (Punctuation, Seal))
        if reference is None:
            reference = multiset
        elif multiset != reference:
            missing, extra = reference - multiset, multiset - reference
            problems.append(f"trial {trial}: output differs from trial 0: missing {list(missing)[:3]}, extra {list(extra)[:3]}")
    return problems


def punctuation_violations(output: Sequence[Item]) -> list[str]:
    """Records emitted after a punctuation that promised a later timestamp."""
    promised = None
    problems = []
    for item in output:
        if type(item) is Punctuation:
            promised = item.ts
        elif promised is not None and item[0] <= promised:
            problems.append(f"record {item!r} emitted after punctuation {promised}")
    return problems
