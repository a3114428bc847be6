"""The audit's result table: one row per topic and 10-minute window, and its status.

Per topic and window (docs/design.md §3.5; issue 12):

    produced       sum of the `producer` tier's counts (deduplicated AuditCount deltas)
    mirrored       sum of the `mirror` tier's counts
    loaded_rows    warehouse rows whose event time is in the window (every load that holds it)
    loaded_unique  distinct events among them, by (producer_id, seq)
    duplicates     loaded_rows - loaded_unique: events the warehouse holds more than once
    missing        produced - loaded_unique, when positive
    unaccounted    loaded_unique - produced, when positive: loaded events no producer counted
                   (an unaudited producer, or one killed before it published its counts)
    status         the first that applies:
                     lost         missing > 0 and the window's end + the grace has passed
                     incomplete   missing > 0, the grace has not passed yet
                     unaccounted  unaccounted > 0 and the window's end + the grace has passed
                     pending      unaccounted > 0, the grace has not passed yet: the counts
                                  can still come (a producer publishes a window's counts after
                                  it ends, so the hour's last window's land in the next
                                  hour's `_audit` load)
                     no_data      nothing produced, nothing loaded
                     complete     produced = loaded_unique > 0
                   Within the grace nothing is a failure; after it, lost and unaccounted are.
    audited_at     the audit's clock (`--now`, or the wall clock)

A window `unaccounted` or `pending` also names, in the hour's `_summary.json` and on its page,
the producers whose events it holds and that published no `producer` count for it
(`uncounted_producers`): an audit event carries its producer's id in its header, so a producer
that publishes no counts at all (one written with confluent-kafka, say) or that was killed before
it published them is named by its events' `producer_id`. Events without a producer_id name none.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline_warehouse.layout import RESULT_COLUMNS
from pipeline_warehouse.time_format import (
    HOUR_MS,
    WINDOW_MS,
    WINDOWS_PER_HOUR,
    format_second,
    hour_ms,
)

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.types import StructType


def window_status(
    produced: int,
    loaded_rows: int,
    loaded_unique: int,
    window_end_ms: int,
    now_ms: int,
    grace_ms: int,
) -> str:
    """The status of one window (see the module doc); the vectorized form is `statuses`."""
    missing = produced - loaded_unique
    past_grace = now_ms >= window_end_ms + grace_ms
    if missing > 0:
        return "lost" if past_grace else "incomplete"
    if loaded_unique > produced:
        return "unaccounted" if past_grace else "pending"
    if produced == 0 and loaded_rows == 0:
        return "no_data"
    return "complete"


def statuses(frame: pd.DataFrame, now_ms: int, grace_ms: int) -> pd.Series:
    """`window_status` of every row of a frame with produced, loaded_rows, loaded_unique, window."""
    import numpy as np
    import pandas as pd

    missing = frame["produced"] - frame["loaded_unique"]
    past_grace = now_ms >= frame["window"] + WINDOW_MS + grace_ms
    uncounted = frame["loaded_unique"] > frame["produced"]
    choices = np.select(
        [
            (missing > 0) & past_grace,
            missing > 0,
            uncounted & past_grace,
            uncounted,
            (frame["produced"] == 0) & (frame["loaded_rows"] == 0),
        ],
        ["lost", "incomplete", "unaccounted", "pending", "no_data"],
        default="complete",
    )
    return pd.Series(choices, index=frame.index, dtype="object")


def build_results(
    topics: Sequence[str],
    hours: Sequence[datetime],
    loaded: pd.DataFrame,
    counted: pd.DataFrame,
    now: datetime,
    grace_ms: int,
) -> pd.DataFrame:
    """The result rows of `hours` for `topics`, plus `audit_hour` (str) and `window` (ms).

    `loaded`: topic, window, loaded_rows, loaded_unique (reconcile); `counted`: topic,
    tier, window_start, count (events, good events summed).
    """
    import pandas as pd

    from pipeline_warehouse.time_format import format_hour
    from spark_apps.audit.audit_counts import TIERS

    grid = pd.DataFrame(
        [
            (topic, format_hour(hour), hour_ms(hour) + i * WINDOW_MS)
            for hour in hours
            for topic in topics
            for i in range(WINDOWS_PER_HOUR)
        ],
        columns=["topic", "audit_hour", "window"],
    )
    frame = grid.merge(
        loaded[["topic", "window", "loaded_rows", "loaded_unique"]],
        on=["topic", "window"],
        how="left",
    )
    for tier, column in TIERS.items():
        sums = counted[counted["tier"] == tier][["topic", "window_start", "count"]].rename(
            columns={"window_start": "window", "count": column}
        )
        frame = frame.merge(sums, on=["topic", "window"], how="left")
    counts = ["produced", "mirrored", "loaded_rows", "loaded_unique"]
    frame[counts] = frame[counts].fillna(0).astype("int64")
    frame["duplicates"] = frame["loaded_rows"] - frame["loaded_unique"]
    frame["missing"] = (frame["produced"] - frame["loaded_unique"]).clip(lower=0)
    frame["unaccounted"] = (frame["loaded_unique"] - frame["produced"]).clip(lower=0)
    now_ms = int(now.timestamp() * 1000)
    frame["status"] = statuses(frame, now_ms, grace_ms)
    frame["window_start"] = pd.to_datetime(frame["window"], unit="ms", utc=True)
    frame["window_end"] = pd.to_datetime(frame["window"] + WINDOW_MS, unit="ms", utc=True)
    frame["audited_at"] = (
        pd.Timestamp(now).tz_convert("UTC")
        if pd.Timestamp(now).tzinfo
        else pd.Timestamp(now, tz="UTC")
    )
    return (
        frame[[*RESULT_COLUMNS, "audit_hour", "window"]]
        .sort_values(["audit_hour", "topic", "window"])
        .reset_index(drop=True)
    )


UNCOUNTED_SHOWN = 10  # producer ids named per window; `more` says how many others


def uncounted_producers(
    results: pd.DataFrame, profile: pd.DataFrame, counters: pd.DataFrame | None
) -> dict[str, list[dict[str, Any]]]:
    """audit hour -> its `unaccounted` and `pending` windows, each with the producers whose
    events it holds and who published no good `producer` count for it (the module doc).

    `profile`: topic, window, producer_id, rows (reconcile: every load read); `counters`:
    topic, window_start, producer_id (audit_counts). Per window: topic, window_start (ISO),
    status, unaccounted, producer_ids (the UNCOUNTED_SHOWN with the most rows, then by name),
    more (how many others).
    """
    waiting = results[results["status"].isin(["unaccounted", "pending"])]
    if not len(waiting):
        return {}
    held = profile[profile["producer_id"].notna() & profile["window"].notna()]
    held = (
        held.astype({"window": "int64", "rows": "int64"})
        .groupby(["topic", "window", "producer_id"], as_index=False)["rows"]
        .sum()
    )
    if counters is not None and len(counters):
        counted = counters.rename(columns={"window_start": "window"})[
            ["topic", "window", "producer_id"]
        ].drop_duplicates()
        held = held.merge(counted, how="left", indicator=True)
        held = held[held["_merge"] == "left_only"].drop(columns="_merge")
    held = held.sort_values(["rows", "producer_id"], ascending=[False, True])
    ids = {key: list(group["producer_id"]) for key, group in held.groupby(["topic", "window"])}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in waiting.sort_values(["audit_hour", "topic", "window"]).itertuples():
        named = ids.get((r.topic, r.window), [])
        out.setdefault(str(r.audit_hour), []).append(
            {
                "topic": str(r.topic),
                "window_start": format_second(datetime.fromtimestamp(r.window / 1000, UTC)),
                "status": str(r.status),
                "unaccounted": int(r.unaccounted),
                "producer_ids": [str(p) for p in named[:UNCOUNTED_SHOWN]],
                "more": max(0, len(named) - UNCOUNTED_SHOWN),
            }
        )
    return out


def result_schema() -> StructType:
    """The table as Spark reads it (the files `parquet_bytes` writes): RESULT_COLUMNS, and
    `audit_hour` from the directory name."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    types = {"topic": StringType(), "status": StringType()}
    times = {"window_start", "window_end", "audited_at"}
    fields = [
        StructField(
            c,
            types.get(c, TimestampType() if c in times else LongType()),
            nullable=c not in ("topic", "window_start"),
        )
        for c in RESULT_COLUMNS
    ]
    return StructType([*fields, StructField("audit_hour", StringType(), False)])


def parquet_bytes(results: pd.DataFrame) -> bytes:
    """One audited hour's rows as a Parquet file (snappy), with the types Spark writes for
    `result_schema` (timestamps as INT64 micros in UTC, the session's
    outputTimestampType): written by pyarrow on the driver, since a Spark job to write a few
    KB cost 0.1-0.2 s of an hourly audit."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    times = {"window_start", "window_end", "audited_at"}
    schema = pa.schema(
        [
            pa.field(
                c,
                pa.string()
                if c in ("topic", "status")
                else pa.timestamp("us", tz="UTC")
                if c in times
                else pa.int64(),
                nullable=c not in ("topic", "window_start"),
            )
            for c in RESULT_COLUMNS
        ]
    )
    frame = results[list(RESULT_COLUMNS)]
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


def topic_statuses(results: pd.DataFrame) -> dict[str, dict[str, dict[str, int]]]:
    """audit hour -> topic -> status -> windows."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (hour, topic, status), n in (
        results.groupby(["audit_hour", "topic", "status"]).size().items()
    ):
        out.setdefault(str(hour), {}).setdefault(str(topic), {})[str(status)] = int(n)
    return out


def window_bounds_ms(hour: datetime) -> tuple[int, int]:
    start = hour_ms(hour)
    return start, start + HOUR_MS
