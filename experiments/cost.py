"""Network cost over time (§V-A: records/s × one-way ms, summed over stream replicas), one line per run.

``replicast simulate`` draws ``cost.png`` from each run's ``cost_over_time`` (the bandwidth table's
cost per time bucket): with a ``[coordinator]`` the adaptive run (garbage collection and revival)
as a solid line and the static deployment it started from, simulated alike, dashed in the same colour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from replicast.experiments.latency import figure


def plot_cost(runs: Sequence[tuple[str, Sequence[Sequence[float]], Sequence[Sequence[float]] | None]], path: Path,
              title: str) -> Path:
    """One line per ``(label, [[t_s, cost], …], static [[t_s, cost], …] or None)``."""
    with figure(path, title) as ax:
        for i, (label, series, static) in enumerate(runs):
            colour = f"C{i}"
            if series:
                t, cost = zip(*series)
                ax.step(t, cost, where="post", color=colour, linewidth=1.6, label=label)
            if static:
                t, cost = zip(*static)
                ax.step(t, cost, where="post", color=colour, linewidth=1.2, linestyle="--",
                        label=f"{label.split(',')[0]}, static")
        ax.set_xlabel("simulated time since the start (seconds)")
        ax.set_ylabel("network cost (records/s x one-way ms)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    return path
