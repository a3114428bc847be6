"""`hourly_load.py verify`: a committed hour against the brokers and its own files.

Re-reads the hour's stored ranges from the brokers and compares rows_sha256 and the message
counts with the checkpoint, and the rows of the version the checkpoint names with its `rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from logbroker.protocol.errors import LogbrokerError
from logbroker.security.client import ClientCredentials
from pipeline_warehouse.checkpoint import Warehouse, WarehouseError
from spark_apps.source.consumers import ClusterReads
from spark_apps.source.ranges import PartitionRange, digest_ranges


@dataclass(frozen=True)
class Verification:
    topic: str
    load_hour: str
    ok: bool
    problems: tuple[str, ...]
    stored_sha256: str
    broker_sha256: str | None
    stored_messages: int
    broker_messages: int | None
    stored_rows: int
    warehouse_rows: int | None

    def summary(self) -> str:
        head = f"{self.topic} {self.load_hour}: {'OK' if self.ok else 'MISMATCH'}"
        lines = [
            head,
            f"  rows_sha256  checkpoint {self.stored_sha256}",
            f"               broker     {self.broker_sha256 or '(not read)'}",
            f"  messages     checkpoint {self.stored_messages}, broker {self.broker_messages}",
            f"  rows         checkpoint {self.stored_rows}, warehouse {self.warehouse_rows}",
        ]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def verify(
    wh: Warehouse,
    topic: str,
    hour: str,
    *,
    zookeeper: str | None = None,
    consumer_for: Callable[[PartitionRange], Any] | None = None,
    credentials: ClientCredentials | None = None,
) -> Verification:
    """Re-read the hour's stored range from the brokers (a replicated partition from its
    leader, whichever replica leads it now), logging in with `credentials`; compare
    rows_sha256 and counts."""
    cp = wh.checkpoint(topic, hour)
    if cp is None:
        raise WarehouseError(
            f"{topic} {hour} is not committed: no {wh.checkpoint_path(topic, hour)}"
        )
    problems: list[str] = []
    ranges = [
        PartitionRange(topic, p.broker_id, p.partition, p.start_offset, p.end_offset, cp.logical)
        for p in cp.partitions
    ]
    cluster = None
    reads = None
    broker_sha = None
    broker_messages = None
    try:
        if consumer_for is None:
            if zookeeper is None:
                raise ValueError("verify needs zookeeper= (or consumer_for=) to reach brokers")
            from logbroker.client.cluster import Cluster

            cluster = Cluster(zookeeper, credentials=credentials)
            consumer_for = reads = ClusterReads(cluster)
        digest = digest_ranges(consumer_for, ranges)
        broker_sha = digest.rows_sha256
        broker_messages = sum(digest.messages.values())
        for p in cp.partitions:
            got = digest.messages.get((p.broker_id, p.partition))
            if got != p.messages:
                problems.append(
                    f"partition {p.name}: checkpoint says {p.messages} messages in "
                    f"[{p.start_offset}, {p.end_offset}), the broker has {got}"
                )
        if broker_sha != cp.rows_sha256:
            problems.append("rows_sha256 differs: the broker holds other data in this range")
    except LogbrokerError as exc:
        problems.append(f"the range cannot be re-read: {exc}")
    finally:
        if reads is not None:
            reads.close()
        if cluster is not None:
            cluster.close()
    warehouse_rows: int | None = None
    try:
        warehouse_rows = wh.count_rows(cp)
    except WarehouseError as exc:
        problems.append(str(exc))
    if warehouse_rows is not None and warehouse_rows != cp.rows:
        problems.append(f"the warehouse holds {warehouse_rows} rows, the checkpoint says {cp.rows}")
    if cp.messages != cp.rows + cp.duplicates_dropped + cp.bad_records:
        problems.append(
            f"the checkpoint does not add up: {cp.messages} messages != {cp.rows} rows + "
            f"{cp.duplicates_dropped} duplicates + {cp.bad_records} bad records"
        )
    return Verification(
        topic,
        hour,
        not problems,
        tuple(problems),
        cp.rows_sha256,
        broker_sha,
        cp.messages,
        broker_messages,
        cp.rows,
        warehouse_rows,
    )
