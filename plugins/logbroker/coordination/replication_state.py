"""Replicated topics in ZooKeeper: the paths, and the codecs of the values stored in them.

Under the cluster's chroot, beside 0.7's `/brokers` and `/consumers` (coordination/paths.py),
which no 0.7 reader looks past (docs/replication.md, "ZooKeeper layout"):

| path                                             | kind       | value (writer)                              |
|--------------------------------------------------|------------|---------------------------------------------|
| `/replication/controller`                        | ephemeral  | `{"broker": 1, "epoch": 7}` (the controller)  |
| `/replication/controller_epoch`                  | persistent | `7`, decimal (the controller, when elected)   |
| `/replication/config`                            | persistent | the controller's defaults, for the tools: `{"default.replication.factor": 3, "min.insync.replicas": 2}` (the controller, when elected) |
| `/replication/topics/<topic>`                    | persistent | the assignment, written once at creation:     |
|                                                  |            | `{"version": 1, "replication_factor": 3, "partitions": {"0": [1, 2, 3], ...}}` |
| `/replication/topics/<topic>/partitions/<p>`     | persistent | the partition's state: `{"leader": 1, "leader_epoch": 4, "isr": [1, 2, 3], "controller_epoch": 7}`; `"leader": -1` when no replica may lead (controller; the leader for ISR changes) |
| `/replication/admin/preferred_replica_election`  | persistent | `{"partitions": [["T", 0], ...]}` (the CLI; the controller deletes it when done) |
| `/replication/admin/shutdown/<brokerId>`         | ephemeral  | empty: the broker asks to lose its leaderships |
| `/replication/endpoints/<brokerId>`              | ephemeral  | the broker's listeners other than the 0.7 port, in Kafka's listener syntax: `{"version": 1, "endpoints": ["KAFKA08://127.0.0.1:9192"]}` (the broker, beside `/brokers/ids/<id>`, in the same session) |

Every value is compact JSON in UTF-8. A state is written with a conditional set (the znode's
version): a deposed controller's or a stale leader's write fails (BadVersionError) instead of
overwriting a newer state. The first replica of a partition's list is its preferred leader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..protocol.topics import validate_topic

ROOT = "/replication"
CONTROLLER = f"{ROOT}/controller"
CONTROLLER_EPOCH = f"{ROOT}/controller_epoch"
CONFIG = f"{ROOT}/config"
TOPICS = f"{ROOT}/topics"
ADMIN = f"{ROOT}/admin"
PREFERRED_REPLICA_ELECTION = f"{ADMIN}/preferred_replica_election"
SHUTDOWN = f"{ADMIN}/shutdown"
ENDPOINTS = f"{ROOT}/endpoints"
KAFKA08 = "KAFKA08"  # the listener name of the Kafka 0.8 protocol's port (port.08)

MESSAGE_FORMATS = ("0.7", "0.8")  # a topic's, chosen at creation (docs/protocol.md)
NO_LEADER = -1  # a partition whose replicas are all out of the ISR, or dead
REPLICATED = -1  # the broker id a replicated partition is named with (it lives on several)


class StateFormatError(ValueError):
    """A znode under /replication holds a value that is not what its writer writes."""


def topic_path(topic: str) -> str:
    """`/replication/topics/<topic>`: the topic's assignment."""
    return f"{TOPICS}/{validate_topic(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    """`/replication/topics/<topic>/partitions/<p>`: the partition's state."""
    return f"{partitions_path(topic)}/{_partition(partition)}"


def shutdown_path(broker_id: int) -> str:
    return f"{SHUTDOWN}/{_broker(broker_id)}"


def _partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"a partition is an integer >= 0, got {partition!r}")
    return partition


def _broker(broker_id: int) -> int:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"a broker id is an integer >= 0, got {broker_id!r}")
    return broker_id


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateFormatError(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise StateFormatError(f"{what} is not a JSON object: {value!r}")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise StateFormatError(f"{what} is not a list of broker ids: {value!r}")
    return tuple(value)


def _int(doc: dict[str, Any], key: str, what: str, low: int = 0) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise StateFormatError(f"{what}: {key!r} is not an integer >= {low}: {value!r}")
    return value


@dataclass(frozen=True)
class Assignment:
    """A replicated topic's replicas, per partition, fixed at creation."""

    topic: str
    replication_factor: int
    replicas: tuple[tuple[int, ...], ...]  # replicas[p]: broker ids, preferred leader first
    message_format: str = "0.7"  # "0.8": logical offsets and 0.8's message (keys)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "version": 1,
            "replication_factor": self.replication_factor,
            "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)},
        }
        if self.message_format != "0.7":  # an older topic's value stays as it was
            doc["message_format"] = self.message_format
        return _dump(doc)

    @classmethod
    def decode(cls, topic: str, data: bytes | str) -> Assignment:
        what = f"the assignment of {topic!r} ({topic_path(topic)})"
        doc = _load(data, what)
        factor = _int(doc, "replication_factor", what, low=1)
        partitions = doc.get("partitions")
        if not isinstance(partitions, dict) or not partitions:
            raise StateFormatError(f"{what}: 'partitions' is not a non-empty object")
        if sorted(partitions, key=lambda k: int(k) if k.isdigit() else -1) != [
            str(p) for p in range(len(partitions))
        ]:
            raise StateFormatError(f"{what}: partitions are not 0 to {len(partitions) - 1}")
        replicas = tuple(
            _ints(partitions[str(p)], f"{what}: partition {p}") for p in range(len(partitions))
        )
        for p, brokers in enumerate(replicas):
            if len(brokers) != factor or len(set(brokers)) != factor:
                raise StateFormatError(
                    f"{what}: partition {p} has replicas {list(brokers)}, not "
                    f"{factor} distinct brokers"
                )
        message_format = doc.get("message_format", "0.7")
        if message_format not in MESSAGE_FORMATS:
            raise StateFormatError(
                f"{what}: message_format {message_format!r} is not one of {MESSAGE_FORMATS}"
            )
        return cls(topic, factor, replicas, message_format)


@dataclass(frozen=True)
class PartitionState:
    """Who leads a replicated partition, in which epoch, and who is in sync.

    `version` is the znode's version when read (not part of the value): the next
    conditional write of this state must name it.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = -1

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        return _dump(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "controller_epoch": self.controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes | str, version: int = -1, where: str = "a state") -> PartitionState:
        doc = _load(data, where)
        leader = doc.get("leader")
        if not isinstance(leader, int) or isinstance(leader, bool) or leader < NO_LEADER:
            raise StateFormatError(f"{where}: 'leader' is not a broker id or -1: {leader!r}")
        return cls(
            leader=leader,
            leader_epoch=_int(doc, "leader_epoch", where),
            isr=_ints(doc.get("isr"), f"{where}: 'isr'"),
            controller_epoch=_int(doc, "controller_epoch", where),
            version=version,
        )


@dataclass(frozen=True)
class ControllerInfo:
    broker: int
    epoch: int

    def encode(self) -> bytes:
        return _dump({"broker": self.broker, "epoch": self.epoch})

    @classmethod
    def decode(cls, data: bytes | str) -> ControllerInfo:
        doc = _load(data, CONTROLLER)
        return cls(_int(doc, "broker", CONTROLLER), _int(doc, "epoch", CONTROLLER))


@dataclass(frozen=True)
class ClusterDefaults:
    default_replication_factor: int
    min_insync_replicas: int

    def encode(self) -> bytes:
        return _dump(
            {
                "default.replication.factor": self.default_replication_factor,
                "min.insync.replicas": self.min_insync_replicas,
            }
        )

    @classmethod
    def decode(cls, data: bytes | str) -> ClusterDefaults:
        doc = _load(data, CONFIG)
        return cls(
            _int(doc, "default.replication.factor", CONFIG, low=1),
            _int(doc, "min.insync.replicas", CONFIG, low=1),
        )


def encode_election(partitions: list[tuple[str, int]]) -> bytes:
    return _dump({"partitions": [[validate_topic(t), _partition(p)] for t, p in partitions]})


def decode_election(data: bytes | str) -> list[tuple[str, int]]:
    doc = _load(data, PREFERRED_REPLICA_ELECTION)
    items = doc.get("partitions")
    if not isinstance(items, list):
        raise StateFormatError(f"{PREFERRED_REPLICA_ELECTION}: 'partitions' is not a list")
    out = []
    for item in items:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], int)
        ):
            raise StateFormatError(f"{PREFERRED_REPLICA_ELECTION}: {item!r} is not [topic, p]")
        out.append((validate_topic(item[0]), _partition(item[1])))
    return out


def endpoints_path(broker_id: int) -> str:
    if broker_id < 0:
        raise ValueError(f"a broker id is 0 or more, not {broker_id}")
    return f"{ENDPOINTS}/{broker_id}"


def encode_endpoints(endpoints: dict[str, tuple[str, int]]) -> bytes:
    """`{"KAFKA08": ("127.0.0.1", 9192)}` -> the znode's value (see the table above)."""
    return _dump(
        {
            "version": 1,
            "endpoints": [
                f"{name}://{host}:{port}" for name, (host, port) in sorted(endpoints.items())
            ],
        }
    )


def decode_endpoints(data: bytes | str, broker_id: int) -> dict[str, tuple[str, int]]:
    what = f"the endpoints of broker {broker_id} ({endpoints_path(broker_id)})"
    doc = _load(data, what)
    found = doc.get("endpoints")
    if not isinstance(found, list):
        raise StateFormatError(f"{what}: 'endpoints' is not a list")
    out: dict[str, tuple[str, int]] = {}
    for item in found:
        name, sep, rest = str(item).partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not host or not port.isdigit():
            raise StateFormatError(f"{what}: {item!r} is not NAME://host:port")
        out[name] = (host, int(port))
    return out
