"""The producers' counts: the `_audit` topic's AuditCount events, deduplicated, checked, summed
(docs/design.md §3.5).

An audited producer (and every tier that forwards events, such as the mirror) publishes counts
as deltas: several events may count one topic, tier and window, and the total is their sum
after deduplicating the audit events themselves by their header (`producer_id`, `seq`).

A count is arbitrary data from a producer, so every field is checked before it is summed. Each
of these is a bad audit event, reported in the results with its reason, never summed and never
silently dropped:

- a row without a header key (`producer_id` or `seq` null);
- events with one header but different contents (a conflict): every version is bad, and none
  is summed, since nothing says which one is true; the reason names their counts. The hourly
  load keeps only the first row of a header, so it keeps the rows of such a name in its
  summary (load_summary: `conflicts`), which the audit reads for every `_audit` load that
  dropped duplicates; a load whose summary does not say (from before it did, or not the
  load's own) has its dropped duplicates reported as not compared;
- a count that is negative, missing, or above MAX_COUNT (no window holds that many events;
  and the counts of a topic, tier and window must sum to at most MAX_COUNT too, so that no
  sum can wrap around 64 bits);
- a window that does not align: `window_ms` other than 10 minutes, or a `window_start` that is
  not a multiple of it;
- a window that cannot have been counted yet or ever: starting before the epoch, or after the
  end of its load's hour (or after the audit's clock) plus the skew allowed (`--max-skew`);
- a tier that is not one the audit knows (`producer`, `mirror`);
- a topic name the pipeline refuses (pipeline_warehouse.topics: `..`, `a/b`, `_checkpoints`,
  ...), or `_audit` itself (its events are not counted): such a name never becomes a result
  row, an index entry or a path;
- a count for a topic that has no data in the warehouse (no committed load at all);
- an `_audit` record that the load could not decode (a bad record of the load: counted from the
  load's checkpoint, with the reasons it kept under `_errors/_audit/`).

A bad event belongs to the audited hour of its window (the hour of `window_start`), or, when it
has no plausible one, to the hour of the load that holds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline_warehouse import load_summary
from pipeline_warehouse.checkpoint import Checkpoint
from pipeline_warehouse.filesystem import parquet_files
from pipeline_warehouse.layout import AUDIT_TOPIC
from pipeline_warehouse.time_format import HOUR_MS, WINDOW_MS, format_hour, hour_ms, parse_hour
from pipeline_warehouse.topics import PipelineTopicError, check_topic
from spark_apps.summary_counts import plain_value

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

TIERS = {"producer": "produced", "mirror": "mirrored"}  # tier -> result column
# The AuditCount's own `topic` field, as the load names its column: the row's `topic` column is
# the warehouse topic (`_audit`), so the event's field cannot keep that name.
AUDITED_TOPIC_COLUMNS = ("event_topic", "audited_topic", "topic_")
EXAMPLES_PER_HOUR = 20
# More events than any 10-minute window holds (1.6 billion a second), and far enough below
# 2**63 that the counts of a window, each at most this and summing to at most this, never wrap.
MAX_COUNT = 10**12
HEADER = ["producer_id", "seq"]
CONTENT = ["a_topic", "tier", "ws", "wms", "cnt"]  # an AuditCount's own fields, as read
SHOWN_TOPIC = 100  # characters of a topic name shown in an example
POSITION = ["broker_id", "partition", "offset", "index"]  # a row's place in its load


@dataclass
class AuditEvents:
    """What the `_audit` rows say, for the hours audited."""

    sums: pd.DataFrame  # topic, tier, window_start (ms), count: good events, summed
    bad_counts: dict[str, dict[str, int]]  # audit hour -> reason -> events
    bad_examples: dict[str, list[dict[str, Any]]]  # audit hour -> a few events with positions
    events_read: int
    index: dict[str, dict[str, int]]  # load hour -> audit hour -> events (all read)
    index_by_topic: dict[str, dict[str, dict[str, int]]]  # load hour -> topic -> hour -> events
    # topic, window_start (ms), producer_id: who published a good `producer` count of a window
    # (an audit event's header is its producer's: the producers a window's events name and this
    # lacks published no count for them, results.uncounted_producers)
    counters: pd.DataFrame | None = None


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
    loads: list[Checkpoint],
    hours: list[datetime],
    warehouse_topics: Sequence[str],
    bad_record_hour: dict[datetime, datetime],
    now: datetime,
    skew_ms: int,
) -> AuditEvents:
    """Read, deduplicate, check and sum the AuditCount events of `loads` for `hours`.

    `bad_record_hour` maps a load hour to the audited hour its undecodable records (and its
    duplicates that could not be compared) belong to; `now` and `skew_ms` bound the windows.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_apps.hadoop_fs import HadoopFS

    bad_counts: dict[str, dict[str, int]] = {}
    bad_examples: dict[str, list[dict[str, Any]]] = {}
    empty = pd.DataFrame({"topic": [], "tier": [], "window_start": [], "count": []})
    fs = HadoopFS(spark)
    _add_undecodable(spark, fs, wh, loads, bad_record_hour, bad_counts, bad_examples)
    if not loads:
        return AuditEvents(empty, bad_counts, bad_examples, 0, {}, {})

    # The events are few (one per producer, topic, tier, window and delta: they grow with
    # the producers, never with the events counted): their files are read through the
    # warehouse's filesystem and decoded on the driver, with no Spark job (one cost 0.2 s,
    # more than the rest of this step; a job per step had cost more than all of it).
    frames = [
        _frame(pq.read_table(pa.BufferReader(fs.read_bytes(uri))), load.load_hour)
        for load in loads
        for uri in _data_files(fs, wh, load)
    ]
    ev = pd.concat(frames, ignore_index=True) if frames else _frame(pa.table({}), "")
    position_cols = ["load_hour", *POSITION]
    ev["dropped"] = False
    recorded = _recorded_conflicts(fs, wh, loads, bad_record_hour, bad_counts)
    if recorded:
        ev = pd.concat([ev, pd.DataFrame(recorded, columns=ev.columns)], ignore_index=True)
    return _check_and_sum(
        ev,
        hours,
        warehouse_topics,
        position_cols,
        bad_counts,
        bad_examples,
        int(now.timestamp() * 1000),
        skew_ms,
    )


def _data_files(fs: Any, wh: str, load: Checkpoint) -> list[str]:
    """The load's data files: its version's, or (a checkpoint from before versions) every
    Parquet file of its directory."""
    if load.files is not None:
        return load.data_uris(wh)
    return [e.uri for e in parquet_files(fs, load.data_dir(wh))]


def _frame(table: Any, load_hour: str) -> pd.DataFrame:
    """One file's `_audit` rows as the audit's frame: producer_id, seq, a_topic (the
    AuditCount's `topic` field), tier, ws (window_start in epoch ms, whether kept as a
    timestamp or a long), wms, cnt, the positions and load_hour. A column the file lacks,
    or one whose values are not of its type, is null: the events are then bad, not a crash."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def column(name: str | None, kind: Any) -> pd.Series:
        values = None
        if name is not None and name in table.column_names:
            values = table.column(name)
            if pa.types.is_timestamp(values.type):  # -> epoch ms, rounded down as Spark does
                mul, div = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 10**6)}[
                    values.type.unit
                ]
                raw = pc.cast(values, pa.int64()).to_pandas(types_mapper=_nullable)
                return (raw * mul) // div
            try:
                values = pc.cast(values, kind)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                values = None
        if values is None:
            values = pa.nulls(table.num_rows, kind)
        return values.to_pandas(types_mapper=_nullable)

    try:
        topic = audited_topic_column(table.column_names)
    except ValueError:
        topic = None
    frame = pd.DataFrame(
        {
            "producer_id": column("producer_id", pa.string()),
            "seq": column("seq", pa.int64()),
            "a_topic": column(topic, pa.string()),
            "tier": column("tier", pa.string()),
            "ws": column("window_start", pa.int64()),
            "wms": column("window_ms", pa.int64()),
            "cnt": column("count", pa.int64()),
            **{c: column(c, pa.int64()) for c in POSITION},
        }
    )
    frame["load_hour"] = load_hour
    return frame


def _nullable(kind: Any) -> Any:
    """pyarrow -> pandas: integers as nullable Int64 (a null count stays null, not NaN)."""
    import pandas as pd
    import pyarrow as pa

    return pd.Int64Dtype() if pa.types.is_integer(kind) else None


def _recorded_conflicts(
    fs: Any,
    wh: str,
    loads: list[Checkpoint],
    bad_record_hour: dict[datetime, datetime],
    bad_counts: dict[str, dict[str, int]],
) -> list[dict[str, Any]]:
    """The rows of conflicting names that the `_audit` loads kept in their summaries (only a
    load that dropped duplicates has any), as rows of the audit's frame; a load whose summary
    does not say has its dropped duplicates counted as not compared."""
    out: list[dict[str, Any]] = []
    for load in loads:
        if load.duplicates_dropped <= 0:
            continue
        summary = load_summary.read_written_by(
            fs, load.data_dir(wh), load.committed_at, load.rows_sha256, load.rows
        )
        if summary is None or summary.conflicts is None:
            if load.hour in bad_record_hour:
                hour = format_hour(bad_record_hour[load.hour])
                reason = (
                    "duplicates the load dropped, not compared with the events kept (its "
                    "summary is missing, not its own or from before it kept conflicts)"
                )
                counts = bad_counts.setdefault(hour, {})
                counts[reason] = counts.get(reason, 0) + load.duplicates_dropped
            continue
        at = load_summary.CONFLICT_COLUMNS.index
        for row in summary.conflicts:
            fields = row[at("fields")] if isinstance(row[at("fields")], dict) else {}
            try:
                topic_field = audited_topic_column(list(fields))
            except ValueError:
                topic_field = None
            out.append(
                {
                    "producer_id": row[at("producer_id")],
                    "seq": _long(row[at("seq")]),
                    "a_topic": None if topic_field is None else fields.get(topic_field),
                    "tier": fields.get("tier"),
                    "ws": _long(fields.get("window_start")),
                    "wms": _long(fields.get("window_ms")),
                    "cnt": _long(fields.get("count")),
                    **{c: row[at(c)] for c in ("broker_id", "partition", "offset", "index")},
                    "load_hour": row[at("load_hour")],
                    "dropped": bool(row[at("dropped")]),
                }
            )
    return out


def _long(value: Any) -> int | None:
    """A JSON value as a 64-bit integer, or None (not a whole number, or out of range)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if -(2**63) <= value < 2**63 else None


def _hour_names(ms: pd.Series) -> pd.Series:
    """'YYYY-MM-DDTHH' of each instant (ms), None where it is null."""
    import pandas as pd

    out = pd.Series([None] * len(ms), index=ms.index, dtype=object)
    known = ms.notna()
    if known.any():
        stamps = pd.to_datetime(ms[known].astype("int64"), unit="ms", utc=True)
        out[known] = stamps.dt.strftime("%Y-%m-%dT%H")
    return out


def _load_start_ms(names: pd.Series) -> pd.Series:
    """The start (ms) of each load hour name, null where it is not one."""
    import pandas as pd

    starts: dict[Any, int | None] = {}
    for name in names.dropna().unique():
        try:
            starts[name] = hour_ms(parse_hour(str(name)))
        except ValueError:
            starts[name] = None
    return pd.array(names.map(starts).tolist(), dtype="Int64")


def _check_and_sum(
    ev: pd.DataFrame,
    hours: list[datetime],
    warehouse_topics: Sequence[str],
    position_cols: list[str],
    bad_counts: dict[str, dict[str, int]],
    bad_examples: dict[str, list[dict[str, Any]]],
    now_ms: int,
    skew_ms: int,
) -> AuditEvents:
    """The module doc's rules on the `_audit` rows (ev: producer_id, seq, a_topic, tier, ws,
    wms, cnt, the positions and `dropped`: a row a load dropped and kept in its summary),
    for `hours`; `now_ms` and `skew_ms` bound the windows."""
    import pandas as pd

    for c in ("seq", "ws", "wms", "cnt"):
        if ev[c].dtype != "Int64":
            ev[c] = pd.array(ev[c].tolist(), dtype="Int64")
    if "dropped" not in ev.columns:
        ev["dropped"] = False
    ev["dropped"] = ev["dropped"].map(lambda v: v is True or v == 1).astype(bool)
    # A row read from the warehouse and again from a load's conflicts is one row.
    ev = ev.drop_duplicates().reset_index(drop=True)

    # Windows that cannot have been counted: before the epoch, or after the load's hour (or
    # the audit's clock) + the skew. Such an event belongs to its load's hour.
    limit = pd.Series(_load_start_ms(ev["load_hour"]), index=ev.index) + HOUR_MS
    limit = limit.where(limit.notna() & (limit < now_ms), now_ms) + skew_ms
    ev["early"] = (ev["ws"] < 0).fillna(False).astype(bool)
    ev["future"] = (ev["ws"] > limit).fillna(False).astype(bool)
    plausible = ev["ws"].notna() & ~ev["early"] & ~ev["future"]
    ev["audit_hour"] = ev["load_hour"].astype(object)
    if plausible.any():
        ev.loc[plausible, "audit_hour"] = _hour_names(ev.loc[plausible, "ws"])

    index: dict[str, dict[str, int]] = {}
    index_by_topic: dict[str, dict[str, dict[str, int]]] = {}
    refusals = {t: _refused_topic(t) for t in ev["a_topic"].dropna().unique()}
    countable = ev["a_topic"].map({t: why is None for t, why in refusals.items()}).eq(True)
    for (load_hour, hour, topic, ok), n in (
        ev.assign(ok=countable)
        .groupby(["load_hour", "audit_hour", "a_topic", "ok"], dropna=False)
        .size()
        .items()
    ):
        if pd.isna(hour):
            continue
        per_load = index.setdefault(load_hour, {})
        per_load[hour] = per_load.get(hour, 0) + int(n)
        if ok:  # a name the pipeline refuses never becomes an index entry
            index_by_topic.setdefault(load_hour, {}).setdefault(topic, {})[hour] = int(n)

    # One version per header and content (its first position, rows kept before rows dropped);
    # a header with more than one version, or with a row a load dropped as a conflict, is a
    # conflict: every version is bad.
    named = ev["producer_id"].notna() & ev["seq"].notna()
    keyed = ev[named]
    versions = keyed.sort_values(["dropped", *position_cols], na_position="first").drop_duplicates(
        [*HEADER, *CONTENT]
    )
    per_header = versions.groupby(HEADER).agg(n=("dropped", "size"), dropped=("dropped", "any"))
    conflict_keys = per_header[(per_header["n"] > 1) | per_header["dropped"]].index
    conflicting = pd.MultiIndex.from_frame(versions[HEADER]).isin(conflict_keys)
    counts_of: dict[tuple[Any, Any], list[int]] = {}
    for key, cnts in versions[conflicting].groupby(HEADER)["cnt"]:
        counts_of[key] = sorted({int(c) for c in cnts.dropna()})
    versions = versions.assign(
        conflict=[
            _conflict_reason(counts_of[(p, s)]) if hit else None
            for p, s, hit in zip(versions["producer_id"], versions["seq"], conflicting, strict=True)
        ]
    )
    versions["reason"] = _reasons(versions, set(warehouse_topics), refusals)
    names = {format_hour(h) for h in hours}
    versions = versions[versions["audit_hour"].isin(names)]

    good = versions[versions["reason"].isna()]
    # Counts of one topic, tier and window past MAX_COUNT together: bad, before any sum wraps.
    totals = good["cnt"].astype("float64").groupby([good["a_topic"], good["tier"], good["ws"]])
    over = totals.transform("sum") > MAX_COUNT
    if over.any():
        versions.loc[over[over].index, "reason"] = (
            f"counts of one topic, tier and window sum above {MAX_COUNT:,}"
        )
        good = versions[versions["reason"].isna()]
    sums = (
        good.groupby(["a_topic", "tier", "ws"], as_index=False)["cnt"]
        .sum()
        .rename(columns={"a_topic": "topic", "ws": "window_start", "cnt": "count"})
    )
    sums = sums.astype({"window_start": "int64", "count": "int64"})
    counted = good[good["tier"] == "producer"]
    counters = (
        counted[["a_topic", "ws", "producer_id"]]
        .drop_duplicates()
        .rename(columns={"a_topic": "topic", "ws": "window_start"})
        .astype({"window_start": "int64"})
        .reset_index(drop=True)
    )

    no_header = ev[~named & ev["audit_hour"].isin(names)]
    no_header = no_header.assign(
        reason="no header key (producer_id or seq is null)", a_topic=None, tier=None, cnt=pd.NA
    )
    parts = [f for f in (versions[versions["reason"].notna()], no_header) if len(f)]
    bad = pd.concat(parts, ignore_index=True) if parts else no_header
    if len(bad):
        for (audit_hour, reason), n in bad.groupby(["audit_hour", "reason"]).size().items():
            hour_counts = bad_counts.setdefault(audit_hour, {})
            hour_counts[reason] = hour_counts.get(reason, 0) + int(n)
        ordered = bad.sort_values(["audit_hour", *position_cols], na_position="first")
        for _, row in ordered.groupby("audit_hour").head(EXAMPLES_PER_HOUR).iterrows():
            example = {c: plain_value(row[c]) for c in position_cols}
            topic = plain_value(row["a_topic"])
            if isinstance(topic, str) and len(topic) > SHOWN_TOPIC:
                topic = f"{topic[:SHOWN_TOPIC]}... ({len(topic)} characters)"
            example.update(
                reason=row["reason"],
                topic=topic,
                tier=plain_value(row["tier"]),
                window_start=plain_value(row["ws"]),
                count=plain_value(row["cnt"]),
            )
            if row["dropped"]:
                example["dropped"] = True  # the load dropped it; its summary kept it
            bad_examples.setdefault(row["audit_hour"], []).append(example)
    events_read = sum(sum(v.values()) for v in index.values())
    return AuditEvents(sums, bad_counts, bad_examples, events_read, index, index_by_topic, counters)


def _refused_topic(topic: str) -> str | None:
    """Why a count may not name `topic` (a name the pipeline refuses: topics.py; or `_audit`
    itself), or None."""
    if topic == AUDIT_TOPIC:
        return f"{AUDIT_TOPIC!r} holds the counts: its events are not counted"
    try:
        check_topic(topic)
    except PipelineTopicError as exc:
        return str(exc)
    return None


def _conflict_reason(counts: list[int]) -> str:
    what = "events with one header (producer_id, seq) and different"
    if len(counts) > 1:
        return f"{what} counts: {', '.join(map(str, counts[:-1]))} and {counts[-1]}"
    if counts:
        return f"{what} contents (count {counts[0]} in each)"
    return f"{what} contents"


def _reasons(
    checked: pd.DataFrame, known_topics: set[str], refusals: dict[str, str | None]
) -> pd.Series:
    """Why each version is bad (the first rule it breaks), or None; `refusals`: topic -> why
    a count may not name it (None: it may)."""
    import pandas as pd

    def mask(series: pd.Series) -> Any:
        return series.fillna(True).to_numpy(bool)

    refused = checked["a_topic"].map(refusals)
    rules: list[tuple[Any, Callable[[pd.Series], str]]] = [
        (checked["conflict"].notna().to_numpy(bool), lambda r: r["conflict"]),
        (mask(checked["cnt"].isna() | (checked["cnt"] < 0)), lambda r: "negative or missing count"),
        (
            mask(checked["cnt"] > MAX_COUNT),
            lambda r: f"count above {MAX_COUNT:,}: more than any window holds",
        ),
        (
            mask(checked["wms"].isna() | (checked["wms"] != WINDOW_MS)),
            lambda r: f"window is not {WINDOW_MS} ms long",
        ),
        (checked["early"].to_numpy(bool), lambda r: "window starts before 1970 (the epoch)"),
        (
            checked["future"].to_numpy(bool),
            lambda r: (
                "window starts in the future: after its load's hour (or the audit's "
                "clock) and the skew allowed"
            ),
        ),
        (
            mask(checked["ws"].isna() | (checked["ws"] % WINDOW_MS != 0)),
            lambda r: "window start is not aligned to 10 minutes",
        ),
        (
            (~checked["tier"].isin(list(TIERS)) | checked["tier"].isna()).to_numpy(bool),
            lambda r: f"unknown tier {'null' if pd.isna(r['tier']) else _shown(r['tier'])}",
        ),
        (
            refused.notna().to_numpy(bool),
            lambda r: f"count for a topic the pipeline refuses: {refused[r.name]}",
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
    for hits, say in rules:
        for i in [int(j) for j in hits.nonzero()[0]]:
            if reasons[i] is None:
                reasons[i] = say(checked.iloc[i])
    return pd.Series(reasons, index=checked.index, dtype=object)


def _shown(text: str) -> str:
    return (
        text if len(text) <= SHOWN_TOPIC else f"{text[:SHOWN_TOPIC]!r}... ({len(text)} characters)"
    )


def _add_undecodable(
    spark: SparkSession,
    fs: Any,
    wh: str,
    loads: list[Checkpoint],
    bad_record_hour: dict[datetime, datetime],
    bad_counts: dict[str, dict[str, int]],
    bad_examples: dict[str, list[dict[str, Any]]],
) -> None:
    """Count the `_audit` records the load could not decode, with the reasons it kept."""
    for load in loads:
        if load.bad_records <= 0 or load.hour not in bad_record_hour:
            continue
        hour = format_hour(bad_record_hour[load.hour])
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
                    example = {"load_hour": load.load_hour, **row.asDict()}
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
    loads: list[Checkpoint], inputs_read: dict[datetime, set[datetime]]
) -> dict[datetime, datetime]:
    """Each `_audit` load with bad records -> the audited hour that reports them: its own hour
    when audited, else the first audited hour that read it."""
    out: dict[datetime, datetime] = {}
    for load in loads:
        if load.hour in inputs_read:
            out[load.hour] = load.hour
            continue
        for hour in sorted(inputs_read):
            if load.hour in inputs_read[hour]:
                out[load.hour] = hour
                break
    return out
