"""Reader for the NetLatency text matrices (github.com/uofa-rzhu3/NetLatency-Data).

Each file ``<Prefix>_<k>`` is frame k (1-based) of an N x N matrix of RTTs, whitespace separated,
entry (i, j) = RTT measured from node i to node j, 0 = no measurement. What the files hold,
checked by looking at the values (docs/traces.md):

* ``SeattleData_*``: 99 x 99, **seconds** with two decimals (10 ms resolution: median 0.22,
  p99 2.78, max 90.5); ~9 % of the diagonal is non-zero (self "RTTs" up to 22 s), which we drop.
  Because of the 10 ms rounding, an RTT under 5 ms is indistinguishable from "missing".
* ``PlanetLabData_*``: 490 x 490, **milliseconds** (median 135, max 7893), symmetric.

The files carry no timestamps: the frame interval is an assumption the caller states.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from replicast.traces.errors import TraceError

#: Unit of the values, by file-name prefix; other prefixes need an explicit ``unit``.
UNIT_BY_PREFIX = {"SeattleData": "s", "PlanetLabData": "ms"}
TO_MS = {"s": 1000.0, "ms": 1.0, "us": 0.001}

_FRAME_NAME = re.compile(r"^(?P<prefix>.*?)_?(?P<k>\d+)(\.\w+)?$")


def frame_number(path: str | Path) -> int:
    """The frame number k of ``<Prefix>_<k>`` (1-based, as in the data set)."""
    match = _FRAME_NAME.match(Path(path).name)
    if not match:
        raise TraceError(f"{path}: file name does not end in a frame number (expected e.g. SeattleData_12)")
    return int(match.group("k"))


def unit_for(path: str | Path, unit: str = "auto") -> str:
    """The unit of a frame file: ``unit`` if given, else from its name prefix."""
    if unit != "auto":
        if unit not in TO_MS:
            raise TraceError(f"unit {unit!r} is not one of {sorted(TO_MS)}")
        return unit
    name = Path(path).name
    for prefix, known in UNIT_BY_PREFIX.items():
        if name.startswith(prefix):
            return known
    raise TraceError(f"{path}: cannot tell the unit of this matrix from its name; pass --unit s|ms|us")


def parse_matrix(text: str, where: str, n_expected: int | None = None) -> np.ndarray:
    """Parse one square RTT matrix; reject ragged rows, non-numbers and negative or non-finite values.

    Errors name ``where``, the 1-based line and the column.  Blank lines are ignored.
    """
    rows: list[np.ndarray] = []
    width = n_expected
    for lineno, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        try:
            row = np.array(tokens, dtype=np.float64)
        except ValueError:
            column, token = next((c, tok) for c, tok in enumerate(tokens, 1) if not _is_number(tok))
            raise TraceError(f"{where}:{lineno}: column {column}: {token!r} is not a number") from None
        if width is None:
            width = len(tokens)
        if len(tokens) != width:
            raise TraceError(f"{where}:{lineno}: row has {len(tokens)} values, expected {width} (ragged matrix)")
        bad = np.flatnonzero(~np.isfinite(row) | (row < 0))
        if bad.size:
            column = int(bad[0]) + 1
            raise TraceError(f"{where}:{lineno}: column {column}: RTT {tokens[bad[0]]} is negative or not finite")
        rows.append(row)
    if not rows:
        raise TraceError(f"{where}: empty matrix")
    if len(rows) != width:
        raise TraceError(f"{where}: {len(rows)} rows of {width} values; expected a square {width} x {width} matrix")
    return np.stack(rows)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def matrix_to_table(matrix: np.ndarray, t_us: int, unit: str) -> pa.Table:
    """Canonical rows of one frame: every off-diagonal pair, 0 -> null, values in ms."""
    n = matrix.shape[0]
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    rtt = matrix[src, dst] * TO_MS[unit]
    return pa.table(
        {
            "t": pa.array(np.full(src.size, t_us, dtype=np.int64)),
            "src": pa.array(src.astype(np.int32)),
            "dst": pa.array(dst.astype(np.int32)),
            # Values are rounded to the microsecond so seconds like 0.17 become exactly 170.0 ms.
            "rtt_ms": pa.array(np.round(rtt, 3).astype(np.float32), mask=rtt == 0),
        }
    )


def frame_files(directory: str | Path) -> list[Path]:
    """The frame files of a NetLatency directory, in frame order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TraceError(f"{directory}: not a directory of NetLatency frame files")
    files = [p for p in directory.iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    files = [p for p in files if p.name not in ("README.md", "LICENSE")]
    if not files:
        raise TraceError(f"{directory}: no frame files")
    files.sort(key=frame_number)
    numbers = [frame_number(p) for p in files]
    if len(set(numbers)) != len(numbers):
        raise TraceError(f"{directory}: two files have the same frame number")
    return files
