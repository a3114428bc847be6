"""Broker configuration: Kafka 0.7's `server.properties` keys, their defaults and types.

A properties file is read the way Java reads one, minus the rarely used parts: `key=value`
or `key: value` lines, `#` and `!` comments, blank lines, and a trailing backslash that
continues a line. Unknown keys are kept and reported, not fatal, as Kafka did.

Defaults are 0.7's code defaults except where the sample `config/server.properties` that
every 0.7 user started from differs (port 9092, flush every 10000 messages or 1000 ms);
those are marked "sample".
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def _key(name: str, doc: str) -> dict[str, str]:
    return {"key": name, "doc": doc}


def parse_count_map(text: str) -> dict[str, int]:
    """'topic1:3, topic2:4' -> {'topic1': 3, 'topic2': 4} (0.7's map syntax)."""
    result: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.rpartition(":")
        if not sep or not name.strip():
            raise ValueError(f"expected topic:number, got {item!r}")
        result[name.strip()] = int(value)
    return result


@dataclass(frozen=True)
class BrokerConfig:
    """Every setting the broker reads, by its `server.properties` key (see `keys()`)."""

    brokerid: int = field(default=0, metadata=_key("brokerid", "unique id of this broker"))
    hostname: str = field(
        default="127.0.0.1", metadata=_key("hostname", "address to bind and to register")
    )
    port: int = field(default=9092, metadata=_key("port", "TCP port (sample default)"))
    log_dir: str = field(
        default="/tmp/logbroker-logs", metadata=_key("log.dir", "directory of partition logs")
    )
    num_partitions: int = field(
        default=1, metadata=_key("num.partitions", "partitions per topic on this broker")
    )
    topic_partition_count_map: Mapping[str, int] = field(
        default_factory=dict,
        metadata=_key("topic.partition.count.map", "per-topic partitions, 'topic:n,topic:n'"),
    )
    log_flush_interval: int = field(
        default=10000,
        metadata=_key("log.flush.interval", "fsync after this many messages (sample)"),
    )
    log_default_flush_interval_ms: int = field(
        default=1000,
        metadata=_key("log.default.flush.interval.ms", "fsync data older than this (sample)"),
    )
    log_default_flush_scheduler_interval_ms: int = field(
        default=1000,
        metadata=_key("log.default.flush.scheduler.interval.ms", "how often the flusher looks"),
    )
    log_retention_hours: int = field(
        default=168, metadata=_key("log.retention.hours", "delete segments older than this")
    )
    topic_log_retention_hours: Mapping[str, int] = field(
        default_factory=dict,
        metadata=_key("topic.log.retention.hours", "per-topic retention, 'topic:hours,...'"),
    )
    log_retention_size: int = field(
        default=-1, metadata=_key("log.retention.size", "bytes kept per partition; -1 = no limit")
    )
    log_cleanup_interval_mins: int = field(
        default=10, metadata=_key("log.cleanup.interval.mins", "how often retention runs")
    )
    log_file_size: int = field(
        default=512 * 1024 * 1024,
        metadata=_key("log.file.size", "roll a segment at this many bytes (sample)"),
    )
    log_roll_hours: int = field(
        default=168, metadata=_key("log.roll.hours", "roll a segment this old")
    )
    max_socket_request_bytes: int = field(
        default=104857600,
        metadata=_key("max.socket.request.bytes", "largest request accepted"),
    )
    max_message_size: int = field(
        default=1000000, metadata=_key("max.message.size", "largest payload accepted")
    )
    socket_send_buffer: int = field(
        default=100 * 1024, metadata=_key("socket.send.buffer", "SO_SNDBUF")
    )
    socket_receive_buffer: int = field(
        default=100 * 1024, metadata=_key("socket.receive.buffer", "SO_RCVBUF")
    )
    enable_zookeeper: bool = field(
        default=True, metadata=_key("enable.zookeeper", "register in ZooKeeper")
    )
    zk_connect: str = field(
        default="127.0.0.1:2181",
        metadata=_key("zk.connect", "ZooKeeper connect string, optional /chroot suffix"),
    )
    zk_sessiontimeout_ms: int = field(
        default=6000, metadata=_key("zk.sessiontimeout.ms", "ZooKeeper session timeout")
    )
    zk_connectiontimeout_ms: int = field(
        default=6000, metadata=_key("zk.connectiontimeout.ms", "ZooKeeper connect timeout")
    )
    metrics_port: int = field(
        default=-1,
        metadata=_key("metrics.port", "HTTP port for Prometheus metrics; -1 = off, 0 = any"),
    )
    idle_connection_timeout_ms: int = field(
        default=600000,
        metadata=_key("idle.connection.timeout.ms", "close connections idle this long"),
    )
    request_timeout_ms: int = field(
        default=30000,
        metadata=_key(
            "request.timeout.ms", "close a connection that takes longer to send a request"
        ),
    )
    extra: Mapping[str, str] = field(default_factory=dict, metadata={"key": "", "doc": ""})

    @classmethod
    def keys(cls) -> dict[str, dataclasses.Field[Any]]:
        """Property key -> dataclass field, for every known key."""
        return {f.metadata["key"]: f for f in dataclasses.fields(cls) if f.metadata.get("key")}

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> BrokerConfig:
        """Build from string properties; a bad value is a ValueError naming the key."""
        known = cls.keys()
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for key, raw in properties.items():
            f = known.get(key)
            if f is None:
                extra[key] = raw
                continue
            try:
                values[f.name] = _convert(f, raw)
            except ValueError as exc:
                raise ValueError(f"bad value for {key}: {raw!r} ({exc})") from exc
        if extra:
            log.warning("unknown configuration keys ignored: %s", ", ".join(sorted(extra)))
        return cls(**values, extra=extra)

    def with_overrides(self, overrides: Mapping[str, str]) -> BrokerConfig:
        """A copy with some keys replaced (`--override key=value`)."""
        merged = self.to_properties()
        merged.update(overrides)
        return BrokerConfig.from_properties(merged)

    def to_properties(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, f in self.keys().items():
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                out[key] = ",".join(f"{k}:{v}" for k, v in value.items())
            elif isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        out.update(self.extra)
        return out

    def partitions_for(self, topic: str) -> int:
        return int(self.topic_partition_count_map.get(topic, self.num_partitions))

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir)


def _convert(f: dataclasses.Field[Any], raw: str) -> Any:
    raw = raw.strip()
    if f.type in ("int", int):
        return int(raw)
    if f.type in ("bool", bool):
        if raw.lower() in ("true", "yes", "1"):
            return True
        if raw.lower() in ("false", "no", "0"):
            return False
        raise ValueError("expected true or false")
    if str(f.type).startswith("Mapping"):
        return parse_count_map(raw)
    return raw


def read_properties(lines: Iterable[str]) -> dict[str, str]:
    """Parse Java properties lines into a dict."""
    result: dict[str, str] = {}
    pending = ""
    for line in lines:
        line = line.rstrip("\n").rstrip("\r")
        stripped = (pending + line.lstrip()) if pending else line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending = stripped[:-1]
            continue
        pending = ""
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if sep < 0:
            key, value = stripped, ""
        else:
            key, value = stripped[:sep], stripped[sep + 1 :]
        result[key.strip()] = value.strip()
    return result


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Read a server.properties file (or use the defaults) and apply `key=value` overrides."""
    properties: dict[str, str] = {}
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            properties = read_properties(handle)
    if overrides:
        properties.update(overrides)
    return BrokerConfig.from_properties(properties)
