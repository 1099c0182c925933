"""A synthetic trace replayed in process: :class:`SynthStore` is a :class:`traces.store.TraceStore`
whose chunks :class:`traces.synth.SynthFrames` makes on first use instead of reading them from
Parquet, so a month of 100 nodes (2.6 G samples, ~10 GB written) replays in the memory of a few
chunks with no disk at all, frame for frame what ``replicast trace synth`` with the same parameters
and seed writes (docs/traces.md, "In process").

The generator only runs forward, so the store keeps :class:`traces.synth.Checkpoint` s at most
``checkpoints`` evenly spaced chunk boundaries: a chunk before the generator's position restarts
from the nearest one at or before it; one after it is reached by skipping (the random stream and
the states advance, no RTT is computed).  Reading in time order — what the simulators do — never
restarts.

A frame read on its own — not the one after the last frame read, in no cached chunk, as the
placement's network samples a few frames across the whole trace — is generated alone (the
generator skips to it and takes one frame) rather than as its whole chunk: a month's sixty samples
cost sixty frames' RTTs instead of sixty hours'.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replicast.traces.calibrate import SynthParams
from replicast.traces.store import TraceStore
from replicast.traces.synth import Checkpoint, SynthFrames, node_names, trace_meta

#: An hour of 10-s frames a chunk: a timing window and its look-ahead fit in a few (100 nodes: 14 MB each).
CHUNK_FRAMES = 360


class SynthStore(TraceStore):
    """``replicast trace synth``'s trace of ``params`` for ``n_nodes`` × ``n_frames`` at ``seed``,
    generated a chunk at a time as it is read."""

    def __init__(self, params: SynthParams, *, n_nodes: int, n_frames: int, interval_us: int, seed: int,
                 name: str = "synth", chunk_frames: int = CHUNK_FRAMES, cache_chunks: int = 4,
                 checkpoints: int = 64):
        meta = trace_meta(params, name, n_nodes=n_nodes, n_frames=n_frames, interval_us=interval_us, seed=seed)
        self._setup(Path(name), meta, node_names(n_nodes), chunk_frames, cache_chunks)
        self.params, self.seed = params, seed
        self._frames = SynthFrames(params, n_nodes, seed)
        chunks = -(-self.n_frames // self.chunk_frames)
        #: frames between checkpoints: whole chunks, at most ``checkpoints`` of them over the trace
        self._spacing = self.chunk_frames * max(1, -(-chunks // max(1, checkpoints)))
        self._checkpoints: dict[int, Checkpoint] = {0: self._frames.checkpoint()}
        self._last_read = -1                              # the frame :meth:`frame` returned last
        self._single: tuple[int, np.ndarray] | None = None    # a frame generated alone, and its index

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` (as :meth:`TraceStore.frame`); one read on its own is generated alone."""
        number = index // self.chunk_frames
        sequential = index == self._last_read + 1 or number in self._cache
        self._last_read = index
        if sequential or not 0 <= index < self.n_frames:
            return super().frame(index)
        if self._single is None or self._single[0] != index:
            self._seek(index)
            self._single = (index, self._dense(self._frames.take(1))[0])
            self._remember()
        return self._single[1]

    def _load(self, number: int) -> np.ndarray:
        first = number * self.chunk_frames
        frames = min(self.chunk_frames, self.n_frames - first)
        self._seek(first)
        block = self._frames.take(frames)
        self._remember()
        return self._dense(block)

    def _dense(self, block: np.ndarray) -> np.ndarray:
        """``float32[frames, pairs]`` as read-only ``[frames, src, dst]`` frames."""
        n = self.n_nodes
        chunk = np.zeros((len(block), n, n), dtype=np.float32)   # the diagonal: a node reaches itself instantly
        chunk[:, self._frames.src, self._frames.dst] = block
        chunk.flags.writeable = False
        return chunk

    def _seek(self, frame: int) -> None:
        """Put the generator before ``frame``: from the nearest checkpoint if it is past it (or
        further behind than that checkpoint), then skipping forward, checkpointing on the way."""
        source = self._frames
        if source.frame != frame:
            start = max(f for f in self._checkpoints if f <= frame)
            if source.frame > frame or source.frame < start:
                source.restore(self._checkpoints[start])
        while source.frame < frame:
            boundary = (source.frame // self._spacing + 1) * self._spacing
            source.skip(min(frame, boundary) - source.frame)
            self._remember()

    def _remember(self) -> None:
        at = self._frames.frame
        if at % self._spacing == 0 and at not in self._checkpoints and at < self.n_frames:
            self._checkpoints[at] = self._frames.checkpoint()
