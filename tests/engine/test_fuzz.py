"""Fuzzing the node's inputs (docs/node.md): Hypothesis-generated wire frames into FrameDecoder,
decode and a real NodeCore; hostile MQTT payloads into its entry point.  Only WireError may come
out of decoding; nothing may come out of the core; and afterwards the core still delivers a
genuine stream from start to CLOSED (it was not silenced).  ``benchmarks/fuzz.py`` runs the same
strategies at ≥ 10^5 frames and adds a live cluster over TCP and MQTT."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from replicast.engine.node import DeadLetter, Delivered, NodeCore, configure
from replicast.engine.query_file import parse_query
from replicast.engine.wire import MAX_FRAME, FrameDecoder, WireError, decode
from replicast.operators.record import CLOSED
from tests.integration.helpers import CPU_FILTER_QUERY
from tests.wire_strategies import frames, payloads

QUERY = parse_query(CPU_FILTER_QUERY, "cpu-filter.toml")
PLACEMENT = {"cpu": ["b"], "busy": ["b"], "alerts": ["b"]}     # "a" only sends frames


def fresh_core() -> NodeCore:
    core = NodeCore("b", QUERY, now=0)
    core.apply(configure(QUERY, PLACEMENT, "b"), now=0)
    core.on_peer_up("a", now=1)
    return core


def feed(core: NodeCore, chunks: list[bytes], now: int) -> tuple[int, int]:
    """What the driver does with a peer's bytes; returns (messages applied, frames refused)."""
    applied = refused = 0
    for chunk in chunks:
        decoder = FrameDecoder(MAX_FRAME)       # a refused frame closes the link: a new one each time
        try:
            bodies = decoder.feed(chunk)
        except WireError:
            refused += 1
            continue
        for body in bodies:
            try:
                message = decode(body)
            except WireError:
                refused += 1
                continue
            core.receive("a", message, now=now)          # must never raise
            applied += 1
    core.messages_to_send()
    core.events()
    return applied, refused


def still_delivers(core: NodeCore, now: int) -> None:
    """A genuine source stream through this core's entry replica reaches the application whole —
    above any punctuation the payloads carried: a hostile payload may hold a *valid* punctuation
    (up to CLOSED, which ends the stream), and records behind it are rightly late."""
    entry = next(h.entry for h in core.hosted.values() if h.kind == "entry")
    ts = min(max(5_000_000_000_000, entry.punctuation + 1), CLOSED - 1)
    closed = ts <= entry.punctuation
    core.on_source("cpu", b'[{"ts": %d, "server": "ok", "load": 0.9}, {"punctuation": %d}]' % (ts, CLOSED), now=now)
    core.handle_timer(now=now + 1)
    events = core.events()
    records = [r for e in events if isinstance(e, Delivered) for r in e.records]
    if closed:                                  # the payloads closed the stream: the record is late, and said so
        assert entry.late >= 1 and any(isinstance(e, DeadLetter) and "late" in e.reason for e in events)
    else:
        assert ("ok", 0.9) in [r[1:] for r in records]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(frames(), min_size=1, max_size=8))
def test_hostile_frames_never_escape_decoding_or_the_core(chunks):
    core = fresh_core()
    feed(core, chunks, now=10)
    core.handle_timer(now=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(payloads, min_size=1, max_size=6))
def test_hostile_payloads_are_rejected_by_the_entry_point_and_the_stream_goes_on(batch):
    core = fresh_core()
    for payload in batch:
        core.on_source("cpu", payload, now=10)
    core.events()
    still_delivers(core, now=100)
