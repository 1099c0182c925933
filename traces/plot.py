"""``replicast trace plot``: per-pair median-latency heatmap and the RTT distribution, one PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def sampled_frames(store, max_frames: int, progress: bool = False) -> np.ndarray:
    """Up to ``max_frames`` evenly spaced frames ``[k, src, dst]``: bounded memory on long traces."""
    from tqdm import tqdm

    picks = np.unique(np.linspace(0, store.n_frames - 1, min(max_frames, store.n_frames)).astype(int))
    return np.stack([store.frame(int(k)) for k in tqdm(picks, desc="frames", unit="frame", disable=not progress)])


def plot_trace(store, out: Path, *, max_frames: int = 2000, progress: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must precede pyplot
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    frames = sampled_frames(store, max_frames, progress)
    off = ~np.eye(store.n_nodes, dtype=bool)
    with np.errstate(all="ignore"):
        median = np.nanmedian(frames, axis=0)
    median[~off] = np.nan
    samples = frames[:, off]
    samples = np.sort(samples[~np.isnan(samples) & (samples > 0)])

    fig, (heat, dist) = plt.subplots(1, 2, figsize=(13, 5.5))
    image = heat.imshow(median, norm=LogNorm(), cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=heat, label="median RTT (ms)")
    heat.set(title=f"{store.meta.name}: per-pair median RTT", xlabel="dst node", ylabel="src node")
    ccdf = 1.0 - np.arange(samples.size) / samples.size
    dist.loglog(samples, ccdf)
    dist.set(title=f"RTT distribution ({samples.size:,} samples from {len(frames)} frames)",
             xlabel="RTT (ms)", ylabel="P(RTT > x)")
    dist.grid(True, which="both", alpha=0.3)
    for q in (0.5, 0.9, 0.99):
        value = samples[min(int(np.ceil(q * samples.size)) - 1, samples.size - 1)]
        dist.axvline(value, color="grey", ls=":", lw=1)
        dist.annotate(f"p{int(q * 100)} {value:.0f} ms", (value, 1 - q), fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
