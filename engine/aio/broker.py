"""The embedded MQTT broker (amqtt) that ``replicast cluster up`` starts when no broker URL is given.

Run as ``python3 -m engine.aio.broker --host 127.0.0.1 --port 1883``; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from amqtt.broker import Broker


def broker_config(host: str, port: int) -> dict:
    return {"listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}}


async def serve(host: str, port: int) -> None:
    broker = Broker(broker_config(host, port))
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger("replicast.broker").info("amqtt broker listening on %s:%d", host, port)
    await stop.wait()
    await broker.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description="embedded amqtt broker for a local replicast cluster")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
