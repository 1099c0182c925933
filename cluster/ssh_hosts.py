"""One remote host of ``replicast cluster``, over ssh (asyncssh, asyncio, as Dask's ``SSHCluster``).

A :class:`Host` is one ssh destination and one directory on it (several nodes may share both).  It
opens one ssh connection, runs commands and the host agent (:mod:`cluster.host_agent`) on it and
copies files by SFTP.  Every failure is a :class:`HostError` naming the host and what failed, in one
line: connection refused, no route, wrong key, unknown host key, a command that failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
from pathlib import Path

import asyncssh

from replicast.cluster.processes import ClusterError
from replicast.engine.cluster_config import SshSpec

#: Seconds to wait for an ssh connection (TCP connect and handshake).
CONNECT_TIMEOUT_S = 15.0

AGENT = Path(__file__).with_name("host_agent.py")


class HostError(ClusterError):
    """A remote host cannot be reached or did not do what was asked."""


class Host:
    """An ssh destination, its directory and the nodes it runs; :meth:`connect` before anything else."""

    def __init__(self, ssh: SshSpec, nodes: list[str]):
        self.ssh, self.nodes = ssh, nodes
        self.connection: asyncssh.SSHClientConnection | None = None
        #: The host's directory, absolute (known once connected).
        self.dir = ""

    @property
    def label(self) -> str:
        return f"host {self.ssh.destination} (node{'s' if len(self.nodes) > 1 else ''} {', '.join(self.nodes)})"

    def fail(self, what: str) -> HostError:
        return HostError(f"{self.label}: {what}")

    async def connect(self) -> None:
        asyncssh.set_log_level(logging.WARNING)      # its INFO lines (every channel opened) are not the user's news
        options = {"port": self.ssh.port, "connect_timeout": CONNECT_TIMEOUT_S}
        if self.ssh.user:
            options["username"] = self.ssh.user
        if self.ssh.key is not None:                  # this key only: not whatever an ssh agent offers
            options.update(client_keys=[str(self.ssh.key)], agent_path=None)
        if self.ssh.known_hosts is not None:
            options["known_hosts"] = str(self.ssh.known_hosts)
        try:
            self.connection = await asyncssh.connect(self.ssh.host, **options)
        except asyncssh.PermissionDenied:
            raise self.fail("ssh refused the login (permission denied: wrong user or key?)") from None
        except asyncssh.HostKeyNotVerifiable as error:
            raise self.fail(f"the host's ssh key is not the one in known_hosts ({error.reason})") from None
        except asyncssh.KeyImportError as error:
            raise self.fail(f"cannot read the key {self.ssh.key}: {error}") from None
        except OSError as error:              # refused, no route, a name that does not resolve
            reason = os.strerror(error.errno) if isinstance(error.errno, int) and error.errno > 0 else None
            raise self.fail(f"cannot connect: {reason or error.strerror or error}") from None
        except asyncssh.Error as error:
            raise self.fail(f"cannot connect: {error}") from None
        except asyncio.TimeoutError:
            raise self.fail(f"cannot connect: no answer within {CONNECT_TIMEOUT_S:.0f} s") from None
        done = await self.run(f"mkdir -p {shlex.quote(self.ssh.dir)} && cd {shlex.quote(self.ssh.dir)} && pwd",
                              what=f"cannot create the directory {self.ssh.dir}")
        self.dir = done.strip()

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()

    def path(self, *parts: str) -> str:
        return "/".join([self.dir, *parts])

    async def run(self, command: str, *, what: str, stdin: str | None = None) -> str:
        """Run ``command`` (a shell line) on the host; its stdout, or a :class:`HostError` saying ``what``
        failed with the command's last line of error output."""
        try:
            result = await self.connection.run(command, input=stdin, check=False)
        except (OSError, asyncssh.Error) as error:
            raise self.fail(f"{what}: the ssh connection failed: {error}") from None
        if result.exit_status != 0:
            output = (str(result.stderr or "").strip() or str(result.stdout or "").strip()).splitlines()
            raise self.fail(f"{what}: {output[-1] if output else f'exit status {result.exit_status}'}")
        return str(result.stdout or "")

    async def agent(self, action: str, request: dict) -> dict:
        """Run the host agent's ``action`` with ``request`` on stdin, with the host's own Python (the
        agent needs only the standard library: it works before the venv exists, and after it is gone)."""
        out = await self.run(f"{shlex.quote(self.ssh.python)} {shlex.quote(self.path('host_agent.py'))} {action}",
                             what=f"the host agent's '{action}' failed", stdin=json.dumps(request))
        return json.loads(out)

    async def put(self, files: dict[str, Path], *, mode: int = 0o644) -> None:
        """Copy local files to the host, ``{remote path relative to the host's dir: local path}``."""
        try:
            async with self.connection.start_sftp_client() as sftp:
                for remote, local in files.items():
                    target = self.path(remote)
                    await sftp.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                    await sftp.put(str(local), target)
                    await sftp.chmod(target, mode)
        except (OSError, asyncssh.Error) as error:
            raise self.fail(f"cannot copy files there (SFTP): {error}") from None

    async def lines(self, command: str):
        """The lines ``command`` prints, as they come (for following logs); ends with the command."""
        process = await self.connection.create_process(command, stdin=asyncssh.DEVNULL)
        try:
            async for line in process.stdout:
                yield line.rstrip("\n")
        finally:
            process.close()


async def connect_all(hosts: list[Host]) -> None:
    """Connect to every host at once; on any failure close them all and raise the first failure."""
    results = await asyncio.gather(*(h.connect() for h in hosts), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        for host in hosts:
            host.close()
        raise failures[0]
