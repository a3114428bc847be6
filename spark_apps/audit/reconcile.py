"""Counting the warehouse: rows and unique events per topic and window, and a profile per load.

The counts come from each load's summary (load_summary: per window, producer and schema id the
rows and null header fields; per window and producer the named rows, distinct names and their
seq range), not from the rows:

- the profile of a load is its summary's groups; it gives each load's index (the event hours it
  holds), the data-quality profile of each loaded topic hour, and the producers;
- an event is named by (`producer_id`, `seq`) (docs/design.md §3.4), so per topic and window
  `loaded_rows` counts rows and `loaded_unique` distinct names. Within one load the summary
  has both. Two loads can share a name in a window only where their seq ranges for that
  producer overlap, and not if the later one certifies (its summary's `previous`) that it
  shares no name with the earlier, adjacent one as committed now. Only the rows of such
  *contested* (window, producer) pairs are read: they are deduplicated by one shuffle keyed by
  (xxhash64(`producer_id`), `seq`), two longs (the string itself if two producers ever hash
  alike: the profile lists every producer with its hash).

A load without a current summary (none written, or its files or checkpoint changed since) is
counted from its rows once, with the same shuffle, and its summary is kept in the audit's own
area (layout), which the next audit reads when the load's directory has none current.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from pipeline_warehouse import layout, load_summary
from pipeline_warehouse.checkpoint import Checkpoint
from pipeline_warehouse.load_summary import GROUP_COLUMNS, NAME_COLUMNS, LoadSummary
from pipeline_warehouse.time_format import HOUR_MS, hour_ms, parse_hour
from spark_apps.summary_counts import count_names, frame_rows, group_profile, read_header_rows

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from spark_apps.hadoop_fs import HadoopFS

log = logging.getLogger(__name__)


@dataclass
class WarehouseCounts:
    """What the warehouse holds, as counted by one audit run (pandas frames, small)."""

    windows: pd.DataFrame  # topic, window (ms), loaded_rows, loaded_unique
    profile: pd.DataFrame  # topic, load_hour, window, producer_id, ph, schema_id, rows, null_*
    within_load: pd.DataFrame  # topic, load_hour, duplicates (names repeated in one load)
    exact_keys: str  # "hash" or "string": how events were named in the deduplication
    summarized: int = 0  # loads counted from their rows (no current summary)
    contested_pairs: int = 0  # (window, producer) pairs whose rows were read to deduplicate


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
    both = cast("pd.DataFrame", windows.unionByName(repeats).toPandas())
    win = both[both["kind"] == "window"][["topic", "window", "loaded_rows", "loaded_unique"]]
    within = both[both["kind"] == "load"][["topic", "load_hour", "loaded_rows"]].rename(
        columns={"loaded_rows": "duplicates"}
    )
    return win.reset_index(drop=True), within.reset_index(drop=True)


def summarize(
    spark: SparkSession,
    fs: HadoopFS,
    wh: str,
    loads: list[Checkpoint],
) -> dict[tuple[str, datetime], LoadSummary]:
    """Count `loads` from their rows and write their summaries (see the module doc).

    A load's summary certifies it against the previous hour's load when that one is counted
    in the same pass (then whether they share a name is known).
    """
    # Listed before the rows are read: a load replaced meanwhile leaves a stale summary.
    files = {
        (load.topic, load.hour): load_summary.data_files(fs, load.data_dir(wh), load.files)
        for load in loads
    }
    rows = read_header_rows(
        spark, [(load.topic, uri) for load in loads for uri in load.data_uris(wh)]
    )
    assert rows is not None
    prof = group_profile(rows)
    names, shared = count_names(rows, by_string=_collides(prof))
    shared_pairs: dict[tuple[str, str, str], int] = defaultdict(int)
    for topic, hours_of_key, n in shared[["topic", "loads", "keys"]].itertuples(index=False):
        hours_of_key = list(hours_of_key)
        for i, a in enumerate(hours_of_key):
            for b in hours_of_key[i + 1 :]:
                shared_pairs[(topic, a, b)] += int(n)
    out = {}
    for load in loads:
        name = load.load_hour
        own = (prof["topic"] == load.topic) & (prof["load_hour"] == name)
        own_names = (names["topic"] == load.topic) & (names["load_hour"] == name)
        out[(load.topic, load.hour)] = LoadSummary(
            topic=load.topic,
            load_hour=name,
            committed_at=load.committed_at,
            rows_sha256=load.rows_sha256,
            rows=load.rows,
            files=files[(load.topic, load.hour)],
            groups=frame_rows(prof[own], GROUP_COLUMNS),
            names=frame_rows(names[own_names], NAME_COLUMNS),
        )
    for (topic, hour), summary in out.items():
        previous = out.get((topic, hour - timedelta(hours=1)))
        if previous is not None:  # counted in this pass: whether they share a name is known
            summary.previous = load_summary.Certificate(
                previous.load_hour,
                previous.committed_at,
                previous.rows_sha256,
                previous.files,
                shared_pairs.get((topic, previous.load_hour, summary.load_hour), 0),
            )
        try:
            load_summary.write(fs, layout.load_summary_file(wh, topic, hour), summary)
        except Exception as exc:  # a read-only warehouse: counted from the rows again next time
            log.warning("could not write the summary of %s %s: %s", topic, summary.load_hour, exc)
    return out


def _current_summary(fs: HadoopFS, wh: str, load: Checkpoint) -> LoadSummary | None:
    """The load's own summary if current, else the one an audit kept for it if current."""
    for path in (None, layout.load_summary_file(wh, load.topic, load.hour)):
        found = load_summary.read_current(
            fs,
            load.data_dir(wh),
            load.committed_at,
            load.rows_sha256,
            load.rows,
            path=path,
            names=load.files,
        )
        if found is not None:
            return found
    return None


def _collides(prof: pd.DataFrame) -> bool:
    producers = prof.dropna(subset=["producer_id"])[["producer_id", "ph"]].drop_duplicates()
    return bool(producers["ph"].duplicated().any())


def count_warehouse(
    spark: SparkSession,
    fs: HadoopFS,
    wh: str,
    loads: list[Checkpoint],
    hours: list[datetime],
) -> WarehouseCounts:
    """Profile and deduplicate `loads` from their summaries; windows of `hours` only in
    `windows`."""
    import pandas as pd

    summaries: dict[tuple[str, datetime], LoadSummary] = {}
    stale = []
    for load in loads:
        current = _current_summary(fs, wh, load)
        if current is None:
            stale.append(load)
        else:
            summaries[(load.topic, load.hour)] = current
    if stale:
        summaries.update(summarize(spark, fs, wh, stale))

    prof = _frame(summaries, "groups", GROUP_COLUMNS)
    names = _frame(summaries, "names", NAME_COLUMNS)
    collision = _collides(prof)
    starts = {hour_ms(h) for h in hours}
    in_hours = names["window"].notna() & (names["window"] - names["window"] % HOUR_MS).isin(starts)
    contested = _contested(names[in_hours], summaries)
    plain = names[in_hours & ~names.index.isin(contested.index)]
    windows = plain.groupby(["topic", "window"], as_index=False).agg(
        loaded_rows=("rows", "sum"), loaded_unique=("distinct", "sum")
    )
    if len(contested):
        by_key = {(load.topic, load.load_hour): load for load in loads}
        read = _count_contested(spark, wh, by_key, contested, hours, collision)
        windows = pd.concat([windows, read]).groupby(["topic", "window"], as_index=False).sum()
    within = (
        names.assign(duplicates=names["rows"] - names["distinct"])
        .groupby(["topic", "load_hour"], as_index=False)["duplicates"]
        .sum()
    )
    within = within[within["duplicates"] > 0].reset_index(drop=True)

    # Rows without a name (a null producer_id or seq) cannot repeat another: each is one event.
    unnamed = prof.assign(n=prof["null_seq"].where(prof["producer_id"].notna(), prof["rows"]))
    unnamed = unnamed[(unnamed["n"] > 0) & unnamed["window"].notna()]
    if len(unnamed):
        unnamed = unnamed[(unnamed["window"] - unnamed["window"] % HOUR_MS).isin(starts)]
        extra = unnamed.groupby(["topic", "window"], as_index=False)["n"].sum()
        windows = windows.merge(extra, on=["topic", "window"], how="outer").fillna(
            {"n": 0, "loaded_rows": 0, "loaded_unique": 0}
        )
        windows["loaded_rows"] = windows["loaded_rows"] + windows["n"]
        windows["loaded_unique"] = windows["loaded_unique"] + windows["n"]
        windows = windows.drop(columns=["n"])
    windows = windows.astype(
        {"window": "int64", "loaded_rows": "int64", "loaded_unique": "int64"}
    ).reset_index(drop=True)
    return WarehouseCounts(
        windows,
        prof,
        within,
        "string" if collision else "hash",
        summarized=len(stale),
        contested_pairs=int(
            contested[["topic", "window", "producer_id"]].drop_duplicates().shape[0]
        )
        if len(contested)
        else 0,
    )


def _frame(
    summaries: dict[tuple[str, datetime], LoadSummary], part: str, columns: tuple[str, ...]
) -> pd.DataFrame:
    """One part of every load's summary, with topic and load_hour, as one frame (numbers as
    nullable integers: a window, a schema id or an event time may be null)."""
    import pandas as pd

    records = [[s.topic, s.load_hour, *row] for s in summaries.values() for row in getattr(s, part)]
    frame = pd.DataFrame.from_records(records, columns=["topic", "load_hour", *columns])
    for c in columns:
        if c != "producer_id":
            frame[c] = pd.array(frame[c].tolist(), dtype="Int64")
    return frame


def _contested(
    names: pd.DataFrame, summaries: dict[tuple[str, datetime], LoadSummary]
) -> pd.DataFrame:
    """The rows of `names` whose (topic, window, producer) may share a name between loads:
    their seq ranges overlap, and the later load does not certify it shares none with the
    earlier (adjacent) one as it is now."""
    import pandas as pd

    multi = names[names.duplicated(["topic", "window", "producer_id"], keep=False)]
    picked = []
    for (topic, _, _), group in multi.groupby(["topic", "window", "producer_id"]):
        ranges = list(group[["load_hour", "min_seq", "max_seq"]].itertuples(index=False))
        if any(
            a.min_seq <= b.max_seq
            and b.min_seq <= a.max_seq
            and not _certified(summaries, topic, a.load_hour, b.load_hour)
            for i, a in enumerate(ranges)
            for b in ranges[i + 1 :]
        ):
            picked.append(group)
    return pd.concat(picked) if picked else names.iloc[0:0]


def _certified(
    summaries: dict[tuple[str, datetime], LoadSummary], topic: str, hour_a: str, hour_b: str
) -> bool:
    """Whether the later of two adjacent loads certifies it shares no name with the earlier."""
    first, second = sorted((parse_hour(hour_a), parse_hour(hour_b)))
    if second - first != timedelta(hours=1):
        return False
    later, earlier = summaries.get((topic, second)), summaries.get((topic, first))
    if later is None or earlier is None or later.previous is None:
        return False
    return later.previous.holds_for(earlier)


def _count_contested(
    spark: SparkSession,
    wh: str,
    loads: dict[tuple[str, str], Checkpoint],
    contested: pd.DataFrame,
    hours: list[datetime],
    by_string: bool,
) -> pd.DataFrame:
    """loaded_rows, loaded_unique per topic and window over the contested pairs' rows."""
    from pyspark.sql import functions as F

    pairs = contested[["topic", "load_hour", "window", "producer_id"]].drop_duplicates()
    rows = read_header_rows(
        spark,
        [
            (t, uri)
            for t, h in pairs[["topic", "load_hour"]].drop_duplicates().itertuples(index=False)
            for uri in loads[(t, h)].data_uris(wh)
        ],
    )
    assert rows is not None
    wanted = spark.createDataFrame(
        [(t, h, int(w), p) for t, h, w, p in pairs.itertuples(index=False)],
        "topic string, load_hour string, window long, producer_id string",
    )
    lo, hi = int(pairs["window"].min()), int(pairs["window"].max())
    rows = rows.where(F.col("event_ms").between(lo, hi + 600_000 - 1)).join(
        F.broadcast(wanted), ["topic", "load_hour", "window", "producer_id"], "left_semi"
    )
    windows, _ = deduplicate(rows, hours, by_string)
    return windows
