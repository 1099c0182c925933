"""Synthetic PlanetLab-style traces calibrated on a real one (model: :mod:`traces.calibrate`).

Generation is chunked: only the AR(1) state and the outage state (one ``n x n`` array each) carry
from one chunk of frames to the next, so a month of 100 nodes at 10 s (2.6 G rows) streams to
Parquet in ``chunk_rows``-sized pieces.  All randomness comes from ``numpy.random.default_rng(seed)``.
A chunk is compressed and written by a second thread while the next one is generated (numpy and
Parquet's zstd both release the GIL, so the two halves share two cores; the output is the same).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
from scipy import special

from replicast.traces import format as fmt
from replicast.traces.calibrate import TAIL_LEVEL, SynthParams, rank_levels, base_bins

#: Continents-and-access-links embedding: cluster centres in a 2-D plane (arbitrary units) and the
#: spread of nodes around them; each node also gets an access "height" (Vivaldi's height vector).
_CLUSTERS = 5
_CLUSTER_SPREAD = 0.15


def base_matrix(params: SynthParams, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-pair base RTT (ms): embedding distances, asymmetry, then rank-mapped onto the real medians."""
    centres = rng.uniform(0, 1, size=(_CLUSTERS, 2))
    points = centres[rng.integers(0, _CLUSTERS, size=n)] + rng.normal(0, _CLUSTER_SPREAD, size=(n, 2))
    heights = rng.exponential(0.05, size=n)
    distance = np.linalg.norm(points[:, None] - points[None], axis=-1) + heights[:, None] + heights[None]
    off = ~np.eye(n, dtype=bool)
    # Asymmetry: mix the symmetric score with directed noise so corr(log b_ij, log b_ji) = symmetry.
    symmetric = _normal_scores(np.log(distance[off]))
    score = np.zeros((n, n))
    score[off] = symmetric
    rho = float(np.clip(params.symmetry, 0.0, 1.0))
    score = np.sqrt(rho) * score + np.sqrt(1 - rho) * rng.standard_normal((n, n))
    base = np.zeros((n, n))
    levels = np.linspace(0, 1, len(params.base_log_quantiles))
    base[off] = np.exp(np.interp(special.ndtr(_normal_scores(score[off])), levels, params.base_log_quantiles))
    return base


def _normal_scores(values: np.ndarray) -> np.ndarray:
    return special.ndtri(rank_levels(values))


def residual_of(params: SynthParams, u: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """log(rtt / base) for standard-normal ``u[frame, pair]``: per base bin, the real residual
    quantiles, then a Pareto tail (the spikes)."""
    level = special.ndtr(u)
    out = np.empty_like(level)
    grid = np.linspace(0, TAIL_LEVEL, len(params.residual_quantiles[0]))
    for b, quantiles in enumerate(params.residual_quantiles):
        cols = bins == b
        lv = level[:, cols]
        body = np.interp(lv, grid, quantiles)
        with np.errstate(divide="ignore"):
            tail = quantiles[-1] + np.log((1 - TAIL_LEVEL) / np.maximum(1 - lv, 1e-300)) / params.tail_alpha[b]
        out[:, cols] = np.minimum(np.where(lv > TAIL_LEVEL, tail, body), params.max_log_residual[b])
    return out


def generate(params: SynthParams, out_dir: Path, *, n_nodes: int, n_frames: int, interval_us: int, seed: int,
             chunk_rows: int = 4_000_000, progress: bool = False) -> fmt.TraceMeta:
    """Write a synthetic canonical trace to ``out_dir``; returns its metadata."""
    from tqdm import tqdm

    rng = np.random.default_rng(seed)
    n = n_nodes
    off = ~np.eye(n, dtype=bool)
    src, dst = np.nonzero(off)
    base = base_matrix(params, n, rng)[off]
    bins = base_bins(base, len(params.residual_quantiles))
    u = rng.standard_normal(src.size)  # stationary start of the AR(1) process
    missing = rng.random(src.size) < params.p_enter / max(params.p_enter + params.p_exit, 1e-12)
    innovation = np.sqrt(max(1 - params.phi**2, 0.0))
    chunk_frames = max(1, chunk_rows // src.size)
    pending: queue.Queue = queue.Queue(maxsize=1)      # one chunk waiting: memory stays ~3 chunks
    failed: list[BaseException] = []

    def write_chunks(writer: fmt.TraceWriter) -> None:
        while (table := pending.get()) is not None:
            if not failed:
                try:
                    writer.write(table)
                except BaseException as error:     # reported by the generating thread
                    failed.append(error)

    with fmt.TraceWriter(out_dir) as writer, tqdm(total=n_frames, unit="frame", disable=not progress,
                                                  desc="synth") as bar:
        thread = threading.Thread(target=write_chunks, args=(writer,), daemon=True)
        thread.start()
        try:
            for first in range(0, n_frames, chunk_frames):
                if failed:
                    break
                frames = min(chunk_frames, n_frames - first)
                u_chunk = np.empty((frames, src.size))
                missing_chunk = np.empty((frames, src.size), dtype=bool)
                for k in range(frames):
                    if first + k:
                        u = params.phi * u + innovation * rng.standard_normal(src.size)
                        flip = rng.random(src.size)
                        missing = np.where(missing, flip >= params.p_exit, flip < params.p_enter)
                    u_chunk[k], missing_chunk[k] = u, missing
                rtt = (base * np.exp(residual_of(params, u_chunk, bins))).astype(np.float32)
                t = (np.arange(first, first + frames, dtype=np.int64) * interval_us).repeat(src.size)
                pending.put(pa.table({
                    "t": t,
                    "src": np.tile(src.astype(np.int32), frames),
                    "dst": np.tile(dst.astype(np.int32), frames),
                    "rtt_ms": pa.array(rtt.ravel(), mask=missing_chunk.ravel()),
                }))
                bar.update(frames)
        finally:
            pending.put(None)
            thread.join()
        if failed:
            raise failed[0]
    meta = fmt.TraceMeta(
        name=out_dir.name, n_nodes=n, n_frames=n_frames, interval_us=interval_us, interval_measured=False,
        source=f"replicast trace synth --like {params.like} --seed {seed}",
        notes="synthetic; generator parameters in params.json", directed=True,
    )
    fmt.write_nodes(out_dir, fmt.nodes_table([f"synth-{i}" for i in range(n)]))
    fmt.write_meta(out_dir, meta)
    (out_dir / "params.json").write_text(params.to_json())
    return meta
