"""Output visibility in the simulator (simulator.epoch_commit): replicast's sink replicas make a
record visible when its first copy reaches a sink, whatever the checkpoint interval; an
epoch-commit sink only at checkpoint completion (FlameStream's figure)."""

from replicast.simulator.epoch_commit import RTT_MS, compare


def test_replicast_is_flat_and_epoch_commit_grows_with_the_interval():
    results = compare(intervals_s=(0.1, 1.0, 10.0), seconds=30)
    replicast, *epochs = results
    fastest_ms = (RTT_MS["src"]["e1"] + RTT_MS["e1"]["f1"] + RTT_MS["f1"]["s1"]) / 2
    assert replicast.records == 1500 and replicast.p50_ms == replicast.p99_ms == fastest_ms   # the fastest path
    for epoch in epochs:
        assert epoch.records == 1500
        assert epoch.p50_ms >= replicast.p50_ms + epoch.interval_s * 1000 / 2 * 0.9   # half an interval waited
        assert epoch.p99_ms >= epoch.interval_s * 1000 * 0.9
    assert [e.p50_ms for e in epochs] == sorted(e.p50_ms for e in epochs)
