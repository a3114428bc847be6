"""Counting what a load summary says from the rows, with Spark: its groups and its names.

The summary's format (`_load_summary.json`, GROUP_COLUMNS, NAME_COLUMNS) is the warehouse's:
pipeline_warehouse.load_summary, which needs no Spark. These are the queries that fill it in,
shared by the hourly load (the summary of what it wrote) and the audit (the summary of a load
that has none current, and the rows of contested names):

    header_rows / read_header_rows   a topic's rows reduced to the header, with the window
    profile_query / group_profile    per topic, load hour and GROUP_COLUMNS' keys: the rows,
                                     their null header fields and seq range
                                     (PROFILE_QUERY_COLUMNS)
    names_without_repeats            NAME_COLUMNS from a profile of rows without repeats
    count_names                      NAME_COLUMNS counted from the rows, and the names two
                                     loads share
    frame_rows, plain_value          pandas results as the summary's JSON takes them
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pipeline_warehouse.load_summary import GROUP_COLUMNS
from pipeline_warehouse.time_format import WINDOW_MS

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

# profile_query's columns: the groups' keys and counts, and each group's seq range
PROFILE_QUERY_COLUMNS = ("topic", "load_hour", *GROUP_COLUMNS, "min_seq", "max_seq")


def millis(df: DataFrame, name: str) -> Column:
    """A timestamp-millis field as epoch milliseconds, whether the load kept it as a
    timestamp or a long."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType

    if isinstance(df.schema[name].dataType, TimestampType | TimestampNTZType):
        return F.unix_millis(F.col(name).cast("timestamp"))
    return F.col(name).cast("long")


def load_hour_column() -> Column:
    """The load hour of a row, from its file's path (`.../load_hour=YYYY-MM-DDTHH/part-...`)."""
    from pyspark.sql import functions as F

    return F.regexp_extract(F.col("_metadata.file_path"), r"load_hour=([0-9T-]+)", 1)


def header_rows(raw: DataFrame, topic: str, load_hour: Column) -> DataFrame:
    """The header columns of rows of one topic, with the event window.

    Columns: topic, load_hour, event_ms, window (start, ms; null without an event time), server,
    producer_id, seq, schema_id (null where the rows have no such column).
    """
    from pyspark.sql import functions as F

    cols = set(raw.columns)
    return raw.select(
        F.lit(topic).alias("topic"),
        load_hour.alias("load_hour"),
        millis(raw, "event_time").alias("event_ms"),
        *[
            (F.col(c) if c in cols else F.lit(None)).cast(t).alias(c)
            for c, t in (
                ("server", "string"),
                ("producer_id", "string"),
                ("seq", "long"),
                ("schema_id", "long"),
            )
        ],
    ).withColumn("window", F.expr(f"event_ms - pmod(event_ms, {WINDOW_MS})"))


def read_header_rows(spark: SparkSession, dirs: Iterable[tuple[str, str]]) -> DataFrame | None:
    """`header_rows` of every (topic, load directory or data file), the load hour taken from
    the path."""
    by_topic: dict[str, list[str]] = {}
    for topic, uri in dirs:
        by_topic.setdefault(topic, []).append(uri)
    frames = [
        # one topic at a time: one schema, whatever the others have
        header_rows(spark.read.parquet(*uris), topic, load_hour_column())
        for topic, uris in sorted(by_topic.items())
    ]
    if not frames:
        return None
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    return rows


def group_profile(rows: DataFrame) -> pd.DataFrame:
    """Per topic, load hour and GROUP_COLUMNS' keys: the rows and their null header fields
    (and the seq range, for the names of rows known to hold no repeats)."""
    return profile_query(rows).toPandas()


def profile_query(rows: DataFrame) -> DataFrame:
    """`group_profile` as a Spark query, for a caller that runs it with another one."""
    from pyspark.sql import functions as F

    return rows.groupBy(
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
        F.min("seq").alias("min_seq"),
        F.max("seq").alias("max_seq"),
    )


def names_without_repeats(profile: pd.DataFrame) -> pd.DataFrame:
    """NAME_COLUMNS (+ topic, load_hour) from a profile of rows known to hold no repeated name
    (what the hourly load writes): every named row is a distinct name."""
    named = profile[profile["producer_id"].notna()]
    named = named.assign(named_rows=named["rows"] - named["null_seq"])
    named = named[named["named_rows"] > 0]
    out = named.groupby(
        ["topic", "load_hour", "window", "producer_id", "ph"], as_index=False, dropna=False
    ).agg(rows=("named_rows", "sum"), min_seq=("min_seq", "min"), max_seq=("max_seq", "max"))
    out["distinct"] = out["rows"]
    return out


def count_names(rows: DataFrame, by_string: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(NAME_COLUMNS per topic and load hour, counted from the rows; per topic and set of load
    hours, how many names are in exactly those loads: topic, loads, keys). One shuffle, keyed by (xxhash64(producer_id), seq)
    (by producer_id itself when two producers hash alike)."""
    from pyspark.sql import functions as F

    key = F.col("producer_id") if by_string else F.xxhash64("producer_id")
    keyed = rows.where(F.col("producer_id").isNotNull() & F.col("seq").isNotNull()).select(
        "topic", "load_hour", "window", "producer_id", key.alias("pk"), "seq"
    )
    per_load = (
        keyed.repartition("pk", "seq")
        .groupBy("pk", "seq", "topic", "load_hour", "window")
        .agg(F.count(F.lit(1)).alias("n"), F.first("producer_id").alias("producer_id"))
    )
    names = (
        per_load.groupBy("topic", "load_hour", "window", "producer_id")
        .agg(
            F.sum("n").alias("rows"),
            F.count(F.lit(1)).alias("distinct"),
            F.min("seq").alias("min_seq"),
            F.max("seq").alias("max_seq"),
        )
        .select(
            F.lit("names").alias("kind"),
            "topic",
            "load_hour",
            "window",
            "producer_id",
            F.xxhash64("producer_id").alias("ph"),
            "rows",
            "distinct",
            "min_seq",
            "max_seq",
            F.lit(None).cast("array<string>").alias("loads"),
        )
    )
    shared = (
        per_load.groupBy("pk", "seq", "topic")
        .agg(F.sort_array(F.collect_set("load_hour")).alias("loads"))
        .where(F.size("loads") > 1)
        .groupBy("topic", "loads")
        .agg(F.count(F.lit(1)).alias("keys"))
        .select(
            F.lit("shared").alias("kind"),
            "topic",
            *[
                F.lit(None).cast(t).alias(c)
                for c, t in (
                    ("load_hour", "string"),
                    ("window", "long"),
                    ("producer_id", "string"),
                    ("ph", "long"),
                    ("rows", "long"),
                    ("distinct", "long"),
                    ("min_seq", "long"),
                    ("max_seq", "long"),
                )
            ],
            "loads",
            "keys",
        )
    )
    names = names.withColumn("keys", F.lit(None).cast("long"))
    both: pd.DataFrame = names.unionByName(shared).toPandas()
    found = both[both["kind"] == "names"].drop(columns=["kind", "loads", "keys"])
    found = found.astype({"rows": "int64", "distinct": "int64"}).reset_index(drop=True)
    return found, both[both["kind"] == "shared"][["topic", "loads", "keys"]].reset_index(drop=True)


def frame_rows(frame: pd.DataFrame, columns: Sequence[str]) -> list[list[Any]]:
    """A pandas frame's `columns` as JSON-ready lists (NaN -> null, numpy -> Python)."""
    out = []
    for record in frame[list(columns)].itertuples(index=False, name=None):
        out.append([plain_value(v) for v in record])
    return out


def plain_value(value: Any) -> Any:
    """A value of a pandas frame as JSON takes it: null for None, NaN and pd.NA; numpy
    scalars as Python ones; a float that is a whole number (a nullable column's) as an int."""
    import math

    import pandas as pd

    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    return value
