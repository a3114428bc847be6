"""Exactly once within an hour and across hours: which rows of a load are repeats.

An event is named by (producer_id, seq) (docs/design.md §3.4). The first row of a name in
(broker_id, partition, offset, index) order stays; every later one goes, and so does every
name the previous hour's load already holds. Nearly every hour has none, and that is proved
without Spark when it can be (`names_proved_distinct`, from the names the rows_sha256 thread
read); otherwise `duplicates` finds them with one Spark shuffle of hashed keys.

A name whose rows differ in the event's own fields is a conflict, not a re-send: for the
`_audit` topic (an AuditCount re-sent with another count) `duplicates` also returns every row
of such a name, so that the load keeps them in its summary (load_summary: `conflicts`) and the
audit reports them instead of summing the one that stayed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import Checkpoint, Warehouse
from spark_apps.load.event_names import NameKeys
from spark_apps.load.frames import KEY, POSITION
from spark_apps.summary_counts import millis


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


class Repeats(NamedTuple):
    """What `duplicates` found."""

    drops: list[tuple[Any, ...]]  # POSITION of every row that goes
    profile: Any  # the profile query's result (pandas), or None
    # with `fields`: every row (this hour's and the previous hour's) of a name whose rows
    # differ in those fields: producer_id, seq, POSITION, previous, dropped, fields (a dict)
    conflicts: list[dict[str, Any]]


def duplicates(
    rows: Any,
    previous_rows: Any | None,
    profile: Any | None = None,
    fields: Sequence[str] | None = None,
) -> Repeats:
    """Which rows go: every (producer_id, seq) but its first in (broker_id, partition, offset,
    index) order, and every one the previous hour has; `profile` (a small aggregation query)
    collected, as pandas, in the same job; with `fields` (the event's own columns), the rows
    of the names seen with different values of them (the module doc).

    Nearly every key is unique, so the keys are first counted as two longs, (xxhash64 of
    producer_id, seq), read from the written Parquet (two columns) and shuffled once: no
    string and no position crosses the shuffle for a unique key, and with no repeat (the
    usual hour) that is all. Only the rows whose hashed key repeats (a real repeat, or two
    producers hashing alike) are then compared by producer_id, position and fields.
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
        return Repeats([], profiled, [])
    repeated = rows.sparkSession.createDataFrame(found, repeated_keys.schema)
    if len(found) <= BROADCAST_REPEATS:
        repeated = F.broadcast(repeated)
    else:
        repeated = repeated_keys
    # the fields both hours have (a schema may have grown a field between them)
    compared = [f for f in fields or () if previous_rows is None or f in previous_rows.columns]
    at = F.struct(*POSITION)
    candidates = rows.select(
        *KEY,
        hashed,
        at.alias("_at"),
        at.alias("_pos"),
        F.lit(False).alias("_seen"),
        *([_fields_text(rows, compared).alias("_c")] if fields else []),
    )
    if previous_rows is not None:
        candidates = candidates.unionByName(
            previous_rows.select(
                *KEY,
                hashed,
                F.lit(None).cast(candidates.schema["_at"].dataType).alias("_at"),
                F.struct(
                    *[F.col(c) if c in previous_rows.columns else F.lit(None) for c in POSITION]
                )
                .cast(candidates.schema["_pos"].dataType)
                .alias("_pos"),
                F.lit(True).alias("_seen"),
                *([_fields_text(previous_rows, compared).alias("_c")] if fields else []),
            )
        )
    candidates = candidates.join(repeated, ["_h", "seq"], "left_semi")
    verdict = candidates.groupBy(*KEY).agg(
        F.count(F.lit(1)).alias("_n"),
        F.min("_at").alias("_first"),  # this hour's first (nulls: the previous hour's)
        F.max("_seen").alias("_any_seen"),
        *([F.min("_c").alias("_cmin"), F.max("_c").alias("_cmax")] if fields else []),
    )
    goes = (
        ~F.col("_seen")
        & (F.col("_n") > 1)
        & (F.col("_any_seen") | (F.col("_at") != F.col("_first")))
    )
    conflict = (F.col("_cmin") != F.col("_cmax")) if fields else F.lit(False)
    # header keys are never null (the header's fields are required)
    found_rows = (
        candidates.join(verdict, KEY)
        .select(
            *KEY,
            *[F.col("_pos")[c].alias(c) for c in POSITION],
            "_seen",
            F.coalesce(goes, F.lit(False)).alias("_goes"),
            F.coalesce(conflict, F.lit(False)).alias("_conflict"),
            (F.col("_c") if fields else F.lit(None).cast("string")).alias("_c"),
        )
        .filter(F.col("_goes") | F.col("_conflict"))
        .collect()
    )
    drops = [tuple(r[c] for c in POSITION) for r in found_rows if r["_goes"]]
    conflicts = [
        {
            "producer_id": r["producer_id"],
            "seq": r["seq"],
            **{c: r[c] for c in POSITION},
            "previous": bool(r["_seen"]),
            "dropped": bool(r["_goes"]),
            "fields": json.loads(r["_c"]),
        }
        for r in found_rows
        if r["_conflict"]
    ]
    return Repeats(drops, profiled, conflicts)


def _fields_text(rows: Any, names: Sequence[str]) -> Any:
    """The event's own fields as one JSON text, compared between a name's rows (timestamps as
    epoch ms, whatever type the load kept them as)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    columns = [
        millis(rows, name).alias(name)
        if isinstance(rows.schema[name].dataType, TimestampType | TimestampNTZType)
        else F.col(f"`{name}`").alias(name)
        for name in names
    ]
    return F.to_json(F.struct(*columns)) if columns else F.lit("{}")
