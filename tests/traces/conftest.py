"""Shared fixtures: one local[2] Spark session per test process, and small hand-made traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from replicast.traces import format as fmt

NETLATENCY = Path(__file__).resolve().parents[3] / "shared" / "traces" / "netlatency"


@pytest.fixture(scope="session")
def spark():
    from replicast.traces.jobs.session import spark_session

    session = spark_session("local[2]", app_name="replicast-tests", shuffle_partitions=2, driver_memory="1g")
    yield session
    session.stop()


def write_trace(path: Path, frames: np.ndarray, interval_us: int = 1_000_000, names=None) -> Path:
    """A canonical trace from ``frames[t, src, dst]`` (ms, NaN = outage; the diagonal is ignored)."""
    n_frames, n, _ = frames.shape
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    values = frames[:, src, dst].ravel()
    table = pa.table({
        "t": np.repeat(np.arange(n_frames, dtype=np.int64) * interval_us, src.size),
        "src": np.tile(src, n_frames).astype(np.int32),
        "dst": np.tile(dst, n_frames).astype(np.int32),
        "rtt_ms": pa.array(values.astype(np.float32), mask=np.isnan(values)),
    })
    with fmt.TraceWriter(path) as writer:
        writer.write(table)
    fmt.write_nodes(path, fmt.nodes_table(names or [f"n{i}" for i in range(n)]))
    fmt.write_meta(path, fmt.TraceMeta(name=path.name, n_nodes=n, n_frames=n_frames, interval_us=interval_us,
                                       interval_measured=True))
    return path


@pytest.fixture
def random_frames():
    """12 frames of 5 nodes, integer ms, with ~15% outages (including a run at the end)."""
    rng = np.random.default_rng(3)
    frames = rng.integers(5, 400, size=(12, 5, 5)).astype(np.float64)
    frames[rng.random(frames.shape) < 0.15] = np.nan
    frames[-3:, 1, 2] = np.nan
    return frames
