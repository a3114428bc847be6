"""The `_audit` topic's rows: AuditCount events, deduplicated, checked, summed (DESIGN §3.5).

An audited producer (and every tier that forwards events, such as the mirror) publishes counts
as deltas: several events may count one topic, tier and window, and the total is their sum
after deduplicating the audit events themselves by their header (`producer_id`, `seq`).

Each of these is a bad audit event, reported in the results with its reason, never summed and
never silently dropped:

- a row without a header key (`producer_id` or `seq` null);
- two events with one header but different contents;
- a count that is negative (or missing);
- a window that does not align: `window_ms` other than 10 minutes, or a `window_start` that is
  not a multiple of it;
- a tier that is not one the audit knows (`producer`, `mirror`);
- a count for a topic that has no data in the warehouse (no committed load at all);
- an `_audit` record that the load could not decode (a bad record of the load: counted from the
  load's checkpoint, with the reasons it kept under `_errors/_audit/`).

A bad event belongs to the audited hour of its window (the hour of `window_start`), or, when it
has none, to the hour of the load that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .audit_inputs import CommittedLoad
from .audit_layout import AUDIT_TOPIC
from .hours import HOUR_MS, WINDOW_MS, format_hour, hour_ms

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

TIERS = {"producer": "produced", "mirror": "mirrored"}  # tier -> result column
# The AuditCount's own `topic` field, as the load names its column: the row's `topic` column is
# the warehouse topic (`_audit`), so the event's field cannot keep that name.
AUDITED_TOPIC_COLUMNS = ("event_topic", "audited_topic", "topic_")
EXAMPLES_PER_HOUR = 20


@dataclass
class AuditEvents:
    """What the `_audit` rows say, for the hours audited."""

    sums: pd.DataFrame  # topic, tier, window_start (ms), count: good events, summed
    bad_counts: dict[str, dict[str, int]]  # audit hour -> reason -> events
    bad_examples: dict[str, list[dict[str, Any]]]  # audit hour -> a few events with positions
    events_read: int
    index: dict[str, dict[str, int]]  # load hour -> hour of window_start -> events (all read)
    index_by_topic: dict[str, dict[str, dict[str, int]]]  # load hour -> topic -> hour -> events


def audited_topic_column(columns: Sequence[str]) -> str:
    for name in AUDITED_TOPIC_COLUMNS:
        if name in columns:
            return name
    raise ValueError(
        f"the {AUDIT_TOPIC} rows have no column for the AuditCount's topic field "
        f"(looked for {', '.join(AUDITED_TOPIC_COLUMNS)}; the rows have {', '.join(columns)})"
    )


def _millis(df: DataFrame, name: str) -> Column:
    """A timestamp-millis field as milliseconds, whether the load kept it as timestamp or long."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if isinstance(df.schema[name].dataType, TimestampType | TimestampNTZType):
        return F.unix_millis(F.col(name).cast("timestamp"))
    return F.col(name).cast("long")


def read_audit_events(
    spark: SparkSession,
    wh: str,
    loads: list[CommittedLoad],
    hours: list[datetime],
    warehouse_topics: Sequence[str],
    bad_record_hour: dict[datetime, datetime],
) -> AuditEvents:
    """Read, deduplicate, check and sum the AuditCount events of `loads` for `hours`.

    `bad_record_hour` maps a load hour to the audited hour its undecodable records belong to.
    """
    import pandas as pd
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from .load_summary import load_hour_column

    bad_counts: dict[str, dict[str, int]] = {}
    bad_examples: dict[str, list[dict[str, Any]]] = {}
    empty = pd.DataFrame({"topic": [], "tier": [], "window_start": [], "count": []})
    _add_undecodable(spark, wh, loads, bad_record_hour, bad_counts, bad_examples)
    if not loads:
        return AuditEvents(empty, bad_counts, bad_examples, 0, {}, {})

    raw = spark.read.parquet(*[load.data_uri(wh) for load in loads])
    topic_col = audited_topic_column(raw.columns)
    ev = raw.select(
        F.col("producer_id"),
        F.col("seq").cast("long").alias("seq"),
        F.col(topic_col).alias("a_topic"),
        F.col("tier"),
        _millis(raw, "window_start").alias("ws"),
        F.col("window_ms").cast("long").alias("wms"),
        F.col("count").cast("long").alias("cnt"),
        load_hour_column().alias("load_hour"),
        *[F.col(c) for c in ("broker_id", "partition", "offset", "index") if c in raw.columns],
    )
    by_hour = F.date_format(F.timestamp_millis(F.expr(f"ws - ws % {HOUR_MS}")), "yyyy-MM-dd'T'HH")
    index_rows = ev.groupBy("load_hour", by_hour.alias("hour"), "a_topic").count()
    first = min(hours)
    last = max(hours)
    lo_ms, hi_ms = hour_ms(first), hour_ms(last) + HOUR_MS
    # Only the audited hours' events (and those without a usable window, for their load hour).
    in_hours = (F.col("ws") >= lo_ms) & (F.col("ws") < hi_ms)
    names = [format_hour(h) for h in hours]
    no_window = F.col("ws").isNull() & F.col("load_hour").isin(names)
    ev = ev.where(in_hours | no_window)

    content = F.struct("a_topic", "tier", "ws", "wms", "cnt")
    position_cols = [
        c for c in ("load_hour", "broker_id", "partition", "offset", "index") if c in ev.columns
    ]
    keyed = ev.where(F.col("producer_id").isNotNull() & F.col("seq").isNotNull())
    deduped = keyed.groupBy("producer_id", "seq").agg(
        F.min(content).alias("lo"),
        F.max(content).alias("hi"),
        F.min(F.struct(*position_cols)).alias("pos"),
    )
    known_topics = list(warehouse_topics)
    reason = (
        F.when(
            F.col("lo") != F.col("hi"),
            F.lit("two events with one header (producer_id, seq) and different counts"),
        )
        .when(F.col("lo.cnt").isNull() | (F.col("lo.cnt") < 0), F.lit("negative or missing count"))
        .when(
            F.col("lo.wms").isNull() | (F.col("lo.wms") != WINDOW_MS),
            F.lit(f"window is not {WINDOW_MS} ms long"),
        )
        .when(
            F.col("lo.ws").isNull() | (F.col("lo.ws") % WINDOW_MS != 0),
            F.lit("window start is not aligned to 10 minutes"),
        )
        .when(
            ~F.col("lo.tier").isin(list(TIERS)) | F.col("lo.tier").isNull(),
            F.concat(F.lit("unknown tier "), F.coalesce(F.col("lo.tier"), F.lit("null"))),
        )
        .when(
            ~F.col("lo.a_topic").isin(known_topics) | F.col("lo.a_topic").isNull(),
            F.concat(
                F.lit("count for a topic with no data in the warehouse: "),
                F.coalesce(F.col("lo.a_topic"), F.lit("null")),
            ),
        )
    )
    checked = deduped.select(
        F.col("lo.a_topic").alias("topic"),
        F.col("lo.tier").alias("tier"),
        F.col("lo.ws").alias("window_start"),
        F.col("lo.cnt").alias("count"),
        F.col("pos"),
        reason.alias("reason"),
    )
    sums = (
        checked.where(F.col("reason").isNull())
        .groupBy("topic", "tier", "window_start")
        .agg(F.sum("count").alias("count"))
    )
    no_header = ev.where(F.col("producer_id").isNull() | F.col("seq").isNull()).select(
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("string").alias("tier"),
        F.col("ws").alias("window_start"),
        F.lit(None).cast("long").alias("count"),
        F.struct(*position_cols).alias("pos"),
        F.lit("no header key (producer_id or seq is null)").alias("reason"),
    )
    bad = checked.where(F.col("reason").isNotNull()).unionByName(no_header)
    bad = bad.withColumn(
        "audit_hour",
        F.coalesce(
            F.date_format(
                F.timestamp_millis(F.expr(f"window_start - window_start % {HOUR_MS}")),
                "yyyy-MM-dd'T'HH",
            ),
            F.col("pos.load_hour"),
        ),
    )
    bad_by = bad.groupBy("audit_hour", "reason").count()
    ranked = bad.withColumn(
        "rank", F.row_number().over(Window.partitionBy("audit_hour").orderBy("pos"))
    ).where(F.col("rank") <= EXAMPLES_PER_HOUR)
    examples = ranked.select(
        "audit_hour", "reason", "topic", "tier", "window_start", "count", "pos"
    )
    # One query for all four answers (a Spark job costs more than these few rows): each part
    # marked by `kind`, the columns it does not have null.
    parts = {
        "index": index_rows.select(
            F.col("load_hour"),
            F.col("hour").alias("audit_hour"),
            F.col("a_topic").alias("topic"),
            F.col("count").cast("long").alias("count"),
        ),
        "bad": bad_by.select("audit_hour", "reason", F.col("count").cast("long").alias("count")),
        "example": examples,
        "sum": sums.select("topic", "tier", "window_start", F.col("count").cast("long")),
    }
    columns = {
        "load_hour": "string",
        "audit_hour": "string",
        "reason": "string",
        "topic": "string",
        "tier": "string",
        "window_start": "long",
        "count": "long",
        "pos": examples.schema["pos"].dataType.simpleString(),
    }
    answer = None
    for kind, part in parts.items():
        part = part.select(
            F.lit(kind).alias("kind"),
            *[
                (F.col(c) if c in part.columns else F.lit(None)).cast(t).alias(c)
                for c, t in columns.items()
            ],
        )
        answer = part if answer is None else answer.unionByName(part)
    assert answer is not None
    collected: dict[str, list[Any]] = {k: [] for k in parts}
    for row in answer.collect():
        collected[row["kind"]].append(row)

    index: dict[str, dict[str, int]] = {}
    index_by_topic: dict[str, dict[str, dict[str, int]]] = {}
    for row in collected["index"]:
        if row["audit_hour"] is not None:
            per_load = index.setdefault(row["load_hour"], {})
            per_load[row["audit_hour"]] = per_load.get(row["audit_hour"], 0) + int(row["count"])
            if row["topic"] is not None:
                index_by_topic.setdefault(row["load_hour"], {}).setdefault(row["topic"], {})[
                    row["audit_hour"]
                ] = int(row["count"])
    for row in collected["bad"]:
        hour_counts = bad_counts.setdefault(row["audit_hour"], {})
        hour_counts[row["reason"]] = hour_counts.get(row["reason"], 0) + int(row["count"])
    for row in sorted(collected["example"], key=lambda r: [(v is None, v) for v in r["pos"]]):
        example = {k: v for k, v in row["pos"].asDict().items()}
        example.update(
            reason=row["reason"],
            topic=row["topic"],
            tier=row["tier"],
            window_start=row["window_start"],
            count=row["count"],
        )
        bad_examples.setdefault(row["audit_hour"], []).append(example)
    sums_pd = (
        pd.DataFrame(
            [(r["topic"], r["tier"], r["window_start"], r["count"]) for r in collected["sum"]],
            columns=["topic", "tier", "window_start", "count"],
        )
        if collected["sum"]
        else empty
    )
    events_read = sum(sum(v.values()) for v in index.values())
    return AuditEvents(sums_pd, bad_counts, bad_examples, events_read, index, index_by_topic)


def _add_undecodable(
    spark: SparkSession,
    wh: str,
    loads: list[CommittedLoad],
    bad_record_hour: dict[datetime, datetime],
    bad_counts: dict[str, dict[str, int]],
    bad_examples: dict[str, list[dict[str, Any]]],
) -> None:
    """Count the `_audit` records the load could not decode, with the reasons it kept."""
    from .warehouse_fs import HadoopFS

    fs = HadoopFS(spark)
    for load in loads:
        if load.bad_records <= 0 or load.load_hour not in bad_record_hour:
            continue
        hour = format_hour(bad_record_hour[load.load_hour])
        counts = bad_counts.setdefault(hour, {})
        reasons: dict[str, int] = {}
        examples: list[dict[str, Any]] = []
        if fs.exists(load.errors_uri(wh)):
            errors = spark.read.parquet(load.errors_uri(wh))
            if "reason" in errors.columns:
                for row in errors.groupBy("reason").count().collect():
                    reasons[f"undecodable: {row['reason']}"] = int(row["count"])
                position = [
                    c for c in ("broker_id", "partition", "offset", "index") if c in errors.columns
                ]
                for row in errors.select(*position, "reason").limit(EXAMPLES_PER_HOUR).collect():
                    example = {"load_hour": load.hour_name, **row.asDict()}
                    example["reason"] = f"undecodable: {example['reason']}"
                    examples.append(example)
        described = sum(reasons.values())
        if described < load.bad_records:  # the checkpoint's count is the truth
            key = "undecodable (counted by the load's checkpoint; no reason kept)"
            reasons[key] = load.bad_records - described
        for reason, n in reasons.items():
            counts[reason] = counts.get(reason, 0) + n
        bad_examples.setdefault(hour, []).extend(examples)


def audit_hour_of_bad_records(
    loads: list[CommittedLoad], inputs_read: dict[datetime, set[datetime]]
) -> dict[datetime, datetime]:
    """Each `_audit` load with bad records -> the audited hour that reports them: its own hour
    when audited, else the first audited hour that read it."""
    out: dict[datetime, datetime] = {}
    for load in loads:
        if load.load_hour in inputs_read:
            out[load.load_hour] = load.load_hour
            continue
        for hour in sorted(inputs_read):
            if load.load_hour in inputs_read[hour]:
                out[load.load_hour] = hour
                break
    return out
