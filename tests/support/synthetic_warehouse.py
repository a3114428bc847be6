"""Warehouses of synthetic events in the exact layout of docs/design.md §3.6, for tests and benchmarks.

The audit reads what the hourly load writes; this module writes the same files directly (Parquet
rows with the documented columns, checkpoint JSON files, bad records under `_errors/`), so that
the audit can be tested and measured on its own, at any size, with every fault placed by hand:
a row deleted, a count never published, an event loaded twice or late.

`Traffic` models producers and the mirror: every event has its header (`producer_id`, `seq`,
event time), an arrival (the load hour that holds it) and is counted per 10-minute window by its
producer, which publishes its counts as AuditCount deltas on `_audit`, the way an audited
producer does (docs/design.md §3.5). `write()` lays it all out as committed loads.

The `_audit` loads are written as the hourly load writes them: a count whose header
(`producer_id`, `seq`) came earlier in its hour, or is in the previous hour's load, is dropped
(the checkpoint's `duplicates_dropped`), and every name seen with different contents is kept
in the load's `_load_summary.json` (load_summary: `conflicts`, the only part of an `_audit`
load's summary the audit reads; its groups and names are left empty here).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_warehouse import load_summary
from pipeline_warehouse.filesystem import FsspecFS, as_uri
from pipeline_warehouse.layout import AUDIT_TOPIC, load_dir
from pipeline_warehouse.time_format import (
    HOUR_MS,
    WINDOW_MS,
    format_hour,
    format_instant,
    hour_ms,
    hour_of_ms,
)

HEADER_FIELDS = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("broker_id", pa.int32()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("index", pa.int32()),
    pa.field("event_time", pa.timestamp("ms", tz="UTC")),
    pa.field("server", pa.string()),
    pa.field("producer_id", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("schema_id", pa.int64()),
    pa.field("load_hour", pa.string()),
]
# A page-view-like event: the header, then the event's own fields.
EVENT_SCHEMA = pa.schema(
    [*HEADER_FIELDS, pa.field("page", pa.string()), pa.field("user_id", pa.int64())]
)
# AuditCount (docs/design.md §3.5); its `topic` field is `event_topic` in rows (the row's `topic` is `_audit`).
AUDIT_SCHEMA = pa.schema(
    [
        *HEADER_FIELDS,
        pa.field("event_topic", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("window_start", pa.timestamp("ms", tz="UTC")),
        pa.field("window_ms", pa.int64()),
        pa.field("count", pa.int64()),
    ]
)
ERROR_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("broker_id", pa.int32()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("index", pa.int32()),
        pa.field("reason", pa.string()),
        pa.field("payload", pa.binary()),
    ]
)


def write_load(
    root: Path,
    topic: str,
    hour: datetime,
    table: pa.Table,
    *,
    committed_at: datetime,
    bad_records: int = 0,
    duplicates_dropped: int = 0,
    errors: list[dict[str, Any]] | None = None,
    checkpoint: bool = True,
) -> dict[str, Any]:
    """Write one load: its rows, its bad records and (unless `checkpoint` is False) its commit."""
    name = format_hour(hour)
    data = root / topic / f"load_hour={name}"
    data.mkdir(parents=True, exist_ok=True)
    for old in data.glob("part-*"):
        old.unlink()
    pq.write_table(table, data / "part-00000.snappy.parquet", compression="snappy")
    if errors:
        err_dir = root / "_errors" / topic / f"load_hour={name}"
        err_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.Table.from_pylist(errors, schema=ERROR_SCHEMA), err_dir / "part-00000.parquet"
        )
    digest = hashlib.sha256()
    for column in ("producer_id", "seq"):
        digest.update(repr(table.column(column).to_pylist()).encode())
    doc = {
        "topic": topic,
        "load_hour": name,
        "partitions": [
            {
                "broker_id": 0,
                "partition": 0,
                "start_offset": 0,
                "end_offset": table.num_rows * 100,
                "messages": table.num_rows,
            }
        ],
        "rows": table.num_rows,
        "duplicates_dropped": duplicates_dropped,
        "bad_records": bad_records,
        "rows_sha256": digest.hexdigest(),
        "committed_at": format_instant(committed_at).replace(".000Z", "Z"),
    }
    if checkpoint:
        cp = root / "_checkpoints" / topic / f"{name}.json"
        cp.parent.mkdir(parents=True, exist_ok=True)
        cp.write_text(json.dumps(doc, indent=1))
    return doc


@dataclass
class Event:
    topic: str
    event_ms: int
    producer_id: str
    seq: int
    arrival: datetime  # the load hour that holds it
    server: str = "web-1"
    schema_id: int = 1


@dataclass
class Count:
    """One AuditCount event (a delta)."""

    topic: str
    tier: str
    window_start: int
    count: int
    producer_id: str
    seq: int
    published_ms: int
    arrival: datetime
    window_ms: int = WINDOW_MS


@dataclass
class Traffic:
    """Producers' events and counts, and where each ended up (see the module doc)."""

    events: list[Event] = field(default_factory=list)
    counts: list[Count] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (topic, load hour) -> write_load keywords: bad_records, duplicates_dropped, errors,
    # checkpoint=False (a load that never committed)
    load_facts: dict[tuple[str, datetime], dict[str, Any]] = field(default_factory=dict)

    def next_seq(self, producer_id: str) -> int:
        seq = self.seqs[producer_id]
        self.seqs[producer_id] = seq + 1
        return seq

    def produce(
        self,
        producer_id: str,
        topic: str,
        times_ms: Iterable[int],
        arrival: datetime | None = None,
        counted: bool = True,
        schema_id: int = 1,
    ) -> list[Event]:
        """Events at `times_ms`, each loaded in its own hour (or `arrival`); counted when asked."""
        made = []
        for t in times_ms:
            event = Event(
                topic,
                t,
                producer_id,
                self.next_seq(producer_id),
                arrival or hour_of_ms(t),
                schema_id=schema_id,
            )
            made.append(event)
        self.events.extend(made)
        if counted:
            self.count(producer_id, "producer", made)
        return made

    def count(self, counter_id: str, tier: str, events: list[Event], deltas: int = 2) -> None:
        """`counter_id` publishes the counts of `events` per window, in `deltas` events each,
        published when the window closes (they arrive in the load of the hour it closes in)."""
        per_window: dict[tuple[str, int], int] = defaultdict(int)
        for e in events:
            per_window[(e.topic, e.event_ms - e.event_ms % WINDOW_MS)] += 1
        for (topic, window), n in sorted(per_window.items()):
            parts = [n // deltas + (1 if i < n % deltas else 0) for i in range(deltas)]
            for part in parts:
                if part == 0:
                    continue
                published = window + WINDOW_MS + 5_000
                self.counts.append(
                    Count(
                        topic,
                        tier,
                        window,
                        part,
                        counter_id,
                        self.next_seq(counter_id),
                        published,
                        hour_of_ms(published),
                    )
                )

    def add_count(self, **kw: Any) -> Count:
        """An AuditCount event written by hand (a bad one, a late one, ...)."""
        kw.setdefault("producer_id", "hand")
        kw.setdefault("seq", self.next_seq(kw["producer_id"]))
        kw.setdefault("tier", "producer")
        kw.setdefault("published_ms", kw["window_start"] + WINDOW_MS)
        kw.setdefault("arrival", hour_of_ms(kw["published_ms"]))
        count = Count(**kw)
        self.counts.append(count)
        return count

    # -- layout ---------------------------------------------------------------------------
    def event_table(self, topic: str, events: list[Event], hour: datetime) -> pa.Table:
        rows = [
            {
                "topic": topic,
                "broker_id": 0,
                "partition": i % 2,
                "offset": i * 100,
                "index": 0,
                "event_time": e.event_ms,
                "server": e.server,
                "producer_id": e.producer_id,
                "seq": e.seq,
                "schema_id": e.schema_id,
                "load_hour": format_hour(hour),
                "page": f"/p/{e.seq % 7}",
                "user_id": e.seq % 1000,
            }
            for i, e in enumerate(events)
        ]
        return pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)

    def audit_table(self, counts: list[tuple[int, Count]], hour: datetime) -> pa.Table:
        """(offset, count) pairs as the `_audit` load's rows."""
        rows = [
            {
                "topic": AUDIT_TOPIC,
                "broker_id": 0,
                "partition": 0,
                "offset": offset,
                "index": 0,
                "event_time": c.published_ms,
                "server": "web-1",
                "producer_id": c.producer_id,
                "seq": c.seq,
                "schema_id": 100,
                "load_hour": format_hour(hour),
                "event_topic": c.topic,
                "tier": c.tier,
                "window_start": c.window_start,
                "window_ms": c.window_ms,
                "count": c.count,
            }
            for offset, c in counts
        ]
        return pa.Table.from_pylist(rows, schema=AUDIT_SCHEMA)

    def audit_loads(self) -> dict[datetime, tuple[list[tuple[int, Count]], int, list[list[Any]]]]:
        """Per arrival hour, the `_audit` load as the hourly load writes it (module doc): the
        (offset, count) rows kept, the duplicates dropped, the summary's conflicts."""
        out: dict[datetime, tuple[list[tuple[int, Count]], int, list[list[Any]]]] = {}
        previous: list[tuple[int, Count]] = []
        for hour in sorted({c.arrival for c in self.counts}):
            before = previous if (hour - timedelta(hours=1)) in out else []
            seen = {(c.producer_id, c.seq) for _, c in before}
            kept: list[tuple[int, Count]] = []
            rows: list[tuple[datetime, int, Count, bool]] = []  # load hour, offset, count, dropped
            for i, c in enumerate(c for c in self.counts if c.arrival == hour):
                goes = (c.producer_id, c.seq) in seen
                seen.add((c.producer_id, c.seq))
                rows.append((hour, i * 80, c, goes))
                if not goes:
                    kept.append((i * 80, c))
            rows += [(hour - timedelta(hours=1), offset, c, False) for offset, c in before]
            by_name: dict[tuple[str, int], list[tuple[datetime, int, Count, bool]]] = defaultdict(
                list
            )
            for row in rows:
                by_name[(row[2].producer_id, row[2].seq)].append(row)
            conflicts = [
                [c.producer_id, c.seq, format_hour(lh), 0, 0, offset, 0, goes, _fields(c)]
                for group in by_name.values()
                if len(group) > 1 and len({json.dumps(_fields(r[2])) for r in group}) > 1
                for lh, offset, c, goes in sorted(group, key=lambda r: (r[0], r[1]))
            ]
            out[hour] = (kept, sum(1 for r in rows if r[3]), conflicts)
            previous = kept
        return out

    def write(
        self,
        root: Path,
        hours: Iterable[datetime],
        topics: Iterable[str],
        committed_after: timedelta = timedelta(minutes=5),
    ) -> None:
        """Write every load of `hours` for `topics` and `_audit` (empty loads too, as the
        hourly load commits an hour with no rows), committed `committed_after` the hour's end."""
        for hour in hours:
            committed = hour + timedelta(hours=1) + committed_after
            for topic in topics:
                events = [e for e in self.events if e.topic == topic and e.arrival == hour]
                facts = self.load_facts.get((topic, hour), {})
                write_load(
                    root,
                    topic,
                    hour,
                    self.event_table(topic, events, hour),
                    committed_at=committed,
                    **facts,
                )
            kept, dropped, conflicts = self.audit_loads().get(hour, ([], 0, []))
            facts = {"duplicates_dropped": dropped, **self.load_facts.get((AUDIT_TOPIC, hour), {})}
            doc = write_load(
                root,
                AUDIT_TOPIC,
                hour,
                self.audit_table(kept, hour),
                committed_at=committed,
                **facts,
            )
            data = load_dir(as_uri(str(root)), AUDIT_TOPIC, hour)
            summary = load_summary.LoadSummary(
                topic=AUDIT_TOPIC,
                load_hour=doc["load_hour"],
                committed_at=doc["committed_at"],
                rows_sha256=doc["rows_sha256"],
                rows=doc["rows"],
                files=load_summary.data_files(FsspecFS(), data),
                conflicts=conflicts,
            )
            load_summary.write(FsspecFS(), load_summary.summary_path(data), summary)


def _fields(c: Count) -> dict[str, Any]:
    """An AuditCount's own fields as the load keeps them in a summary's conflicts."""
    return {
        "event_topic": c.topic,
        "tier": c.tier,
        "window_start": c.window_start,
        "window_ms": c.window_ms,
        "count": c.count,
    }


def uniform_times(hour: datetime, n: int, offset_ms: int = 0) -> list[int]:
    """`n` event times spread evenly over `hour` (every window gets its share)."""
    start = hour_ms(hour)
    return [start + offset_ms + (i * HOUR_MS) // n for i in range(n)]
