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

The counts have three representations, one module each, and this class moves records between them
so that the result is always exactly the per-record algorithm's:

* :mod:`operators.dedup_slots` — per record: a slot and a copy mask each (the general case);
* :mod:`operators.dedup_runs` — identical batches remembered whole under a content key, without
  hashing a record.  Anything a run cannot answer alone — a batch without key whose timestamps reach
  into a run, a replica repeating a run — first turns the runs concerned into per-record slots;
* :mod:`operators.dedup_single` — one stream replica: timestamps only.

:mod:`operators.dedup_ranks` keeps the §V-B arrival ranks of the copies (utility weights).

Stream replicas that start mid-stream (a restarted or rejoined upstream, a revived stream replica,
a gap after the sender's log was trimmed) carry every record above some *base* frontier but not
everything below it.  Their punctuations only promise that much, so a punctuation from such a
replica counts (line 8) only once this port's ``max_punctuation`` has reached its base; until then
it is held, and applied as soon as another replica's punctuation gets the port there.  A replica
rebuilding without a live peer *adopts* a frontier instead (:meth:`DuplicateFilter.adopt`): it
declares the input below it lost, and its operator emits only what it can prove complete above it
(``docs/lifecycle.md``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.dedup_ranks import Ranks
from replicast.operators.dedup_runs import Runs
from replicast.operators.dedup_single import Single
from replicast.operators.dedup_slots import Slots
from replicast.operators.record import Record, sorted_stamps

#: Smallest batch remembered as a run: below it, per-record entries cost less than a run's bookkeeping.
MIN_RUN = 16

#: Base of a stream replica whose base is its first punctuation (see ``add_replica``).
_FIRST = None


class DuplicateFilter:
    """Algorithm 1 for one input port fed by ``k`` stream replicas numbered ``0 … k-1``.

    ``k`` may start at 0 and grow with :meth:`add_replica` as stream replicas connect; a filter
    with one stream replica (created with ``k = 1``, or grown from 0 to 1 with nothing remembered)
    takes the single-replica path until a second replica is added.
    """

    def __init__(self, k: int, *, min_run: int = MIN_RUN):
        self.k = k
        self.min_run = min_run
        self.max_punctuation = NO_PUNCTUATION
        self._ranks = Ranks.empty(k)
        self._slots = Slots(self._ranks)
        self._runs = Runs()
        self._single: Single | None = Single() if k == 1 else None
        self._newest = NO_PUNCTUATION           # largest ts remembered, in any representation
        self._bases: dict[int, int | None] = {}        # replica -> base frontier not yet reached by the port
        self._held: dict[int, int] = {}         # replica -> largest punctuation held until its base is reached
        self.passed = 0
        self.duplicates = 0
        self.below_punctuation = 0
        #: (records, oldest ts, newest ts, their timestamps sorted or None) of the last batch whose
        #: span this filter knew (it sorted the timestamps, or the batch copies a whole run), for the
        #: trace sampler to reuse (engine/core/tracepoints.py rule 1): one sort per batch, not two.
        #: None after a batch read record by record; left as it was by a batch taken unread, by key.
        self.span: tuple[Sequence[Record], int, int, list[int] | None] | None = None

    def add_replica(self, base: int | None = NO_PUNCTUATION) -> int:
        """Accept one more stream replica (a revived or newly connected upstream, a new incarnation of
        one); returns its index.  It carries every record above ``base`` (see the module docstring);
        ``base`` None: above its own first punctuation (all that can be said of a new incarnation
        that claims to be whole from the start but cannot know what was lost before it)."""
        if self._single is not None:            # leave single-replica mode with exact counts
            recent = self._single.recent
            self._single = None
            self.on_batch(0, recent)
            self.passed -= len(recent)
            self._ranks.counts[0][0] -= len(recent)
        self.k += 1
        self._ranks.add_replica()
        if self.k == 1 and not self._slots and not self._runs and not self._slots.multiple:
            self._single = Single()             # the first replica of a fresh filter: single-replica mode
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
        return self._ranks.count()

    def knows(self, key: Hashable) -> bool:
        """Whether a copy of the batch with this key can be taken without its records."""
        return self._runs.knows(key)

    # -- records --------------------------------------------------------------------------------
    def on_batch(self, i: int, records: Sequence[Record], key: Hashable | None = None) -> list[Record]:
        """Records from stream replica ``i``; returns those that pass, in arrival order.

        ``key``, if given, identifies the batch's content: equal keys must mean equal record sequences
        (the engine uses the frame's record bytes).  A batch whose key :meth:`knows` is not read.
        """
        if self._single is not None:                    # k = 1: every record is a new occurrence
            return self._on_single(i, records, key)
        runs = self._runs
        if key is not None:
            run = runs.by_key.get(key)
            if run is not None:
                if not run.below:                       # its records' span, unread (for the tracer)
                    self.span = (records, run.oldest, run.newest, None)
                self.below_punctuation += run.below     # Alg. 1 line 2 for the forgotten part
                if not run.mask & (1 << i):             # later copies of occurrence 1, all at once
                    run.mask |= 1 << i
                    n = len(run.records)
                    self._ranks.counts[i][run.mask.bit_count() - 1] += n
                    self.duplicates += n
                    return []
                self._to_slots([run])                   # replica i repeats the batch: per record
                records = run.records
            elif key in runs.covered:                   # Alg. 1 line 2 for the whole batch
                self.below_punctuation += runs.covered[key]
                return []
        if not records:
            return []
        if not runs and (key is None or len(records) < self.min_run):
            self.span = None                            # read record by record: no span known
            return self._per_record(i, records)
        stamps = sorted_stamps(records)                 # oldest, newest (linear on sorted input)
        self.span = (records, stamps[0], stamps[-1], stamps)
        if stamps[-1] <= self.max_punctuation:          # Alg. 1 line 2 for the whole batch
            self.below_punctuation += len(records)
            return []
        if key is not None and len(records) >= self.min_run and stamps[0] > self._newest \
                and stamps[0] > self.max_punctuation and len(set(stamps)) == len(stamps):
            # Distinct timestamps, all newer than anything remembered: every record is new.
            runs.add(key, records, stamps[0], stamps[-1], 1 << i)
            self._newest = stamps[-1]
            n = len(records)
            self.passed += n
            self._ranks.counts[i][0] += n
            return records if type(records) is list else list(records)
        if runs and stamps[-1] >= runs.oldest():
            self._to_slots(runs.overlapping(stamps[0], stamps[-1]))
        return self._per_record(i, records)

    def _per_record(self, i: int, records: Sequence[Record]) -> list[Record]:
        """Algorithm 1 record by record over the slots."""
        out, below, self._newest = self._slots.on_records(i, records, self.max_punctuation, self._newest)
        self.passed += len(out)
        self.below_punctuation += below
        self.duplicates += len(records) - len(out) - below
        self._ranks.counts[i][0] += len(out)
        return out

    def _to_slots(self, runs: list) -> None:
        """Give the records of ``runs`` per-record slots; the caller has counted each run's ``below`` part."""
        self._runs.take(runs)
        for run in runs:
            self._slots.add(run.records, run.mask)

    def _on_single(self, i: int, records: Sequence[Record], key: Hashable | None) -> list[Record]:
        covered = self._runs.covered
        if key is not None and key in covered:          # Alg. 1 line 2 for the whole batch, unread
            self.below_punctuation += covered[key]
            return []
        if not records:
            return []
        passed, stamps = self._single.on_batch(records, key, self.max_punctuation, self.min_run)
        self.span = (records, stamps[0], stamps[-1], stamps)
        self.below_punctuation += len(records) - len(passed)
        if passed:
            if stamps[-1] > self._newest:
                self._newest = stamps[-1]
            self.passed += len(passed)
            self._ranks.counts[i][0] += len(passed)
        return passed

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
        if self._single is not None:
            self._runs.cover(self._single.forget(p, self._newest))
            return
        if self._runs:
            self._runs.forget(p)
        self._slots.forget(p, self._newest)

    # -- continuing another stream replica's counts (docs/lifecycle.md, "lineage") ---------------
    def counts(self, i: int) -> dict[Record, int]:
        """``count[t][i]`` for every remembered record (those above ``max_punctuation``) with a copy from ``i``."""
        if self._single is not None:                    # single-replica mode: each record passed is a copy
            return dict(Counter(self._single.recent)) if i == 0 else {}
        out = self._slots.counts(i)
        bit = 1 << i
        for run in self._runs.by_key.values():
            if run.mask & bit:
                out.update(dict.fromkeys(run.records, 1))
        return out

    def passed_counts(self) -> dict[Record, int]:
        """``max_count[t]`` for every remembered record (those above ``max_punctuation``): how many
        of its occurrences this port passed — for an application sink, what it delivered in the
        current punctuation interval (output ids continue from there, docs/consume.md)."""
        if self._single is not None:                    # single-replica mode: each record passed is one
            return dict(Counter(self._single.recent))
        out = self._slots.passed_counts()
        for run in self._runs.by_key.values():
            out.update(dict.fromkeys(run.records, 1))
        return out

    def seed(self, j: int, counts: dict[Record, int]) -> None:
        """Stream replica ``j`` continues a stream of which this port already holds ``counts``
        (taken with :meth:`counts` from the replica it continues): ``count[t][j] = counts[t]``, so
        equal records from distinct events keep their multiplicity across the hand-over (§IV-B)."""
        if self._runs:
            self._to_slots(list(self._runs.by_key.values()))
        self._slots.seed(j, counts, self.max_punctuation)

    # -- statistics and state -------------------------------------------------------------------
    def weights(self) -> list[float]:
        """Accumulated §V-B weight of each stream replica: Σ over copies of 1/rank."""
        return self._ranks.weights()

    def pending(self) -> int:
        """How many records are remembered (bounded by one punctuation interval)."""
        if self._single is not None:
            return len(self._single.recent)
        return len(self._slots) + self._runs.pending()

    def snapshot(self) -> dict[str, Any]:
        """The filter's state; runs are listed record by record (keys are an optimisation, not state)."""
        counts = [[list(r), _portable(mask)] for r, mask in self._slots.entries()]
        counts += [[list(r), _portable(mask)] for r, mask in self._runs.records()]
        return {"k": self.k, "max_punctuation": self.max_punctuation, "newest": self._newest,
                "counts": counts,
                "multiple": [[list(r), e] for r, e in self._slots.multiple.items()],
                "recent": None if self._single is None else [list(r) for r in self._single.recent],
                "rank_counts": [list(c) for c in self.rank_counts],
                "bases": [[i, b] for i, b in self._bases.items()], "held": [[i, p] for i, p in self._held.items()]}

    @classmethod
    def from_snapshot(cls, state: dict[str, Any], *, min_run: int = MIN_RUN) -> DuplicateFilter:
        """A filter in the state :meth:`snapshot` took (counters start at zero)."""
        f = cls(state["k"], min_run=min_run)
        f.max_punctuation = state["max_punctuation"]
        f._newest = state["newest"]
        f._ranks = Ranks([list(c) for c in state["rank_counts"]])
        entries = [(tuple(r), int.from_bytes(e, "big") if type(e) is bytes else e) for r, e in state["counts"]]
        f._slots = Slots.from_entries(f._ranks, entries, {tuple(r): list(e) for r, e in state["multiple"]})
        f._single = None if state["recent"] is None else Single([tuple(r) for r in state["recent"]])
        f._bases = {i: b for i, b in state.get("bases", ())}
        f._held = {i: p for i, p in state.get("held", ())}
        return f


def _portable(mask: int) -> int | bytes:
    """A copy mask as the wire carries it: bytes once it is wider than 64 bits (a port that has
    had more than 64 stream replicas — every new incarnation upstream is one)."""
    return mask if mask < 1 << 63 else mask.to_bytes((mask.bit_length() + 7) // 8, "big")
