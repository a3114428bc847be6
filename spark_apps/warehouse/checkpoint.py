"""The warehouse's files (DESIGN.md §3.6), read and written through one small API.

Layout under the warehouse URI (any Hadoop filesystem; `file://` by default):

    <topic>/load_hour=YYYY-MM-DDTHH/part-*.parquet      the hour's rows, one per event
    _checkpoints/<topic>/YYYY-MM-DDTHH.json              the commit record of that hour
    _errors/<topic>/load_hour=YYYY-MM-DDTHH/*.parquet    its bad records (only if it had any)
    _staging/<topic>/YYYY-MM-DDTHH.<run id>/             a load in progress (hourly_load.py)

A checkpoint, keys in this order:

    {"topic": "page_views", "load_hour": "2026-11-22T10",
     "partitions": [{"broker_id": 0, "partition": 1, "start_offset": 0, "end_offset": 41230,
                     "messages": 196}, ...],
     "rows": 391, "duplicates_dropped": 0, "bad_records": 0,
     "rows_sha256": "<hex>", "committed_at": "2026-11-22T11:02:13Z"}

An hour is committed when its checkpoint exists; the hour's directory is then whole (it
appeared in one rename before the checkpoint was written). A directory without a checkpoint
is not committed and the next load replaces it. Hour states are derived, never stored:
open (no checkpoint) -> loaded (checkpoint) -> audited (audit result written) -> closed
(audit complete and the lateness grace passed); late events send a closed hour back to
audited until it is re-audited.

    wh = Warehouse.open("file:///data/wh")            # plain Python (pyarrow's filesystems)
    wh = Warehouse.open("hdfs://nn/wh", spark=spark)  # any Hadoop filesystem, through Spark
    wh.topics(); wh.committed_hours("page_views"); wh.checkpoint("page_views", "2026-11-22T10")
    wh.verify("page_views", "2026-11-22T10", zookeeper="127.0.0.1:2181/analysis")
    derive_state(checkpoint, audit=AuditMark(...), now=..., grace=timedelta(hours=2))
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from spark_apps.warehouse.hadoop import (
    ArrowFileSystem,
    FileSystem,
    HadoopFileSystem,
    join,
    normalize_uri,
    visible,
)

HOUR_FORMAT = "%Y-%m-%dT%H"
HOUR_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}")
CHECKPOINTS = "_checkpoints"
ERRORS = "_errors"
STAGING = "_staging"
HOUR_DIR_PREFIX = "load_hour="


class WarehouseError(ValueError):
    """A warehouse file is missing or malformed: the message names the file and the field."""


# -- hours ---------------------------------------------------------------------------------


def parse_hour(text: str) -> datetime:
    """'2026-11-22T10' -> that hour in UTC; ValueError naming the expected form."""
    if not HOUR_RE.fullmatch(text or ""):
        raise ValueError(f"an hour is written YYYY-MM-DDTHH (e.g. 2026-11-22T10), got {text!r}")
    try:
        return datetime.strptime(text, HOUR_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a real hour: {exc}") from None


def format_hour(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(HOUR_FORMAT)


def next_hour(hour: str) -> str:
    return format_hour(parse_hour(hour) + timedelta(hours=1))


def previous_hour(hour: str) -> str:
    return format_hour(parse_hour(hour) - timedelta(hours=1))


def format_instant(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- checkpoints ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionCheckpoint:
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    messages: int

    @property
    def name(self) -> str:
        return f"{self.broker_id}-{self.partition}"


@dataclass(frozen=True)
class Checkpoint:
    topic: str
    load_hour: str
    partitions: tuple[PartitionCheckpoint, ...]
    rows: int
    duplicates_dropped: int
    bad_records: int
    rows_sha256: str
    committed_at: str

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    def ends(self) -> dict[tuple[int, int], int]:
        return {(p.broker_id, p.partition): p.end_offset for p in self.partitions}

    def to_json(self) -> str:
        value = {
            "topic": self.topic,
            "load_hour": self.load_hour,
            "partitions": [
                {
                    "broker_id": p.broker_id,
                    "partition": p.partition,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "messages": p.messages,
                }
                for p in self.partitions
            ],
            "rows": self.rows,
            "duplicates_dropped": self.duplicates_dropped,
            "bad_records": self.bad_records,
            "rows_sha256": self.rows_sha256,
            "committed_at": self.committed_at,
        }
        return json.dumps(value, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "checkpoint") -> Checkpoint:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WarehouseError(f"{where} is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise WarehouseError(f"{where} is not a JSON object")

        def get(obj: dict[str, Any], key: str, kind: type, context: str) -> Any:
            if key not in obj:
                raise WarehouseError(f"{where}: {context}{key!r} is missing")
            v = obj[key]
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise WarehouseError(f"{where}: {context}{key!r} is not a {kind.__name__}: {v!r}")
            return v

        parts = []
        for i, p in enumerate(get(value, "partitions", list, "")):
            if not isinstance(p, dict):
                raise WarehouseError(f"{where}: partitions[{i}] is not an object")
            ctx = f"partitions[{i}]."
            parts.append(
                PartitionCheckpoint(
                    *(
                        get(p, k, int, ctx)
                        for k in (
                            "broker_id",
                            "partition",
                            "start_offset",
                            "end_offset",
                            "messages",
                        )
                    )
                )
            )
        hour = get(value, "load_hour", str, "")
        try:
            parse_hour(hour)
        except ValueError as exc:
            raise WarehouseError(f"{where}: 'load_hour': {exc}") from None
        return cls(
            topic=get(value, "topic", str, ""),
            load_hour=hour,
            partitions=tuple(parts),
            rows=get(value, "rows", int, ""),
            duplicates_dropped=get(value, "duplicates_dropped", int, ""),
            bad_records=get(value, "bad_records", int, ""),
            rows_sha256=get(value, "rows_sha256", str, ""),
            committed_at=get(value, "committed_at", str, ""),
        )


# -- states --------------------------------------------------------------------------------


class HourState(StrEnum):
    OPEN = "open"
    LOADED = "loaded"
    AUDITED = "audited"
    CLOSED = "closed"


@dataclass(frozen=True)
class AuditMark:
    """What the audit wrote for an hour (read by the audit's own code, issue 12).

    audited_at          when the audit result of the hour was written
    complete            every window of the hour complete (produced = loaded unique)
    late_after_audit    a later load brought events of this hour's windows after audited_at
    """

    audited_at: datetime
    complete: bool
    late_after_audit: bool = False


def derive_state(
    checkpoint: Checkpoint | None,
    audit: AuditMark | None = None,
    *,
    now: datetime,
    grace: timedelta,
) -> HourState:
    """The hour's state from its files (DESIGN.md §3.6); `now` and `grace` are parameters."""
    if checkpoint is None:
        return HourState.OPEN
    if audit is None:
        return HourState.LOADED
    hour_end = parse_hour(checkpoint.load_hour) + timedelta(hours=1)
    if audit.complete and not audit.late_after_audit and now >= hour_end + grace:
        return HourState.CLOSED
    return HourState.AUDITED


# -- verification --------------------------------------------------------------------------


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
    details: dict[str, Any] = field(default_factory=dict)

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


# -- the warehouse -------------------------------------------------------------------------


class Warehouse:
    def __init__(self, uri: str, fs: FileSystem, spark: Any = None) -> None:
        self.uri = normalize_uri(uri)
        self.fs = fs
        self.spark = spark

    @classmethod
    def open(cls, uri: str, spark: Any = None) -> Warehouse:
        """Through Hadoop (Spark's JVM) when `spark` is given; else through pyarrow, no JVM."""
        fs: FileSystem = HadoopFileSystem(spark) if spark is not None else ArrowFileSystem()
        return cls(uri, fs, spark)

    # paths
    def topic_dir(self, topic: str) -> str:
        return join(self.uri, topic)

    def hour_dir(self, topic: str, hour: str) -> str:
        return join(self.uri, topic, HOUR_DIR_PREFIX + hour)

    def checkpoint_path(self, topic: str, hour: str) -> str:
        return join(self.uri, CHECKPOINTS, topic, f"{hour}.json")

    def errors_dir(self, topic: str, hour: str) -> str:
        return join(self.uri, ERRORS, topic, HOUR_DIR_PREFIX + hour)

    def staging_root(self, topic: str) -> str:
        return join(self.uri, STAGING, topic)

    # reading
    def topics(self) -> list[str]:
        """Topics that have at least one checkpoint."""
        return [
            s.name for s in self.fs.list(join(self.uri, CHECKPOINTS)) if s.is_dir and visible(s)
        ]

    def committed_hours(self, topic: str) -> list[str]:
        """Hours of `topic` with a checkpoint, oldest first."""
        hours = []
        for s in self.fs.list(join(self.uri, CHECKPOINTS, topic)):
            if not s.is_dir and s.name.endswith(".json") and HOUR_RE.fullmatch(s.name[:-5]):
                hours.append(s.name[:-5])
        return sorted(hours)

    def checkpoint(self, topic: str, hour: str) -> Checkpoint | None:
        path = self.checkpoint_path(topic, hour)
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError:
            return None
        cp = Checkpoint.from_json(data, where=path)
        if cp.topic != topic or cp.load_hour != hour:
            raise WarehouseError(
                f"{path} holds topic {cp.topic!r} hour {cp.load_hour}, not {topic!r} {hour}"
            )
        return cp

    def checkpoints(self, topic: str) -> list[Checkpoint]:
        return [cp for h in self.committed_hours(topic) if (cp := self.checkpoint(topic, h))]

    def last_committed(self, topic: str) -> Checkpoint | None:
        hours = self.committed_hours(topic)
        return self.checkpoint(topic, hours[-1]) if hours else None

    def hour_state(
        self,
        topic: str,
        hour: str,
        *,
        now: datetime,
        grace: timedelta,
        audit: AuditMark | None = None,
    ) -> HourState:
        return derive_state(self.checkpoint(topic, hour), audit, now=now, grace=grace)

    def count_rows(self, topic: str, hour: str) -> int:
        """Rows in the hour's directory (Parquet footers only)."""
        return self.fs.parquet_rows(self.hour_dir(topic, hour))

    def verify(
        self,
        topic: str,
        hour: str,
        *,
        zookeeper: str | None = None,
        consumer_for: Callable[[int], Any] | None = None,
    ) -> Verification:
        """Re-read the hour's stored range from the brokers; compare rows_sha256 and counts."""
        from logbroker.protocol.errors import LogbrokerError
        from spark_apps.source.ranges import PartitionRange, digest_ranges

        cp = self.checkpoint(topic, hour)
        if cp is None:
            raise WarehouseError(
                f"{topic} {hour} is not committed: no {self.checkpoint_path(topic, hour)}"
            )
        problems: list[str] = []
        ranges: Sequence[PartitionRange] = [
            PartitionRange(topic, p.broker_id, p.partition, p.start_offset, p.end_offset)
            for p in cp.partitions
        ]
        cluster = None
        broker_sha = None
        broker_messages = None
        try:
            if consumer_for is None:
                if zookeeper is None:
                    raise ValueError("verify needs zookeeper= (or consumer_for=) to reach brokers")
                from logbroker.client.cluster import Cluster

                cluster = Cluster(zookeeper)
                consumer_for = cluster.consumer
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
            if cluster is not None:
                cluster.close()
        warehouse_rows = (
            self.count_rows(topic, hour) if self.fs.exists(self.hour_dir(topic, hour)) else None
        )
        if warehouse_rows is None:
            problems.append(f"the hour's directory {self.hour_dir(topic, hour)} is missing")
        elif warehouse_rows != cp.rows:
            problems.append(
                f"the warehouse holds {warehouse_rows} rows, the checkpoint says {cp.rows}"
            )
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
