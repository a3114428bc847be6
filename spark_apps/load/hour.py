"""One topic's hourly load: ranges from the checkpoints, one Spark pass to write, then the commit.

1. recover: publish or delete what an earlier, killed load left in staging (commit.py)
2. the range: a committed hour again (backfill) -> exactly its checkpoint's range;
   otherwise the previous hour must be the last committed one (loads commit in hour
   order) and the range runs from its ends (the earliest offsets for a topic's first
   load; 0 for a partition that appeared since) to the ends found now
3. read (the `logbroker` source, Avro, PERMISSIVE) and write the good rows to staging in
   one pass, counted from the files' footers; meanwhile a driver thread re-reads the range
   for rows_sha256 and counts every message: the difference is the bad records
4. bad records (not an event: no magic, unknown schema id, undecodable) over
   --max-bad-fraction fail the load, naming the count; else the range is read again for
   them and they go to _errors (only an hour that has some pays that read); Spark's count
   of them must make up the difference, or the load fails
5. deduplicate by (producer_id, seq): the first in (broker_id, partition, offset, index)
   order stays; an event already in the previous hour's rows goes. The rows_sha256 thread
   reads every event's name on its way (event_names.py): when those prove the names
   distinct, and disjoint from the previous load's (its summary's seq ranges), there is
   nothing to drop and no Spark check. Otherwise the check reads two columns of what was
   written; only an hour that has repeats is written again without them
6. the summary the audit reads instead of the rows (load_summary), into the staged rows
   directory: an aggregation over the header columns collected in step 5's Spark job
7. decide (_COMMIT) and publish: the hour directory appears in one rename, then the
   checkpoint (commit.py)
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from logbroker.protocol.errors import LogbrokerError
from spark_apps.load import parquet_tasks
from spark_apps.load.commit import Staging, publish, recover
from spark_apps.source.discovery import PartitionState, discover
from spark_apps.source.options import offsets_json, parse_options
from spark_apps.source.ranges import PartitionRange, RangeDigest, digest_ranges
from spark_apps.warehouse import load_summary
from spark_apps.warehouse.checkpoint import (
    Checkpoint,
    PartitionCheckpoint,
    Warehouse,
    format_instant,
    previous_hour,
)

log = logging.getLogger("logbroker.hourly_load")

POSITION = ["broker_id", "partition", "offset", "index"]
KEY = ["producer_id", "seq"]
ERROR_COLUMN, VALUE_COLUMN = parquet_tasks.ERROR_COLUMN, parquet_tasks.VALUE_COLUMN


class LoadError(LogbrokerError):
    """The hour cannot be loaded as asked; nothing of it was committed."""


class LoadOrderError(LoadError):
    """The previous hour is not committed (or a later one already is)."""


class TooManyBadRecordsError(LoadError):
    """More bad records than --max-bad-fraction allows."""


@dataclass
class LoadSettings:
    zookeeper: str
    schema_registry: str
    max_bad_fraction: float = 0.01
    fetch_size: int = 1024 * 1024
    min_partitions: int | None = None
    parquet_writer: str = "auto"  # parquet_tasks.WRITERS: auto = Arrow's on file://, else Spark's
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


@dataclass
class LoadReport:
    checkpoint: Checkpoint
    backfill: bool
    seconds: dict[str, float]
    recovered: list[str]

    def summary(self) -> str:
        cp = self.checkpoint
        kind = "backfilled" if self.backfill else "loaded"
        times = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        return (
            f"{kind} {cp.topic} {cp.load_hour}: {cp.rows} rows from {cp.messages} messages in "
            f"{len(cp.partitions)} partitions, {cp.duplicates_dropped} duplicates dropped, "
            f"{cp.bad_records} bad records; rows_sha256 {cp.rows_sha256[:16]}... ({times})"
        )


def _discover(settings: LoadSettings, topic: str) -> list[PartitionState]:
    return discover(parse_options({"zookeeper": settings.zookeeper, "subscribe": topic}))


def plan_hour(
    wh: Warehouse, settings: LoadSettings, topic: str, hour: str
) -> tuple[list[PartitionRange], Checkpoint | None, Checkpoint | None]:
    """(ranges, the hour's own checkpoint if it is a backfill, the previous hour's)."""
    own = wh.checkpoint(topic, hour)
    previous = wh.checkpoint(topic, previous_hour(hour))
    if own is not None:
        ranges = [
            PartitionRange(topic, p.broker_id, p.partition, p.start_offset, p.end_offset)
            for p in own.partitions
        ]
        return ranges, own, previous
    hours = wh.committed_hours(topic)
    if hours and hours[-1] > hour:
        raise LoadOrderError(
            f"topic {topic!r}: hour {hour} has no checkpoint, but the later hour {hours[-1]} is "
            f"committed; loads commit in hour order, so {hour} cannot be loaded now (a backfill "
            "re-runs committed hours only)"
        )
    if hours and hours[-1] != previous_hour(hour):
        raise LoadOrderError(
            f"topic {topic!r}: the previous hour {previous_hour(hour)} is not committed (the "
            f"last committed hour is {hours[-1]}); load the hours in order, starting with "
            f"{_next(hours[-1])}"
        )
    ends = previous.ends() if previous is not None else {}
    states = _discover(settings, topic)
    ranges = []
    for s in states:
        if previous is None:
            start = s.earliest  # a topic's first load starts at what the brokers still have
        else:
            start = ends.get((s.broker_id, s.partition), 0)  # 0: a partition new since
        ranges.append(PartitionRange(topic, s.broker_id, s.partition, start, s.latest))
    seen = {(s.broker_id, s.partition) for s in states}
    for (broker_id, partition), end in sorted(ends.items()):
        if (broker_id, partition) not in seen:
            log.warning(
                "topic %s partition %d-%d of the previous checkpoint is on no live broker: "
                "carried forward with no messages; its data comes in a later hour",
                topic,
                broker_id,
                partition,
            )
            ranges.append(PartitionRange(topic, broker_id, partition, end, end))
    if not ranges:
        raise LoadError(
            f"topic {topic!r} has no partitions on any live broker in {settings.zookeeper}"
        )
    return sorted(ranges, key=lambda r: (r.broker_id, r.partition)), None, previous


def _next(hour: str) -> str:
    from spark_apps.warehouse.checkpoint import next_hour

    return next_hour(hour)


class _DigestThread(threading.Thread):
    """rows_sha256 and message counts, read from the brokers while Spark stages the rows."""

    def __init__(self, settings: LoadSettings, ranges: list[PartitionRange]) -> None:
        super().__init__(name="rows-sha256", daemon=True)
        self.settings = settings
        self.ranges = ranges
        self.result: RangeDigest | None = None
        self.error: BaseException | None = None
        self.names: Any = None  # event_names.NameKeys of the range, once read

    def run(self) -> None:
        from logbroker.client.cluster import Cluster
        from spark_apps.load.event_names import NameKeys

        try:
            names = NameKeys()
            with Cluster(self.settings.zookeeper) as cluster:
                self.result = digest_ranges(
                    cluster.consumer, self.ranges, fetch_size=self.settings.fetch_size, names=names
                )
            names.repeats_possible()  # sorted here, while Spark still writes
            self.names = names
        except BaseException as exc:
            self.error = exc

    def digest(self) -> RangeDigest:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def load_hour(
    spark: Any, wh: Warehouse, settings: LoadSettings, topic: str, hour: str
) -> LoadReport:
    """Load (or backfill) one topic's hour; returns what was committed."""
    from pyspark.sql import functions as F

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    recovered = recover(wh, topic)
    ranges, own, previous = plan_hour(wh, settings, topic, hour)
    try:
        arrow_writes = parquet_tasks.use_arrow_writer(
            settings.parquet_writer, wh.uri, spark.conf.get("spark.sql.parquet.compression.codec")
        )
    except parquet_tasks.ParquetWriterChoiceError as exc:
        raise LoadError(f"topic {topic!r} {hour}: {exc}") from None
    seconds["plan"] = time.monotonic() - t0

    digest_thread = _DigestThread(settings, ranges)
    digest_thread.start()
    staging = Staging(wh, topic, hour, f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}")
    try:
        readable = [r for r in ranges if r.end > r.start]

        def read() -> Any:
            return _read(spark, settings, topic, hour, readable, F)

        # One pass writes the good rows; they are counted from the written files' footers
        # (an Observation on the write counted them in the same pass, but cost ~20 % of it:
        # its aggregation runs per row outside Spark's generated code). Bad records are the
        # messages the rows_sha256 thread counted less those rows, and are read again below.
        t = time.monotonic()
        good_count = 0
        tasks_bad: int | None = None  # the bad records the writing tasks counted
        if readable and arrow_writes:  # the tasks that read write (parquet_tasks.py)
            wh.fs.mkdirs(staging.rows)
            spark.sparkContext.setJobDescription(f"hourly load {topic} {hour}: read and write")
            written = parquet_tasks.write_rows(
                spark, _source_options(spark, settings, topic, readable), staging.rows, hour
            )
            spark.sparkContext.setJobDescription(None)
            good_count = wh.fs.parquet_rows(staging.rows)
            tasks_bad = sum(w.bad for w in written)
            if good_count != sum(w.rows for w in written):
                raise LoadError(
                    f"topic {topic!r} {hour}: the tasks wrote {sum(w.rows for w in written)} "
                    f"rows but the staged files hold {good_count}; nothing committed"
                )
        elif readable:
            good = read().filter(F.col(ERROR_COLUMN).isNull())
            good.drop(ERROR_COLUMN, VALUE_COLUMN).write.parquet(staging.rows)
            good_count = wh.fs.parquet_rows(staging.rows)
        else:  # nothing new: an empty hour with the topic's columns
            read().drop(ERROR_COLUMN, VALUE_COLUMN).write.parquet(staging.rows)
        if not wh.fs.exists(staging.rows):
            wh.fs.mkdirs(staging.rows)
        seconds["read+write"] = time.monotonic() - t

        t = time.monotonic()
        digest = digest_thread.digest()
        seconds["rows_sha256 wait"] = time.monotonic() - t
        messages = sum(digest.messages.values())
        bad_count = messages - good_count
        if tasks_bad is not None and tasks_bad != bad_count:
            raise LoadError(
                f"topic {topic!r} {hour}: the range holds {messages} messages, the tasks wrote "
                f"{good_count} rows and counted {tasks_bad} bad records; nothing committed"
            )
        if bad_count < 0:
            raise LoadError(
                f"topic {topic!r} {hour}: Spark wrote {good_count} rows but the range holds "
                f"{messages} messages; nothing committed"
            )
        if own is not None and digest.rows_sha256 != own.rows_sha256:
            raise LoadError(
                f"topic {topic!r} {hour}: the brokers now hold other data in the checkpoint's "
                f"range (rows_sha256 {digest.rows_sha256[:16]}..., checkpoint "
                f"{own.rows_sha256[:16]}...); nothing replaced"
            )
        if bad_count:  # rare: the range is read again for them
            t = time.monotonic()
            bad = read().filter(F.col(ERROR_COLUMN).isNotNull())
            if bad_count > settings.max_bad_fraction * messages:
                _check_bad_count(bad.count(), good_count, messages, topic, hour)
                reasons = [r[0] for r in bad.select(ERROR_COLUMN).limit(3).collect()]
                raise TooManyBadRecordsError(
                    f"topic {topic!r} {hour}: {bad_count} of {messages} messages "
                    f"({bad_count / messages:.2%}) are bad records, over --max-bad-fraction "
                    f"{settings.max_bad_fraction:g} "
                    f"({int(settings.max_bad_fraction * messages)} allowed); nothing "
                    f"committed. First reasons: " + " | ".join(reasons)
                )
            bad.select(
                "topic",
                *POSITION,
                F.col(ERROR_COLUMN).alias("reason"),
                F.col(VALUE_COLUMN).alias("value"),
                "load_hour",
            ).write.parquet(staging.errors)
            _check_bad_count(wh.fs.parquet_rows(staging.errors), good_count, messages, topic, hour)
            seconds["bad records"] = time.monotonic() - t

        t = time.monotonic()
        seen = None
        profile = None
        drops: list[Any] = []
        # Names the rows_sha256 thread proved distinct (the usual hour) need no Spark check,
        # and the summary's profile is counted from the same headers ("names": no Spark job).
        # Else a Spark job counts the profile alone ("profile": no shuffle of every key), or
        # with the check ("dedup").
        proved = bad_count == 0 and _names_proved_distinct(wh, digest_thread.names, previous)
        phase = "names" if proved else "dedup"
        if good_count:
            if proved:
                profile = digest_thread.names.profile(topic, hour)
            if profile is None:
                written = spark.read.parquet(staging.rows)
                query = load_summary.profile_query(
                    load_summary.header_rows(written, topic, F.lit(hour))
                )
            if proved and profile is None:
                phase = "profile"
                profile = query.toPandas()
            elif not proved:
                if (
                    previous is not None
                    and previous.rows
                    and wh.fs.exists(wh.hour_dir(topic, previous.load_hour))
                ):
                    seen = spark.read.parquet(wh.hour_dir(topic, previous.load_hour))
                # The summary's profile is counted in the same job as the keys (one job).
                drops, profile = _duplicates(written, seen, F, query)
        # No name of this hour is in the previous hour's rows now: said in its summary.
        certified = seen is not None or proved or not good_count or not (previous and previous.rows)
        dropped = len(drops)
        seconds[phase] = time.monotonic() - t
        if dropped:  # rare: the rows are written again without them
            t = time.monotonic()
            gone = spark.createDataFrame(drops, written.select(*POSITION).schema)
            # a join puts its keys first: keep the contract's column order
            written.join(F.broadcast(gone), POSITION, "left_anti").select(
                *written.columns
            ).write.parquet(staging.deduplicated)
            wh.fs.delete(staging.rows)
            wh.fs.rename(staging.deduplicated, staging.rows)
            seconds["rewrite"] = time.monotonic() - t
        rows = good_count - dropped

        checkpoint = Checkpoint(
            topic=topic,
            load_hour=hour,
            partitions=tuple(
                PartitionCheckpoint(
                    r.broker_id,
                    r.partition,
                    r.start,
                    r.end,
                    digest.messages[(r.broker_id, r.partition)],
                )
                for r in ranges
            ),
            rows=rows,
            duplicates_dropped=dropped,
            bad_records=bad_count,
            rows_sha256=digest.rows_sha256,
            committed_at=format_instant(settings.clock()),
        )
        if checkpoint.messages != rows + dropped + bad_count:
            raise LoadError(
                f"topic {topic!r} {hour}: {checkpoint.messages} messages != {rows} rows + "
                f"{dropped} duplicates + {bad_count} bad records; nothing committed"
            )
        t = time.monotonic()
        if dropped:  # the profile counted rows that went: count what stays
            profile = load_summary.group_profile(
                load_summary.header_rows(spark.read.parquet(staging.rows), topic, F.lit(hour))
            )
        _write_summary(wh, staging.rows, checkpoint, previous, certified, profile)
        seconds["summary"] = time.monotonic() - t
        t = time.monotonic()
        staging.decide(checkpoint, has_errors=bool(bad_count))
    except BaseException:
        digest_thread.join(timeout=0)
        try:
            staging.discard()
        except Exception as exc:  # the JVM may be gone (killed): the next run cleans up
            log.warning("could not remove the staging directory %s: %s", staging.root, exc)
        raise
    publish(wh, staging.root)
    seconds["commit"] = time.monotonic() - t
    return LoadReport(checkpoint, own is not None, seconds, recovered)


def _write_summary(
    wh: Warehouse,
    rows_dir: str,
    checkpoint: Checkpoint,
    previous: Checkpoint | None,
    certified: bool,
    profile: Any,
) -> None:
    """The hour's _load_summary.json, into its staged rows (it is published with them), from
    the profile of the rows as they stay (None: there are none); the audit reads this."""
    groups: list[list[Any]] = []
    names: list[list[Any]] = []
    if profile is not None:
        groups = load_summary.frame_rows(profile, load_summary.GROUP_COLUMNS)
        # the duplicates were dropped: every named row left is a distinct name
        names = load_summary.frame_rows(
            load_summary.names_without_repeats(profile), load_summary.NAME_COLUMNS
        )
    summary = load_summary.LoadSummary(
        topic=checkpoint.topic,
        load_hour=checkpoint.load_hour,
        committed_at=checkpoint.committed_at,
        rows_sha256=checkpoint.rows_sha256,
        rows=checkpoint.rows,
        files=load_summary.data_files(wh.fs, rows_dir),
        groups=groups,
        names=names,
        previous=(
            load_summary.Certificate(
                previous.load_hour,
                previous.committed_at,
                previous.rows_sha256,
                load_summary.data_files(wh.fs, wh.hour_dir(previous.topic, previous.load_hour)),
            )
            if previous is not None and certified
            else None
        ),
    )
    load_summary.write(wh.fs, load_summary.summary_path(rows_dir), summary)


def _source_options(
    spark: Any, settings: LoadSettings, topic: str, readable: list[PartitionRange]
) -> dict[str, str]:
    """The `logbroker` source's options for exactly these ranges (Avro, PERMISSIVE)."""
    return {
        "zookeeper": settings.zookeeper,
        "assign": _assign_json(topic, readable),
        "startingOffsets": offsets_json(
            {(r.topic, r.broker_id, r.partition): r.start for r in readable}
        ),
        "endingOffsets": offsets_json(
            {(r.topic, r.broker_id, r.partition): r.end for r in readable}
        ),
        "valueFormat": "avro",
        "schemaRegistry": settings.schema_registry,
        "mode": "PERMISSIVE",
        "failOnDataLoss": "true",
        "fetchSize": str(settings.fetch_size),
        "minPartitions": str(settings.min_partitions or spark.sparkContext.defaultParallelism),
    }


def _read(
    spark: Any,
    settings: LoadSettings,
    topic: str,
    hour: str,
    readable: list[PartitionRange],
    F: Any,
) -> Any:
    """The ranges as the source reads them (PERMISSIVE: bad records are rows), load_hour added."""
    if not readable:
        return _with_load_hour(_empty_frame(spark, settings, topic), hour, F)
    source = spark.read.format("logbroker").options(
        **_source_options(spark, settings, topic, readable)
    )
    return _with_load_hour(source.load(), hour, F)


def _check_bad_count(bad: int, good: int, messages: int, topic: str, hour: str) -> None:
    """Spark's reads agree with the rows_sha256 thread's count of the range: good rows and
    bad records make up every message (else a read lost or invented some)."""
    if good + bad != messages:
        raise LoadError(
            f"topic {topic!r} {hour}: Spark read {good + bad} messages ({good} rows, {bad} bad "
            f"records) but the range holds {messages}; nothing committed"
        )


def _names_proved_distinct(wh: Warehouse, names: Any, previous: Checkpoint | None) -> bool:
    """Whether the names the rows_sha256 thread read (event_names.NameKeys) prove that the
    load holds no repeated name, and none of the previous hour's load (from that load's
    current summary: its names' seq ranges). False: the Spark check decides."""
    if names is None or names.repeats_possible():
        return False
    if previous is None or not previous.rows:
        return True
    summary = load_summary.read_current(
        wh.fs,
        wh.hour_dir(previous.topic, previous.load_hour),
        previous.committed_at,
        previous.rows_sha256,
        previous.rows,
    )
    if summary is None:
        return False  # no current summary: the previous rows are read instead
    at = load_summary.NAME_COLUMNS.index
    producer, lowest, highest = at("producer_id"), at("min_seq"), at("max_seq")
    ranges = [
        (row[producer], int(row[lowest]), int(row[highest]))
        for row in summary.names
        if row[producer] is not None and row[lowest] is not None and row[highest] is not None
    ]
    return not names.shares_names_with(ranges)


# More repeated keys than this are joined back by a shuffle, not sent to every task.
BROADCAST_REPEATS = 100_000


def _duplicates(
    rows: Any, previous_rows: Any | None, F: Any, profile: Any | None = None
) -> tuple[list[Any], Any]:
    """(positions of the rows that go: every (producer_id, seq) but its first in
    (broker_id, partition, offset, index) order, and every one the previous hour has;
    `profile` (a small aggregation query) collected, as pandas, in the same job, or None).

    Nearly every key is unique, so the keys are first counted as two longs, (xxhash64 of
    producer_id, seq), read from the written Parquet (two columns) and shuffled once: no
    string and no position crosses the shuffle for a unique key, and with no repeat (the
    usual hour) that is all. Only the rows whose hashed key repeats (a real repeat, or two
    producers hashing alike) are then compared by producer_id and position.
    """
    import pandas as pd

    hashed = F.xxhash64("producer_id").alias("_h")
    keys = rows.select(hashed, "seq")
    if previous_rows is not None:
        keys = keys.unionByName(previous_rows.select(hashed, "seq"))
    repeated_keys = keys.groupBy("_h", "seq").count().filter(F.col("count") > 1).select("_h", "seq")
    first = repeated_keys.limit(BROADCAST_REPEATS + 1)
    found: list[Any] = []
    profiled = None
    if profile is None:
        found = first.collect()
    else:  # one job for both answers: (key, null) and (null, profile row)
        both = first.select(
            F.struct("_h", "seq").alias("key"),
            F.lit(None).cast(profile.schema.simpleString()).alias("group"),
        ).unionByName(
            profile.select(
                F.lit(None).cast("struct<_h:bigint,seq:bigint>").alias("key"),
                F.struct(*profile.columns).alias("group"),
            )
        )
        groups = []
        for row in both.collect():
            if row["key"] is not None:
                found.append(row["key"])
            else:
                groups.append(row["group"].asDict())
        profiled = pd.DataFrame(groups, columns=profile.columns)
    if not found:
        return [], profiled
    repeated = rows.sparkSession.createDataFrame(found, repeated_keys.schema)
    if len(found) <= BROADCAST_REPEATS:
        repeated = F.broadcast(repeated)
    else:
        repeated = repeated_keys
    at = F.struct(*POSITION)
    candidates = rows.select(*KEY, hashed, at.alias("_at"), F.lit(False).alias("_seen"))
    if previous_rows is not None:
        candidates = candidates.unionByName(
            previous_rows.select(
                *KEY,
                hashed,
                F.lit(None).cast(candidates.schema["_at"].dataType).alias("_at"),
                F.lit(True).alias("_seen"),
            )
        )
    candidates = candidates.join(repeated, ["_h", "seq"], "left_semi")
    verdict = candidates.groupBy(*KEY).agg(
        F.count(F.lit(1)).alias("_n"),
        F.min("_at").alias("_first"),  # this hour's first (nulls: the previous hour's)
        F.max("_seen").alias("_any_seen"),
    )
    return (
        candidates.filter(~F.col("_seen"))
        .join(verdict, KEY)  # header keys are never null (the header's fields are required)
        .filter((F.col("_n") > 1) & (F.col("_any_seen") | (F.col("_at") != F.col("_first"))))
        .select(*[F.col("_at")[c].alias(c) for c in POSITION])
        .collect(),
        profiled,
    )


def _assign_json(topic: str, ranges: list[PartitionRange]) -> str:
    import json

    return json.dumps({topic: [r.name for r in ranges]})


def _with_load_hour(df: Any, hour: str, F: Any) -> Any:
    """load_hour after the header columns (DESIGN.md §3.6's column order)."""
    columns = df.columns
    at = columns.index("schema_id") + 1
    ordered = [F.col(f"`{c}`") for c in columns[:at]]
    ordered.append(F.lit(hour).alias("load_hour"))
    ordered += [F.col(f"`{c}`") for c in columns[at:]]
    return df.select(*ordered)


def _empty_frame(spark: Any, settings: LoadSettings, topic: str) -> Any:
    """An hour with no new messages: no rows, the topic's columns."""
    from spark_apps.source.avro_columns import spark_schema

    options = parse_options(
        {
            "zookeeper": settings.zookeeper,
            "subscribe": topic,
            "valueFormat": "avro",
            "schemaRegistry": settings.schema_registry,
            "mode": "PERMISSIVE",
        }
    )
    return spark.createDataFrame([], spark_schema(options))
