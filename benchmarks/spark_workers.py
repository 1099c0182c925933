"""Parallel efficiency of ``replicast simulate --segments N --spark spark://…`` on 1 and 2 workers.

Starts a real Spark standalone cluster on loopback (``simulator/spark_standalone.py``: a Master and
W Workers of one core each, from the PySpark install's ``spark-class``), whose executors run a
fresh ``python -m venv`` without replicast (the environment is shipped, ``simulator/spark_ship.py``),
and runs the same segmented sweep on W = 1 and W = 2, one after the other, in this invocation.
Prints per W: the command's wall time (Spark's start, the tasks and the PySpark summary), the
wall time of the Spark job that runs the tasks (from the driver's log line "N tasks ran in S s")
and the tasks' summed wall time; the parallel efficiency T(1) / (2 · T(2)) of that job; then — labelled as an extrapolation — the wall time of a
simulated month of the same scenario on W workers at the measured per-simulated-second task cost
and the measured 2-worker efficiency.  The packed environment is built (or found in the cache)
before the first timing, so neither run pays for it.

Run: python3 benchmarks/spark_workers.py [--duration-s 6600] [--segments 8] [--kmax 3]
On the shared 2-core machine other processes compete for the cores: wall times vary by tens of
per cent between invocations; compare the two W in one invocation only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "tests" / "simulator" / "data" / "segments.toml"
MONTH_S = 30 * 86400


def sweep(master: str, python: Path, out: Path, args: argparse.Namespace) -> tuple[float, float, dict]:
    """Wall times of one ``replicast simulate`` sweep on ``master`` (the command; its Spark job, from
    the driver's log) and its summary."""
    command = [sys.executable, "-m", "replicast.engine.cli", "simulate", str(SCENARIO), "--duration-s",
               str(args.duration_s), "--kmax", str(args.kmax), "--segments", str(args.segments), "--warmup-s", "120",
               "--spark", master, "--spark-python", str(python), "--out", str(out), "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep on {master} failed:\n{done.stderr[-3000:]}")
    phase = re.search(r"tasks ran in ([0-9.]+) s", done.stderr)
    return wall, float(phase.group(1)), json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=6600)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--kmax", type=int, default=3)
    args = parser.parse_args()

    from replicast.experiments.ports import free_loopback_ports
    from replicast.simulator.spark_ship import default_cache, pack
    from replicast.simulator.spark_standalone import standalone_cluster

    archive = pack(default_cache())
    print(f"environment shipped: {archive.name}, {archive.stat().st_size / 1e6:.0f} MB")
    with tempfile.TemporaryDirectory(prefix="replicast-spark-bench-") as scratch:
        folder = Path(scratch)
        python = folder / "bare" / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python.parents[1])], check=True)
        results = {}
        for workers in (1, 2):
            with standalone_cluster(folder / f"w{workers}", free_loopback_ports(2 + workers), workers=workers,
                                    cores=1) as master:
                wall, phase, summary = sweep(master, python, folder / f"out{workers}", args)
            run = summary["runs"][0]
            results[workers] = (phase, run)
            print(f"W={workers}: command {wall:.1f} s wall, of which the Spark job of the tasks {phase:.1f} s; "
                  f"tasks' summed wall {run['wall_s']:.1f} s for {args.duration_s:.0f} simulated s in "
                  f"{run['segments']} segments; {run['delivered']} deliveries")
    (t1, _), (t2, _) = results[1], results[2]
    efficiency = t1 / (2 * t2)
    print(f"parallel efficiency on 2 workers (the tasks' Spark job): {t1:.1f} / (2 x {t2:.1f}) = {efficiency:.2f}")
    # Per second of the sweep's span, warmups included: an overestimate for day-long segments, whose
    # warmup is a smaller share than these short ones'.
    per_simulated_s = t1 / args.duration_s
    print(f"EXTRAPOLATED (not measured): one simulated month of this scenario at kmax {args.kmax} takes "
          f"{per_simulated_s * MONTH_S / 3600:.1f} h on one one-core worker ({per_simulated_s * 1e3:.2f} ms of "
          f"job time per simulated second);")
    for workers in (2, 16, 64):
        hours = per_simulated_s * MONTH_S / (workers * efficiency) / 3600
        print(f"  on {workers} one-core workers at efficiency {efficiency:.2f}: {hours:.2f} h")


if __name__ == "__main__":
    main()
