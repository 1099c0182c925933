"""Private mosquitto brokers the tests start, kill -9 and restart: each with its own config file and
data directory, on a chosen loopback port (helpers.mosquitto is the simple anonymous one)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import wait_port


def mosquitto_binary() -> str:
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.path.exists(binary):
        pytest.skip("mosquitto is not installed (scripts/setup.sh installs it)")
    return binary


class Broker:
    """A mosquitto on ``port`` configured by ``conf`` (lines after the listener); ``persistent``
    keeps sessions and queued messages in ``directory`` across a kill -9, saved on every change."""

    def __init__(self, directory: Path, port: int, *, persistent: bool = False, conf: str = ""):
        self.directory, self.port = directory, port
        directory.mkdir(parents=True, exist_ok=True)
        lines = [f"listener {port} 127.0.0.1", "allow_anonymous true",
                 "user root" if os.geteuid() == 0 else "", conf]     # as root: stay root, the files are ours
        if persistent:
            lines += ["persistence true", f"persistence_location {directory}/", "autosave_interval 1",
                      "autosave_on_changes true", "max_queued_messages 0"]
        else:
            lines += ["persistence false"]
        self.conf = directory / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")
        self.process: subprocess.Popen | None = None

    def start(self) -> "Broker":
        self.log = (self.directory / "mosquitto.log").open("a")
        self.process = subprocess.Popen([mosquitto_binary(), "-c", str(self.conf), "-v"], stdout=self.log,
                                        stderr=subprocess.STDOUT)
        wait_port(self.port)
        return self

    def kill(self) -> None:
        """kill -9: nothing is saved on the way down."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.log.close()

    def __enter__(self) -> "Broker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
