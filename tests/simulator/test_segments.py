"""Time segments (simulator/segments.py, simulator/sweep.py) and the streaming recorder: a run split
into segments and merged delivers exactly what one sequential run delivers, on the shipped Seattle
trace with its outages and a scripted cut."""

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from replicast.simulator import recorder as recorder_module
from replicast.simulator import segments, sweep
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import ScenarioError, load_scenario

DATA = Path(__file__).parent / "data"


def rows(table) -> Counter:
    return Counter(zip(*(table.column(c).cast("string").to_pylist() if c in ("app", "path") else
                         table.column(c).to_pylist() for c in ("app", "ts", "arrival", "path"))))


@pytest.fixture(scope="module")
def sequential():
    prepared = Prepared(load_scenario(DATA / "segments.toml"))
    return prepared, run(prepared, 2)


def merged(prepared, out: Path, warmup_us: int | None):
    tasks, warmup = sweep.plan_tasks(prepared, (2,), ("random",), 3, warmup_us)
    summaries = [sweep.run_task(prepared.scenario, task, out, prepared=prepared) for task in tasks]
    deliveries = ds.dataset(out / "deliveries", format="parquet", partitioning="hive").to_table()
    return tasks, warmup, summaries, deliveries


def test_merged_segments_equal_one_sequential_run(sequential, tmp_path):
    prepared, whole = sequential
    tasks, warmup, summaries, deliveries = merged(prepared, tmp_path, None)
    longest = segments.longest_outage_us(prepared.trace, list(prepared.servers.values()), 0, 1860_000_000)
    assert longest >= 300_000_000 and warmup > longest          # the trace's outages drive the warmup
    assert any(t.segment.warm > prepared.start for t in tasks)  # some segment starts mid-run, mid-outage
    assert rows(deliveries) == rows(whole.recorder.deliveries())
    assert len(deliveries) == whole.summary["delivered"] > 10_000
    runs, _ = sweep.merge(tmp_path, summaries, prepared.scenario, 1800.0)
    for key in ("delivered", "per_app", "latency_ms", "records_sent", "network_cost"):
        assert runs[0][key] == whole.summary[key], key
    bandwidth = ds.dataset(tmp_path / "bandwidth", format="parquet", partitioning="hive").to_table()
    ours = sorted(zip(bandwidth.column("t_us").to_pylist(), bandwidth.column("stream").cast("string").to_pylist(),
                      bandwidth.column("records").to_pylist()))
    theirs = whole.recorder.bandwidth()
    assert ours == sorted(zip(theirs.column("t_us").to_pylist(), theirs.column("stream").cast("string").to_pylist(),
                              theirs.column("records").to_pylist()))


def test_a_warmup_shorter_than_the_outages_is_not_enough(sequential, tmp_path):
    prepared, whole = sequential
    _, _, _, deliveries = merged(prepared, tmp_path, 60_000_000)
    assert rows(deliveries) != rows(whole.recorder.deliveries())


def test_the_streaming_recorder_writes_what_the_in_memory_one_keeps(sequential, tmp_path, monkeypatch):
    prepared, whole = sequential
    monkeypatch.setattr(recorder_module, "SPILL_ROWS", 700)     # many row groups, dictionaries growing
    streamed = run(prepared, 2, sink=tmp_path)
    assert rows(streamed.recorder.deliveries()) == rows(whole.recorder.deliveries())
    import pyarrow.parquet as pq
    assert pq.ParquetFile(tmp_path / "deliveries.parquet").num_row_groups > 10
    assert streamed.recorder.bandwidth().to_pylist() == whole.recorder.bandwidth().to_pylist()
    assert {k: v for k, v in streamed.summary.items() if k not in ("wall_s", "hops_per_s")} == \
        {k: v for k, v in whole.summary.items() if k not in ("wall_s", "hops_per_s")}


def test_segments_sit_on_the_timer_grid_and_cover_the_run():
    parts = segments.plan(5, 5 + 3600_000_000, 4, 200_000_000, 60_000_000)
    assert [p.begin for p in parts[1:]] == [p.end for p in parts[:-1]] and parts[-1].end == 5 + 3600_000_000
    for p in parts:
        assert (p.begin - 5) % 60_000_000 == 0 and (p.warm - 5) % 60_000_000 == 0
        assert p.warm == max(5, p.begin - 240_000_000) and p.stop == min(parts[-1].end, p.end + 240_000_000)
    with pytest.raises(ScenarioError, match="only 60 periods"):
        segments.plan(0, 3600_000_000, 61, 0, 60_000_000)


def test_count_windows_cannot_be_segmented():
    prepared = Prepared(load_scenario(DATA / "fig1-faults.toml"))
    with pytest.raises(ScenarioError, match="count window"):
        sweep.plan_tasks(prepared, (1,), ("manual",), 2)
