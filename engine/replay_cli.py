"""``replicast replay``: run a query replicated in one process and compare with the reference."""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path

from replicast.engine.event_file import read_events, record_to_json
from replicast.engine.query_file import load_query
from replicast.engine.replay import ReplayResult, replay
from replicast.operators.query import Query

log = logging.getLogger("replicast.replay")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay", help="run a query replicated in one process (random delays, crashes) and write its output",
        description="Run QUERY's physical replica graph in one process: K replicas of every entry point and "
                    "operator, every stream replica a FIFO channel with its own random delay, deliveries "
                    "interleaved by a schedule seeded by --seed, and --crash random replicas failing for good. "
                    "With --replicas 1 --crash 0 (the default) this is the reference output, computed straight "
                    "through the plan: one batch per punctuation interval, no delays, at the operators' speed.")
    parser.add_argument("query", type=Path, help="query file (TOML)")
    parser.add_argument("--input", required=True, type=Path, help="events file: JSON lines {\"stream\", \"ts\" (µs), fields…}")
    parser.add_argument("--replicas", type=int, default=1, metavar="K", help="replicas of every entry point and operator (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of delays, interleaving and crashes (default 0; no effect on the reference run)")
    parser.add_argument("--crash", type=int, default=0, metavar="N", help="replicas that crash for good (default 0)")
    parser.add_argument("--punctuation-ms", type=float, default=1000.0, metavar="P",
                        help="punctuation interval in ms of event time (default 1000)")
    parser.add_argument("--output", type=Path, help="write application records here (JSON lines); default: stdout")
    parser.add_argument("--check", action="store_true",
                        help="also run the reference (--replicas 1 --crash 0) and exit 1 unless the outputs match")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    query = load_query(args.query)
    streams = read_events(args.input, query)
    punctuation_us = round(args.punctuation_ms * 1000)
    result = replay(query, streams, replicas=args.replicas, seed=args.seed, crash=args.crash,
                    punctuation_us=punctuation_us)
    log.info("replayed %d records with %d replicas: %d messages, %d duplicate copies dropped, crashed %s",
             sum(map(len, streams.values())), args.replicas, result.messages, result.duplicates,
             ", ".join(map(str, result.crashed)) or "none")
    if result.evaluation_errors:
        log.warning("%d records were dropped by expression errors (division by zero, type errors…)",
                    result.evaluation_errors)
    write_output(query, result, args.output)
    if not args.check:
        return 0
    reference = replay(query, streams, replicas=1, seed=args.seed, crash=0, punctuation_us=punctuation_us)
    problems = compare(query, reference, result)
    for problem in problems:
        print(f"MISMATCH {problem}")
    if not problems:
        print(f"OK: {sum(map(len, result.outputs.values()))} records in {len(result.outputs)} application(s) "
              f"equal the non-replicated reference (replicas={args.replicas}, crashed={len(result.crashed)}, seed={args.seed})")
    return 1 if problems else 0


def write_output(query: Query, result: ReplayResult, path: Path | None) -> None:
    lines = [record_to_json(app, query.schemas[query.applications[app].input].names, record)
             for app, records in result.outputs.items() for record in records]
    text = "".join(line + "\n" for line in lines)
    if path is None:
        print(text, end="")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    log.info("wrote %d records to %s", len(lines), path)


def compare(query: Query, reference: ReplayResult, result: ReplayResult) -> list[str]:
    """Differences between two runs: multisets per application, and order for ordered ones."""
    problems = []
    for app, spec in query.applications.items():
        expected, got = reference.outputs[app], result.outputs[app]
        missing, extra = Counter(expected) - Counter(got), Counter(got) - Counter(expected)
        if missing or extra:
            problems.append(f"{app}: {sum(missing.values())} missing, {sum(extra.values())} extra "
                            f"(e.g. missing {list(missing)[:2]}, extra {list(extra)[:2]})")
        elif spec.ordered and expected != got:
            problems.append(f"{app}: same records but a different order")
    return problems
