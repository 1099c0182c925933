"""The full check of ``replicast explain``'s verdicts (docs/explain.md, "Checked").

For every query of the corpus (tests/operators/data/explain/*.toml), replays it with 2 replicas of
every entry point and operator, random per-channel delays, a seeded interleaving and 0–2 replicas
crashing for good (engine/explain_check.py): where explain predicts that replicas disagree, a
divergence from the one-copy reference must show within 1,000 seeds; where it predicts agreement,
none may show in 10,000.  Seeds are split over processes; prints one line per query and exits 1 if
any verdict is refuted.

    python3 benchmarks/explain_verdicts.py [--agree-seeds 10000] [--diverge-seeds 1000] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replicast.engine.explain_check import check_verdict  # noqa: E402
from replicast.engine.query_file import load_query  # noqa: E402
from replicast.operators.coordination import analyse  # noqa: E402

CORPUS = ROOT / "tests" / "operators" / "data" / "explain"


def _chunk(path: str, first: int, count: int):
    return check_verdict(load_query(path), seeds=count, first_seed=first)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agree-seeds", type=int, default=10_000)
    parser.add_argument("--diverge-seeds", type=int, default=1_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=500, help="seeds per task")
    args = parser.parse_args()
    paths = sorted(CORPUS.glob("*.toml"))
    started = time.perf_counter()
    refuted = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        tasks = {}
        for path in paths:
            agrees = analyse(load_query(path), 2).agrees
            total = args.agree_seeds if agrees else args.diverge_seeds
            tasks[path] = (agrees, total, [pool.submit(_chunk, str(path), first, min(args.chunk, total - first))
                                           for first in range(0, total, args.chunk)])
        for path, (agrees, total, futures) in tasks.items():
            checks = [f.result() for f in futures]
            diverged = [c.diverged_at for c in checks if c.diverged_at is not None]
            first = min(diverged, default=None)
            ok = agrees == (first is None)
            refuted += not ok
            found = "no divergence in %d seeds" % total if first is None else f"first divergence at seed {first}"
            print(f"{path.stem:<32} explain: {'agree   ' if agrees else 'disagree'}  replay: {found:<28} "
                  f"{'confirmed' if ok else 'REFUTED'}", flush=True)
    print(f"{len(paths)} queries, {len(paths) - refuted} verdicts confirmed, {refuted} refuted "
          f"({time.perf_counter() - started:.0f} s, {args.jobs} processes)")
    return 1 if refuted else 0


if __name__ == "__main__":
    sys.exit(main())
