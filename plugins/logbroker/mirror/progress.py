"""What the mirror may have sent past its committed offsets, so that a restart can say it.

ZooKeeper layout (in the SOURCE cluster, beside the group's 0.7 nodes):

    /consumers/<group>/mirror/sent/<topic>/<brokerId>-<partId>   persistent, decimal offset
    /consumers/<group>/mirror/sent/<topic>/<p>                    (a replicated topic's)

Before a batch is sent to the target, the mirror makes sure (writing asynchronously when
needed) that the mark is at or past the source offset its messages end at; it counts the
batch as acknowledged only after both the target's answer and that write came back. So
`sent >= everything acknowledged`, and after a kill -9 the messages between a partition's
committed offset and its `sent` mark hold all that can have reached the target without
being committed: the "uncommitted tail" that the restarted mirror sends again (its
duplicates). Marks are written with headroom (`SentMarks`), so the tail is an upper bound.
`resume_tail` counts it at start, for the log line. A 0.8-format topic's offsets (and so its
marks) are logical: its tail is counted from the offsets alone, up to the partition's end,
and adds no bytes (they would take reading it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from ..client.cluster import Cluster
from ..coordination import paths
from ..protocol.errors import LogbrokerError
from ..protocol.message_set import iter_messages

log = logging.getLogger(__name__)

PartitionKey = tuple[str, str]  # (topic, "<brokerId>-<partId>" or "<p>")


def sent_path(group: str, topic: str, name: str) -> str:
    return f"{paths.consumer_group_path(group)}/mirror/sent/{topic}/{name}"


class SentMarks:
    """Writes the `sent` marks of one mirror (through the consumer's ZooKeeper session).

    A mark is written `headroom` bytes past the end of the batch that needs it, so that the
    batches after it need no write until one ends past it: one ZooKeeper write per
    `headroom` bytes mirrored, not one per batch (which cost 4 ms of every ~5 ms batch and
    a fifth of a core in ZooKeeper at 50,000 messages/s). A restart then announces at most
    `headroom` bytes per partition more than it sends again.
    """

    def __init__(self, client: KazooClient, group: str, headroom: int = 1 << 20) -> None:
        self.client = client
        self.group = group
        self.headroom = headroom
        self._marked: dict[PartitionKey, int] = {}  # what this mirror wrote

    def mark(self, ends: Mapping[PartitionKey, int]) -> list[Any]:
        """Start writing the marks that `ends` passed; returns what `wait` waits for."""
        pending = []
        for key, offset in ends.items():
            known = self._marked.get(key)
            if known is not None and offset <= known:
                continue
            topic, name = key
            path = sent_path(self.group, topic, name)
            value = offset + self.headroom
            self._marked[key] = value
            if known is None:
                try:
                    self.client.create(path, str(value).encode(), makepath=True)
                    continue
                except NodeExistsError:  # a mark of an earlier run: overwritten
                    pass
            pending.append(self.client.set_async(path, str(value).encode()))
        return pending

    @staticmethod
    def wait(pending: Iterable[Any], timeout_s: float = 30.0) -> None:
        for result in pending:
            result.get(timeout=timeout_s)


class ResumeTail(NamedTuple):
    """What a restart sends again: messages (counted through compression) and bytes."""

    partitions: int
    messages: int
    bytes: int


def resume_tail(source: Cluster, group: str) -> ResumeTail:
    """Count the messages between each partition's committed offset and its `sent` mark."""
    zk = source.zk
    root = f"{paths.consumer_group_path(group)}/mirror/sent"
    partitions = messages = size = 0
    for topic in _children(zk, root):
        ends08 = _ends08(source, topic)
        for name in _children(zk, f"{root}/{topic}"):
            sent = _read_int(zk, f"{root}/{topic}/{name}")
            broker_id, partition = paths.parse_partition_name(name)
            committed = _read_int(
                zk, paths.consumer_offset_path(group, topic, broker_id, partition)
            )
            if sent is None or sent <= (committed or 0):
                continue
            start = committed or 0
            if ends08 is not None:  # logical offsets: a message each
                count = max(0, min(sent, ends08.get(name, sent)) - start)
                partitions += count > 0
                messages += count
                continue
            try:
                count, end = _count_messages(source, topic, broker_id, partition, start, sent)
            except LogbrokerError as exc:
                log.warning("cannot count the tail of %s/%s: %s", topic, name, exc)
                count, end = 0, sent  # not counted, but its bytes are said
            if end > start:
                partitions += 1
                messages += count
                size += end - start
    return ResumeTail(partitions, messages, size)


def _ends08(source: Cluster, topic: str) -> dict[str, int] | None:
    """A 0.8-format topic's partitions' ends, None for a 0.7-format topic's."""
    try:
        if not source.leaders.is_format08(topic):
            return None
        return {row.name: row.latest for row in source.describe(topic)}
    except LogbrokerError as exc:
        log.warning("cannot read where %s ends: %s", topic, exc)
        return {}


def _count_messages(
    source: Cluster, topic: str, broker_id: int, partition: int, start: int, mark: int
) -> tuple[int, int]:
    """(messages, the offset after the last) of those stored from `start` up to `mark`: a
    mark written ahead may lie past the partition's end."""
    consumer = source.partition_consumer(topic, broker_id, partition)  # a leader, if replicated
    count = 0
    offset = start
    while offset < mark:
        fetched = consumer.fetch(topic, partition, offset, max(mark - offset, 1024))
        last = offset
        for m in iter_messages(fetched.data, offset):
            if m.offset >= mark:
                return count, last
            count += 1
            last = m.next_offset
        if last == offset:
            break  # nothing more there (the end, retention took it, or a partial entry)
        offset = last
    return count, offset


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def _read_int(zk: KazooClient, path: str) -> int | None:
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    text = data.decode("utf-8", "replace").strip()
    return int(text) if text.lstrip("-").isdigit() else None
