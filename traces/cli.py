"""``replicast trace ...``: list, build, ingest, summary, synth, compare, resample, geo, plot.

Every command that takes a trace accepts a name (``seattle``, ``planetlab490``) or a directory.
PySpark, SciPy and matplotlib are imported inside the commands so ``replicast --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from replicast.traces.errors import TraceError


def parse_duration_us(text: str) -> int:
    """``10s``, ``500ms``, ``1h``, ``30d`` ... -> positive integer µs (pandas.Timedelta's grammar)."""
    import pandas as pd

    try:        # pandas 3 deprecates the lower-case day unit users write ("30d")
        value = pd.Timedelta(re.sub(r"(\d)\s*d\b", r"\1D", text))
    except ValueError:
        raise TraceError(f"duration {text!r}: expected a number with a unit, e.g. 10s, 500ms, 1h, 30d") from None
    if value.value <= 0 or value.value % 1000:
        raise TraceError(f"duration {text!r}: must be positive and a whole number of microseconds")
    return int(value.value // 1000)


def _spark(args):
    from replicast.traces.jobs.session import spark_session

    return spark_session(args.master, progress=not args.quiet)


def _add_master(parser) -> None:
    parser.add_argument("--master", default="local[2]",
                        help="Spark master: local[N] (default local[2]) or a cluster URL such as spark://host:7077")


def _print_table(rows: list[dict]) -> None:
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False))


# -- commands --------------------------------------------------------------------------------------


def cmd_list(args) -> int:
    from replicast.traces import catalog, format as fmt

    rows = []
    for name, path, present in catalog.available():
        if present:
            meta = fmt.read_meta(path)
            rows.append({"name": name, "nodes": meta.n_nodes, "frames": meta.n_frames,
                         "interval": f"{meta.interval_us / 1e6:g}s" + ("" if meta.interval_measured else " (assumed)"),
                         "license": meta.license or "-", "path": str(path)})
        else:
            rows.append({"name": name, "nodes": "-", "frames": "-", "interval": "-",
                         "license": "-", "path": f"not built: replicast trace build {name}"})
    _print_table(rows)
    return 0


def cmd_build(args) -> int:
    from replicast.traces import build

    from replicast.traces import catalog

    out = Path(args.out) if args.out else catalog.location(args.name)
    meta = build.build_named(_spark(args), args.name, Path(args.source), interval_us=parse_duration_us(args.interval),
                             out_dir=out)
    print(f"built {args.name}: {meta.n_nodes} nodes x {meta.n_frames} frames -> {out}")
    return 0


def cmd_ingest(args) -> int:
    try:
        return _ingest(args)
    except UnicodeDecodeError:
        raise TraceError(f"{_first_non_utf8(Path(args.source))}; expected UTF-8 text") from None


def _first_non_utf8(path: Path) -> str:
    """Where the first byte that is not UTF-8 is, in the file or in the directory's files."""
    for file in sorted(path.iterdir()) if path.is_dir() else [path]:
        with file.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as error:
                    return f"{file}:{number}: byte {line[error.start:error.start + 1]!r} at column {error.start + 1} is not UTF-8"
    return "not UTF-8 text"


def _ingest(args) -> int:
    from replicast.traces import build

    source, out = Path(args.source), Path(args.out)
    kind = args.format if args.format != "auto" else ("netlatency" if source.is_dir() else "csv")
    name = args.name or out.name
    interval_us = parse_duration_us(args.interval)
    spark = _spark(args)
    if kind == "netlatency":
        meta = build.ingest_netlatency(spark, source, out, name=name, interval_us=interval_us, unit=args.unit,
                                       compact=args.compact, overwrite=args.overwrite)
    else:
        meta = build.ingest_csv(spark, source, out, name=name, interval_us=interval_us,
                                time_unit_us=parse_duration_us(f"1{args.time_unit}"),
                                nodes_csv=Path(args.nodes) if args.nodes else None, overwrite=args.overwrite)
    if args.geo:
        _apply_geo(spark, out, Path(args.geo))
    print(f"ingested {source} ({kind}): {meta.n_nodes} nodes x {meta.n_frames} frames -> {out}")
    return 0


def _apply_geo(spark, trace_dir: Path, geo_csv: Path) -> None:
    import pyarrow as pa

    from replicast.traces import format as fmt
    from replicast.traces.jobs.geo import join_geo, read_geo

    if not geo_csv.is_file():
        raise TraceError(f"{geo_csv}: no such file")
    nodes = spark.createDataFrame(fmt.read_nodes(trace_dir).to_pandas())
    joined, strays = join_geo(nodes, read_geo(spark, geo_csv))
    if strays:
        print(f"warning: {geo_csv}: names not in the trace: {', '.join(strays)}", file=sys.stderr)
    fmt.write_nodes(trace_dir, pa.Table.from_pandas(joined.toPandas(), preserve_index=False))


def cmd_geo(args) -> int:
    from replicast.traces import catalog

    if args.trace in catalog.SHIPPED:
        raise TraceError(f"{args.trace!r} ships inside the package; copy it and pass the copy's path")
    _apply_geo(_spark(args), catalog.resolve(args.trace), Path(args.geo))
    print(f"attached coordinates from {args.geo}")
    return 0


def cmd_summary(args) -> int:
    from replicast.traces import catalog, format as fmt
    from replicast.traces.jobs import summary

    trace_dir = catalog.resolve(args.trace)
    meta = fmt.read_meta(trace_dir)
    spark = _spark(args)
    df = spark.read.parquet(str(fmt.rtt_dir(trace_dir))).select(*fmt.SCHEMA.names)
    overall = summary.overall_summary(df, n_nodes=meta.n_nodes, n_frames=meta.n_frames, interval_us=meta.interval_us)
    pairs = summary.pair_summary(df, n_frames=meta.n_frames, interval_us=meta.interval_us).toPandas()
    print(f"trace {meta.name}: {meta.n_nodes} nodes, {meta.n_frames} frames every {meta.interval_us / 1e6:g} s"
          f"{'' if meta.interval_measured else ' (interval assumed)'}, {overall['rows']:,} rows")
    _print_table([{"statistic": k, "value": _fmt(overall[k])} for k in
                  ("min", "median", "p90", "p99", "max", "outage_rate", "drift_ms", "frame_corr")])
    print(f"\nper-pair statistics across {len(pairs)} pairs (RTT in ms):")
    described = pairs[["median", "p99", "outage_rate", "drift_ms"]].describe(percentiles=[0.1, 0.5, 0.9])
    print(described.drop(index="count").to_string(float_format=lambda v: f"{v:.4g}"))
    print(f"\n{args.top} pairs with the most outages:")
    worst = pairs.sort_values(["outage_rate", "src", "dst"], ascending=[False, True, True]).head(args.top)
    print(worst.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pairs.sort_values(["src", "dst"]).to_csv(out / "pairs.csv", index=False)
        summary.sample_summary(df).toPandas().to_csv(out / "samples.csv", index=False)
        (out / "overall.json").write_text(json.dumps(overall, indent=1, default=float) + "\n")
        print(f"\nwrote {out}/pairs.csv, samples.csv, overall.json")
    return 0


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_synth(args) -> int:
    from replicast.traces import build, calibrate, synth
    from replicast.traces.store import TraceStore

    duration_us, interval_us = parse_duration_us(args.duration), parse_duration_us(args.interval)
    if args.nodes < 2:
        raise TraceError(f"--nodes {args.nodes}: need at least 2 nodes")
    n_frames = -(-duration_us // interval_us)
    out = Path(args.out or f"out/traces/synth-{args.like}-{args.nodes}n-{args.duration}-s{args.seed}")
    build.prepare_out(out, args.overwrite)
    if args.like == calibrate.PLANETLAB_LIKE:   # PlanetLab's static structure, Seattle's dynamics
        params = calibrate.like_planetlab(calibrate.fit_store(TraceStore.open("seattle"), max_frames=args.fit_frames))
    else:
        params = calibrate.fit_store(TraceStore.open(args.like), max_frames=args.fit_frames)
    meta = synth.generate(params, out, n_nodes=args.nodes, n_frames=n_frames, interval_us=interval_us,
                          seed=args.seed, progress=not args.quiet)
    rows = meta.n_frames * meta.n_nodes * (meta.n_nodes - 1)
    print(f"wrote {out}: {meta.n_nodes} nodes x {meta.n_frames} frames ({rows:,} rows), like {args.like}, seed {args.seed}")
    return 0


def cmd_resample(args) -> int:
    from dataclasses import replace

    from replicast.traces import build, catalog, format as fmt
    from replicast.traces.jobs.ingest import write_canonical
    from replicast.traces.jobs.resample import resample

    trace_dir = catalog.resolve(args.trace)
    meta = fmt.read_meta(trace_dir)
    new_us = parse_duration_us(args.interval)
    out = Path(args.out)
    build.prepare_out(out, args.overwrite)
    spark = _spark(args)
    df = spark.read.parquet(str(fmt.rtt_dir(trace_dir))).select(*fmt.SCHEMA.names)
    rows, new_frames = resample(df, old_interval_us=meta.interval_us, new_interval_us=new_us, n_frames=meta.n_frames)
    new_meta = replace(meta, name=out.name, interval_us=new_us, n_frames=new_frames,
                       notes=f"{meta.notes} Resampled (forward fill) from {meta.interval_us / 1e6:g} s.".strip())
    written = write_canonical(rows, out, meta=new_meta, nodes=fmt.read_nodes(trace_dir))
    # write_canonical counts frames up to the last row; keep the full resampled span instead.
    fmt.write_meta(out, replace(written, n_frames=new_frames))
    print(f"resampled {args.trace} to {args.interval}: {new_frames} frames -> {out}")
    return 0


def cmd_compare(args) -> int:
    from replicast.traces import calibrate
    from replicast.traces.plot import sampled_frames
    from replicast.traces.store import TraceStore

    stats = [calibrate.measure(sampled_frames(TraceStore.open(t), args.max_frames)) for t in (args.trace, args.other)]
    _print_table([{"statistic": name, args.trace: _fmt(stats[0][name]), args.other: _fmt(stats[1][name]),
                   "difference": _relative(stats[0][name], stats[1][name])}
                  for name in calibrate.STAT_NAMES])
    return 0


def _relative(reference: float, other: float) -> str:
    if reference == 0:
        return "+0.0%" if other == 0 else "n/a"
    return f"{100 * (other / reference - 1):+.1f}%"


def cmd_plot(args) -> int:
    from replicast.traces.plot import plot_trace
    from replicast.traces.store import TraceStore

    store = TraceStore.open(args.trace)
    out = Path(args.out or f"out/traces/{store.meta.name}.png")
    plot_trace(store, out, max_frames=args.max_frames, progress=not args.quiet)
    print(f"wrote {out}")
    return 0


# -- parser ----------------------------------------------------------------------------------------


def register(subparsers) -> None:
    trace = subparsers.add_parser("trace", help="latency traces: list, ingest, summarise, synthesise, plot",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    trace.set_defaults(extra="all")           # trace jobs use Spark, the generator scipy
    commands = trace.add_subparsers(dest="trace_command", metavar="TRACE_COMMAND", required=True)

    p = commands.add_parser("list", help="named traces and where they are", description="List the named traces.")
    p.set_defaults(run=cmd_list)

    p = commands.add_parser("build", help="build a named trace from the NetLatency data",
                            description="Build seattle or planetlab490 from a NetLatency checkout (PySpark).")
    p.add_argument("name", choices=["seattle", "planetlab490"])
    p.add_argument("--source", default="../shared/traces/netlatency",
                   help="directory holding Seattle/ and PlanetLab/ (default ../shared/traces/netlatency)")
    p.add_argument("--interval", default="10s", help="assumed frame interval (default 10s; the files carry none)")
    p.add_argument("--out", help="output directory (default: where the name resolves; replaced if present)")
    _add_master(p)
    p.set_defaults(run=cmd_build)

    p = commands.add_parser("ingest", help="raw measurements -> canonical trace (PySpark)",
                            description="Ingest a NetLatency frame directory or a CSV src,dst,rtt_ms[,t].")
    p.add_argument("source", help="NetLatency directory (one matrix file per frame) or CSV file")
    p.add_argument("--out", required=True, help="output trace directory")
    p.add_argument("--format", choices=["auto", "netlatency", "csv"], default="auto",
                   help="auto: a directory is netlatency, a file is csv")
    p.add_argument("--interval", default="10s", help="frame interval (NetLatency: assumed; CSV with t: the grid)")
    p.add_argument("--unit", choices=["auto", "s", "ms", "us"], default="auto",
                   help="NetLatency value unit (auto: SeattleData_* = s, PlanetLabData_* = ms)")
    p.add_argument("--time-unit", choices=["s", "ms", "us"], default="s", help="unit of the CSV t column (default s)")
    p.add_argument("--nodes", help="CSV with a name column (optional lat, lon) fixing node ids in row order")
    p.add_argument("--geo", help="CSV name,lat,lon to attach coordinates")
    p.add_argument("--name", help="trace name in meta.json (default: the output directory name)")
    p.add_argument("--compact", action="store_true", help="rewrite sorted by (src, dst, t) at zstd 19 (small files)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    _add_master(p)
    p.set_defaults(run=cmd_ingest)

    p = commands.add_parser("summary", help="per-pair and overall statistics (PySpark)",
                            description="Per-pair count, outage rate, min/median/p90/p99/max, drift; "
                                        "per-sample medians; whole-trace figures.")
    p.add_argument("trace", help="trace name or directory")
    p.add_argument("--out", help="directory for pairs.csv, samples.csv, overall.json")
    p.add_argument("--top", type=int, default=5, help="how many worst pairs to print (default 5)")
    _add_master(p)
    p.set_defaults(run=cmd_summary)

    p = commands.add_parser("synth", help="synthetic trace calibrated on a real one",
                            description="Generate a synthetic trace (chunked, bounded memory).")
    p.add_argument("--nodes", type=int, required=True, help="number of nodes")
    p.add_argument("--duration", required=True, help="e.g. 1d, 30d, 6h")
    p.add_argument("--interval", default="10s", help="sample interval (default 10s)")
    p.add_argument("--like", default="seattle",
                   help="trace to calibrate on (default seattle); 'planetlab': the shipped PlanetLab frames' "
                        "static structure with the Seattle trace's dynamics (docs/traces.md)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", help="output directory (default out/traces/synth-LIKE-Nn-DURATION-sSEED)")
    p.add_argument("--fit-frames", type=int, default=2000, help="frames of --like used for fitting (default 2000)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.set_defaults(run=cmd_synth)

    p = commands.add_parser("resample", help="re-grid a trace to another interval (forward fill, PySpark)",
                            description="Resample by sample-and-hold: new frame k takes the sample in effect at k*interval.")
    p.add_argument("trace", help="trace name or directory")
    p.add_argument("--interval", required=True, help="new interval, e.g. 1s or 1min")
    p.add_argument("--out", required=True, help="output trace directory")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    _add_master(p)
    p.set_defaults(run=cmd_resample)

    p = commands.add_parser("geo", help="attach node coordinates from a CSV name,lat,lon (PySpark)",
                            description="Join node names with a CSV name,lat,lon; rewrites nodes.parquet.")
    p.add_argument("trace", help="trace directory (not a shipped trace)")
    p.add_argument("geo", help="CSV with columns name,lat,lon")
    _add_master(p)
    p.set_defaults(run=cmd_geo)

    p = commands.add_parser("compare", help="calibration statistics of two traces side by side",
                            description="median, p90, p99, outage rate and frame-to-frame correlation of log RTT "
                                        "(traces.calibrate.measure) for two traces, e.g. a synthetic one and its model.")
    p.add_argument("trace", help="reference trace name or directory")
    p.add_argument("other", help="trace to compare with it")
    p.add_argument("--max-frames", type=int, default=2000, help="evenly spaced frames to read (default 2000)")
    p.set_defaults(run=cmd_compare)

    p = commands.add_parser("plot", help="PNG: per-pair median heatmap + RTT distribution",
                            description="Draw the per-pair median RTT heatmap and the RTT CCDF into one PNG.")
    p.add_argument("trace", help="trace name or directory")
    p.add_argument("--out", help="PNG path (default out/traces/NAME.png)")
    p.add_argument("--max-frames", type=int, default=2000, help="evenly spaced frames to read (default 2000)")
    p.set_defaults(run=cmd_plot)
