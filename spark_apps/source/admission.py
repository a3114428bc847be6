"""How much of a stream's backlog one micro-batch takes: the `maxOffsetsPerTrigger` cap.

Spark asks the stream reader where the next micro-batch ends with a read limit
(`DataSourceStreamReader.latestOffset(start, limit)`, PySpark >= 4.2): the reader's default
limit is `ReadMaxRows(maxOffsetsPerTrigger)` when the option is set, and Spark passes
`ReadAllAvailable` where a trigger must read everything (Trigger.Once). This module turns a
cap and the partitions' backlogs into each partition's end offset.

What the cap counts: offsets, as the Kafka source's does. Here an offset is a byte position
and each offset is one top-level entry of the log (`int32 size | message`, 4 + size bytes):
a plain message, or a compressed wrapper whose messages all share its offset. A range must
end at an entry boundary, so a wrapper is never split: a micro-batch of compressed sets
holds more rows than the cap (as many as its wrappers hold).

How it is split (the Kafka source's rule, in our units):

    backlog(p) = latest(p) - start(p)                      bytes, known from METADATA
    share(p)   = floor(cap * backlog(p) / sum of backlogs), at least 1 if backlog(p) > 0
    end(p)     = where the first share(p) entries from start(p) end, or latest(p)

The Kafka source splits in proportion to the backlogs in offsets, i.e. messages; ours in
messages is unknown without reading it all (the case the cap exists for: a stream far
behind), so the split follows the backlogs in bytes, which is the same while the partitions'
messages are alike in size. Each share is counted in entries, by walking entry sizes from
the partition's start (ranges.entries_end: the bytes this micro-batch will read, once more,
sizes only); the walk is skipped when the backlog is too short to hold more than its share
(every entry takes at least MIN_ENTRY bytes). A partition with a backlog always advances by
at least one entry, so a cap below the number of such partitions admits one entry from each
of them, more than the cap; otherwise a micro-batch holds at most `cap` entries.

A 0.8-format topic's offsets are logical (message numbers): its backlog and its share are
messages, and its end is its start plus its share, without a walk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.protocol.message import ENTRY_OVERHEAD, MIN_MESSAGE_SIZE
from logbroker.security.client import ClientCredentials
from spark_apps.source.consumers import open_reads
from spark_apps.source.discovery import PartitionState
from spark_apps.source.ranges import DEFAULT_FETCH_SIZE, PartitionRange, entries_end

log = logging.getLogger(__name__)

MIN_ENTRY = ENTRY_OVERHEAD + MIN_MESSAGE_SIZE  # the shortest entry a log can hold

K = TypeVar("K", bound=Hashable)


def shares(backlogs: Mapping[K, int], cap: int) -> dict[K, int]:
    """Entries each key with a backlog may take: `cap` split in proportion to the backlogs,
    rounded down, and at least 1 (keys without a backlog are left out)."""
    total = sum(b for b in backlogs.values() if b > 0)
    return {k: max(1, cap * b // total) for k, b in backlogs.items() if b > 0}


def capped_ends(
    states: Sequence[PartitionState],
    start_of: Callable[[PartitionState], int],
    cap: int,
    *,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    fail_on_data_loss: bool = True,
    warn: Callable[[str], None] = log.warning,
    zookeeper: str | None = None,
    credentials: ClientCredentials | None = None,
) -> dict[PartitionState, int]:
    """Each partition's end for a micro-batch of at most `cap` entries from `start_of`.

    A start that retention passed counts from the earliest offset still there (the reader's
    partitions() then names the loss, or warns, as failOnDataLoss says); a partition without
    a backlog ends at its latest offset, as without a cap. A replicated partition is walked
    on its leader, found through `zookeeper`.
    """
    froms = {s: max(start_of(s), s.earliest) for s in states}
    share = shares({s: s.latest - froms[s] for s in states}, cap)
    ends = {}
    for s in states:
        n = share.get(s)
        if n is not None and s.logical:  # a 0.8-format topic's offsets count messages
            ends[s] = min(s.latest, froms[s] + n)
            continue
        if n is None or (s.latest - froms[s]) // MIN_ENTRY <= n:
            ends[s] = s.latest  # nothing to read, or too short to hold more than its share
            continue
        r = PartitionRange(s.topic, s.broker_id, s.partition, froms[s], s.latest)
        reads = open_reads(
            zookeeper,
            s.topic,
            s.broker_id,
            s.partition,
            s.host,
            s.port,
            fetch_size=fetch_size,
            credentials=credentials,
        )
        with reads as consumer:
            assert not isinstance(consumer, PartitionReader08)  # logical: not walked (above)
            ends[s] = entries_end(
                consumer,
                r,
                n,
                fetch_size=fetch_size,
                fail_on_data_loss=fail_on_data_loss,
                warn=warn,
            )
    return ends
