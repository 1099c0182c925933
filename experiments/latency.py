"""Latency distributions of any runs, one curve per run (the paper's Fig. 4 and Fig. 3 views).

* ``ccdf`` — P(latency > x) on log axes, as Fig. 4;
* ``cdf`` — P(latency ≤ x), latency on a log axis;
* ``over-time`` — each record's latency against its arrival time since the run's first delivery
  (Fig. 3's view of one run).

The distributions are matplotlib's own empirical CDFs (:meth:`matplotlib.axes.Axes.ecdf`, with
``complementary=True`` for the CCDF), so ``replicast simulate``'s ``latency.png`` and
``replicast plot latency`` draw with the same code.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from replicast.experiments.plot_kinds import KINDS


@dataclass
class LatencyRun:
    """One curve: latencies in µs (and arrival times in µs, for ``over-time``) with its label."""
    label: str
    latency_us: np.ndarray
    arrival_us: np.ndarray | None = None
    source: str = ""
    notes: dict = field(default_factory=dict)


def draw(ax, runs: Sequence[LatencyRun], kind: str = "ccdf") -> list:
    """Draw ``runs`` on ``ax``; returns one artist per run drawn (runs without records are skipped)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind!r}")
    artists = []
    for run in runs:
        if not len(run.latency_us):
            continue
        seconds = np.asarray(run.latency_us, dtype=np.float64) / 1e6
        if kind == "over-time":
            if run.arrival_us is None:
                raise ValueError(f"{run.label}: no arrival times, cannot plot latency over time")
            since = (np.asarray(run.arrival_us, dtype=np.float64) - np.min(run.arrival_us)) / 1e6
            order = np.argsort(since, kind="stable")
            artists.append(ax.plot(since[order], seconds[order], ".", markersize=2, alpha=0.6, rasterized=True,
                                   label=run.label)[0])
        else:
            artists.append(ax.ecdf(seconds, complementary=kind == "ccdf", label=run.label, linewidth=1.6))
    if kind == "over-time":
        ax.set_xlabel("arrival time since the first delivery (seconds)")
        ax.set_ylabel("latency (seconds)")
    else:
        ax.set_xscale("log")
        ax.set_xlabel("latency x (seconds)")
        ax.set_ylabel("P(latency > x)" if kind == "ccdf" else "P(latency ≤ x)")
    if kind == "ccdf":
        ax.set_yscale("log")
        smallest = min((1.0 / len(r.latency_us) for r in runs if len(r.latency_us)), default=1.0)
        ax.set_ylim(max(smallest / 2, 1e-6), 1.05)
    ax.grid(True, which="both", alpha=0.3)
    return artists


@contextmanager
def figure(path: Path, heading: str, **legend):
    """One PNG at ``path``: yields the axes; titles, adds the legend (``legend`` its options), saves, closes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    try:
        yield ax
        ax.set_title(heading, fontsize=10)
        ax.legend(fontsize=8, **legend)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)


def plot_latency(runs: Sequence[LatencyRun], path: Path, *, kind: str = "ccdf", title: str = "",
                 legend_title: str | None = None) -> Path:
    """Write a PNG with one curve per run."""
    with figure(path, title, title=legend_title, title_fontsize=8, markerscale=4) as ax:
        draw(ax, runs, kind)
    return path


def plot_ccdf(curves: Sequence[tuple[str, np.ndarray]], path: Path, title: str) -> Path:
    """``replicast simulate``'s Fig. 4: one P(latency > x) curve per ``(label, latencies in µs)``."""
    return plot_latency([LatencyRun(label, latency) for label, latency in curves], path, kind="ccdf", title=title,
                        legend_title="kmax (bandwidth, network cost ratios)")
