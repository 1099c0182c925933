"""Process supervision for ``replicast cluster``: start, watch and stop the processes of a cluster.

A started process is a dict ``{name, pid, command, log}`` (what ``RUN_DIR/state.json`` keeps), its
output going to ``RUN_DIR/<name>.log``.  ``cluster down`` may run in another process than ``up``, so
a process counts as ours only while its command line (psutil) is the one we started (pids are
reused).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil

from replicast.cluster import host_agent
from replicast.operators.errors import ReplicastError

#: Processes started by this command, by pid: right after fork a child still shows our own command line.
_POPEN: dict[int, subprocess.Popen] = {}


class ClusterError(ReplicastError):
    """The local cluster cannot be started or stopped."""


def env() -> dict[str, str]:
    """The environment of started processes: ours. They run ``sys.executable``, whose installed
    replicast (a wheel, or an editable checkout) is the one this command runs."""
    return dict(os.environ)


def spawn(name: str, command: list[str], run_dir: Path, wrap: list[str] | None = None) -> dict:
    """Start ``command`` (prefixed by ``wrap``, e.g. ``ip netns exec NS``, which execs it, so the
    recorded pid and command line are the command's own), output to ``RUN_DIR/<name>.log``."""
    log_path = run_dir / f"{name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen([*(wrap or []), *command], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True, env=env())
    _POPEN[process.pid] = process
    return {"name": name, "pid": process.pid, "command": command, "log": str(log_path)}


def running(process: dict) -> bool:
    popen = _POPEN.get(process["pid"])
    return popen.poll() is None if popen is not None else alive(process)


def exit_status(process: dict) -> int | None:
    """The exit status of a process this command started, None while it runs (or if not ours)."""
    popen = _POPEN.get(process["pid"])
    return None if popen is None else popen.poll()


def last_log_line(process: dict) -> str:
    """The last line of the process's log, a JSON line as its message (:func:`cluster.host_agent.last_line`)."""
    return host_agent.last_line(process["log"])


def blame_dead(processes: dict[str, dict]) -> None:
    """Raise naming the first of ``processes`` (``{"node n2": process}``) that has exited, with the
    last line of its log: the process that failed, not whichever one waited for it."""
    for name, process in processes.items():
        if not running(process):
            status = exit_status(process)
            raise ClusterError(f"{name} exited at start" + (f" with status {status}" if status is not None else "")
                               + f": {last_log_line(process)} (log: {process['log']})")


def alive(process: dict) -> bool:
    """Whether ``process`` still runs (not a zombie) *and* is the process we started (pids are reused)."""
    try:
        handle = psutil.Process(process["pid"])
        return handle.status() != psutil.STATUS_ZOMBIE and handle.cmdline() == list(process["command"])
    except psutil.Error:
        return False


def stop(processes: list[dict], grace: float) -> int:
    """SIGTERM every running process (last started first), SIGKILL after ``grace`` s; returns how many."""
    live = [p for p in reversed(processes) if running(p)]
    handles = []
    for process in live:
        try:
            handle = psutil.Process(process["pid"])
            handle.terminate()
            handles.append(handle)
        except psutil.NoSuchProcess:
            pass
    _, remaining = psutil.wait_procs(handles, timeout=grace)     # reaps our own children too
    for handle in remaining:
        try:
            handle.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(remaining, timeout=5)
    for process in live:
        popen = _POPEN.get(process["pid"])
        if popen is not None:
            popen.poll()
    return len(live)


def write_state(path: Path, processes: list[dict], **extra) -> None:
    """``RUN_DIR/state.json``: the processes and whatever else ``down`` must undo (namespaces)."""
    path.write_text(json.dumps({"processes": processes, **extra}, indent=1))


def read_state(path: Path) -> dict:
    return json.loads(path.read_text())
