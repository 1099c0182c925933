"""Multi-panel figures for the experiments (one PNG, panels side by side, shared axes)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


@contextmanager
def panels(path: Path, title: str, count: int, *, width: float = 3.6, height: float = 3.8, sharey: bool = True,
           sharex: bool = False):
    """Yields ``count`` axes in one row; then titles the figure, saves it at ``path`` and closes it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, count, figsize=(width * count, height), dpi=120, sharey=sharey, sharex=sharex,
                             squeeze=False)
    try:
        yield list(axes[0])
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
