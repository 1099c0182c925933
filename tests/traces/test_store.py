"""TraceStore: lookups, clamping, outages, chunking, and the shipped seattle trace."""

import numpy as np
import pytest

from tests.traces.conftest import NETLATENCY, write_trace
from replicast.traces import catalog
from replicast.traces.errors import TraceError
from replicast.traces.store import TraceStore


def reference_outages(series: np.ndarray, interval_us: int) -> list[tuple[int, int]]:
    """Brute force: runs of NaN as [start, end) in µs."""
    runs, start = [], None
    for k, value in enumerate(list(series) + [0.0]):
        if np.isnan(value) and start is None:
            start = k
        elif not np.isnan(value) and start is not None:
            runs.append((start * interval_us, k * interval_us))
            start = None
    return runs


@pytest.mark.parametrize("chunk_bytes", [1, 10**9])  # one frame per chunk, and everything in one chunk
def test_lookups_match_the_written_frames(tmp_path, random_frames, chunk_bytes):
    store = TraceStore.open(write_trace(tmp_path / "t", random_frames), chunk_bytes=chunk_bytes, cache_chunks=2)
    assert (store.n_nodes, store.n_frames, store.interval_us) == (5, 12, 1_000_000)
    assert store.duration_us == 12_000_000 and store.nodes == [f"n{i}" for i in range(5)]
    for k in range(12):
        for src in range(5):
            for dst in range(5):
                t_us = k * 1_000_000 + 999_999  # sample-and-hold until the next frame
                expected = 0.0 if src == dst else random_frames[k, src, dst]
                got = store.latency_ms(src, dst, t_us)
                assert (got is None) if np.isnan(expected) else got == expected
                one_way = store.one_way_us(src, dst, t_us)
                assert (one_way is None) if np.isnan(expected) else one_way == round(expected * 500)
        np.testing.assert_array_equal(np.isnan(store.frame(k)), np.isnan(random_frames[k]) & ~np.eye(5, dtype=bool))


def test_clamp_past_the_end_and_reject_negative_time(tmp_path, random_frames):
    store = TraceStore.open(write_trace(tmp_path / "t", random_frames))
    last = random_frames[-1, 0, 1]
    got = store.latency_ms(0, 1, 10**12)
    assert (got is None) if np.isnan(last) else got == last
    with pytest.raises(ValueError, match="starts at 0"):
        store.latency_ms(0, 1, -1)
    with pytest.raises(IndexError):
        store.latency_ms(0, 5, 0)


@pytest.mark.parametrize("chunk_bytes", [1, 250, 10**9])
def test_outages_match_brute_force_across_chunk_boundaries(tmp_path, random_frames, chunk_bytes):
    store = TraceStore.open(write_trace(tmp_path / "t", random_frames), chunk_bytes=chunk_bytes)
    for src in range(5):
        for dst in range(5):
            if src != dst:
                assert store.outages(src, dst) == reference_outages(random_frames[:, src, dst], 1_000_000)
    assert store.outages(1, 2)[-1][1] == store.duration_us  # the run at the end is closed at the end


def test_missing_rows_are_outages(tmp_path, random_frames):
    path = write_trace(tmp_path / "t", random_frames)
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    part = next((path / "rtt").rglob("*.parquet"))
    table = ds.dataset(part).to_table()
    pq.write_table(table.filter(~((ds.field("src") == 0) & (ds.field("dst") == 1) & (ds.field("t") == 0))), part)
    store = TraceStore.open(path)
    assert store.latency_ms(0, 1, 0) is None


def test_rows_outside_the_node_table_are_rejected(tmp_path, random_frames):
    path = write_trace(tmp_path / "t", random_frames, names=[f"n{i}" for i in range(5)])
    from replicast.traces import format as fmt

    fmt.write_nodes(path, fmt.nodes_table(["a", "b", "c"]))
    fmt.write_meta(path, fmt.TraceMeta(name="t", n_nodes=3, n_frames=12, interval_us=1_000_000, interval_measured=True))
    with pytest.raises(TraceError, match=r"part-0.parquet: node id outside 0..2"):
        TraceStore.open(path).latency_ms(0, 1, 0)


def test_shipped_seattle_is_small_licensed_and_documented():
    store = TraceStore.open("seattle")
    assert (store.n_nodes, store.n_frames, store.interval_us) == (99, 688, 10_000_000)
    assert store.meta.interval_measured is False and "Zhu" in store.meta.citation
    root = catalog.DATA_DIR / "seattle"
    assert "MIT License" in (root / "LICENSE").read_text()
    assert sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) < 4_000_000


@pytest.mark.skipif(not (NETLATENCY / "Seattle").is_dir(), reason="needs the shared NetLatency copy")
def test_shipped_seattle_equals_the_raw_text_files():
    store = TraceStore.open("seattle")
    for k in (1, 344, 688):
        raw = np.loadtxt(NETLATENCY / "Seattle" / f"SeattleData_{k}") * 1000.0
        raw[raw == 0] = np.nan
        np.fill_diagonal(raw, 0.0)
        np.testing.assert_allclose(store.frame(k - 1), raw, rtol=0, atol=1e-3)
