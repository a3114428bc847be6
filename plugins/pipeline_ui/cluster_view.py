"""What the Cluster page shows, read from each cluster of the pipeline through its hook.

0.7's topics (a partition per broker: offsets and sizes from the brokers) and replicated
topics (docs/replication.md: each partition's leader, replicas and ISR, from ZooKeeper).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hooks.logbroker_hook import LogbrokerHook
from hooks.pipeline import Pipeline


@dataclass
class PartitionRow:
    name: str  # "<broker_id>-<partition>"
    earliest: int
    latest: int
    size: int


@dataclass
class TopicRow:
    topic: str
    partitions: list[PartitionRow]

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)


@dataclass
class ReplicatedPartitionRow:
    partition: int
    leader: int | None  # None: offline (no live in-sync replica) or not elected yet
    replicas: list[int]
    isr: list[int]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass
class ReplicatedTopicRow:
    topic: str
    partitions: list[ReplicatedPartitionRow]

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)


@dataclass
class GroupRow:
    group: str
    partitions: int
    lag: int


@dataclass
class ClusterView:
    name: str
    conn_id: str
    zk_connect: str = ""
    brokers: list[str] = field(default_factory=list)  # "0 at 127.0.0.1:9092"
    topics: list[TopicRow] = field(default_factory=list)
    replicated: list[ReplicatedTopicRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    error: str | None = None  # why the cluster could not be read


def read_cluster(name: str, conn_id: str, groups: list[str]) -> ClusterView:
    view = ClusterView(name=name, conn_id=conn_id)
    try:
        hook = LogbrokerHook(conn_id)
        view.zk_connect = hook.zk_connect
        with hook.get_conn() as cluster:
            live = cluster.live_brokers()
            view.brokers = [f"{bid} at {b.host}:{b.port}" for bid, b in sorted(live.items())]
            for topic in sorted(cluster.topics()):
                rows = [
                    PartitionRow(p.name, p.earliest, p.latest, p.size)
                    for p in cluster.describe(topic)
                ]
                view.topics.append(TopicRow(topic, rows))
            for topic in cluster.replicated_topics():
                partitions = [
                    ReplicatedPartitionRow(
                        p.partition,
                        p.leader if p.state is not None and p.state.online else None,
                        list(p.replicas),
                        list(p.isr),
                    )
                    for p in cluster.describe_replicated(topic)
                ]
                view.replicated.append(ReplicatedTopicRow(topic, partitions))
            for group in groups:
                try:
                    parts = cluster.group_partitions(group)
                except Exception:  # a group that never ran has nothing to show
                    continue
                view.groups.append(GroupRow(group, len(parts), sum(p.lag or 0 for p in parts)))
    except Exception as exc:  # a page, not a crash: say which cluster and why
        view.error = f"{type(exc).__name__}: {exc}"
    return view


def read_clusters(pipeline: Pipeline) -> list[ClusterView]:
    views = [
        read_cluster(live.name, live.conn_id, [live.mirror_group])
        for live in pipeline.live_clusters
    ]
    views.append(read_cluster("analysis", pipeline.analysis_conn_id, []))
    return views
