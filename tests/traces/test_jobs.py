"""The PySpark jobs on small inputs in local mode (one shared session, see conftest.py)."""

import numpy as np
import pytest

from tests.traces.conftest import write_trace
from replicast.traces import build, calibrate
from replicast.traces import format as fmt
from replicast.traces.errors import TraceError
from replicast.traces.store import TraceStore

pytestmark = [
    pytest.mark.spark,
    # PySpark 4.x's own pandas-3 compatibility noise, not ours:
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


def frames_dir(tmp_path, frames_s, prefix="SeattleData"):
    source = tmp_path / "raw"
    source.mkdir()
    for k, matrix in enumerate(frames_s, start=1):
        (source / f"{prefix}_{k}").write_text("\n".join("\t".join(f"{v:g}" for v in row) for row in matrix) + "\n")
    return source


def test_ingest_netlatency_matches_the_reader(spark, tmp_path):
    rng = np.random.default_rng(0)
    raw = np.round(rng.uniform(0, 0.5, size=(4, 6, 6)), 2)
    raw[rng.random(raw.shape) < 0.1] = 0.0
    meta = build.ingest_netlatency(spark, frames_dir(tmp_path, raw), tmp_path / "out", name="tiny",
                                   interval_us=10_000_000, compact=True)
    assert (meta.n_nodes, meta.n_frames, meta.interval_measured) == (6, 4, False)
    store = TraceStore.open(tmp_path / "out")
    expected = raw * 1000.0
    expected[expected == 0] = np.nan
    for k in range(4):
        np.fill_diagonal(expected[k], 0.0)
        np.testing.assert_allclose(store.frame(k), expected[k], atol=1e-3)


def test_ingest_netlatency_rejects_a_bad_frame_with_file_and_line(spark, tmp_path):
    source = frames_dir(tmp_path, np.full((3, 4, 4), 0.1))
    (source / "SeattleData_3").write_text("0 1 1 1\n1 0 1 1\n1 1 0 -2\n1 1 1 0\n")
    with pytest.raises(TraceError, match=r"SeattleData_3:3: column 4: RTT -2 is negative"):
        build.ingest_netlatency(spark, source, tmp_path / "out", name="bad", interval_us=1_000_000)


def test_ingest_csv_with_names_and_times(spark, tmp_path):
    path = tmp_path / "rtts.csv"
    path.write_text("src,dst,rtt_ms,t\nberlin,tokyo,250.5,100\ntokyo,berlin,251,100.4\n"
                    "berlin,tokyo,,110\nberlin,tokyo,260,112\nberlin,oslo,30,121\n")
    meta = build.ingest_csv(spark, path, tmp_path / "out", name="csv", interval_us=10_000_000,
                            time_unit_us=1_000_000)
    store = TraceStore.open(tmp_path / "out")
    assert store.nodes == ["berlin", "oslo", "tokyo"] and meta.n_frames == 3 and meta.interval_measured
    assert store.latency_ms(0, 2, 0) == 250.5 and store.latency_ms(2, 0, 0) == 251.0
    assert store.latency_ms(0, 2, 10_000_000) == 260.0  # two in one frame: the latest wins
    assert store.latency_ms(0, 1, 20_000_000) == 30.0 and store.latency_ms(0, 1, 0) is None


def test_ingest_csv_without_times_uses_row_order_and_a_nodes_file(spark, tmp_path):
    path = tmp_path / "rtts.csv"
    path.write_text("src,dst,rtt_ms\n1,0,5\n0,1,7\n1,0,6\n1,0,nan\n")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("name,lat,lon\n1,52.5,13.4\n0,35.7,139.7\n")
    build.ingest_csv(spark, path, tmp_path / "out", name="csv", interval_us=1_000_000, time_unit_us=1,
                     nodes_csv=nodes)
    store = TraceStore.open(tmp_path / "out")
    assert store.nodes == ["1", "0"] and store.n_frames == 3
    assert [store.latency_ms(0, 1, k * 1_000_000) for k in range(3)] == [5.0, 6.0, None]
    assert fmt.read_nodes(tmp_path / "out").column("lat").to_pylist() == [52.5, 35.7]


@pytest.mark.parametrize(
    "body, message",
    [
        ("a,b,12\na,b,x7\n", r"rtts.csv:3: rtt_ms 'x7' is not a number"),
        ("a,b,12\nb,a,12\na,b,-4\n", r"rtts.csv:4: rtt_ms -4 is negative"),
        ("a,b,12\na,b\n", r"rtts.csv:3: wrong number of fields"),
        ("a,b,12,9\n", r"rtts.csv:2: wrong number of fields"),
    ],
)
def test_ingest_csv_rejects_bad_rows_with_file_and_line(spark, tmp_path, body, message):
    path = tmp_path / "rtts.csv"
    path.write_text("src,dst,rtt_ms\n" + body)
    with pytest.raises(TraceError, match=message):
        build.ingest_csv(spark, path, tmp_path / "out", name="x", interval_us=1, time_unit_us=1)


def test_ingest_csv_header_must_name_the_columns(spark, tmp_path):
    path = tmp_path / "rtts.csv"
    path.write_text("from,to,rtt\n")
    with pytest.raises(TraceError, match=r"rtts.csv:1: header from,to,rtt: missing \['src', 'dst', 'rtt_ms'\]"):
        build.ingest_csv(spark, path, tmp_path / "out", name="x", interval_us=1, time_unit_us=1)


def test_pair_and_sample_summary_against_numpy(spark, tmp_path, random_frames):
    from replicast.traces.jobs import summary

    path = write_trace(tmp_path / "t", random_frames)
    df = spark.read.parquet(str(fmt.rtt_dir(path))).select(*fmt.SCHEMA.names)
    pairs = summary.pair_summary(df, n_frames=12, interval_us=1_000_000).toPandas().set_index(["src", "dst"])
    for (src, dst), row in pairs.iterrows():
        series = random_frames[:, src, dst]
        valid = series[~np.isnan(series)]
        assert row.samples == 12 and row.valid == valid.size
        assert row.outage_rate == pytest.approx(1 - valid.size / 12)
        assert (row["min"], row["max"]) == (valid.min(), valid.max())
        for name, q in summary.QUANTILES.items():
            assert row[name] == np.quantile(valid, q, method="inverted_cdf"), (src, dst, name)
        both = ~np.isnan(series[1:]) & ~np.isnan(series[:-1])
        assert row.drift_ms == pytest.approx(np.abs(np.diff(series))[both].mean())
    samples = summary.sample_summary(df).toPandas()
    off = ~np.eye(5, dtype=bool)
    for k, row in samples.iterrows():
        values = random_frames[k][off]
        exact = np.quantile(values[~np.isnan(values)], 0.5, method="inverted_cdf")
        assert exact * 0.99 <= row["median"] <= exact


def test_overall_summary_of_seattle_agrees_with_calibrate(spark):
    from replicast.traces.jobs import summary

    store = TraceStore.open("seattle")
    df = spark.read.parquet(str(fmt.rtt_dir(store.path))).select(*fmt.SCHEMA.names)
    overall = summary.overall_summary(df, n_nodes=99, n_frames=688, interval_us=store.interval_us)
    reference = calibrate.measure(np.stack([store.frame(k) for k in range(store.n_frames)]))
    for name in ("median", "p90", "p99"):
        assert reference[name] * 0.99 <= overall[name] <= reference[name]
    assert overall["outage_rate"] == pytest.approx(reference["outage_rate"], rel=1e-9)
    assert overall["frame_corr"] == pytest.approx(reference["frame_corr"], rel=1e-4)


@pytest.mark.parametrize("new_interval_us", [300_000, 1_000_000, 2_500_000])
def test_resample_is_sample_and_hold(spark, tmp_path, random_frames, new_interval_us):
    from replicast.traces.jobs.resample import resample

    path = write_trace(tmp_path / "t", random_frames)
    df = spark.read.parquet(str(fmt.rtt_dir(path))).select(*fmt.SCHEMA.names)
    rows, new_frames = resample(df, old_interval_us=1_000_000, new_interval_us=new_interval_us, n_frames=12)
    assert new_frames == -(-12_000_000 // new_interval_us)
    got = {(r.t, r.src, r.dst): r.rtt_ms for r in rows.collect()}
    original = TraceStore.open(path)
    assert len(got) == new_frames * 20
    for (t, src, dst), value in got.items():
        assert value == original.latency_ms(src, dst, t)


def test_join_geo(spark, tmp_path):
    from replicast.traces.jobs.geo import join_geo, read_geo

    nodes = spark.createDataFrame(fmt.nodes_table(["a", "b", "c"]).to_pandas())
    geo_csv = tmp_path / "geo.csv"
    geo_csv.write_text("name,lat,lon\nb,10.5,-20\nz,1,1\n")
    joined, strays = join_geo(nodes, read_geo(spark, geo_csv))
    rows = [(r.id, r.name, r.lat, r.lon) for r in joined.collect()]
    assert rows == [(0, "a", None, None), (1, "b", 10.5, -20.0), (2, "c", None, None)] and strays == ["z"]
    geo_csv.write_text("name,lat,lon\nb,100,0\n")
    with pytest.raises(TraceError, match=r"geo.csv: node 'b': lat='100'"):
        read_geo(spark, geo_csv)
