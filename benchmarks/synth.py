"""The synthetic PlanetLab-like trace's cost, step by step (process time, so both of ``generate``'s
threads count), at ``--nodes`` nodes over ``--days`` days of 10-s frames:

1. fitting the model (Seattle's first 2000 frames + the shipped PlanetLab summary);
2. ``SynthFrames.take``: every frame's RTTs, an hour's block at a time (the generator alone);
3. ``SynthFrames.skip``: the same frames without their RTTs (what a store pays to jump ahead);
4. ``SynthStore``: every chunk of the trace in process (the generator plus the (n, n) chunks);
5. ``synth.generate``: the trace written to Parquet (what ``replicast trace synth`` does);
6. ``TraceStore``: every chunk of that written trace read back, and its size on disk.

    python3 benchmarks/synth.py                    # 100 nodes, one day
    python3 benchmarks/synth.py --nodes 30 --days 0.25
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path; drop it (it would shadow packages).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from replicast.traces import calibrate, synth  # noqa: E402
from replicast.traces.store import TraceStore  # noqa: E402
from replicast.traces.synth_store import SynthStore  # noqa: E402

INTERVAL_US = 10_000_000
HOUR = 360


def cpu(label: str, action):
    start = time.process_time()
    result = action()
    print(f"{label:<52} {time.process_time() - start:7.2f} CPU s", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    frames = max(1, round(args.days * 8640))
    print(f"{args.nodes} nodes x {frames} frames; load average before the run {os.getloadavg()[0]:.2f}")
    params = cpu("fit (seattle, 2000 frames) + PlanetLab static", lambda: calibrate.like_planetlab(
        calibrate.fit_store(TraceStore.open("seattle"), max_frames=2000)))

    def take():
        source = synth.SynthFrames(params, args.nodes, args.seed)
        for first in range(0, frames, HOUR):
            source.take(min(HOUR, frames - first))

    cpu("SynthFrames.take: every frame, hour blocks", take)
    cpu("SynthFrames.skip: every frame, no RTTs", lambda: synth.SynthFrames(params, args.nodes, args.seed).skip(frames))

    def in_process():
        for _ in SynthStore(params, n_nodes=args.nodes, n_frames=frames, interval_us=INTERVAL_US,
                            seed=args.seed).chunks():
            pass

    cpu("SynthStore: every chunk, in process", in_process)
    work = Path(tempfile.mkdtemp(prefix="replicast-synth-"))
    try:
        out = work / "trace"
        cpu("generate: to Parquet (both threads)", lambda: synth.generate(
            params, out, n_nodes=args.nodes, n_frames=frames, interval_us=INTERVAL_US, seed=args.seed))

        def read():
            for _ in TraceStore.open(out).chunks():
                pass

        cpu("TraceStore: every chunk read back", read)
        size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
        print(f"Parquet: {size / 1e6:.0f} MB ({size / frames / args.nodes / (args.nodes - 1):.2f} bytes a row)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
