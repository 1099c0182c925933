"""Build canonical traces from raw sources: session + ingest job + write, as the commands use them."""

from __future__ import annotations

import shutil
from pathlib import Path

from replicast.traces import catalog
from replicast.traces import format as fmt
from replicast.traces import netlatency
from replicast.traces.errors import TraceError

NETLATENCY_CITATION = (
    "Rui Zhu, Bang Liu, Di Niu, Zongpeng Li, Hong Vicky Zhao, \"Network Latency Estimation for Personal "
    "Devices: A Matrix Completion Approach\", IEEE/ACM Transactions on Networking, vol. 25, pp. 724-737, "
    "April 2017."
)
NETLATENCY_SOURCE = "https://github.com/uofa-rzhu3/NetLatency-Data"

#: How the named traces are built from the NetLatency copy: sub-directory and notes.
NAMED = {
    "seattle": ("Seattle", "Seattle network (personal devices), 99 nodes, 688 frames. Raw values are seconds "
                "with 10 ms resolution; 0 (missing, or an RTT under 5 ms) -> null; the diagonal is dropped."),
    "planetlab490": ("PlanetLab", "PlanetLab, 490 nodes, 18 frames. Raw values are milliseconds; "
                     "0 -> null; the diagonal is dropped."),
}


def prepare_out(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise TraceError(f"{out_dir}: exists and is not empty; pass --overwrite to replace it")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


def ingest_netlatency(spark, source: Path, out_dir: Path, *, name: str, interval_us: int, unit: str = "auto",
                      notes: str = "", compact: bool = False, overwrite: bool = False) -> fmt.TraceMeta:
    """NetLatency frame directory -> canonical trace; the interval is recorded as assumed."""
    from replicast.traces.jobs.ingest import netlatency_frames, write_canonical

    files = netlatency.frame_files(source)
    # Parse the first frame on the driver: it fixes N for every worker and fails fast on bad input.
    n_nodes = netlatency.parse_matrix(files[0].read_text(), str(files[0])).shape[0]
    prepare_out(out_dir, overwrite)
    license_file = Path(source).parent / "LICENSE"
    meta = fmt.TraceMeta(
        name=name, n_nodes=n_nodes, n_frames=1, interval_us=interval_us, interval_measured=False,
        source=NETLATENCY_SOURCE if license_file.is_file() else str(source),
        license="MIT (see LICENSE)" if license_file.is_file() else "",
        citation=NETLATENCY_CITATION if license_file.is_file() else "",
        notes=notes or f"NetLatency text matrices from {Path(source).name}; frame interval assumed.",
    )
    rows = netlatency_frames(spark, files, unit=unit, interval_us=interval_us, n_nodes=n_nodes)
    nodes = fmt.nodes_table([f"{Path(source).name.lower()}-{i}" for i in range(n_nodes)])
    meta = write_canonical(rows, out_dir, meta=meta, nodes=nodes, compact=compact)
    if license_file.is_file():
        shutil.copyfile(license_file, out_dir / "LICENSE")
        (out_dir / "CITATION.md").write_text(f"If you publish results obtained with this trace, cite:\n\n{meta.citation}\n")
    return meta


def build_named(spark, name: str, netlatency_root: Path, *, interval_us: int = 10_000_000,
                out_dir: Path | None = None, overwrite: bool = True) -> fmt.TraceMeta:
    """Build ``seattle`` or ``planetlab490`` from a NetLatency checkout (``.../netlatency``)."""
    if name not in NAMED:
        raise TraceError(f"no build recipe for {name!r}; known: {', '.join(NAMED)}")
    subdir, notes = NAMED[name]
    source = Path(netlatency_root) / subdir
    if not source.is_dir():
        raise TraceError(f"{source}: not found; pass --source pointing at the NetLatency data (with {subdir}/)")
    return ingest_netlatency(
        spark, source, out_dir or catalog.location(name), name=name, interval_us=interval_us,
        notes=notes, compact=True, overwrite=overwrite,
    )


def ingest_csv(spark, path: Path, out_dir: Path, *, name: str, interval_us: int, time_unit_us: int,
               nodes_csv: Path | None = None, overwrite: bool = False, one_pass: bool = True) -> fmt.TraceMeta:
    """CSV ``src,dst,rtt_ms[,t]`` (+ optional nodes CSV with name[,lat,lon]) -> canonical trace.

    With a ``t`` column: one pass over the text (:mod:`traces.jobs.csv_ingest`); without (or with
    ``one_pass=False``, the benchmark's baseline), the Spark SQL job of
    :func:`traces.jobs.ingest.csv_measurements` (which frames by row order when there is no ``t``).
    """
    from replicast.traces.jobs.ingest import _locate, csv_measurements, read_header, read_node_names, write_canonical

    if not Path(path).is_file():
        raise TraceError(f"{path}: no such file")
    names, lat, lon = read_node_names(nodes_csv) if nodes_csv else (None, None, None)
    header = read_header(Path(path))
    if "t" in header and one_pass:
        from replicast.traces.jobs import csv_ingest

        prepare_out(out_dir, overwrite)
        done = csv_ingest.ingest(spark, Path(path), Path(out_dir), header, interval_us=interval_us,
                                 time_unit_us=time_unit_us, node_names=names)
        if not isinstance(done, str):
            last, names = done
            meta = fmt.TraceMeta(name=name, n_nodes=len(names), n_frames=last // interval_us + 1,
                                 interval_us=interval_us, interval_measured=True,
                                 source=str(Path(path).resolve()), notes="ingested from CSV")
            fmt.write_nodes(out_dir, fmt.nodes_table(names, lat, lon))
            fmt.write_meta(out_dir, meta)
            return meta
        where = _locate(Path(path), header)
        if where:
            raise TraceError(where)
        # Arrow's reader is stricter than the checks (e.g. spaces around a number): the SQL job decides.
    rows, names = csv_measurements(spark, Path(path), interval_us=interval_us, time_unit_us=time_unit_us,
                                   node_names=names)
    has_t = "t" in read_header(Path(path))
    prepare_out(out_dir, overwrite)
    meta = fmt.TraceMeta(
        name=name, n_nodes=len(names), n_frames=1, interval_us=interval_us, interval_measured=has_t,
        source=str(Path(path).resolve()),
        notes="ingested from CSV" + ("" if has_t else "; no t column: the k-th row of a pair is frame k"),
    )
    return write_canonical(rows, out_dir, meta=meta, nodes=fmt.nodes_table(names, lat, lon))
