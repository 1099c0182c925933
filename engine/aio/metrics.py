"""Prometheus metrics of one node (``/metrics`` on the node's metrics port).

Per-replica counters are read from a snapshot of :meth:`engine.node.NodeCore.statistics` that the
driver refreshes on the event loop (the HTTP server runs in a thread and must never touch the core):
every 200 ms, and at each scrape, which first waits (briefly) for the loop to refresh it
(:attr:`NodeMetrics.before_scrape`), so that what a scrape reads is the node as it is at the
scrape — after ``replicast cluster up`` returns, the coordinator's metrics already say it deployed.
"""

from __future__ import annotations

from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from replicast.engine.node import COUNTERS, LATENCY_BOUNDS_US

#: Latency buckets (seconds), those the core counts (engine.core.stats.LATENCY_BOUNDS_US).
LATENCY_BUCKETS = tuple(bound / 1e6 for bound in LATENCY_BOUNDS_US)

_REPLICA_COUNTERS = {
    "records_in": "records received by the replica after offset de-duplication",
    "records_out": "records emitted by the replica",
    "duplicates": "record copies dropped by the replica's duplicate filters (§IV-B)",
    "late": "records rejected by an entry point: behind a punctuation",
    "carried": "records a joined entry point skipped: its donor had taken them (lifecycle rule 5)",
    "malformed": "items rejected by an entry point: bad payload or schema",
    "accepted": "records accepted by an entry point",
}


class _BeforeScrape:
    """The first collector of a node's registry: it yields nothing, it runs the refresh hook."""

    def __init__(self, metrics: "NodeMetrics"):
        self.metrics = metrics

    def collect(self):
        if self.metrics.before_scrape is not None:
            self.metrics.before_scrape()
        return []


class NodeMetrics:
    def __init__(self, node: str):
        self.node = node
        self.registry = CollectorRegistry()
        #: Called in the scrape's thread before anything is read (the registry collects in the order
        #: of registration, and this comes first); the driver sets it.
        self.before_scrape: Callable[[], None] | None = None
        self.registry.register(_BeforeScrape(self))
        self.peer_connected = Gauge("replicast_peer_connected", "1 while an authenticated link to the peer is up",
                                    ["peer"], registry=self.registry)
        self.mqtt_connected = Gauge("replicast_mqtt_connected", "1 while every MQTT broker this node uses is connected",
                                    registry=self.registry)
        self.ready = Gauge("replicast_ready", "1 once every peer link and the MQTT subscription are up and "
                           "every hosted replica is live", registry=self.registry)
        self.app_punctuation = Gauge("replicast_app_punctuation", "last punctuation delivered to the application",
                                     ["app"], registry=self.registry)
        self.refused = Gauge("replicast_refused_connections", "connections refused by the handshake",
                             registry=self.registry)
        # Failures the driver survives (docs/node.md, "Nothing a peer, a source or a sink does stops a
        # node"): each is also one log line.
        self.task_failures = Counter("replicast_task_failures", "unexpected exceptions in a driver task (restarted)",
                                     ["task"], registry=self.registry)
        self.links_dropped = Counter("replicast_links_dropped", "links closed by this node, by reason",
                                     ["peer", "reason"], registry=self.registry)
        self.output_ready = Gauge("replicast_output_ready", "0 while the application's file output fails "
                                  "(lines wait in memory and are retried), else 1", ["app"], registry=self.registry)
        self.sink_errors = Counter("replicast_sink_errors", "deliveries an application sink failed to take",
                                   ["app"], registry=self.registry)
        self.sink_skipped = Counter("replicast_sink_skipped_records", "records a restarted sink did not publish "
                                    "again: at or below the frontier retained on replicast/frontier/<app>",
                                    ["app"], registry=self.registry)
        self.dead_letter_messages = Counter("replicast_dead_letter_messages",
                                            "dead letters published (one per source message, with a count)",
                                            registry=self.registry)
        self.mqtt_redeliveries = Counter("replicast_mqtt_redeliveries",
                                         "QoS-1 redeliveries of messages already handled, dropped (engine.aio.mqtt_input)",
                                         registry=self.registry)
        # A node's source_port (engine.aio.tcp_source, docs/node.md "TCP sources").
        self.source_refused = Counter("replicast_source_refused", "source connections or lines refused at the "
                                      "source port, by reason (engine.source_protocol.Refusal)",
                                      ["reason"], registry=self.registry)
        self.source_connections = Gauge("replicast_source_connections", "source connections open at the source port",
                                        registry=self.registry)
        self.mqtt_sessions_lost = Counter("replicast_mqtt_sessions_lost",
                                          "reconnections on which the broker had no session for this node: input "
                                          "published while it was away may be lost (engine.aio.mqtt_session)",
                                          ["broker"], registry=self.registry)
        self._stats: dict[str, Any] = {}
        self.registry.register(self)

    def refresh(self, stats: dict[str, Any]) -> None:
        self._stats = stats                     # one reference swap: the scrape thread sees old or new

    def serve(self, host: str, port: int):
        return start_http_server(port, host, registry=self.registry)

    def collect(self):
        stats = self._stats
        for key, help_text in _REPLICA_COUNTERS.items():
            family = CounterMetricFamily(f"replicast_replica_{key}", help_text, labels=["replica", "kind"])
            for replica, values in stats.get("replicas", {}).items():
                family.add_metric([replica, values["kind"]], values[key])
            yield family
        retained = GaugeMetricFamily("replicast_replica_retained_items", "items kept for replay until acknowledged",
                                     labels=["replica"])
        for replica, values in stats.get("replicas", {}).items():
            retained.add_metric([replica], values["retained"])
        yield retained
        states = GaugeMetricFamily("replicast_replica_state", "1 for the state each hosted replica is in "
                                   "(joining, rebuilding, live: docs/lifecycle.md)", labels=["replica", "state"])
        epochs = GaugeMetricFamily("replicast_replica_epoch", "the replica's incarnation (µs)", labels=["replica"])
        lost = GaugeMetricFamily("replicast_replica_lost_input", "1 while the replica, rebuilt without a live peer, "
                                 "lacks input it lost and no live peer has given it a snapshot (docs/lifecycle.md)",
                                 labels=["replica"])
        vanished = GaugeMetricFamily("replicast_replica_vanished_inputs", "input stream replicas whose node said it "
                                     "does not host their sender (docs/lifecycle.md)", labels=["replica"])
        for replica, values in stats.get("replicas", {}).items():
            for state in ("joining", "rebuilding", "live"):
                states.add_metric([replica, state], 1 if values["state"] == state else 0)
            epochs.add_metric([replica], values["epoch"])
            lost.add_metric([replica], 1 if values.get("lost_input") else 0)
            vanished.add_metric([replica], values.get("vanished_inputs", 0))
        yield states
        yield epochs
        yield lost
        yield vanished
        for key in COUNTERS:
            yield CounterMetricFamily(f"replicast_{key}", f"node counter {key} (docs/node.md)", value=stats.get(key, 0))
        yield latency_family(stats.get("latency", {}))
        placement = stats.get("placement")
        if placement is not None:
            yield GaugeMetricFamily("replicast_placement_coordinating",
                                    "1 while this node is the elected placement coordinator (§V)",
                                    value=1 if placement["coordinating"] else 0)
            decisions = CounterMetricFamily("replicast_placement_decisions",
                                            "control decisions this node sent as coordinator, by reason",
                                            labels=["reason"])
            for reason in ("initial", "gc", "revival"):
                decisions.add_metric([reason], placement.get(f"decisions_{reason}", 0))
            yield decisions
            core = placement.get("core", {})
            yield GaugeMetricFamily("replicast_placement_deployed",
                                    "1 once this coordinator has a deployment (made by Alg. 5 or adopted from reports)",
                                    value=1 if placement.get("deployed") else 0)
            yield CounterMetricFamily("replicast_placement_adopted",
                                      "deployments this coordinator adopted from the nodes' reports instead of deploying",
                                      value=core.get("adopted", 0))
            if placement.get("cost") is not None:
                yield GaugeMetricFamily("replicast_placement_cost",
                                        "network cost of the coordinator's view (records/s x one-way ms, §V-A)",
                                        value=placement["cost"])
        rtt = GaugeMetricFamily("replicast_peer_rtt_seconds", "heartbeat round-trip time", labels=["peer"])
        for peer, us in stats.get("rtt_us", {}).items():
            rtt.add_metric([peer], us / 1e6)
        yield rtt

    def describe(self):
        return []


def latency_family(latency: dict[str, dict]) -> HistogramMetricFamily:
    """``replicast_app_latency_seconds{app}`` from the core's per-application histograms
    (:class:`engine.core.stats.Latency`), exposed like a prometheus ``Histogram``."""
    family = HistogramMetricFamily("replicast_app_latency_seconds", "arrival − ts of delivered records (§VI-B)",
                                   labels=["app"])
    for app, values in latency.items():
        if not values["count"]:
            continue                                   # as a Histogram's label appears: at its first record
        cumulative, buckets = 0, []
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), values["buckets"]):
            cumulative += n
            buckets.append((floatToGoString(bound), cumulative))
        family.add_metric([app], buckets, sum_value=values["total_us"] / 1e6)
    return family
