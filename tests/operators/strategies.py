"""Hypothesis strategies shared by the operator tests."""

from hypothesis import strategies as st

# Floats whose sums depend on order when added with a running `+=`: exactly the case fsum fixes.
TRICKY_FLOATS = st.sampled_from([0.1, 0.2, 0.3, 1e16, -1e16, 1.0, -2.5, 3.0e-8, 7.25])


@st.composite
def keyed_records(draw, max_size=30, max_ts=5_000_000, keys=3):
    """Records ``(ts, k, v)`` with small int keys and order-sensitive float values, duplicates allowed."""
    n = draw(st.integers(0, max_size))
    records = [(draw(st.integers(0, max_ts)), draw(st.integers(0, keys - 1)), draw(TRICKY_FLOATS)) for _ in range(n)]
    duplicates = draw(st.lists(st.sampled_from(records), max_size=5)) if records else []
    return sorted(records + duplicates)
