"""What one committed load holds, in a small file beside its rows: the audit reads this, not them.

    <wh>/<topic>/load_hour=<YYYY-MM-DDTHH>/_load_summary.json

The name starts with `_`, so readers of the hour's rows (Spark, Hive, pyarrow datasets) skip it,
as they skip `_SUCCESS`. The hourly load writes it into its staging `rows/` before the commit,
so it appears with the hour's data in the same rename. For a load that has none, or a stale
one, the audit reads the rows once and keeps the summary in its own area (layout:
`_audit_results/_load_summaries/`), never in the load's directory, which is the load's.

    {"format": 1, "topic": "page_views", "load_hour": "2026-11-22T10",
     "committed_at": "...Z", "rows_sha256": "...",        the checkpoint it describes
     "rows": 391,                                         = the checkpoint's rows
     "files": {"part-00000-<uuid>-c000.snappy.parquet": 18234, ...},
                                                          every data file and its length
     "previous": {"load_hour": "2026-11-22T09", "committed_at": "...Z",
                  "rows_sha256": "...", "files": {...}, "shared_keys": 0} or null,
     "groups": {"columns": GROUP_COLUMNS, "data": [[...], ...]},
     "names": {"columns": NAME_COLUMNS, "data": [[...], ...]},
     "conflicts": {"columns": CONFLICT_COLUMNS, "data": [[...], ...]}}   `_audit` loads only

- groups: one per event window, producer and schema id: `window` (start, ms; null without an
  event time), `producer_id`, `ph` (xxhash64 of producer_id, as Spark computes it),
  `schema_id`, `rows`, `null_server`, `null_seq`, `min_event_ms`, `max_event_ms`. The audit's
  profile of a loaded topic hour, and its index, come from these.
- names: one per window and producer: `rows` with a name (producer_id and seq not null),
  `distinct` names among them, `min_seq`, `max_seq`. An event is named by (producer_id, seq)
  (docs/design.md §3.4), so `rows - distinct` are repeats inside the load (0 for what the hourly load
  writes: it drops them), and two loads can share a name in a window only where their seq
  ranges overlap.
- conflicts (the `_audit` topic's loads only; absent for other topics and in summaries written
  before it): the rows of every name that the load saw with different contents, where it
  dropped one as a duplicate: `producer_id`, `seq`, the row's `load_hour` (this load's, or the
  previous hour's for a row that load holds) and position (`broker_id`, `partition`, `offset`,
  `index`), `dropped` (the load dropped this row; the others stay in the warehouse) and
  `fields`, the event's own fields as an object (timestamps as epoch ms). An AuditCount
  dropped as a duplicate of one with another count would otherwise leave no trace: the audit
  reports every such name as bad audit events (spark_apps.audit.audit_counts). Empty when the load
  dropped no such row.
- previous: the load certifies that no name of it is in the previous hour's load, as that
  load was then (its checkpoint and files): the hourly load drops such repeats; a summary the
  audit writes counts them (`shared_keys`). A certificate holds while that load is unchanged.

A summary is current while its `committed_at`, `rows_sha256` and `rows` are the checkpoint's and
its `files` are exactly the load's data files (names and lengths: the files the checkpoint's
version names, or every data file of the directory for a checkpoint from before versions): a
load replaced, or files changed by hand, makes it stale, and the audit counts that load from
its rows again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline_warehouse.filesystem import WarehouseFS

SUMMARY_FILE = "_load_summary.json"
FORMAT = 1
GROUP_COLUMNS = (
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
NAME_COLUMNS = ("window", "producer_id", "ph", "rows", "distinct", "min_seq", "max_seq")
CONFLICT_COLUMNS = (
    "producer_id",
    "seq",
    "load_hour",
    "broker_id",
    "partition",
    "offset",
    "index",
    "dropped",
    "fields",
)


def summary_path(load_dir: str) -> str:
    return f"{load_dir.rstrip('/')}/{SUMMARY_FILE}"


def data_files(
    fs: WarehouseFS, load_dir: str, names: Sequence[str] | None = None
) -> dict[str, int]:
    """The data files of a load and their lengths: the ones its checkpoint names (`names`:
    its version's; checkpoint.py), or, for a checkpoint from before versions, every data
    file of its directory (Hadoop's rule: not '_' or '.')."""
    listed = {
        e.name: int(e.size)
        for e in fs.list(load_dir)
        if not e.is_dir and not e.name.startswith(("_", "."))
    }
    if names is None:
        return listed
    return {name: listed[name] for name in names if name in listed}


@dataclass(frozen=True)
class Certificate:
    """The load shares no name with this previous load (as committed then, with these files)."""

    load_hour: str
    committed_at: str
    rows_sha256: str
    files: dict[str, int]
    shared_keys: int = 0

    def holds_for(self, previous: LoadSummary) -> bool:
        """Whether it still speaks of `previous` (its current summary) and found no name shared."""
        return self.shared_keys == 0 and (
            self.load_hour,
            self.committed_at,
            self.rows_sha256,
            self.files,
        ) == (previous.load_hour, previous.committed_at, previous.rows_sha256, previous.files)


@dataclass
class LoadSummary:
    topic: str
    load_hour: str
    committed_at: str
    rows_sha256: str
    rows: int
    files: dict[str, int]
    groups: list[list[Any]] = field(default_factory=list)  # GROUP_COLUMNS
    names: list[list[Any]] = field(default_factory=list)  # NAME_COLUMNS
    previous: Certificate | None = None
    conflicts: list[list[Any]] | None = None  # CONFLICT_COLUMNS; None: not recorded

    def to_json(self) -> str:
        conflicts = {}
        if self.conflicts is not None:
            conflicts["conflicts"] = {"columns": list(CONFLICT_COLUMNS), "data": self.conflicts}
        return json.dumps(
            {
                "format": FORMAT,
                "topic": self.topic,
                "load_hour": self.load_hour,
                "committed_at": self.committed_at,
                "rows_sha256": self.rows_sha256,
                "rows": self.rows,
                "files": dict(sorted(self.files.items())),
                "previous": None if self.previous is None else vars(self.previous),
                "groups": {"columns": list(GROUP_COLUMNS), "data": self.groups},
                "names": {"columns": list(NAME_COLUMNS), "data": self.names},
                **conflicts,
            },
            indent=None,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> LoadSummary:
        """Raises ValueError for anything that is not a summary of this format."""
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, not {FORMAT}")
            for part, columns in (("groups", GROUP_COLUMNS), ("names", NAME_COLUMNS)):
                if tuple(doc[part]["columns"]) != columns:
                    raise ValueError(f"{part} columns {doc[part]['columns']}")
            prev = doc.get("previous")
            conflicts = doc.get("conflicts")
            if conflicts is not None and tuple(conflicts["columns"]) != CONFLICT_COLUMNS:
                raise ValueError(f"conflicts columns {conflicts['columns']}")
            return cls(
                topic=str(doc["topic"]),
                load_hour=str(doc["load_hour"]),
                committed_at=str(doc["committed_at"]),
                rows_sha256=str(doc["rows_sha256"]),
                rows=int(doc["rows"]),
                files={str(k): int(v) for k, v in doc["files"].items()},
                groups=[list(r) for r in doc["groups"]["data"]],
                names=[list(r) for r in doc["names"]["data"]],
                previous=None if prev is None else _certificate(prev),
                conflicts=None if conflicts is None else [list(r) for r in conflicts["data"]],
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a load summary: {err!r}") from err

    def describes(
        self, committed_at: str, rows_sha256: str, rows: int, files: dict[str, int]
    ) -> bool:
        """Whether this summary is current for a load with this checkpoint and these files."""
        return (self.committed_at, self.rows_sha256, self.rows, self.files) == (
            committed_at,
            rows_sha256,
            rows,
            files,
        )


def _certificate(doc: dict[str, Any]) -> Certificate:
    return Certificate(
        load_hour=str(doc["load_hour"]),
        committed_at=str(doc["committed_at"]),
        rows_sha256=str(doc["rows_sha256"]),
        files={str(k): int(v) for k, v in doc["files"].items()},
        shared_keys=int(doc.get("shared_keys", 0)),
    )


def read_current(
    fs: WarehouseFS,
    load_dir: str,
    committed_at: str,
    rows_sha256: str,
    rows: int,
    path: str | None = None,
    names: Sequence[str] | None = None,
) -> LoadSummary | None:
    """The load's summary (in its directory, or at `path`) if it is there and current (see
    the module doc) for the load whose data files are `names` (data_files), else None."""
    path = path or summary_path(load_dir)
    try:
        if not fs.exists(path):
            return None
        summary = LoadSummary.from_json(fs.read_bytes(path))
    except (ValueError, OSError):
        return None  # damaged or unreadable: counted from the rows again, and rewritten
    files = data_files(fs, load_dir, names)
    return summary if summary.describes(committed_at, rows_sha256, rows, files) else None


def read_written_by(
    fs: WarehouseFS, load_dir: str, committed_at: str, rows_sha256: str, rows: int
) -> LoadSummary | None:
    """The summary in the load's directory if that load wrote it (its checkpoint's
    `committed_at`, `rows_sha256` and `rows`), whether or not its files changed since: what
    it says of the load's own work (the conflicts it dropped) still holds. Else None."""
    path = summary_path(load_dir)
    try:
        if not fs.exists(path):
            return None
        summary = LoadSummary.from_json(fs.read_bytes(path))
    except (ValueError, OSError):
        return None
    written = (summary.committed_at, summary.rows_sha256, summary.rows)
    return summary if written == (committed_at, rows_sha256, rows) else None


def write(fs: WarehouseFS, path: str, summary: LoadSummary) -> None:
    fs.write_bytes(path, summary.to_json().encode())
