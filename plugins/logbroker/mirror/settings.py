"""The mirror's settings: 0.7 MirrorMaker's two .properties files plus the mirror's own keys.

consumer.config (the SOURCE cluster; GroupConsumer's keys):
    zk.connect              the source's ZooKeeper, with its chroot (127.0.0.1:2181/live)
    groupid                 the mirror's consumer group (its committed offsets are its progress)
    autocommit.interval.ms  how often acknowledged offsets are committed (mirror default 1000)
    autooffset.reset        where a partition without a committed offset starts (smallest)
    fetch.size, socket.timeout.ms, ...   as for any group consumer
    (autocommit.enable and shallow.iterator.enable are the mirror's to set: false and true)

producer.config (the TARGET cluster):
    zk.connect | broker.list   where the target's brokers are (one of them)
    acks                    ack (default) or fsync: the target's answer to every request; to a
                            replicated target topic every write is sent with acks=-1 (the
                            leader answers once its whole ISR has it), fsync added if asked
    request.timeout.ms      with acks=-1: how long the leader waits for its ISR (10000)
    socket.timeout.ms       how long one request may take (30000)
    retry.backoff.ms        the first wait after a failed send (100), doubled per failure ...
    retry.backoff.max.ms    ... up to this (5000)
    delivery.timeout.ms     how long a batch may go on failing before the mirror gives up and
                            exits non-zero naming the broker and topic (300000)
    max.request.size        bytes of source messages sent in one request at most (1048576)
    zookeeper.auth          digest:<user>:<password>, the target brokers' ZooKeeper digest when
                            they set zookeeper.set.acl: the mirror creates missing replicated
                            topics there through ZooKeeper (docs/security.md)

Both files also take a client's credentials for their own cluster, in Kafka's names
(security/client.py): security.protocol, ssl.cafile, ssl.certfile, ssl.keyfile,
ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.username + sasl.password or
sasl.jaas.config. The consumer's log in to the source's brokers, the producer's to the
target's; a bad one is refused at start naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config import read_properties
from ..coordination.zk_acl import parse_zk_auth
from ..security.client import ClientCredentials

MIRROR_CONSUMER_DEFAULTS = {"autocommit.interval.ms": "1000"}


class MirrorConfigError(ValueError):
    """A config file that cannot be read or a key with a bad value; says which file and key."""


@dataclass(frozen=True)
class TargetSettings:
    """How the mirror writes to the target cluster (from producer.config)."""

    zk_connect: str | None
    broker_list: str | None
    fsync: bool = False
    request_timeout_ms: int = 10000
    socket_timeout_ms: int = 30000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 5000
    delivery_timeout_ms: int = 300000
    max_request_size: int = 1 << 20
    zk_auth: str | None = field(default=None, repr=False)  # it holds a password
    credentials: ClientCredentials = field(default_factory=ClientCredentials)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], source: str = "producer.config"
    ) -> TargetSettings:
        zk_connect = props.get("zk.connect") or None
        broker_list = props.get("broker.list") or None
        if not zk_connect and not broker_list:
            raise MirrorConfigError(
                f"{source}: needs zk.connect or broker.list (the target cluster)"
            )
        acks = props.get("acks", "ack").strip()
        if acks not in ("ack", "fsync"):
            raise MirrorConfigError(
                f"{source}: acks={acks!r}: the mirror needs the target's answer (ack or fsync)"
            )
        zk_auth = props.get("zookeeper.auth", "").strip() or None
        if zk_auth is not None:
            try:
                parse_zk_auth(zk_auth)
            except ValueError as exc:
                raise MirrorConfigError(f"{source}: {exc}") from None
        return cls(
            zk_auth=zk_auth,
            zk_connect=zk_connect,
            broker_list=broker_list,
            fsync=acks == "fsync",
            request_timeout_ms=_int(props, "request.timeout.ms", 10000, source),
            socket_timeout_ms=_int(props, "socket.timeout.ms", 30000, source),
            retry_backoff_ms=_int(props, "retry.backoff.ms", 100, source),
            retry_backoff_max_ms=_int(props, "retry.backoff.max.ms", 5000, source),
            delivery_timeout_ms=_int(props, "delivery.timeout.ms", 300000, source),
            max_request_size=_int(props, "max.request.size", 1 << 20, source, minimum=1),
            credentials=credentials_of(props, source),
        )


def consumer_properties(
    props: Mapping[str, str], source: str = "consumer.config"
) -> dict[str, str]:
    """The source consumer's properties with the mirror's defaults; checks the required keys."""
    for key in ("zk.connect", "groupid"):
        if not props.get(key):
            raise MirrorConfigError(f"{source}: needs {key} (the source cluster's consumer group)")
    merged = dict(MIRROR_CONSUMER_DEFAULTS)
    merged.update(props)
    _int(merged, "autocommit.interval.ms", 1000, source, minimum=1)
    credentials_of(merged, source)  # refused now, naming the file, not in a stream's thread
    return merged


def credentials_of(props: Mapping[str, str], source: str) -> ClientCredentials:
    """The file's TLS and SASL settings, or MirrorConfigError naming the file and the key."""
    try:
        return ClientCredentials.from_properties(props)
    except ValueError as exc:
        raise MirrorConfigError(f"{source}: {exc}") from None


def load_properties(path: str | Path, flag: str) -> dict[str, str]:
    """A .properties file, or MirrorConfigError naming the flag and the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return read_properties(handle)
    except OSError as exc:
        raise MirrorConfigError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from exc


def _int(props: Mapping[str, str], key: str, default: int, source: str, minimum: int = 0) -> int:
    raw = props.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise MirrorConfigError(f"{source}: {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise MirrorConfigError(f"{source}: {key}={value} must be >= {minimum}")
    return value
