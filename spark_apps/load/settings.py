"""What one run of the hourly load is asked to do, beyond the topic and the hour."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass
class LoadSettings:
    """zookeeper: the analysis cluster (chroot included), where the topics and the load's lock
    live; schema_registry: the registry's connect string; client: the analysis cluster's
    client credentials as Kafka properties (security.protocol, ssl.*, sasl.*: the source's
    options of the same names), kept out of the repr; the rest as `--help` says."""

    zookeeper: str
    schema_registry: str
    max_bad_fraction: float = 0.01
    # A load reads whole partition-hours: fetches of 4 MiB (the source's default is 1 MiB,
    # Kafka's) make batches of ~28,000 events, and the per-batch work (Arrow arrays, a fetch
    # request) costs 10 % less of the worker's CPU than at 1 MiB (docs/warehouse.md).
    fetch_size: int = 4 * 1024 * 1024
    min_partitions: int | None = None
    # A range longer than this is read by several tasks. Each piece but the first is read
    # from the range's start (its last known message boundary), walking the sizes of what
    # comes before it: 1.5 x the bytes fetched for a range in two. minPartitions still splits
    # the largest ranges when a topic has fewer than the cores.
    max_bytes_per_partition: int = 1024 * 1024 * 1024
    parquet_writer: str = "auto"  # parquet_tasks.WRITERS: auto = Arrow's on file://, else Spark's
    # An hour of at most this many bytes (byte offsets) is read and written by the driver,
    # the same files Arrow's writer writes in Spark's tasks: below it a Spark job's own cost
    # (~0.3-0.4 s, scheduling its tasks and their Python workers) is most of the load's.
    # 0: always Spark's tasks (parquet_tasks.write_rows_here).
    driver_write_bytes: int = 16 * 1024 * 1024
    lock_timeout: float = 600.0  # seconds to wait for another load of the topic to finish
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    client: dict[str, str] = field(default_factory=dict, repr=False)  # holds a password
