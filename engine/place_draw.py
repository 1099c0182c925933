"""A picture of a deployment: servers at their network coordinates, replicas on them, stream replicas as edges.

Servers are drawn at the first two principal components of their Vivaldi vectors (ms), so nearby
points are servers with a short RTT; height (the access link) is not drawn.  Entry points are
triangles, operator replicas circles (one colour per operator), applications squares; a stream
replica between two servers is an arrow whose width grows with its rate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replicast.placement.model import Deployment, Network, Workload

_MARKERS = {"entry": "^", "operator": "o", "application": "s"}


def plane(network: Network) -> np.ndarray:
    """``(n, 2)`` positions in ms: the coordinates' two principal components."""
    vec = network.coordinates.vec * 1000.0
    centred = vec - vec.mean(axis=0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    return centred @ axes[:2].T


def draw(deployment: Deployment, network: Network, workload: Workload, out: Path, *, title: str = "") -> Path:
    """Write the picture of ``deployment`` to ``out`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt

    xy = plane(network)
    fig, ax = plt.subplots(figsize=(11, 8.5))
    ax.scatter(xy[:, 0], xy[:, 1], s=12, c="0.8", zorder=1, label="server")
    top = max((workload.rate[s.source.name] for s in deployment.streams), default=1.0) or 1.0
    for s in sorted(deployment.streams, key=lambda s: (s.source, s.target, s.port)):
        a, b = deployment.hosts[s.source], deployment.hosts[s.target]
        if a != b:
            ax.annotate("", xy=xy[b], xytext=xy[a], zorder=2,
                        arrowprops=dict(arrowstyle="-|>", lw=0.4 + 2.0 * workload.rate[s.source.name] / top,
                                        color="0.35", alpha=0.45, shrinkA=4, shrinkB=4))
    colours = plt.get_cmap("tab10")
    hosted: dict[int, list[str]] = {}
    operators = 0
    for name in workload.nodes():
        kind = workload.kind(name)
        colour = colours(operators % 10) if kind == "operator" else "black"
        operators += kind == "operator"
        servers = [deployment.hosts[r] for r in deployment.replicas_of(name)]
        ax.scatter(xy[servers, 0], xy[servers, 1], marker=_MARKERS[kind], s=70, color=colour, edgecolors="white",
                   zorder=3, label=name, alpha=0.9)
        for replica in deployment.replicas_of(name):
            hosted.setdefault(deployment.hosts[replica], []).append(str(replica))
    for server, labels in hosted.items():
        ax.annotate("\n".join(labels), xy[server], xytext=(6, 0), textcoords="offset points", fontsize=6,
                    va="center", zorder=4)
    _frame(ax, xy, sorted(hosted))
    ax.legend(fontsize=7, loc="best", ncol=2, markerscale=0.8)
    ax.set_xlabel("network coordinate, 1st principal component (ms)")
    ax.set_ylabel("2nd principal component (ms)")
    ax.set_title(title or "deployment")
    ax.grid(alpha=0.2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def _frame(ax, xy: np.ndarray, used: list[int]) -> None:
    """Zoom on the bulk of the servers and every used one (a few far-off servers would squash the rest)."""
    lo = np.minimum(np.percentile(xy, 5, axis=0), xy[used].min(axis=0))
    hi = np.maximum(np.percentile(xy, 95, axis=0), xy[used].max(axis=0))
    pad = (hi - lo) * 0.08 + 1.0
    ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
    ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
