"""The mirror's Prometheus metrics (prometheus_client), in a registry of its own.

    logbroker_mirror_messages_total{topic}      top-level messages forwarded and acknowledged
                                                (a compressed wrapper counts once)
    logbroker_mirror_bytes_total{topic}         their bytes as stored
    logbroker_mirror_events_total{topic}        Avro events counted for the audit (tier mirror)
    logbroker_mirror_undecodable_total{topic}   payloads that are not events (forwarded all the same)
    logbroker_mirror_lag_bytes{topic,partition} source end minus the acknowledged offset
    logbroker_mirror_retries_total{topic}       target requests that failed and were retried
    logbroker_mirror_commits_total              offset commits to the source's ZooKeeper

`serve(port)` exposes them on 127.0.0.1:<port>/metrics (`--metrics.port`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class MirrorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages = Counter(
            "logbroker_mirror_messages",
            "Messages forwarded (acknowledged by the target)",
            ["topic"],
            registry=r,
        )
        self.bytes = Counter(
            "logbroker_mirror_bytes", "Bytes forwarded, as stored", ["topic"], registry=r
        )
        self.events = Counter(
            "logbroker_mirror_events",
            "Avro events counted for the audit (tier mirror)",
            ["topic"],
            registry=r,
        )
        self.undecodable = Counter(
            "logbroker_mirror_undecodable",
            "Payloads that are not events, forwarded untouched",
            ["topic"],
            registry=r,
        )
        self.lag = Gauge(
            "logbroker_mirror_lag_bytes",
            "Source end offset minus the acknowledged offset",
            ["topic", "partition"],
            registry=r,
        )
        self.retries = Counter(
            "logbroker_mirror_retries", "Target requests retried", ["topic"], registry=r
        )
        self.commits = Counter(
            "logbroker_mirror_commits", "Offset commits to the source", registry=r
        )

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value (0 when it has none yet): for logs and tests."""
        found = self.registry.get_sample_value(name, labels)
        return found if found is not None else 0.0
