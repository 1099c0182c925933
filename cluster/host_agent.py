"""What ``replicast cluster`` runs on a remote host: start, watch and stop node processes there.

``cluster up`` pushes this file to each host (SFTP) and runs it with the host's own Python (its
``ssh.python``), before replicast is installed there and after: so it imports nothing but the
standard library, and ``down`` works even where the venv is gone.  One action per run,
its input a JSON object on stdin (secrets travel there, never on a command line), its answer one
JSON object on stdout::

    python3 host_agent.py check     {"listeners": [[owner, key, host, port], …]}   -> {"python": [3, 11], "problems": [...]}
    python3 host_agent.py launch    {"argv": [...], "log": path, "cwd": dir, "env": {...}} -> {"pid": 123}
    python3 host_agent.py probe     {"processes": [{pid, argv, log, host, metrics_port}, …]} -> {"states": [...]}
    python3 host_agent.py stop      {"processes": [...], "grace": s}                  -> {"stopped": n}

The local supervisor (:mod:`cluster.processes`, :mod:`cluster.preflight`) uses the same helpers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def bind_problem(host: str, port: int) -> str | None:
    """None if a listener could bind ``host:port`` now (``SO_REUSEADDR``, as the node's own
    listeners: a port in TIME_WAIT passes), else the reason."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as error:
        return error.strerror or str(error)
    return None


def alive(pid: int, argv: list) -> bool:
    """Whether process ``pid`` runs (not a zombie) *and* is the one started with ``argv`` (pids are reused).
    Read from /proc by hand: this script runs on a host's bare Python, where psutil may not be
    installed (the local side, :mod:`cluster.processes`, uses psutil)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and [c.decode() for c in cmdline if c] == list(argv)


def last_line(path: str) -> str:
    """The last non-empty line of a log; for a JSON log line its message (and exception's last
    line), so a node that died says why in one line."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().strip().splitlines()
    except OSError:
        return "(no log)"
    if not lines:
        return "(no output)"
    line = lines[-1].strip()
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    if isinstance(entry, dict) and "message" in entry:
        exception = str(entry.get("exception", "")).strip().splitlines()
        return str(entry["message"]) + (f": {exception[-1]}" if exception else "")
    return line


def ready(host: str, metrics_port: int) -> bool:
    """Whether the node whose metrics are at ``host:metrics_port`` reports ``replicast_ready 1``."""
    try:
        with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=1) as page:
            return b"\nreplicast_ready 1.0" in page.read()
    except OSError:
        return False


def check(request: dict) -> dict:
    problems = [f"{owner}: {key} {port} on {host} cannot be used: {problem}"
                for owner, key, host, port in request.get("listeners", [])
                for problem in [bind_problem(host, port)] if problem is not None]
    return {"python": list(sys.version_info[:3]), "problems": problems}


def launch(request: dict) -> dict:
    """Start ``argv`` detached (its own session: the ssh session's end does not reach it), output to ``log``."""
    os.makedirs(os.path.dirname(request["log"]), exist_ok=True)
    with open(request["log"], "ab") as log:
        process = subprocess.Popen(request["argv"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=request.get("cwd"), env={**os.environ, **request.get("env", {})},
                                   start_new_session=True)
    return {"pid": process.pid}


def probe(request: dict) -> dict:
    """Each process's state: ``exited`` (with its log's last line), ``ready`` or ``starting``."""
    states = []
    for p in request["processes"]:
        if not alive(p["pid"], p["argv"]):
            states.append({"state": "exited", "last": last_line(p["log"])})
        elif p.get("metrics_port") and ready(p["host"], p["metrics_port"]):
            states.append({"state": "ready"})
        else:
            states.append({"state": "running" if not p.get("metrics_port") else "starting"})
    return {"states": states}


def stop(request: dict) -> dict:
    """SIGTERM every live process (last first), SIGKILL after ``grace`` s; returns how many there were."""
    live = [p for p in reversed(request["processes"]) if alive(p["pid"], p["argv"])]
    for p in live:
        os.kill(p["pid"], signal.SIGTERM)
    deadline = time.monotonic() + float(request.get("grace", 10))
    while time.monotonic() < deadline and any(alive(p["pid"], p["argv"]) for p in live):
        time.sleep(0.05)
    for p in live:
        if alive(p["pid"], p["argv"]):
            os.kill(p["pid"], signal.SIGKILL)
    return {"stopped": len(live)}


ACTIONS = {"check": check, "launch": launch, "probe": probe, "stop": stop}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ACTIONS:
        print(f"usage: {sys.argv[0]} {'|'.join(ACTIONS)} < request.json", file=sys.stderr)
        return 2
    print(json.dumps(ACTIONS[sys.argv[1]](json.loads(sys.stdin.read() or "{}"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
