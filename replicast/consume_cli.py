"""``replicast consume APP``: an application's records exactly once, as JSON lines (docs/consume.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", help="print an application's records exactly once, as JSON lines",
        description="Subscribe to application APP's output (replicast/out/APP) on one or more brokers and print "
                    "each record once, whatever the number of sink replicas or their restarts: Alg. 1 on the "
                    "records' output ids, first copy wins (docs/consume.md).  With --position, a restarted "
                    "consumer goes on where it stopped.")
    parser.add_argument("app", help="the application (as in the query file)")
    parser.add_argument("--broker", action="append", metavar="URL",
                        help="mqtt://host:port of a broker the sinks publish to; repeat for several "
                             "(default mqtt://127.0.0.1:1883)")
    parser.add_argument("--order", choices=("arrival", "timestamp"), default="arrival",
                        help="arrival: as the first copy arrives (default); timestamp: sorted, at each punctuation")
    parser.add_argument("--position", metavar="FILE",
                        help="where to keep the position (frontier and ids above it), saved after each message")
    parser.add_argument("--client-id", metavar="ID", help="MQTT client id (default replicast-consume-APP): keep it "
                        "across restarts so the broker queues what arrives meanwhile")
    parser.add_argument("--follow", action="store_true", help="keep running after the application closes")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from replicast.consume import Consumer, Order

    out = sys.stdout
    lines: list[str] = []

    def hand_out() -> None:
        """One write per payload's new records, between the staging of its position and the
        rename that commits it (Consumer.before_save): printed, then recorded as printed."""
        if lines:
            out.write("".join(lines))
            lines.clear()
        out.flush()
    consumer = Consumer(args.app, args.broker or ["mqtt://127.0.0.1:1883"], order=Order(args.order),
                        position=args.position, client_id=args.client_id, until_closed=not args.follow,
                        before_save=hand_out)

    async def main() -> None:
        async for batch in consumer.batches():
            lines.extend(json.dumps(record, ensure_ascii=False) + "\n" for record in batch)
    asyncio.run(main())
    return 0
