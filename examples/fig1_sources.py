"""The two real sources of Fig. 1 for one server (§VI-A): its CPU load and its RTTs to the others.

Every half second (§VI-B) it publishes, source-stamped, ``{"ts", "server", "load"}`` on
``replicast/in/cpu_<node>`` and one ``{"ts", "src", "dst", "rtt_ms"}`` per other node on
``replicast/in/ping_<node>``; every ``--punctuation-ms`` it publishes ``{"punctuation": now − 1}``
on both topics (in-band, so every entry-point replica sees the same sequence).  The RTT is the
time of a TCP connect to the other node's port; the load is the busy share of all CPUs over the
last interval (psutil's ``cpu_percent``: the share of all CPUs busy since its last call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time

import aiomqtt
import psutil


def now_us() -> int:
    return time.time_ns() // 1000


def rtt_ms(host: str, port: int) -> float | None:
    start = time.perf_counter()
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return None                      # unreachable: no measurement (like a failed ping)
    return round((time.perf_counter() - start) * 1000, 3)


async def run(args: argparse.Namespace) -> None:
    peers = dict(item.split("=", 1) for item in args.nodes.split(","))
    peers = {name: (a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for name, a in peers.items()
             if name != args.node and name.startswith("n")}
    cpu_topic, ping_topic = f"replicast/in/cpu_{args.node}", f"replicast/in/ping_{args.node}"
    async with aiomqtt.Client(args.broker_host, args.broker_port, identifier=f"fig1-source-{args.node}") as client:
        psutil.cpu_percent()             # the first call starts the interval
        next_sample = next_punctuation = time.monotonic()
        while True:
            if time.monotonic() >= next_sample:
                next_sample += args.interval_ms / 1000
                load = round(psutil.cpu_percent() / 100, 4)
                ts = now_us()
                await client.publish(cpu_topic, json.dumps({"ts": ts, "server": args.node, "load": load}), qos=1)
                loop = asyncio.get_running_loop()
                pings = []
                for name, (host, port) in sorted(peers.items()):
                    rtt = await loop.run_in_executor(None, rtt_ms, host, port)
                    if rtt is not None:
                        pings.append({"ts": now_us(), "src": args.node, "dst": name, "rtt_ms": rtt})
                if pings:
                    await client.publish(ping_topic, json.dumps(pings), qos=1)
            if time.monotonic() >= next_punctuation:
                next_punctuation += args.punctuation_ms / 1000
                p = now_us() - 1                 # every later record has ts ≥ now > p
                for topic in (cpu_topic, ping_topic):
                    await client.publish(topic, json.dumps({"punctuation": p}), qos=1)
            await asyncio.sleep(max(0.0, min(next_sample, next_punctuation) - time.monotonic()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", required=True)
    parser.add_argument("--nodes", required=True, help="name=host:port,… of every node")
    parser.add_argument("--broker-host", default="127.0.0.1")
    parser.add_argument("--broker-port", type=int, default=1883)
    parser.add_argument("--punctuation-ms", type=float, default=100.0)
    parser.add_argument("--interval-ms", type=float, default=500.0)
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
