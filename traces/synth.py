"""Synthetic PlanetLab-style traces calibrated on a real one (model: :mod:`traces.calibrate`).

:class:`SynthFrames` is the generator: only the AR(1) state and the outage state (one value per
pair each) and the random generator's state carry from one block of frames to the next, so a block
of any size is one vectorised numpy pass (no per-pair Python), the same seed gives the same frames
for any block sizes, and a :class:`Checkpoint` taken between blocks restarts the generator there.
:func:`generate` streams it to Parquet (a month of 100 nodes at 10 s is 2.6 G rows);
:class:`traces.synth_store.SynthStore` replays it in process without writing it.  All randomness
comes from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import dataclasses
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


class Residuals:
    """log(rtt / base) as a function of the standard-normal score ``u[frame, pair]``: per base bin,
    the real residual quantiles (linear between the 1001 fitted levels), then a Pareto tail above
    ``TAIL_LEVEL`` (the spikes), capped at the bin's ``max_log_residual``.  The bins' tables are one
    array, so a block is evaluated with one gather rather than one pass per bin."""

    def __init__(self, params: SynthParams, bins: np.ndarray):
        table = np.asarray(params.residual_quantiles, dtype=np.float64)     # (bins, levels)
        self._levels = table.shape[1]
        self._scale = (self._levels - 1) / TAIL_LEVEL
        self._value = table.ravel()
        self._slope = np.concatenate([np.diff(table, axis=1), np.zeros((len(table), 1))], axis=1).ravel()
        self._row = (bins * self._levels).astype(np.intp)                 # each pair's table row
        self._top = table[bins, -1]
        self._alpha = np.asarray(params.tail_alpha, dtype=np.float64)[bins]
        self._cap = np.asarray(params.max_log_residual, dtype=np.float64)[bins]

    def __call__(self, u: np.ndarray) -> np.ndarray:
        level = special.ndtr(u)
        position = level * self._scale
        index = position.astype(np.intp)                       # floor: position >= 0
        np.minimum(index, self._levels - 1, out=index)           # level == TAIL_LEVEL exactly: the last row
        fraction = position - index
        index += self._row
        out = self._value[index]
        out += fraction * self._slope[index]
        frame, pair = np.nonzero(level > TAIL_LEVEL)           # ~0.5 % of samples: the spikes
        if pair.size:
            above = np.maximum(1 - level[frame, pair], 1e-300)
            tail = self._top[pair] + np.log((1 - TAIL_LEVEL) / above) / self._alpha[pair]
            out[frame, pair] = np.minimum(tail, self._cap[pair])
        return out


def residual_of(params: SynthParams, u: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """log(rtt / base) for standard-normal ``u[frame, pair]`` (see :class:`Residuals`)."""
    return Residuals(params, bins)(u)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The generator's whole state before frame ``frame``: restarting from it gives the same frames."""

    frame: int
    rng: dict
    u: np.ndarray
    missing: np.ndarray


class SynthFrames:
    """The synthetic trace of ``n_nodes`` nodes, a block of frames at a time, in time order.

    Each block is ``float32[frames, pairs]`` of RTTs in ms (NaN = outage) over the off-diagonal
    pairs in row-major order (:attr:`src`, :attr:`dst`).  Per frame after the first, the random
    stream gives the AR(1) innovations, then the outage chain's draws (one of each per pair), so
    the frames do not depend on how they are cut into blocks.
    """

    def __init__(self, params: SynthParams, n_nodes: int, seed: int):
        self.params, self.n_nodes = params, n_nodes
        self._rng = np.random.default_rng(seed)
        off = ~np.eye(n_nodes, dtype=bool)
        self.src, self.dst = (a.astype(np.int32) for a in np.nonzero(off))
        self.base = base_matrix(params, n_nodes, self._rng)[off]
        self._residuals = Residuals(params, base_bins(self.base, len(params.residual_quantiles)))
        self._base32 = self.base.astype(np.float32)
        pairs = self.src.size
        self._u = self._rng.standard_normal(pairs)   # stationary start of the AR(1) process
        self._missing = self._rng.random(pairs) < params.p_enter / max(params.p_enter + params.p_exit, 1e-12)
        self._innovation = np.sqrt(max(1 - params.phi ** 2, 0.0))
        self.frame = 0                                # the next frame :meth:`take` returns

    @property
    def pairs(self) -> int:
        return self.src.size

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.frame, self._rng.bit_generator.state, self._u.copy(), self._missing.copy())

    def restore(self, checkpoint: Checkpoint) -> None:
        self._rng.bit_generator.state = checkpoint.rng
        self._u, self._missing = checkpoint.u.copy(), checkpoint.missing.copy()
        self.frame = checkpoint.frame

    def take(self, frames: int) -> np.ndarray:
        """The next ``frames`` frames as ``float32[frames, pairs]`` (ms, NaN = outage)."""
        u, missing = self._advance(frames, keep=True)
        rtt = self._base32 * np.exp(self._residuals(u).astype(np.float32))
        rtt[missing] = np.nan
        return rtt

    def skip(self, frames: int) -> None:
        """Move past ``frames`` frames without computing their RTTs (the random stream and the
        states advance exactly as :meth:`take` advances them)."""
        self._advance(frames, keep=False)

    def _advance(self, frames: int, keep: bool) -> tuple[np.ndarray, np.ndarray]:
        params, rng, pairs = self.params, self._rng, self.pairs
        u_block = np.empty((frames, pairs)) if keep else None
        missing_block = np.empty((frames, pairs), dtype=bool) if keep else None
        u, missing = self._u, self._missing
        for k in range(frames):
            if self.frame + k:
                u = params.phi * u + self._innovation * rng.standard_normal(pairs)
                flip = rng.random(pairs)
                missing = np.where(missing, flip >= params.p_exit, flip < params.p_enter)
            if keep:
                u_block[k], missing_block[k] = u, missing
        self._u, self._missing = u, missing
        self.frame += frames
        return u_block, missing_block


def generate(params: SynthParams, out_dir: Path, *, n_nodes: int, n_frames: int, interval_us: int, seed: int,
             chunk_rows: int = 4_000_000, progress: bool = False) -> fmt.TraceMeta:
    """Write a synthetic canonical trace to ``out_dir``; returns its metadata.

    A chunk of ``chunk_rows`` rows (whole frames) becomes one row group; it is compressed and
    written by a second thread while the next one is generated (numpy and Parquet's zstd release
    the GIL), so the two halves share two cores; the output is the same."""
    from tqdm import tqdm

    source = SynthFrames(params, n_nodes, seed)
    n, pairs = n_nodes, source.pairs
    chunk_frames = max(1, chunk_rows // pairs)
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
                rtt = source.take(frames).ravel()
                t = (np.arange(first, first + frames, dtype=np.int64) * interval_us).repeat(pairs)
                pending.put(pa.table({
                    "t": t,
                    "src": np.tile(source.src, frames),
                    "dst": np.tile(source.dst, frames),
                    "rtt_ms": pa.array(rtt, mask=np.isnan(rtt)),
                }))
                bar.update(frames)
        finally:
            pending.put(None)
            thread.join()
        if failed:
            raise failed[0]
    meta = trace_meta(params, out_dir.name, n_nodes=n, n_frames=n_frames, interval_us=interval_us, seed=seed)
    fmt.write_nodes(out_dir, fmt.nodes_table(node_names(n)))
    fmt.write_meta(out_dir, meta)
    (out_dir / "params.json").write_text(params.to_json())
    return meta


def trace_meta(params: SynthParams, name: str, *, n_nodes: int, n_frames: int, interval_us: int,
               seed: int) -> fmt.TraceMeta:
    """The ``meta.json`` of a synthetic trace (written by :func:`generate`, held by the in-process store)."""
    return fmt.TraceMeta(
        name=name, n_nodes=n_nodes, n_frames=n_frames, interval_us=interval_us, interval_measured=False,
        source=f"replicast trace synth --like {params.like} --seed {seed}",
        notes="synthetic; generator parameters in params.json", directed=True,
    )


def node_names(n_nodes: int) -> list[str]:
    return [f"synth-{i}" for i in range(n_nodes)]
