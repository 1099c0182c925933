"""``replicast experiment fig4 --paper-scale`` (experiments/fig4_paper.py) at a tiny scale: a
synthetic PlanetLab-like day of 6 servers, kmax 1-2, both deployments, on the timing tier."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from replicast.experiments import fig4_paper
from replicast.engine.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig4_paper")
    assert main(["experiment", "fig4", "--paper-scale", "--servers", "6", "--duration", "1d", "--kmax", "1", "--kmax", "2",
                 "--out", str(out), "--no-progress", "--jobs", "2"]) == 0
    return out


def test_two_workers_write_what_one_process_writes(tiny, tmp_path):
    """--jobs 2 splits the configurations over two worker processes (experiments/fig4_paper_jobs.py):
    the CSVs are byte for byte those of one process, the report too but for its "Measured:" line."""
    assert main(["experiment", "fig4", "--paper-scale", "--servers", "6", "--duration", "1d", "--kmax", "1", "--kmax", "2",
                 "--out", str(tmp_path), "--no-progress", "--jobs", "1"]) == 0
    for name in ("fig4_paper.csv", "fig4_paper_ccdf.csv"):
        assert (tmp_path / name).read_bytes() == (tiny / name).read_bytes(), name
    one, two = ((folder / "fig4_paper.md").read_text(encoding="utf-8").splitlines() for folder in (tmp_path, tiny))
    measured = [i for i, line in enumerate(two) if line.startswith("Measured:")]
    assert "2 worker processes" in two[measured[0]] and "one process" in one[measured[0]]
    assert [line for i, line in enumerate(one) if i not in measured] == [line for i, line in enumerate(two) if i not in measured]


def test_shares_balance_by_kmax():
    """Two workers: one deployment each, kmax 1-5 (a kmax-5 configuration costs most)."""
    from replicast.experiments.fig4_paper_jobs import shares

    assert shares([1, 2, 3, 4, 5] * 2, 2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert shares([1, 2], 4) == [[1], [0]]
    assert sorted(i for share in shares([1, 2, 3, 4, 5] * 2, 3) for i in share) == list(range(10))


def test_paper_scale_writes_the_tails_and_the_report(tiny):
    rows = list(csv.DictReader((tiny / "fig4_paper.csv").open(encoding="utf-8")))
    assert [(r["deployment"], r["kmax"]) for r in rows] == [("random", "1"), ("random", "2"), ("min-cost", "1"),
                                                           ("min-cost", "2")]
    # replication transparency: every configuration delivers the same records (held links lose none)
    delivered = {int(r["delivered"]) for r in rows}
    assert len(delivered) == 1 and delivered.pop() > 6 * 8640 // 2
    # kmax 1 is the same optimal non-replicated placement for both deployments (§VI-E)
    assert rows[0]["p999_ms"] == rows[2]["p999_ms"] and rows[0]["network_cost"] == rows[2]["network_cost"]
    for r in rows:
        assert float(r["p50_ms"]) <= float(r["p99_ms"]) <= float(r["p999_ms"]) <= float(r["max_ms"]) * 1.011
        assert 0 <= float(r["p_over_16s"]) <= float(r["p_over_1s"]) <= 1
    assert float(rows[1]["cost_ratio"]) > 1 and float(rows[3]["cost_ratio"]) > 1
    report = (tiny / "fig4_paper.md").read_text(encoding="utf-8")
    assert "| min-cost | 2 |" in report and "(4.78)" in report and "(5.98)" in report
    assert "13.39 times higher network cost" in report and "kmax 2: the paper's" in report
    assert "generated in process" in report and not (tiny / "traces").exists()    # nothing written but results
    ccdf = list(csv.DictReader((tiny / "fig4_paper_ccdf.csv").open(encoding="utf-8")))
    assert {(r["deployment"], r["kmax"]) for r in ccdf} == {(r["deployment"], r["kmax"]) for r in rows}


def test_tails_from_the_histogram_match_the_deliveries(tiny):
    """The report's quantiles come from the histogram (within its 1.1 % bins), its P(> x) exactly."""
    from replicast.simulator.run import Prepared
    from replicast.simulator.timing import run_configs

    scenario = fig4_paper.paper_scenario(tiny / "check", "planetlab-6n-1d", 6, 10, 7200.0)
    (sink,) = run_configs(Prepared(scenario, fig4_paper.month_store(6, 1)), [(2, "min-cost")],
                          thresholds_us=fig4_paper.THRESHOLDS_US)
    latency = sink.deliveries().column("latency_us").to_numpy()
    got = fig4_paper.tails(sink)
    assert got["delivered"] == len(latency) > 0
    for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("p999_ms", 0.999)):
        exact = float(np.quantile(latency, q)) / 1e3
        assert abs(got[name] - exact) <= 0.012 * exact + 0.1, name
    assert got["max_ms"] == round(latency.max() / 1e3, 1)
    assert got["p_over_1s"] == np.mean(latency > 1_000_000)


def test_counting_without_rows_counts_what_the_tables_hold(tiny):
    """A sweep that keeps no rows (the paper-scale month) counts its deliveries straight from the
    arrival arrays: the same per-application counts, histogram, sums and threshold counts as a
    sweep that builds every window's table."""
    from replicast.simulator.run import Prepared
    from replicast.simulator.timing import run_configs

    scenario = fig4_paper.paper_scenario(tiny / "count", "planetlab-6n-1d", 6, 10, 7200.0)
    prepared = Prepared(scenario, fig4_paper.month_store(6, 1))
    configs = [(1, "min-cost"), (2, "random-from-min-cost")]
    counted = run_configs(prepared, configs, keep=False, thresholds_us=fig4_paper.THRESHOLDS_US, window_us=1_800_000_000)
    tabled = run_configs(prepared, configs, keep=True, thresholds_us=fig4_paper.THRESHOLDS_US, window_us=1_800_000_000)
    for a, b in zip(counted, tabled):
        assert a.tables == [] and b.tables
        assert a.totals.per_app == b.totals.per_app and a.totals.delivered > 0
        assert (a.totals.histogram.counts == b.totals.histogram.counts).all()
        assert (a.totals.latency_sum, a.totals.latency_max) == (b.totals.latency_sum, b.totals.latency_max)
        assert a.exceed == b.exceed


def test_in_process_month_is_the_written_one(tmp_path):
    """Without --trace the month is generated as it is read; with --trace, the trace ``replicast trace
    synth`` wrote for the same command is read from disk: the same rows either way."""
    days = 2 / 24
    written = fig4_paper.month_trace(tmp_path / "disk", 6, 1, False)
    on_disk = fig4_paper.run(tmp_path / "a", trace=written, servers=6, days=days, kmax=(1, 3), progress=False)
    in_process = fig4_paper.run(tmp_path / "b", servers=6, days=days, kmax=(1, 3), progress=False)
    assert on_disk["rows"] == in_process["rows"] and on_disk["rows"][0]["delivered"] > 0


def test_a_workers_error_is_the_sweeps(tmp_path):
    """A worker that fails (here: its scenario file is gone) fails the sweep with its own error,
    rather than leaving the parent waiting or merging a partial result."""
    from replicast.experiments.fig4_paper_jobs import run_shares
    from replicast.simulator.run import Prepared
    from replicast.simulator.timing import deployed

    scenario = fig4_paper.paper_scenario(tmp_path / "gone", "planetlab-6n-1d", 6, 10, 3600.0)
    prepared = Prepared(scenario, fig4_paper.month_store(6, 1))
    configs = [deployed(prepared, 1, "min-cost"), deployed(prepared, 2, "min-cost")]
    (tmp_path / "gone" / "scenario.toml").unlink()
    with pytest.raises(Exception, match="scenario.toml"):
        run_shares(tmp_path / "gone" / "scenario.toml", fig4_paper.month_store_args(6, 1), configs, 2,
                   fig4_paper.THRESHOLDS_US)
