"""The batch latency histogram exposes what prometheus_client's Histogram would for the same records."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from engine.aio.metrics import LATENCY_BUCKETS, LatencyHistogram


def samples(registry: CollectorRegistry) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in registry.collect() for s in metric.samples if not s.name.endswith("_created")}


def test_batches_give_prometheus_histogram_samples():
    rng = random.Random(7)
    reference_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("replicast_app_latency_seconds", "h", ["app"], buckets=LATENCY_BUCKETS,
                          registry=reference_registry)
    ours = LatencyHistogram(LATENCY_BUCKETS)

    class Collector:
        def collect(self):
            yield ours.family()

        def describe(self):
            return []

    ours_registry.register(Collector())
    now = 10**15
    for _ in range(300):
        app = rng.choice(["a", "b"])
        base = now - rng.choice([0, 500, 1000, 2500, 9_999, 10**5, 10**6, 3 * 10**7])
        spread = rng.choice([0, 1, 2000, 10**6, 10**8])
        records = sorted((base - rng.randrange(spread + 1), "x") for _ in range(rng.randrange(0, 40)))
        # exact bucket bounds too (latency == bound counts in that bucket)
        records += [(now - round(b * 1e6),) for b in rng.sample(LATENCY_BUCKETS, 2)] if rng.random() < 0.3 else []
        for record in records:
            reference.labels(app).observe((now - record[0]) / 1e6)
        ours.observe(app, now, records)
    want, got = samples(reference_registry), samples(ours_registry)
    assert want.keys() == got.keys()
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-6 * max(1.0, abs(value)), key
    assert b'le="+Inf"' in generate_latest(ours_registry)
