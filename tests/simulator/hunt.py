"""Random fault schedules with the placement coordinator on: each must deliver exactly the reference.

The Fig. 1 query on 16 Seattle servers (``data/placement.toml``, Alg. 5 at kmax), the coordinator
garbage-collecting every 30 s (θ = 0, kmin 2 ≤ kmin ≤ kmax) and reviving, and a seeded schedule of faults:
server crashes, crash-restarts, a crash of the coordinator's server, link cuts and congestion.  A
schedule passes when every application receives exactly what the one-copy replay of the same
inputs produces (:func:`equals_reference`) — no record lost, none duplicated.

**The rule every schedule keeps: every operator keeps at least one live replica.**  The coordinator
garbage-collects down to ``kmin`` replicas, and a restarted server comes back with its entry points
and applications only (θ = 0: nothing is re-created), so the generator

* never crashes the server of an entry point or an application (their data would be lost whatever
  the placement: they have one replica);
* crashes (for good, or with a restart) at most ``kmin − 1`` distinct servers over the whole run,
  chosen among those Alg. 5 gives operator replicas — the coordinator's own server (the smallest
  live name, ``seattle-10`` here) counts as one of them;
* cuts at most one link at a time, lets the cut heal before the next fault, and cuts only while
  fewer than ``kmin − 1`` servers have crashed: a cut is a failure too, and ``kmin − 1`` failures at
  once is the promise (docs/placement.md, "The fault-tolerance invariant");
* splits the coordinator's server off from a group of servers that includes the next smallest name
  (every link between them cut at once, healed together): the group elects that server and the rest
  keep the old coordinator, so two coordinators decide at once (a partial partition).  From the
  group's side the old coordinator's server is down, so a split counts as a failure like a cut, and
  the next fault waits until it healed;
* adds congestion (a few seconds more on a link) anywhere and at any time: not a failure.

A few seeds run in CI (``tests/simulator/test_coordinator_hunt.py``); hundreds by a command::

    python3 -m tests.simulator.hunt --seeds 300            # seeds 0-299; prints each failing schedule
    python3 -m tests.simulator.hunt --seed 17 -v           # one seed, its schedule and its outcome
    python3 -m tests.simulator.hunt --setup sim-fig1 --seeds 100   # examples/sim-fig1-placement.toml
    python3 -m tests.simulator.hunt --setup sim-fig1 --seeds 300 --jobs 16   # seeds in 16 processes

Two setups (``--setup``): ``fig1`` (above; the Fig. 1 query has time and count windows) and
``sim-fig1``: ``examples/sim-fig1-placement.toml`` (30 servers, a source of each kind on every
server, punctuations every minute, GC every 5 minutes) at kmax 3 / kmin 2 for its first 15 minutes,
entry points replicated like operators (otherwise every server holds the only replica of two
streams and no crash would keep the rule), faults from 320 s (after the first GC round) with four
times the lengths and gaps.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from replicast.engine.replay import replay
from replicast.simulator.coordinator import parse_coordinator
from replicast.simulator.run import Prepared, run
from replicast.simulator.scenario import Fault, load_scenario

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
S = 1_000_000
#: Sources move off ``seattle-10`` so that the coordinator (the smallest name) is not pinned: it may crash.
SOURCES = ("seattle-2", "seattle-5", "seattle-20")
COORDINATOR = "seattle-10"
FIRST_FAULT_S, LAST_FAULT_S = 40, 230


@dataclass(frozen=True)
class Setup:
    """Where the schedules run: a scenario, the coordinator's settings, and the time scale of faults."""

    name: str
    path: Path
    kmax: tuple[int, ...]                 # drawn per seed
    kmin: int | None                      # None: drawn per seed in 2 … kmax
    coordinator: dict
    first_fault_s: float
    last_fault_s: float
    scale: float = 1.0                    # fault lengths and gaps, against the Fig. 1 setup's
    move_sources: bool = False            # sources off the coordinator's server (SOURCES)
    overrides: dict | None = None         # scenario fields replaced (duration_s, entry_replicas …)


#: The Fig. 1 query (time and count windows) on 16 Seattle servers, punctuations every 2 s.
FIG1 = Setup("fig1", DATA / "placement.toml", (2, 3), None,
             {"report_ms": 2000, "utility_period_s": 10, "gc_period_s": 30, "theta": 0, "settle_s": 10,
              "revival_threshold_s": 10, "compare_static": False}, FIRST_FAULT_S, LAST_FAULT_S, move_sources=True)
#: examples/sim-fig1-placement.toml (30 servers, sources on every one, punctuations every minute, GC
#: every 5 min) at kmax 3 / kmin 2, its first 15 minutes; entry points replicated like operators
#: (``entry_replicas = "kmax"``) so that a server may crash without taking the only replica of a stream.
SIM_FIG1 = Setup("sim-fig1", EXAMPLES / "sim-fig1-placement.toml", (3,), 2,
                 {"report_ms": 10000, "utility_period_s": 30, "gc_period_s": 300, "theta": 0, "settle_s": 30,
                  "expiry_s": 60, "revival_threshold_s": 10, "compare_static": False}, 320, 800, scale=4.0,
                 overrides={"duration_s": 900, "entry_replicas": "kmax"})
SETUPS = {setup.name: setup for setup in (FIG1, SIM_FIG1)}


@dataclass(frozen=True)
class Schedule:
    seed: int
    kmax: int
    kmin: int
    faults: tuple[Fault, ...]
    setup: str = "fig1"

    def describe(self) -> str:
        def one(f: Fault) -> str:
            span = f"{f.from_us / S:g} s" if f.to_us is None else f"{f.from_us / S:g}-{f.to_us / S:g} s"
            extra = f" +{f.value:g} ms" if f.kind == "congest" else ""
            return f"{f.kind} {'-'.join(f.target)} {span}{extra}"
        where = "" if self.setup == "fig1" else f"{self.setup}, "
        return (f"seed {self.seed}: {where}kmax {self.kmax}, kmin {self.kmin}: "
                + ("; ".join(map(one, self.faults)) or "no fault"))


@functools.cache
def _scenario(setup: str = "fig1"):
    return load_scenario(SETUPS[setup].path)


def base_scenario(kmax: int, kmin: int, setup: str = "fig1"):
    spec = SETUPS[setup]
    scenario = replace(_scenario(setup), faults=[], **(spec.overrides or {}))
    if spec.move_sources:
        scenario = replace(scenario, sources=[replace(s, servers=(SOURCES[i % 3],))
                                              for i, s in enumerate(scenario.sources)])
    coordinator = parse_coordinator({**spec.coordinator, "kmin": kmin}, "hunt")
    return replace(scenario, coordinator=coordinator, kmax=(kmax,))


def pinned_servers(scenario, setup: str = "fig1") -> set[str]:
    """Servers a crash may not hit: those of a node with a single replica (entry points unless
    replicated, applications)."""
    if setup == "fig1":
        apps = scenario.applications if isinstance(scenario.applications, dict) else {}
        return {*SOURCES, *apps.values()}
    return set(_placed(scenario.kmax[0], setup)[1])


@functools.cache
def all_servers(setup: str = "fig1") -> list[str]:
    return sorted(Prepared(base_scenario(2, 2, setup)).servers)


@functools.cache
def _placed(kmax: int, setup: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(servers Alg. 5 gives operator replicas at ``kmax``, servers of single-replica nodes), from a
    10-s run's placement."""
    scenario = replace(base_scenario(kmax, 2, setup), duration_s=10, drain_s=5, coordinator=None)
    prepared = Prepared(scenario)
    placement = run(prepared, kmax).summary["placement"]
    operators = {s for name, servers in placement.items() if name in prepared.query.operators for s in servers}
    single = {s for name, servers in placement.items() if name not in prepared.query.operators and len(servers) == 1
              for s in servers}
    return tuple(sorted(operators)), tuple(sorted(single))


def operator_servers(kmax: int, setup: str = "fig1") -> tuple[str, ...]:
    """Servers Alg. 5 gives operator replicas at ``kmax`` (a 10-s run's placement): a crash elsewhere
    tests nothing."""
    return _placed(kmax, setup)[0]


def schedule(seed: int, setup: str = "fig1") -> Schedule:
    """The seeded fault schedule (module docstring: the rule it keeps)."""
    spec = SETUPS[setup]
    rng = random.Random(seed)
    kmax = rng.choice(spec.kmax)
    kmin = rng.randint(2, kmax) if spec.kmin is None else spec.kmin
    servers = all_servers(setup)
    free = [s for s in operator_servers(kmax, setup) if s not in pinned_servers(base_scenario(kmax, kmin, setup), setup)]
    k = spec.scale
    faults: list[Fault] = []
    t = spec.first_fault_s + k * rng.uniform(0, 20)
    crashed: list[str] = []                      # their operator replicas are gone for good, restarted or not
    back_at: dict[str, float] = {}               # a crashed server is up again from then (inf: never)
    while t < spec.last_fault_s:
        kind = rng.choice(("crash", "crash-restart", "coordinator", "cut", "split", "congest", "congest"))
        if kind in ("crash", "crash-restart", "coordinator") and len(crashed) < kmin - 1:
            alive = [s for s in servers if s not in crashed]
            victim = min(alive) if kind == "coordinator" else rng.choice([s for s in free if s in alive])
            if victim not in free:               # the coordinator's server runs an entry point or application
                t += k * rng.uniform(5, 20)
                continue
            faults.append(Fault("crash", (victim,), round(t * S)))
            crashed.append(victim)
            back_at[victim] = float("inf")
            if kind == "crash-restart":
                back = t + k * rng.uniform(5, 40)
                faults.append(Fault("restart", (victim,), round(back * S)))
                back_at[victim] = back
            t += k * rng.uniform(20, 60)
        elif kind == "cut" and len(crashed) + 1 <= kmin - 1:
            a, b = rng.sample(servers, 2)
            length = k * rng.uniform(5, 40)
            faults.append(Fault("cut", (a, b), round(t * S), round((t + length) * S)))
            t += length + k * rng.uniform(5, 30)
        elif kind == "split" and len(crashed) + 1 <= kmin - 1:
            up = sorted(s for s in servers if back_at.get(s, 0) <= t)
            coordinator, successor = up[0], up[1]      # the one elected now, and the next smallest name
            group = [successor, *rng.sample(up[2:], rng.randint(0, 3))]
            length = k * rng.uniform(5, 40)
            faults.extend(Fault("cut", (coordinator, g), round(t * S), round((t + length) * S)) for g in group)
            t += length + k * rng.uniform(5, 30)
        elif kind == "congest":
            a, b = rng.sample(servers, 2)
            length = k * rng.uniform(5, 60)
            faults.append(Fault("congest", (a, b), round(t * S), round((t + length) * S),
                                rng.choice((500.0, 2000.0, 5000.0))))
            t += k * rng.uniform(5, 30)
        else:
            t += k * rng.uniform(5, 20)
    return Schedule(seed, kmax, kmin, tuple(faults), setup)


def cut_groups(plan: Schedule) -> list[tuple[Fault, ...]]:
    """The schedule's cuts, those of one split together (same span, one common end), in time order."""
    groups: dict[tuple[int, int], list[Fault]] = {}
    for f in plan.faults:
        if f.kind == "cut":
            groups.setdefault((f.from_us, f.to_us), []).append(f)
    return [tuple(g) for _, g in sorted(groups.items())]


def is_split(group: tuple[Fault, ...]) -> bool:
    """Whether a cut group is a split: one server cut from a group of servers at once (two coordinators)."""
    return len(group) > 1 and len(set.intersection(*(set(f.target) for f in group))) == 1


@dataclass(frozen=True)
class Outcome:
    schedule: Schedule
    exact: bool
    missing: int
    extra: int
    delivered: int
    decisions: dict
    wall_s: float
    deciders: tuple[str, ...] = ()          # the servers whose coordinator sent decisions


def equals_reference(prepared, result) -> tuple[int, int]:
    """(records missing, records extra or duplicated) against the one-copy replay of the run's inputs."""
    reference = replay(prepared.query, result.inputs, replicas=1,
                       punctuation_us=round(prepared.scenario.punctuation_ms * 1000)).outputs
    missing = extra = 0
    for app, records in reference.items():
        want, got = Counter(records), Counter(result.recorder.outputs[app])
        missing += sum((want - got).values())
        extra += sum((got - want).values())
    return missing, extra


def run_schedule(plan: Schedule) -> Outcome:
    scenario = base_scenario(plan.kmax, plan.kmin, plan.setup)
    scenario.faults.extend(plan.faults)
    prepared = Prepared(scenario)
    started = time.perf_counter()
    result = run(prepared, plan.kmax, keep_records=True)
    missing, extra = equals_reference(prepared, result)
    coordinator = result.summary.get("coordinator", {})
    return Outcome(plan, missing == extra == 0, missing, extra, result.summary["delivered"],
                   coordinator.get("decisions", {}), time.perf_counter() - started,
                   tuple(sorted({entry[4] for entry in coordinator.get("timeline", [])})))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.simulator.hunt", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--setup", choices=sorted(SETUPS), default="fig1",
                        help="fig1: the Fig. 1 query on 16 servers (default); sim-fig1: "
                             "examples/sim-fig1-placement.toml at kmax 3 / kmin 2")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every schedule, not only failures")
    parser.add_argument("--jobs", type=int, default=1,
                        help="schedules simulated at once, in as many processes (default 1); each prints when done")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failures = 0
    for outcome in _outcomes(seeds, args.setup, args.jobs):
        if not outcome.exact or args.verbose:
            print(f"{'ok  ' if outcome.exact else 'FAIL'} {outcome.schedule.describe()} -> delivered "
                  f"{outcome.delivered}, missing {outcome.missing}, extra {outcome.extra}, decisions "
                  f"{outcome.decisions} ({outcome.wall_s:.1f} s)", flush=True)
        failures += not outcome.exact
    print(f"{failures} of {len(seeds)} schedules did not deliver exactly the reference")
    return 1 if failures else 0


def _outcome(seed: int, setup: str) -> Outcome:
    return run_schedule(schedule(seed, setup))


def _outcomes(seeds, setup: str, jobs: int):
    """Each seed's outcome: in seed order with one job, else as the ``jobs`` worker processes finish them."""
    if jobs == 1:
        yield from (_outcome(seed, setup) for seed in seeds)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield from (future.result() for future in as_completed([pool.submit(_outcome, s, setup) for s in seeds]))


if __name__ == "__main__":
    sys.exit(main())
