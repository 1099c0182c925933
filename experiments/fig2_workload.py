"""Fig. 2's input (§VI-B): three servers a, b, c each report their CPU load and the RTTs they measure
to the other two every half second — deterministic, so every mode gets the same records.

:func:`events` gives them with timestamps relative to the start (µs, on the 0.5 s grid);
the simulator reads them as an ``events`` source file, and ``python -m experiments.fig2_workload``
publishes them to a live cluster's broker at those times from a common start instant, stamping
each record with its wall-clock µs (source-stamped, so latency = arrival − ts is the path's delay).
Each tick's payload on every stream starts with a punctuation just below the tick's timestamp, which
closes the tick before it, as :func:`engine.replay.source_messages` punctuates the simulator's
``events`` sources: a source learns that an interval is over when it has its next record.  After
the last tick, ``CLOSED``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

SERVERS = ("a", "b", "c")
PERIOD_US = 500_000
BASE_RTT_MS = {("a", "b"): 80.0, ("a", "c"): 110.0, ("b", "c"): 60.0}
STREAMS = tuple(f"{kind}_{s}" for kind in ("cpu", "ping") for s in SERVERS)


def events(seconds: float, seed: int = 2008) -> list[dict]:
    """``seconds`` of the sources: ``{"stream", "ts", fields…}`` with ``ts`` in µs from 0, in order."""
    rng = random.Random(seed)
    load = dict.fromkeys(SERVERS, 0.5)
    out = []
    for tick in range(round(seconds * 1e6 / PERIOD_US)):
        ts = tick * PERIOD_US
        for server in SERVERS:
            load[server] = min(1.0, max(0.0, load[server] + rng.uniform(-0.08, 0.08)))
            out.append({"stream": f"cpu_{server}", "ts": ts, "server": server, "load": round(load[server], 3)})
            for other in SERVERS:
                if other != server:
                    rtt = BASE_RTT_MS[tuple(sorted((server, other)))] * rng.uniform(0.9, 1.3)
                    out.append({"stream": f"ping_{server}", "ts": ts, "src": server, "dst": other,
                                "rtt_ms": round(rtt, 2)})
    return out


def write_events(path: Path, seconds: float, origin_us: int = 0) -> Path:
    """The events as a JSON-lines events file, timestamps shifted by ``origin_us``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**e, "ts": e["ts"] + origin_us}) + "\n" for e in events(seconds)),
                    encoding="utf-8")
    return path


def ticks(items: list[dict]) -> list[tuple[int, dict[str, list[dict]]]]:
    """The events grouped by timestamp and stream: ``[(ts, {stream: [record…]})…]``."""
    grouped: dict[int, dict[str, list[dict]]] = {}
    for item in items:
        record = {k: v for k, v in item.items() if k != "stream"}
        grouped.setdefault(item["ts"], {}).setdefault(item["stream"], []).append(record)
    return sorted(grouped.items())


async def publish(seconds: float, start_unix_us: int, host: str, port: int) -> None:
    import aiomqtt

    from replicast.operators.record import CLOSED

    schedule = ticks(events(seconds))
    async with aiomqtt.Client(host, port, identifier=f"fig2-source-{start_unix_us}") as client:
        for ts, streams in schedule:
            at = start_unix_us + ts
            await asyncio.sleep(max(0.0, at / 1e6 - time.time()))
            for stream in STREAMS:
                records = [{**r, "ts": at} for r in streams.get(stream, [])]
                await client.publish(f"replicast/in/{stream}", json.dumps([{"punctuation": at - 1}, *records]), qos=1)
        for stream in STREAMS:
            await client.publish(f"replicast/in/{stream}", json.dumps([{"punctuation": CLOSED}]), qos=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, required=True, help="how long the sources run")
    parser.add_argument("--start-unix-us", type=int, required=True, help="wall-clock µs of the first tick")
    parser.add_argument("--broker-host", default="127.0.0.1")
    parser.add_argument("--broker-port", type=int, required=True)
    args = parser.parse_args(argv)
    asyncio.run(publish(args.seconds, args.start_unix_us, args.broker_host, args.broker_port))


if __name__ == "__main__":
    main()
