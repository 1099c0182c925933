"""DuplicateFilter — Algorithm 1 (§IV-B) and Theorem 1."""

from collections import Counter

from hypothesis import given, strategies as st

from replicast.operators.base import NO_PUNCTUATION
from replicast.operators.dedup import DuplicateFilter
from replicast.operators.testing import disorder, punctuate
from replicast.operators.record import Punctuation
from tests.operators.strategies import keyed_records


def test_first_copy_passes_later_copies_are_dropped():
    f = DuplicateFilter(2)
    assert f.on_batch(0, [(1, "a")]) == [(1, "a")]
    assert f.on_batch(1, [(1, "a")]) == []
    assert (f.passed, f.duplicates) == (1, 1)


def test_multiplicity_is_kept_per_replica():
    # Replica 0 sends the same record twice (two distinct events with equal values): both pass once.
    f = DuplicateFilter(2)
    assert f.on_batch(0, [(1, "a"), (1, "a")]) == [(1, "a"), (1, "a")]
    assert f.on_batch(1, [(1, "a")]) == []
    assert f.on_batch(1, [(1, "a")]) == []
    assert f.on_batch(1, [(1, "a")]) == [(1, "a")]   # a third occurrence only replica 1 has seen so far


def test_records_at_or_below_max_punctuation_are_duplicates():
    f = DuplicateFilter(2)
    assert f.on_punctuation(0, 10) == 10
    assert f.on_batch(1, [(10, "x"), (11, "y")]) == [(11, "y")]
    assert f.below_punctuation == 1


def test_single_replica_drops_late_records_and_keeps_no_stale_state():
    f = DuplicateFilter(1)
    f.on_batch(0, [(5, "a")])
    f.on_punctuation(0, 10)
    assert f.on_batch(0, [(3, "late"), (12, "b")]) == [(12, "b")]
    f.on_punctuation(0, 20)
    assert f.on_batch(0, [(12, "b"), (25, "c")]) == [(25, "c")]   # (12, b) is behind punctuation 20
    assert (f.below_punctuation, f.duplicates, f.pending()) == (2, 0, 1)


def test_only_increasing_punctuations_are_forwarded_and_prune_memory():
    f = DuplicateFilter(3)
    f.on_batch(0, [(5, "a"), (15, "b")])
    assert f.pending() == 2
    assert f.on_punctuation(1, 10) == 10
    assert f.pending() == 1                 # (5, "a") can never pass again: forgotten
    assert f.on_punctuation(0, 10) is None
    assert f.on_punctuation(2, 8) is None
    assert f.on_punctuation(2, 20) == 20
    assert f.pending() == 0


def test_weights_rank_replicas_by_arrival():
    f = DuplicateFilter(3)
    for record in [(1, "a"), (2, "b")]:
        f.on_batch(2, [record])
        f.on_batch(0, [record])
        f.on_batch(1, [record])
    assert f.weights() == [2 * 1 / 2, 2 * 1 / 3, 2 * 1.0]


def test_add_replica_accepts_a_new_stream_replica():
    f = DuplicateFilter(1)
    assert f.on_batch(0, [(1, "a")]) == [(1, "a")]
    new = f.add_replica()
    assert f.on_batch(new, [(1, "a"), (2, "b")]) == [(2, "b")]


def test_leaving_single_replica_mode_keeps_exact_multiplicities():
    f = DuplicateFilter(1)
    assert f.on_batch(0, [(1, "a"), (1, "a"), (2, "b")]) == [(1, "a"), (1, "a"), (2, "b")]
    new = f.add_replica()
    assert f.on_batch(new, [(1, "a"), (2, "b"), (1, "a")]) == []      # both occurrences already passed
    assert f.on_batch(new, [(1, "a")]) == [(1, "a")]                 # a third occurrence is new
    assert f.passed == 4 and f.duplicates == 3


@given(keyed_records(), st.integers(0, 40), st.randoms(use_true_random=False))
def test_a_replica_added_mid_stream_and_replaying_from_the_start_adds_nothing(records, join_at, rng):
    ordered = punctuate(records, 1_000_000)
    first, second = disorder(ordered, rng), disorder(ordered, rng)
    f = DuplicateFilter(1)
    out, new = [], None
    for step, item in enumerate(first):
        if step == join_at:
            new = f.add_replica()
        if type(item) is Punctuation:
            f.on_punctuation(0, item.ts)
        else:
            out.extend(f.on_batch(0, [item]))
        if new is not None and rng.random() < 0.5 and second:      # the newcomer catches up meanwhile
            replayed = second.pop(0)
            if type(replayed) is Punctuation:
                f.on_punctuation(new, replayed.ts)
            else:
                out.extend(f.on_batch(new, [replayed]))
    assert Counter(out) == Counter(records)


def test_a_filter_may_start_with_no_replicas_and_grow():
    """The node creates input ports before their stream replicas connect (engine/node.py)."""
    f = DuplicateFilter(0)
    first, second = f.add_replica(), f.add_replica()
    assert (first, second) == (0, 1)
    assert f.on_batch(second, [(1, "a"), (2, "b")]) == [(1, "a"), (2, "b")]
    assert f.on_batch(first, [(2, "b"), (3, "c")]) == [(3, "c")]
    assert f.weights() == [1.0 + 0.5, 2.0]


def test_a_filter_grown_to_one_replica_takes_the_single_replica_path_and_stays_exact():
    """Nodes create every port with k = 0 (engine/core/control.py): its first replica must get the
    single-replica path (no record hashed), and a second one exact counts."""
    f = DuplicateFilter(0)
    only = f.add_replica()
    assert f._single is not None and f._single.recent == []          # single-replica mode
    assert f.on_batch(only, [(1, "a"), (1, "a"), (2, "b")]) == [(1, "a"), (1, "a"), (2, "b")]
    assert not f._slots
    assert f.on_punctuation(only, 1) == 1 and f.on_batch(only, [(1, "z")]) == []
    new = f.add_replica()
    assert f.on_batch(new, [(2, "b"), (3, "c")]) == [(3, "c")]
    assert f.passed == 4 and f.duplicates == 1 and f.below_punctuation == 1


def test_snapshot_restore_continues_identically():
    f = DuplicateFilter(2)
    f.on_batch(0, [(1, "a"), (3, "c")])
    g = DuplicateFilter.from_snapshot(f.snapshot())
    assert g.on_batch(1, [(1, "a"), (2, "b")]) == f.on_batch(1, [(1, "a"), (2, "b")]) == [(2, "b")]


def test_from_snapshot_builds_a_new_filter_in_every_representation_and_leaves_the_original_alone():
    """Restore by construction: runs, per-record slots, repeated records, held punctuations and a
    based replica all come back, and the filter the snapshot was taken from is not touched."""
    f = DuplicateFilter(2, min_run=1)
    f.on_batch(0, [(5, "r"), (6, "s")], key="run")               # a run
    f.on_batch(1, [(7, "a"), (7, "a")])                          # per record, one record twice
    late = f.add_replica(base=9)                                 # its punctuations wait for 9
    assert f.on_punctuation(late, 20) is None
    before = f.snapshot()
    g = DuplicateFilter.from_snapshot(before, min_run=1)
    assert g is not f and f.snapshot() == before and g.snapshot() == before
    assert g.waiting(late) and g.base(late) == 9 and g.min_run == 1
    for i, batch in ((0, [(7, "a"), (7, "a"), (7, "a")]), (1, [(5, "r"), (8, "b")]), (late, [(6, "s")])):
        assert g.on_batch(i, batch) == f.on_batch(i, batch)
    assert g.on_punctuation(0, 10) == f.on_punctuation(0, 10) == 20      # the held 20 counts at last
    assert g.snapshot() == f.snapshot() and g.rank_counts == f.rank_counts
    single = DuplicateFilter(1)
    single.on_batch(0, [(1, "x"), (1, "x")])
    assert DuplicateFilter.from_snapshot(single.snapshot()).counts(0) == {(1, "x"): 2}


def test_a_snapshot_of_a_port_with_more_than_64_stream_replicas_crosses_the_wire():
    """Every new incarnation upstream is a stream replica more on the port: copy masks outgrow 64 bits."""
    from replicast.engine.wire import decode, encode
    from replicast.engine.messages import Snapshot
    from replicast.operators.plan import ReplicaId
    f = DuplicateFilter(1)
    for _ in range(80):
        f.add_replica()
    for i in range(81):
        f.on_batch(i, [(1, "a"), (2, "b")])
    message = Snapshot(ReplicaId("x", 0), ReplicaId("x", 1), {"filter": f.snapshot()})
    g = DuplicateFilter.from_snapshot(decode(encode(message)[4:]).state["filter"])
    assert g.counts(80) == f.counts(80) == {(1, "a"): 1, (2, "b"): 1}
    assert g.on_batch(5, [(2, "b"), (3, "c")]) == f.on_batch(5, [(2, "b"), (3, "c")]) == [(2, "b"), (3, "c")]


@given(keyed_records(), st.integers(1, 4), st.randoms(use_true_random=False))
def test_theorem_1_each_record_passes_exactly_its_multiplicity(records, k, rng):
    """Consistent stream replicas in any interleaving → the output multiset equals one replica's."""
    ordered = punctuate(records, 1_000_000)
    replicas = [disorder(ordered, rng) for _ in range(k)]
    crashed_after = [len(r) if i == 0 else rng.randint(0, len(r)) for i, r in enumerate(replicas)]
    f = DuplicateFilter(k)
    out = []
    cursors = [0] * k
    while any(cursors[i] < crashed_after[i] for i in range(k)):
        i = rng.choice([i for i in range(k) if cursors[i] < crashed_after[i]])
        item = replicas[i][cursors[i]]
        cursors[i] += 1
        if type(item) is Punctuation:
            f.on_punctuation(i, item.ts)
        else:
            out.extend(f.on_batch(i, [item]))
    assert Counter(out) == Counter(records)
    assert f.pending() == 0   # closed by the final punctuation: nothing left in memory


def test_memory_is_bounded_by_the_punctuation_interval():
    f = DuplicateFilter(2)
    peak = 0
    for second in range(100):
        batch = [(second * 1000 + i, i) for i in range(50)]
        f.on_batch(0, batch)
        f.on_batch(1, batch)
        peak = max(peak, f.pending())
        f.on_punctuation(0, second * 1000 + 999)
    assert peak == 50    # one interval's distinct records, not 100 intervals' worth


def _arrivals(records, k, same_batches, rng):
    """The batches each of k replicas sends: byte-identical cuts of the same order with probability
    ``same_batches``, else its own disorder and cuts."""
    ordered = punctuate(records, 1_000_000)
    template, arrivals = None, []
    for _ in range(k):
        identical = rng.random() < same_batches
        items = ordered if identical else disorder(ordered, rng)
        batches, cuts = _batches(items, rng, template if identical else None)
        template = template or (cuts if identical else None)
        arrivals.append(batches)
    return arrivals


def _batches(items, rng, template=None):
    """Split an item sequence into batches of records, each followed by its punctuation if any."""
    cuts = template or sorted(rng.sample(range(1, len(items)), min(len(items) - 1, rng.randint(0, 8))))
    bounds = [0, *cuts, len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:]) if a < b], cuts


@given(keyed_records(), st.integers(2, 4), st.floats(0, 1), st.randoms(use_true_random=False))
def test_batch_keys_change_nothing_but_speed(records, k, same_batches, rng):
    """A keyed filter (runs of slots taken at once) behaves exactly like the per-record filter:
    same records passed at every call, same counters, §V-B ranks, memory and state — whether the
    replicas' batches are byte-identical (the fast path) or not, and whatever repeats they carry."""
    filters_agree(_arrivals(records, k, same_batches, rng), k, rng, lambda batch: (batch, tuple(batch)))


def filters_agree(arrivals, k, rng, as_sent) -> None:
    """Feed each replica's batches, in an interleaving drawn from ``rng``, to a keyed filter (each
    batch as ``as_sent(records)`` gives it: ``(records, key)``) and to a plain one fed the record
    lists: same records passed at every call, same punctuations, counters and state."""
    keyed, plain = DuplicateFilter(k, min_run=1), DuplicateFilter(k)
    cursors = [0] * k
    while any(cursors[i] < len(arrivals[i]) for i in range(k)):
        i = rng.choice([i for i in range(k) if cursors[i] < len(arrivals[i])])
        batch = arrivals[i][cursors[i]]
        cursors[i] += 1
        records_only = [item for item in batch if type(item) is not Punctuation]
        sent, key = as_sent(records_only)
        assert keyed.on_batch(i, sent, key=key) == plain.on_batch(i, records_only)
        for item in batch:
            if type(item) is Punctuation:
                assert keyed.on_punctuation(i, item.ts) == plain.on_punctuation(i, item.ts)
        state, reference = keyed.snapshot(), plain.snapshot()
        assert {tuple(r): e for r, e in state.pop("counts")} == {tuple(r): e for r, e in reference.pop("counts")}
        assert state == reference
        assert (keyed.passed, keyed.duplicates, keyed.below_punctuation) == \
            (plain.passed, plain.duplicates, plain.below_punctuation)


def test_a_single_replica_batch_is_known_once_a_punctuation_covers_it():
    f = DuplicateFilter(0, min_run=1)
    first = f.add_replica()
    assert f.on_batch(first, [(1, "a"), (5, "b")], key="k1") == [(1, "a"), (5, "b")]
    assert f.on_punctuation(first, 2) == 2 and not f.knows("k1")      # (5, "b") is not covered yet
    assert f.on_punctuation(first, 5) == 5 and f.knows("k1")
    second = f.add_replica()
    assert f.on_batch(second, [], key="k1") == [] and f.below_punctuation == 2 and f.duplicates == 0


@given(keyed_records(), st.integers(2, 4), st.sampled_from([1.0, 0.5, 0.0]), st.randoms(use_true_random=False))
def test_replicas_joining_a_single_replica_filter_change_nothing_but_speed(records, k, same_batches, rng):
    """As a node's ports grow (k = 0, then replicas connect one by one, the first taking the
    single-replica path): a keyed filter — keys of covered single-replica batches remembered, so
    late copies are not read — passes what an unkeyed one passes, with the same counters."""
    arrivals = _arrivals(records, k, same_batches, rng)
    keyed, plain = DuplicateFilter(0, min_run=1), DuplicateFilter(0)
    joined, cursors = 0, [0] * k
    while any(cursors[i] < len(arrivals[i]) for i in range(joined)) or joined < k:
        active = [i for i in range(joined) if cursors[i] < len(arrivals[i])]
        if joined < k and (not active or rng.random() < 0.3):
            assert keyed.add_replica() == plain.add_replica() == joined
            joined += 1
            continue
        i = rng.choice(active)
        batch = arrivals[i][cursors[i]]
        cursors[i] += 1
        records_only = [item for item in batch if type(item) is not Punctuation]
        key = tuple(records_only)
        given_records = [] if keyed.knows(key) else records_only        # a known copy is not read
        assert keyed.on_batch(i, given_records, key=key) == plain.on_batch(i, records_only)
        for item in batch:
            if type(item) is Punctuation:
                assert keyed.on_punctuation(i, item.ts) == plain.on_punctuation(i, item.ts)
        assert (keyed.passed, keyed.duplicates, keyed.below_punctuation) == \
            (plain.passed, plain.duplicates, plain.below_punctuation)
    assert keyed.rank_counts == plain.rank_counts


def test_small_batches_are_not_remembered_as_runs():
    f = DuplicateFilter(2)                          # default min_run: a run costs more than it saves
    assert f.on_batch(0, [(1, "a")], key="tiny") == [(1, "a")] and not f.knows("tiny")
    big = [(ts, "x") for ts in range(10, 10 + f.min_run)]
    assert f.on_batch(0, big, key="big") == big and f.knows("big")


def test_a_known_batch_copy_is_not_read():
    f = DuplicateFilter(3, min_run=1)
    batch = [(1, "a"), (2, "b")]
    assert f.on_batch(0, batch, key="frame-1") == batch
    assert f.knows("frame-1")
    assert f.on_batch(1, [], key="frame-1") == []   # the records are not even looked at
    assert f.rank_counts[1] == [0, 2, 0] and f.duplicates == 2
    f.on_punctuation(0, 2)                             # covers the batch: later copies are below it
    assert f.pending() == 0 and f.knows("frame-1")
    assert f.on_batch(2, [], key="frame-1") == [] and f.below_punctuation == 2


def test_a_replica_repeating_a_known_batch_sends_new_occurrences():
    f = DuplicateFilter(2, min_run=1)
    batch = [(1, "a"), (2, "b")]
    assert f.on_batch(0, batch, key="frame-1") == batch
    assert f.on_batch(0, batch, key="frame-1") == batch   # two more events with equal values
    assert f.on_batch(1, batch, key="frame-1") == []
    assert f.on_batch(1, batch, key="frame-1") == []
    assert f.on_batch(1, batch, key="frame-1") == batch   # a third occurrence
    assert f.on_batch(0, [(2, "b"), (3, "c")]) == [(3, "c")]   # replica 0 catches up; (3, "c") is new


class _Algorithm1:
    """Algorithm 1 as the paper writes it (§IV-B): full counts per record, forgotten at punctuations."""

    def __init__(self, k: int):
        self.count: dict = {}
        self.max_count: dict = {}
        self.max_punctuation = NO_PUNCTUATION
        self.k, self.passed, self.duplicates, self.below_punctuation = k, 0, 0, 0

    def on_record(self, i, record) -> bool:
        if record[0] <= self.max_punctuation:                      # line 2
            self.below_punctuation += 1
            return False
        counts = self.count.setdefault(record, [0] * self.k)
        counts[i] += 1                                             # line 3
        if counts[i] > self.max_count.get(record, 0):              # lines 4-6
            self.max_count[record] = counts[i]
            self.passed += 1
            return True
        self.duplicates += 1
        return False

    def on_punctuation(self, p):
        if p <= self.max_punctuation:
            return None
        self.max_punctuation = p                                   # lines 8-11
        self.count = {r: c for r, c in self.count.items() if r[0] > p}
        self.max_count = {r: c for r, c in self.max_count.items() if r[0] > p}
        return p


@given(keyed_records(max_size=40), st.integers(2, 4), st.randoms(use_true_random=False))
def test_punctuations_forget_exactly_the_records_at_or_below_them(records, k, rng):
    """Whatever the arrival order (records inserted behind newer ones included), after every step the
    filter remembers the same records as the paper's Algorithm 1 and counts the same outcomes."""
    ordered = punctuate(records, 250_000)
    replicas = [disorder(ordered, rng) for _ in range(k)]
    f, reference = DuplicateFilter(k), _Algorithm1(k)
    cursors = [0] * k
    while any(cursors[i] < len(replicas[i]) for i in range(k)):
        i = rng.choice([i for i in range(k) if cursors[i] < len(replicas[i])])
        item = replicas[i][cursors[i]]
        cursors[i] += 1
        if type(item) is Punctuation:
            assert f.on_punctuation(i, item.ts) == reference.on_punctuation(item.ts)
        else:
            assert f.on_batch(i, [item]) == ([item] if reference.on_record(i, item) else [])
        assert sorted(tuple(r) for r, _ in f.snapshot()["counts"]) == sorted(reference.count)
        assert (f.passed, f.duplicates, f.below_punctuation) == \
            (reference.passed, reference.duplicates, reference.below_punctuation)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1)), max_size=40), st.integers(1, 3), st.booleans())
def test_passed_counts_are_the_occurrences_passed_above_the_punctuation(records, k, keyed):
    """What a sink that restores this filter has delivered in the current interval (docs/consume.md):
    per record, how many of its occurrences passed — whatever the path (single replica, slots, runs)."""
    f = DuplicateFilter(k)
    passed: Counter = Counter()
    half = len(records) // 2
    for i in range(k):                                 # every replica sends the same two batches
        for n, batch in enumerate((records[:half], records[half:])):
            batch = [tuple(r) for r in batch]
            passed.update(f.on_batch(i, batch, key=(n, tuple(batch)) if keyed else None))
    f.on_punctuation(0, 1)
    expected = {r: n for r, n in passed.items() if r[0] > 1}
    assert f.passed_counts() == expected
    g = DuplicateFilter.from_snapshot(f.snapshot())
    assert g.passed_counts() == expected
