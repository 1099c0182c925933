"""Application sinks: output ids (docs/consume.md) and file outputs that fail safe (docs/node.md, "Outputs")."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from replicast.engine.core.events import Delivered
from replicast.engine.sinks import (ID_KEY, FileSink, GateState, OutputIds, OutputState, RestartGate, frontier_payload,
                                    mqtt_items, mqtt_properties, parse_frontier)

NAMES = ("server", "load")


def deliveries():
    """An application's deliveries: equal records (same ts and fields) twice, punctuations between."""
    return [Delivered("alerts", [(1, "a", 0.5), (1, "a", 0.5), (2, "b", 1.0)], None, 10),
            Delivered("alerts", [(2, "b", 1.0), (3, "a", 0.5)], 2, 20),
            Delivered("alerts", [(3, "a", 0.5), (4, "c", 2.0)], 4, 30),
            Delivered("alerts", [(5, "a", 0.5)], None, 40)]


def all_ids(events, ids=None):
    ids = ids or OutputIds("alerts")
    return [i for event in events for i in ids.ids(event)]


def test_ids_name_each_occurrence_and_are_the_same_on_every_replica():
    first, second = all_ids(deliveries()), all_ids(deliveries())
    assert first == second
    assert len(set(first)) == len(first) == 8                       # equal records: distinct occurrences
    assert [i.split(":")[:2] for i in first[:4]] == [["1", "0"], ["1", "1"], ["2", "0"], ["2", "1"]]
    assert all_ids(deliveries(), OutputIds("other")) != first      # the application is part of the id


def test_ids_do_not_depend_on_batching():
    records = [r for event in deliveries() for r in event.records]
    one_by_one = [Delivered("alerts", [r], None, 0) for r in records]
    assert all_ids(one_by_one) == all_ids(deliveries())


def test_a_sink_restarted_above_a_punctuation_names_records_as_before():
    events = deliveries()
    before = all_ids(events)
    # restarted with the adopted frontier 2: it delivers every record above 2 again
    again = [Delivered("alerts", [(3, "a", 0.5), (3, "a", 0.5), (4, "c", 2.0)], 4, 50),
             Delivered("alerts", [(5, "a", 0.5)], None, 60)]
    assert all_ids(again) == before[4:]


def test_memory_is_one_punctuation_interval():
    ids = OutputIds("alerts")
    for ts in range(1000):
        ids.ids(Delivered("alerts", [(ts, "a", 1.0)], ts, ts))
    assert len(ids._counts) == 0
    ids.ids(Delivered("alerts", [(2000, "a", 1.0)], None, 0))
    assert len(ids._counts) == 1


def test_mqtt_payload_keeps_its_format_and_adds_ids():
    event = deliveries()[1]
    ids = OutputIds("alerts").ids(event)
    items = json.loads(mqtt_items(NAMES, event, ids))
    assert items[0] == {"ts": 2, "server": "b", "load": 1.0, ID_KEY: ids[0]}
    assert items[-1] == {"punctuation": 2}
    assert json.loads(mqtt_items(NAMES, event)) == [{"ts": 2, "server": "b", "load": 1.0},
                                                     {"ts": 3, "server": "a", "load": 0.5}, {"punctuation": 2}]
    assert dict(mqtt_properties("alerts", event, ids)) == {
        "replicast-app": "alerts", "replicast-ids": " ".join(ids), "replicast-punctuation": "2"}


# -- file outputs ---------------------------------------------------------------------------------
def write_all(sink: FileSink, events):
    ids = OutputIds(sink.app)
    for event in events:
        sink(event, ids.ids(event))


def lines(path: Path) -> list[dict]:
    text = path.read_text()
    assert text == "" or text.endswith("\n"), "a torn last line"
    return [json.loads(line) for line in text.splitlines()]


def test_file_lines_carry_ids(tmp_path):
    sink = FileSink(tmp_path / "out" / "alerts.jsonl", "alerts", NAMES)
    write_all(sink, deliveries())
    sink.close()
    got = lines(tmp_path / "out" / "alerts.jsonl")
    assert [(l["ts"], l["server"]) for l in got] == [(1, "a"), (1, "a"), (2, "b"), (2, "b"), (3, "a"), (3, "a"),
                                                     (4, "c"), (5, "a")]
    assert [l[ID_KEY] for l in got] == all_ids(deliveries())
    assert all(set(l) == {"app", "ts", "server", "load", "arrival", ID_KEY} for l in got)


def test_a_restarted_file_sink_cuts_a_torn_line_and_does_not_write_twice(tmp_path):
    path = tmp_path / "alerts.jsonl"
    sink = FileSink(path, "alerts", NAMES)
    write_all(sink, deliveries()[:3])
    sink.close()
    written = lines(path)
    with path.open("a") as f:
        f.write('{"app": "alerts", "ts": 5, "ser')                   # killed mid-write
    # the restarted application adopted frontier 2: it delivers everything above 2 again, then more
    restarted = FileSink(path, "alerts", NAMES)
    write_all(restarted, [Delivered("alerts", [(3, "a", 0.5), (3, "a", 0.5), (4, "c", 2.0)], 4, 50),
                          Delivered("alerts", [(5, "a", 0.5)], 5, 60), Delivered("alerts", [(4, "x", 1.0)], None, 70)])
    restarted.close()
    got = lines(path)
    assert got[:len(written)] == written
    assert [l[ID_KEY] for l in got] == all_ids(deliveries()) + [got[-1][ID_KEY]]
    assert got[-1]["ts"] == 4 and got[-1]["server"] == "x"          # new above the read-back window


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 64 KiB tmpfs (root only): a disk that fills up."""
    mount = tmp_path / f"exactlyonce-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def big_event(ts: int, n: int = 50) -> Delivered:
    return Delivered("alerts", [(ts, f"server-{i:04d}-" + "x" * 40, float(i)) for i in range(n)], None, ts)


def test_a_full_disk_keeps_lines_whole_and_retries(small_tmpfs):
    """A real full disk (tmpfs of 64 KiB): nothing torn, nothing dropped, written once space returns."""
    path = small_tmpfs / "alerts.jsonl"
    sink, ids = FileSink(path, "alerts", NAMES), OutputIds("alerts")
    events = [big_event(ts) for ts in range(1, 30)]                  # ~180 KiB of lines
    for event in events:
        sink(event, ids.ids(event))
    assert sink.state is OutputState.FAILING and sink.pending and "No space" in sink.error
    assert all(l["ts"] for l in lines(path))                         # whole lines only
    written_before = len(lines(path))
    path.with_name("filler").write_bytes(b"")                        # nothing else to free: grow the disk
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_tmpfs)], check=True)
    assert sink.retry() and sink.state is OutputState.WRITING
    got = lines(path)
    assert len(got) == 50 * len(events) > written_before
    assert [l[ID_KEY] for l in got] == all_ids(events)               # each once, in order
    sink.close()


def test_a_read_only_directory_does_not_stop_the_sink(small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    sink = FileSink(small_tmpfs / "out" / "alerts.jsonl", "alerts", NAMES)     # no exception
    assert sink.state is OutputState.FAILING and "Read-only" in sink.error
    write_all(sink, deliveries())
    assert not sink.retry() and len(sink.pending) == 8
    subprocess.run(["mount", "-o", "remount,rw", str(small_tmpfs)], check=True)
    assert sink.retry() and sink.state is OutputState.WRITING
    assert [l[ID_KEY] for l in lines(small_tmpfs / "out" / "alerts.jsonl")] == all_ids(deliveries())
    sink.close()


def test_a_restarted_sink_holds_until_its_frontier_is_read_then_skips_what_is_at_or_below_it():
    events = deliveries()
    ids = OutputIds("alerts")
    named = [(event, ids.ids(event)) for event in events]
    gate = RestartGate()
    assert gate.state is GateState.READING
    assert [gate.offer(event, i) for event, i in named[:2]] == [[], []]             # held
    out = gate.known(parse_frontier(frontier_payload(2)))
    # the first delivery's records are all at or below 2: nothing; the second keeps (3, a) and its punctuation
    assert [(e.records, e.punctuation, i) for e, i in out] == [([(3, "a", 0.5)], 2, [named[1][1][1]])]
    assert gate.state is GateState.PASSING and gate.skipped == 4              # its punctuation reached 2
    assert gate.offer(*named[2]) == [named[2]]                                 # then everything, unchanged


def test_a_gate_skips_until_a_punctuation_reaches_the_frontier():
    gate = RestartGate()
    gate.known(3)
    first, second = deliveries()[:2]
    assert gate.offer(first, None) == []                                       # all <= 3, no punctuation
    (event, ids), = gate.offer(second, None)
    assert event.records == [] and event.punctuation == 2 and gate.state is GateState.SKIPPING
    assert gate.offer(deliveries()[2], None)[0][0].records == [(4, "c", 2.0)]
    assert gate.state is GateState.PASSING


def test_no_frontier_or_a_first_start_passes_everything():
    gate = RestartGate()
    event = deliveries()[0]
    assert gate.offer(event, None) == []
    assert gate.known(parse_frontier(b"not json")) == [(event, None)]
    assert RestartGate(reading=False).offer(event, None) == [(event, None)]
    assert parse_frontier(b'{"punctuation": true}') is None and parse_frontier(b"[1]") is None
