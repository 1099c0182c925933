"""The per-pair summary against a brute-force pandas/numpy reference, pair by pair.

``traces.jobs.summary.pair_stats`` (the numpy body of the PySpark job) is checked on its own, on
both its paths, and ``pair_summary`` end to end through Spark.
"""

import numpy as np
import pandas as pd
import pytest

from replicast.traces.jobs import summary

COLUMNS = ["samples", "valid", "outage_rate", "min", "median", "p90", "p99", "max", "drift_ms"]


def reference(rows: pd.DataFrame, n_frames: int, interval_us: int) -> pd.DataFrame:
    """The documented definitions, one pair at a time: rows t, src, dst, rtt_ms (NaN = outage)."""
    out = {}
    for (src, dst), group in rows.groupby(["src", "dst"], sort=True):
        group = group.sort_values("t", kind="stable")
        rtt = group["rtt_ms"].to_numpy(np.float32)
        t = group["t"].to_numpy()
        valid = rtt[~np.isnan(rtt)]
        steps = [float(abs(rtt[i] - rtt[i - 1])) for i in range(1, len(t))
                 if t[i] - t[i - 1] == interval_us and not np.isnan(rtt[i]) and not np.isnan(rtt[i - 1])]
        exact = {name: np.quantile(valid, q, method="inverted_cdf") if valid.size else np.nan
                 for name, q in summary.QUANTILES.items()}
        out[(src, dst)] = {
            "samples": len(group), "valid": valid.size, "outage_rate": 1 - valid.size / n_frames,
            "min": valid.min() if valid.size else np.nan, **exact, "max": valid.max() if valid.size else np.nan,
            "drift_ms": np.mean(steps) if steps else np.nan,
        }
    frame = pd.DataFrame.from_dict(out, orient="index")[COLUMNS]
    frame.index.names = ["src", "dst"]
    return frame


def assert_same(got: pd.DataFrame, expected: pd.DataFrame):
    got = got.set_index(["src", "dst"]).sort_index() if "src" in got else got
    assert list(got.index) == list(expected.index)
    for column in COLUMNS:
        np.testing.assert_allclose(got[column].to_numpy(np.float64), expected[column].to_numpy(np.float64),
                                   rtol=1e-9, equal_nan=True, err_msg=column)


def random_rows(rng, *, nodes: int, n_frames: int, interval_us: int, keep: float, null: float) -> pd.DataFrame:
    """Rows on the grid with some missing and some null, plus one pair with no valid sample and one
    with a single valid sample."""
    grid = [(k * interval_us, s, d) for k in range(n_frames) for s in range(nodes) for d in range(nodes) if s != d]
    rows = pd.DataFrame([row for row in grid if rng.random() < keep], columns=["t", "src", "dst"])
    rows["rtt_ms"] = rng.integers(1, 60, len(rows)).astype(np.float32)  # few values: ties in the quantiles
    rows.loc[rng.random(len(rows)) < null, "rtt_ms"] = np.nan
    rows.loc[(rows.src == 0) & (rows.dst == 1), "rtt_ms"] = np.nan
    one = rows.index[(rows.src == 1) & (rows.dst == 0)]
    rows.loc[one, "rtt_ms"] = np.nan
    rows.loc[one[:1], "rtt_ms"] = 42.0
    return rows


def stats_frame(rows: pd.DataFrame, **kwargs) -> pd.DataFrame:
    stats = summary.pair_stats(rows["t"].to_numpy(), summary.pair_key(rows["src"], rows["dst"]),
                               rows["rtt_ms"].to_numpy(), **kwargs)
    return pd.DataFrame(stats).set_index(["src", "dst"])


@pytest.mark.parametrize("dense_cells", [summary.DENSE_CELLS, 0], ids=["matrix", "sort"])
@pytest.mark.parametrize("seed", range(6))
def test_pair_stats_match_the_reference(seed, dense_cells):
    rng = np.random.default_rng(seed)
    rows = random_rows(rng, nodes=int(rng.integers(2, 6)), n_frames=int(rng.integers(1, 40)), interval_us=10,
                       keep=0.85, null=0.2).sample(frac=1, random_state=seed)  # any row order
    expected = reference(rows, n_frames=40, interval_us=10)
    assert_same(stats_frame(rows, n_frames=40, interval_us=10, dense_cells=dense_cells), expected)
    assert expected.loc[(0, 1), "valid"] == 0 and expected.loc[(1, 0), "valid"] == 1


def test_off_grid_and_duplicate_rows_take_the_sort_path():
    rng = np.random.default_rng(7)
    rows = random_rows(rng, nodes=3, n_frames=20, interval_us=10, keep=0.9, null=0.2)
    off_grid = rows.assign(t=rows["t"] + rng.integers(0, 2, len(rows)) * 3)
    duplicated = pd.concat([rows, rows.iloc[::5].assign(rtt_ms=7.0)])
    for case in (off_grid, duplicated):
        assert_same(stats_frame(case, n_frames=20, interval_us=10), reference(case, n_frames=20, interval_us=10))


def test_quantiles_are_nearest_rank_like_duckdb_quantile_disc():
    duckdb = pytest.importorskip("duckdb")
    rng = np.random.default_rng(1)
    for n in [1, 2, 3, 10, 99, 100, 101, 688, 1000]:
        values = rng.permutation(n).astype(np.float32)
        got = stats_frame(pd.DataFrame({"t": np.arange(n) * 10, "src": 0, "dst": 1, "rtt_ms": values}),
                          n_frames=n, interval_us=10)
        sql = ", ".join(f"quantile_disc(v, {q})" for q in summary.QUANTILES.values())
        expected = duckdb.execute(f"SELECT {sql} FROM (SELECT unnest(?) AS v)", [values.tolist()]).fetchone()
        assert tuple(got.iloc[0][list(summary.QUANTILES)]) == expected, n


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
@pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")
def test_pair_summary_in_spark_matches_the_reference(spark):
    import pyarrow as pa

    from replicast.traces import format as fmt

    rng = np.random.default_rng(11)
    rows = random_rows(rng, nodes=6, n_frames=30, interval_us=1_000_000, keep=0.9, null=0.15)
    table = pa.Table.from_pandas(rows, preserve_index=False).cast(fmt.SCHEMA)
    df = spark.createDataFrame(table).repartition(3)  # rows of one pair start out in several partitions
    got = summary.pair_summary(df, n_frames=30, interval_us=1_000_000).toPandas()
    assert list(got.columns) == summary.PAIR_COLUMNS
    assert_same(got, reference(rows, n_frames=30, interval_us=1_000_000))
