"""``replicast experiment fig3``: latency at an application over time, per record and its 10-minute
average, for kmax 1, 2 and 3 (the paper's Fig. 3, §VI-C), in the simulator.

The paper ran three engines per server, one per degree, each deploying its replicas with Alg. 5,
and plotted one application's end-to-end latency over ~3 hours.  Here: the shipped Fig. 4 scenario
(the Fig. 1 query on Seattle's 30 most reliable servers, sources every 10 s) with min-cost
deployment, once per kmax over the whole trace (1.9 h), and the records of one application.

Writes ``fig3.csv`` (``kmax, app, t_s, latency_ms``: every record of the application, ``t_s`` its
timestamp in seconds since the sources started), ``fig3_average.csv`` (``kmax, t_s, mean_latency_ms,
records``: windows of ``average_s`` starting at ``t_s``) and ``fig3.png`` (one panel per kmax).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from replicast.experiments.simulations import Scale, base_scenario, describe, simulate, span_s, summary
from replicast.operators.errors import ReplicastError

KMAX = (1, 2, 3)
APP = "app_0"
AVERAGE_S = 600.0
DEPLOYMENT = "min-cost"


def scenario(scale: Scale, kmax: tuple[int, ...] = KMAX, deployment: str = DEPLOYMENT) -> Any:
    """The shipped scenario over the whole trace (or ``scale.duration_s``) with ``deployment``."""
    return replace(base_scenario(scale, None), kmax=tuple(kmax), deployment=deployment)


def records(run_dirs: dict[int, Path], app: str, start_us: int = 0) -> pd.DataFrame:
    """``kmax, app, t_s, latency_ms`` of every record ``app`` received, in timestamp order."""
    frames = []
    for k, run_dir in run_dirs.items():
        table = pq.read_table(run_dir / "deliveries.parquet", columns=["app", "ts", "latency_us"],
                              filters=[("app", "=", app)])
        if not table.num_rows:
            apps = sorted(summary(run_dir).get("per_app", {}))
            raise ReplicastError(f"fig3: application {app!r} received nothing at kmax {k} (applications: "
                                 f"{', '.join(apps) or 'none delivered'})")
        frame = table.to_pandas()
        frames.append(pd.DataFrame({"kmax": k, "app": app, "t_s": (frame["ts"] - start_us) / 1e6,
                                    "latency_ms": frame["latency_us"] / 1e3}).sort_values("t_s", kind="stable"))
    return pd.concat(frames, ignore_index=True)


def averages(per_record: pd.DataFrame, window_s: float = AVERAGE_S) -> pd.DataFrame:
    """Mean latency per ``window_s`` window of timestamps: ``kmax, t_s, mean_latency_ms, records``."""
    window = (np.floor(per_record["t_s"] / window_s) * window_s).rename("t_s")
    grouped = per_record.groupby([per_record["kmax"], window])["latency_ms"]
    out = grouped.agg(mean_latency_ms="mean", records="count").reset_index()
    out["mean_latency_ms"] = out["mean_latency_ms"].round(3)
    return out


def plot(per_record: pd.DataFrame, average: pd.DataFrame, path: Path, title: str, window_s: float) -> Path:
    """One panel per kmax: every record's latency (dots) and the windowed average (line), shared axes."""
    from replicast.experiments.figures import panels

    ks = sorted(per_record["kmax"].unique())
    with panels(path, title, len(ks), width=3.4, height=3.6) as axes:
        for ax, k in zip(axes, ks):
            mine, avg = per_record[per_record["kmax"] == k], average[average["kmax"] == k]
            ax.plot(mine["t_s"] / 3600, mine["latency_ms"] / 1e3, ".", markersize=1.5, alpha=0.4, rasterized=True,
                    color="C0", label="latency (per record)")
            ax.step(np.append(avg["t_s"], avg["t_s"].iloc[-1] + window_s) / 3600,
                    np.append(avg["mean_latency_ms"], avg["mean_latency_ms"].iloc[-1]) / 1e3, where="post",
                    color="C3", linewidth=1.8, label=f"latency ({window_s / 60:g}-min average)")
            ax.set_title(f"kmax = {k}", fontsize=10)
            ax.set_xlabel("time (hour)")
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("end-to-end latency (sec)")
        axes[0].set_ylim(bottom=0)
        axes[0].legend(fontsize=7, markerscale=6, loc="upper right")
    return path


def run(out: Path, scale: Scale = Scale(), *, kmax: tuple[int, ...] = KMAX, app: str = APP,
        average_s: float = AVERAGE_S, deployment: str = DEPLOYMENT) -> dict[str, Any]:
    """Simulate, write the CSVs and the PNG into ``out``; returns what the report needs."""
    sim = scenario(scale, kmax, deployment)
    run_dirs = simulate(sim, out / "runs", scale)
    start_us = round(sim.start_s * 1e6)
    per_record = records(run_dirs, app, start_us)
    average = averages(per_record, average_s)
    out.mkdir(parents=True, exist_ok=True)
    per_record.round({"t_s": 3, "latency_ms": 3}).to_csv(out / "fig3.csv", index=False)
    average.to_csv(out / "fig3_average.csv", index=False)
    hours = per_record["t_s"].max() / 3600
    plot(per_record, average, out / "fig3.png", f"Fig. 3: latency at {app} over {describe(span_s(sim))} of trace "
         f"{sim.trace}, {deployment} deployment", average_s)
    stats = {k: {"mean_ms": float(g["latency_ms"].mean()), "std_ms": float(g["latency_ms"].std()),
                 "p99_ms": float(g["latency_ms"].quantile(0.99)), "max_ms": float(g["latency_ms"].max()),
                 "records": int(len(g))} for k, g in per_record.groupby("kmax")}
    return {"app": app, "trace": sim.trace, "hours": hours, "span_s": span_s(sim), "deployment": deployment,
            "per_kmax": stats}
