"""replicast's operators against Bytewax 0.21.1 on the same records, and `replay` against the operators.

    python3 benchmarks/compare.py                          # 1 000 000 records per workload, 3 rounds
    python3 benchmarks/compare.py --records 100000 --rounds 1    # a quick look

Three workloads (docs/performance.md), each on the same records for both engines, in one process:

* ``filter+map``: ``v % 3 != 0``, then ``(ts, k, 2·v + 1)``;
* ``window``: a 1 s tumbling window per key computing ``count()`` and ``sum(v)``;
* ``join``: an interval join on key, ``|t1 − t2| < 100 ms`` and ``a.k == b.k``, the records split
  alternately between the two sides.

Records are ``(ts µs, k, v)``, one per ms of event time, ``k`` one of 100 keys, ``v`` an int below
1000 (ints, so that sums are exact in both engines).  replicast runs the operators compiled from a
query, driven directly in batches of 1000 records (500 per side for the join) with a punctuation
after each batch, as a node runs them.  Bytewax runs a single-worker dataflow (``run_main``) over a
``TestingSource`` with the same batch size; its interval join is the usual keyed
``stateful_flat_map`` over the merged stream, each key keeping the last 100 ms of either side.
The two engines' outputs must be equal multisets (exit status 1 otherwise).

Then ``replay(query, streams, replicas=1)`` — what ``replicast replay --replicas 1`` runs — is timed
against driving the same operators directly, on the same workloads, and must give the same output.

Rounds alternate the engines (replicast, Bytewax, replay, …); each figure is the best CPU time of
this process (``time.process_time``: other work on the shared machine moves it less than wall time)
over the rounds, and ratios are taken within the run.  Targets (docs/performance.md): join ≥ 1.0× Bytewax's
throughput, window ≥ 5×, filter+map ≥ 2.5×; replay within 2× of the operators.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterator

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replicast.engine.replay import replay  # noqa: E402
from replicast.operators.query import Query, QueryBuilder  # noqa: E402
from replicast.operators.record import Record  # noqa: E402

BATCH = 1000
KEYS = 100
JOIN_WINDOW_MS = 100
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TARGETS = {"filter+map": 2.5, "window": 5.0, "join": 1.0}
REPLAY_TARGET = 2.0

Streams = dict[str, list[Record]]


@dataclass
class Workload:
    """One query, its input, and the three ways of running it."""

    name: str
    query: Query
    streams: Streams
    direct: Callable[[Query, Streams], list[Record]]
    bytewax: Callable[[Streams], list[Record]]


# -- data -----------------------------------------------------------------------------------------

def records(n: int, seed: int) -> list[Record]:
    """``n`` records ``(ts, k, v)``, one per ms."""
    rng = random.Random(seed)
    return [(i * 1000, rng.randrange(KEYS), rng.randrange(1000)) for i in range(n)]


def batches(stream: list[Record], size: int) -> Iterator[tuple[list[Record], int]]:
    """``(batch, punctuation)`` pairs, cut as they are consumed (as they reach a node, and as Bytewax's
    ``TestingSource`` cuts its batches): timestamps are strictly increasing, so a batch's last ts is
    a punctuation.  (Cutting all of them first kept 1000 lists of 1000 records alive through the
    run, and the garbage collector traversed them at every collection of the middle generation:
    a quarter of filter+map's CPU.)"""
    return ((stream[i:i + size], stream[min(i + size, len(stream)) - 1][0]) for i in range(0, len(stream), size))


def build(define: Callable[[QueryBuilder], None], streams: tuple[str, ...]) -> Query:
    q = QueryBuilder("<compare>")
    for name in streams:
        q.stream(name, {"k": "int", "v": "int"})
    define(q)
    return q.build()


# -- filter + map ---------------------------------------------------------------------------------

def filter_map_query() -> Query:
    def define(q: QueryBuilder) -> None:
        q.filter("keep", "s", where="v % 3 != 0")
        q.map("scale", "keep", set={"k": "k", "w": "v * 2 + 1"})
        q.application("app", "scale")
    return build(define, ("s",))


def filter_map_direct(query: Query, streams: Streams) -> list[Record]:
    keep, scale = query.new_operator("keep"), query.new_operator("scale")
    out: list[Record] = []
    for batch, p in batches(streams["s"], BATCH):
        out += scale.on_batch(0, keep.on_batch(0, batch))
        keep.on_punctuation(0, p)
        scale.on_punctuation(0, p)
    return out


def filter_map_bytewax(streams: Streams) -> list[Record]:
    from bytewax import operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list[Record] = []
    flow = Dataflow("filter_map")
    s = op.input("in", flow, TestingSource(streams["s"], batch_size=BATCH))
    s = op.filter("keep", s, lambda r: r[2] % 3 != 0)
    s = op.map("scale", s, lambda r: (r[0], r[1], r[2] * 2 + 1))
    op.output("out", s, TestingSink(out))
    run_main(flow)
    return out


# -- 1 s tumbling window per key ------------------------------------------------------------------

def window_query() -> Query:
    def define(q: QueryBuilder) -> None:
        q.aggregate("per_key", "s", group_by=["k"], window={"kind": "time", "size_ms": 1000},
                    compute={"n": "count()", "total": "sum(v)"})
        q.application("app", "per_key")
    return build(define, ("s",))


def window_direct(query: Query, streams: Streams) -> list[Record]:
    aggregate = query.new_operator("per_key")
    out: list[Record] = []
    for batch, p in batches(streams["s"], BATCH):
        aggregate.on_batch(0, batch)
        out += aggregate.on_punctuation(0, p)[0]
    out += aggregate.on_punctuation(0, 2**63 - 1)[0]
    return out


def window_bytewax(streams: Streams) -> list[Record]:
    from bytewax import operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators import windowing as win
    from bytewax.testing import TestingSink, TestingSource, run_main

    out: list[Record] = []
    flow = Dataflow("window")
    s = op.input("in", flow, TestingSource(streams["s"], batch_size=BATCH))
    keyed = op.key_on("key", s, lambda r: str(r[1]))
    # Event time only: the watermark is the largest timestamp seen (a constant "system" clock), so
    # no record is ever late because the benchmark itself took time.
    clock = win.EventClock(lambda r: EPOCH + timedelta(microseconds=r[0]), wait_for_system_duration=timedelta(0),
                           now_getter=lambda: EPOCH, to_system_utc=lambda t: None)
    windower = win.TumblingWindower(length=timedelta(seconds=1), align_to=EPOCH)
    sums = win.fold_window("count_sum", keyed, clock, windower, builder=lambda: (0, 0),
                           folder=lambda acc, r: (acc[0] + 1, acc[1] + r[2]),
                           merger=lambda a, b: (a[0] + b[0], a[1] + b[1]), ordered=False)
    # (key, (window id, (count, sum))) -> (window end, k, count, sum), as replicast emits it.
    flat = op.map("flat", sums.down, lambda kv: ((kv[1][0] + 1) * 1_000_000, int(kv[0]), *kv[1][1]))
    op.output("out", flat, TestingSink(out))
    run_main(flow)
    return out


# -- interval join on key -------------------------------------------------------------------------

def join_query() -> Query:
    def define(q: QueryBuilder) -> None:
        q.join("pairs", ["a", "b"], window_ms=JOIN_WINDOW_MS, on="a.k == b.k")
        q.application("app", "pairs")
    return build(define, ("a", "b"))


def join_streams(n: int, seed: int) -> Streams:
    both = records(n, seed)
    return {"a": both[0::2], "b": both[1::2]}


def join_direct(query: Query, streams: Streams) -> list[Record]:
    join = query.new_operator("pairs")
    left, right = batches(streams["a"], BATCH // 2), batches(streams["b"], BATCH // 2)
    out: list[Record] = []
    for (lb, lp), (rb, rp) in zip(left, right):
        out += join.on_batch(0, lb)
        join.on_punctuation(0, lp)
        out += join.on_batch(1, rb)
        join.on_punctuation(1, rp)
    return out


def join_bytewax(streams: Streams) -> list[Record]:
    from bytewax import operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    window = JOIN_WINDOW_MS * 1000
    # One input in timestamp order, each record tagged with its side: (side, ts, k, v).
    tagged = sorted([(0, *r) for r in streams["a"]] + [(1, *r) for r in streams["b"]], key=lambda t: t[1])

    def match(state, item):
        sides = state if state is not None else ([], [])
        side, ts, k, v = item
        other = sides[1 - side]
        expired = 0
        while expired < len(other) and other[expired][0] <= ts - window:
            expired += 1
        del other[:expired]
        if side == 0:
            pairs = [(ts, k, v, ok, ov) for _, ok, ov in other]
        else:
            pairs = [(ts, ok, ov, k, v) for _, ok, ov in other]
        sides[side].append((ts, k, v))
        return sides, pairs

    out: list[Record] = []
    flow = Dataflow("join")
    s = op.input("in", flow, TestingSource(tagged, batch_size=BATCH))
    keyed = op.key_on("key", s, lambda t: str(t[2]))
    joined = op.stateful_flat_map("interval_join", keyed, match)
    op.output("out", op.key_rm("unkey", joined), TestingSink(out))
    run_main(flow)
    return out


# -- running --------------------------------------------------------------------------------------

def workloads(n: int, seed: int) -> list[Workload]:
    single = {"s": records(n, seed)}
    return [Workload("filter+map", filter_map_query(), single, filter_map_direct, filter_map_bytewax),
            Workload("window", window_query(), single, window_direct, window_bytewax),
            Workload("join", join_query(), join_streams(n, seed), join_direct, join_bytewax)]


def timed(run: Callable[[], list[Record]]) -> tuple[float, float, list[Record]]:
    """CPU and wall seconds of one run, garbage collection included but started clean."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    out = run()
    return time.process_time() - cpu, time.perf_counter() - wall, out


def replay_outputs(workload: Workload) -> list[Record]:
    return replay(workload.query, workload.streams, replicas=1).outputs["app"]


def measure(workload: Workload, rounds: int, progress: tqdm) -> dict[str, tuple[float, float]]:
    """Best (CPU, wall) seconds per runner, alternating; raises SystemExit(1) on any output mismatch."""
    runners = {"replicast": lambda: workload.direct(workload.query, workload.streams),
               "bytewax": lambda: workload.bytewax(workload.streams),
               "replay": lambda: replay_outputs(workload)}
    best: dict[str, tuple[float, float]] = {}
    reference: Counter | None = None
    for _ in range(rounds):
        for name, run in runners.items():
            cpu, wall, out = timed(run)
            counted = Counter(out)
            if reference is None:
                reference = counted
            elif counted != reference:
                missing, extra = reference - counted, counted - reference
                progress.close()
                print(f"MISMATCH {workload.name}: {name} differs from replicast's operators: "
                      f"{sum(missing.values())} missing (e.g. {list(missing)[:2]}), "
                      f"{sum(extra.values())} extra (e.g. {list(extra)[:2]})")
                raise SystemExit(1)
            best[name] = min(best.get(name, (cpu, wall)), (cpu, wall))
            progress.update()
    progress.set_postfix_str(f"{workload.name}: {sum(reference.values())} output records")
    return best


def set_batch(size: int) -> None:
    """Batch size of both engines' inputs (the join gets half of it per side)."""
    global BATCH
    if size < 2:
        raise SystemExit(f"--batch: expected at least 2 records, got {size}")
    BATCH = size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per workload (default 1000000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best of them is kept (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of keys and values (default 0)")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"records per batch, both engines (default {BATCH})")
    args = parser.parse_args(argv)
    set_batch(args.batch)
    try:
        import bytewax  # noqa: F401
    except ImportError:
        print("compare.py needs Bytewax 0.21.1: pip install -e '.[bench]' (it has wheels for Python 3.8-3.12 only)",
              file=sys.stderr)
        return 2

    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.records} records per workload, batches of {BATCH}, best CPU s of {args.rounds} alternating rounds")
    loads = workloads(args.records, args.seed)
    results = {}
    with tqdm(total=len(loads) * args.rounds * 3, desc="runs", file=sys.stderr) as progress:
        for workload in loads:
            results[workload.name] = measure(workload, args.rounds, progress)

    print(f"\n{'workload':<12}{'replicast':>22}{'Bytewax':>22}{'ratio':>9}{'target':>9}")
    met = True
    for name, best in results.items():
        ours, theirs = best["replicast"][0], best["bytewax"][0]
        ratio = theirs / ours
        ok = ratio >= TARGETS[name]
        met &= ok
        print(f"{name:<12}{rate(args.records, best['replicast']):>22}{rate(args.records, best['bytewax']):>22}"
              f"{ratio:>8.2f}x{f'>= {TARGETS[name]}x':>9}  {'met' if ok else 'NOT MET'}")
    print(f"\n{'workload':<12}{'replay --replicas 1':>22}{'operators':>22}{'slower':>9}{'target':>9}")
    for name, best in results.items():
        slower = best["replay"][0] / best["replicast"][0]
        ok = slower <= REPLAY_TARGET
        met &= ok
        print(f"{name:<12}{rate(args.records, best['replay']):>22}{rate(args.records, best['replicast']):>22}"
              f"{slower:>8.2f}x{f'<= {REPLAY_TARGET}x':>9}  {'met' if ok else 'NOT MET'}")
    print(f"\noutputs equal in every run; targets {'met' if met else 'NOT MET'}; "
          f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def rate(n: int, best: tuple[float, float]) -> str:
    cpu, wall = best
    return f"{n / cpu / 1e3:,.0f} k/s ({cpu:.2f} s)"


if __name__ == "__main__":
    sys.exit(main())
