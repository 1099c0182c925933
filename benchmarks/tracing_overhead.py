"""Trace-query overhead: node throughput with no query, with one query at 1/1000 sampling and at
1/100, in the same run (docs/tracing.md; targets: ≤ 1 % and ≤ 5 % less than none).

    python3 benchmarks/tracing_overhead.py                    # both measurements, k = 2
    python3 benchmarks/tracing_overhead.py --in-process --records 200000 --rounds 7   # the core alone
    python3 benchmarks/tracing_overhead.py --tcp --records 2000000 --rounds 7         # the node over TCP (CPU ticks < 0.1 %)
    python3 benchmarks/tracing_overhead.py --rounds 41 --tcp-rounds 7 --samples hooks,1000,100,1000000000
    python3 benchmarks/tracing_overhead.py --in-process --instructions --rounds 41   # + instruction counts
    python3 benchmarks/tracing_overhead.py --tcp --records 200000 --rounds 2 --tcp-instructions  # + the node in instructions

Two measurements, each with the cases in alternating rounds (each round in another order: every
case starts as many rounds); every figure is the median of the rounds, and every ratio is
against the no-query baseline of the same run (the median over the rounds of each round's own
ratio: a round's cases run back to back, so a load change between rounds moves numerator and
denominator alike).

* In-process (the targets' measurement): the node core alone, no sockets, no process — the same
  frames, decoded beforehand, handed to one core with ``receive``; this process's CPU time (steadier
  than wall time on a shared machine), and the core's work is all of it, so the hooks' share is
  the largest it can be.
* TCP: benchmarks/node.py's case: one ``replicast node`` process hosts a Filter and the
  application after it, and this process plays k upstream replicas sending the same records in
  batch frames over the real handshake; throughput = distinct records / time until the node has
  acknowledged every stream replica's end, and the node's CPU µs per distinct record beside it.
  Before the upstreams connect, the query is installed on the running node over its metrics port
  (``PUT /trace/queries/ID``, as ``replicast trace-query`` does).

* TCP in instructions (``--tcp-instructions``, with the TCP measurement; Linux, valgrind): the
  same runs with the node process under cachegrind, its whole process counted; a no-query
  process fed a quarter of the records gives the records' share of a count.  The node's CPU per
  record over TCP moves by ±5 % from round to round on a shared machine, which hides a cost of a
  few per cent; a count moves by a few million instructions in eight billion.

* Instructions (``--instructions``, with the in-process measurement; Linux, valgrind): the
  in-process loop of each case run once in a process of its own under valgrind's cachegrind,
  counted as the instructions of a process that runs it less those of one that only sets it up
  (hash and address-space randomisation off).  A count repeats to a few hundred instructions
  whatever the machine's load, so it resolves what CPU time on a shared machine cannot; it
  counts no cache miss, which CPU time does, and what was allocated before the loop moves it by
  up to 0.25 %.

The query is the win share per upstream replica at every port, an ``Arrival`` query — every copy
of every record passes its hook, the sampled ones become events.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from node import SECRET, batch_frames, load, start_node, timed, upstream, write_cluster  # noqa: E402

from replicast.engine.aio.trace_service import token  # noqa: E402

QUERY = ('From a In Arrival Where a.outcome = "pass" GroupBy a.replica, a.port, a.upstream '
         "Select a.replica, a.port, a.upstream, COUNT, SHARE Sample 1/{n}")


def install(metrics_port: int, text: str) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/trace/queries/bench", data=text.encode(),
                                     method="PUT", headers={"Authorization": f"Bearer {token(SECRET.encode())}"})
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def events(metrics_port: int) -> int:
    """How many events the node's query counted (its reports so far)."""
    import json
    request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/trace/results?after=0",
                                     headers={"Authorization": f"Bearer {token(SECRET.encode())}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        reports = json.loads(response.read())["reports"]
    return sum(states[0] for r in reports for table in r["tables"].values() for _, states in table)


def _start_counted_node(cluster: Path, port: int, log: Path) -> subprocess.Popen:
    """``replicast node`` as :func:`node.start_node` starts it, under valgrind's cachegrind (its
    instruction count written to ``log`` when it stops), hash and address-space randomisation off."""
    wrapper = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", f"--log-file={log}"]
    if shutil.which("setarch"):
        wrapper = ["setarch", "-R", *wrapper]
    return start_node(cluster, port, tuple(wrapper), env={**os.environ, "PYTHONHASHSEED": "0"},
                      timeout=600)                  # valgrind runs Python ~50 times slower


def run(k: int, records: int, batch: int, sample: int | None,
        count_into: Path | None = None) -> tuple[tuple[float, float | None], int]:
    """One node fed by k upstreams with the query at 1/``sample`` installed (None: no query);
    under valgrind, its whole process's instructions written to ``count_into``, if given."""
    frames, offsets = batch_frames(k, records, batch)
    with tempfile.TemporaryDirectory() as tmp:
        cluster, port, metrics_port = write_cluster(Path(tmp), k, 1, entry_on_target=False)
        node = start_node(cluster, port) if count_into is None else _start_counted_node(cluster, port, count_into)
        try:
            if sample is not None:
                install(metrics_port, QUERY.format(n=sample))

            async def main() -> float:
                start = time.perf_counter()
                await asyncio.gather(*(upstream(f"u{i}", port, frames[i], offsets[i]) for i in range(k)))
                return time.perf_counter() - start
            result = timed(main, node.pid, records)
            counted = 0
            if sample is not None:
                time.sleep(1.2)                        # the node takes its tables every second
                counted = events(metrics_port)
            return result, counted
        finally:
            node.terminate()
            node.wait(10 if count_into is None else 600)


def _node_instructions(k: int, records: int, batch: int, sample: int | None) -> int:
    """The instructions of one whole ``replicast node`` process fed ``records`` (valgrind)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cachegrind.log"
        run(k, records, batch, sample, count_into=log)
        match = re.search(r"I\s+refs:\s+([\d,]+)", log.read_text())
    if match is None:
        raise RuntimeError(f"valgrind said no instruction count: {log.read_text()[-500:]}")
    return int(match.group(1).replace(",", ""))


def tcp_instructions(k: int, records: int, batch: int, rounds: int) -> None:
    """The node over TCP in instructions (Linux, valgrind): each case's whole node process, and a
    no-query process fed a quarter of the records, so that the records' share of a count is known
    (the rest is the process's start, its handshakes and its stop).  A case's overhead is its
    count less the no-query count, over the no-query records' share.  CPU time over TCP moves by
    ±5 % a round on a shared machine; a count by a few million instructions in eight billion."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--tcp-instructions needs valgrind (Debian: apt-get install valgrind)")
    cases = [case for case in CASES if case != HOOKS]
    counts: dict = {case: [] for case in cases}
    fewer = []
    for r in range(rounds):
        for case in rotated(cases, r):
            counts[case].append(_node_instructions(k, records, batch, case))
            print(f"    {label(case):>9}: {counts[case][-1]:,} instructions", file=sys.stderr)
        fewer.append(_node_instructions(k, records // 4, batch, None))
    base = statistics.median(counts[None])
    per_record = (base - statistics.median(fewer)) / (records - records // 4)
    print(f"  TCP in instructions (one node process under valgrind, k={k}, {records} records in batches of "
          f"{batch}, median of {rounds} rounds):")
    print(f"    {label(None):>9}: {per_record:8.1f} instructions per distinct record "
          f"(whole process {base:,.0f}; with {records // 4} records {statistics.median(fewer):,.0f})")
    for case in cases[1:]:
        extra = statistics.median(counts[case]) - base
        print(f"    {label(case):>9}: {extra / records:+8.1f} instructions per distinct record = "
              f"{extra / (per_record * records):+.2%} against no query   "
              f"[{', '.join(f'{c - b:+,}' for c, b in zip(counts[case], counts[None]))}]")


CASES: tuple = (None, 1000, 100)                  # no query, then 1/N (--samples)
TARGETS = {1000: 0.01, 100: 0.05}
#: --samples case (in-process only): the hooks are called and return at once (a query that
#: samples nothing installed, its Arrival hook replaced by ``return``): what the calls alone cost.
HOOKS = "hooks"
#: A sampling that samples nothing here (no slot of these records' times is sampled).
NOTHING = 1_000_000_000


def label(case: int | str | None) -> str:
    return "no query" if case is None else "hooks only" if case == HOOKS else f"1/{case}"


def rotated(cases, r: int) -> list:
    """Round ``r``'s order of the cases: each starts as many rounds as the others (a case's place
    in a round — after which case, how much garbage before it — is not one case's bias)."""
    r %= len(cases)
    return [*cases[r:], *cases[:r]]


def paired(rounds: list[dict], case: int, lower_is_better: bool = True) -> float:
    """The median over rounds of the case's cost over the same round's no-query cost, less 1."""
    ratios = [r[case] / r[None] if lower_is_better else r[None] / r[case] for r in rounds]
    return statistics.median(ratios) - 1


def _bench_messages(k: int, records: int, batch: int) -> list:
    """Per upstream replica, its batch frames decoded (records included), as the core receives them."""
    from replicast.engine.wire import decode
    frames, _ = batch_frames(k, records, batch)
    messages = [[decode(frame[4:]) for frame in per] for per in frames]
    for per in messages:                               # decode the records now, not in the first round
        for message in per:
            getattr(message.records, "stamps", None)
    return messages


def _bench_core(k: int, case: int | str | None):
    """A started core hosting the Filter and its application, with ``case``'s query installed; and
    the tracer (made for the no-query case too, and removed: keep it until the loop has run)."""
    from replicast.engine.core import tracepoints
    from replicast.engine.core.trace_language import parse
    from replicast.engine.query_file import parse_query
    from node import QUERY as NODE_QUERY
    from tests.engine.started import started_core

    class Returning(tracepoints.Tracer):
        """The tracer with an Arrival hook that returns at once (the HOOKS case)."""
        __slots__ = ()

        def arrival(self, *args) -> None:
            return None

    core, now = started_core(parse_query(NODE_QUERY), {"s": [f"u{i}" for i in range(k)], "f": ["z"], "app": ["z"]},
                             "z")
    tracepoints.install(core, "bench", parse(QUERY.format(n=NOTHING if case in (None, HOOKS) else case)))
    tracer = core.tracer
    if case is None:                                   # made as in the other cases (the same objects
        tracepoints.remove(core, "bench")              # allocated before the loop), then removed
    elif case == HOOKS:
        tracer.__class__ = Returning
    return core, now, tracer


def _feed(core, now: int, messages: list) -> None:
    """The benchmark's loop: each batch's k copies in turn, the core's output drained after each."""
    for copies in zip(*messages):
        for i, message in enumerate(copies):
            core.receive(f"u{i}", message, now=now)
        core.messages_to_send(), core.events()


def in_process(k: int, records: int, batch: int, rounds: int) -> dict[int, float]:
    """The node core alone: CPU seconds per case in each of ``rounds`` alternating rounds; prints
    the medians and returns each query case's overhead (paired median ratio, less 1)."""
    messages = _bench_messages(k, records, batch)

    def once(case: int | str | None) -> float:
        core, now, _tracer = _bench_core(k, case)
        gc.collect()
        start = time.process_time()
        _feed(core, now, messages)
        return time.process_time() - start

    runs = [{case: once(case) for case in rotated(CASES, r)} for r in range(rounds)]
    print(f"  in-process (the node core alone, k={k}, {records} records in batches of {batch}, "
          f"median of {rounds} alternating rounds, CPU time):")
    overhead = {}
    for case in CASES:
        per_record = statistics.median(r[case] for r in runs) / records * 1e6
        spread = ", ".join(f"{r[case] / records * 1e6:.3f}" for r in runs)
        if case is None:
            print(f"    {label(case):>9}: {per_record:.3f} µs per distinct record   [{spread}]")
            continue
        overhead[case] = paired(runs, case)
        target = TARGETS.get(case)
        verdict = "" if target is None else \
            f" (target <= {target:.0%}: {'met' if overhead[case] <= target else 'NOT MET'})"
        print(f"    {label(case):>9}: {per_record:.3f} µs per distinct record   [{spread}]   "
              f"{overhead[case]:+.1%} against no query{verdict}")
    return overhead


def _case_arg(case: int | str | None) -> str:
    return "none" if case is None else str(case)


def _parse_case(text: str) -> int | str | None:
    return None if text == "none" else HOOKS if text == HOOKS else int(text)


def count_child(k: int, records: int, batch: int, case: int | str | None, loop: bool) -> None:
    """(In a process of its own, under valgrind) the in-process case's setup, then its loop if ``loop``."""
    messages = _bench_messages(k, records, batch)
    core, now, _tracer = _bench_core(k, case)
    gc.collect()
    gc.disable()                                       # a collection's place must not move the count
    if loop:
        _feed(core, now, messages)


def _instructions(k: int, records: int, batch: int, case: int | str | None, loop: bool) -> int:
    """Instructions one count_child process executes (valgrind's cachegrind, no cache simulation)."""
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, __file__, "--k", str(k), "--records", str(records), "--batch", str(batch),
               "--count-case", _case_arg(case), "--count-loop", str(int(loop))]
    if shutil.which("setarch"):
        command = ["setarch", "-R", *command]          # the same addresses every run: dicts keyed by id()
    env = {**os.environ, "PYTHONHASHSEED": "0"}        # the same string hashes every run
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise RuntimeError(f"valgrind said no instruction count: {done.stderr[-500:]}")
    return int(match.group(1).replace(",", ""))


def instructions(k: int, records: int, batch: int, jobs: int) -> dict[int, float]:
    """The in-process loop's instructions per case (Linux, valgrind): the count of a process that
    runs the loop less that of one that only sets it up.  Load does not move it: a run repeats
    to a few hundred instructions.  It counts no cache miss (CPU time does), and what was
    allocated before the loop moves it by up to 0.25 % (docs/tracing.md, "Overhead")."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (Debian: apt-get install valgrind)")
    cases = list(CASES)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        counts = {(case, loop): pool.submit(_instructions, k, records, batch, case, loop)
                  for case in cases for loop in (False, True)}
        loops = {case: counts[(case, True)].result() - counts[(case, False)].result() for case in cases}
    print(f"  instructions (the in-process loop under valgrind, k={k}, {records} records in batches of {batch}):")
    overhead = {}
    for case in cases:
        line = f"    {label(case):>9}: {loops[case] / records:8.1f} instructions per distinct record"
        if case is not None:
            overhead[case] = loops[case] / loops[None] - 1
            line += f"   {overhead[case]:+.2%} against no query"
        print(line)
    return overhead


def tcp(k: int, records: int, batch: int, rounds: int) -> None:
    """The node over TCP: throughput and the node's CPU per record, per case, median of ``rounds``."""
    runs: list[dict] = []
    cases = [case for case in CASES if case != HOOKS]   # (the node's tracer cannot be replaced)
    counted: dict = {case: 0 for case in cases}
    for r in range(rounds):
        rates, cpus = {}, {}
        for case in rotated(cases, r):
            (rate, cpu), counted[case] = run(k, records, batch, case)
            rates[case], cpus[case] = rate, cpu
            print(f"    {label(case):>9}: {rate / 1000:8.1f} k records/s", file=sys.stderr)
        runs.append((rates, cpus))
    print(f"  TCP (one node process, k={k}, {records} records in batches of {batch}, median of {rounds} "
          f"alternating rounds):")
    rates = [r for r, _ in runs]
    cpus = [c for _, c in runs if None not in c.values()]
    for case in cases:
        rate = statistics.median(r[case] for r in rates)
        cpu = statistics.median(c[case] for c in cpus) if cpus else float("nan")
        line = (f"    {label(case):>9}: {rate / 1000:8.1f} k distinct records/s   {cpu:5.2f} µs node CPU/record   "
                f"[{', '.join(f'{r[case] / 1000:.0f}' for r in rates)} k/s]")
        if case is not None:
            ratios = sorted(c[case] / c[None] - 1 for c in cpus)
            spread = f" (rounds {ratios[0]:+.1%} … {ratios[-1]:+.1%})" if ratios else ""
            line += (f"   {paired(rates, case, lower_is_better=False):+.1%} time, "
                     f"{paired(cpus, case) if cpus else float('nan'):+.1%} CPU{spread} against no query; "
                     f"{counted[case]} passes counted (about {records // case} expected at each of the 2 ports, "
                     "in whole 256 µs slots)")
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=2, help="upstream replicas (default 2)")
    parser.add_argument("--records", type=int, default=200_000, help="records per run (default 200000)")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch frame (default 1000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds, median reported (default 5)")
    parser.add_argument("--tcp-rounds", type=int, default=None,
                        help="rounds over TCP (default: --rounds; a TCP round takes seconds, in-process milliseconds)")
    parser.add_argument("--samples", default="1000,100",
                        help="the query's sampling cases N (Sample 1/N), comma-separated (default 1000,100); "
                             "a huge N (1000000000) samples nothing: the cost of batches without a sampled "
                             f"record; '{HOOKS}' (in-process only): the hooks called, returning at once")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the in-process loop's instructions per case under valgrind (Linux; "
                             "minutes: valgrind runs Python ~50 times slower): a figure load does not move")
    parser.add_argument("--tcp-instructions", action="store_true",
                        help="also count the node process's instructions over TCP under valgrind (Linux; "
                             "minutes): the tracing cost of the whole node, which load does not move")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once (default 2)")
    parser.add_argument("--count-case", help=argparse.SUPPRESS)      # (a child of --instructions)
    parser.add_argument("--count-loop", type=int, help=argparse.SUPPRESS)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--in-process", action="store_true", help="only the node core alone (no TCP)")
    only.add_argument("--tcp", action="store_true", help="only the node over TCP")
    args = parser.parse_args()
    if args.count_case is not None:
        count_child(args.k, args.records, args.batch, _parse_case(args.count_case), bool(args.count_loop))
        return 0
    global CASES
    try:
        CASES = (None, *(n if n == HOOKS else int(n) for n in args.samples.split(",")))
    except ValueError:
        parser.error(f"--samples: not a comma-separated list of integers: {args.samples!r}")
    print(f"load average at start: {load()}")
    if not args.tcp:
        in_process(args.k, args.records, args.batch, args.rounds)
        if args.instructions:
            instructions(args.k, args.records, args.batch, args.jobs)
    if not args.in_process:
        tcp_rounds = args.rounds if args.tcp_rounds is None else args.tcp_rounds
        tcp(args.k, args.records, args.batch, tcp_rounds)
        if args.tcp_instructions:
            tcp_instructions(args.k, args.records, args.batch, tcp_rounds)
    print(f"load average at end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
