"""Latency quantiles and curves of runs too long to hold their deliveries in memory.

A :class:`Histogram` counts latencies in bins of 1/64 octave (about 1.1 % wide) as a recorder
writes them; :func:`quantiles` then finds the exact quantiles in a second pass over the written
Parquet files, keeping only the values in the bins that hold the wanted ranks — the same numbers
``numpy.quantile`` (linear interpolation) gives on the whole column, in memory bounded by the
largest such bin.  :func:`curve` turns a histogram into points for ``P(latency > x)`` plots
(each bin's upper edge: within one bin of the exact curve).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

#: Bins per factor of two.
PER_OCTAVE = 64
#: Bin 0 holds latencies below 1 µs; bin b >= 1 holds [2**((b-1)/64), 2**(b/64)) µs.
BINS = PER_OCTAVE * 48 + 1           # up to 2**48 µs (~9 years)


def bin_of(values: np.ndarray) -> np.ndarray:
    """The bin of each latency (µs)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore"):
        bins = np.floor(np.log2(np.maximum(values, 0.5)) * PER_OCTAVE).astype(np.int64) + 1
    return np.clip(bins, 0, BINS - 1)


class Histogram:
    """Counts of latencies per bin; histograms of segments add up."""

    def __init__(self):
        self.counts = np.zeros(BINS, dtype=np.int64)

    def add(self, values: np.ndarray) -> None:
        if len(values):
            self.counts += np.bincount(bin_of(values), minlength=BINS)

    def merge(self, other: "Histogram") -> None:
        self.counts += other.counts

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def quantiles(histogram: Histogram, columns: Iterable[np.ndarray], qs: Sequence[float]) -> list[float]:
    """``numpy.quantile(all values, qs)`` (linear), from the histogram of all values and one more
    pass over them (``columns``: the values in chunks, in any order)."""
    n = histogram.total
    if n == 0:
        return [float("nan")] * len(qs)
    positions = [(n - 1) * q for q in qs]
    ranks = sorted({int(np.floor(h)) for h in positions} | {min(n - 1, int(np.floor(h)) + 1) for h in positions})
    cumulative = np.cumsum(histogram.counts)
    wanted_bins = {int(np.searchsorted(cumulative, r, side="right")) for r in ranks}
    kept: list[np.ndarray] = []
    for values in columns:
        kept.append(values[np.isin(bin_of(values), list(wanted_bins))])
    order = {}
    for b in sorted(wanted_bins):
        inside = np.sort(np.concatenate([k[bin_of(k) == b] for k in kept]) if kept else np.empty(0))
        below = int(cumulative[b - 1]) if b else 0
        order[b] = (below, inside)

    def at(rank: int) -> float:
        b = int(np.searchsorted(cumulative, rank, side="right"))
        below, inside = order[b]
        return float(inside[rank - below])

    out = []
    for h in positions:
        low = int(np.floor(h))
        high = min(n - 1, low + 1)
        a, b = at(low), at(high)
        out.append(a + (h - low) * (b - a))
    return out


def curve(histogram: Histogram) -> tuple[np.ndarray, np.ndarray]:
    """Points ``(x µs, P(latency > x))`` at every non-empty bin's upper edge."""
    counts = histogram.counts
    n = counts.sum()
    used = np.nonzero(counts)[0]
    upper = 2.0 ** (used / PER_OCTAVE)
    above = (n - np.cumsum(counts)[used]) / max(n, 1)
    return upper, above
