"""``replicast experiment fig4``: P(latency > x) for kmax 1–5, random vs min-cost deployment, with
bandwidth and network cost ratios against kmax = 1 in the legends (the paper's Fig. 4, §VI-E).

The shipped Fig. 4 scenario (the Fig. 1 query on Seattle's 30 most reliable servers, two sources per
server every 10 s, 10 applications) simulated over its first 30 minutes (``--duration``) once per
kmax and deployment.
As in the paper both deployments start from the same optimal non-replicated placement: *min-cost*
adds each replica by Alg. 5 (with refinement), *random* on a random server of the same candidates.

Writes ``fig4.csv`` (one row per deployment and kmax: deliveries, ratios, network cost, latency
quantiles and P(latency > x) at 1, 2, 4, 8 and 16 s), ``fig4_ccdf.csv`` (each curve's P(latency > x)
on a log grid of x) and ``fig4.png`` ((a) random, (b) min-cost; curves by matplotlib's ``ecdf``).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from replicast.experiments.latency import LatencyRun, draw
from replicast.experiments.simulations import Scale, base_scenario, describe, ratios, simulate, span_s, summary

KMAX = (1, 2, 3, 4, 5)
#: Simulated seconds by default: the shipped scenario's first 30 minutes (the whole 1.9-h trace at
#: kmax 1-5 for both deployments and the coordinator's runs would not fit in ~20 minutes on 2 cores).
DURATION_S = 1800.0
#: Panel label → the simulator's deployment kind (docs/simulator.md).
DEPLOYMENTS = {"random": "random-from-min-cost", "min-cost": "min-cost"}
THRESHOLDS_S = (1, 2, 4, 8, 16)
COLUMNS = ("deployment", "kmax", "delivered", "bandwidth_ratio", "cost_ratio", "network_cost", "p50_ms", "p99_ms",
           "p999_ms", "max_ms", *(f"p_over_{t}s" for t in THRESHOLDS_S))


def scenario(scale: Scale, kmax: tuple[int, ...], kind: str) -> Any:
    return replace(base_scenario(scale, DURATION_S), kmax=tuple(kmax), deployment=kind)


def latencies(run_dir: Path) -> np.ndarray:
    """Every delivery's latency (µs) of one run."""
    return pq.read_table(run_dir / "deliveries.parquet", columns=["latency_us"]).column(0).to_numpy()


def row(deployment: str, k: int, s: dict, ratio: tuple[float, float], latency_us: np.ndarray) -> dict:
    seconds = latency_us / 1e6
    q = np.quantile(latency_us, [0.5, 0.99, 0.999]) / 1e3 if len(latency_us) else [float("nan")] * 3
    return {"deployment": deployment, "kmax": k, "delivered": s["delivered"], "bandwidth_ratio": round(ratio[0], 3),
            "cost_ratio": round(ratio[1], 3), "network_cost": s["network_cost"], "p50_ms": round(float(q[0]), 3),
            "p99_ms": round(float(q[1]), 3), "p999_ms": round(float(q[2]), 3),
            "max_ms": round(float(seconds.max() * 1e3), 3) if len(seconds) else float("nan"),
            **{f"p_over_{t}s": float(np.mean(seconds > t)) if len(seconds) else float("nan") for t in THRESHOLDS_S}}


def ccdf_points(latency_us: np.ndarray, grid_s: np.ndarray) -> np.ndarray:
    """P(latency > x) at each x of ``grid_s`` (the empirical CCDF matplotlib's ``ecdf`` draws)."""
    ordered = np.sort(latency_us / 1e6)
    return 1.0 - np.searchsorted(ordered, grid_s, side="right") / len(ordered)


def plot(curves: dict[str, list[LatencyRun]], path: Path, title: str) -> Path:
    from replicast.experiments.figures import panels

    with panels(path, title, len(curves), width=4.4, height=4.0, sharex=True) as axes:
        for ax, (i, (deployment, runs)) in zip(axes, enumerate(curves.items())):
            draw(ax, runs, "ccdf")
            ax.set_title(f"({chr(ord('a') + i)}) {deployment}", fontsize=10)
            ax.legend(fontsize=7, title="kmax (bandwidth, network cost)", title_fontsize=7, loc="lower left")
        for ax in axes[1:]:
            ax.set_ylabel("")
    return path


def run(out: Path, scale: Scale = Scale(), *, kmax: tuple[int, ...] = KMAX) -> dict[str, Any]:
    """Simulate both deployments, write ``fig4.csv``, ``fig4_ccdf.csv`` and ``fig4.png``; returns the rows."""
    rows, curves, latency_by_run = [], {}, {}
    for deployment, kind in DEPLOYMENTS.items():
        sim = scenario(scale, kmax, kind)
        run_dirs = simulate(sim, out / "runs", scale)
        summaries = {k: summary(d) for k, d in run_dirs.items()}
        ratio = ratios(summaries)
        curves[deployment] = []
        for k, run_dir in run_dirs.items():
            latency = latency_by_run[deployment, k] = latencies(run_dir)
            rows.append(row(deployment, k, summaries[k], ratio[k], latency))
            curves[deployment].append(LatencyRun(f"kmax={k} ({ratio[k][0]:.2f}x, {ratio[k][1]:.2f}x)", latency))
    longest = max((float(v.max()) for v in latency_by_run.values() if len(v)), default=1e6) / 1e6
    grid = np.geomspace(0.01, max(longest, 0.02), 60)
    ccdf_rows = [{"deployment": deployment, "kmax": k, "latency_s": round(float(x), 5), "p_exceed": float(p)}
                 for (deployment, k), latency in latency_by_run.items() if len(latency)
                 for x, p in zip(grid, ccdf_points(latency, grid))]
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "fig4.csv", COLUMNS, rows)
    _write(out / "fig4_ccdf.csv", ("deployment", "kmax", "latency_s", "p_exceed"), ccdf_rows)
    span = span_s(sim)
    plot(curves, out / "fig4.png", f"Fig. 4: P(latency > x) over {describe(span)} of trace {sim.trace}")
    return {"rows": rows, "trace": sim.trace, "span_s": span}


def _write(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
