"""The core's latency histogram (engine.core.stats.Latency), counted a batch at a time, is exposed
exactly as prometheus_client's Histogram would expose the same records observed one by one."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from replicast.engine.aio.metrics import LATENCY_BUCKETS, latency_family
from replicast.engine.core.stats import LATENCY_BOUNDS_US, Latency


def samples(registry: CollectorRegistry) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in registry.collect() for s in metric.samples if not s.name.endswith("_created")}


def test_batches_give_prometheus_histogram_samples():
    rng = random.Random(7)
    reference_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("replicast_app_latency_seconds", "h", ["app"], buckets=LATENCY_BUCKETS,
                          registry=reference_registry)
    ours = {"a": Latency(), "b": Latency(), "idle": Latency()}

    class Collector:
        def collect(self):
            yield latency_family({app: {"count": l.count, "total_us": l.total, "buckets": l.buckets}
                                  for app, l in ours.items()})

        def describe(self):
            return []

    ours_registry.register(Collector())
    now = 10**15
    for _ in range(300):
        app = rng.choice(["a", "b"])
        base = now - rng.choice([0, 500, 1000, 2500, 9_999, 10**5, 10**6, 3 * 10**7])
        spread = rng.choice([0, 1, 2000, 10**6, 10**8])
        records = sorted((base - rng.randrange(spread + 1), "x") for _ in range(rng.randrange(0, 40)))
        if rng.random() < 0.3:      # latencies exactly on bucket bounds count in that bucket; any order
            records += [(now - bound,) for bound in rng.sample(LATENCY_BOUNDS_US, 2)]
        for record in records:
            reference.labels(app).observe((now - record[0]) / 1e6)
        ours[app].add(now, records)
        assert ours[app].count == sum(ours[app].buckets)
    want, got = samples(reference_registry), samples(ours_registry)
    assert want.keys() == got.keys()                  # no series for an application with no record yet
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-6 * max(1.0, abs(value)), key
    assert b'le="+Inf"' in generate_latest(ours_registry)
