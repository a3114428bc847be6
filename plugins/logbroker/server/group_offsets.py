"""A consumer group's offsets for the Kafka 0.8 listener's OffsetCommit and OffsetFetch.

They are kept in ZooKeeper, where Kafka 0.8's consumers kept theirs (0.8.2's
`offsets.storage=zookeeper`), under the cluster's chroot, with 0.8's names for replicated
partitions (coordination/paths.py):

    /consumers/<group>/offsets/<topic>/<partition>     the next offset to read, decimal

So an offset committed through any broker is read back through any other, and survives a
broker's restart and a change of leader. OffsetCommit's metadata string is not kept (0.8.1's
ZooKeeper storage dropped it too): OffsetFetch answers it as "". Every call blocks on
ZooKeeper: the listener runs them off its event loop.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ..coordination import paths
from ..coordination.replication_state import REPLICATED
from ..coordination.zk_acl import open_acl
from ..protocol.kafka08.errors import ConsumerCoordinatorNotAvailableError

NO_OFFSET = -1  # what OffsetFetch answers for a partition the group committed nothing for


class GroupOffsets:
    def __init__(self, client: KazooClient | None = None) -> None:
        self.client = client  # the broker's, once it is registered

    def _zookeeper(self) -> KazooClient:
        if self.client is None:
            raise ConsumerCoordinatorNotAvailableError("the broker is starting: no ZooKeeper yet")
        return self.client

    def commit(self, group: str, offsets: list[tuple[str, int, int]]) -> None:
        """Store (topic, partition, offset) of `group`; ValueError for a name ZooKeeper
        cannot hold (paths.py says which)."""
        for topic, partition, offset in offsets:
            path = paths.consumer_offset_path(group, topic, REPLICATED, partition)
            value = str(offset).encode()
            try:
                self._zookeeper().set(path, value)
            except NoNodeError:
                # open, as the consumers' own offsets: /consumers is everyone's (zk_acl.py)
                self._zookeeper().create(path, value, acl=open_acl(), makepath=True)

    def fetch(self, group: str, partitions: list[tuple[str, int]]) -> list[int]:
        """The offsets `group` committed, NO_OFFSET where it committed none."""
        found = []
        for topic, partition in partitions:
            path = paths.consumer_offset_path(group, topic, REPLICATED, partition)
            try:
                data, _ = self._zookeeper().get(path)
            except NoNodeError:
                found.append(NO_OFFSET)
                continue
            text = data.decode("ascii", "replace").strip()
            found.append(int(text) if text.lstrip("-").isdigit() else NO_OFFSET)
        return found
