"""Union (§IV-D) and the §IV-A punctuation rule."""

from replicast.operators.union import Union


def test_forwards_every_record_from_every_input():
    u = Union(3)
    assert u.on_batch(2, [(1, "a")]) == [(1, "a")]
    assert u.on_batch(0, [(0, "b")]) == [(0, "b")]


def test_punctuation_is_forwarded_once_every_input_has_reached_it():
    u = Union(3)
    assert u.on_punctuation(0, 10) == ([], None)
    assert u.on_punctuation(1, 20) == ([], None)
    assert u.on_punctuation(2, 15) == ([], 10)      # min(10, 20, 15)
    assert u.on_punctuation(0, 30) == ([], 15)
    assert u.on_punctuation(2, 40) == ([], 20)


def test_snapshot_keeps_the_frontier():
    u = Union(2)
    u.on_punctuation(0, 5)
    v = Union(2)
    v.restore(u.snapshot())
    assert v.on_punctuation(1, 9) == ([], 5)


def test_a_replica_may_start_with_no_upstreams_and_grow():
    from replicast.operators.replica import OperatorReplica
    replica = OperatorReplica(Union(1), [0])
    upstream = replica.filters[0].add_replica()
    assert replica.on_batch(0, upstream, [(1, "a")], 7) == ([(1, "a")], 7)
