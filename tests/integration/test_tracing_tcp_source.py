"""W3C Trace Context over a TCP source connection (docs/tracing.md, "External traces"): a source line's
``traceparent`` field rides in the baggage across the link (a on b: cpu → busy → alerts, the line sent
to a's source port) and the application's MQTT 5 messages carry the same trace id, once a Hop query
asks for baggage — as an MQTT 5 message's user property does.  Real node processes, real sockets,
mosquitto (the embedded broker speaks MQTT 3.1.1, which has no user properties)."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiomqtt

from replicast.engine.cluster_config import load_cluster
from replicast.engine.trace_client import ClusterTrace
from tests.integration.helpers import cluster, free_ports, mosquitto, two_node_cluster, wait_for

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_a_tcp_source_lines_traceparent_comes_out_with_the_applications_records(tmp_path):
    ports = free_ports(5)
    with mosquitto(tmp_path) as broker_port:
        path = two_node_cluster(tmp_path, secret="tcp-trace-secret", ports=ports[:4], broker_port=broker_port,
                                broker=f"mqtt://127.0.0.1:{broker_port}", node_a=f"source_port = {ports[4]}",
                                placement='cpu = ["a"]\nbusy = ["b"]\nalerts = ["a"]')
        with cluster(path, tmp_path / "run"):
            traced = ClusterTrace(load_cluster(path))

            async def drive(rounds: int) -> list[str]:
                seen: list[str] = []
                async with aiomqtt.Client("127.0.0.1", broker_port, identifier="tcp-tp-sub",
                                          protocol=aiomqtt.ProtocolVersion.V5) as sub:
                    await sub.subscribe("replicast/out/alerts", qos=1)

                    async def collect():
                        async for message in sub.messages:
                            pairs = getattr(message.properties, "UserProperty", None) or []
                            seen.extend(v for k, v in pairs if k == "traceparent")
                    task = asyncio.create_task(collect())
                    _, writer = await asyncio.open_connection("127.0.0.1", ports[4])
                    for _ in range(rounds):
                        base = time.time_ns() // 1000
                        record = {"ts": base, "server": "s1", "load": 0.9,
                                  "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
                        writer.write(f"cpu {json.dumps([record])}\ncpu {json.dumps({'punctuation': base + 1})}\n"
                                     .encode())
                        await writer.drain()
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(1.0)
                    writer.close()
                    task.cancel()
                return seen

            wait_for(lambda: traced.queries() and len(traced.queries()) == 2, 30, "both nodes' trace routes")
            wait_for(lambda: listening(ports[4]), 30, "a's source port")
            assert asyncio.run(drive(5)) == []            # no Hop query: no baggage, nothing carried out
            traced.install("hops", "From h In Hop Select COUNT Sample 1/1000000")
            out = asyncio.run(drive(10))
            assert len(out) >= 8, out
            assert {value.split("-")[1] for value in out} == {TRACE}
            assert all(len(value.split("-")[2]) == 16 and value.split("-")[2] != "00f067aa0ba902b7" for value in out)
            traced.remove("hops")
