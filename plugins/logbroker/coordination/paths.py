"""Kafka 0.7's ZooKeeper layout: the znode paths, and the codecs of the values stored in them.

Every path below is relative to the cluster's chroot, if its connect string has one
(`127.0.0.1:2181/live` puts `/brokers/ids/0` at `/live/brokers/ids/0` on the server). All
values are UTF-8 strings, as 0.7's `ZKStringSerializer` wrote them. Parents are persistent
nodes, created as needed. (docs/design.md §3.3; 0.7.2's `ZkUtils`, `KafkaZooKeeper`,
`ZookeeperConsumerConnector`.)

| path                                                       | kind       | value (writer)                                        |
|------------------------------------------------------------|------------|-------------------------------------------------------|
| `/brokers/ids/<brokerId>`                                  | ephemeral  | `creatorId:host:port`, creatorId = `<host>-<currentTimeMillis>`, e.g. `10.0.0.5-1323456789012:10.0.0.5:9092` (broker, at start and after a session loss) |
| `/brokers/topics/<topic>/<brokerId>`                       | ephemeral  | the topic's partition count on that broker, decimal, e.g. `4` (broker, for every log at start and for each new topic) |
| `/consumers/<group>/ids/<consumerId>`                      | ephemeral  | the subscription: Java `{ "topicA": 2,"topicB": 1 }` (topic -> streams), or `*<n>*<regex>` / `!<n>!<regex>` (white/blacklist) (consumer) |
| `/consumers/<group>/offsets/<topic>/<brokerId>-<partId>`   | persistent | next byte offset to consume, decimal, e.g. `366659` (consumer commit); `.../<topic>/<p>` for a replicated topic |
| `/consumers/<group>/owners/<topic>/<brokerId>-<partId>`    | ephemeral  | the owning consumer thread id `<consumerId>-<i>` (consumer, in a rebalance); `.../<topic>/<p>` for a replicated topic |

Readers (Java's `Broker.createBroker`, samsa, brod) split a broker value on `:` and take
fields 1 and 2 as host and port, so a host must not contain `:` (no IPv6 literals). A partition
of the cluster is named `<brokerId>-<partId>`; the rebalance sorts those names as strings.

A partition of a replicated topic (docs/replication.md) lives on several brokers and keeps its
number wherever its leader is: it is named `<p>` alone, as Kafka 0.8's ZooKeeper consumer
named it in the same owners and offsets paths, and carries the broker id REPLICATED (-1,
coordination/replication_state.py) wherever a `(brokerId, partId)` pair is expected. A replicated topic has
partitions of that kind only, a 0.7 topic none, so the two kinds never meet in one topic's
directory.

A topic in a path must be a legal topic name (protocol/topics.py: ASCII letters, digits, `.`,
`_`, `-`); the path functions raise InvalidTopicError, a ValueError, otherwise. Other names
that become one path element (group, consumer id) must be non-empty, must not be `.` or `..`,
and must not contain `/` or a character ZooKeeper refuses (`PathUtils.validatePath`: NUL,
U+0001-U+001F, U+007F-U+009F, U+D800-U+F8FF, U+FFF0-U+FFFF, and so any code point above
U+FFFF, which Java holds as surrogates); the path functions raise ValueError otherwise, before
ZooKeeper answers an empty BadArgumentsError.
"""

from __future__ import annotations

import re

from ..protocol.topics import validate_topic
from .replication_state import REPLICATED

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"


_ZK_REFUSED = re.compile("[/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff\U00010000-\U0010ffff]")


def _element(kind: str, name: str) -> str:
    """Check that `name` can be one element of a znode path; return it."""
    if not isinstance(name, str) or name in ("", ".", ".."):
        raise ValueError(f"a {kind} must be a non-empty name, not '.' or '..'; got {name!r}")
    bad = _ZK_REFUSED.search(name)
    if bad:
        raise ValueError(
            f"a {kind} cannot hold {bad.group()!r} (at position {bad.start()} of {name!r}): "
            "ZooKeeper refuses '/', control characters, and code points in U+D800-U+F8FF, "
            "U+FFF0-U+FFFF and above U+FFFF"
        )
    return name


def _broker_id(broker_id: int) -> int:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"a broker id is an integer >= 0, got {broker_id!r}")
    return broker_id


# -- brokers ---------------------------------------------------------------------------------


def broker_id_path(broker_id: int) -> str:
    """`/brokers/ids/<brokerId>`: the broker's ephemeral registration."""
    return f"{BROKER_IDS}/{_broker_id(broker_id)}"


def broker_topic_path(topic: str) -> str:
    """`/brokers/topics/<topic>`: persistent parent of the brokers that have the topic."""
    return f"{BROKER_TOPICS}/{validate_topic(topic)}"


def broker_topic_broker_path(topic: str, broker_id: int) -> str:
    """`/brokers/topics/<topic>/<brokerId>`: ephemeral, value = partition count on that broker."""
    return f"{broker_topic_path(topic)}/{_broker_id(broker_id)}"


# -- consumers -------------------------------------------------------------------------------


def consumer_group_path(group: str) -> str:
    """`/consumers/<group>`."""
    return f"{CONSUMERS}/{_element('consumer group', group)}"


def consumer_ids_path(group: str) -> str:
    """`/consumers/<group>/ids`: persistent parent of the group's live consumers."""
    return f"{consumer_group_path(group)}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    """`/consumers/<group>/ids/<consumerId>`: ephemeral, value = the subscription."""
    return f"{consumer_ids_path(group)}/{_element('consumer id', consumer_id)}"


def consumer_offsets_path(group: str, topic: str) -> str:
    """`/consumers/<group>/offsets/<topic>`: persistent parent of the committed offsets."""
    return f"{consumer_group_path(group)}/offsets/{validate_topic(topic)}"


def consumer_offset_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    """`/consumers/<group>/offsets/<topic>/<brokerId>-<partId>`: persistent, decimal offset."""
    return f"{consumer_offsets_path(group, topic)}/{partition_name(broker_id, partition)}"


def consumer_owners_path(group: str, topic: str) -> str:
    """`/consumers/<group>/owners/<topic>`: persistent parent of the ownership claims."""
    return f"{consumer_group_path(group)}/owners/{validate_topic(topic)}"


def consumer_owner_path(group: str, topic: str, broker_id: int, partition: int) -> str:
    """`/consumers/<group>/owners/<topic>/<brokerId>-<partId>`: ephemeral, the owner's thread id."""
    return f"{consumer_owners_path(group, topic)}/{partition_name(broker_id, partition)}"


def partition_name(broker_id: int, partition: int) -> str:
    """`"<brokerId>-<partId>"`, the name of one partition of the cluster; `"<p>"` for
    partition p of a replicated topic (broker id REPLICATED)."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"a partition is an integer >= 0, got {partition!r}")
    if broker_id == REPLICATED and not isinstance(broker_id, bool):
        return str(partition)
    return f"{_broker_id(broker_id)}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """`"3-10"` -> `(3, 10)`: the broker id and the partition of a partition name;
    `"7"` -> `(REPLICATED, 7)`: partition 7 of a replicated topic."""
    if _decimal(name):
        return REPLICATED, int(name)
    broker, sep, partition = name.partition("-")
    if not (sep and _decimal(broker) and _decimal(partition)):
        raise ValueError(
            f"a partition name is '<brokerId>-<partId>' (or '<p>' for a replicated topic), "
            f"got {name!r}"
        )
    return int(broker), int(partition)


# -- values ----------------------------------------------------------------------------------


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def make_creator_id(host: str, timestamp_ms: int) -> str:
    """0.7's creatorId, `"<host>-<currentTimeMillis>"`: which start of which broker wrote it."""
    return f"{host}-{timestamp_ms}"


def broker_value(creator_id: str, host: str, port: int) -> str:
    """The value of `/brokers/ids/<id>`: `"creatorId:host:port"`.

    Raises ValueError for a host or creatorId containing `:` (readers split on it) and for a
    port outside 1..65535.
    """
    if not host or ":" in host:
        raise ValueError(
            f"a broker host must be non-empty and contain no ':' (readers split the broker value on ':'); got {host!r}"
        )
    if ":" in creator_id:
        raise ValueError(f"a creatorId must not contain ':', got {creator_id!r}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"a broker port is an integer in 1..65535, got {port!r}")
    return f"{creator_id}:{host}:{port}"


def parse_broker_value(value: str | bytes) -> tuple[str, int]:
    """`"creatorId:host:port"` -> `(host, port)`: fields 1 and 2 after splitting on `:`.

    Like Java's `Broker.createBroker`, fields after the third are ignored. Raises ValueError
    for a value with fewer than three fields or a port that is not a decimal number.
    """
    text = _text(value)
    fields = text.split(":")
    if len(fields) < 3 or not fields[1] or not _decimal(fields[2]):
        raise ValueError(f"a broker value is 'creatorId:host:port', got {text!r}")
    return fields[1], int(fields[2])


def topic_value(partitions: int) -> str:
    """The value of `/brokers/topics/<topic>/<id>`: the partition count, in decimal."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"a partition count is an integer >= 1, got {partitions!r}")
    return str(partitions)


def parse_topic_value(value: str | bytes) -> int:
    """The partition count stored in `/brokers/topics/<topic>/<id>`."""
    text = _text(value)
    if not _decimal(text) or int(text) < 1:
        raise ValueError(f"a topic value is a decimal partition count >= 1, got {text!r}")
    return int(text)


# -- connect strings -------------------------------------------------------------------------


def split_connect_string(connect: str) -> tuple[str, str | None]:
    """`"h:p,h2:p/chroot"` -> `("h:p,h2:p", "/chroot")`; without a chroot -> `(hosts, None)`.

    Like ZooKeeper's Java client, a chroot of `/` means none, and a chroot must be a valid path:
    no trailing `/`, no empty, `.` or `..` elements. Raises ValueError otherwise, or when
    there are no hosts.
    """
    hosts, slash, rest = connect.strip().partition("/")
    if not hosts or any(not host.strip() for host in hosts.split(",")):
        raise ValueError(
            f"a ZooKeeper connect string is 'host:port[,host:port...][/chroot]', got {connect!r}"
        )
    if not slash or not rest:
        return hosts, None
    chroot = "/" + rest
    if chroot.endswith("/") or any(
        element in ("", ".", "..") or "\x00" in element for element in rest.split("/")
    ):
        raise ValueError(f"invalid chroot {chroot!r} in ZooKeeper connect string {connect!r}")
    return hosts, chroot
