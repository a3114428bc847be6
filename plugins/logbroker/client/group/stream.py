"""The streams of a group consumer, and the state of the partitions that feed them.

A fetcher puts what one fetch of one partition returned, as one `Chunk`, in the `ChunkQueue`
(bounded) of the stream that owns the partition: the parts of the consumer see only that
queue, the application only the `MessageStream` that reads it. `next(stream)` hands the messages out one at a time and
moves the partition's consumed offset to each message's `next_offset`, under the consumer's
deliver lock, which commits and releases take too; the rest of a chunk whose partition a
rebalance released is dropped. A message that cannot be
delivered (corrupt, or larger than the largest fetch size) travels through the same queue as
the exception that `next()` raises; an end marker ends the stream for good at `close()`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, NamedTuple

from ...coordination import paths
from ...coordination.replication_state import REPLICATED
from ...protocol.message_set import iter_stored_messages
from ..messages08 import keyed_columns
from .context import ConsumerContext


class GroupMessage(NamedTuple):
    """A message handed out by a stream.

    `partition` is the cluster-wide name `"<brokerId>-<partId>"` (`"<p>"` for a replicated
    topic's, whichever broker leads it); `offset` is where to fetch
    to get this message again and `next_offset` where its partition resumes after it (both
    at wrapper boundaries for a message inside a compressed set, 0.7's rule). Of a
    0.8-format topic: its logical offset, offset + 1, and `key` (None for 0.7's messages,
    which have none).
    """

    topic: str
    partition: str
    offset: int
    next_offset: int
    payload: bytes
    key: bytes | None = None


class OwnedPartition:
    """One owned partition during one rebalance generation (0.7's PartitionTopicInfo)."""

    __slots__ = (
        "broker_id",
        "committed_offset",
        "consumed_offset",
        "feed",
        "fetch_offset",
        "fetch_size",
        "format08",
        "name",
        "partition",
        "paused_until",
        "released",
        "stalled",
        "thread_id",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        name: str,
        thread_id: str,
        feed: ChunkQueue,
        offset: int | None,
        fetch_size: int,
    ) -> None:
        self.topic = topic
        self.name = name
        self.broker_id, self.partition = paths.parse_partition_name(name)
        self.thread_id = thread_id
        self.feed = feed  # the queue of the stream that reads this partition
        self.fetch_offset = offset  # None: ask the broker (autooffset.reset)
        self.consumed_offset = offset  # next offset after the last message handed out
        self.committed_offset = offset  # what the offsets node holds (None: no node)
        self.fetch_size = fetch_size
        self.released = False  # set when a rebalance or close took the partition away
        self.stalled = False  # a message that cannot be delivered: no more fetches
        self.paused_until = 0.0  # back off after a fetch error
        self.format08 = False  # a 0.8-format topic's: fetched from its leader's 0.8 listener

    @property
    def replicated(self) -> bool:
        """A replicated topic's partition: fetched from its leader, wherever that is."""
        return self.broker_id == REPLICATED

    def __repr__(self) -> str:
        return f"<{self.topic}/{self.name} {self.thread_id} at {self.fetch_offset}>"


class StoredSet(NamedTuple):
    """Whole messages of one partition as its broker stores them (entries of `int32 size |
    message`, compressed wrappers not opened), CRCs checked: a copier writes `data` into a
    produce request unchanged (the mirror, `MessageStream.next_set`)."""

    topic: str
    partition: str  # "<brokerId>-<partId>", or "<p>" (replicated)
    offset: int  # of the first entry
    next_offset: int  # where the partition resumes after the last
    entries: int  # messages as stored (a compressed wrapper is one)
    data: bytes
    format08: bool = False  # 0.8's entries (`offset | size | message`, keyed), logical offsets


class Chunk:
    """What one fetch of one partition returned: messages, or with the shallow iterator the
    stored set, cut into messages only when an application iterates them."""

    __slots__ = ("_messages", "info", "stored")

    def __init__(
        self,
        info: OwnedPartition,
        messages: list[GroupMessage] | None = None,
        stored: StoredSet | None = None,
    ) -> None:
        self.info = info
        self._messages = messages
        self.stored = stored

    @property
    def messages(self) -> list[GroupMessage]:
        if self._messages is None:
            assert self.stored is not None
            topic, name, base = self.stored.topic, self.stored.partition, self.stored.offset
            if self.stored.format08:  # deep, as the fetcher hands out 0.8's messages
                columns = keyed_columns(self.stored.data, base)
                self._messages = [
                    GroupMessage(topic, name, o, o + 1, payload, key)
                    for o, key, payload in zip(
                        columns.offsets, columns.keys, columns.payloads, strict=True
                    )
                ]
                return self._messages
            self._messages = [
                GroupMessage(topic, name, offset, next_offset, stored)
                for offset, next_offset, stored in iter_stored_messages(self.stored.data, base)
            ]
        return self._messages

    def stored_from(self, position: int) -> StoredSet:
        """The stored set from its `position`-th message on."""
        stored = self.stored
        if stored is None:
            raise TypeError(
                "next_set() hands out stored sets: create the consumer with "
                "shallow_iterator_enable=True (shallow.iterator.enable)"
            )
        if position == 0:
            return stored
        if stored.format08:
            raise TypeError(
                "a 0.8-format partition's chunk was partly handed out by next(): its stored "
                "entries cannot be cut at a message (read it with next_set() alone)"
            )
        start = self.messages[position].offset
        return stored._replace(
            offset=start,
            entries=stored.entries - position,
            data=stored.data[start - stored.offset :],
        )


_CLOSED = object()
_POLL_S = 1.0  # the longest a stream waits on its queue before it looks at its clock again


class ChunkQueue:
    """The bounded queue between the fetchers and one stream: chunks, exceptions that the
    stream's `next()` raises, and the end marker. What the consumer's parts see of a stream."""

    def __init__(self, capacity: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(capacity)

    def put(self, item: Chunk | BaseException, stop: threading.Event) -> bool:
        """Queue a chunk or an error, waiting while the queue is full; False if told to stop first."""
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def clear(self) -> None:
        """Drop what is queued (a rebalance took the partitions away), but not the end."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is _CLOSED:  # never lose the end marker
                self._queue.put_nowait(item)
                return

    def end(self) -> None:
        """Drop what is queued and end the stream for good (the consumer closes)."""
        self.clear()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_CLOSED)

    def get(self, timeout: float) -> Any:
        """The next item (queue.Empty after `timeout` seconds without one)."""
        return self._queue.get(timeout=timeout)


class MessageStream:
    """A blocking iterator of GroupMessage, fed by the fetchers through a bounded queue.

    `next()` waits for a message. With the consumer's `consumer_timeout_ms` >= 0 it raises
    StopIteration after waiting that long without a message (so a `for` loop ends); calling
    `next()` or iterating again waits anew. After the consumer's `close()` it always raises
    StopIteration. A stream is meant to be read by one thread at a time.
    """

    def __init__(
        self, context: ConsumerContext, index: int, topic: str | None, feed: ChunkQueue
    ) -> None:
        self.context = context
        self.index = index
        self.topic = topic  # None for a stream of a topic filter
        self._feed = feed
        self._chunk: Chunk | None = None
        self._position = 0
        self._closed = False

    def __iter__(self) -> MessageStream:
        return self

    def __next__(self) -> GroupMessage:
        context = self.context
        clock = context.clock
        timeout_ms = context.consumer_timeout_ms
        deadline = None if timeout_ms < 0 else clock() + timeout_ms / 1000
        lock = context.deliver_lock
        while True:
            chunk = self._chunk
            if chunk is not None:
                with lock:
                    info = chunk.info
                    if not info.released and self._position < len(chunk.messages):
                        message = chunk.messages[self._position]
                        self._position += 1
                        info.consumed_offset = message.next_offset
                        context.stats.messages_delivered += 1
                        return message
                self._chunk = None
            if self._closed:
                raise StopIteration
            # waits in real time, at most `_POLL_S` at once: the deadline is the context's clock's
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - clock())
            try:
                item = self._feed.get(timeout=max(0.0, wait))
            except queue.Empty:
                if deadline is not None and clock() >= deadline:
                    raise StopIteration from None
                continue
            if item is _CLOSED:
                self._closed = True
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            self._chunk = item
            self._position = 0

    def next_chunk(self, timeout_s: float) -> list[GroupMessage]:
        """The rest of the current chunk: messages of one partition, in order, handed out at
        once (its consumed offset moves to the last one's `next_offset`), for an application
        that works in batches. [] when nothing came within `timeout_s` or the stream ended
        (see `ended`). Errors are raised as from `next()`.
        """
        context = self.context
        deadline = context.clock() + timeout_s
        while (chunk := self._current(deadline)) is not None:
            with context.deliver_lock:
                messages = chunk.messages[self._position :]
                self._chunk = None
                if not chunk.info.released and messages:
                    chunk.info.consumed_offset = messages[-1].next_offset
                    context.stats.messages_delivered += len(messages)
                    return messages
        return []

    def next_set(self, timeout_s: float) -> StoredSet | None:
        """`next_chunk` for a copier: the rest of the current chunk as its broker stores it,
        never cut into messages (needs the shallow iterator). None when nothing came within
        `timeout_s` or the stream ended."""
        context = self.context
        deadline = context.clock() + timeout_s
        while (chunk := self._current(deadline)) is not None:
            with context.deliver_lock:
                stored = chunk.stored_from(self._position)
                self._chunk = None
                if not chunk.info.released and stored.entries:
                    chunk.info.consumed_offset = stored.next_offset
                    context.stats.messages_delivered += stored.entries
                    return stored
        return None

    def _current(self, deadline: float) -> Chunk | None:
        """The chunk being handed out, or the next one, waiting until `deadline` (the
        context's clock); None when nothing came by then or the stream ended."""
        context = self.context
        while True:
            if self._chunk is not None:
                return self._chunk
            if self._closed:
                return None
            wait = min(_POLL_S, deadline - context.clock())
            try:
                item = self._feed.get(timeout=max(0.0, wait))
            except queue.Empty:
                if context.clock() >= deadline:
                    return None
                continue
            if item is _CLOSED:
                self._closed = True
                return None
            if isinstance(item, BaseException):
                raise item
            self._chunk = item
            self._position = 0

    @property
    def ended(self) -> bool:
        """Whether the consumer closed: the stream hands out nothing any more."""
        return self._closed

    def __repr__(self) -> str:
        what = self.topic if self.topic is not None else "filter"
        return f"MessageStream({what}#{self.index})"
