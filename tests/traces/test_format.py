"""The canonical format: metadata, nodes, day partitioning and compaction round trips."""

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pytest

from replicast.traces import format as fmt
from replicast.traces.errors import TraceError


def test_meta_round_trip_and_errors(tmp_path):
    meta = fmt.TraceMeta(name="x", n_nodes=3, n_frames=5, interval_us=10, interval_measured=False,
                         citation="Zhu et al.")
    fmt.write_meta(tmp_path, meta)
    assert fmt.read_meta(tmp_path) == meta
    assert meta.duration_us == 50
    raw = dataclasses.asdict(meta) | {"n_frames": 0}
    with pytest.raises(TraceError, match=r"meta.json: field 'n_frames' is 0; expected a positive integer"):
        fmt.TraceMeta.from_json(json.dumps(raw), "meta.json")
    with pytest.raises(TraceError, match=r"m.json:1: not valid JSON"):
        fmt.TraceMeta.from_json("{", "m.json")
    with pytest.raises(TraceError, match=r"unknown field\(s\) \['colour'\]"):
        fmt.TraceMeta.from_json('{"colour": 1}', "m.json")


def test_writer_splits_days_and_reads_back(tmp_path):
    rng = np.random.default_rng(0)
    t = np.array([0, 1, fmt.DAY_US - 1, fmt.DAY_US, 2 * fmt.DAY_US + 5], dtype=np.int64)
    rtt = rng.uniform(1, 100, t.size).astype(np.float32)
    table = pa.table({"t": t, "src": np.zeros(5, np.int32), "dst": np.ones(5, np.int32),
                      "rtt_ms": pa.array(rtt, mask=np.array([False, True, False, False, False]))})
    with fmt.TraceWriter(tmp_path) as writer:
        writer.write(table.slice(0, 3))
        writer.write(table.slice(3))
    days = sorted(p.name for p in fmt.rtt_dir(tmp_path).iterdir())
    assert days == ["day=0", "day=1", "day=2"]
    back = fmt.dataset(tmp_path).to_table().sort_by("t")
    assert back.select(fmt.SCHEMA.names).equals(table.cast(fmt.SCHEMA))
    assert back.column("day").to_pylist() == [0, 0, 0, 1, 2]


def test_compact_keeps_every_row(tmp_path):
    rng = np.random.default_rng(1)
    n = 2000
    table = pa.table({"t": np.sort(rng.integers(0, 10**9, n)), "src": rng.integers(0, 9, n).astype(np.int32),
                      "dst": rng.integers(0, 9, n).astype(np.int32), "rtt_ms": rng.random(n).astype(np.float32)})
    with fmt.TraceWriter(tmp_path) as writer:
        writer.write(table)
    (fmt.rtt_dir(tmp_path) / "_SUCCESS").write_text("")
    fmt.compact(tmp_path)
    back = fmt.dataset(tmp_path).to_table().select(fmt.SCHEMA.names)
    key = [("t", "ascending"), ("src", "ascending"), ("dst", "ascending"), ("rtt_ms", "ascending")]
    assert back.sort_by(key).equals(table.cast(fmt.SCHEMA).sort_by(key))
    assert not (fmt.rtt_dir(tmp_path) / "_SUCCESS").exists()


def test_nodes_must_be_dense(tmp_path):
    fmt.write_nodes(tmp_path, fmt.nodes_table(["a", "b"], lat=[1.0, None]))
    assert fmt.read_nodes(tmp_path).column("lat").to_pylist() == [1.0, None]
    bad = fmt.nodes_table(["a", "b"]).set_column(0, "id", pa.array([0, 2], pa.int32()))
    fmt.write_nodes(tmp_path, bad)
    with pytest.raises(TraceError, match="node ids must be 0..1"):
        fmt.read_nodes(tmp_path)
