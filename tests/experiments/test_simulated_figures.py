"""``replicast experiment fig3|fig4|fig5`` and the report, in tiny configurations on the shipped trace:
a few simulated minutes at kmax 1 and 2, all in one output directory so that the figures share
their simulations as ``replicast experiment all`` does."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest

from replicast.engine.cli import main
from replicast.experiments import fig3, fig4, fig5, paper, report
from replicast.experiments.simulations import Scale

MINUTES = "3min"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("experiments")
    for figure, extra in (("fig3", ["--average", "1min"]), ("fig4", []), ("fig5", [])):
        assert main(["experiment", figure, "--duration", MINUTES, "--kmax", "1", "--kmax", "2", "--out", str(out),
                     "--no-progress", *extra]) == 0
    return out


def rows(path) -> list[dict]:
    with path.open() as file:
        return list(csv.DictReader(file))


def test_fig3(out):
    per_record = pd.read_csv(out / "fig3.csv")
    assert tuple(per_record.columns) == ("kmax", "app", "t_s", "latency_ms")
    assert set(per_record["app"]) == {"app_0"} and set(per_record["kmax"]) == {1, 2}
    assert (per_record["latency_ms"] > 0).all() and per_record["t_s"].between(0, 180).all()
    # Replication transparency: every degree delivers the same records (here: the same timestamps).
    stamps = [sorted(g["t_s"]) for _, g in per_record.groupby("kmax")]
    assert len(stamps[0]) > 100 and stamps[0] == stamps[1]
    average = pd.read_csv(out / "fig3_average.csv")
    assert tuple(average.columns) == ("kmax", "t_s", "mean_latency_ms", "records")
    for (k, start), group in per_record.groupby(["kmax", np.floor(per_record["t_s"] / 60) * 60]):
        row = average[(average["kmax"] == k) & (average["t_s"] == start)].iloc[0]
        assert row["records"] == len(group)
        assert row["mean_latency_ms"] == pytest.approx(group["latency_ms"].mean(), abs=2e-3)
    assert (out / "fig3.png").stat().st_size > 20_000


def test_fig4(out):
    table = rows(out / "fig4.csv")
    assert tuple(table[0]) == fig4.COLUMNS
    by = {(r["deployment"], int(r["kmax"])): r for r in table}
    assert set(by) == {(d, k) for d in ("random", "min-cost") for k in (1, 2)}
    for deployment in ("random", "min-cost"):
        assert float(by[deployment, 1]["bandwidth_ratio"]) == float(by[deployment, 1]["cost_ratio"]) == 1.0
        assert float(by[deployment, 2]["bandwidth_ratio"]) > 1.5          # kmax stream replicas and more
        assert by[deployment, 1]["delivered"] == by[deployment, 2]["delivered"]
    # Both start from the same optimal non-replicated placement (§VI-E), so kmax 1 is one run twice.
    assert {k: v for k, v in by["random", 1].items() if k != "deployment"} == \
        {k: v for k, v in by["min-cost", 1].items() if k != "deployment"}
    ccdf = pd.read_csv(out / "fig4_ccdf.csv")
    for _, curve in ccdf.groupby(["deployment", "kmax"]):
        p = curve.sort_values("latency_s")["p_exceed"].to_numpy()
        assert ((0 <= p) & (p <= 1)).all() and (np.diff(p) <= 0).all()
    # The CSV's P(latency > 1 s) is the curve's at 1 s, from the same deliveries.
    row = by["min-cost", 1]
    latency = fig4.latencies(next((out / "runs").glob("min-cost-" + "?" * 10)) / "k1")
    assert float(row["p_over_1s"]) == pytest.approx(float(np.mean(latency > 1e6)))
    assert (out / "fig4.png").stat().st_size > 20_000


def test_fig5(out):
    table = rows(out / "fig5.csv")
    assert tuple(table[0]) == fig5.COLUMNS
    by = {(r["variant"], int(r["kmax"])): r for r in table}
    assert set(by) == {(v, k) for v in fig5.VARIANTS for k in (1, 2)}
    static, gc = by["static min-cost", 2], by["garbage-collection", 2]
    assert float(static["saving_vs_static"]) == 0 and float(by["static min-cost", 1]["final_cost_ratio"]) == 1
    assert int(gc["gc_decisions"]) > 0 and int(static["gc_decisions"]) == 0
    assert float(gc["final_cost"]) < float(static["final_cost"])          # garbage collection saved something
    assert gc["delivered"] == static["delivered"]                          # and lost nothing
    # Every dynamic row says what the latency objective saw and what the coordinator did about it.
    revival = by["garbage-collection / revival", 2]
    for row in (gc, revival):
        assert float(row["p99_vs_static"]) == pytest.approx(float(row["p99_ms"]) / float(static["p99_ms"]), abs=1e-3)
        assert row["within_objective"] == str(float(row["p99_vs_static"]) <= 1 + fig5.OBJECTIVE / 100)
    assert int(revival["objective_checks"]) > 0 and int(gc["objective_checks"]) == 0     # GC alone never revives
    # Fig. 5's static bars are Fig. 4's min-cost runs: simulated once.
    assert len(list((out / "runs").glob("min-cost-" + "?" * 10))) == 1
    assert (out / "fig5.png").stat().st_size > 20_000


def test_runs_are_reused_and_fresh_redoes_them(out, capsys):
    deliveries = next((out / "runs").glob("min-cost-" + "?" * 10)) / "k2" / "deliveries.parquet"
    before = deliveries.stat().st_mtime_ns
    assert main(["experiment", "fig4", "--duration", MINUTES, "--kmax", "1", "--kmax", "2", "--out", str(out),
                 "--no-progress"]) == 0
    assert deliveries.stat().st_mtime_ns == before
    assert main(["experiment", "fig3", "--duration", MINUTES, "--kmax", "2", "--out", str(out), "--no-progress",
                 "--fresh"]) == 0
    assert deliveries.stat().st_mtime_ns > before
    scenario = json.loads((deliveries.parent.parent / "scenario.json").read_text())
    assert scenario["deployment"] == "min-cost" and scenario["duration_s"] == 180


def test_report(out):
    scale = Scale(duration_s=180, progress=False)          # the runs the command lines made: no simulation
    results = {"fig3": fig3.run(out, scale, kmax=(1, 2)), "fig4": fig4.run(out, scale, kmax=(1, 2)),
               "fig5": fig5.run(out, scale, kmax=(1, 2))}
    machine = {"cpus": 2, "load_before": (1.0, 1.0, 1.0), "load_after": (2.0, 2.0, 2.0), "python": "3.11",
               "system": "Linux", "wall_s": 60.0, "commit": "abc1234"}
    text = report.write(out, results, {"fig3": 1.0, "fig4": 2.0, "fig5": 3.0}, machine).read_text()
    for name in ("fig3", "fig4", "fig5"):
        assert f"![{name}]({name}.png)" in text
    assert "| Fig. 4 | min-cost: bandwidth and network cost ratios" in text
    assert f"{paper.FIG4_MIN_COST[2][0]:.2f}×, {paper.FIG4_MIN_COST[2][1]:.2f}×" in text
    assert "| Fig. 5 | garbage-collection:" in text and "| Fig. 3 |" in text
    assert "This variant never revives." in text and f"within {fig5.OBJECTIVE:g} % of static" in text
    assert ("Nothing was revived at kmax 2" in text) != ("Revived at kmax 2" in text)     # says which, either way
