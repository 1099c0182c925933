"""Which records a trace query samples, and finding them in a batch (engine/core/tracepoints.py
rule 1; docs/tracing.md).  Pure functions of timestamps: no clock, no I/O.

A record is sampled at ``Sample 1/N`` when a hash of its time slot (``ts >> SLOT_SHIFT``: 256 µs)
is 0 modulo N — every replica samples the same records.  The hash is a multiplication, so the next
(and the previous) sampled slot from any slot is computed in O(log N) steps instead of scanned:
a batch, or a stretch of time, is tested for a sampled slot without hashing its slots.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress, repeat
from operator import itemgetter, rshift

#: Records are sampled by time slot of 2**SLOT_SHIFT µs (256 µs): every record of a sampled slot
#: (rule 1), so a batch is sampled by its slots, not record by record.
SLOT_SHIFT = 8
#: The slot hash's multiplier (Knuth's multiplicative hashing constant, a prime).
MIX = 0x9E3779B1
#: Past any slot: what :func:`next_sampled` answers where no slot is ever sampled (and, negated,
#: :func:`previous_sampled`).
NEVER = 1 << 80
_ts = itemgetter(0)


def sampled(ts: int, n: int) -> bool:
    """Whether the record with timestamp ``ts`` is sampled at ``Sample 1/n``."""
    return n == 1 or (((ts >> SLOT_SHIFT) * MIX) >> 16) % n == 0


def least(a: int, m: int, low: int, high: int) -> int | None:
    """The least ``x >= 0`` with ``low <= a * x mod m <= high`` (``0 <= low <= high < m``), or
    None if there is none: Euclid's steps on ``(m, a)``, so O(log m) whatever the answer.

    With no multiple of ``a`` in ``low … high``, ``a * x - m * y`` lands there for the least ``y``
    whose ``m * y mod a`` is in ``-high mod a … -low mod a``: the same problem on ``(a, m mod a)``.
    (A loop down the steps and back up, not a recursion: it runs once in hundreds of batches, from
    cold caches, where each Python call costs microseconds.)"""
    steps = []                                         # (a, m, low) of each step down
    while low:
        a %= m
        if a == 0:
            return None
        x = -(-low // a)
        if a * x <= high:
            break
        steps.append((a, m, low))
        a, m, low, high = m % a, a, -high % a, -low % a
    else:
        x = 0
    for a, m, low in reversed(steps):                  # back up: y of the step below gives x
        x = -(-(low + m * x) // a)
    return x


def next_sampled(slot: int, n: int) -> int:
    """The first slot ``>= slot`` sampled at 1/``n`` (rule 1): computed, not scanned.  Slot ``s``
    is sampled when ``((s * MIX) >> 16) % n == 0``, that is when ``s * MIX mod (n << 16)``
    is below ``1 << 16``: the least ``x`` with ``(slot + x) * MIX`` there (:func:`least`)."""
    m = n << 16
    b = slot * MIX % m
    if b < 1 << 16:
        return slot
    x = least(MIX % m, m, m - b, m - b + 0xFFFF)
    return NEVER if x is None else slot + x


def previous_sampled(slot: int, n: int) -> int:
    """The last slot ``<= slot`` sampled at 1/``n``: :func:`next_sampled` going back."""
    m = n << 16
    b = slot * MIX % m
    if b < 1 << 16:
        return slot
    x = least(-MIX % m, m, m - b, m - b + 0xFFFF)
    return -NEVER if x is None else slot - x


def in_slots(records, slots, ordered: list[int] | None = None) -> "Chosen":
    """The records whose time slot is in ``slots``, in order.  With ``ordered`` (the batch's
    timestamps sorted) each slot's records are found by bisection: if the records at the
    positions ``a … b - 1`` the slot has in ``ordered`` have the timestamps ``ordered`` has
    there, they are all of its records, in place, in time order — only they are read.  Else one
    pass in C over the timestamps."""
    stamps = getattr(records, "stamps", None)
    if ordered is not None:
        chosen: Chosen | None = Chosen()
        taken: list[int] = []
        for slot in sorted(slots):
            a, b = bisect_left(ordered, slot << SLOT_SHIFT), bisect_left(ordered, (slot + 1) << SLOT_SHIFT)
            if a == b:
                continue
            part = records[a:b]
            inside = stamps[a:b] if stamps is not None else list(map(_ts, part))
            if inside != ordered[a:b]:                 # (the same int objects: compared by identity)
                chosen = None                          # not in time order: read them all
                break
            chosen += part
            taken += inside
        if chosen is not None:
            chosen.stamps = taken
            chosen.ordered = True
            return chosen
    stamps = map(_ts, records) if stamps is None else stamps
    if len(slots) == 1:
        slot = min(slots)
        inside = range(slot << SLOT_SHIFT, (slot + 1) << SLOT_SHIFT).__contains__
        return Chosen(compress(records, map(inside, stamps)))
    return Chosen(compress(records, map(set(slots).__contains__, map(rshift, stamps, repeat(SLOT_SHIFT)))))


class Chosen(list):
    """A batch's sampled records, with their timestamps where choosing them read those, and
    (kept for the copies of a keyed batch) their hashes and whether those are distinct (rule 2)."""

    __slots__ = ("stamps", "ordered", "hashes", "distinct")
