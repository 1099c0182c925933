"""Simulator speed: message hops per second and wall time of sim-fig1 over the Seattle trace.

Two figures:
1. the network layer alone (``simulator.network.Network``: FIFO links, trace-delay cache, one SimPy
   callback per link batch) moving items between 30 servers of the Seattle trace — the simulator's
   own per-hop overhead;
2. end to end: ``examples/sim-fig1.toml`` at kmax = 1..5 over the whole shipped trace (or
   ``--duration-s``), where the node cores (dedup, operators, acks) do the work.  ``--trace PATH``
   runs the same scenario on another trace (e.g. a 30-day synthetic one from ``replicast trace
   synth``); the last columns extrapolate the measured rate to 30 simulated days.

3. ``--items``: link items (everything one node sends to one node at once) and messages per
   simulated second, by message kind (and how many punctuation-only batches carry a punctuation no
   higher than one their stream replica already carried), for sim-fig1 at each kmax — deterministic counts, not times,
   so two versions of the node core compare exactly (default: the scenario's first 1800 s of the
   Seattle trace; ``--duration-s`` and ``--trace`` as above).

4. ``--segments N [--spark MASTER]``: time-parallel scaling of sim-fig1 at ``--kmax`` (one value)
   over ``--duration-s``: the same run as one task and as N segments on Spark (default local[2]),
   both in the same invocation; prints the parallel efficiency (one-task wall / (cores × segmented
   wall)), each worker's peak RSS, and — labelled as an extrapolation — the wall time of the
   month-long Fig. 4 sweep (kmax 1-5 × 2 deployments, 30 one-day segments each) on 64 cores, from
   the measured per-segment rate and the kmax 1-5 cost ratios of short runs made in the same
   invocation.

5. ``--timing``: the timing tier (``simulator/timing.py``) against the reference tier on the same
   prepared scenario, in the same invocation: per kmax and deployment (random, min-cost) the CPU
   seconds of each, their ratio, both latency distributions (p50, p99, p99.9, max) and how many
   deliveries' times differ by more than 1 ms (default window: the scenario's 1800 s; ``--duration-s
   3600`` for the 1-hour check).  ``--timing-only`` times the timing tier alone (long traces,
   ``--trace``), with the rate extrapolated to 30 simulated days, labelled as such.

6. ``--timing-paper``: the paper-scale Fig. 4 sweep (``experiments/fig4_paper.py``: 100 servers, 10
   applications, kmax 1-5 × random and min-cost, all ten configurations timed together) over
   ``--duration-s`` of ``--trace`` (a ``replicast trace synth --like planetlab --nodes 100`` trace): CPU
   seconds (process time) of the sweep and of the setup, peak RSS, and the month extrapolated from
   the measured rate (labelled as such).  Each sweep runs in its own process; ``--baseline PYTHON``
   (repeatable) runs the same sweep with another checkout's interpreter in the same invocation
   and prints the CPU ratio and whether both wrote the same ``fig4_paper.csv``, e.g.::

       git worktree add --detach /tmp/base b96b6f1 && python3 -m venv --system-site-packages /tmp/base/.venv
       /tmp/base/.venv/bin/pip install --no-deps -e /tmp/base
       python3 benchmarks/simulator.py --timing-paper --trace DIR --duration-s 86400 --baseline /tmp/base/.venv/bin/python

7. ``--baseline PYTHON`` (repeatable) without ``--timing-paper``: the reference tier end to end
   (sim-fig1 over ``--trace``/``--duration-s``, each ``--kmax``) with this checkout's interpreter
   and with each baseline's, every run in its own process: the CPU ratio, whether the
   deliveries' count and latency quantiles are the same, and whether every delivery (application,
   ts, arrival, path) and every bandwidth row are (a sha256 of each table's rows in one order,
   computed after the timed run), and which build ran each (this checkout's mypyc-compiled modules
   or its ``.py`` files: ``REPLICAST_PURE_PYTHON=1`` in the environment runs the latter).  The issue's
   comparison is against cd9ce3d (before the one package: its ``simulator`` is imported as such)::

       git worktree add --detach /tmp/cd9 cd9ce3d && python3 -m venv --system-site-packages /tmp/cd9/.venv
       /tmp/cd9/.venv/bin/pip install --no-deps -e /tmp/cd9
       replicast trace synth --nodes 30 --duration 2h --out /tmp/synth30-2h
       python3 benchmarks/simulator.py --trace /tmp/synth30-2h --duration-s 1800 --kmax 3 --baseline /tmp/cd9/.venv/bin/python

8. ``--counts calls|instructions --baseline PYTHON``: the comparison of 7 in deterministic counts,
   which the load of a shared machine does not change: Python calls (cProfile; a native build's
   compiled functions are not Python calls, so compare calls only between pure builds) or instructions
   (``valgrind --tool=cachegrind``, ~50× slower: keep ``--duration-s`` near 60) of a run over
   ``--duration-s`` (default 60) less those of a 10-s run, per simulated second, e.g.::

       python3 benchmarks/simulator.py --counts instructions --trace /tmp/synth30-2h --duration-s 60 --kmax 3 \
           --baseline /tmp/cd9/.venv/bin/python

Each line also gives the run's CPU time (process time: what the run itself used; on the shared
2-core machine wall time also counts waiting for a core) and the load average after it.

Run: python3 benchmarks/simulator.py [--duration-s S] [--kmax 1 2 3 4 5] [--hops N] [--trace PATH]
     [--no-network] [--items] [--segments N [--spark MASTER] [--cores C]] [--timing | --timing-only]
     [--timing-paper --trace PATH [--baseline PYTHON]]
e.g. the 30-day case, measured over one simulated day:
     replicast trace synth --nodes 30 --duration 30d --out /tmp/synth30-30d
     python3 benchmarks/simulator.py --no-network --trace /tmp/synth30-30d --duration-s 86400 --kmax 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# simulator package (as in benchmarks/traces.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


from replicast.simulator.network import LinkEnvironment, Network  # noqa: E402
from replicast.simulator.run import Prepared, run  # noqa: E402
from replicast.simulator.scenario import load_scenario  # noqa: E402
from replicast.traces.store import TraceStore  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "sim-fig1.toml"


def network_hops(n: int) -> float:
    """Hops/s of the network layer: 30 servers, each delivery triggers the next send on another link."""
    trace = TraceStore.open("seattle")
    servers = {name: i for i, name in enumerate(trace.nodes[:30])}
    names = list(servers)
    position = {name: i for i, name in enumerate(names)}
    env = LinkEnvironment()
    count = 0

    def deliver(dst: str, src: str, items: list) -> None:
        nonlocal count
        count += 1
        if count < n:
            nxt = names[(position[dst] * 7 + count) % len(names)]
            net.send(dst, nxt if nxt != dst else src, items, env.now)

    net = Network(env, trace, servers, deliver)
    trace.frame(0)                              # the first chunk's file read is not a hop
    for i, name in enumerate(names):            # 30 messages circulate concurrently
        net.send(name, names[(i + 1) % 30], ["m"], 0)
    start = time.perf_counter()
    env.run()
    return net.hops / (time.perf_counter() - start)


def link_items(prepared: Prepared, kmax: list[int]) -> None:
    """Print link items and messages per simulated second, by message kind, for each kmax."""
    from collections import Counter

    import replicast.simulator.run as run_module
    from replicast.simulator.recorder import Recorder

    kinds: Counter = Counter()
    last: dict = {}                     # (stream replica, epoch) -> the highest punctuation sent on it

    class Counting(Recorder):
        def sent(self, src, dst, messages, now, delay):
            for message in messages:
                name = type(message).__name__
                kinds[name if name != "Batch" or message.records else "Batch (punctuation only)"] += 1
                if name == "Batch" and message.punctuation is not None:
                    key = (message.stream, message.epoch)
                    if not message.records and message.punctuation <= last.get(key, message.punctuation - 1):
                        kinds["not advancing"] += 1      # a punctuation-only batch a receiver could do without
                    last[key] = max(last.get(key, message.punctuation), message.punctuation)
            super().sent(src, dst, messages, now, delay)

    span = (prepared.end - prepared.start) / 1e6
    names = ["Batch", "Batch (punctuation only)", "not advancing", "Ack", "Heartbeat"]
    print(f"link items and messages per simulated second, sim-fig1, {span:.0f} simulated s of trace "
          f"{prepared.scenario.trace} (deterministic counts):")
    labels = ["batches/s", "punct-only/s", "of them: not advancing/s", "acks/s", "heartbeats/s"]
    print(f"{'kmax':>4} {'link items/s':>12} {'messages/s':>10}  " + "  ".join(f"{n:>12}" for n in labels))
    plain, run_module.Recorder = run_module.Recorder, Counting
    try:
        for k in kmax:
            kinds.clear()
            last.clear()
            s = run(prepared, k).summary
            other = sum(v for n, v in kinds.items() if n not in names)
            print(f"{k:>4} {s['hops'] / span:>12.1f} {s['messages'] / span:>10.1f}  "
                  + "  ".join(f"{kinds[n] / span:>12.1f}" for n in names)
                  + (f"  other {other / span:.1f}/s" if other else ""), flush=True)
    finally:
        run_module.Recorder = plain


def segment_scaling(scenario, kmax: int, segments: int, master: str, cores: int) -> None:
    """One task against ``segments`` time segments on Spark ``master``, same run (see docstring)."""
    import tempfile

    from replicast.simulator import spark as on_spark
    from replicast.simulator import sweep, sweep_local

    prepared = Prepared(scenario)
    span = (prepared.end - prepared.start) / 1e6
    print(f"load average at start: {_load()}")
    print(f"sim-fig1 kmax {kmax}, {span:.0f} simulated s of trace {scenario.trace} ({len(prepared.servers)} servers)")
    with tempfile.TemporaryDirectory(prefix="replicast-bench-") as work:
        one, _ = sweep.plan_tasks(prepared, (kmax,), (scenario.deployment,), 1)
        wall = time.perf_counter()
        whole = sweep_local.run_local(scenario, one, Path(work) / "one", 1, progress=False)[0]
        one_wall = time.perf_counter() - wall
        print(f"one task (a worker process):      {one_wall:8.1f} s wall, {whole['cpu_s']:.1f} s CPU, peak RSS {whole['peak_rss_mb']:.0f} MB, "
              f"{whole['hops']} link items  load {_load()}", flush=True)
        tasks, warmup = sweep.plan_tasks(prepared, (kmax,), (scenario.deployment,), segments)
        on_spark.session(master)                       # the JVM is up before the clock starts
        wall = time.perf_counter()
        parts = on_spark.run_tasks(master, scenario, tasks, Path(work) / "segments", progress=False)
        seg_wall = time.perf_counter() - wall
        simulated = sum(p["simulated_s"] for p in parts)
        walls = ", ".join(f"{p['wall_s']:.1f}" for p in parts)
        rss = ", ".join(f"{p['peak_rss_mb']:.0f}" for p in parts)
        print(f"{segments} segments on Spark {master}: {seg_wall:8.1f} s wall ({warmup / 1e6:.0f} s warmup, "
              f"{simulated:.0f} simulated s in all, {simulated / span:.2f}x the run; task walls "
              f"{walls} s; peak RSS per worker {rss} MB)  load {_load()}", flush=True)
        efficiency = one_wall / (cores * seg_wall)
        work_efficiency = whole["cpu_s"] / sum(p["cpu_s"] for p in parts)
        print(f"parallel efficiency on {cores} cores: {one_wall:.1f} / ({cores} x {seg_wall:.1f}) = {efficiency:.0%} "
              f"(wall; on a shared machine other processes take cores too); work efficiency (one task's CPU s / the "
              f"segments' CPU s, what a machine with {cores} free cores approaches) = {work_efficiency:.0%}")
    # The month: 30 one-day segments per kmax and deployment, each simulating a day plus its
    # warmups; task-seconds per simulated second from the measured segments, scaled per kmax by
    # short sequential runs made now.
    per_sim_s = sum(p["cpu_s"] for p in parts) / simulated     # CPU: what a free core would take
    short = load_scenario(SCENARIO)
    short.trace, short.duration_s = scenario.trace, 600.0
    quick = Prepared(short)
    cost = {}
    for k in (1, 2, 3, 4, 5):
        cpu = time.process_time()
        run(quick, k)
        cost[k] = time.process_time() - cpu
    day_tasks = {k: per_sim_s * cost[k] / cost[kmax] * (86400 + 2 * warmup / 1e6) for k in cost}
    total = 2 * 30 * sum(day_tasks.values())                     # two deployments (min-cost costed as random)
    print("kmax cost ratios (600 s runs, same invocation): "
          + ", ".join(f"{k}: {cost[k] / cost[kmax]:.2f}" for k in cost))
    print(f"EXTRAPOLATION (not measured): Fig. 4 month sweep = kmax 1-5 x 2 deployments x 30 one-day segments = "
          f"300 tasks, {total / 3600:.0f} CPU-hours; on 64 free cores: {max(total / 64, day_tasks[5]) / 3600:.2f} h "
          f"wall (longest task, kmax 5: {day_tasks[5] / 60:.0f} min)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, help="simulated seconds (default: the whole Seattle trace)")
    parser.add_argument("--kmax", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--hops", type=int, default=1_000_000, help="hops for the network-layer figure")
    parser.add_argument("--trace", help="trace name or directory instead of the scenario's (seattle)")
    parser.add_argument("--no-network", action="store_true", help="skip the network-layer figure")
    parser.add_argument("--items", action="store_true",
                        help="only count link items and messages per simulated second (default 1800 s)")
    parser.add_argument("--segments", type=int, help="time-parallel scaling with N segments (see above)")
    parser.add_argument("--spark", default="local[2]", help="Spark master for --segments (default local[2])")
    parser.add_argument("--cores", type=int, default=2, help="cores the Spark master has, for the efficiency")
    parser.add_argument("--timing", action="store_true", help="timing tier against the reference tier (see above)")
    parser.add_argument("--timing-only", action="store_true", help="the timing tier alone, extrapolated to 30 days")
    parser.add_argument("--timing-paper", action="store_true", help="the paper-scale Fig. 4 sweep (see above)")
    parser.add_argument("--baseline", action="append", default=[], metavar="PYTHON",
                        help="also run with this interpreter (another checkout's venv): the --timing-paper sweep, "
                             "or the reference tier end to end (see above)")
    parser.add_argument("--counts", choices=["calls", "instructions"],
                        help="with --baseline: deterministic counts instead of CPU time (see above)")
    args = parser.parse_args()
    if args.counts:
        counts_against(args.baseline, args.trace, args.duration_s or 60.0, args.kmax, args.counts == "instructions")
        return
    if args.timing_paper:
        timing_paper(args.trace, args.duration_s or 86400.0, args.baseline)
        return
    if args.timing or args.timing_only:
        scenario = load_scenario(SCENARIO)
        scenario.duration_s = args.duration_s or (None if args.trace else scenario.duration_s)
        scenario.trace = args.trace or scenario.trace
        timing_tier(Prepared(scenario), args.kmax, reference=args.timing)
        return
    if args.segments:
        scenario = load_scenario(SCENARIO)
        scenario.duration_s = args.duration_s or scenario.duration_s
        scenario.trace = args.trace or scenario.trace
        segment_scaling(scenario, args.kmax[0], args.segments, args.spark, args.cores)
        return
    if args.items:
        scenario = load_scenario(SCENARIO)
        scenario.duration_s = args.duration_s or scenario.duration_s
        scenario.trace = args.trace or scenario.trace
        link_items(Prepared(scenario), args.kmax)
        return
    if args.baseline:
        reference_against(args.baseline, args.trace, args.duration_s, args.kmax)
        return
    print(f"load average at start: {_load()}")
    if not args.no_network:
        rates = [network_hops(args.hops) for _ in range(3)]    # best of 3: the machine is shared
        print(f"network layer alone: {max(rates) / 1e6:.2f} M hops/s, best of 3 "
              f"({', '.join(f'{r / 1e6:.2f}' for r in rates)}; {args.hops} hops, 30 servers)")
    scenario = load_scenario(SCENARIO)
    scenario.duration_s = args.duration_s or None
    if args.trace:
        scenario.trace = args.trace
    prepared = Prepared(scenario)
    span = (prepared.end - prepared.start) / 1e6
    print(f"sim-fig1 end to end, {span:.0f} simulated s ({span / 3600:.2f} h) of trace {scenario.trace} "
          f"({len(prepared.servers)} servers):")
    print(f"{'kmax':>4} {'wall s':>8} {'cpu s':>8} {'hops':>10} {'messages':>10} {'hops/s':>9} "
          f"{'sim s/wall s':>12} {'sim s/cpu s':>11} {'30 d extrapolated (wall, cpu)':>30}  load")
    for k in args.kmax:
        cpu = time.process_time()
        s = run(prepared, k).summary
        cpu = time.process_time() - cpu
        rate, cpu_rate = s["simulated_s"] / s["wall_s"], s["simulated_s"] / cpu
        month = f"{30 * 86400 / rate / 3600:.1f} h, {30 * 86400 / cpu_rate / 3600:.1f} h"
        print(f"{k:>4} {s['wall_s']:>8.1f} {cpu:>8.1f} {s['hops']:>10} {s['messages']:>10} {s['hops_per_s']:>9} "
              f"{rate:>12.0f} {cpu_rate:>11.0f} {month:>30}  {_load()}", flush=True)


#: One reference-tier run of sim-fig1 in its own process, by any checkout's interpreter: the one
#: package (``replicast.simulator``) or, before it (cd9ce3d), the top-level ``simulator`` package.
#: The top-level package is tried first: a venv made with ``--system-site-packages`` on a machine
#: where another checkout is installed (``pip install -e``) also sees that checkout's ``replicast``,
#: so an old checkout would otherwise run the other one's code.  The run's cwd is a fresh directory
#: for the same reason (``-c`` puts the cwd first on ``sys.path``).
_REFERENCE = """
import json, resource, sys, time
from pathlib import Path
try:
    import simulator
    from simulator.run import Prepared, run
    from simulator.scenario import load_scenario
    path = Path(simulator.__file__).resolve().parent.parent / "examples" / "sim-fig1.toml"
except ImportError:
    from replicast.simulator.run import Prepared, run
    from replicast.simulator.scenario import load_scenario
    from replicast.examples import example_path
    path = example_path("sim-fig1.toml")
scenario = load_scenario(path)
scenario.trace = sys.argv[1] or scenario.trace
scenario.duration_s = float(sys.argv[2]) if sys.argv[2] else scenario.duration_s
prepared = Prepared(scenario)
counting, calls = len(sys.argv) > 4 and sys.argv[4] == "calls", None   # Python calls the run makes
if counting:
    import cProfile, pstats
    profile = cProfile.Profile()
    profile.enable()
cpu = time.process_time()
result = run(prepared, int(sys.argv[3]))
cpu = time.process_time() - cpu
if counting:
    profile.disable()
    calls = pstats.Stats(profile).total_calls
s = result.summary
# Every delivery (application, ts, arrival, path) and bandwidth row (bucket, stream, records,
# bytes), in one order, hashed: equal digests are the same deliveries and the same traffic.
import hashlib
import pyarrow as pa
digests = {}
for name, table in (("deliveries", result.recorder.deliveries()), ("bandwidth", result.recorder.bandwidth())):
    table = table.select([c for c in table.column_names if c not in ("latency_us", "cost")])
    table = pa.table({c: table[c].cast(pa.string()) if pa.types.is_dictionary(table[c].type) else table[c]
                      for c in table.column_names})
    table = table.sort_by([(c, "ascending") for c in table.column_names])
    digest = hashlib.sha256()
    for column in table.columns:
        digest.update("\x1f".join(map(str, column.to_pylist())).encode())
    digests[name] = digest.hexdigest()[:16]
try:
    from replicast.native_build import status      # which build ran: the mypyc-compiled modules or the .py files
    build = status() if "replicast.simulator.run" in sys.modules else "pure Python (no native build then)"
except ImportError:
    build = "pure Python (no native build then)"
print(json.dumps({"cpu_s": cpu, "wall_s": s["wall_s"], "delivered": s["delivered"], "build": build,
                  "latency_ms": s["latency_ms"], "simulated_s": s["simulated_s"],
                  "module": sys.modules[run.__module__].__file__, "calls": calls,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, **digests}))
"""


def reference_against(baselines: list[str], trace: str | None, seconds: float | None, kmax: list[int]) -> None:
    """The reference tier's CPU per simulated second on sim-fig1, this checkout against each of
    ``baselines`` (another checkout's interpreter: the issue's is cd9ce3d), each run in its own
    process, one after the other per kmax; the same deliveries (count and latency quantiles) or not."""
    import json
    import subprocess
    import tempfile

    if trace and Path(trace).exists():
        trace = str(Path(trace).resolve())           # the runs' cwd is elsewhere (see _REFERENCE)
    print(f"reference tier, sim-fig1 over {seconds or 'the scenario'} s of {trace or 'its trace'}; load {_load()}")
    for k in kmax:
        runs = []
        for python in [sys.executable, *baselines]:
            with tempfile.TemporaryDirectory() as cwd:
                done = subprocess.run([python, "-c", _REFERENCE, trace or "", str(seconds or ""), str(k)],
                                      capture_output=True, text=True, cwd=cwd)
            if done.returncode:
                raise SystemExit(f"{python}: the run failed:\n{done.stderr[-2000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            r = runs[-1]
            print(f"  kmax {k} {python}: {r['cpu_s']:.1f} cpu s ({r['simulated_s'] / r['cpu_s']:.0f} sim s/cpu s), "
                  f"wall {r['wall_s']:.1f} s, peak RSS {r['rss_mb']} MB, {r['delivered']} deliveries "
                  f"(code: {r['module']}, {r['build']}); load {_load()}", flush=True)
        for python, r in zip(baselines, runs[1:]):
            same = (r["delivered"], r["latency_ms"]) == (runs[0]["delivered"], runs[0]["latency_ms"])
            print(f"  kmax {k}: {r['cpu_s'] / runs[0]['cpu_s']:.2f}x less cpu than {python}; deliveries and "
                  f"latency quantiles {'the same' if same else 'DIFFERENT'}; every delivery "
                  f"{_same(r, runs[0], 'deliveries')}; bandwidth rows {_same(r, runs[0], 'bandwidth')}")


def counts_against(baselines: list[str], trace: str | None, seconds: float, kmax: list[int], valgrind: bool) -> None:
    """Deterministic costs of the reference tier, this checkout against each of ``baselines`` (see
    ``--counts``): Python calls (cProfile) or, with ``valgrind``, instructions (cachegrind) of a run
    over ``seconds`` less those of a 10-s run (setup cancels), per simulated second."""
    import json
    import re
    import subprocess
    import tempfile

    if trace and Path(trace).exists():
        trace = str(Path(trace).resolve())
    what = "instructions (valgrind cachegrind)" if valgrind else "Python calls (cProfile)"
    print(f"reference tier, sim-fig1 over {seconds:.0f} s less 10 s of {trace or 'its trace'}: {what} per simulated s")

    def count(python: str, span: float, k: int) -> tuple[int, dict]:
        command = [python, "-c", _REFERENCE, trace or "", str(span), str(k), "" if valgrind else "calls"]
        if valgrind:
            command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *command]
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
        if done.returncode:
            raise SystemExit(f"{python}: the run failed:\n{done.stderr[-2000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        if not valgrind:
            return r["calls"], r
        return int(re.search(r"I\s+refs:\s+([\d,]+)", done.stderr).group(1).replace(",", "")), r

    for k in kmax:
        rates = []
        for python in [sys.executable, *baselines]:
            (short, _), (long, r) = count(python, 10.0, k), count(python, seconds, k)
            rates.append(((long - short) / (seconds - 10.0), r))
            print(f"  kmax {k} {python}: {rates[-1][0]:,.0f} per simulated s, {r['delivered']} deliveries "
                  f"(code: {r['module']}, {r['build']})", flush=True)
        mine = rates[0]
        for python, (rate, r) in zip(baselines, rates[1:]):
            print(f"  kmax {k}: {rate / mine[0]:.3f}x fewer than {python}; every delivery "
                  f"{_same(r, mine[1], 'deliveries')}; bandwidth rows {_same(r, mine[1], 'bandwidth')}")


def _same(run: dict, mine: dict, table: str) -> str:
    """Whether two runs' digests of ``table`` (every row, in one order) are equal."""
    return (f"the same (sha256 {mine[table]})" if run[table] == mine[table]
            else f"DIFFERENT (sha256 {run[table]} against {mine[table]})")


#: One sweep in its own process (its peak RSS its own), run by any checkout's interpreter: only
#: ``fig4_paper.run``, which every version since the paper-scale sweep has.  Its cwd is a fresh
#: directory, as ``_REFERENCE``'s: ``-c`` puts the cwd first on ``sys.path``, so run from a checkout
#: a baseline interpreter would import that checkout's ``replicast``.
_SWEEP = """
import json, resource, sys, tempfile, time
from pathlib import Path
from replicast.experiments import fig4_paper
cpu = time.process_time()
with tempfile.TemporaryDirectory() as out:
    result = fig4_paper.run(Path(out), trace=sys.argv[1], days=float(sys.argv[2]) / 86400, progress=False)
    csv = (Path(out) / "fig4_paper.csv").read_text()
print(json.dumps({"total_cpu_s": time.process_time() - cpu, "sweep_cpu_s": result["cpu_s"], "wall_s": result["wall_s"],
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "csv": csv,
                  "servers": result["servers"], "module": fig4_paper.__file__}))
"""


def timing_paper(trace: str | None, seconds: float, baselines: list[str]) -> None:
    """The paper-scale sweep with this checkout's interpreter and with each of ``baselines``
    (another checkout's interpreter, e.g. a ``git worktree`` of an older commit with its own
    venv), one after the other in the same invocation: CPU, peak RSS, the ratio, and whether the
    sweeps wrote the same ``fig4_paper.csv``."""
    import json
    import subprocess

    if trace is None:
        raise SystemExit("--timing-paper needs --trace (replicast trace synth --like planetlab --nodes 100 ...)")
    import tempfile

    if Path(trace).exists():
        trace = str(Path(trace).resolve())           # the runs' cwd is elsewhere (see _SWEEP)
    runs = []
    for python in [sys.executable, *baselines]:
        with tempfile.TemporaryDirectory() as cwd:
            done = subprocess.run([python, "-c", _SWEEP, trace, str(seconds)], capture_output=True, text=True,
                                  cwd=cwd)
        if done.returncode:
            raise SystemExit(f"{python}: the sweep failed:\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append(result)
        sweep = result["sweep_cpu_s"]
        print(f"{python} ({result['module']}): fig4 --paper-scale over {seconds / 3600:g} simulated h of {trace} "
              f"({result['servers']} servers, 10 configurations): sweep {sweep:.1f} cpu s, setup "
              f"{result['total_cpu_s'] - sweep:.1f} cpu s, wall {result['wall_s']:.1f} s, peak RSS {result['rss_mb']} MB; "
              f"a month extrapolated from this rate: {30 * 86400 / seconds * sweep / 60:.1f} cpu min (+ setup); "
              f"load {_load()}", flush=True)
    for python, result in zip(baselines, runs[1:]):
        print(f"against {python}: {result['sweep_cpu_s'] / runs[0]['sweep_cpu_s']:.2f}x less sweep cpu; "
              f"fig4_paper.csv {'the same' if result['csv'] == runs[0]['csv'] else 'DIFFERENT'}")


def timing_tier(prepared: Prepared, kmax: list[int], reference: bool) -> None:
    import numpy as np

    from replicast.simulator.timing import differences, run_timing

    span = (prepared.end - prepared.start) / 1e6
    print(f"load average at start: {_load()}; sim-fig1, {span:.0f} simulated s of trace {prepared.scenario.trace} "
          f"({len(prepared.servers)} servers)")

    def q(values) -> str:
        if not len(values):
            return "-"
        p = np.quantile(values, [0.5, 0.99, 0.999], method="inverted_cdf") / 1000
        return f"{p[0]:.1f}/{p[1]:.1f}/{p[2]:.1f}/{values.max() / 1000:.1f}"

    for deployment in ("random", "min-cost"):
        for k in kmax:
            cpu = time.process_time()
            timing = run_timing(prepared, k, deployment=deployment)
            timing_cpu = time.process_time() - cpu
            latency = timing.deliveries.column("latency_us").to_numpy()
            line = (f"{deployment:>8} kmax={k}: timing {timing_cpu:.2f} cpu s ({span / timing_cpu:,.0f} sim s/cpu s; "
                    f"30 d extrapolated: {30 * 86400 / (span / timing_cpu) / 60:.1f} cpu min), {len(latency)} deliveries, "
                    f"ms p50/p99/p99.9/max {q(latency)}")
            if reference:
                cpu = time.process_time()
                exact = run(prepared, k, keep_records=True, deployment=deployment)
                exact_cpu = time.process_time() - cpu
                diff, unmatched = differences(exact, timing)
                ref_latency = exact.recorder.deliveries().column("latency_us").to_numpy()
                line += (f"; reference {exact_cpu:.1f} cpu s ({exact_cpu / timing_cpu:.0f}x), ms {q(ref_latency)}; "
                         f"unmatched {unmatched}, |diff| > 1 ms: {int((np.abs(diff) > 1000).sum())} "
                         f"(timing − reference µs: min {diff.min() if len(diff) else 0}, max {diff.max() if len(diff) else 0})")
            print(line + f"  load {_load()}", flush=True)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
