"""Latency distributions like the paper's Fig. 4: P(latency > x) on log axes, one curve per run."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np


def ccdf(latency_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x in seconds, P(latency > x))`` at every distinct latency, for a step plot."""
    x = np.sort(np.asarray(latency_us, dtype=np.float64)) / 1e6
    p = 1.0 - np.arange(1, len(x) + 1) / len(x)
    return x, p


def plot_ccdf(curves: Sequence[tuple[str, np.ndarray]], path: Path, title: str) -> Path:
    """Write a PNG with one P(latency > x) curve per ``(label, latencies in µs)``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    floor = 1.0
    for label, latency in curves:
        if not len(latency):
            continue
        x, p = ccdf(latency)
        keep = p > 0                      # log axes: the last point has P = 0
        ax.step(x[keep], p[keep], where="post", label=label, linewidth=1.6)
        floor = min(floor, p[keep].min() if keep.any() else 1.0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(max(floor / 2, 1e-6), 1.05)
    ax.set_xlabel("latency x (seconds)")
    ax.set_ylabel("P(latency > x)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, title="kmax (bandwidth, network cost ratios)", title_fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
