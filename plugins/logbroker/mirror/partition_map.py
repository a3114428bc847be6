"""Which target partition a source partition is copied into.

The rule, deterministic so that one source partition always goes to one target partition
(and its order is kept there) while the target's brokers stay the same:

1. the same partition (`<brokerId>-<partId>`) when the target has it: the usual case, since
   the mirror creates each topic on the target's brokers with the source's partition count;
2. otherwise partition number `crc32("<brokerId>-<partId>") mod n` of the target's n live
   partitions of the topic (sorted by broker id, then partition).

When the target's brokers change (one goes away during mirroring), rule 2 may send a
source partition's later messages elsewhere; order is still kept per source partition
because the mirror sends a partition's next batch only after the previous one was
acknowledged.
"""

from __future__ import annotations

import zlib

from ..client.brokers import BrokerPartition
from ..coordination import paths


def target_partition(source_name: str, targets: list[BrokerPartition]) -> BrokerPartition:
    """The target partition for source partition `source_name` among `targets` (not empty)."""
    broker_id, partition = paths.parse_partition_name(source_name)
    same = BrokerPartition(broker_id, partition)
    if same in targets:
        return same
    return targets[zlib.crc32(source_name.encode()) % len(targets)]
