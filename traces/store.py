"""The replay store the simulator reads: O(1) ``latency_ms(src, dst, t_us)`` over a canonical trace.

The trace is cut into chunks of whole frames (``chunk_frames`` frames, sized so a chunk is about
``chunk_bytes``); a chunk is read from Parquet on first use into a dense float32 array
``[frame, src, dst]`` (NaN = outage) and kept in a small LRU cache, so a month-long trace replays in
bounded memory while every lookup is an array index.

Semantics (docs/traces.md):
* Sample-and-hold: the sample at frame k holds for ``[k * interval, (k + 1) * interval)``.
* ``t_us`` past the end is clamped to the last frame; a negative ``t_us`` is a ValueError.
* A null ``rtt_ms`` or a missing row is an outage: ``latency_ms`` returns None.
* ``src == dst`` is 0.0 ms (self pairs are not stored).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

from replicast.traces import catalog
from replicast.traces import format as fmt
from replicast.traces.errors import TraceError

DEFAULT_CHUNK_BYTES = 128 << 20


class TraceStore:
    """Lookups into one canonical trace; build with :meth:`TraceStore.open`."""

    def __init__(self, trace_dir: Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, cache_chunks: int = 2):
        path = Path(trace_dir)
        meta = fmt.read_meta(path)
        nodes: list[str] = fmt.read_nodes(path).column("name").to_pylist()
        if len(nodes) != meta.n_nodes:
            raise TraceError(f"{fmt.nodes_path(path)}: {len(nodes)} nodes but meta.json says {meta.n_nodes}")
        self._fragments = list(fmt.dataset(path).get_fragments())
        self._setup(path, meta, nodes, max(1, chunk_bytes // (4 * meta.n_nodes * meta.n_nodes)), cache_chunks)

    def _setup(self, path: Path, meta: fmt.TraceMeta, nodes: list[str], chunk_frames: int, cache_chunks: int) -> None:
        """What every store has, wherever its frames come from (:meth:`_load` makes a chunk)."""
        self.path, self.meta, self.nodes, self.n_nodes = path, meta, nodes, len(nodes)
        self.interval_us = meta.interval_us
        self.n_frames = meta.n_frames
        self.duration_us = meta.duration_us
        self.chunk_frames = max(1, min(self.n_frames, chunk_frames))
        self._cache: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self._cache_chunks = max(1, cache_chunks)
        self._outages: dict[tuple[int, int], list[tuple[int, int]]] | None = None

    @classmethod
    def open(cls, name_or_path: str | os.PathLike, **options) -> "TraceStore":
        """Open a named trace (``seattle``, ``planetlab490``) or a trace directory."""
        return cls(catalog.resolve(name_or_path), **options)

    # -- lookups -------------------------------------------------------------------------------

    def frame_index(self, t_us: int) -> int:
        """The frame in effect at ``t_us`` (clamped to the last frame)."""
        if t_us < 0:
            raise ValueError(f"t_us={t_us}: trace time starts at 0")
        return min(t_us // self.interval_us, self.n_frames - 1)

    def latency_ms(self, src: int, dst: int, t_us: int) -> float | None:
        """RTT in ms between ``src`` and ``dst`` at ``t_us``, or None during an outage."""
        self._check_pair(src, dst)
        if src == dst:
            return 0.0
        frame = self.frame_index(t_us)
        value = self._chunk(frame // self.chunk_frames)[frame % self.chunk_frames, src, dst]
        return None if value != value else float(value)  # NaN != NaN: the outage marker

    def one_way_us(self, src: int, dst: int, t_us: int) -> int | None:
        """One-way delay = RTT / 2 in integer µs (DESIGN.md §8), or None during an outage."""
        rtt = self.latency_ms(src, dst, t_us)
        return None if rtt is None else round(rtt * 500.0)

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` as a read-only ``(n_nodes, n_nodes)`` float32 array in ms, NaN = outage."""
        if not 0 <= index < self.n_frames:
            raise IndexError(f"frame {index} outside 0..{self.n_frames - 1}")
        return self._chunk(index // self.chunk_frames)[index % self.chunk_frames]

    def frame_at(self, t_us: int) -> np.ndarray:
        return self.frame(self.frame_index(t_us))

    def chunks(self):
        """Yield ``(first_frame, array[frames, src, dst])`` over the whole trace, in time order."""
        for number in range((self.n_frames + self.chunk_frames - 1) // self.chunk_frames):
            yield number * self.chunk_frames, self._chunk(number)

    def reliable_nodes(self, n: int, frames: int = 360) -> list[int]:
        """The ``n`` nodes with the fewest missing samples (to and from) in the first ``frames``
        frames, ties by node order, in node order: "distant servers that reliably communicate with
        others" (§VI-A)."""
        if not 0 < n <= self.n_nodes:
            raise ValueError(f"cannot pick {n} of the trace's {self.n_nodes} nodes")
        window = np.stack([self.frame(f) for f in range(min(self.n_frames, frames))])
        missing = np.isnan(window).sum(axis=(0, 2)) + np.isnan(window).sum(axis=(0, 1))
        return sorted(np.argsort(missing, kind="stable")[:n].tolist())

    def outages(self, src: int, dst: int) -> list[tuple[int, int]]:
        """Outages of ``src -> dst`` as ``[t_start_us, t_end_us)`` intervals, in time order.

        An outage starts at the first missing sample and ends at the next valid one (or at
        ``duration_us``).  The first call scans the whole trace once for every pair.
        """
        self._check_pair(src, dst)
        if self._outages is None:
            self._outages = self._scan_outages()
        return list(self._outages.get((src, dst), []))

    # -- loading -------------------------------------------------------------------------------

    def _check_pair(self, src: int, dst: int) -> None:
        if not (0 <= src < self.n_nodes and 0 <= dst < self.n_nodes):
            raise IndexError(f"pair ({src}, {dst}) outside the trace's {self.n_nodes} nodes")

    def _chunk(self, number: int) -> np.ndarray:
        chunk = self._cache.get(number)
        if chunk is None:
            chunk = self._load(number)
            self._cache[number] = chunk
            while len(self._cache) > self._cache_chunks:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(number)
        return chunk

    def _load(self, number: int) -> np.ndarray:
        first = number * self.chunk_frames
        frames = min(self.chunk_frames, self.n_frames - first)
        n = self.n_nodes
        chunk = np.full((frames, n, n), np.nan, dtype=np.float32)
        lo, hi = first * self.interval_us, (first + frames) * self.interval_us
        wanted = (ds.field("t") >= lo) & (ds.field("t") < hi)
        for fragment in self._fragments:
            for batch in fragment.to_batches(columns=list(fmt.SCHEMA.names), filter=wanted):
                t = batch.column("t").to_numpy()
                src = batch.column("src").to_numpy()
                dst = batch.column("dst").to_numpy()
                if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
                    raise TraceError(f"{fragment.path}: node id outside 0..{n - 1} (nodes.parquet has {n} nodes)")
                rtt = batch.column("rtt_ms").to_numpy(zero_copy_only=False)     # a null is NaN
                # one flat index (int64: t is) scatters a third faster than three index arrays
                chunk.reshape(-1)[((t // self.interval_us - first) * n + src) * n + dst] = rtt
        np.einsum("fii->fi", chunk)[:] = 0.0  # the diagonal: a node reaches itself instantly
        chunk.flags.writeable = False
        return chunk

    def _scan_outages(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        n = self.n_nodes
        off_diagonal = ~np.eye(n, dtype=bool)
        was_missing = np.zeros((n, n), dtype=bool)
        starts, ends = [], []  # (frame, pair) arrays of outage starts and ends
        for first, chunk in self.chunks():
            missing = np.isnan(chunk) & off_diagonal
            step = np.diff(np.concatenate([was_missing[None], missing]).astype(np.int8), axis=0)
            for edges, sign in ((starts, 1), (ends, -1)):
                frame, s, d = np.nonzero(step == sign)
                edges.append((frame + first, s * n + d))
            was_missing = missing[-1]
        s, d = np.nonzero(was_missing)
        ends.append((np.full(s.size, self.n_frames), s * n + d))
        result: dict[tuple[int, int], list[tuple[int, int]]] = {}
        start_frame, start_pair = (np.concatenate(x) for x in zip(*starts))
        end_frame, end_pair = (np.concatenate(x) for x in zip(*ends))
        # Starts and ends alternate per pair, so sorting both by (pair, frame) pairs them up.
        start_order = np.lexsort((start_frame, start_pair))
        end_order = np.lexsort((end_frame, end_pair))
        for pair, begin, end in zip(start_pair[start_order], start_frame[start_order], end_frame[end_order]):
            result.setdefault(divmod(int(pair), n), []).append((int(begin) * self.interval_us, int(end) * self.interval_us))
        return result
