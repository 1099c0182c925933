"""A process-pair backup's ledger (engine/core/ledger.py): whatever the interleaving of its own input
and its primary's determinants, and wherever it takes over, its operator takes every record exactly
as often as it occurs — no loss, no repeat — and the ledger forgets what both sides have passed."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, strategies as st

from replicast.engine.core.ledger import Ledger

# Records (ts, value) with repeats (equal records from distinct events), over 4 punctuation windows.
multisets = st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), max_size=40)


def stream(records: list, rng: random.Random) -> list:
    """One side's steps: the records in a random order within each 10-µs window, punctuated after it."""
    steps = []
    for window in range(4):
        inside = [r for r in records if window * 10 < r[0] <= window * 10 + 10]
        rng.shuffle(inside)
        cut = rng.randint(0, len(inside))
        steps += [(inside[:cut], None), (inside[cut:], window * 10 + 10)]
    return steps


@given(multisets, st.integers(0, 2**32), st.floats(0, 1))
def test_the_operator_takes_every_record_once(records, seed, when):
    rng = random.Random(seed)
    own = stream(records, rng)
    theirs = stream(records, rng)[:round(when * 8)]       # the primary fails after some of its steps
    events = ["own"] * len(own) + ["theirs"] * len(theirs)
    rng.shuffle(events)                                    # each side in order, interleaved at random
    last = max((i for i, e in enumerate(events) if e == "theirs"), default=-1)
    events.insert(rng.randint(last + 1, len(events)), "take over")     # the detector fires after its last
    ledger, taken, alone = Ledger(1), Counter(), False
    own_steps, their_steps = iter(own), iter(theirs)
    for event in events:
        if event == "theirs":
            step = next(their_steps)
            taken.update(step[0])                          # the backup's operator takes the primary's step
            ledger.take_theirs(0, *step)
        elif event == "take over":
            alone = True
            taken.update(ledger.take_over(0)[0])
        elif alone:
            taken.update(ledger.after_take_over(0, *next(own_steps)))
        else:
            ledger.take_own(0, *next(own_steps))
    assert taken == Counter(records)
    assert not ledger.pending[0] and not any(ledger.ahead)     # both sides passed every punctuation


def test_what_both_sides_passed_is_forgotten():
    ledger = Ledger(1)
    ledger.take_own(0, [(1, "a"), (12, "b")], None)
    ledger.take_theirs(0, [(12, "b")], None)
    assert ledger.take_over(0) == ([(1, "a")], None)
    ledger = Ledger(1)
    ledger.take_own(0, [(1, "a"), (12, "b")], 10)
    ledger.take_theirs(0, [(1, "a"), (3, "c")], 10)       # (3, "c") cannot be missing from own input past 10
    assert ledger.pending[0] == [(12, "b")] and not ledger.ahead[0]
