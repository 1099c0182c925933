"""The exactly-once output path (docs/consume.md) against at-least-once delivery, in one run.

    python3 benchmarks/exactly_once.py                       # 10^6 records, a private mosquitto
    python3 benchmarks/exactly_once.py --records 100000      # a quick look

Three measurements, each with its baseline measured in the same process:

1. **Consumer, pure dedup path** — :class:`replicast.consume_core.ExactlyOnce` over the parsed
   payloads of two sink replicas (every record twice, interleaved payload by payload, batches of
   ``--batch`` records, a punctuation after each): unique records handed out per second of CPU,
   against the same loop handing out every item (at-least-once: no filter).  Memory: the peak of
   ``tracemalloc`` while the filter runs, and the most ids it remembered.
   The same from the payloads' bytes (``ExactlyOnce.offer_payload``, msgspec decoding, as the
   library does: a byte-identical copy is dropped undecoded), with its tracemalloc peak.
2. **Consumer, end to end** — the same payloads published to a real mosquitto on loopback by
   another process; the consumer library (:class:`replicast.consume.Consumer`, record by record
   and by batches) against a plain aiomqtt subscriber that parses and counts every record:
   records/s from the subscriber's start (connecting, subscribing) to the last item handed out,
   and the consumer process's CPU µs per item over that time.  (Timed from the first item handed
   out, a client that reads the whole backlog before handing anything out — the library before
   flow control did, waiting for its SUBACK behind it — has its receiving left out.)  ``--consumer-only`` runs just these, ``--rounds`` times alternately (run it with an
   interpreter that imports another checkout to compare two versions of the library).
3. **Added latency** — one delivery of ``--latency-batch`` records every 2 ms: the sink side
   (:class:`engine.sinks.OutputIds` and the payload with ids, or without) plus publish, broker,
   and the consumer library (or a plain subscriber), publish-to-hand-out time per payload.
   Rounds alternate the two paths; p50 and p99 of each, and their difference.

4. **Against an epoch-commit sink, in the simulator** (:mod:`simulator.epoch_commit`): visibility
   latency (visible − ts) of replicast's sink replicas and of a Flink-style two-phase-commit sink
   at checkpoint intervals 0.1, 1 and 10 s, on a simulated wide-area pipeline.

Targets: added latency ≤ 1 ms at p50 and ≤ 5 ms at p99; consumer ≥ 200 000 records/s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import aiomqtt
import msgspec

from replicast.consume import Consumer
from replicast import consume_core
from replicast.consume_core import ExactlyOnce
from replicast.engine.core.events import Delivered
from replicast.engine.sinks import OutputIds, mqtt_items
from replicast.experiments.ports import free_loopback_ports
from replicast.operators.record import CLOSED

NAMES = ("server", "load")


def deliveries(records: int, batch: int) -> list[Delivered]:
    out, ts = [], 1_000_000
    for start in range(0, records, batch):
        rows = [(ts + i // 2, f"s{i % 50}", float(i % 7)) for i in range(start, min(records, start + batch))]
        ts = rows[-1][0] + 1
        out.append(Delivered("alerts", rows, rows[-1][0], 0))
    out.append(Delivered("alerts", [], CLOSED, 0))
    return out


def payloads(events: list[Delivered], *, ids: bool) -> list[bytes]:
    sink = OutputIds("alerts")
    return [mqtt_items(NAMES, e, sink.ids(e) if ids else None) for e in events]


def two_replicas(payload_list: list[bytes]) -> list[bytes]:
    """Two sink replicas' copies, interleaved payload by payload."""
    return [p for payload in payload_list for p in (payload, payload)]


# -- 1. the pure dedup path -------------------------------------------------------------------------
def dedup_rate(stream: list[bytes], rounds: int) -> tuple[float, float, int]:
    """(records/s exactly once, items/s at least once, unique records)."""
    parsed = [json.loads(p) for p in stream]
    best_eo = best_alo = float("inf")
    unique = 0
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        consumer, unique = ExactlyOnce(), 0
        for items in parsed:
            unique += len(consumer.offer(items))
        best_eo = min(best_eo, time.process_time() - start)
        start = time.process_time()
        passed = 0
        for items in parsed:
            passed += len([i for i in items if "ts" in i])
        best_alo = min(best_alo, time.process_time() - start)
    return unique / best_eo, passed / best_alo, unique


def payload_rate(stream: list[bytes], rounds: int) -> tuple[float, int, int]:
    """(records/s from payload bytes, tracemalloc peak bytes of a run, unique records)."""
    decode = msgspec.json.Decoder().decode
    best, unique = float("inf"), 0
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        consumer, unique = ExactlyOnce(), 0
        for payload in stream:
            unique += len(consumer.offer_payload(payload, decode))
        best = min(best, time.process_time() - start)
    consumer = ExactlyOnce()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for payload in stream:
        consumer.offer_payload(payload, decode)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return unique / best, peak, unique


def dedup_memory(stream: list[bytes]) -> tuple[int, int]:
    """(peak bytes tracemalloc saw while filtering, most ids remembered)."""
    parsed = [json.loads(p) for p in stream]
    consumer, most = ExactlyOnce(), 0
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for items in parsed:
        consumer.offer(items[:-1])                   # the records, then their punctuation
        most = max(most, consumer.remembered)
        consumer.offer(items[-1:])
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak, most


# -- a private mosquitto ----------------------------------------------------------------------------
class Mosquitto:
    def __enter__(self) -> int:
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not os.path.exists(binary):
            sys.exit("mosquitto is not installed")
        self.port = free_loopback_ports(1)[0]
        self.dir = tempfile.TemporaryDirectory()
        conf = Path(self.dir.name) / "mosquitto.conf"
        conf.write_text(f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_queued_messages 0\nmax_inflight_messages 0\n")
        self.process = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        return self.port

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.dir.cleanup()


# -- 2. end to end ----------------------------------------------------------------------------------
# The sink replicas' payloads come from another process (``--publish``), as in a deployment, while the
# consumer is away: its persistent session makes the broker queue them (docs/consume.md).  Then the
# consumer comes back and drains the backlog, so what is timed is the consumer alone, not a
# publisher's pace: from its start to the last item it hands out, with its process's CPU time.
async def plain_subscriber(port: int, topic: str, client: str, clock: list | None) -> int:
    """A plain aiomqtt subscriber (persistent 3.1.1 session) that parses and counts every record;
    ``clock`` None: subscribe and leave."""
    seen = 0
    async with aiomqtt.Client("127.0.0.1", port, identifier=client, clean_session=False) as sub:
        # no time-out: the session's backlog comes before the SUBACK (docs/consume.md, "The consumer")
        await sub.subscribe(topic, qos=1, timeout=math.inf)
        if clock is None:
            return 0
        async for message in sub.messages:
            if not clock:
                clock.append(_now())
            items = json.loads(message.payload)
            seen += sum(1 for i in items if "ts" in i)
            if items and items[-1].get("punctuation") == CLOSED:
                return seen


async def library_subscriber(port: int, app: str, client: str, clock: list | None, batches: bool) -> int:
    """The consumer library: ``records()`` (one step per record) or ``batches()`` (one per payload);
    ``clock`` None: subscribe and leave."""
    consumer = Consumer(app, [f"mqtt://127.0.0.1:{port}"], client_id=client)
    iterator = consumer.batches() if batches else consumer.records()
    first = asyncio.ensure_future(iterator.__anext__())
    if clock is None:
        await asyncio.sleep(1.0)                     # connected and subscribed: leave, the session stays
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        return 0
    got = await first
    clock.append(_now())
    seen = len(got) if batches else 1
    async for item in iterator:
        seen += len(item) if batches else 1
    return seen


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


async def publish_all(port: int, topic: str, stream: list[bytes]) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-pub-{os.getpid()}",
                              max_queued_outgoing_messages=0) as pub:
        for start in range(0, len(stream), 200):      # 200 in flight: not one broker round trip per message
            await asyncio.gather(*(pub.publish(topic, payload, qos=1) for payload in stream[start:start + 200]))


def publisher(args) -> int:
    """``--publish PORT TOPIC``: two sink replicas' payloads of ``--records`` records (``--no-ids``:
    without ids), published to the broker — run as a process of its own by :func:`end_to_end`."""
    port, topic = int(args.publish[0]), args.publish[1]
    stream = two_replicas(payloads(deliveries(args.records, args.batch), ids=not args.no_ids))
    asyncio.run(publish_all(port, topic, stream))
    return 0


async def end_to_end(port: int, records: int, batch: int, kind: str, tag: str) -> tuple[float, int, float]:
    """(items handed out per second, how many, CPU µs of this process per item): ``kind`` is
    ``records`` or ``batches`` (the library) or ``plain`` (a plain aiomqtt subscriber, payloads
    without ids), draining a backlog another process published meanwhile (section comment)."""
    app = f"bench{tag}"
    topic, client = f"replicast/out/{app}", f"bench-{tag}-{os.getpid()}"

    def subscriber(clock):
        return plain_subscriber(port, topic, client, clock) if kind == "plain" else \
            library_subscriber(port, app, client, clock, kind == "batches")
    await subscriber(None)
    command = [sys.executable, __file__, "--publish", str(port), topic, "--records", str(records),
               "--batch", str(batch)] + (["--no-ids"] if kind == "plain" else [])
    process = await asyncio.create_subprocess_exec(*command)
    if await process.wait():
        raise RuntimeError(f"the publisher failed: {command}")
    clock: list = [_now()]          # from its start: connecting and subscribing included
    seen = await asyncio.wait_for(subscriber(clock), 600)
    (wall0, cpu0), (wall1, cpu1) = clock[0], _now()
    return seen / (wall1 - wall0), seen, (cpu1 - cpu0) / seen * 1e6


# -- memory while draining -------------------------------------------------------------------------
# A fresh process drains the backlog (``--drain``), so its peak RSS is the drain's and nothing else's.
def drainer(args) -> int:
    """``--drain PORT APP CLIENT KIND``: drain a backlog as ``end_to_end`` does, print a JSON line
    with the items seen, this process's RSS before and its peak, and (``--traced``) tracemalloc's
    peak above the start."""
    port, app, client, kind = int(args.drain[0]), args.drain[1], args.drain[2], args.drain[3]
    topic = f"replicast/out/{app}"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.traced:
        tracemalloc.start()
    coroutine = plain_subscriber(port, topic, client, []) if kind == "plain" else \
        library_subscriber(port, app, client, [], kind == "batches")
    seen = asyncio.run(coroutine)
    traced = tracemalloc.get_traced_memory()[1] if args.traced else None
    print(json.dumps({"seen": seen, "rss_start_kib": before, "rss_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "tracemalloc_peak_kib": traced // 1024 if traced is not None else None}))
    return 0


async def drain_memory(port: int, records: int, batch: int, kind: str, tag: str, traced: bool) -> dict:
    """Queue a backlog of two sink replicas' ``records`` for a session (as :func:`end_to_end`),
    then drain it in a fresh process; its :func:`drainer` line."""
    app = f"mem{tag}"
    topic, client = f"replicast/out/{app}", f"bench-mem-{tag}-{os.getpid()}"
    if kind == "plain":
        await plain_subscriber(port, topic, client, None)
    else:
        await library_subscriber(port, app, client, None, False)
    command = [sys.executable, __file__, "--publish", str(port), topic, "--records", str(records),
               "--batch", str(batch)] + (["--no-ids"] if kind == "plain" else [])
    if await (await asyncio.create_subprocess_exec(*command)).wait():
        raise RuntimeError(f"the publisher failed: {command}")
    command = [sys.executable, __file__, "--drain", str(port), app, client, kind] + (["--traced"] if traced else [])
    child = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    out, _ = await child.communicate()
    if child.returncode:
        raise RuntimeError(f"the drainer failed: {command}")
    return json.loads(out.decode().strip().splitlines()[-1])


def memory(args) -> int:
    """Peak RSS (and, in a second run, tracemalloc's peak) of a process draining ``--records``
    records from two sink replicas, the library by batches against a plain aiomqtt subscriber."""
    with Mosquitto() as port:
        async def network():
            for kind in ("batches", "plain"):
                rss = await drain_memory(port, args.records, args.batch, kind, f"{kind}r", False)
                traced = await drain_memory(port, args.records, args.batch, kind, f"{kind}t", True)
                name = "library, batches()" if kind == "batches" else "plain aiomqtt subscriber"
                print(f"memory draining {args.records:,} records (2 sink replicas' copies queued), {name}: "
                      f"max RSS {rss['rss_peak_kib'] / 1024:,.0f} MiB (at start {rss['rss_start_kib'] / 1024:,.0f} MiB), "
                      f"tracemalloc peak {traced['tracemalloc_peak_kib'] / 1024:,.1f} MiB; "
                      f"{rss['seen']:,} and {traced['seen']:,} items", flush=True)
        asyncio.run(network())
    return 0


# -- 3. latency -------------------------------------------------------------------------------------
async def latency(port: int, exactly_once: bool, n: int, batch: int, tag: str) -> list[float]:
    app = f"lat{tag}"
    topic = f"replicast/out/{app}"
    sent: dict[int, int] = {}
    got: list[float] = []
    done = asyncio.Event()
    events = deliveries(n * batch, batch)[:-1]

    async def receive():
        if exactly_once:
            consumer = Consumer(app, [f"mqtt://127.0.0.1:{port}"], client_id=f"bench-lat-{tag}-{os.getpid()}",
                                until_closed=False)
            async for record in consumer.records():
                if record["ts"] in sent:
                    got.append((time.perf_counter_ns() - sent.pop(record["ts"])) / 1e6)
                    if len(got) == n:
                        done.set()
                        return
        else:
            async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-lat-plain-{tag}-{os.getpid()}") as sub:
                await sub.subscribe(topic, qos=1)
                async for message in sub.messages:
                    for item in json.loads(message.payload):
                        if item.get("ts") in sent:
                            got.append((time.perf_counter_ns() - sent.pop(item["ts"])) / 1e6)
                            if len(got) == n:
                                done.set()
                                return

    task = asyncio.create_task(receive())
    await asyncio.sleep(0.5)
    sink = OutputIds(app)
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-lat-pub-{tag}-{os.getpid()}") as pub:
        for event in events:
            sent[event.records[0][0]] = time.perf_counter_ns()
            payload = mqtt_items(NAMES, event, sink.ids(event) if exactly_once else None)
            await pub.publish(topic, payload, qos=1)
            await asyncio.sleep(0.002)
        await asyncio.wait_for(done.wait(), 60)
    await task
    return got


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def consumer_only(args) -> int:
    """The library (records and batches) against a plain subscriber, alternately, with the CPU time
    each took per item handed out; the publisher is another process."""
    kinds = ["records", "batches", "plain"] if hasattr(Consumer, "batches") else ["records", "plain"]
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpus: dict[str, list[float]] = {kind: [] for kind in kinds}
    print(f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    with Mosquitto() as port:
        async def network():
            for r in range(args.rounds):
                for kind in kinds:
                    rate, seen, cpu = await end_to_end(port, args.records, args.batch, kind, f"{kind}{r}")
                    assert seen == (2 if kind == "plain" else 1) * args.records, (kind, seen)
                    rates[kind].append(rate)
                    cpus[kind].append(cpu)
                    what = "items (copies)" if kind == "plain" else "unique records"
                    print(f"round {r}: {'plain aiomqtt subscriber' if kind == 'plain' else 'library, ' + kind}: "
                          f"{rate:,.0f} {what}/s, CPU {cpu:.2f} µs each "
                          f"(max RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB)",
                          flush=True)
        asyncio.run(network())
    for kind in kinds:
        name = "plain aiomqtt subscriber, copies/s" if kind == "plain" else f"library, {kind}(), unique records/s"
        print(f"median of {args.rounds} rounds, {name}: {statistics.median(rates[kind]):,.0f} "
              f"(min {min(rates[kind]):,.0f}, max {max(rates[kind]):,.0f}); CPU {statistics.median(cpus[kind]):.2f} µs "
              f"each{'; target >= 200,000' if kind != 'plain' else ''}")
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-payloads", type=int, default=1000)
    parser.add_argument("--latency-batch", type=int, default=10)
    parser.add_argument("--publish", nargs=2, metavar=("PORT", "TOPIC"), help=argparse.SUPPRESS)
    parser.add_argument("--no-ids", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--drain", nargs=4, metavar=("PORT", "APP", "CLIENT", "KIND"), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help="only the memory of a process draining --records "
                        "records: the library against a plain subscriber (max RSS, then tracemalloc's peak)")
    parser.add_argument("--consumer-only", action="store_true", help="only the end-to-end consumer comparison, "
                        "--rounds times alternately (wall-clock rates and CPU seconds: the machine is shared)")
    args = parser.parse_args(argv)
    logging.getLogger("mqtt").setLevel(logging.ERROR)      # aiomqtt's "pending publish calls" notes

    if args.publish:
        return publisher(args)
    if args.drain:
        return drainer(args)
    if args.consumer_only:
        return consumer_only(args)
    if args.memory:
        return memory(args)
    from replicast.simulator.epoch_commit import compare
    for v in compare():
        design = v.design if v.interval_s is None else f"{v.design}, checkpoint every {v.interval_s:g} s"
        print(f"simulator, visibility latency, {design}: p50 {v.p50_ms:,.0f} ms, p99 {v.p99_ms:,.0f} ms "
              f"({v.records} records)")

    events = deliveries(args.records, args.batch)
    start = time.process_time()
    with_ids = payloads(events, ids=True)
    sink_eo = time.process_time() - start
    start = time.process_time()
    without = payloads(events, ids=False)
    sink_alo = time.process_time() - start
    print(f"sink side, {args.records} records: payloads with ids {args.records / sink_eo:,.0f} records/s, "
          f"without {args.records / sink_alo:,.0f} records/s (ratio {sink_alo / sink_eo:.2f})")

    eo, alo, unique = dedup_rate(two_replicas(with_ids), args.rounds)
    assert unique == args.records, (unique, args.records)
    print(f"consumer, pure dedup (2 sink replicas, {2 * args.records} copies): {eo:,.0f} records/s exactly once; "
          f"at least once {alo:,.0f} items/s (ratio {eo / alo:.2f}); target >= 200,000")
    rate, payload_peak, unique = payload_rate(two_replicas(with_ids), args.rounds)
    assert unique == args.records, (unique, args.records)
    print(f"consumer, from payload bytes (msgspec; byte-identical copies dropped undecoded): {rate:,.0f} records/s; "
          f"tracemalloc peak {payload_peak / 1024:,.0f} KiB (ids of one interval, covered payloads <= "
          f"{consume_core.COVERED_BYTES // 1024} KiB)")
    peak, most = dedup_memory(two_replicas(with_ids))
    print(f"consumer memory over {args.records} records: tracemalloc peak {peak / 1024:,.0f} KiB, "
          f"most ids remembered {most} (one punctuation interval: {args.batch})")

    with Mosquitto() as port:
        async def network():
            rate_lib, seen_lib, cpu_lib = await end_to_end(port, args.records, args.batch, "records", "lib")
            rate_batch, seen_batch, cpu_batch = await end_to_end(port, args.records, args.batch, "batches", "batch")
            rate_plain, seen_plain, cpu_plain = await end_to_end(port, args.records, args.batch, "plain", "plain")
            assert seen_lib == seen_batch == args.records and seen_plain == 2 * args.records, (seen_lib, seen_plain)
            print(f"consumer, end to end on mosquitto (2 sink replicas, publisher in another process): library "
                  f"{rate_lib:,.0f} records/s exactly once (CPU {cpu_lib:.2f} µs each), by batches {rate_batch:,.0f} "
                  f"(CPU {cpu_batch:.2f} µs); plain aiomqtt subscriber {rate_plain:,.0f} items/s at least once "
                  f"(CPU {cpu_plain:.2f} µs each); target >= 200,000")
            eo_lat, alo_lat = [], []
            for r in range(4):
                alo_lat += await latency(port, False, args.latency_payloads // 4, args.latency_batch, f"a{r}")
                eo_lat += await latency(port, True, args.latency_payloads // 4, args.latency_batch, f"e{r}")
            for name, values in (("at least once", alo_lat), ("exactly once", eo_lat)):
                print(f"latency, {name}: p50 {pct(values, 50):.3f} ms, p99 {pct(values, 99):.3f} ms ({len(values)} payloads)")
            print(f"added latency of exactly once: p50 {pct(eo_lat, 50) - pct(alo_lat, 50):+.3f} ms, "
                  f"p99 {pct(eo_lat, 99) - pct(alo_lat, 99):+.3f} ms (targets <= 1 ms, <= 5 ms)")
        asyncio.run(network())
    return 0


if __name__ == "__main__":
    sys.exit(main())
