"""The duplicate filter: merges k stream replicas of one input into a duplicate-free stream (§IV-B).

Algorithm 1, with the paper's line numbers:

* a record ``t`` from stream replica ``i`` with ``t.ts ≤ max_punctuation`` is a duplicate (line 2):
  some replica already promised it had sent every record up to that punctuation;
* otherwise ``count[t][i] += 1`` (line 3) and ``t`` passes iff ``count[t][i] > max_count[t]``
  (lines 4–6) — it is the first copy of this occurrence of ``t`` to arrive;
* a punctuation ``p > max_punctuation`` is forwarded (lines 8–9) and all counts of records with
  ``ts ≤ p`` are dropped (line 11), so memory is bounded by what arrives in one punctuation interval.

Theorem 1: if the replicas carry the same multiset, the output carries it too — each record passes
exactly its multiplicity — whatever the interleaving, without ever blocking.

Representation (the hot path of every replica, so it avoids allocations and hashes each copy once):
every remembered record has a *slot*: ``_slots`` maps the record to its slot number (one
``dict.setdefault`` per copy, so one hash of the record) and ``_masks[slot]`` holds ``count[t]``.
While every replica has sent the record at most once, that is an ``int`` bitmask of the replicas
that sent it, with ``max_count = 1`` implied.  Only when a replica sends an equal record a second
time (two distinct events with equal values) does the record get a list
``[max_count, count_0, …, count_{k-1}]`` in a side table, its mask becoming ``-1`` (all bits set)
so that every later copy takes the slow path.

Identical batches (*runs*).  Replicas of a deterministic operator that see the same input batches
emit the same output batches, so the k copies of a batch often arrive as byte-identical frames.  A
caller that has an identity for a batch's content (the engine passes the frame's record bytes)
gives it as ``key``.  When the first copy of a keyed batch has distinct timestamps that are all
newer than anything remembered, none of its records can equal a remembered record or each other,
so every one of them is new: the batch passes whole and is remembered as one *run* — the records
with one shared mask — without hashing any record.  A later copy with the same key is Algorithm 1
for all its records at once (one mask update; its frame need not even be decoded, see
:meth:`knows`).  Anything a run cannot answer alone — a batch without key whose timestamps reach
into a run, or a replica repeating a run — first turns the runs concerned into per-record slots,
then takes the per-record path, so the result is always exactly the per-record algorithm's.  When a
punctuation covers a run, its key is kept (the newest runs' keys, up to ``COVERED_RECORDS``
records' worth), so the copies lagging replicas send later are dropped as below the punctuation
(line 2) without being read; otherwise memory stays bounded by one punctuation interval.

Stream replicas that start mid-stream (a restarted or rejoined upstream, a revived stream replica,
a gap after the sender's log was trimmed) carry every record above some *base* frontier but not
everything below it.  Their punctuations only promise that much, so a punctuation from such a
replica counts (line 8) only once this port's ``max_punctuation`` has reached its base; until then
it is held, and applied as soon as another replica's punctuation gets the port there.  A replica
rebuilding without a live peer *adopts* a frontier instead (:meth:`DuplicateFilter.adopt`): it
declares the input below it lost, and its operator emits only what it can prove complete above it
(``docs/lifecycle.md``).

With a single stream replica (k = 1) Algorithm 1 passes every record above the punctuation — each
copy is a new occurrence — so the filter only checks timestamps, in C, and keeps the records passed
since the last punctuation in a list; :meth:`DuplicateFilter.add_replica` rebuilds exact counts
from that list, so a replica connected later (revival, §V-C) is filtered correctly.

§V-B utility weights: each arriving copy gives its stream replica the weight ``1/rank``, where
rank 1 is the first copy of that occurrence to arrive, 2 the second, …  They are kept as integer
counts per rank (``rank_counts[i][rank-1]``), so the hot path does no float arithmetic; a later
copy's rank is the popcount of its record's mask, and those masks are only collected per replica
on the hot path and counted (in C) when the counts are read or the collection grows large.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import count
from operator import itemgetter
from typing import Any

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.record import Record, sorted_stamps


_ts = itemgetter(0)
_POPCOUNT = bytes(i.bit_count() for i in range(256))
#: Smallest batch remembered as a run: below it, per-record entries cost less than a run's bookkeeping.
MIN_RUN = 16
#: Records of covered runs whose keys are kept for lagging replicas (bounds that memory).
COVERED_RECORDS = 1 << 16
#: Masks collected per replica before their ranks are counted (bounds that memory).
_RANK_BUFFER = 1 << 16

#: Base of a stream replica whose base is its first punctuation (see ``add_replica``).
_FIRST = None

#: Mask of a record some replica sent more than once: every bit set, so the slow path handles it.
_MULTIPLE = -1


@dataclass(slots=True)
class _Run:
    """A keyed batch remembered whole: distinct records with timestamps ``oldest … newest``, all
    sent by the replicas in ``mask`` (each once); ``below`` more of the batch's records were at or
    below a punctuation and are forgotten (line 11)."""

    key: Hashable
    records: Sequence[Record]
    oldest: int
    newest: int
    mask: int
    below: int = 0


class DuplicateFilter:
    """Algorithm 1 for one input port fed by ``k`` stream replicas numbered ``0 … k-1``.

    ``k`` may start at 0 and grow with :meth:`add_replica` as stream replicas connect; a filter
    with one stream replica (created with ``k = 1``, or grown from 0 to 1 with nothing remembered)
    takes the single-replica fast path until a second replica is added.
    """

    def __init__(self, k: int, *, min_run: int = MIN_RUN):
        self.k = k
        self.min_run = min_run
        self.max_punctuation = NO_PUNCTUATION
        self._slots: dict[Record, int] = {}           # record -> slot, in insertion order
        # Slotted records inserted behind a newer one: with them, the slots' timestamps ascend in
        # insertion order, so a punctuation forgets a prefix plus some of these (line 11).
        self._stragglers: list[Record] = []
        self._masks: list[int] = []                    # slot -> mask of replicas (or _MULTIPLE)
        self._multiple: dict[Record, list[int]] = {}   # record -> [max_count, count_0, …]
        # key -> run, in timestamp order (disjoint); ordered so the oldest is found in O(1) after
        # front deletions (a plain dict's iteration scans the deleted slots)
        self._runs: OrderedDict[Hashable, _Run] = OrderedDict()
        self._covered: OrderedDict[Hashable, int] = OrderedDict()   # key -> size, recently covered runs
        self._covered_records = 0
        self._newest = NO_PUNCTUATION           # largest ts remembered, in slots or runs
        self._recent: list[Record] | None = [] if k == 1 else None   # single-replica mode
        # single-replica mode: (key, newest ts, size) of the keyed batches passed whole since the last
        # punctuation, so their keys become known (``_covered``) once a punctuation covers them
        self._single_keys: list[tuple[Hashable, int, int]] = []
        self._rank_counts = [[0] * k for _ in range(k)]
        self._unranked: list[list[int]] = [[] for _ in range(k)]   # masks of later copies, per replica
        self._bases: dict[int, int] = {}        # replica -> base frontier not yet reached by the port
        self._held: dict[int, int] = {}         # replica -> largest punctuation held until its base is reached
        self.passed = 0
        self.duplicates = 0
        self.below_punctuation = 0
        #: (records, oldest ts, newest ts, their timestamps sorted or None) of the last batch whose
        #: span this filter knew (it sorted the timestamps, or the batch copies a whole run), for the
        #: trace sampler to reuse (engine/core/tracepoints.py rule 1): one sort per batch, not two.
        self.span: tuple[Sequence[Record], int, int, list[int] | None] | None = None

    def add_replica(self, base: int | None = NO_PUNCTUATION) -> int:
        """Accept one more stream replica (a revived or newly connected upstream, a new incarnation of
        one); returns its index.  It carries every record above ``base`` (see the module docstring);
        ``base`` None: above its own first punctuation (all that can be said of a new incarnation
        that claims to be whole from the start but cannot know what was lost before it)."""
        if self._recent is not None:            # leave single-replica mode with exact counts
            self._recent, recent = None, self._recent
            self._single_keys = []
            self.on_batch(0, recent)
            self.passed -= len(recent)
            self._rank_counts[0][0] -= len(recent)
        self._count_ranks()
        self.k += 1
        for counts in self._rank_counts:
            counts.append(0)
        self._rank_counts.append([0] * self.k)
        self._unranked.append([])
        if self.k == 1 and not self._slots and not self._runs and not self._multiple:
            self._recent = []                   # the first replica of a fresh filter: single-replica mode
        self.rebase(self.k - 1, base)
        return self.k - 1

    def rebase(self, i: int, base: int | None) -> None:
        """Replica ``i`` lost items (a gap) and from now on carries every record above ``base``
        (None: above its first punctuation from now on)."""
        self._held.pop(i, None)
        if base is None:
            self._bases[i] = _FIRST
        elif base > self.max_punctuation:
            self._bases[i] = base
        else:
            self._bases.pop(i, None)


    def adopt(self, frontier: int) -> None:
        """Rebuilding without a live peer: take ``frontier`` as this port's ``max_punctuation`` —
        the input at or below it is lost, and the caller emits only what is complete above it."""
        if frontier > self.max_punctuation:
            self._advance(frontier)
            if self._held:
                self._release_held()

    def base(self, i: int) -> int | None:
        """Replica ``i``'s base while the port has not reached it (None: its first punctuation, not yet seen)."""
        return self._bases.get(i)

    def waiting(self, i: int) -> bool:
        """Whether replica ``i``'s punctuations are held until the port reaches its base."""
        return i in self._bases

    @property
    def rank_counts(self) -> list[list[int]]:
        """``rank_counts[i][r - 1]``: how many copies from replica ``i`` arrived with rank ``r``."""
        self._count_ranks()
        return self._rank_counts

    def knows(self, key: Hashable) -> bool:
        """Whether a copy of the batch with this key can be taken without its records."""
        return key in self._runs or key in self._covered

    # -- records --------------------------------------------------------------------------------
    def on_batch(self, i: int, records: Sequence[Record], key: Hashable | None = None) -> list[Record]:
        """Records from stream replica ``i``; returns those that pass, in arrival order.

        ``key``, if given, identifies the batch's content: equal keys must mean equal record sequences
        (the engine uses the frame's record bytes).  A batch whose key :meth:`knows` is not read.
        """
        recent = self._recent
        if recent is not None:                          # k = 1: every record is a new occurrence
            return self._single(i, records, recent, key)
        if key is not None:
            run = self._runs.get(key)
            if run is not None:
                if not run.below:                       # its records' span, unread (for the tracer)
                    self.span = (records, run.oldest, run.newest, None)
                self.below_punctuation += run.below     # Alg. 1 line 2 for the forgotten part
                if not run.mask & (1 << i):             # later copies of occurrence 1, all at once
                    run.mask |= 1 << i
                    n = len(run.records)
                    self._rank_counts[i][run.mask.bit_count() - 1] += n
                    self.duplicates += n
                    return []
                self._to_slots([run])                   # replica i repeats the batch: per record
                records = run.records
            elif key in self._covered:                  # Alg. 1 line 2 for the whole batch
                self.below_punctuation += self._covered[key]
                return []
        if not records:
            return []
        if not self._runs and (key is None or len(records) < self.min_run):
            return self._per_record(i, records)
        stamps = sorted_stamps(records)                 # oldest, newest (linear on sorted input)
        self.span = (records, stamps[0], stamps[-1], stamps)
        if stamps[-1] <= self.max_punctuation:          # Alg. 1 line 2 for the whole batch
            self.below_punctuation += len(records)
            return []
        if key is not None and len(records) >= self.min_run and stamps[0] > self._newest \
                and stamps[0] > self.max_punctuation and len(set(stamps)) == len(stamps):
            # Distinct timestamps, all newer than anything remembered: every record is new.
            self._runs[key] = _Run(key, records, stamps[0], stamps[-1], 1 << i)
            self._newest = stamps[-1]
            n = len(records)
            self.passed += n
            self._rank_counts[i][0] += n
            return records if type(records) is list else list(records)
        if self._runs and stamps[-1] >= next(iter(self._runs.values())).oldest:
            self._to_slots(self._overlapping(stamps[0], stamps[-1]))
        return self._per_record(i, records)

    def _per_record(self, i: int, records: Sequence[Record]) -> list[Record]:
        """Algorithm 1 record by record over the slots."""
        max_punctuation = self.max_punctuation
        out: list[Record] = []
        append = out.append
        slots = self._slots
        slot_of = slots.setdefault
        masks = self._masks
        new_slot = masks.append
        n = len(masks)
        bit = 1 << i
        below = 0
        newest = self._newest
        unranked = self._unranked[i]                    # masks after each later copy of occurrence 1
        seen_by = unranked.append
        straggle = self._stragglers.append
        for record in records:
            s = slot_of(record, n)
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
                    straggle(record)
                new_slot(bit)                           # first copy of occurrence 1 (lines 3-6)
                n += 1
                append(record)
            else:
                seen = masks[s]
                if not seen & bit:                      # a later copy of occurrence 1
                    seen |= bit
                    masks[s] = seen
                    seen_by(seen)
                elif self._count_copy(i, s, record):    # replica i repeats an equal record
                    append(record)
        self._newest = newest
        if len(unranked) > _RANK_BUFFER:
            self._count_ranks()
        self.passed += len(out)
        self.below_punctuation += below
        self.duplicates += len(records) - len(out) - below
        self._rank_counts[i][0] += len(out)
        return out

    def _overlapping(self, oldest: int, newest: int) -> list[_Run]:
        """The runs holding timestamps in ``oldest … newest`` (runs are disjoint and in ts order)."""
        runs = list(self._runs.values())
        first = bisect_left([r.newest for r in runs], oldest)
        last = bisect_right([r.oldest for r in runs], newest)
        return runs[first:last]

    def _to_slots(self, runs: list[_Run]) -> None:
        """Give the records of ``runs`` per-record slots (their records are new to the slots); the
        caller has counted each run's ``below`` part."""
        slots, masks = self._slots, self._masks
        for run in runs:
            del self._runs[run.key]
            self._stragglers += run.records             # rare: no need to tell which are in order
            slots.update(zip(run.records, count(len(masks))))
            masks.extend([run.mask] * len(run.records))

    def _single(self, i: int, records: Sequence[Record], recent: list[Record], key: Hashable | None) -> list[Record]:
        """Single-replica mode: line 2 only (a copy can never repeat an earlier one), in C.  A keyed
        batch passed whole has its key remembered until a punctuation covers it, then kept in
        ``_covered`` like a covered run's: copies from a replica added later are known."""
        if key is not None and key in self._covered:    # Alg. 1 line 2 for the whole batch, unread
            self.below_punctuation += self._covered[key]
            return []
        if not records:
            return []
        max_punctuation = self.max_punctuation
        stamps = sorted_stamps(records)                 # oldest and newest at once: linear on sorted input
        self.span = (records, stamps[0], stamps[-1], stamps)
        if stamps[0] > max_punctuation:
            passed = records if type(records) is list else list(records)
            if key is not None and len(records) >= self.min_run:
                self._single_keys.append((key, stamps[-1], len(records)))
        else:
            passed = [r for r in records if r[0] > max_punctuation]
            self.below_punctuation += len(records) - len(passed)
        if passed:
            recent += passed
            if stamps[-1] > self._newest:
                self._newest = stamps[-1]
            self.passed += len(passed)
            self._rank_counts[i][0] += len(passed)
        return passed

    def _count_ranks(self) -> None:
        """§V-B: a copy whose arrival made the mask ``m`` has rank ``popcount(m)``."""
        for ranks, masks in zip(self._rank_counts, self._unranked):
            if not masks:
                continue
            if self.k <= 8:                             # masks fit in bytes: count ranks in C
                by_rank = bytes(masks).translate(_POPCOUNT)
                for rank in range(2, self.k + 1):
                    ranks[rank - 1] += by_rank.count(rank)
            else:
                for mask, n in Counter(masks).items():
                    ranks[mask.bit_count() - 1] += n
            masks.clear()

    def _count_copy(self, i: int, s: int, record: Record) -> bool:
        """Alg. 1 lines 3-6 with full counts for the record in slot ``s``; returns whether the copy passes."""
        entry = self._multiple.get(record)
        if entry is None:                               # switch to the list form
            mask = self._masks[s]
            entry = self._multiple[record] = [1] + [(mask >> j) & 1 for j in range(self.k)]
            self._masks[s] = _MULTIPLE
        if len(entry) <= i + 1:                         # entry made before add_replica()
            entry.extend([0] * (i + 2 - len(entry)))
        count = entry[i + 1] + 1                        # line 3
        entry[i + 1] = count
        if count > entry[0]:                            # lines 4-6
            entry[0] = count
            return True
        rank = sum(1 for c in entry[1:] if c >= count)
        self._rank_counts[i][min(rank, self.k) - 1] += 1
        return False

    def on_record(self, i: int, record: Record) -> bool:
        return bool(self.on_batch(i, [record]))

    # -- punctuations ---------------------------------------------------------------------------
    def on_punctuation(self, i: int, p: int) -> int | None:
        """Punctuation ``p`` from replica ``i``; returns the punctuation to forward, if any (lines 7-11)."""
        if self._bases and i in self._bases:
            if self._bases[i] is _FIRST:                # its first punctuation is its base
                self._bases[i] = p
            if self.max_punctuation < self._bases[i]:   # it does not promise what lies below its base
                if p > self._held.get(i, NO_PUNCTUATION):
                    self._held[i] = p
                return None
            del self._bases[i]
        if p <= self.max_punctuation:
            return None
        self._advance(p)
        if self._held:
            self._release_held()
        return self.max_punctuation

    def _release_held(self) -> None:
        """Punctuations held from replicas whose base the port has now reached count at last."""
        while True:
            ready = [i for i in self._held if self._bases[i] is not _FIRST and self._bases[i] <= self.max_punctuation]
            if not ready:
                return
            p = max(self._held.pop(i) for i in ready)
            for i in ready:
                del self._bases[i]
            if p <= self.max_punctuation:
                return
            self._advance(p)

    def _advance(self, p: int) -> None:
        """Lines 9 and 11: ``max_punctuation ← p`` and forget every count at or below it."""
        self.max_punctuation = p
        if self._bases:
            for i in [i for i, base in self._bases.items() if base is not _FIRST and base <= p and i not in self._held]:
                del self._bases[i]
        if self._recent is not None:                    # single-replica mode
            self._recent = [] if self._newest <= p else [r for r in self._recent if r[0] > p]
            if self._single_keys:
                covered = [(key, n) for key, newest, n in self._single_keys if newest <= p]
                self._single_keys = [entry for entry in self._single_keys if entry[1] > p]
                self._cover(covered)
            return
        if self._multiple:
            self._multiple = {r: e for r, e in self._multiple.items() if r[0] > p}
        if self._runs:
            self._forget_runs(p)
        if self._newest <= p:                           # line 11, for every record at once
            self._slots, self._masks, self._stragglers = {}, [], []
            return
        slots = self._slots
        forgotten = []
        for record in slots:                            # the oldest first, up to the first newer than p
            if record[0] > p:
                break
            forgotten.append(record)
        for record in forgotten:
            del slots[record]
        if self._stragglers:
            kept = []
            for record in self._stragglers:
                if record[0] > p:
                    kept.append(record)
                else:
                    slots.pop(record, None)
            self._stragglers = kept
        if len(self._masks) > 2 * len(slots) + 64:      # renumber once most slots are dead
            masks = self._masks
            self._masks = [masks[s] for s in slots.values()]
            self._slots = dict(zip(slots, count()))

    def _forget_runs(self, p: int) -> None:
        """Line 11 for runs: they are in timestamp order, so only the oldest few are touched.  A run
        wholly at or below ``p`` is forgotten and its key kept in ``_covered``; a run across ``p``
        keeps its records above ``p``."""
        covered: dict[Hashable, int] = {}
        for key, run in self._runs.items():
            if run.oldest > p:
                break
            if run.newest <= p:
                covered[key] = len(run.records) + run.below
                continue
            kept = [r for r in run.records if r[0] > p]
            run.below += len(run.records) - len(kept)
            run.records, run.oldest = kept, min(map(_ts, kept))
        for key in covered:
            del self._runs[key]
        self._cover(covered.items())

    def _cover(self, covered) -> None:
        """Copies of these ``(key, size)`` batches still to come are below the punctuation: keep their
        keys, the newest first, within a budget of records (lagging replicas' copies arrive in order)."""
        kept = self._covered
        for key, size in covered:
            if key not in kept:
                kept[key] = size
                self._covered_records += size
        while self._covered_records > COVERED_RECORDS and len(kept) > 1:
            self._covered_records -= kept.popitem(last=False)[1]     # O(1), unlike a dict's front

    # -- continuing another stream replica's counts (docs/lifecycle.md, "lineage") ---------------
    def counts(self, i: int) -> dict[Record, int]:
        """``count[t][i]`` for every remembered record (those above ``max_punctuation``) with a copy from ``i``."""
        if self._recent is not None:                    # single-replica mode: each record passed is a copy
            return dict(Counter(self._recent)) if i == 0 else {}
        bit, masks, multiple = 1 << i, self._masks, self._multiple
        out: dict[Record, int] = {}
        for record, s in self._slots.items():
            mask = masks[s]
            if mask == _MULTIPLE:
                entry = multiple[record]
                if len(entry) > i + 1 and entry[i + 1]:
                    out[record] = entry[i + 1]
            elif mask & bit:
                out[record] = 1
        for run in self._runs.values():
            if run.mask & bit:
                out.update(dict.fromkeys(run.records, 1))
        return out

    def passed_counts(self) -> dict[Record, int]:
        """``max_count[t]`` for every remembered record (those above ``max_punctuation``): how many
        of its occurrences this port passed — for an application sink, what it delivered in the
        current punctuation interval (output ids continue from there, docs/consume.md)."""
        if self._recent is not None:                    # single-replica mode: each record passed is one
            return dict(Counter(self._recent))
        masks, multiple = self._masks, self._multiple
        out = {record: multiple[record][0] if masks[s] == _MULTIPLE else 1
               for record, s in self._slots.items() if masks[s]}
        for run in self._runs.values():
            out.update(dict.fromkeys(run.records, 1))
        return out

    def seed(self, j: int, counts: dict[Record, int]) -> None:
        """Stream replica ``j`` continues a stream of which this port already holds ``counts``
        (taken with :meth:`counts` from the replica it continues): ``count[t][j] = counts[t]``, so
        equal records from distinct events keep their multiplicity across the hand-over (§IV-B)."""
        if self._runs:
            self._to_slots(list(self._runs.values()))
        slots, masks, multiple, p = self._slots, self._masks, self._multiple, self.max_punctuation
        for record, n in counts.items():
            s = slots.get(record)
            if s is None or record[0] <= p:
                continue                                # forgotten at a punctuation since (line 11)
            mask = masks[s]
            if n == 1 and mask != _MULTIPLE:
                masks[s] = mask | (1 << j)
                continue
            entry = multiple.get(record)
            if entry is None:                           # every replica sent it at most once so far
                entry = multiple[record] = [1] + [(mask >> x) & 1 for x in range(self.k)]
                masks[s] = _MULTIPLE
            if len(entry) <= j + 1:
                entry.extend([0] * (j + 2 - len(entry)))
            entry[j + 1] = n                            # ≤ max_count: copies the port already passed

    # -- statistics and state -------------------------------------------------------------------
    def weights(self) -> list[float]:
        """Accumulated §V-B weight of each stream replica: Σ over copies of 1/rank."""
        return [sum(n / (rank + 1) for rank, n in enumerate(counts)) for counts in self.rank_counts]

    def pending(self) -> int:
        """How many records are remembered (bounded by one punctuation interval)."""
        if self._recent is not None:
            return len(self._recent)
        return len(self._slots) + sum(len(run.records) for run in self._runs.values())

    def snapshot(self) -> dict[str, Any]:
        """The filter's state; runs are listed record by record (keys are an optimisation, not state)."""
        masks = self._masks
        counts = [[list(r), _portable(masks[s])] for r, s in self._slots.items()]
        counts += [[list(r), _portable(run.mask)] for run in self._runs.values() for r in run.records]
        return {"k": self.k, "max_punctuation": self.max_punctuation, "newest": self._newest,
                "counts": counts,
                "multiple": [[list(r), e] for r, e in self._multiple.items()],
                "recent": None if self._recent is None else [list(r) for r in self._recent],
                "rank_counts": [list(c) for c in self.rank_counts],
                "bases": [[i, b] for i, b in self._bases.items()], "held": [[i, p] for i, p in self._held.items()]}

    def restore(self, state: dict[str, Any]) -> None:
        self.__init__(state["k"], min_run=self.min_run)
        self.max_punctuation = state["max_punctuation"]
        self._newest = state["newest"]
        self._slots = {tuple(r): s for s, (r, _) in enumerate(state["counts"])}
        self._stragglers = list(self._slots)            # any order: all may be
        self._masks = [int.from_bytes(e, "big") if type(e) is bytes else e for _, e in state["counts"]]
        self._multiple = {tuple(r): list(e) for r, e in state["multiple"]}
        self._recent = None if state["recent"] is None else [tuple(r) for r in state["recent"]]
        self._rank_counts = [list(c) for c in state["rank_counts"]]
        self._bases = {i: b for i, b in state.get("bases", ())}
        self._held = {i: p for i, p in state.get("held", ())}


def _portable(mask: int) -> int | bytes:
    """A copy mask as the wire carries it: bytes once it is wider than 64 bits (a port that has
    had more than 64 stream replicas — every new incarnation upstream is one)."""
    return mask if mask < 1 << 63 else mask.to_bytes((mask.bit_length() + 7) // 8, "big")
