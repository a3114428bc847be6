"""Counting the warehouse: rows and unique events per topic and window, and a profile per load.

Two Spark queries over the loads an audit reads (audit_inputs), both on the header columns
only (DESIGN §3.6: `topic, ..., event_time, server, producer_id, seq, schema_id`):

- the profile, one partial aggregation (no row is shuffled): per topic, load hour, event window,
  producer and schema id, the rows and the null header fields. It gives each load's index (the
  event hours it holds), the data-quality profile of each loaded topic hour, and the producers.
- the deduplication, one shuffle: an event is named by (`producer_id`, `seq`) (DESIGN §3.4), so
  per topic and window `loaded_rows` counts rows and `loaded_unique` distinct names; the same
  pass counts the names repeated inside one load (`seq` unique per `producer_id`, per loaded
  topic hour). Rows are keyed by (xxhash64(`producer_id`), `seq`): two longs shuffle much
  lighter than a string. The profile lists every producer with its hash; if two producers ever
  share one, the key falls back to the string itself, so the counts stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .audit_inputs import CommittedLoad
from .hours import HOUR_MS, WINDOW_MS, hour_ms

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

HEADER_COLUMNS = ("event_time", "server", "producer_id", "seq", "schema_id")


def load_hour_column() -> Column:
    """The load hour of a row, from its file's path (`.../load_hour=YYYY-MM-DDTHH/part-...`)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(F.col("_metadata.file_path"), r"load_hour=([0-9T-]+)", 1)


def _event_ms(df: DataFrame) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if isinstance(df.schema["event_time"].dataType, TimestampType | TimestampNTZType):
        return F.unix_millis(F.col("event_time").cast("timestamp"))
    return F.col("event_time").cast("long")


def read_rows(spark: SparkSession, wh: str, loads: list[CommittedLoad]) -> DataFrame | None:
    """The header columns of every row of `loads`, with `load_hour` and the event window.

    Columns: topic, load_hour (YYYY-MM-DDTHH), event_ms, window (start, ms; null without an
    event time), server, producer_id, seq, schema_id.
    """
    from pyspark.sql import functions as F

    by_topic: dict[str, list[str]] = {}
    for load in loads:
        by_topic.setdefault(load.topic, []).append(load.data_uri(wh))
    frames = []
    for topic, uris in sorted(by_topic.items()):
        raw = spark.read.parquet(*uris)  # one topic: one schema, whatever the others have
        cols = set(raw.columns)
        frames.append(
            raw.select(
                F.lit(topic).alias("topic"),
                load_hour_column().alias("load_hour"),
                _event_ms(raw).alias("event_ms"),
                *[
                    (F.col(c) if c in cols else F.lit(None)).cast(t).alias(c)
                    for c, t in (
                        ("server", "string"),
                        ("producer_id", "string"),
                        ("seq", "long"),
                        ("schema_id", "long"),
                    )
                ],
            )
        )
    if not frames:
        return None
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    return rows.withColumn("window", F.expr(f"event_ms - pmod(event_ms, {WINDOW_MS})"))


@dataclass
class WarehouseCounts:
    """What the warehouse holds, as counted by one audit run (pandas frames, small)."""

    windows: pd.DataFrame  # topic, window (ms), loaded_rows, loaded_unique
    profile: pd.DataFrame  # topic, load_hour, window, producer_id, ph, schema_id, rows, null_*
    within_load: pd.DataFrame  # topic, load_hour, duplicates (names repeated in one load)
    exact_keys: str  # "hash" or "string": how events were named in the deduplication


def profile(rows: DataFrame) -> pd.DataFrame:
    """Per topic, load hour, window, producer and schema id: rows and null header fields."""
    from pyspark.sql import functions as F

    grouped = rows.groupBy(
        "topic",
        "load_hour",
        "window",
        "producer_id",
        F.xxhash64("producer_id").alias("ph"),
        "schema_id",
    ).agg(
        F.count(F.lit(1)).alias("rows"),
        (F.count(F.lit(1)) - F.count("server")).alias("null_server"),
        (F.count(F.lit(1)) - F.count("seq")).alias("null_seq"),
        F.min("event_ms").alias("min_event_ms"),
        F.max("event_ms").alias("max_event_ms"),
    )
    return grouped.toPandas()


def deduplicate(
    rows: DataFrame, hours: list[datetime], by_string: bool
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per topic and window of `hours`: loaded_rows, loaded_unique; per load: within-load repeats).

    One shuffle: rows are partitioned by the event's name, so both groupings below (with and
    without the load hour) need no other exchange, and Spark reuses it for both outputs.
    """
    from pyspark.sql import functions as F

    key = F.col("producer_id") if by_string else F.xxhash64("producer_id")
    keyed = rows.where(F.col("producer_id").isNotNull() & F.col("seq").isNotNull()).select(
        "topic", "load_hour", "window", key.alias("pk"), "seq"
    )
    per_load = (
        keyed.repartition("pk", "seq")
        .groupBy("pk", "seq", "topic", "window", "load_hour")
        .agg(F.count(F.lit(1)).alias("n1"))
    )
    names = per_load.groupBy("pk", "seq", "topic", "window").agg(F.sum("n1").alias("n"))
    starts = [hour_ms(h) for h in hours]
    in_hours = F.lit(False)
    for start in starts:
        in_hours = in_hours | ((F.col("window") >= start) & (F.col("window") < start + HOUR_MS))
    windows = (
        names.where(in_hours)
        .groupBy("topic", "window")
        .agg(F.sum("n").alias("loaded_rows"), F.count(F.lit(1)).alias("loaded_unique"))
        .select(
            F.lit("window").alias("kind"),
            "topic",
            "window",
            F.lit(None).cast("string").alias("load_hour"),
            "loaded_rows",
            "loaded_unique",
        )
    )
    repeats = (
        per_load.where(F.col("n1") > 1)
        .groupBy("topic", "load_hour")
        .agg(F.sum(F.col("n1") - 1).alias("loaded_rows"))
        .select(
            F.lit("load").alias("kind"),
            "topic",
            F.lit(None).cast("long").alias("window"),
            "load_hour",
            "loaded_rows",
            F.lit(0).cast("long").alias("loaded_unique"),
        )
    )
    both = windows.unionByName(repeats).toPandas()
    win = both[both["kind"] == "window"][["topic", "window", "loaded_rows", "loaded_unique"]]
    within = both[both["kind"] == "load"][["topic", "load_hour", "loaded_rows"]].rename(
        columns={"loaded_rows": "duplicates"}
    )
    return win.reset_index(drop=True), within.reset_index(drop=True)


def count_warehouse(
    spark: SparkSession, wh: str, loads: list[CommittedLoad], hours: list[datetime]
) -> WarehouseCounts:
    """Profile and deduplicate the rows of `loads`; windows of `hours` only in `windows`."""
    import pandas as pd

    rows = read_rows(spark, wh, loads)
    if rows is None:
        empty_windows = pd.DataFrame(
            {"topic": [], "window": [], "loaded_rows": [], "loaded_unique": []}
        )
        empty_profile = pd.DataFrame(
            {
                c: []
                for c in (
                    "topic",
                    "load_hour",
                    "window",
                    "producer_id",
                    "ph",
                    "schema_id",
                    "rows",
                    "null_server",
                    "null_seq",
                    "min_event_ms",
                    "max_event_ms",
                )
            }
        )
        return WarehouseCounts(
            empty_windows,
            empty_profile,
            pd.DataFrame({"topic": [], "load_hour": [], "duplicates": []}),
            "hash",
        )
    prof = profile(rows)
    producers = prof.dropna(subset=["producer_id"])[["producer_id", "ph"]].drop_duplicates()
    collision = producers["ph"].duplicated().any()
    windows, within = deduplicate(rows, hours, by_string=bool(collision))
    # Rows without a name (a null producer_id or seq) cannot repeat another: each is one event.
    unnamed = prof.assign(n=prof["null_seq"].where(prof["producer_id"].notna(), prof["rows"]))
    unnamed = unnamed[(unnamed["n"] > 0) & unnamed["window"].notna()]
    if len(unnamed):
        starts = {hour_ms(h) for h in hours}
        unnamed = unnamed[(unnamed["window"] - unnamed["window"] % HOUR_MS).isin(starts)]
        extra = unnamed.groupby(["topic", "window"], as_index=False)["n"].sum()
        windows = windows.merge(extra, on=["topic", "window"], how="outer").fillna(
            {"n": 0, "loaded_rows": 0, "loaded_unique": 0}
        )
        windows["loaded_rows"] = (windows["loaded_rows"] + windows["n"]).astype("int64")
        windows["loaded_unique"] = (windows["loaded_unique"] + windows["n"]).astype("int64")
        windows = windows.drop(columns=["n"])
    return WarehouseCounts(windows, prof, within, "string" if collision else "hash")
