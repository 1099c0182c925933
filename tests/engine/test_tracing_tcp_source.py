"""A TCP source line's W3C trace context (engine/aio/tcp_source.py; docs/tracing.md, "External traces"):
the items' ``traceparent`` field is taken out of the line before the core sees it and goes with the
line, as an MQTT 5 message's user property does.  A real source connection on loopback."""

from __future__ import annotations

import asyncio
import json

from replicast.engine.aio.metrics import NodeMetrics
from replicast.engine.aio.tcp_source import SourceServer, trace_field
from replicast.engine.source_protocol import SourceLimits
from replicast.experiments.ports import free_loopback_ports

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_lines_traceparent_field_goes_with_it_and_out_of_its_items():
    port = free_loopback_ports(1)[0]
    fed: list = []
    lines = [json.dumps({"ts": 1, "server": "s1", "load": 0.5, "traceparent": TRACEPARENT}),
             json.dumps([{"ts": 2, "server": "s1", "load": 0.5, "traceparent": TRACEPARENT},
                         {"ts": 3, "server": "s2", "load": 0.25}]),
             json.dumps({"ts": 4, "server": "s1", "load": 0.5}),              # none: handed on as it is
             '{"ts": 5, "traceparent": oops',                                 # not JSON: as it is, for the core
             json.dumps({"punctuation": 6, "traceparent": 7})]                # not a string: dropped, none

    async def scenario() -> None:
        server = SourceServer(SourceLimits(), lambda *line: fed.append(line), NodeMetrics("n"), secret=b"s")
        await server.start("127.0.0.1", port)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write("".join(f"cpu {line}\n" for line in lines).encode())
            await writer.drain()
            for _ in range(500):
                if len(fed) == len(lines):
                    break
                await asyncio.sleep(0.01)
            writer.close()
            await writer.wait_closed()
        finally:
            server.close()

    asyncio.run(scenario())
    assert [(stream, trace) for stream, _, trace in fed] == [("cpu", TRACEPARENT), ("cpu", TRACEPARENT),
                                                             ("cpu", None), ("cpu", None), ("cpu", None)]
    assert json.loads(fed[0][1]) == {"ts": 1, "server": "s1", "load": 0.5}
    assert json.loads(fed[1][1]) == [{"ts": 2, "server": "s1", "load": 0.5}, {"ts": 3, "server": "s2", "load": 0.25}]
    assert fed[2][1] == lines[2].encode() and fed[3][1] == lines[3].encode()
    assert json.loads(fed[4][1]) == {"punctuation": 6}


def test_a_line_without_the_word_is_not_parsed():
    payload = b'{"ts": 1, "trace": "00-x"}'
    assert trace_field(payload) == (payload, None)
    assert trace_field(payload)[0] is payload
