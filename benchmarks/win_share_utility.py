"""Win share against §V-B's rank weight as the signal garbage collection ranks stream replicas by,
in one simulator run (docs/tracing.md, "Win share as a GC signal").

    python3 benchmarks/win_share_utility.py                       # sim-fig1, kmax = 2, first 600 s
    python3 benchmarks/win_share_utility.py --kmax 3 --duration 1800
    python3 benchmarks/win_share_utility.py --gc --duration 1800   # GC run by each signal (sim-fig1-placement)

Every duplicate filter counts, per stream replica, the copies it delivered at each arrival rank
(operators/dedup.py).  §V-B weighs a stream replica by Σ 1/rank over its copies; win share counts
only its rank-1 copies.  A node core reports one or the other to the placement coordinator
(``NodeOptions.utility``: ``rank``, the default, or ``win-share``).  After one run of the shipped
scenario this prints, over every input port fed by two or more stream replicas, each stream
replica's share of its port under both signals: how many never (or almost never) win, what share
the rank weight still gives them, the rank correlation of the two, and whether the stream replicas
GC would consider first (the lowest tenth by share) are the same.  Not a speed claim: a comparison.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scipy.stats import spearmanr  # noqa: E402

import replicast.simulator.run as simulator_run  # noqa: E402
from replicast.engine.core.stats import rank_weights, win_weights  # noqa: E402
from replicast.simulator.run import Prepared, run  # noqa: E402
from replicast.simulator.scenario import load_scenario  # noqa: E402


def shares(sim) -> list[dict]:
    """Per stream replica into a port fed by ≥ 2: its port share by rank weight and by wins."""
    rows = []
    for name, node in sim.nodes.items():
        core = node.core
        for stream, inbound in core.inbound.items():
            hosted = core.hosted.get(stream.target)
            if hosted is None or hosted.logic is None or inbound.index is None:
                continue
            dedup = hosted.logic.filters[stream.port]
            if dedup.k < 2:
                continue
            rank, wins = rank_weights(dedup), win_weights(dedup)
            if sum(rank) == 0:
                continue
            rows.append({"stream": f"{stream.source} -> {stream.target}:{stream.port}", "node": name,
                         "rank_share": rank[inbound.index] / sum(rank),
                         "win_share": wins[inbound.index] / sum(wins) if sum(wins) else 0.0})
    return rows


def gc_runs(scenario, kmax: int) -> None:
    """The scenario's coordinator run twice, GC ranking by each signal (``[coordinator] utility``)."""
    if scenario.coordinator is None:
        raise SystemExit(f"{scenario.path}: --gc needs a [coordinator] table")
    print(f"{scenario.name}, kmax = {kmax}, {scenario.duration_s:.0f} simulated s, garbage collection by:")
    for signal in ("rank", "win-share"):
        chosen = replace(scenario, coordinator=replace(scenario.coordinator, utility=signal, compare_static=False))
        summary = run(Prepared(chosen), kmax).summary
        decisions = summary.get("coordinator", {}).get("decisions", {})
        latency = summary.get("latency_ms", {})
        print(f"  {signal:>9}: decisions {decisions}; network cost {summary.get('network_cost')}; "
              f"latency p50 {latency.get('p50')} ms, p99 {latency.get('p99')} ms; delivered {summary.get('delivered')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", help="scenario (default: examples/sim-fig1.toml; with --gc "
                        "examples/sim-fig1-placement.toml)")
    parser.add_argument("--kmax", type=int, default=2)
    parser.add_argument("--duration", type=float, default=600.0, help="simulated seconds (default 600)")
    parser.add_argument("--gc", action="store_true", help="run the coordinator's garbage collection once with "
                        "each signal instead (the scenario needs a [coordinator] table)")
    args = parser.parse_args()
    default = "sim-fig1-placement.toml" if args.gc else "sim-fig1.toml"
    scenario = load_scenario(args.scenario or ROOT / "examples" / default)
    scenario = replace(scenario, duration_s=args.duration)
    if args.gc:
        gc_runs(scenario, args.kmax)
        return 0
    captured = []
    original = simulator_run.Simulation

    def capture(*a, **k):                                  # the run's simulation, to read its cores after
        sim = original(*a, **k)
        captured.append(sim)
        return sim
    simulator_run.Simulation = capture
    try:
        result = run(Prepared(scenario), args.kmax)
    finally:
        simulator_run.Simulation = original
    rows = shares(captured[0])
    n = len(rows)
    never = [r for r in rows if r["win_share"] <= 0.05]
    rho = spearmanr([r["rank_share"] for r in rows], [r["win_share"] for r in rows]).statistic
    tenth = max(1, n // 10)
    by_rank = {r["stream"] for r in sorted(rows, key=lambda r: r["rank_share"])[:tenth]}
    by_wins = {r["stream"] for r in sorted(rows, key=lambda r: r["win_share"])[:tenth]}
    print(f"{scenario.name}, kmax = {args.kmax}, {args.duration:.0f} simulated s, "
          f"{result.summary.get('delivered', '?')} deliveries: {n} stream replicas into ports fed by >= 2")
    print(f"  win share <= 5 %: {len(never)} stream replicas; their rank-weight share: "
          f"min {min((r['rank_share'] for r in never), default=float('nan')):.3f}, "
          f"mean {sum(r['rank_share'] for r in never) / len(never) if never else float('nan'):.3f}")
    print(f"  Spearman rank correlation of the two shares: {rho:.3f}")
    print(f"  lowest tenth ({tenth}) by rank weight and by win share: {len(by_rank & by_wins)} in common")
    print(f"  win share spread: min {min(r['win_share'] for r in rows):.3f} max {max(r['win_share'] for r in rows):.3f}; "
          f"rank share spread: min {min(r['rank_share'] for r in rows):.3f} max {max(r['rank_share'] for r in rows):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
