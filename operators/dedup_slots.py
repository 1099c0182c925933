"""Per-record counts, the general representation of a duplicate filter's ``count[t][i]``
(:mod:`operators.dedup`, §IV-B, Alg. 1 lines 2–6 and 11).

The hot path of every replica, so it avoids allocations and hashes each copy once: every remembered
record has a *slot*: ``slot_of`` maps the record to its slot number (one ``dict.setdefault`` per
copy, so one hash of the record) and ``masks[slot]`` holds ``count[t]``.  While every replica has
sent the record at most once, that is an ``int`` bitmask of the replicas that sent it, with
``max_count = 1`` implied.  Only when a replica sends an equal record a second time (two distinct
events with equal values) does the record get a list ``[max_count, count_0, …, count_{k-1}]`` in
``multiple``, its mask becoming ``MULTIPLE`` (all bits set) so that every later copy takes the slow
path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count

from replicast.operators.dedup_ranks import RANK_BUFFER, Ranks
from replicast.operators.record import Record

#: Mask of a record some replica sent more than once: every bit set, so the slow path handles it.
MULTIPLE = -1


class Slots:
    """``count[t][i]`` record by record, for the records above the port's punctuation."""

    __slots__ = ("slot_of", "masks", "stragglers", "multiple", "ranks")

    def __init__(self, ranks: Ranks):
        self.slot_of: dict[Record, int] = {}            # record -> slot, in insertion order
        self.masks: list[int] = []                      # slot -> mask of replicas (or MULTIPLE)
        # Records inserted behind a newer one: with them, the slots' timestamps ascend in insertion
        # order, so a punctuation forgets a prefix plus some of these (line 11).
        self.stragglers: list[Record] = []
        self.multiple: dict[Record, list[int]] = {}     # record -> [max_count, count_0, …]
        self.ranks = ranks

    @classmethod
    def from_entries(cls, ranks: Ranks, entries: Sequence[tuple[Record, int]],
                     multiple: dict[Record, list[int]]) -> Slots:
        """Slots holding ``(record, mask)`` entries (a snapshot's), in that order."""
        slots = cls(ranks)
        slots.slot_of = {record: s for s, (record, _) in enumerate(entries)}
        slots.stragglers = list(slots.slot_of)          # any order: all may be
        slots.masks = [mask for _, mask in entries]
        slots.multiple = multiple
        return slots

    def __len__(self) -> int:
        return len(self.slot_of)

    def entries(self) -> Iterable[tuple[Record, int]]:
        """Every remembered record with its mask, in slot order."""
        masks = self.masks
        return ((record, masks[s]) for record, s in self.slot_of.items())

    def add(self, records: Sequence[Record], mask: int) -> None:
        """Give ``records`` (new to the slots: a run's) per-record slots, each with ``mask``."""
        self.stragglers += records                      # rare: no need to tell which are in order
        self.slot_of.update(zip(records, count(len(self.masks))))
        self.masks.extend([mask] * len(records))

    def on_records(self, i: int, records: Sequence[Record], max_punctuation: int,
                   newest: int) -> tuple[list[Record], int, int]:
        """Algorithm 1 record by record for copies from replica ``i``: the records that pass, how
        many were at or below ``max_punctuation``, and the newest timestamp now remembered."""
        # Methods called on their objects, not bound to locals first: compiled natively
        # (replicast/native_build.py) these are C calls.
        out: list[Record] = []
        slots = self.slot_of
        masks = self.masks
        n = len(masks)
        bit = 1 << i
        below = 0
        unranked = self.ranks.unranked[i]               # masks after each later copy of occurrence 1
        for record in records:
            s = slots.setdefault(record, n)
            if s == n:                                  # not remembered: a new record
                # Alg. 1 line 2. Only needed here: a punctuation p removes every record with
                # ts <= p (line 11), so a record still remembered is above max_punctuation.
                ts = record[0]
                if ts <= max_punctuation:
                    del slots[record]
                    below += 1
                    continue
                if ts >= newest:
                    newest = ts
                else:
                    self.stragglers.append(record)
                masks.append(bit)                       # first copy of occurrence 1 (lines 3-6)
                n += 1
                out.append(record)
            else:
                seen = masks[s]
                if not seen & bit:                      # a later copy of occurrence 1
                    seen |= bit
                    masks[s] = seen
                    unranked.append(seen)
                elif self._count_copy(i, s, record):    # replica i repeats an equal record
                    out.append(record)
        if len(unranked) > RANK_BUFFER:
            self.ranks.count()
        return out, below, newest

    def _count_copy(self, i: int, s: int, record: Record) -> bool:
        """Alg. 1 lines 3-6 with full counts for the record in slot ``s``; returns whether the copy passes."""
        k = self.ranks.k
        entry = self.multiple.get(record)
        if entry is None:                               # switch to the list form
            mask = self.masks[s]
            entry = self.multiple[record] = [1] + [(mask >> j) & 1 for j in range(k)]
            self.masks[s] = MULTIPLE
        if len(entry) <= i + 1:                         # entry made before add_replica()
            entry.extend([0] * (i + 2 - len(entry)))
        copies = entry[i + 1] + 1                       # line 3
        entry[i + 1] = copies
        if copies > entry[0]:                           # lines 4-6
            entry[0] = copies
            return True
        rank = sum(1 for c in entry[1:] if c >= copies)
        self.ranks.counts[i][min(rank, k) - 1] += 1
        return False

    def forget(self, p: int, newest: int) -> None:
        """Line 11: forget every count at or below ``p`` (``newest``: the newest timestamp remembered)."""
        if self.multiple:
            self.multiple = {r: e for r, e in self.multiple.items() if r[0] > p}
        if newest <= p:                                 # every record at once
            self.slot_of, self.masks, self.stragglers = {}, [], []
            return
        slots = self.slot_of
        forgotten = []
        for record in slots:                            # the oldest first, up to the first newer than p
            if record[0] > p:
                break
            forgotten.append(record)
        for record in forgotten:
            del slots[record]
        if self.stragglers:
            kept = []
            for record in self.stragglers:
                if record[0] > p:
                    kept.append(record)
                else:
                    slots.pop(record, None)
            self.stragglers = kept
        if len(self.masks) > 2 * len(slots) + 64:       # renumber once most slots are dead
            masks = self.masks
            self.masks = [masks[s] for s in slots.values()]
            self.slot_of = dict(zip(slots, count()))

    def counts(self, i: int) -> dict[Record, int]:
        """``count[t][i]`` for every record with a copy from ``i``."""
        bit, masks, multiple = 1 << i, self.masks, self.multiple
        out: dict[Record, int] = {}
        for record, s in self.slot_of.items():
            mask = masks[s]
            if mask == MULTIPLE:
                entry = multiple[record]
                if len(entry) > i + 1 and entry[i + 1]:
                    out[record] = entry[i + 1]
            elif mask & bit:
                out[record] = 1
        return out

    def passed_counts(self) -> dict[Record, int]:
        """``max_count[t]`` for every remembered record some replica sent."""
        masks, multiple = self.masks, self.multiple
        return {record: multiple[record][0] if masks[s] == MULTIPLE else 1
                for record, s in self.slot_of.items() if masks[s]}

    def seed(self, j: int, counts: dict[Record, int], max_punctuation: int) -> None:
        """``count[t][j] = counts[t]`` for the records still remembered (see ``DuplicateFilter.seed``)."""
        slots, masks, multiple, k = self.slot_of, self.masks, self.multiple, self.ranks.k
        for record, n in counts.items():
            s = slots.get(record)
            if s is None or record[0] <= max_punctuation:
                continue                                # forgotten at a punctuation since (line 11)
            mask = masks[s]
            if n == 1 and mask != MULTIPLE:
                masks[s] = mask | (1 << j)
                continue
            entry = multiple.get(record)
            if entry is None:                           # every replica sent it at most once so far
                entry = multiple[record] = [1] + [(mask >> x) & 1 for x in range(k)]
                masks[s] = MULTIPLE
            if len(entry) <= j + 1:
                entry.extend([0] * (j + 2 - len(entry)))
            entry[j + 1] = n                            # ≤ max_count: copies the port already passed
