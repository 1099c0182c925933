"""Wire benchmark: decode + validate (and encode) of one frame, the msgspec schema against the hand-written codec.

Run:  python3 benchmarks/wire.py                 (about ten seconds)
      python3 benchmarks/wire.py --quick         (a second; a smoke test)

"before" is ``engine/wire.py`` as it was at ``--before`` (default 64d8445, the last hand-written codec,
read with ``git show``), loaded beside the current one in the same process, so both run on the same
machine at the same moment and the ratio is what changed.  Both decode the same bytes (the frames
are byte-identical: tests/engine/test_wire_errors.py).  A batch frame's records are not read by
``decode`` in either codec (they are read lazily, engine/packed_records.py), so the frame cost is the
header: the stream replica's five fields, epoch, offset, the records' array header and punctuation.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replicast.engine import wire  # noqa: E402
from replicast.engine.messages import Ack, Batch, Heartbeat, View, ViewDecided  # noqa: E402
from replicast.operators.plan import ReplicaId, StreamReplica  # noqa: E402

BEFORE = "64d8445"


def load_before(revision: str):
    """``engine/wire.py`` at ``revision`` as a module of its own (it imports the unchanged messages)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:engine/wire.py"], check=True,
                            capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location("wire_before", file.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(file.name).unlink()
    return module


def frames() -> dict[str, object]:
    stream = StreamReplica(ReplicaId("load", 1), ReplicaId("correlate", 0), 0)
    records = tuple((1_700_000_000_000_000 + i, f"server{i % 7}", 0.25 * i) for i in range(100))
    return {"batch (100 records)": Batch(stream, 1_700_000_000_000_000, 123_456, records, 1_700_000_000_100_000),
            "ack": Ack(stream, 1_700_000_000_000_000, 123_456),
            "heartbeat": Heartbeat(1_700_000_000_000_000, 1_699_999_999_000_000),
            "view decided": ViewDecided("cpu", -1, View(7, 1, ((0, 5), (1, 9), (2, 11))), 4, 10**15, 6, 2)}


def per_call_us(before, now, argument, number: int, repeat: int) -> tuple[float, float]:
    """Best CPU µs per call of ``before`` and of ``now``, timed in alternation (the machine's load drifts)."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, function in enumerate((before, now)):
            timer = timeit.Timer(lambda: function(argument), timer=time.process_time)   # CPU time: the machine is shared
            best[i] = min(best[i], timer.timeit(number) / number * 1e6)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="git revision of the hand-written codec (default %(default)s)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    number, repeat = (2_000, 3) if args.quick else (20_000, 15)
    before = load_before(args.before)
    print(f"python {sys.version.split()[0]}; best of {repeat} x {number} calls, before and now alternating; "
          f"before = {args.before}")
    print(f"{'frame':<22}{'decode before':>15}{'decode now':>12}{'ratio':>8}{'encode before':>16}{'encode now':>12}{'ratio':>8}")
    for name, message in frames().items():
        frame = wire.encode(message)
        assert frame == before.encode(message), name               # the same bytes
        body = frame[4:]
        assert wire.decode(body) == before.decode(body) == message, name
        old_d, new_d = per_call_us(before.decode, wire.decode, body, number, repeat)
        old_e, new_e = per_call_us(before.encode, wire.encode, message, number, repeat)
        print(f"{name:<22}{old_d:>13.2f}µs{new_d:>10.2f}µs{old_d / new_d:>7.2f}x"
              f"{old_e:>14.2f}µs{new_e:>10.2f}µs{old_e / new_e:>7.2f}x")
    print("ratio = before / now (above 1: now is faster)")


if __name__ == "__main__":
    main()
