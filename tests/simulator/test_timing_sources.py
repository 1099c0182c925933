"""The timing tier's source records (simulator/timing_sources.py) are the reference tier's: the
records an entry point makes of :func:`simulator.sources.messages`, record for record, taken a
window at a time (the random walk and the ping rotation go on across windows), over a stretch of
the Seattle trace with outages (a ping sample missing: no record)."""

from __future__ import annotations

import pytest

from replicast.experiments import fig4_paper
from replicast.operators.record import Schema
from replicast.simulator.run import Prepared
from replicast.simulator.sources import messages, reference_records
from replicast.simulator.timing_sources import SourceRows, ping_samples


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Six servers of a synthetic PlanetLab-like day (its outages come at the Seattle trace's rates;
    the shipped trace's 30 reliable servers miss no ping sample), three hours of it."""
    out = tmp_path_factory.mktemp("timing_sources")
    trace = fig4_paper.month_trace(out, 6, 1, False)
    return Prepared(fig4_paper.paper_scenario(out / "scenario", trace, 6, 1, 3 * 3600.0))


def expected(prepared, source, schema):
    trace, servers, origin = prepared.trace, prepared.servers, prepared.origin

    def rtt(a, b, t):
        return trace.latency_ms(servers[a], servers[b], max(0, t - origin))

    out = []
    for when, items in messages(source, prepared.start, prepared.end, rtt, close=False):
        out += [(when, r) for r in reference_records(schema, items, when, "x")]
    return out


def taken(prepared, source, schema, window_us):
    rows = SourceRows(source, schema, prepared.start, prepared.end, None)
    out, begin = [], prepared.start
    while begin < prepared.end:
        end = min(prepared.end, begin + window_us)
        samples = None
        if source.kind == "ping" and rows.direct:
            steps = rows.steps(end)
            (samples,) = ping_samples(prepared.trace, prepared.servers, prepared.origin,
                                      [(source.server, rows.peers_at(len(steps)), steps)])
        records, sent = rows.take(end, samples)
        out += list(zip(sent, records))
        begin = end
    return rows, out


@pytest.mark.parametrize("window_s", [3 * 3600, 7 * 60])
def test_the_same_records_as_the_entry_points_make(prepared, window_s):
    missing = 0
    for source in prepared.sources:
        schema = prepared.query.streams[source.stream].schema
        rows, got = taken(prepared, source, schema, window_s * 1_000_000)
        assert rows.direct
        want = expected(prepared, source, schema)
        assert got == want and len(got) > 100
        if source.kind == "ping":
            missing += 3 * 360 - len(got)
    assert missing > 0, "no outage in this stretch: the test would not see a missing sample"


def test_other_field_orders_go_through_the_messages(prepared):
    source = next(s for s in prepared.sources if s.kind == "cpu")
    schema = Schema(("load", "server"), ("float", "str"))
    rows, got = taken(prepared, source, schema, 600_000_000)
    assert not rows.direct
    assert got == expected(prepared, source, schema) and isinstance(got[0][1][1], float)
