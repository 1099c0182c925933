"""Instructions per distinct record on a node's data path, counted by callgrind: a measure of the
node's own work that the other processes of a shared machine do not move (docs/performance.md).

    python3 benchmarks/node_instructions.py                     # ceiling's receiver, k = 1, 2, 3; 50 000 records
    python3 benchmarks/node_instructions.py --records 20000 --k 3

In one process, without sockets: a node's driver (``engine.aio.driver.NodeDriver``: the core,
``_receive`` and ``_transmit`` that ``replicast node`` runs) hosting benchmarks/node.py's Filter and
application is positioned with the real ``StreamHead`` messages, then fed the frames node.py sends —
k upstream replicas' tagged batch frames of the same records, cut into the 256 kB reads its link
loop takes, the upstreams' reads interleaved.  The ceiling is node.py's msgpack-only receiver
(split the frames, unpack each and its records) on one upstream's untagged frames.  Only that loop
is counted: callgrind collects while ``builtin_breakpoint`` runs, and the loop is the breakpoint
hook.  Socket reads, the kernel's copies and the asyncio event loop are in neither figure
(benchmarks/node.py measures those, in seconds).  Needs ``valgrind`` and a CPython with symbols.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import msgpack  # noqa: E402

import node as bench  # noqa: E402   (benchmarks/node.py: the same records, frames and cluster)
from replicast.engine.wire import FrameDecoder  # noqa: E402

READ = 262144                      # bytes per read, as the node's link loop reads


def reads_of(data: bytes) -> list[bytes]:
    return [data[i:i + READ] for i in range(0, len(data), READ)]


def node_loop(k: int, records: int, batch: int):
    """A positioned node driver and the loop that feeds it k upstreams' tagged frames."""
    from replicast.engine.aio.driver import NodeDriver
    from replicast.engine.cluster_config import load_cluster
    from replicast.engine.handshake import FrameOpener, FrameSealer
    from replicast.engine.messages import StreamHead
    from replicast.engine.wire import decode
    from replicast.operators.base import NO_PUNCTUATION
    from replicast.operators.plan import ReplicaId, StreamReplica

    class Transport:
        def get_write_buffer_size(self) -> int:
            return 0

    class Writer:                                   # the driver's writes go nowhere
        transport = Transport()

        def write(self, data: bytes) -> None:
            pass

        def close(self) -> None:
            pass

    frames, offsets = bench.batch_frames(k, records, batch)
    with tempfile.TemporaryDirectory() as tmp:
        cluster, _, _ = bench.write_cluster(Path(tmp), k, 1, entry_on_target=False)
        driver = NodeDriver(load_cluster(cluster), "z")
    key = os.urandom(32)
    reads = []
    for upstream in frames:
        sealer = FrameSealer(key)
        reads.append(reads_of(b"".join(piece for frame in upstream for piece in sealer.seal(frame))))
    peers = [f"u{i}" for i in range(k)]
    for peer in peers:
        driver.links[peer], driver._sealers[peer] = Writer(), FrameSealer(key)
        driver.core.on_peer_up(peer, now=bench_now())
    driver._transmit()
    for i, peer in enumerate(peers):
        driver._receive(peer, StreamHead(StreamReplica(ReplicaId("s", i), ReplicaId("f", 0), 0), 0, 0, NO_PUNCTUATION))
    driver._transmit()
    openers, decoders = [FrameOpener(key) for _ in peers], [FrameDecoder() for _ in peers]

    def loop() -> None:
        for n in range(max(map(len, reads))):
            for i, peer in enumerate(peers):
                if n < len(reads[i]):
                    opener = openers[i]
                    for body in decoders[i].feed(reads[i][n]):
                        driver._receive(peer, decode(opener.open(body)))
                    driver._transmit()
        if any(inbound.next != offsets[0] for inbound in driver.core.inbound.values()):
            raise SystemExit("the node did not take every item")
    return loop


def bench_now() -> int:
    import time
    return time.time_ns() // 1000


def ceiling_loop(records: int, batch: int):
    """node.py's ceiling receiver on one upstream's frames."""
    (frames,), _ = bench.batch_frames(1, records, batch)
    reads = reads_of(b"".join(frames))

    def loop() -> None:
        decoder, count = FrameDecoder(), 0
        for data in reads:
            for body in decoder.feed(data):
                fields = msgpack.unpackb(body, use_list=False, raw=False)
                count += len(msgpack.unpackb(fields[8], use_list=False, raw=False))
        if count != records:
            raise SystemExit(f"the ceiling's receiver unpacked {count} records")
    return loop


def child(case: str, records: int, batch: int) -> None:
    """Run one case's loop as the breakpoint hook (counted), after the set-up (not counted)."""
    async def build():
        return ceiling_loop(records, batch) if case == "ceiling" else node_loop(int(case), records, batch)
    loop = asyncio.new_event_loop()             # the driver re-arms its timer on the running loop
    body = loop.run_until_complete(build())
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)           # as replicast node runs (engine/node_cli.py)
    async def counted() -> None:
        body()
    sys.breakpointhook = lambda: loop.run_until_complete(counted())
    breakpoint()


def count(case: str, records: int, batch: int, valgrind: str) -> float:
    """Instructions per record of one case, from callgrind's total."""
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([valgrind, "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=builtin_breakpoint",
                              f"--callgrind-out-file={tmp}/out", sys.executable, __file__, "--child", case,
                              "--records", str(records), "--batch", str(batch)],
                             capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, cwd=ROOT)
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed for {case}: {run.stderr.strip().splitlines()[-3:]}")
    if int(found.group(1)) < records:
        raise SystemExit("callgrind counted nothing: this CPython has no symbol builtin_breakpoint")
    return int(found.group(1)) / records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000, help="records per case (default 50000)")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch frame (default 1000)")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3], help="upstream replicas (default 1 2 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.records, args.batch)
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("node_instructions.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    print(f"instructions per distinct record, {args.records} records in batches of {args.batch} (callgrind)")
    ceiling = count("ceiling", args.records, args.batch, valgrind)
    print(f"  ceiling's receiver (split and unpack the frames of one upstream): {ceiling:7.0f}")
    for k in args.k:
        node = count(str(k), args.records, args.batch, valgrind)
        print(f"  node, k={k} upstream replicas: {node:7.0f} = {node / ceiling:4.2f}x the ceiling's "
              f"(the ceiling's work is {ceiling / node:.1%} of it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
