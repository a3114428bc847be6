"""The `_audit` topic's rows: AuditCount events, deduplicated, checked, summed (docs/design.md §3.5).

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

from spark_apps.warehouse.hours import HOUR_MS, WINDOW_MS, format_hour, hour_ms
from spark_apps.warehouse.layout import AUDIT_TOPIC
from spark_apps.warehouse.load_summary import millis, plain_value
from spark_apps.warehouse.loads import CommittedLoad

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

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
    from pyspark.sql import functions as F

    from spark_apps.warehouse.load_summary import load_hour_column

    bad_counts: dict[str, dict[str, int]] = {}
    bad_examples: dict[str, list[dict[str, Any]]] = {}
    empty = pd.DataFrame({"topic": [], "tier": [], "window_start": [], "count": []})
    _add_undecodable(spark, wh, loads, bad_record_hour, bad_counts, bad_examples)
    if not loads:
        return AuditEvents(empty, bad_counts, bad_examples, 0, {}, {})

    raw = spark.read.parquet(*[uri for load in loads for uri in load.data_uris(wh)])
    topic_col = audited_topic_column(raw.columns)
    position_cols = [
        c for c in ("load_hour", "broker_id", "partition", "offset", "index") if c in raw.columns
    ]
    # One Spark job brings the events to the driver: they are few (one per producer, topic,
    # tier, window and delta: they grow with the producers, never with the events counted),
    # and a Spark job per step (index, deduplication, checks, sums, examples) cost more
    # than all of them together.
    ev = raw.select(
        F.col("producer_id").cast("string"),
        F.col("seq").cast("long").alias("seq"),
        F.col(topic_col).cast("string").alias("a_topic"),
        F.col("tier").cast("string"),
        millis(raw, "window_start").alias("ws"),
        F.col("window_ms").cast("long").alias("wms"),
        F.col("count").cast("long").alias("cnt"),
        *[F.col(c) for c in position_cols if c != "load_hour"],
        load_hour_column().alias("load_hour"),
    ).toPandas()
    return _check_and_sum(ev, hours, warehouse_topics, position_cols, bad_counts, bad_examples)


def _hour_names(ms: pd.Series) -> pd.Series:
    """'YYYY-MM-DDTHH' of each instant (ms), None where it is null."""
    import pandas as pd

    out = pd.Series([None] * len(ms), index=ms.index, dtype=object)
    known = ms.notna()
    if known.any():
        stamps = pd.to_datetime(ms[known].astype("int64"), unit="ms", utc=True)
        out[known] = stamps.dt.strftime("%Y-%m-%dT%H")
    return out


def _check_and_sum(
    ev: pd.DataFrame,
    hours: list[datetime],
    warehouse_topics: Sequence[str],
    position_cols: list[str],
    bad_counts: dict[str, dict[str, int]],
    bad_examples: dict[str, list[dict[str, Any]]],
) -> AuditEvents:
    """The module doc's rules on the `_audit` rows (ev: producer_id, seq, a_topic, tier, ws,
    wms, cnt and the positions), for `hours`."""
    import pandas as pd

    for c in ("seq", "ws", "wms", "cnt"):
        ev[c] = pd.array(ev[c].tolist(), dtype="Int64")
    ev["hour"] = _hour_names(ev["ws"])
    index: dict[str, dict[str, int]] = {}
    index_by_topic: dict[str, dict[str, dict[str, int]]] = {}
    timed = ev[ev["hour"].notna()]
    for (load_hour, hour, topic), n in (
        timed.groupby(["load_hour", "hour", "a_topic"], dropna=False).size().items()
    ):
        per_load = index.setdefault(load_hour, {})
        per_load[hour] = per_load.get(hour, 0) + int(n)
        if not pd.isna(topic):
            index_by_topic.setdefault(load_hour, {}).setdefault(topic, {})[hour] = int(n)

    # Only the audited hours' events (and those without a usable window, for their load hour).
    lo_ms, hi_ms = hour_ms(min(hours)), hour_ms(max(hours)) + HOUR_MS
    names = {format_hour(h) for h in hours}
    in_hours = ev["ws"].notna() & (ev["ws"] >= lo_ms) & (ev["ws"] < hi_ms)
    no_window = ev["ws"].isna() & ev["load_hour"].isin(names)
    ev = ev[(in_hours | no_window).fillna(False).astype(bool)]

    content = ["a_topic", "tier", "ws", "wms", "cnt"]
    header = ["producer_id", "seq"]
    named = ev["producer_id"].notna() & ev["seq"].notna()
    keyed = ev[named]
    # per header: its smallest content (nulls first, as Spark orders structs), whether another
    # content has the same header, and its first position
    lo = keyed.sort_values(content, na_position="first").drop_duplicates(header)
    contents = keyed.drop_duplicates([*header, *content]).groupby(header).size()
    first_pos = keyed.sort_values(position_cols, na_position="first").drop_duplicates(header)
    checked = lo[[*header, *content]].merge(
        first_pos[[*header, *position_cols]], on=header, how="left"
    )
    conflicting = checked.set_index(header).index.map(contents).to_numpy() > 1
    checked["reason"] = _reasons(checked, conflicting, set(warehouse_topics))
    good = checked[checked["reason"].isna()]
    sums = (
        good.groupby(["a_topic", "tier", "ws"], as_index=False)["cnt"]
        .sum()
        .rename(columns={"a_topic": "topic", "ws": "window_start", "cnt": "count"})
    )
    sums = sums.astype({"window_start": "int64", "count": "int64"})

    no_header = ev[~named].assign(reason="no header key (producer_id or seq is null)")
    no_header = no_header.assign(a_topic=None, tier=None, cnt=pd.NA)
    parts = [f for f in (checked[checked["reason"].notna()], no_header) if len(f)]
    bad = pd.concat(parts, ignore_index=True) if parts else no_header
    if len(bad):
        hour_of_window = _hour_names(bad["ws"])
        bad["audit_hour"] = hour_of_window.where(hour_of_window.notna(), bad["load_hour"])
        for (audit_hour, reason), n in bad.groupby(["audit_hour", "reason"]).size().items():
            hour_counts = bad_counts.setdefault(audit_hour, {})
            hour_counts[reason] = hour_counts.get(reason, 0) + int(n)
        ordered = bad.sort_values(["audit_hour", *position_cols], na_position="first")
        for _, row in ordered.groupby("audit_hour").head(EXAMPLES_PER_HOUR).iterrows():
            example = {c: plain_value(row[c]) for c in position_cols}
            example.update(
                reason=row["reason"],
                topic=plain_value(row["a_topic"]),
                tier=plain_value(row["tier"]),
                window_start=plain_value(row["ws"]),
                count=plain_value(row["cnt"]),
            )
            bad_examples.setdefault(row["audit_hour"], []).append(example)
    events_read = sum(sum(v.values()) for v in index.values())
    return AuditEvents(sums, bad_counts, bad_examples, events_read, index, index_by_topic)


def _reasons(checked: pd.DataFrame, conflicting: Any, known_topics: set[str]) -> pd.Series:
    """Why each deduplicated event is bad (the first rule it breaks), or None."""
    import pandas as pd

    rules = [
        (
            conflicting,
            lambda r: "two events with one header (producer_id, seq) and different counts",
        ),
        (
            (checked["cnt"].isna() | (checked["cnt"] < 0)).fillna(True).to_numpy(bool),
            lambda r: "negative or missing count",
        ),
        (
            (checked["wms"].isna() | (checked["wms"] != WINDOW_MS)).fillna(True).to_numpy(bool),
            lambda r: f"window is not {WINDOW_MS} ms long",
        ),
        (
            (checked["ws"].isna() | (checked["ws"] % WINDOW_MS != 0)).fillna(True).to_numpy(bool),
            lambda r: "window start is not aligned to 10 minutes",
        ),
        (
            (~checked["tier"].isin(list(TIERS)) | checked["tier"].isna()).to_numpy(bool),
            lambda r: f"unknown tier {'null' if pd.isna(r['tier']) else r['tier']}",
        ),
        (
            (~checked["a_topic"].isin(list(known_topics)) | checked["a_topic"].isna()).to_numpy(
                bool
            ),
            lambda r: (
                "count for a topic with no data in the warehouse: "
                + ("null" if pd.isna(r["a_topic"]) else str(r["a_topic"]))
            ),
        ),
    ]
    reasons: list[str | None] = [None] * len(checked)
    for mask, say in rules:
        for i in [int(j) for j in mask.nonzero()[0]]:
            if reasons[i] is None:
                reasons[i] = say(checked.iloc[i])
    return pd.Series(reasons, index=checked.index, dtype=object)


def _add_undecodable(
    spark: SparkSession,
    wh: str,
    loads: list[CommittedLoad],
    bad_record_hour: dict[datetime, datetime],
    bad_counts: dict[str, dict[str, int]],
    bad_examples: dict[str, list[dict[str, Any]]],
) -> None:
    """Count the `_audit` records the load could not decode, with the reasons it kept."""
    from spark_apps.warehouse.hadoop import HadoopFS

    fs = HadoopFS(spark)
    for load in loads:
        if load.bad_records <= 0 or load.load_hour not in bad_record_hour:
            continue
        hour = format_hour(bad_record_hour[load.load_hour])
        counts = bad_counts.setdefault(hour, {})
        reasons: dict[str, int] = {}
        examples: list[dict[str, Any]] = []
        uris = [uri for uri in load.errors_uris(wh) if fs.exists(uri)]
        if uris:
            errors = spark.read.parquet(*uris)
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
