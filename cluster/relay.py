"""Delay relays: wide-area emulation in user space, for kernels without netem.

``cluster up --emulate-wan TRACE`` (where netem is missing, or with ``--wan-via relay``) starts one
relay process, ``python -m cluster.relay PLAN.json``, before the nodes.  For every ordered node
pair ``(a, b)`` it listens on a fresh loopback port and forwards each connection to ``b``'s real
port; node ``a`` gets a cluster file in which ``b`` is at that port, so every connection ``a``
makes to ``b`` crosses the relay, whichever side dials.  Bytes from ``a`` to ``b`` are delayed by
the trace's one-way delay ``a -> b`` at the moment they were read, bytes back by ``b -> a``
(:mod:`cluster.link_delay`: the current frame, FIFO per connection, outages hold the link).

Connection set-up itself is not delayed (the relay accepts at once and dials the target at once),
nor is MQTT traffic.  A direction holds at most :data:`MAX_BUFFERED` bytes in flight; past that it
stops reading, so a slow or cut link pushes back on the sender as TCP would.

Once listening, the relay writes ``PLAN.ports`` (JSON): ``origin_unix_us`` (wall-clock µs of its
origin, trace time ``trace_time_us``) and ``ports``: the listening port per link ``"a>b"``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from replicast.cluster.link_delay import Fifo, LinkDelay

log = logging.getLogger("replicast.relay")

#: Bytes one direction of one connection holds before it stops reading from the sender.
MAX_BUFFERED = 8 << 20
_EOF = b""


@dataclass(frozen=True)
class RelayLink:
    """Node ``src`` reaches node ``dst`` (trace nodes ``src_index``, ``dst_index``) through a relay
    listening on ``listen_host`` that forwards to ``target_host:target_port``."""
    src: str
    dst: str
    src_index: int
    dst_index: int
    listen_host: str
    target_host: str
    target_port: int

    @property
    def key(self) -> str:
        return f"{self.src}>{self.dst}"


@dataclass(frozen=True)
class RelayPlan:
    trace: str                      # a trace name or directory (traces.catalog)
    trace_time_us: int              # trace time at the relay's origin
    links: list[RelayLink]

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"trace": self.trace, "trace_time_us": self.trace_time_us,
                                    "links": [asdict(link) for link in self.links]}, indent=1), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> "RelayPlan":
        doc = json.loads(path.read_text(encoding="utf-8"))
        return cls(doc["trace"], doc["trace_time_us"], [RelayLink(**link) for link in doc["links"]])


def ports_path(plan_path: Path) -> Path:
    return plan_path.with_suffix(".ports")


class Clock:
    """µs since the relay's origin, on the event loop's monotonic clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.origin = loop, loop.time()
        self.origin_unix_us = time.time_ns() // 1000

    def elapsed_us(self) -> int:
        return round((self.loop.time() - self.origin) * 1e6)

    def loop_time(self, elapsed_us: int) -> float:
        return self.origin + elapsed_us / 1e6


class Relay:
    """The listener of one link and the connections through it."""

    def __init__(self, link: RelayLink, forward: LinkDelay, backward: LinkDelay, clock: Clock):
        self.link, self.forward, self.backward, self.clock = link, forward, backward, clock
        self.connections = 0
        self.bytes = {"forward": 0, "backward": 0}
        self.server: asyncio.base_events.Server | None = None
        self.port: int | None = None

    async def start(self) -> int:
        """Listen on a fresh port of ``listen_host``; returns it."""
        self.server = await asyncio.start_server(self._accept, self.link.listen_host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    def close(self) -> None:
        """Stop accepting (connections in progress end with the event loop or their peers)."""
        if self.server is not None:
            self.server.close()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(self.link.target_host, self.link.target_port)
        except OSError as error:
            log.info("%s: cannot reach %s:%d (%s)", self.link.key, self.link.target_host, self.link.target_port, error)
            client_writer.close()
            return
        self.connections += 1
        log.info("%s: connection %d", self.link.key, self.connections)
        writers = (client_writer, target_writer)
        try:
            await asyncio.gather(self._pump(client_reader, target_writer, self.forward, "forward", writers),
                                 self._pump(target_reader, client_writer, self.backward, "backward", writers))
        except asyncio.CancelledError:
            pass
        finally:
            for writer in writers:
                writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: LinkDelay,
                    direction: str, writers: tuple) -> None:
        """Read from ``reader``, write each chunk to ``writer`` when the trace says it arrives."""
        queue: asyncio.Queue[tuple[int | None, bytes]] = asyncio.Queue()
        room = asyncio.Event()
        room.set()
        buffered = 0

        async def send() -> None:
            nonlocal buffered
            while True:
                due, data = await queue.get()
                if due is None:                        # held for ever: nothing after it arrives either
                    await asyncio.Event().wait()
                wait = self.clock.loop_time(due) - self.clock.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
                buffered -= len(data)
                if buffered <= MAX_BUFFERED:
                    room.set()

        fifo = Fifo()
        sender = asyncio.create_task(send())
        sender.add_done_callback(lambda _: room.set())     # a failed sender must not leave us waiting
        try:
            while not sender.done():
                try:
                    data = await reader.read(65536)
                except OSError:
                    data = _EOF
                queue.put_nowait((fifo.arrival_us(delay.leave_us(self.clock.elapsed_us())), data or _EOF))
                if not data:
                    break
                self.bytes[direction] += len(data)
                buffered += len(data)
                if buffered > MAX_BUFFERED:
                    room.clear()
                    await room.wait()
            await sender
        except (OSError, ConnectionError):
            for w in writers:                          # a broken side breaks the whole connection
                w.close()
        finally:
            sender.cancel()


async def start_relays(plan: RelayPlan, trace=None) -> tuple[Clock, list[Relay]]:
    """Start listening for every link of ``plan`` (ports: ``relay.port``); the trace is opened by
    name unless given (any object with ``one_way_us``, ``outages`` and ``duration_us``)."""
    if trace is None:
        from replicast.traces.store import TraceStore
        trace = TraceStore.open(plan.trace)
    clock = Clock(asyncio.get_running_loop())
    relays = [Relay(link, LinkDelay(trace, link.src_index, link.dst_index, plan.trace_time_us),
                    LinkDelay(trace, link.dst_index, link.src_index, plan.trace_time_us), clock) for link in plan.links]
    for relay in relays:
        await relay.start()
    return clock, relays


async def serve(plan: RelayPlan, ports_file: Path | None = None, stop: asyncio.Event | None = None,
                trace=None) -> None:
    """Run the relays of ``plan`` until ``stop`` is set (or SIGTERM when run as a process)."""
    clock, relays = await start_relays(plan, trace)
    if ports_file is not None:
        partial = ports_file.with_suffix(".partial")
        partial.write_text(json.dumps({"origin_unix_us": clock.origin_unix_us, "trace_time_us": plan.trace_time_us,
                                       "ports": {r.link.key: r.port for r in relays}}), encoding="utf-8")
        os.replace(partial, ports_file)            # readers never see half a file
    log.info("relaying %d links of trace %s from trace time %.3f s", len(relays), plan.trace, plan.trace_time_us / 1e6)
    stop = stop or asyncio.Event()
    await stop.wait()
    for relay in relays:
        relay.close()
    log.info("stopped; connections %s", {r.link.key: r.connections for r in relays})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.relay",
                                     description="Delay relays between the nodes of an emulated wide-area cluster "
                                                 "(started by 'replicast cluster up --emulate-wan').")
    parser.add_argument("plan", type=Path, help="relay plan (JSON, written by 'cluster up')")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = RelayPlan.read(args.plan)

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await serve(plan, ports_path(args.plan), stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
