"""The asyncio driver's vote store (engine/aio/vote_store.py): votes written durably before the
replies they guard, read back at the next start, and an unreadable file refused with one line.

The last tests run three real nodes on loopback TCP (entry-stamped ``cpu`` on ``a`` and ``b``):
their votes reach the state directory, and after a restart with one node's file corrupted that
node answers no ballot while the other two still decide a view above the one before; a node that
cannot store its votes stops."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from replicast.engine.aio.vote_store import VoteStore, VoteStoreError, vote_path
from replicast.engine.core.states import StamperRole
from replicast.engine.node import PersistVotes, StreamVotes, VoteMemory
from replicast.engine.messages import View
from replicast.experiments.ports import free_loopback_ports

ROOT = Path(__file__).resolve().parents[2]
VIEW = View(7_340_033, 1, ((0, 1_000), (1, 2_000)), 6_291_456)


def store(tmp_path: Path, cluster: str = "/c/cluster.toml") -> VoteStore:
    return VoteStore(vote_path(tmp_path / "state", "a"), cluster, "a")


def test_votes_saved_are_read_back_and_no_temporary_file_is_left(tmp_path):
    votes = PersistVotes({"cpu": StreamVotes(7_340_033, VIEW, 7_340_032), "mem": StreamVotes(5, None, 0)})
    store(tmp_path).save(votes)
    assert store(tmp_path).load().streams == votes.streams
    assert store(tmp_path).load().memory is VoteMemory.DURABLE
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["a.votes.json"]


def test_no_file_is_a_first_start_and_another_clusters_file_is_ignored(tmp_path):
    first = store(tmp_path).load()
    assert first.memory is VoteMemory.DURABLE and first.streams == {}
    store(tmp_path, "/other/cluster.toml").save(PersistVotes({"cpu": StreamVotes(9, None, 0)}))
    assert store(tmp_path).load().streams == {}


@pytest.mark.parametrize("content, says", [
    (b"{\"format\": 1, \"cluster\": ", "truncated"),
    (b"{\"format\": 1, \"cluster\": \"/c/cluster.toml\", \"node\": \"a\", "
     b"\"streams\": {\"cpu\": {\"promised\": \"7\", \"accepted\": null, \"proposed\": 0}}}",
     "`$.streams[...].promised`"),
    (b"{\"format\": 2, \"cluster\": \"/c/cluster.toml\", \"node\": \"a\", \"streams\": {}}", "format 2"),
])
def test_an_unreadable_file_is_one_line_naming_it_and_the_node_votes_lost(tmp_path, caplog, content, says):
    path = vote_path(tmp_path / "state", "a")
    path.parent.mkdir()
    path.write_bytes(content)
    with caplog.at_level(logging.ERROR, logger="replicast.node"):
        votes = store(tmp_path).load()
    assert votes.memory is VoteMemory.LOST
    [line] = [r.getMessage() for r in caplog.records]
    assert str(path) in line and says in line and "\n" not in line


def test_votes_that_cannot_be_written_are_an_error_naming_the_file(tmp_path):
    (tmp_path / "state").write_text("a file where the directory should be")
    with pytest.raises(VoteStoreError, match=r"state/a\.votes\.json: cannot store the votes"):
        store(tmp_path).save(PersistVotes({"cpu": StreamVotes(1, None, 0)}))


# -- three real nodes ----------------------------------------------------------------------------
def cluster_file(tmp_path: Path) -> Path:
    ports = free_loopback_ports(4)
    (tmp_path / "query.toml").write_text((ROOT / "examples/entry-stamped-query.toml").read_text())
    nodes = "".join(f"[[nodes]]\nname = \"{n}\"\nport = {p}\n" for n, p in zip("abc", ports))
    path = tmp_path / "cluster.toml"
    path.write_text(f"""query = "query.toml"
secret = "vote-store-test"
entry_mode = "entry"
punctuation_ms = 50
heartbeat_ms = 100
peer_timeout_ms = 600
[mqtt]
broker = "mqtt://127.0.0.1:{ports[3]}"
{nodes}[placement]
cpu = ["a", "b"]
pass = ["c"]
out = ["c"]
[outputs.out]
file = "{tmp_path / 'out.jsonl'}"
mqtt = false
""")
    return path


def stamping(drivers) -> list:
    return [h.stamp.view for d in drivers for h in d.core.hosted.values()
            if h.stamp is not None and h.stamp.role is StamperRole.STAMPING]


async def run_nodes(path: Path, state: Path | dict, until, timeout: float = 30.0, before=None):
    """Run nodes a, b, c (``state``: their state directory, or one per node) until ``until(drivers)``;
    ``before()`` runs once the drivers are built.  Returns the drivers and what each run raised."""
    from replicast.engine.aio.driver import NodeDriver
    from replicast.engine.cluster_config import load_cluster
    config = load_cluster(path)
    drivers = [NodeDriver(config, n, state_dir=state[n] if isinstance(state, dict) else state) for n in "abc"]
    if before is not None:
        before()
    tasks = [asyncio.create_task(d.run(install_signals=False)) for d in drivers]
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not until(drivers):
            assert loop.time() < deadline, "timed out waiting for the nodes"
            await asyncio.sleep(0.05)
    finally:
        for d in drivers:
            d.stop()
        ended = await asyncio.gather(*tasks, return_exceptions=True)
    if until is not stopped:
        assert not any(ended), ended
    return drivers, ended


def stopped(drivers) -> bool:
    """Node c stopped on its own and the others decided a view."""
    return drivers[2].failure is not None and bool(stamping(drivers))


def test_real_nodes_keep_their_votes_and_one_with_a_corrupt_file_answers_no_ballot(tmp_path, caplog):
    path, state = cluster_file(tmp_path), tmp_path / "state"
    first, _ = asyncio.run(run_nodes(path, state, lambda ds: stamping(ds) and all(
        vote_path(state, n).exists() for n in "abc")))
    [view] = stamping(first)
    stored = {n: VoteStore(vote_path(state, n), str(path.resolve()), n).load().streams["cpu"] for n in "abc"}
    assert all(v.promised >= view.term for v in stored.values()), stored
    assert stored["c"].accepted is not None and stored["c"].accepted.term >= view.term
    vote_path(state, "c").write_bytes(b"\x00garbage")
    with caplog.at_level(logging.ERROR, logger="replicast.node"):
        again, _ = asyncio.run(run_nodes(path, state,
                                         lambda ds: stamping(ds) and ds[2].core.statistics()["unanswered_ballots"]))
    [second] = stamping(again)
    assert second.term > view.term                    # a and b remembered what they promised
    assert [r for r in caplog.records if str(vote_path(state, "c")) in r.getMessage()]
    assert os.path.getsize(vote_path(state, "c")) == len(b"\x00garbage")   # never overwritten


def test_a_real_node_that_cannot_store_its_votes_stops_and_the_others_decide_without_it(tmp_path):
    """Node c's state directory turns into a file after its start: its first promise cannot be
    stored, so it stops (the error names the file) and sends nothing more; a and b decide alone."""
    from replicast.engine.aio.driver import NodeFailed
    path = cluster_file(tmp_path)
    state = {n: tmp_path / f"state-{n}" for n in "abc"}
    drivers, ended = asyncio.run(run_nodes(path, state, stopped,
                                           before=lambda: state["c"].write_text("not a directory")))
    assert isinstance(ended[2], NodeFailed) and str(vote_path(state["c"], "c")) in str(ended[2])
    assert drivers[2].core.statistics()["refused_ballots"] == 0
    replied = {n: VoteStore(vote_path(state[n], n), str(path.resolve()), n).load().streams for n in "ab"}
    [view] = stamping(drivers)
    assert all(v["cpu"].promised >= view.term for v in replied.values())
