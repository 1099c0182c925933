"""Real sshd "hosts" for the tests of ``cluster up`` on ssh hosts (tests/cluster/test_remote*.py).

Each host is an OpenSSH ``sshd`` started by the test, with its own config, a host key and an
authorized key generated here; as root, each runs in its own network namespace (a veth pair to a
bridge in the test's namespace, addresses 10.X.Y.10+i: separate IP stacks, as separate machines
have), else on its own loopback address (127.0.Y.10+i).  The hosts share this machine's
filesystem and Python: each gets its own directory (``ssh.dir``).  Every namespace and interface
made here is named ``sshcluster…`` and removed at the end.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.integration.helpers import ROOT, free_ports, wheel_once

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
#: One number per ``sshd_hosts`` use in this process: names are never reused, since the kernel removes
#: a deleted namespace's veth pair asynchronously ("RTNETLINK answers: File exists" for the next test
#: of the same pytest worker that reused the name at once).
_USES = itertools.count()


@dataclass
class SshHost:
    address: str
    port: int
    namespace: str | None
    dir: Path
    process: subprocess.Popen

    def ssh(self, **extra) -> dict:
        """The ``ssh = {…}`` table reaching this host."""
        return {"host": self.address, "port": self.port, "user": os.environ.get("USER") or _user(),
                "dir": str(self.dir), **extra}

    def run(self, command: list[str], **kwargs) -> subprocess.Popen:
        """A process on this host (inside its namespace)."""
        prefix = ["ip", "netns", "exec", self.namespace] if self.namespace else []
        return subprocess.Popen([*prefix, *command], **kwargs)


def _user() -> str:
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


def namespaces_work() -> bool:
    """Root, ``ip`` and network namespaces; ``REPLICAST_TEST_SSH_LOOPBACK=1`` forces loopback hosts."""
    if os.environ.get("REPLICAST_TEST_SSH_LOOPBACK") == "1" or os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"sshcluster-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        return True
    except (subprocess.CalledProcessError, OSError):
        return False
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The replicast wheel of this checkout (``python -m build --wheel``), built once per test run:
    pytest-xdist workers share it, behind a lock (two builds at once share the checkout's build/)."""
    # Pure Python: the hosts test cluster operations; the native wheel is tests/test_install.py's
    # (a mypyc build here costs CI two minutes).
    return wheel_once(tmp_path_factory, "replicast-wheel", ["--wheel"], env={**os.environ, "REPLICAST_PURE_PYTHON": "1"})


def replicast(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replicast.engine.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@contextmanager
def sshd_hosts(tmp: Path, count: int):
    """``count`` sshd hosts; yields ``(hosts, key, wrong_key, known_hosts)``."""
    if not os.path.exists(SSHD):
        pytest.skip("sshd is not installed (scripts/setup.sh installs openssh-server)")
    keys = tmp / "keys"
    keys.mkdir(parents=True)
    for name in ("host_key", "client_key", "wrong_key"):
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sshcluster-test-{name}", "-f", str(keys / name))
    (keys / "authorized_keys").write_text((keys / "client_key.pub").read_text())
    host_public = " ".join((keys / "host_key.pub").read_text().split()[:2])
    tag = f"{os.getpid() % 100_000}x{next(_USES) % 100}"   # interface names: at most 15 characters
    use_ns = namespaces_work()
    subnet = _free_subnet() if use_ns else ""
    bridge = f"rsh{tag}br"
    hosts: list[SshHost] = []
    made_ns: list[str] = []
    made_veths: list[str] = []
    try:
        if use_ns:
            Path("/run/sshd").mkdir(exist_ok=True)            # sshd's privilege separation directory
            _run("ip", "link", "add", bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{subnet}.1/24", "dev", bridge)
            _run("ip", "link", "set", bridge, "up")
            ports = [22] * count
        else:
            ports = free_ports(count)
        for i in range(count):
            address = f"{subnet}.{10 + i}" if use_ns else f"127.0.{os.getpid() % 250}.{10 + i}"
            namespace = None
            if use_ns:
                namespace, veth = f"sshcluster-{tag}-{i}", f"rsh{tag}h{i}"
                _run("ip", "netns", "add", namespace)
                made_ns.append(namespace)
                made_veths.append(veth)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
                _run("ip", "link", "set", veth, "master", bridge, "up")
                _run("ip", "-n", namespace, "link", "set", "lo", "up")
                _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
                _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            directory = tmp / f"host{i}"
            directory.mkdir()
            config = tmp / f"sshd{i}.conf"
            config.write_text(f"Port {ports[i]}\nListenAddress {address}\nHostKey {keys / 'host_key'}\n"
                              f"PidFile {tmp / f'sshd{i}.pid'}\nAuthorizedKeysFile {keys / 'authorized_keys'}\n"
                              "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
                              "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nUseDNS no\n"
                              "Subsystem sftp internal-sftp\nMaxStartups 100\nMaxSessions 100\nLogLevel ERROR\n")
            log = open(tmp / f"sshd{i}.log", "wb")
            prefix = ["ip", "netns", "exec", namespace] if namespace else []
            process = subprocess.Popen([*prefix, SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT)
            hosts.append(SshHost(address, ports[i], namespace, directory, process))
        (keys / "known_hosts").write_text("".join(
            f"{h.address if h.port == 22 else f'[{h.address}]:{h.port}'} {host_public}\n" for h in hosts))
        for host in hosts:
            _wait_listening(host)
        yield hosts, keys / "client_key", keys / "wrong_key", keys / "known_hosts"
    finally:
        for host in hosts:
            host.process.terminate()
        for host in hosts:
            try:
                host.process.wait(10)
            except subprocess.TimeoutExpired:
                host.process.kill()
        for veth in made_veths:                      # at once, both ends (a deleted namespace's go asynchronously)
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        for namespace in made_ns:
            pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
            for pid in pids:                         # whatever a failed test left there
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        if use_ns:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)


def _free_subnet() -> str:
    """A 10.x.y.0/24 no interface here uses (two test processes must not share one)."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for k in range(250):
        n = (os.getpid() + k) % 12500
        subnet = f"10.{200 + n // 250}.{n % 250}"
        if f" {subnet}." not in used:
            return subnet
    raise RuntimeError("no free 10.200-249.x.0/24 subnet for the test hosts")


def _wait_listening(host: SshHost, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if host.process.poll() is not None:
            raise RuntimeError(f"sshd on {host.address} exited with status {host.process.returncode}")
        probe = host.run(["python3", "-c", f"import socket; socket.create_connection(('{host.address}', {host.port}), 1)"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.wait(5) == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {host.address}:{host.port} did not listen within {timeout:.0f} s")


def processes_under(*directories: Path) -> list[str]:
    """The command lines of running processes naming any of ``directories`` (what a cluster on these
    hosts started: every node, broker and source command names its host's directory)."""
    found = []
    marks = [str(d) for d in directories]
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(m in cmdline for m in marks):
            found.append(f"{process.pid}: {cmdline}")
    return found
