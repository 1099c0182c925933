"""A real relay on loopback sockets follows a hand-made trace over time: the delay of the frame at
send time in each direction, outages held until the pair is back, order kept."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from replicast.cluster.relay import RelayLink, RelayPlan, serve
from tests.traces.conftest import write_trace
from replicast.traces.store import TraceStore

#: Arrival may be late by scheduling noise on a shared machine, never early.
LATE_S = 0.04


def test_relay_delays_follow_the_trace_hold_outages_and_keep_order(tmp_path):
    frames = np.full((6, 2, 2), np.nan)
    frames[:, 0, 1] = [200, 100, np.nan, 300, 300, 300]     # node 0 -> node 1: one-way 100, 50, held, 150 ms
    frames[:, 1, 0] = [100] * 6                             # node 1 -> node 0: one-way 50 ms
    trace = TraceStore.open(write_trace(tmp_path / "trace", frames, interval_us=1_000_000))
    asyncio.run(_exercise(trace, tmp_path))


async def _exercise(trace, tmp_path):
    received: list[tuple[float, bytes]] = []                 # at node 1: (wall time, line)
    replies: list[tuple[float, bytes]] = []                  # back at node 0

    async def node1(reader, writer):
        while line := await reader.readline():
            received.append((time.time(), line))
            writer.write(b"re " + line)
            await writer.drain()
        writer.close()

    target = await asyncio.start_server(node1, "127.0.0.1", 0)
    link = RelayLink("a", "b", 0, 1, "127.0.0.1", "127.0.0.1", target.sockets[0].getsockname()[1])
    stop, ports_file = asyncio.Event(), tmp_path / "relays.ports"
    relay = asyncio.create_task(serve(RelayPlan(str(trace.path), 0, [link]), ports_file, stop, trace=trace))
    while not ports_file.exists():
        await asyncio.sleep(0.01)
    doc = json.loads(ports_file.read_text())
    origin = doc["origin_unix_us"] / 1e6
    reader, writer = await asyncio.open_connection("127.0.0.1", doc["ports"]["a>b"])

    async def read_replies():
        while line := await reader.readline():
            replies.append((time.time(), line))

    replier = asyncio.create_task(read_replies())
    sent = {}
    # (trace time to send at, one-way delay, held until): frame 0, frame 1, the end of frame 1, twice
    # in the outage (both held until 3 s, then frame 3's delay), frame 3
    plan = [(0.2, 0.1, 0), (1.2, 0.05, 0), (1.98, 0.05, 0), (2.2, 0.15, 3.0), (2.7, 0.15, 3.0), (3.3, 0.15, 0)]
    for i, (at, _, _) in enumerate(plan):
        await asyncio.sleep(max(0.0, origin + at - time.time()))
        line = f"m{i}\n".encode()
        sent[line] = time.time()
        writer.write(line)
        await writer.drain()
    await asyncio.sleep(max(0.0, origin + 3.6 - time.time()))
    writer.close()
    await asyncio.wait_for(replier, 5)
    stop.set()
    await relay
    target.close()

    assert [line for _, line in received] == [f"m{i}\n".encode() for i in range(len(plan))]   # order kept
    for (arrived, line), (at, one_way, held_until) in zip(received, plan):
        sent_at = sent[line] - origin
        if int(sent_at) != int(at):       # a loaded machine sent it late, into the next frame: that frame's rule
            one_way, held_until = {1: (0.05, 0), 2: (0.15, 3.0)}.get(int(sent_at), (0.15, 0))
        arrival, expected = arrived - origin, max(sent_at, held_until) + one_way
        print(f"{line.strip().decode()}: sent {sent[line] - origin:.3f}, arrived {arrival:.3f}, trace says {expected:.3f}")
        assert expected - 0.002 <= arrival <= expected + LATE_S, (line, arrival, expected)
    # Back from node 1 to node 0: 50 ms each, whenever the reply was sent.
    assert len(replies) == len(plan)
    for (back, reply), (arrived, line) in zip(replies, received):
        assert reply == b"re " + line
        assert 0.048 <= back - arrived <= 0.05 + LATE_S, (reply, back - arrived)


def test_a_relay_whose_receiver_does_not_read_stops_reading_from_the_sender():
    """Like TCP's window: a direction holds at most MAX_BUFFERED bytes (plus socket buffers), so a
    stalled or cut link pushes back on the sender instead of growing the relay's memory."""
    from replicast.cluster.relay import MAX_BUFFERED, start_relays
    from replicast.simulator.network import FixedDelays

    async def exercise():
        stalled = asyncio.Event()

        async def never_reads(reader, writer):
            await stalled.wait()
            writer.close()

        target = await asyncio.start_server(never_reads, "127.0.0.1", 0)
        link = RelayLink("a", "b", 0, 1, "127.0.0.1", "127.0.0.1", target.sockets[0].getsockname()[1])
        _, (relay,) = await start_relays(RelayPlan("fixed", 0, [link]), trace=FixedDelays({"a": {"b": 2.0}}))
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        chunk = b"x" * (1 << 20)
        for _ in range(64):                           # 64 MiB offered
            writer.write(chunk)
        try:
            await asyncio.wait_for(writer.drain(), 3)
            drained = True
        except asyncio.TimeoutError:
            drained = False
        taken = relay.bytes["forward"]
        stalled.set()
        writer.close()
        relay.close()
        target.close()
        return drained, taken

    drained, taken = asyncio.run(exercise())
    print(f"relay read {taken / 2**20:.1f} MiB of 64 MiB offered")
    assert not drained and MAX_BUFFERED <= taken < 64 << 20
