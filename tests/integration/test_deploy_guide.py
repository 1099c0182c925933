"""docs/deploy.md, run as written: the blocks marked ``<!-- deploy-test: NAME -->`` are taken from
the page itself, so the test fails when the guide drifts from what works.

Changed on the way, and only these: absolute paths move under a temporary root (``/etc/…``,
``/var/lib/…``, ``/opt/…``, ``~``), the broker's host name becomes ``localhost`` and its port a
free one, the listener binds loopback only, and the node's command is this checkout's
``python -m replicast.engine.cli`` (the installed ``replicast`` is checked by the slow test).  The
broker is Debian's mosquitto 2, started by the test with a main configuration like Debian's
(persistence, ``include_dir`` of the guide's ``conf.d``).  Passwords are typed on standard input,
as at the guide's prompts.

What it checks: the guide's certificates, password file, ACL and listener make a broker that
refuses anonymous and wrong-password clients; a node started by the guide's systemd unit line,
with the guide's environment file and ``[mqtt]`` table, connects over TLS with its password and
subscribes; the guide's ``mosquitto_pub``/``mosquitto_sub`` lines, configured by the guide's
client files, get a record through it.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.helpers import CPU_FILTER_QUERY, ROOT, free_ports, metric, wait_for, wait_port

GUIDE = ROOT / "docs/deploy.md"
NODE_PASSWORD, SOURCE_PASSWORD, SECRET = "node-pw-5f1c", "source-pw-93ab", "cluster-secret-77d2"
needs = [shutil.which(p) or p for p in ("mosquitto", "mosquitto_passwd", "mosquitto_pub", "mosquitto_sub", "openssl")]
pytestmark = [
    pytest.mark.skipif(not all(os.path.exists(p) or shutil.which(p) for p in needs) or not os.path.exists(
        shutil.which("mosquitto") or "/usr/sbin/mosquitto"), reason="mosquitto, its clients and openssl are needed "
                                                                     "(scripts/setup.sh installs them)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the guide's broker commands run as root (chown to mosquitto)"),
]


def block(name: str) -> str:
    """The fenced block after ``<!-- deploy-test: name -->`` in docs/deploy.md."""
    match = re.search(rf"<!-- deploy-test: {re.escape(name)} -->\n```[a-z]*\n(.*?)```", GUIDE.read_text(), re.S)
    assert match, f"docs/deploy.md has no block marked deploy-test: {name}"
    return match.group(1)


class Site:
    """The substitutions of the module docstring, for one temporary root."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.home = root / "home"

    def __call__(self, text: str) -> str:
        for path in ("/etc/mosquitto", "/etc/replicast", "/var/lib/replicast", "/opt/replicast"):
            text = text.replace(path, f"{self.root}{path}")
        text = text.replace("broker-a.example.net", "localhost").replace("8883", str(self.port))
        return text.replace(f"listener {self.port}\n", f"listener {self.port} 127.0.0.1\n")

    def run(self, name: str, answers: list[str] | None = None) -> subprocess.CompletedProcess:
        """Run block ``name``; with ``answers``, one command line at a time, each given its answer
        on standard input (a prompting program reads ahead whatever the pipe holds)."""
        lines = [self(block(name))] if answers is None else [l for l in self(block(name)).splitlines() if l.strip()]
        answers = answers or [""] * len(lines)
        assert len(answers) == len(lines), (name, lines)
        for script, answer in zip(lines, answers):
            script = "set -euo pipefail\n" + script
            done = subprocess.run(["bash", "-c", script], input=answer, capture_output=True, text=True, timeout=120,
                                  cwd=self.root, env={**os.environ, "HOME": str(self.home)})
            assert done.returncode == 0, f"deploy.md block {name!r} failed:\n{script}\n{done.stdout}\n{done.stderr}"
        return done


def broker(site: Site, conf: str | None = None) -> subprocess.Popen:
    """mosquitto as Debian starts it: persistence on, ``conf.d`` included; root stays root here.
    ``conf``: the listener's file (default: the guide's ``broker-conf``)."""
    for text, path in ((block("broker-acl"), "etc/mosquitto/replicast.acl"),
                       (conf or block("broker-conf"), "etc/mosquitto/conf.d/replicast.conf")):
        (site.root / path).parent.mkdir(parents=True, exist_ok=True)
        (site.root / path).write_text(site(text))
    (site.root / "var/lib/mosquitto").mkdir(parents=True)
    main = site.root / "etc/mosquitto/mosquitto.conf"
    main.write_text(f"user root\npersistence true\npersistence_location {site.root}/var/lib/mosquitto/\n"
                    f"log_dest file {site.root}/mosquitto.log\ninclude_dir {site.root}/etc/mosquitto/conf.d\n")
    process = subprocess.Popen([shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(main)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    wait_port(site.port)
    return process


def refused(site: Site, *args: str) -> str:
    done = subprocess.run(["mosquitto_pub", "-h", "localhost", "-p", str(site.port), "-t", "replicast/in/cpu", "-m", "{}",
                           "-q", "1", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "HOME": str(site.root)})      # no client config files there
    assert done.returncode != 0, args
    return done.stderr


def node_command(site: Site, node: str = "a") -> tuple[list[str], dict[str, str], Path]:
    """The unit's ExecStart (as this checkout's module), its environment file and working directory."""
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str
    unit.read_string(site(block("unit")))
    service = unit["Service"]
    assert service["User"] == "replicast" and service["StateDirectory"] == "replicast"
    assert service["WorkingDirectory"] == f"{site.root}/var/lib/replicast"
    argv = shlex.split(service["ExecStart"].replace("%H", node))
    state = argv[argv.index("--state-dir") + 1]
    assert state.startswith(service["WorkingDirectory"] + "/"), state
    assert argv[0] == f"{site.root}/opt/replicast/bin/replicast"
    env = dict(line.split("=", 1) for line in Path(service["EnvironmentFile"]).read_text().splitlines() if line)
    return [sys.executable, "-m", "replicast.engine.cli", *argv[1:]], env, Path(service["WorkingDirectory"])


def test_the_deploy_guide_brings_up_a_node_on_mosquitto_with_passwords_and_tls(tmp_path):
    site = Site(tmp_path, free_ports(1)[0])
    site.home.mkdir()
    site.run("broker-certs")
    site.run("broker-passwords", answers=[f"{NODE_PASSWORD}\n" * 2, f"{SOURCE_PASSWORD}\n" * 2, ""])
    assert (tmp_path / "etc/mosquitto/passwd").stat().st_mode & 0o777 == 0o600
    mosquitto = broker(site)
    node = None
    try:
        ca = str(tmp_path / "etc/mosquitto/certs/mqtt-ca.crt")
        assert "not authorised" in refused(site, "--cafile", ca).lower()                       # anonymous
        assert "not authorised" in refused(site, "--cafile", ca, "-u", "source", "-P", "wrong").lower()
        assert refused(site, "-u", "source", "-P", SOURCE_PASSWORD)                            # no TLS: no answer

        site.run("node-env", answers=["", "", f"{SECRET}\n", f"{NODE_PASSWORD}\n"])
        etc = tmp_path / "etc/replicast"
        assert (etc / "replicast.env").stat().st_mode & 0o777 == 0o600
        shutil.copy(ca, etc / "mqtt-ca.crt")                       # "copy mqtt-ca.crt … to every VM"
        metrics_port = cluster_file(site, "a")
        argv, env, workdir = node_command(site)
        assert set(env) == {"REPLICAST_SECRET", "REPLICAST_MQTT_PASSWORD"} and env["REPLICAST_SECRET"] == SECRET
        workdir.mkdir(parents=True)                                # systemd's StateDirectory=
        log = (tmp_path / "node.log").open("w")
        node = subprocess.Popen(argv, cwd=workdir, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        wait_port(metrics_port)
        wait_for(lambda: metric(metrics_port, "replicast_ready") == 1.0, 30, "the node to connect and subscribe")
        assert NODE_PASSWORD not in " ".join(argv) and NODE_PASSWORD not in (tmp_path / "node.log").read_text()

        site.run("client-config", answers=["", f"{SOURCE_PASSWORD}\n", ""])
        sub_line, pub_line = [line for line in site(block("client-use")).splitlines() if line.strip()]
        clients = {**os.environ, "HOME": str(site.home)}
        sub = subprocess.Popen(shlex.split(sub_line), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=clients)
        deadline = time.monotonic() + 60
        while sub.poll() is None and time.monotonic() < deadline:     # until the subscriber is in and hears it
            subprocess.run(shlex.split(pub_line), check=True, timeout=30, env=clients)
            time.sleep(1)
        out, err = sub.communicate(timeout=10)
        assert sub.returncode == 0, err
        topic, payload = out.strip().split(" ", 1)
        assert topic == "replicast/out/alerts" and '"server": "s1"' in payload, out
        assert '"server": "s1"' in (etc / "alerts.jsonl").read_text()
        assert metric(metrics_port, "replicast_mqtt_connected") == 1.0
    finally:
        if node is not None:
            node.terminate()
            node.wait(10)
        mosquitto.terminate()
        mosquitto.wait(10)


def cluster_file(site: Site, node: str, mqtt_extra: str = "") -> int:
    """The guide's ``[mqtt]`` (and ``mqtt_extra``) with a one-node cluster around it; returns the metrics port."""
    etc = site.root / "etc/replicast"
    node_port, metrics_port = free_ports(2)
    (etc / "query.toml").write_text(CPU_FILTER_QUERY)
    (etc / "cluster.toml").write_text(
        'query = "query.toml"\n' + site(block("cluster-mqtt")) + mqtt_extra +
        f'\n[[nodes]]\nname = "{node}"\nport = {node_port}\nmetrics_port = {metrics_port}\n'
        f'[placement]\ncpu = ["{node}"]\nbusy = ["{node}"]\nalerts = ["{node}"]\n[outputs.alerts]\nfile = "alerts.jsonl"\n')
    return metrics_port


def test_the_guides_client_certificates_let_the_node_in_and_keep_others_out(tmp_path):
    site = Site(tmp_path, free_ports(1)[0])
    site.home.mkdir()
    site.run("broker-certs")
    site.run("broker-passwords", answers=[f"{NODE_PASSWORD}\n" * 2, f"{SOURCE_PASSWORD}\n" * 2, ""])
    site.run("node-mqtt-cert")
    conf = block("broker-conf")
    conf = conf.replace("tls_version tlsv1.2\n", "tls_version tlsv1.2\n" + block("broker-conf-client-certs"))
    assert "require_certificate true" in conf
    mosquitto = broker(site, conf)
    node = None
    try:
        certs = tmp_path / "etc/mosquitto/certs"
        assert refused(site, "--cafile", str(certs / "mqtt-ca.crt"), "-u", "source", "-P", SOURCE_PASSWORD)
        site.run("node-env", answers=["", "", f"{SECRET}\n", f"{NODE_PASSWORD}\n"])
        etc = tmp_path / "etc/replicast"
        shutil.copy(certs / "mqtt-ca.crt", etc / "mqtt-ca.crt")
        shutil.copy(certs / "n1.crt", etc / "mqtt-n1.crt")
        shutil.copy(certs / "n1.key", etc / "mqtt-n1.key")
        metrics_port = cluster_file(site, "n1", "\n" + site(block("cluster-mqtt-cert")))
        argv, env, workdir = node_command(site, "n1")
        workdir.mkdir(parents=True)
        log = (tmp_path / "node.log").open("w")
        node = subprocess.Popen(argv, cwd=workdir, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
        wait_port(metrics_port)
        wait_for(lambda: metric(metrics_port, "replicast_ready") == 1.0, 30, "the node to connect with its certificate")
    finally:
        if node is not None:
            node.terminate()
            node.wait(10)
        mosquitto.terminate()
        mosquitto.wait(10)


@pytest.mark.slow
def test_the_guides_install_gives_a_working_replicast_command(tmp_path):
    """Step 1 as written, from a wheel of this checkout (built without network, as ``python3 -m
    build`` would): a fresh venv, the wheel with its dependencies, ``replicast --version``; then
    step 5's unit checked by ``systemd-analyze verify`` against that installed command."""
    site = Site(tmp_path, 8883)
    site.home.mkdir()
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "REPLICAST_PURE_PYTHON": "1"})      # (the native wheel: test_install.py)
    assert built.returncode == 0, built.stderr
    done = site.run("install")
    assert re.search(r"\d+\.\d+", done.stdout), done.stdout
    help_ = subprocess.run([str(tmp_path / "opt/replicast/bin/replicast"), "node", "--help"], capture_output=True,
                           text=True, timeout=60)
    assert help_.returncode == 0 and "--state-dir" in help_.stdout, help_.stderr
    # The unit, with the command just installed: systemd's own check (unknown keys, a command that
    # is not there or not executable) says nothing.
    if shutil.which("systemd-analyze"):
        unit = tmp_path / "replicast.service"
        unit.write_text(site(block("unit")))
        verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
        assert verify.returncode == 0 and str(unit) not in verify.stderr, verify.stderr
