"""Which brokers hold the replicas of a new topic's partitions: round robin, leaders spread.

Kafka's rule (0.8's `AdminUtils.assignReplicasToBrokers`), on the live brokers sorted by id:
partition p's first replica, its preferred leader, is broker `(start + p) % n`; its others
follow the first at a shift that starts at `start_shift` and grows by one every n partitions,
so that a broker's followers are not always the same few. With a random start, topics created
one after another do not all put their first leader on the lowest id. Pure: the random start
and shift are parameters.

    assign(brokers=[0, 1, 2], partitions=6, replication_factor=3, start=0, shift=0)
    -> [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [1, 0, 2], [2, 1, 0]]
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class AssignmentError(ValueError):
    """A topic that cannot be assigned: the message says what is missing."""


def assign(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    start: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Replicas (broker ids, preferred leader first) for partitions 0 to `partitions` - 1."""
    ids = sorted(set(brokers))
    n = len(ids)
    if partitions < 1:
        raise AssignmentError(f"a topic has at least 1 partition, not {partitions}")
    if replication_factor < 1:
        raise AssignmentError(f"the replication factor is at least 1, not {replication_factor}")
    if replication_factor > n:
        raise AssignmentError(
            f"replication factor {replication_factor} is larger than the {n} live brokers "
            f"({', '.join(map(str, ids)) or 'none'}): each replica needs a broker of its own"
        )
    rng = rng or random.Random()
    start = rng.randrange(n) if start is None else start % n
    shift = rng.randrange(n) if shift is None else shift % n
    out = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            # the followers: a shift of 1 to n - 1 from the first, never the first itself
            step = 1 + (shift + j) % (n - 1)
            replicas.append(ids[(first + step) % n])
        out.append(replicas)
    return out
