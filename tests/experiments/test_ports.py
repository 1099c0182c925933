"""experiments/ports.py: ports chosen for local clusters are free, below the ephemeral range, and
leased so that concurrent choosers (test workers, experiments) never hand out the same port."""

from __future__ import annotations

import multiprocessing
import os
import socket
import time

from replicast.experiments import ports


def _choose(n: int, queue) -> None:
    queue.put(ports.free_loopback_ports(n))


def test_chosen_ports_are_free_below_the_ephemeral_range_and_distinct():
    taken: set[int] = set()
    chosen = ports.free_loopback_ports(40, taken)
    assert len(set(chosen)) == 40 and taken == set(chosen)
    assert all(1024 <= p < ports.ephemeral_low() for p in chosen)
    for port in chosen[:5]:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", port))


def test_concurrent_choosers_never_share_a_port(tmp_path, monkeypatch):
    # A narrow range makes collisions certain without leases: 8 processes × 40 ports from 400.
    monkeypatch.setattr(ports, "LEASES", tmp_path / "leases")
    monkeypatch.setattr(ports, "SPAN", 400)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_choose, args=(40, queue)) for _ in range(8)]
    for worker in workers:
        worker.start()
    chosen = [queue.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join()
    every = [p for one in chosen for p in one]
    assert len(every) == 320 and len(set(every)) == 320


def test_an_expired_lease_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "LEASES", tmp_path / "leases")
    first = ports.free_loopback_ports(1)[0]
    assert not ports._lease(first)                         # live: another chooser skips it
    old = time.time() - ports.LEASE_S - 1
    os.utime(ports.LEASES / str(first), (old, old))
    assert ports._lease(first)
