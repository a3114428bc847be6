"""Broker configuration: Kafka 0.7's `server.properties` keys, their defaults and types.

A properties file is read the way Java reads one, minus the rarely used parts: `key=value`
or `key: value` lines, `#` and `!` comments, blank lines, and a trailing backslash that
continues a line. Unknown keys are kept and reported (with the nearest known key), not fatal,
as Kafka did. Every known key is checked at start: a value that is not of the key's type or
out of its range (integers as 0.7's `Utils.getIntInRange` checked them, `--help` of
`logbroker broker` lists them) is a ConfigError naming key, value and the allowed range.

Defaults are 0.7's code defaults except where the sample `config/server.properties` that
every 0.7 user started from differs (port 9092, flush every 10000 messages or 1000 ms);
those are marked "sample".
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .coordination.paths import split_connect_string
from .coordination.zk_acl import ZkDigest, parse_zk_auth
from .protocol.topics import validate_topic
from .security.listeners import check as check_listeners
from .security.listeners import sasl_configured
from .security.sasl import SaslClientConfig, parse_mechanisms
from .security.tls import SecurityConfigError

log = logging.getLogger(__name__)


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# The smallest entry (size, magic 0, CRC, empty payload): a segment must hold one. Kafka 0.7
# refused less (`log.file.size` in `(Message.MinHeaderSize, Int.MaxValue)`); -1 once made a
# segment file per append.
MIN_SEGMENT_BYTES = 4 + 1 + 4


def _key(name: str, doc: str, low: int | None = None, high: int = INT32_MAX) -> dict[str, Any]:
    """A field's metadata: its property key, its doc, and for integers the allowed range
    (0.7's `Utils.getIntInRange`); integers are int32 unless said otherwise."""
    return {"key": name, "doc": doc, "range": None if low is None else (low, high)}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names key, value and range."""


def parse_count_map(text: str) -> dict[str, int]:
    """'topic1:3, topic2:4' -> {'topic1': 3, 'topic2': 4} (0.7's map syntax)."""
    result: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.rpartition(":")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"expected topic:number, got {item!r}")
        result[name.strip()] = int(value)
    return result


@dataclass(frozen=True)
class BrokerConfig:
    """Every setting the broker reads, by its `server.properties` key (see `keys()`)."""

    brokerid: int = field(default=0, metadata=_key("brokerid", "unique id of this broker", 0))
    hostname: str = field(
        default="127.0.0.1", metadata=_key("hostname", "address to bind and to register")
    )
    port: int = field(
        default=9092,
        metadata=_key("port", "TCP port (sample default); 0 = any free port", 0, 65535),
    )
    log_dir: str = field(
        default="/tmp/logbroker-logs", metadata=_key("log.dir", "directory of partition logs")
    )
    num_partitions: int = field(
        default=1, metadata=_key("num.partitions", "partitions per topic on this broker", 1)
    )
    max_partitions_per_topic: int = field(
        default=1024,
        metadata=_key(
            "max.partitions.per.topic",
            "most partitions one topic may have on this broker",
            1,
            1 << 20,
        ),
    )
    max_open_segment_files: int = field(
        default=1000,
        metadata=_key(
            "max.open.segment.files",
            "segment files kept open at once (at most half the descriptor limit)",
            1,
        ),
    )
    topic_partition_count_map: Mapping[str, int] = field(
        default_factory=dict,
        metadata=_key("topic.partition.count.map", "per-topic partitions, 'topic:n,topic:n'"),
    )
    log_flush_interval: int = field(
        default=10000,
        metadata=_key("log.flush.interval", "fsync after this many messages (sample)", 1),
    )
    log_default_flush_interval_ms: int = field(
        default=1000,
        metadata=_key("log.default.flush.interval.ms", "fsync data older than this (sample)", 0),
    )
    log_default_flush_scheduler_interval_ms: int = field(
        default=1000,
        metadata=_key("log.default.flush.scheduler.interval.ms", "how often the flusher looks", 1),
    )
    log_retention_hours: int = field(
        default=168, metadata=_key("log.retention.hours", "delete segments older than this", 1)
    )
    topic_log_retention_hours: Mapping[str, int] = field(
        default_factory=dict,
        metadata=_key("topic.log.retention.hours", "per-topic retention, 'topic:hours,...'"),
    )
    log_retention_size: int = field(
        default=-1,
        metadata=_key(
            "log.retention.size", "bytes kept per partition; -1 = no limit", -1, INT64_MAX
        ),
    )
    log_cleanup_interval_mins: int = field(
        default=10, metadata=_key("log.cleanup.interval.mins", "how often retention runs", 1)
    )
    log_file_size: int = field(
        default=512 * 1024 * 1024,
        metadata=_key(
            "log.file.size", "roll a segment at this many bytes (sample)", MIN_SEGMENT_BYTES
        ),
    )
    log_roll_hours: int = field(
        default=168, metadata=_key("log.roll.hours", "roll a segment this old", 1)
    )
    max_socket_request_bytes: int = field(
        default=104857600,
        metadata=_key("max.socket.request.bytes", "largest request accepted", 2),
    )
    max_message_size: int = field(
        default=1000000, metadata=_key("max.message.size", "largest payload accepted", 0)
    )
    max_inflated_set_size: int = field(
        default=-1,
        metadata=_key(
            "max.inflated.set.size",
            "bytes one compressed set may inflate to; -1 = 8 x max.message.size",
            -1,
        ),
    )
    max_inflated_request_size: int = field(
        default=-1,
        metadata=_key(
            "max.inflated.request.size",
            "bytes all compressed sets of one request may inflate to; -1 = 32 x max.message.size",
            -1,
        ),
    )
    socket_send_buffer: int = field(
        default=100 * 1024,
        metadata=_key(
            "socket.send.buffer", "SO_SNDBUF of each connection; -1 = the OS default", -1
        ),
    )
    socket_receive_buffer: int = field(
        default=100 * 1024,
        metadata=_key(
            "socket.receive.buffer", "SO_RCVBUF of each connection; -1 = the OS default", -1
        ),
    )
    enable_zookeeper: bool = field(
        default=True, metadata=_key("enable.zookeeper", "register in ZooKeeper")
    )
    zk_connect: str = field(
        default="127.0.0.1:2181",
        metadata=_key("zk.connect", "ZooKeeper connect string, optional /chroot suffix"),
    )
    zk_sessiontimeout_ms: int = field(
        default=6000, metadata=_key("zk.sessiontimeout.ms", "ZooKeeper session timeout", 1)
    )
    zk_connectiontimeout_ms: int = field(
        default=6000, metadata=_key("zk.connectiontimeout.ms", "ZooKeeper connect timeout", 1)
    )
    # -- ZooKeeper digest ACLs on the brokers' znodes (coordination/zk_acl.py) ---------------
    zookeeper_set_acl: bool = field(
        default=False,
        metadata=_key(
            "zookeeper.set.acl",
            "create the brokers' znodes writable by the zookeeper.auth digest only (world: read)",
        ),
    )
    zookeeper_auth: str = field(
        default="",
        repr=False,  # it holds the digest's password
        metadata=_key(
            "zookeeper.auth",
            "digest:<user>:<password>, the ZooKeeper login of the brokers and the admin tools",
        ),
    )
    port_08: int = field(
        default=-1,
        metadata=_key(
            "port.08",
            "port of the Kafka 0.8 listener (0.8-format topics, 0.8's protocol); -1 = off, 0 = any",
            -1,
            65535,
        ),
    )
    # -- listeners and TLS (Kafka 0.9+'s names; security/listeners.py, docs/security.md) ------
    listeners: str = field(
        default="",
        metadata=_key(
            "listeners",
            "NAME://host:port,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, KAFKA08, SSL08, "
            "SASL_SSL08, or names of listener.security.protocol.map; a name ending in 08 "
            "speaks Kafka 0.8); port and port.08 are PLAINTEXT and KAFKA08",
        ),
    )
    advertised_listeners: str = field(
        default="",
        metadata=_key(
            "advertised.listeners", "NAME://host:port,... registered instead of the bound address"
        ),
    )
    listener_security_protocol_map: str = field(
        default="",
        metadata=_key(
            "listener.security.protocol.map",
            "NAME:PROTOCOL,... added to the default map (PLAINTEXT, SSL, SASL_PLAINTEXT, "
            "SASL_SSL to themselves, KAFKA08:PLAINTEXT, SSL08:SSL, SASL_SSL08:SASL_SSL)",
        ),
    )
    ssl_certfile: str = field(
        default="", metadata=_key("ssl.certfile", "PEM certificate of the SSL listeners")
    )
    ssl_keyfile: str = field(default="", metadata=_key("ssl.keyfile", "PEM key of ssl.certfile"))
    ssl_cafile: str = field(
        default="",
        metadata=_key("ssl.cafile", "PEM CA certificates that client and leader certificates need"),
    )
    ssl_client_auth: str = field(
        default="none",
        metadata=_key(
            "ssl.client.auth",
            "client certificates: none, requested or required (per listener: "
            "listener.name.<name>.ssl.client.auth)",
        ),
    )
    security_inter_broker_protocol: str = field(
        default="PLAINTEXT",
        metadata=_key(
            "security.inter.broker.protocol",
            "how followers reach leaders: PLAINTEXT (the 0.7 port), SSL, SASL_PLAINTEXT or "
            "SASL_SSL (a listener of it; TLS with this broker's certificate, SASL with "
            "sasl.jaas.config)",
        ),
    )
    inter_broker_listener_name: str = field(
        default="",
        metadata=_key(
            "inter.broker.listener.name",
            "the listener followers fetch from leaders on (a name of listeners, of logbroker's "
            "protocol; the same on every broker), instead of security.inter.broker.protocol",
        ),
    )
    replication_require_authenticated_brokers: str = field(
        default="auto",
        metadata=_key(
            "replication.require.authenticated.brokers",
            "serve REPLICA_FETCH and OFFSETS_FOR_LEADER_EPOCH only to broker principals: "
            "true, false, or auto (true when an SSL listener asks client certificates)",
        ),
    )
    broker_principal_format: str = field(
        default="User:CN=broker-{id}",
        metadata=_key("broker.principal.format", "the principal of broker {id}'s certificate"),
    )
    metrics_port: int = field(
        default=-1,
        metadata=_key(
            "metrics.port", "HTTP port for Prometheus metrics; -1 = off, 0 = any", -1, 65535
        ),
    )
    idle_connection_timeout_ms: int = field(
        default=600000,
        metadata=_key("idle.connection.timeout.ms", "close connections idle this long", 1),
    )
    request_timeout_ms: int = field(
        default=30000,
        metadata=_key(
            "request.timeout.ms", "close a connection that takes longer to send a request", 1
        ),
    )
    connection_log_interval_ms: int = field(
        default=10000,
        metadata=_key(
            "connection.log.interval.ms",
            "at most one warning per cause (bad request, timeout, ...) per this interval; "
            "the rest are counted; 0 = every one",
            0,
        ),
    )
    # -- replication (Kafka 0.8's names; docs/replication.md) ------------------------------
    default_replication_factor: int = field(
        default=1,
        metadata=_key(
            "default.replication.factor",
            "replicas of a topic created without --replication-factor; 1 = 0.7's layout",
            1,
            64,
        ),
    )
    min_insync_replicas: int = field(
        default=1,
        metadata=_key(
            "min.insync.replicas",
            "in-sync replicas an acks=-1 produce needs, or it is refused",
            1,
            64,
        ),
    )
    replica_lag_time_max_ms: int = field(
        default=10000,
        metadata=_key(
            "replica.lag.time.max.ms",
            "a follower not caught up for this long leaves the ISR",
            1,
        ),
    )
    replica_fetch_max_bytes: int = field(
        default=1024 * 1024,
        metadata=_key("replica.fetch.max.bytes", "bytes a follower asks for per partition", 1024),
    )
    replica_fetch_wait_max_ms: int = field(
        default=500,
        metadata=_key(
            "replica.fetch.wait.max.ms", "how long a follower's fetch waits for new data", 0
        ),
    )
    replica_high_watermark_checkpoint_interval_ms: int = field(
        default=5000,
        metadata=_key(
            "replica.high.watermark.checkpoint.interval.ms",
            "how often the high watermarks are written to log.dir",
            1,
        ),
    )
    unclean_leader_election_enable: bool = field(
        default=False,
        metadata=_key(
            "unclean.leader.election.enable",
            "let a replica outside the ISR lead when no ISR member is alive (loses data)",
        ),
    )
    controlled_shutdown_enable: bool = field(
        default=True,
        metadata=_key(
            "controlled.shutdown.enable",
            "on SIGTERM, hand this broker's leaderships over before stopping",
        ),
    )
    controlled_shutdown_timeout_ms: int = field(
        default=30000,
        metadata=_key(
            "controlled.shutdown.timeout.ms",
            "the longest a controlled shutdown waits for its leaderships to move",
            0,
        ),
    )
    authorizer_class_name: str = field(
        default="",
        metadata=_key(
            "authorizer.class.name",
            "empty = no authorization (anyone may do anything); "
            "kafka.security.auth.SimpleAclAuthorizer (or acl) = ACLs in ZooKeeper",
        ),
    )
    super_users: str = field(
        default="",
        metadata=_key("super.users", "principals allowed everything: User:admin;User:broker-0"),
    )
    allow_everyone_if_no_acl_found: bool = field(
        default=False,
        metadata=_key(
            "allow.everyone.if.no.acl.found",
            "with an authorizer: a resource without any ACL is open to everyone",
        ),
    )
    sasl_enabled_mechanisms: str = field(
        default="",
        metadata=_key(
            "sasl.enabled.mechanisms",
            "SASL mechanisms clients log in with on the SASL_PLAINTEXT and SASL_SSL listeners, "
            "of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (users: `logbroker configs`); empty = no "
            "SASL (docs/security.md)",
        ),
    )
    sasl_mechanism_inter_broker_protocol: str = field(
        default="SCRAM-SHA-512",
        metadata=_key(
            "sasl.mechanism.inter.broker.protocol",
            "the mechanism this broker's replica fetchers log in to leaders with",
        ),
    )
    sasl_jaas_config: str = field(
        default="",
        repr=False,  # it holds this broker's password
        metadata=_key(
            "sasl.jaas.config",
            'this broker\'s own login, as Kafka\'s: ... username="broker-0" password="...";',
        ),
    )
    extra: Mapping[str, str] = field(default_factory=dict, metadata={"key": "", "doc": ""})

    def __post_init__(self) -> None:
        """Every value in its range, checked once, at start: a bad one is a ConfigError
        naming key, value and what is allowed, never a traceback later."""
        for key, f in self.keys().items():
            value = getattr(self, f.name)
            allowed = f.metadata.get("range")
            if allowed is not None:
                low, high = allowed
                if not low <= value <= high:
                    limits = (
                        f"{low} or more" if high in (INT32_MAX, INT64_MAX) else f"{low} to {high}"
                    )
                    raise ConfigError(
                        f"{key}={value} is out of range: {key} must be {limits} ({f.metadata['doc']})"
                    )
        for key, counts in (
            ("topic.partition.count.map", self.topic_partition_count_map),
            ("topic.log.retention.hours", self.topic_log_retention_hours),
        ):
            for topic, count in counts.items():
                try:
                    validate_topic(topic)
                except ValueError as exc:
                    raise ConfigError(f"{key}: {exc}") from None
                if not 1 <= count <= INT32_MAX:
                    raise ConfigError(f"{key}: {topic}:{count} is out of range: must be 1 or more")
        if not self.hostname or ":" in self.hostname or self.hostname != self.hostname.strip():
            raise ConfigError(
                f"hostname={self.hostname!r}: must be a host name or IPv4 address, without ':' "
                "(it is registered as host:port)"
            )
        if not self.log_dir.strip():
            raise ConfigError("log.dir is empty: it must name the directory of the logs")
        if self.enable_zookeeper:
            try:
                split_connect_string(self.zk_connect)
            except ValueError as exc:
                raise ConfigError(f"zk.connect={self.zk_connect}: {exc}") from None
        self._check_zookeeper_acl()
        self._check_sasl()  # the mechanisms first: the listeners' check reads them
        try:
            check_listeners(self)
        except SecurityConfigError as exc:
            raise ConfigError(str(exc)) from None
        self._check_authorizer()

    def _check_zookeeper_acl(self) -> None:
        """zookeeper.auth well formed; zookeeper.set.acl=true only with it."""
        if self.zookeeper_auth.strip():
            try:
                parse_zk_auth(self.zookeeper_auth)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if self.zookeeper_set_acl and not self.zookeeper_auth.strip():
            raise ConfigError(
                "zookeeper.set.acl=true needs zookeeper.auth=digest:<user>:<password>: the "
                "digest that owns the brokers' znodes"
            )

    def zk_digest(self) -> ZkDigest | None:
        """The digest the broker's ZooKeeper session logs in with (None: no zookeeper.auth)."""
        return parse_zk_auth(self.zookeeper_auth) if self.zookeeper_auth.strip() else None

    def _check_sasl(self) -> None:
        """SASL needs the users' credentials (ZooKeeper) and this broker's own login."""
        try:
            parse_mechanisms(self.sasl_enabled_mechanisms)
        except ValueError as exc:
            raise ConfigError(f"sasl.enabled.mechanisms: {exc}") from None
        if not sasl_configured(self):  # neither the broker's mechanisms nor a listener's
            return
        if not self.enable_zookeeper:
            raise ConfigError(
                "sasl.enabled.mechanisms needs enable.zookeeper=true: the users' credentials "
                "are kept in ZooKeeper (logbroker configs)"
            )
        if not self.sasl_jaas_config.strip():
            raise ConfigError(
                "sasl.enabled.mechanisms (or a listener's) is set but sasl.jaas.config is "
                "empty: give this broker "
                'its own login (... username="broker-0" password="...";), which its replica '
                "fetchers use with the leaders"
            )
        try:
            self.inter_broker_sasl()
        except ValueError as exc:
            raise ConfigError(
                f"sasl.jaas.config / sasl.mechanism.inter.broker.protocol: {exc}"
            ) from None

    def inter_broker_sasl(self) -> SaslClientConfig | None:
        """How this broker's replica fetchers log in to a leader (None: SASL is off)."""
        if not sasl_configured(self):
            return None
        return SaslClientConfig.from_properties(
            {
                "sasl.mechanism": self.sasl_mechanism_inter_broker_protocol,
                "sasl.jaas.config": self.sasl_jaas_config,
            }
        )

    def _check_authorizer(self) -> None:
        """An authorizer this broker knows, its ACLs in ZooKeeper, super.users well formed."""
        if self.authorizer_class_name.strip():
            from .security.acls import AUTHORIZER_NAMES, AclError, parse_super_users

            if self.authorizer_class_name.strip() not in AUTHORIZER_NAMES:
                raise ConfigError(
                    f"authorizer.class.name={self.authorizer_class_name}: unknown authorizer "
                    f"(one of {', '.join(AUTHORIZER_NAMES)}, or empty for none)"
                )
            if not self.enable_zookeeper:
                raise ConfigError(
                    "authorizer.class.name is set and enable.zookeeper=false: the ACLs are "
                    "kept in ZooKeeper"
                )
            try:
                parse_super_users(self.super_users)
            except AclError as exc:
                raise ConfigError(f"super.users={self.super_users}: {exc}") from None

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name.strip())

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
                raise ConfigError(f"{key}={raw}: {exc}") from None
        for key in sorted(extra):
            if key.startswith("listener.name."):
                continue  # per-listener overrides: checked at start (security/listeners.py)
            near = difflib.get_close_matches(key, known, n=1)
            log.warning(
                "unknown configuration key %s ignored%s",
                key,
                f" (did you mean {near[0]}?)" if near else "",
            )
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
    def inflated_set_limit(self) -> int:
        """max.inflated.set.size, or its default: 8 x max.message.size."""
        size = self.max_inflated_set_size
        return size if size > 0 else 8 * self.max_message_size

    @property
    def inflated_request_limit(self) -> int:
        """max.inflated.request.size, or its default: 32 x max.message.size."""
        size = self.max_inflated_request_size
        return size if size > 0 else 32 * self.max_message_size

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir)


def _convert(f: dataclasses.Field[Any], raw: str) -> Any:
    raw = raw.strip()
    if f.type in ("int", int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError("not an integer") from None
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
