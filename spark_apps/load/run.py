"""One topic's hourly load, step by step (docs/warehouse.md, "A load, step by step").

0. the topic's lock (lock.py): one load of a topic at a time; a second waits, or fails
   naming the holder
1. recover: publish or delete what an earlier, killed load left in staging (commit.py)
2. plan: the ranges, from the checkpoints and the brokers, and how they are read (plan.py):
   the load's settings become the source's options here, once; the partitions are
   discovered once; the plan carries the splits and the pinned reader schema to every read
3. read and write once: Spark's tasks read the plan's splits with the `logbroker` source's
   reader (Avro, PERMISSIVE) and the good rows are written to staging in the same pass,
   counted from the written files' footers (a small hour: the driver reads and writes the
   same splits and files, no Spark job: parquet_tasks.write_rows_here); meanwhile a driver
   thread re-reads the ranges for rows_sha256 and counts every message (digest.py): the
   difference is the bad records
4. bad records (not an event: no magic, unknown schema id, undecodable) over
   --max-bad-fraction fail the load, naming the count; else the range is read again for
   them and they go to errors/ (only an hour that has some pays that read); Spark's count of
   them must make up the difference, or the load fails
5. deduplicate by (producer_id, seq) (dedup.py); only an hour that has repeats is written
   again without them. For `_audit`, a repeat whose AuditCount differs from the row kept (a
   conflict) is kept in the summary with the rows it conflicts with, for the audit
6. the summary the audit reads instead of the rows (pipeline_warehouse.load_summary's
   format), into the staged rows
7. decide (_COMMIT, which names the new version's files and the lock's fencing token)
   after checking that the lock is still this load's, then publish while it still is: the
   checkpoint switches the hour to the new version (commit.py)
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import (
    BYTE_OFFSETS,
    LOGICAL_OFFSETS,
    Checkpoint,
    PartitionCheckpoint,
    Warehouse,
)
from pipeline_warehouse.layout import AUDIT_TOPIC
from pipeline_warehouse.time_format import format_second, parse_hour
from pipeline_warehouse.topics import PipelineTopicError, check_topic
from spark_apps.load import parquet_tasks
from spark_apps.load.commit import Staging, publish, recover
from spark_apps.load.dedup import duplicates, names_proved_distinct
from spark_apps.load.digest import DigestThread
from spark_apps.load.errors import LoadError, TooManyBadRecordsError
from spark_apps.load.frames import POSITION, read_rows
from spark_apps.load.lock import TopicLock
from spark_apps.load.plan import HourPlan, plan_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.source.ranges import RangeDigest
from spark_apps.summary_counts import (
    frame_rows,
    group_profile,
    header_rows,
    names_without_repeats,
    profile_query,
)

log = logging.getLogger("logbroker.hourly_load")

ERROR_COLUMN, VALUE_COLUMN = parquet_tasks.ERROR_COLUMN, parquet_tasks.VALUE_COLUMN


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


class _Timer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._start
        self._start = now


def load_hour(
    spark: Any, wh: Warehouse, settings: LoadSettings, topic: str, hour: str
) -> LoadReport:
    """Load (or backfill) one topic's hour; returns what was committed. Checks the topic's
    name and the hour before anything is read or written."""
    try:
        check_topic(topic)
        parse_hour(hour)
    except (PipelineTopicError, ValueError) as exc:
        raise LoadError(str(exc)) from None
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    timer = _Timer()
    lock = TopicLock(
        settings.zookeeper, wh.uri, topic, f"hour {hour} run {run_id}", settings.lock_timeout
    )
    with lock:
        timer.lap("lock")
        recovered = recover(wh, topic, lock.fence)
        plan = plan_hour(wh, settings, topic, hour, spark.sparkContext.defaultParallelism)
        try:
            arrow_writes = parquet_tasks.use_arrow_writer(
                settings.parquet_writer,
                wh.uri,
                spark.conf.get("spark.sql.parquet.compression.codec"),
            )
        except parquet_tasks.ParquetWriterChoiceError as exc:
            raise LoadError(f"topic {topic!r} {hour}: {exc}") from None
        timer.lap("plan")
        staging = Staging(wh, topic, hour, run_id)
        try:
            checkpoint = _stage(spark, wh, settings, plan, staging, arrow_writes, timer)
            lock.check()  # a load whose session expired must not commit beside the next one
        except BaseException:
            try:
                staging.discard()
            except Exception as exc:  # the JVM may be gone (killed): the next run cleans up
                log.warning("could not remove the staging directory %s: %s", staging.root, exc)
            raise
        # Decided from here on: whatever happens, the next load of the topic publishes it
        # (or drops it, loudly, if this load lost its lock and the next one's recovery
        # deleted the staged files already). The token fences off a publish by a load
        # whose lock expired after its check.
        staging.decide(checkpoint, lock.token)
        publish(wh, staging.root, lock.fence)
        timer.lap("commit")
    return LoadReport(checkpoint, plan.backfill, timer.seconds, recovered)


def _stage(
    spark: Any,
    wh: Warehouse,
    settings: LoadSettings,
    plan: HourPlan,
    staging: Staging,
    arrow_writes: bool,
    timer: _Timer,
) -> Checkpoint:
    """Steps 3 to 6: the new version, whole, in staging; the checkpoint that will name it."""
    topic, hour = plan.topic, plan.hour
    digest_thread = DigestThread(plan)
    digest_thread.start()
    try:
        in_driver = arrow_writes and parquet_tasks.in_driver(plan, settings.driver_write_bytes)
        good_count, tasks_bad = _write_rows(spark, wh, plan, staging, arrow_writes, in_driver)
        timer.lap("read+write")
        digest = digest_thread.digest()
    finally:
        digest_thread.join(timeout=0)
    timer.lap("rows_sha256 wait")
    bad_count = _check_counts(plan, digest, good_count, tasks_bad)
    if bad_count:  # rare: the range is read again for them
        _write_bad_records(
            spark, wh, plan, staging, good_count, bad_count, digest, settings.max_bad_fraction
        )
        timer.lap("bad records")

    # Names the rows_sha256 thread proved distinct (the usual hour) need no Spark check,
    # and the summary's profile is counted from the same headers ("names": no Spark job).
    # Else a Spark job counts the profile alone ("profile": no shuffle of every key), or
    # with the check ("dedup").
    from pyspark.sql import functions as F

    previous = plan.previous
    names = digest_thread.names
    seen = None
    profile = None
    drops: list[Any] = []
    # `_audit` only: the rows of names seen with different counts (load_summary: conflicts)
    conflicts: list[list[Any]] | None = [] if topic == AUDIT_TOPIC else None
    written = None
    proved = bad_count == 0 and names_proved_distinct(wh, names, previous)
    phase = "names" if proved else "dedup"
    if good_count:
        if proved and names is not None:
            profile = names.profile(topic, hour)
        if profile is None:
            written = spark.read.parquet(staging.rows)
            query = profile_query(header_rows(written, topic, F.lit(hour)))
        if proved and profile is None:
            phase = "profile"
            profile = query.toPandas()
        elif not proved:
            assert written is not None  # no names proved: the profile is counted here
            if previous is not None and previous.rows:
                seen = spark.read.parquet(*wh.data_files(previous))
            # The summary's profile is counted in the same job as the keys (one job); an
            # AuditCount's fields are compared too: one re-sent with another count is a
            # conflict the summary keeps for the audit (dedup.py).
            own = written.columns[written.columns.index("load_hour") + 1 :]
            fields = own if topic == AUDIT_TOPIC else None
            drops, profile, found = duplicates(written, seen, query, fields)
            if fields is not None:
                conflicts = _conflict_rows(found, hour, previous)
    # No name of this hour is in the previous hour's rows now: said in its summary.
    certified = seen is not None or proved or not good_count or not (previous and previous.rows)
    dropped = len(drops)
    timer.lap(phase)
    if dropped:  # rare: the rows are written again without them
        assert written is not None
        gone = spark.createDataFrame(drops, written.select(*POSITION).schema)
        # a join puts its keys first: keep the contract's column order
        written.join(F.broadcast(gone), POSITION, "left_anti").select(
            *written.columns
        ).write.parquet(staging.deduplicated)
        wh.fs.delete(staging.rows)
        wh.fs.rename(staging.deduplicated, staging.rows)
        timer.lap("rewrite")
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
            for r in plan.ranges
        ),
        rows=rows,
        duplicates_dropped=dropped,
        bad_records=bad_count,
        rows_sha256=digest.rows_sha256,
        committed_at=format_second(settings.clock()),
        version=staging.run_id,
        files=staging.data_files(),
        error_files=staging.error_files() if bad_count else (),
        offsets=LOGICAL_OFFSETS if plan.logical else BYTE_OFFSETS,
    )
    if checkpoint.messages != rows + dropped + bad_count:
        raise LoadError(
            f"topic {topic!r} {hour}: {checkpoint.messages} messages != {rows} rows + "
            f"{dropped} duplicates + {bad_count} bad records; nothing committed"
        )
    if dropped:  # the profile counted rows that went: count what stays
        profile = group_profile(header_rows(spark.read.parquet(staging.rows), topic, F.lit(hour)))
    _write_summary(wh, staging.rows, checkpoint, previous, certified, profile, conflicts)
    timer.lap("summary")
    return checkpoint


def _conflict_rows(
    found: list[dict[str, Any]], hour: str, previous: Checkpoint | None
) -> list[list[Any]]:
    """dedup's conflicting rows as the summary keeps them (load_summary.CONFLICT_COLUMNS)."""
    rows = []
    for row in found:
        where = previous.load_hour if row["previous"] and previous is not None else hour
        rows.append(
            [
                row["producer_id"],
                row["seq"],
                where,
                *(row[c] for c in POSITION),
                row["dropped"],
                row["fields"],
            ]
        )
    return sorted(rows, key=lambda r: (r[0], r[1], r[2], *(-1 if v is None else v for v in r[3:7])))


def _write_rows(
    spark: Any,
    wh: Warehouse,
    plan: HourPlan,
    staging: Staging,
    arrow_writes: bool,
    in_driver: bool = False,
) -> tuple[int, int | None]:
    """Step 3: the good rows into staging in one pass; (rows written, the bad records the
    writing tasks counted, or None when Spark's writer wrote). `in_driver` (a small hour,
    Arrow's writer): the same files written by this process, no Spark job."""
    topic, hour, readable = plan.topic, plan.hour, plan.readable
    good_count = 0
    tasks_bad: int | None = None
    # One pass writes the good rows; they are counted from the written files' footers
    # (an Observation on the write counted them in the same pass, but cost ~20 % of it:
    # its aggregation runs per row outside Spark's generated code). Bad records are the
    # messages the rows_sha256 thread counted less those rows, and are read again later.
    if readable and arrow_writes:  # the tasks that read write (parquet_tasks.py)
        wh.fs.mkdirs(staging.rows)
        if in_driver:
            written = parquet_tasks.write_rows_here(spark, plan, staging.rows)
        else:
            spark.sparkContext.setJobDescription(f"hourly load {topic} {hour}: read and write")
            written = parquet_tasks.write_rows(spark, plan, staging.rows)
            spark.sparkContext.setJobDescription(None)
        good_count = wh.fs.parquet_rows(staging.rows)
        tasks_bad = sum(w.bad for w in written)
        if good_count != sum(w.rows for w in written):
            raise LoadError(
                f"topic {topic!r} {hour}: the tasks wrote {sum(w.rows for w in written)} "
                f"rows but the staged files hold {good_count}; nothing committed"
            )
    elif readable:
        from pyspark.sql import functions as F

        good = read_rows(spark, plan).filter(F.col(ERROR_COLUMN).isNull())
        good.drop(ERROR_COLUMN, VALUE_COLUMN).write.parquet(staging.rows)
        good_count = wh.fs.parquet_rows(staging.rows)
    else:  # nothing new: an empty hour with the topic's columns
        read_rows(spark, plan).drop(ERROR_COLUMN, VALUE_COLUMN).write.parquet(staging.rows)
    if not wh.fs.exists(staging.rows):
        wh.fs.mkdirs(staging.rows)
    return good_count, tasks_bad


def _check_counts(
    plan: HourPlan, digest: RangeDigest, good_count: int, tasks_bad: int | None
) -> int:
    """The bad records: the range's messages less the rows written, checked against the
    writing tasks' own count and, for a backfill, rows_sha256 against the checkpoint's."""
    topic, hour, own = plan.topic, plan.hour, plan.own
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
    return bad_count


def _write_bad_records(
    spark: Any,
    wh: Warehouse,
    plan: HourPlan,
    staging: Staging,
    good_count: int,
    bad_count: int,
    digest: RangeDigest,
    max_bad_fraction: float,
) -> None:
    """Step 4: over --max-bad-fraction fails the load; else they go to staging's errors/."""
    from pyspark.sql import functions as F

    topic, hour = plan.topic, plan.hour
    messages = sum(digest.messages.values())
    bad = read_rows(spark, plan).filter(F.col(ERROR_COLUMN).isNotNull())
    if bad_count > max_bad_fraction * messages:
        _check_bad_count(bad.count(), good_count, messages, topic, hour)
        reasons = [r[0] for r in bad.select(ERROR_COLUMN).limit(3).collect()]
        raise TooManyBadRecordsError(
            f"topic {topic!r} {hour}: {bad_count} of {messages} messages "
            f"({bad_count / messages:.2%}) are bad records, over --max-bad-fraction "
            f"{max_bad_fraction:g} "
            f"({int(max_bad_fraction * messages)} allowed); nothing "
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


def _check_bad_count(bad: int, good: int, messages: int, topic: str, hour: str) -> None:
    """Spark's reads agree with the rows_sha256 thread's count of the range: good rows and
    bad records make up every message (else a read lost or invented some)."""
    if good + bad != messages:
        raise LoadError(
            f"topic {topic!r} {hour}: Spark read {good + bad} messages ({good} rows, {bad} bad "
            f"records) but the range holds {messages}; nothing committed"
        )


def _write_summary(
    wh: Warehouse,
    rows_dir: str,
    checkpoint: Checkpoint,
    previous: Checkpoint | None,
    certified: bool,
    profile: Any,
    conflicts: list[list[Any]] | None = None,
) -> None:
    """Step 6: the hour's _load_summary.json (the format: pipeline_warehouse.load_summary),
    written into the staged rows so that it is published with them; the audit reads it
    instead of the rows. From the profile of the rows as they stay (None: there are none);
    `certified`: no name of the hour is in the previous hour's load (the load made it so);
    `conflicts` (`_audit` only): the rows of the names the load saw with different contents."""
    groups: list[list[Any]] = []
    names: list[list[Any]] = []
    if profile is not None:
        groups = frame_rows(profile, load_summary.GROUP_COLUMNS)
        # the duplicates were dropped: every named row left is a distinct name
        names = frame_rows(names_without_repeats(profile), load_summary.NAME_COLUMNS)
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
                load_summary.data_files(
                    wh.fs, wh.hour_dir(previous.topic, previous.load_hour), previous.files
                ),
            )
            if previous is not None and certified
            else None
        ),
        conflicts=conflicts,
    )
    load_summary.write(wh.fs, load_summary.summary_path(rows_dir), summary)
