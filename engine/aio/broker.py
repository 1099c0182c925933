"""The embedded MQTT broker (amqtt) that ``replicast cluster up`` starts when no broker URL is given.

Run as ``python3 -m engine.aio.broker --host 127.0.0.1 --port 1883``; stops on SIGTERM/SIGINT.

Every client is let in, as with amqtt's ``AnonymousAuthPlugin``, but not flagged anonymous: amqtt
0.12 keeps no messages for a disconnected anonymous session and drops the session itself, so a
``replicast consume`` process killed and restarted (a persistent session, docs/consume.md) would
lose everything published while it was away.  A disconnected persistent session is kept
``SESSION_EXPIRY_S``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from amqtt.broker import Broker
from amqtt.plugins.base import BaseAuthPlugin
from amqtt.session import Session

#: Seconds a disconnected persistent session is kept (as the consumer's MQTT 5 session expiry,
#: engine/aio/paho_link.py).
SESSION_EXPIRY_S = 3600


class OpenAuthPlugin(BaseAuthPlugin):
    """Lets every client in without marking its session anonymous (the module docstring)."""

    async def authenticate(self, *, session: Session) -> bool:
        return True


def broker_config(host: str, port: int) -> dict:
    return {"listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}"}},
            "session_expiry_interval": SESSION_EXPIRY_S,
            "plugins": {f"{__name__}.{OpenAuthPlugin.__qualname__}": {}}}


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
