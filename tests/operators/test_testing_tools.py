"""operators.testing: the arrival orders it generates are ones a replica may really see (§IV-A)."""

from hypothesis import given, strategies as st

from replicast.operators.record import Punctuation
from replicast.operators.testing import disorder, punctuate
from tests.operators.strategies import keyed_records


@given(keyed_records(), st.sampled_from([1, 250_000, 1_000_000]), st.randoms(use_true_random=False))
def test_disorder_keeps_every_record_and_every_punctuation_promise(records, every, rng):
    items = punctuate(records, every)
    out = disorder(items, rng)
    assert sorted(r for r in out if type(r) is not Punctuation) == sorted(records)
    punctuations = [item.ts for item in out if type(item) is Punctuation]
    assert punctuations == [item.ts for item in items if type(item) is Punctuation]   # same, in order
    promised = None
    for item in out:
        if type(item) is Punctuation:
            promised = item.ts
        else:
            assert promised is None or item[0] > promised


def test_disorder_really_reorders():
    import random
    records = [(i, "x") for i in range(100)]
    out = [r for r in disorder(punctuate(records, 10**9), random.Random(1)) if type(r) is not Punctuation]
    assert out != records
