"""The data-quality profile of each loaded topic hour: one row per topic and load hour.

Built from the audit's profile query (audit_reconcile: per topic, load hour, window, producer
and schema id) and the load's checkpoint, so that the checks of a loaded topic hour cost no
pass over its rows of their own. Columns:

    topic, load_hour            the load (`<wh>/<topic>/load_hour=<load_hour>/`)
    rows                        rows in the load
    bad_records, bad_fraction   from the checkpoint: records that were not events, and their
                                share of all records read (bad / (rows + bad))
    duplicates_dropped          from the checkpoint: repeats the load itself dropped
    null_event_time, null_server, null_producer_id, null_seq, null_schema_id
                                rows whose header field is null
    early_rows, late_rows       rows whose event time is outside the hour's plausible range:
                                before the load hour's start - `lateness`, or at or after its
                                end + `skew` (both whole 10-minute windows)
    earliest_event, latest_event
    unregistered_rows           rows whose schema id is not a version of the topic's subject
                                in the registry (null: no registry given, not checked)
    schema_ids                  the schema ids seen, e.g. "3,7"
    repeated_in_load            rows whose (producer_id, seq) another row of the same load has
    producers                   distinct producer ids
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_apps.warehouse.hours import HOUR_MS, format_hour, hour_ms
from spark_apps.warehouse.loads import CommittedLoad

if TYPE_CHECKING:
    import pandas as pd

PROFILE_COLUMNS = (
    "topic",
    "load_hour",
    "rows",
    "bad_records",
    "bad_fraction",
    "duplicates_dropped",
    "null_event_time",
    "null_server",
    "null_producer_id",
    "null_seq",
    "null_schema_id",
    "early_rows",
    "late_rows",
    "earliest_event",
    "latest_event",
    "unregistered_rows",
    "schema_ids",
    "repeated_in_load",
    "producers",
)


def load_profiles(
    loads: list[CommittedLoad],
    profile: pd.DataFrame,
    within_load: pd.DataFrame,
    lateness_ms: int,
    skew_ms: int,
    registered: Mapping[str, set[int]] | None,
) -> pd.DataFrame:
    """One row per load in `loads` (see the module doc)."""
    import pandas as pd

    rows = []
    for load in loads:
        name = load.hour_name
        part = profile[(profile["topic"] == load.topic) & (profile["load_hour"] == name)]
        start = hour_ms(load.load_hour)
        timed = part[part["window"].notna()]
        n = int(part["rows"].sum())
        ids = sorted({int(i) for i in part["schema_id"].dropna()})
        if registered is None:
            unregistered = None
        else:
            known = registered.get(load.topic, set())
            unregistered = int(
                part[part["schema_id"].notna() & ~part["schema_id"].isin(list(known))]["rows"].sum()
            )
        repeats = within_load[
            (within_load["topic"] == load.topic) & (within_load["load_hour"] == name)
        ]
        total = n + load.bad_records
        rows.append(
            {
                "topic": load.topic,
                "load_hour": name,
                "rows": n,
                "bad_records": load.bad_records,
                "bad_fraction": (load.bad_records / total) if total else 0.0,
                "duplicates_dropped": load.duplicates_dropped,
                "null_event_time": int(part[part["window"].isna()]["rows"].sum()),
                "null_server": int(part["null_server"].sum()),
                "null_producer_id": int(part[part["producer_id"].isna()]["rows"].sum()),
                "null_seq": int(part["null_seq"].sum()),
                "null_schema_id": int(part[part["schema_id"].isna()]["rows"].sum()),
                "early_rows": int(timed[timed["window"] < start - lateness_ms]["rows"].sum()),
                "late_rows": int(timed[timed["window"] >= start + HOUR_MS + skew_ms]["rows"].sum()),
                "earliest_event": _instant(timed["min_event_ms"].min()),
                "latest_event": _instant(timed["max_event_ms"].max()),
                "unregistered_rows": unregistered,
                "schema_ids": ",".join(str(i) for i in ids),
                "repeated_in_load": int(repeats["duplicates"].sum()),
                "producers": int(part["producer_id"].dropna().nunique()),
            }
        )
    frame = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    return frame.astype({"unregistered_rows": "Int64"})


def _instant(ms: object) -> str | None:
    import pandas as pd

    if ms is None or pd.isna(ms):
        return None
    return str(pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat()).replace("+00:00", "Z")


def event_hours(
    profile: pd.DataFrame, topic: str, load_hour: datetime
) -> tuple[dict[str, int], int]:
    """A load's index: rows per event hour, and rows without an event time."""
    part = profile[(profile["topic"] == topic) & (profile["load_hour"] == format_hour(load_hour))]
    timed = part[part["window"].notna()]
    hours = (timed["window"] - timed["window"] % HOUR_MS).astype("int64")
    by_hour = timed.assign(hour=hours).groupby("hour")["rows"].sum()
    named = {
        format_hour(datetime.fromtimestamp(int(h) / 1000, tz=UTC)): int(n)
        for h, n in by_hour.items()
    }
    return named, int(part[part["window"].isna()]["rows"].sum())
