"""The canonical trace format (docs/traces.md).

A trace is a directory::

    meta.json              TraceMeta: source, license, citation, interval, ...
    nodes.parquet          id int32, name string, lat float64 (nullable), lon float64 (nullable)
    rtt/day=D/*.parquet    t int64 (µs since trace start), src int32, dst int32,
                           rtt_ms float32 (null = failed measurement)

Rules this module keeps:
1. One row per directed pair (src != dst) per sample; self pairs are never stored.
2. ``day = t // 86_400_000_000`` is the hive partition; files inside a day may be in any row order
   (readers scatter rows by ``t``), and files whose name starts with ``_`` or ``.`` are ignored
   (Spark's ``_SUCCESS``).
3. A missing row and a null ``rtt_ms`` mean the same thing: an outage.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from replicast.traces.errors import TraceError

FORMAT_VERSION = 1
DAY_US = 86_400_000_000

SCHEMA = pa.schema(
    [
        pa.field("t", pa.int64(), nullable=False),
        pa.field("src", pa.int32(), nullable=False),
        pa.field("dst", pa.int32(), nullable=False),
        pa.field("rtt_ms", pa.float32()),
    ]
)
NODES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("lat", pa.float64()),
        pa.field("lon", pa.float64()),
    ]
)


@dataclasses.dataclass(frozen=True)
class TraceMeta:
    """What a trace is and where it came from (``meta.json``)."""

    name: str
    n_nodes: int
    n_frames: int
    interval_us: int
    #: False when the sample interval is an assumption (the NetLatency files carry no timestamps).
    interval_measured: bool
    source: str = ""
    license: str = ""
    citation: str = ""
    notes: str = ""
    #: True when rtt(src, dst) and rtt(dst, src) are separate measurements.
    directed: bool = True
    format_version: int = FORMAT_VERSION

    @property
    def duration_us(self) -> int:
        return self.n_frames * self.interval_us

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> "TraceMeta":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise TraceError(f"{where}:{error.lineno}: not valid JSON ({error.msg})") from None
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise TraceError(f"{where}: unknown field(s) {unknown}; expected some of {sorted(fields)}")
        missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in raw]
        if missing:
            raise TraceError(f"{where}: missing field(s) {missing}")
        for name in ("n_nodes", "n_frames", "interval_us"):
            if not isinstance(raw[name], int) or raw[name] <= 0:
                raise TraceError(f"{where}: field {name!r} is {raw[name]!r}; expected a positive integer")
        if raw.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
            raise TraceError(f"{where}: format_version {raw['format_version']!r}; this replicast reads {FORMAT_VERSION}")
        return cls(**raw)


def meta_path(trace_dir: Path) -> Path:
    return Path(trace_dir) / "meta.json"


def nodes_path(trace_dir: Path) -> Path:
    return Path(trace_dir) / "nodes.parquet"


def rtt_dir(trace_dir: Path) -> Path:
    return Path(trace_dir) / "rtt"


def day_of(t_us: int) -> int:
    return t_us // DAY_US


def write_meta(trace_dir: Path, meta: TraceMeta) -> None:
    Path(trace_dir).mkdir(parents=True, exist_ok=True)
    meta_path(trace_dir).write_text(meta.to_json())


def read_meta(trace_dir: Path) -> TraceMeta:
    path = meta_path(trace_dir)
    if not path.is_file():
        raise TraceError(f"{trace_dir}: not a trace directory (no meta.json); see docs/traces.md")
    return TraceMeta.from_json(path.read_text(), str(path))


def nodes_table(names: list[str], lat=None, lon=None) -> pa.Table:
    """The nodes table for ids ``0..len(names)-1``; ``lat``/``lon`` may be omitted or hold None."""
    n = len(names)
    return pa.table(
        {
            "id": pa.array(range(n), pa.int32()),
            "name": pa.array([str(x) for x in names], pa.string()),
            "lat": pa.array(lat if lat is not None else [None] * n, pa.float64()),
            "lon": pa.array(lon if lon is not None else [None] * n, pa.float64()),
        },
        schema=NODES_SCHEMA,
    )


def write_nodes(trace_dir: Path, table: pa.Table) -> None:
    Path(trace_dir).mkdir(parents=True, exist_ok=True)
    pq.write_table(table.cast(NODES_SCHEMA), nodes_path(trace_dir), compression="zstd")


def read_nodes(trace_dir: Path) -> pa.Table:
    path = nodes_path(trace_dir)
    if not path.is_file():
        raise TraceError(f"{trace_dir}: no nodes.parquet; see docs/traces.md")
    table = pq.read_table(path).sort_by("id")
    ids = table.column("id").to_pylist()
    if ids != list(range(len(ids))):
        raise TraceError(f"{path}: node ids must be 0..{len(ids) - 1} without gaps")
    return table


def dataset(trace_dir: Path) -> ds.Dataset:
    """The ``rtt`` rows as a pyarrow dataset (with the ``day`` partition column)."""
    root = rtt_dir(trace_dir)
    if not root.is_dir():
        raise TraceError(f"{trace_dir}: no rtt/ directory; see docs/traces.md")
    return ds.dataset(root, format="parquet", partitioning="hive")


class TraceWriter:
    """Appends canonical row chunks to ``rtt/day=D/part-0.parquet``, one open file per day.

    Chunks must arrive in time order (a day, once closed, is never reopened); each chunk becomes
    at least one row group, so readers can skip row groups by ``t`` statistics.
    """

    def __init__(self, trace_dir: Path, compression_level: int = 3):
        self._root = rtt_dir(trace_dir)
        self._level = compression_level
        self._day: int | None = None
        self._writer: pq.ParquetWriter | None = None
        self.rows_written = 0

    def write(self, table: pa.Table) -> None:
        table = table.cast(SCHEMA)
        if table.num_rows == 0:
            return
        days = pc.divide(table.column("t"), DAY_US)
        first, last = pc.min_max(days).values()
        for day in range(first.as_py(), last.as_py() + 1):
            part = table.filter(pc.equal(days, day)) if first != last else table
            if part.num_rows:
                self._writer_for(day).write_table(part)
                self.rows_written += part.num_rows

    def _writer_for(self, day: int) -> pq.ParquetWriter:
        if day != self._day:
            if self._day is not None and day < self._day:
                raise ValueError(f"TraceWriter: day {day} after day {self._day}; write chunks in time order")
            self.close()
            path = self._root / f"day={day}" / "part-0.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            # Dictionaries for the keys only: a float column of jittered RTTs has few repeats, and
            # trying a dictionary on it cost a third of the write (and more of the read).
            self._writer = pq.ParquetWriter(path, SCHEMA, compression="zstd", compression_level=self._level,
                                            use_dictionary=["t", "src", "dst"])
            self._day = day
        return self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compact(trace_dir: Path) -> None:
    """Rewrite each day as one file sorted by (src, dst, t) at zstd level 19.

    Why: per-pair time series change slowly, so this order compresses ~2.5x better than (t, src, dst);
    it is how the shipped ``seattle`` trace stays near 2 MB.
    """
    root = rtt_dir(trace_dir)
    for marker in root.glob("*"):
        if marker.is_file() and marker.name.startswith(("_", ".")):
            marker.unlink()  # Spark's _SUCCESS and .crc files: nothing reads them, the wheel need not ship them
    for day_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        table = ds.dataset(day_dir, format="parquet").to_table().select(SCHEMA.names).cast(SCHEMA)
        table = table.sort_by([("src", "ascending"), ("dst", "ascending"), ("t", "ascending")])
        old = list(day_dir.iterdir())
        target = day_dir / "part-0.compact.parquet"
        pq.write_table(
            table, target, compression="zstd", compression_level=19,
            use_dictionary=["t", "src", "dst"], row_group_size=1 << 22,
        )
        for path in old:
            path.unlink()
        target.rename(day_dir / "part-0.parquet")
