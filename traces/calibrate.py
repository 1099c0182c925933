"""Statistics of a trace, and the synthetic-generator parameters fitted from them.

The statistics the generator must reproduce (docs/traces.md, within 10 %), all over off-diagonal samples:
``median``, ``p90``, ``p99`` (nearest rank), ``outage_rate`` (missing / all samples) and
``frame_corr`` (Pearson correlation of log RTT between consecutive frames, over pairs valid in both;
logs because one 90 s spike would otherwise dominate a plain correlation).

The model (see :mod:`traces.synth`): rtt(i, j, t) = base(i, j) * exp(r(i, j, t)) where
* base comes from a metric embedding (so the triangle inequality mostly holds), mapped by rank onto
  the real distribution of per-pair median RTTs, with the real amount of asymmetry;
* r is a Gaussian AR(1) process (the frame-to-frame memory, ``phi``) pushed through the real
  residual quantile function (jitter) whose top ``1 - tail_level`` is a Pareto tail (spikes);
* outages are a two-state Markov chain per pair (``p_enter``, ``p_exit``).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special

from replicast.traces.errors import TraceError

STAT_NAMES = ("median", "p90", "p99", "outage_rate", "frame_corr")
TAIL_LEVEL = 0.995
#: Residual tables per base bin; each bin needs enough pairs (>= 50) for a stable tail.
MAX_BASE_BINS = 32
MIN_PAIRS_PER_BIN = 50


def base_bins(values: np.ndarray, n_bins: int) -> np.ndarray:
    """The base bin (0..n_bins-1) of each pair: equal-count bins by rank of ``values``."""
    return np.minimum((rank_levels(values) * n_bins).astype(int), n_bins - 1)


def rank_levels(values: np.ndarray) -> np.ndarray:
    """Each value's rank level in (0, 1): the empirical CDF, ties broken by position."""
    ranks = np.empty(values.size)
    ranks[np.argsort(values, kind="stable")] = np.arange(values.size)
    return (ranks + 0.5) / values.size


def measure(frames: np.ndarray) -> dict[str, float]:
    """The calibration statistics of ``frames[t, src, dst]`` (ms, NaN = outage)."""
    n = frames.shape[1]
    off = ~np.eye(n, dtype=bool)
    samples = frames[:, off]  # (frames, pairs)
    valid = samples[~np.isnan(samples)]
    if valid.size == 0:
        raise TraceError("trace has no valid measurements")
    median, p90, p99 = np.quantile(valid, [0.5, 0.9, 0.99], method="inverted_cdf")
    logs = np.log(np.maximum(samples, 1e-3))
    both = ~np.isnan(samples[1:]) & ~np.isnan(samples[:-1])
    frame_corr = np.corrcoef(logs[1:][both], logs[:-1][both])[0, 1] if both.sum() > 2 else float("nan")
    return {
        "median": float(median), "p90": float(p90), "p99": float(p99),
        "outage_rate": float(np.isnan(samples).mean()), "frame_corr": float(frame_corr),
    }


@dataclasses.dataclass(frozen=True)
class SynthParams:
    """Generator parameters; JSON-serialisable so a synthetic trace records how it was made."""

    like: str
    base_log_quantiles: list[float]  # log per-pair median RTT (ms) at evenly spaced levels 0..1
    symmetry: float                  # corr(log base(i, j), log base(j, i)) in the real trace
    # Per base bin (pairs split by base rank into len(...) equal bins, because relative jitter
    # shrinks as base latency grows: a 10 ms pair spikes x100, a 300 ms pair rarely x3):
    residual_quantiles: list[list[float]]  # log(rtt / base) at evenly spaced levels 0..TAIL_LEVEL
    tail_alpha: list[float]                # Pareto index of rtt / base above TAIL_LEVEL (spikes)
    max_log_residual: list[float]          # cap on spikes: 2 x the largest real log ratio
    phi: float                       # AR(1) coefficient of the normal scores of residuals
    p_enter: float                   # P(outage at t+1 | valid at t)
    p_exit: float                    # P(valid at t+1 | outage at t)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "SynthParams":
        return cls(**json.loads(text))


def fit(frames: np.ndarray, like: str = "") -> SynthParams:
    """Fit :class:`SynthParams` to ``frames[t, src, dst]`` (ms, NaN = outage)."""
    n_frames, n, _ = frames.shape
    if n_frames < 3 or n < 3:
        raise TraceError(f"trace {like!r}: need at least 3 frames of 3 nodes to fit a generator")
    off = ~np.eye(n, dtype=bool)
    with np.errstate(all="ignore"):
        base = np.nanmedian(frames, axis=0)  # per-pair median; NaN for never-measured pairs
    has_base = off & ~np.isnan(base) & (base > 0)
    log_base = np.log(base[has_base])
    both = has_base & has_base.T
    symmetry = float(np.corrcoef(np.log(base[both]), np.log(base.T[both]))[0, 1]) if both.sum() > 2 else 1.0

    samples = frames[:, has_base]
    residual = np.log(np.maximum(samples, 1e-3)) - np.log(base[has_base])
    valid = ~np.isnan(samples)
    flat = residual[valid]
    levels = np.linspace(0.0, TAIL_LEVEL, 1001)
    n_bins = int(np.clip(has_base.sum() // MIN_PAIRS_PER_BIN, 1, MAX_BASE_BINS))
    pair_bin = base_bins(np.log(base[has_base]), n_bins)
    residual_quantiles, tail_alpha, max_log_residual = [], [], []
    for b in range(n_bins):
        in_bin = residual[:, pair_bin == b][valid[:, pair_bin == b]]
        quantiles = np.quantile(in_bin, levels)
        # Hill estimator of the Pareto index over the top 1 - TAIL_LEVEL of rtt / base.
        excess = in_bin[in_bin > quantiles[-1]] - quantiles[-1]
        residual_quantiles.append(quantiles.tolist())
        tail_alpha.append(float(1.0 / excess.mean()) if excess.size and excess.mean() > 0 else 10.0)
        max_log_residual.append(float(2 * in_bin.max()))

    # Normal scores (rank -> Phi^-1) make phi the lag-1 correlation of the Gaussian copula.
    scores = np.full(residual.shape, np.nan)
    scores[valid] = special.ndtri(rank_levels(flat))
    pair_ok = valid[1:] & valid[:-1]
    phi = float(np.corrcoef(scores[1:][pair_ok], scores[:-1][pair_ok])[0, 1])

    missing = np.isnan(frames[:, off])
    was_valid, was_missing = ~missing[:-1], missing[:-1]
    p_enter = float((missing[1:] & was_valid).sum() / max(was_valid.sum(), 1))
    p_exit = float((~missing[1:] & was_missing).sum() / max(was_missing.sum(), 1)) if was_missing.any() else 1.0
    return SynthParams(
        like=like,
        base_log_quantiles=np.quantile(log_base, np.linspace(0, 1, 1001)).tolist(),
        symmetry=symmetry,
        residual_quantiles=residual_quantiles,
        tail_alpha=tail_alpha,
        max_log_residual=max_log_residual,
        phi=phi,
        p_enter=p_enter,
        p_exit=p_exit,
    )


def fit_store(store, max_frames: int = 2000) -> SynthParams:
    """Fit on the first ``max_frames`` frames of a :class:`traces.store.TraceStore`."""
    frames = np.stack([store.frame(k) for k in range(min(max_frames, store.n_frames))])
    return fit(frames, like=store.meta.name)


# -- "PlanetLab-like": PlanetLab's static structure, Seattle's dynamics ------------------------------

#: ``--like`` name of the composite model: static structure from the shipped PlanetLab frames
#: (:data:`PLANETLAB_STATIC`), dynamics (jitter, spikes, frame-to-frame memory, outages) from Seattle.
PLANETLAB_LIKE = "planetlab"
#: Package data: the PlanetLab frames' static summary (:func:`fit_static`), with its LICENSE and CITATION.
PLANETLAB_STATIC = Path(__file__).resolve().parent / "data" / "planetlab-static" / "static.json"
STATIC_KEYS = ("base_log_quantiles", "symmetry")


def fit_static(frames: np.ndarray, like: str = "") -> dict[str, Any]:
    """The static structure of ``frames[t, src, dst]`` (ms, NaN = outage): the distribution of
    per-pair median RTTs (log, at 1001 evenly spaced levels) and their asymmetry, as :func:`fit`
    computes them, plus what they were computed from."""
    n_frames, n, _ = frames.shape
    off = ~np.eye(n, dtype=bool)
    with warnings.catch_warnings():         # pairs never measured have no median (NaN, dropped below)
        warnings.simplefilter("ignore", RuntimeWarning)
        base = np.nanmedian(frames, axis=0)
    has_base = off & ~np.isnan(base) & (base > 0)
    both = has_base & has_base.T
    symmetry = float(np.corrcoef(np.log(base[both]), np.log(base.T[both]))[0, 1]) if both.sum() > 2 else 1.0
    return {"like": like, "frames": int(n_frames), "nodes": int(n), "pairs_with_median": int(has_base.sum()),
            "base_log_quantiles": [round(float(v), 6) for v in
                                   np.quantile(np.log(base[has_base]), np.linspace(0, 1, 1001))],
            "symmetry": round(symmetry, 6)}


def planetlab_static_from(directory: Path) -> dict[str, Any]:
    """:func:`fit_static` of the NetLatency PlanetLab frames in ``directory`` (ms, 0 = not measured)."""
    from replicast.traces.netlatency import frame_files, parse_matrix

    frames = []
    for path in frame_files(directory):
        matrix = parse_matrix(path.read_text(encoding="utf-8"), str(path))
        frames.append(np.where(matrix == 0, np.nan, matrix))
    return fit_static(np.stack(frames), like="PlanetLab (NetLatency, 490 nodes)")


def like_planetlab(dynamics: SynthParams, static: dict[str, Any] | None = None) -> SynthParams:
    """A model with PlanetLab's static structure and ``dynamics``' jitter, spikes and outages (jitter
    is relative, ``rtt = base · exp(r)``, with tables per base-rank bin, so it carries over)."""
    if static is None:
        try:
            static = json.loads(PLANETLAB_STATIC.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise TraceError(f"{PLANETLAB_STATIC}: cannot read the PlanetLab calibration ({error}); "
                             f"reinstall replicast") from None
    return dataclasses.replace(dynamics, like=f"{PLANETLAB_LIKE} (static: {static['like']}; dynamics: "
                                              f"{dynamics.like})",
                               **{key: static[key] for key in STATIC_KEYS})


if __name__ == "__main__":      # python -m replicast.traces.calibrate NETLATENCY_PLANETLAB_DIR: rebuild the data file
    import sys

    PLANETLAB_STATIC.write_text(json.dumps(planetlab_static_from(Path(sys.argv[1])), indent=0) + "\n",
                                encoding="utf-8")
    print(f"wrote {PLANETLAB_STATIC}")
