"""A node's broker session (engine/aio/mqtt_session.py, on paho's public API through
engine/aio/paho_link.py) with the ``[mqtt]`` options of docs/deploy.md against a real mosquitto:
TLS checked against ``ca`` and the broker's host name, a username and password.  The session's own
output comes back through its subscription (PUBACK for the output, QoS 1 in); a wrong password or a
certificate from another CA is refused, logged and never connected.  And MQTT 5 first, 3.1.1 from
then on with a broker that refuses 5 (the amqtt broker ``broker = "embedded"`` runs, here named by
its address so the session does not know it in advance)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from amqtt.broker import Broker

from replicast.engine.aio.broker import broker_config
from replicast.engine.aio.metrics import NodeMetrics
from replicast.engine.aio.mqtt_session import BrokerSession
from replicast.engine.aio.paho_link import Protocol
from replicast.engine.mqtt_config import BrokerAddress, MqttSettings
from replicast.experiments.ports import free_loopback_ports
from tests.integration.helpers import mosquitto

needs_tools = pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("mosquitto_passwd") is None,
                                 reason="openssl and mosquitto_passwd are needed")

PASSWORD = "s3cret-for-the-test"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=directory)


def make_broker_cert(directory: Path) -> None:
    """The broker's certificate for 127.0.0.1 (the name the session checks), signed by ``ca``."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=broker",
            "-keyout", "broker.key", "-out", "broker.csr", cwd=directory)
    (directory / "broker.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", "broker.ext", "-out", "broker.crt", cwd=directory)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A mosquitto on TLS with a password file; yields (directory with the CAs, port)."""
    directory = tmp_path_factory.mktemp("mqtt_tls")
    make_ca(directory, "ca")
    make_ca(directory, "other")
    make_broker_cert(directory)
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(directory / "passwords"), "replicast", PASSWORD],
                   check=True, capture_output=True, timeout=30)
    settings = (f"cafile {directory / 'ca.crt'}\ncertfile {directory / 'broker.crt'}\nkeyfile {directory / 'broker.key'}\n"
                f"password_file {directory / 'passwords'}\n")
    # "user root": mosquitto started as root otherwise drops to a user that cannot read the files here
    with mosquitto(directory, settings + "allow_anonymous false\nuser root\n") as port:
        yield directory, port


def session(directory: Path, port: int, *, password: str, ca: str, received: list) -> BrokerSession:
    broker = BrokerAddress(f"mqtts://127.0.0.1:{port}", "127.0.0.1", port, tls=True)
    settings = MqttSettings(default=broker, username="replicast", password=password, ca=directory / ca,
                            client_id="replicast-{node}-" + ca)
    return BrokerSession(broker, settings, "n1", NodeMetrics("n1"), topic="replicast/in/#",
                         on_message=lambda topic, payload: received.append((topic, payload)))


async def _wait(condition, seconds: float = 20) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.02)


async def _run(target: BrokerSession, until) -> None:
    task = asyncio.create_task(target.run())
    try:
        await _wait(lambda: until() or task.done())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not task.done() or task.cancelled()


@needs_tools
def test_a_session_over_tls_with_a_password_sends_and_receives(secured):
    directory, port = secured
    received: list = []
    target = session(directory, port, password=PASSWORD, ca="ca.crt", received=received)

    async def main():
        target.publish("replicast/in/cpu", b"42")
        await _run(target, lambda: received)

    asyncio.run(main())
    assert received == [("replicast/in/cpu", b"42")]
    assert target.acked == 1 and target.sessions_lost == 0


@needs_tools
@pytest.mark.parametrize("password, ca, refusal", [("wrong", "ca.crt", "Not authorized"),
                                                   (PASSWORD, "other.crt", "CERTIFICATE_VERIFY_FAILED")])
def test_a_wrong_password_or_an_untrusted_broker_is_refused_and_logged(secured, caplog, password, ca, refusal):
    directory, port = secured
    received: list = []
    target = session(directory, port, password=password, ca=ca, received=received)
    caplog.set_level(logging.WARNING, logger="replicast.node")

    def refused() -> bool:
        return any(getattr(r, "event", None) == "mqtt_down" and refusal in r.getMessage() for r in caplog.records)

    async def main():
        target.publish("replicast/in/cpu", b"42")
        await _run(target, refused)

    asyncio.run(main())
    assert refused(), [r.getMessage() for r in caplog.records]
    assert not target.connected and target.acked == 0 and received == []


def test_a_broker_that_refuses_mqtt_5_is_spoken_to_in_3_1_1(caplog):
    port = free_loopback_ports(1)[0]
    address = BrokerAddress(f"mqtt://127.0.0.1:{port}", "127.0.0.1", port)
    received: list = []
    target = BrokerSession(address, MqttSettings(default=address), "n1", NodeMetrics("n1"), topic="replicast/in/#",
                           on_message=lambda topic, payload: received.append((topic, payload)))
    caplog.set_level(logging.INFO, logger="replicast.node")

    async def main():
        broker = Broker(broker_config("127.0.0.1", port))
        await broker.start()
        try:
            assert target.protocol is Protocol.V5
            target.publish("replicast/in/cpu", b"42")
            await _run(target, lambda: received)
        finally:
            await broker.shutdown()

    asyncio.run(main())
    assert received == [("replicast/in/cpu", b"42")]
    assert target.protocol is Protocol.V311
    assert [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "mqtt_protocol"] == [
        f"MQTT broker {address.url} does not speak MQTT 5; using 3.1.1"]
