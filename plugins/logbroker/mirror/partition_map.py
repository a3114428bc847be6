"""Which target partition a source partition is copied into.

The rule, deterministic so that one source partition always goes to one target partition
(and its order is kept there) while the target's partitions stay the same:

1. the same partition when the target has it: `<brokerId>-<partId>` of a 0.7 topic (the
   mirror creates each topic on the target's brokers with the source's partition count), or
   `<p>` of a replicated one (partition p of the target's replicated topic, whichever
   broker leads it: the mirror creates a replicated target topic with as many partitions as
   the source has);
2. otherwise partition number `crc32(source name) mod n` of the target's n partitions of the
   topic (sorted: by broker id, then partition; a replicated topic's are 0..n-1). So a 0.7
   source partition `<b>-<i>` copied into a replicated target, or a replicated `<p>` into a
   0.7 target, lands on one fixed partition, possibly together with other source
   partitions (each keeps its own order there).

A replicated target topic's partitions never change (its assignment is fixed; leaders move,
partition numbers do not), so rule 2 is stable there. A 0.7 target's partitions are those
of its live brokers: when one goes away during mirroring, rule 2 may send a source
partition's later messages elsewhere; order is still kept per source partition because the
mirror sends a partition's next batch only after the previous one was acknowledged.
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
