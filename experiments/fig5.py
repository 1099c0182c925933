"""``replicast experiment fig5``: network cost of static min-cost deployment vs garbage collection vs
garbage collection with revival, per kmax (the paper's Fig. 5, §VI-F).

Three variants of the shipped Fig. 4 scenario with min-cost deployment, simulated over its first 30
minutes (``--duration``) once per kmax:

* **static min-cost** — Alg. 5's deployment left alone (the same runs as Fig. 4's min-cost curves);
* **garbage collection** — the coordinator (elected among the servers) runs Alg. 6 every
  ``gc_period_s`` under the latency objective :data:`OBJECTIVE` (each application's p99 over the last
  :data:`WINDOW_S` of reported RTTs within that % of the static deployment's, placement/objective.py;
  nothing is collected before that much history): it discards stream and operator replicas by least
  utility per cost while every operator keeps two replicas, no failure of one server or link starves
  an operator (placement/tolerance.py), and the objective holds; it never revives;
* **garbage collection / revival** — more aggressive (kmin = 1) because §V-C revives: a collected
  stream or replica comes back when every input of a replica is late by 10 s, or when the latency
  objective is broken.

The cost a variant "ends at" is the mean network cost (§V-A: records/s × one-way ms, summed over
stream replicas) over the last quarter of the run, once garbage collection has had its rounds; the
mean over the whole run is given too.  Bars are relative to static min-cost at kmax = 1, as the
ratios of Fig. 4.

Writes ``fig5.csv`` (one row per kmax and variant) and ``fig5.png`` (bars of cost, and each
variant's p99 latency: garbage collection must not degrade the latency guarantee).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from replicast.experiments.simulations import Scale, base_scenario, describe, simulate, span_s, summary

KMAX = (1, 2, 3, 4, 5)
#: Simulated seconds by default: the shipped scenario's first 30 minutes (the whole 1.9-h trace at
#: kmax 1-5 for both deployments and the coordinator's runs would not fit in ~20 minutes on 2 cores).
DURATION_S = 1800.0
VARIANTS = ("static min-cost", "garbage-collection", "garbage-collection / revival")
#: The coordinator of each dynamic variant ([coordinator] keys, docs/simulator.md).
#: The latency objective both dynamic variants keep: p99 at each application within this % of static.
OBJECTIVE = 25.0
COORDINATORS = {
    "garbage-collection": {"gc_period_s": 60.0, "theta": 0.0, "kmin": 2, "revival": False,
                           "latency_within_percent": OBJECTIVE},
    "garbage-collection / revival": {"gc_period_s": 60.0, "theta": 0.0, "kmin": 1, "revival_threshold_s": 10.0,
                                     "latency_within_percent": OBJECTIVE},
}
#: The objective's window (``latency_window_s``): its p99 is over this much reported history, and GC
#: waits until it has it — at most a third of the run, so that a short run (the tests') still collects.
WINDOW_S = 600.0
#: Run directory names (OUT/runs/min-cost-<label>-<digest>).
LABELS = {"static min-cost": "", "garbage-collection": "gc", "garbage-collection / revival": "gc-revival"}
#: The share of the run (its end) whose mean cost is the cost a variant ends at.
TAIL = 0.25
COLUMNS = ("kmax", "variant", "final_cost", "final_cost_ratio", "mean_cost", "saving_vs_static", "delivered",
           "p99_ms", "max_ms", "p99_vs_static", "within_objective", "gc_decisions", "revival_decisions",
           "objective_checks", "objective_violations", "gc_groups_kept_objective")


def scenario(scale: Scale, kmax: tuple[int, ...], variant: str) -> Any:
    from replicast.engine.placement_config import CoordinatorSettings

    sim = replace(base_scenario(scale, DURATION_S), kmax=tuple(kmax), deployment="min-cost")
    if variant in COORDINATORS:
        window = min(WINDOW_S, span_s(sim) / 3)
        sim = replace(sim, coordinator=CoordinatorSettings(**COORDINATORS[variant], latency_window_s=window,
                                                           compare_static=False))
    return sim


def final_cost(s: dict, span_s: float, bucket_s: float, tail: float = TAIL) -> float:
    """Mean network cost over the last ``tail`` of the run's whole buckets while the sources ran
    (``cost_over_time``; the drain after them carries nothing)."""
    series = [cost for t, cost in s.get("cost_over_time", []) if t + bucket_s <= span_s + 1e-6]
    if not series:
        return float(s["network_cost"])
    last = series[-max(1, round(len(series) * tail)):]
    return float(np.mean(last))


def decisions(s: dict, reason: str) -> int:
    return sum(n for key, n in s.get("coordinator", {}).get("decisions", {}).items() if key.startswith(reason + ":"))


def core_counter(s: dict, name: str) -> int:
    """A coordinator core's counter, summed over the coordinators alive at the end of the run."""
    return sum(c.get("core", {}).get(name, 0) for c in s.get("coordinator", {}).get("coordinators", {}).values())


def run(out: Path, scale: Scale = Scale(), *, kmax: tuple[int, ...] = KMAX) -> dict[str, Any]:
    """Simulate the three variants, write ``fig5.csv`` and ``fig5.png``; returns the rows."""
    summaries: dict[tuple[str, int], dict] = {}
    for variant in VARIANTS:
        ks = kmax if variant == VARIANTS[0] else tuple(k for k in kmax if k > 1)   # kmax 1 has nothing to collect
        if not ks:
            continue
        sim = scenario(scale, ks, variant)
        for k, run_dir in simulate(sim, out / "runs", scale, LABELS[variant]).items():
            summaries[variant, k] = summary(run_dir)
    sim = scenario(scale, kmax, VARIANTS[0])
    span = span_s(sim)

    def ends_at(s: dict) -> float:
        return final_cost(s, span, sim.bucket_s)

    base = ends_at(summaries[VARIANTS[0], min(kmax)])
    rows = []
    for k in kmax:
        static = ends_at(summaries[VARIANTS[0], k])
        static_p99 = summaries[VARIANTS[0], k]["latency_ms"]["p99"]
        for variant in VARIANTS:
            s = summaries.get((variant, k), summaries[VARIANTS[0], k] if k == 1 else None)
            if s is None:
                continue
            cost = ends_at(s)
            p99 = s["latency_ms"]["p99"]
            ratio = p99 / static_p99 if static_p99 else float("nan")
            rows.append({"kmax": k, "variant": variant, "final_cost": round(cost, 3),
                         "final_cost_ratio": round(cost / base, 3) if base else float("nan"),
                         "mean_cost": s["network_cost"], "saving_vs_static": round(1 - cost / static, 4) if static else 0,
                         "delivered": s["delivered"], "p99_ms": s["latency_ms"]["p99"], "max_ms": s["latency_ms"]["max"],
                         "p99_vs_static": round(ratio, 3), "within_objective": ratio <= 1 + OBJECTIVE / 100,
                         "gc_decisions": decisions(s, "gc"), "revival_decisions": decisions(s, "revival"),
                         "objective_checks": core_counter(s, "objective_checks"),
                         "objective_violations": core_counter(s, "objective_violations"),
                         "gc_groups_kept_objective": core_counter(s, "gc_groups_kept_objective")})
    out.mkdir(parents=True, exist_ok=True)
    with (out / "fig5.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / "fig5.png", f"Fig. 5: network cost after {describe(span)} of trace {sim.trace}, "
         f"relative to static kmax = {min(kmax)}")
    return {"rows": rows, "trace": sim.trace, "objective_percent": OBJECTIVE}


def plot(rows: list[dict], path: Path, title: str) -> Path:
    """Grouped bars: cost per kmax and variant; beside them each variant's p99 latency."""
    from replicast.experiments.figures import panels

    ks = sorted({r["kmax"] for r in rows})
    width = 0.8 / len(VARIANTS)
    with panels(path, title, 2, width=4.6, height=3.8, sharey=False) as (cost_ax, latency_ax):
        for i, variant in enumerate(VARIANTS):
            mine = {r["kmax"]: r for r in rows if r["variant"] == variant}
            xs = [k + (i - 1) * width for k in ks if k in mine]
            bars = cost_ax.bar(xs, [mine[k]["final_cost_ratio"] for k in ks if k in mine], width, label=variant,
                               color=f"C{i}")
            if variant == VARIANTS[2]:            # how many revival decisions each bar's run made, 0 included
                cost_ax.bar_label(bars, [f"{mine[k]['revival_decisions']} rev." for k in ks if k in mine],
                                  fontsize=6, rotation=90, padding=2)
            latency_ax.bar(xs, [mine[k]["p99_ms"] / 1e3 for k in ks if k in mine], width, label=variant,
                           color=f"C{i}")
        static = {r["kmax"]: r["p99_ms"] for r in rows if r["variant"] == VARIANTS[0]}
        latency_ax.hlines([static[k] * (1 + OBJECTIVE / 100) / 1e3 for k in ks if k in static],
                          [k - 0.45 for k in ks if k in static], [k + 0.45 for k in ks if k in static],
                          colors="black", linestyles="dashed", linewidth=1,
                          label=f"objective: p99 within {OBJECTIVE:g} % of static")
        latency_ax.legend(fontsize=7, loc="upper right")
        cost_ax.set_ylabel("network cost (x static min-cost, kmax = 1)")
        latency_ax.set_ylabel("p99 latency (sec)")
        for ax in (cost_ax, latency_ax):
            ax.set_xlabel("maximum degree of replication (kmax)")
            ax.set_xticks(ks)
            ax.grid(True, axis="y", alpha=0.3)
        cost_ax.legend(fontsize=7, loc="upper left")
    return path
