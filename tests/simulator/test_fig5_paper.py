"""``replicast experiment fig5 --paper-scale`` (experiments/fig5_paper.py) at a tiny scale: 30 minutes of a
synthetic PlanetLab-like trace of 6 servers, min-cost at kmax 1-2, on the reference tier in 2 time
segments (local worker processes), against the same 30 minutes as one segment."""

from __future__ import annotations

import csv

import pytest

from replicast.engine.cli import main
from replicast.experiments import fig5_paper

ARGS = ["--servers", "6", "--duration", "30min", "--kmax", "1", "--kmax", "2", "--no-progress"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig5_paper")
    assert main(["experiment", "fig5", "--paper-scale", "--segments", "2", "--jobs", "2", "--out", str(out), *ARGS]) == 0
    return out


def rows(folder):
    return list(csv.DictReader((folder / "fig5_paper.csv").open(encoding="utf-8")))


def test_paper_scale_writes_the_costs_tails_and_report(tiny):
    got = rows(tiny)
    assert [(r["kmax"], r["segments"]) for r in got] == [("1", "2"), ("2", "2")]
    # replication transparency: both degrees deliver the same records (held links lose none)
    assert got[0]["delivered"] == got[1]["delivered"] and int(got[0]["delivered"]) > 6 * 360
    assert float(got[0]["cost_ratio"]) == 1.0 and float(got[1]["cost_ratio"]) > 1
    assert got[1]["paper_cost_ratio"] == "4.78"
    for r in got:
        assert float(r["p50_ms"]) <= float(r["p99_ms"]) <= float(r["p999_ms"]) <= float(r["max_ms"])
        assert 0 <= float(r["p_over_16s"]) <= float(r["p_over_1s"]) <= 1
    report = (tiny / "fig5_paper.md").read_text(encoding="utf-8")
    assert "6 servers, 10 applications" in report and "2 segment(s) per kmax" in report
    assert "| 2 | " in report and "(4.78)" in report and "kmax 2: cost" in report
    assert "not the paper's month" in report and "garbage-collection bars are not run" in report
    assert sorted(p.name for p in (tiny / "fig5_paper_runs" / "deliveries").iterdir()) == ["kmax=1", "kmax=2"]


def test_segments_deliver_what_one_run_delivers(tiny, tmp_path):
    """The segmented sweep equals the same 30 minutes simulated as one segment: deliveries, cost and tails."""
    trace = str(next((tiny / "traces").iterdir()))
    one = fig5_paper.run(tmp_path, trace=trace, servers=6, days=1 / 48, kmax=(1, 2), segments=1, progress=False)
    keys = [c for c in fig5_paper.COLUMNS if c not in ("segments", "cpu_s")]
    assert [{k: str(r[k]) for k in keys} for r in one["rows"]] == [{k: r[k] for k in keys} for r in rows(tiny)]


def test_segment_options_need_paper_scale(tmp_path, capsys):
    assert main(["experiment", "fig5", "--segments", "2", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "go with fig5 --paper-scale" in capsys.readouterr().err
