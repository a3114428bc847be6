"""Exactly once within an hour and across hours: which rows of a load are repeats.

An event is named by (producer_id, seq) (docs/design.md §3.4). The first row of a name in
(broker_id, partition, offset, index) order stays; every later one goes, and so does every
name the previous hour's load already holds. Nearly every hour has none, and that is proved
without Spark when it can be (`names_proved_distinct`, from the names the rows_sha256 thread
read); otherwise `duplicates` finds them with one Spark shuffle of hashed keys.
"""

from __future__ import annotations

from typing import Any

from spark_apps.load.event_names import NameKeys
from spark_apps.load.read import KEY, POSITION
from spark_apps.warehouse import load_summary
from spark_apps.warehouse.checkpoint import Checkpoint, Warehouse


def names_proved_distinct(
    wh: Warehouse, names: NameKeys | None, previous: Checkpoint | None
) -> bool:
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
        names=previous.files,
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


def duplicates(
    rows: Any, previous_rows: Any | None, profile: Any | None = None
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
    from pyspark.sql import functions as F

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
