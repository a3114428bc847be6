"""An hour's checkpoint: the commit record of its load (docs/design.md §3.6), and reading them.

The one model of a committed load (`Checkpoint`) and the one reader of a warehouse's committed
hours (`Warehouse`), for the load, the audit, the hour states, the hooks and the pages.

    <wh>/_checkpoints/<topic>/YYYY-MM-DDTHH.json, keys in this order:

    {"topic": "page_views", "load_hour": "2026-11-22T10",
     "partitions": [{"broker_id": 0, "partition": 1, "start_offset": 0, "end_offset": 41230,
                     "messages": 196}, ...],
     "rows": 391, "duplicates_dropped": 0, "bad_records": 0,
     "rows_sha256": "<hex>", "committed_at": "2026-11-22T11:02:13Z",
     "version": "20261122T110210-1a2b3c4d",
     "files": ["part-00000-<write id>-c000.snappy.parquet", ...],
     "error_files": ["part-00000-<write id>-c000.snappy.parquet", ...]}

A partition is named as the brokers name it: `broker_id` b >= 0 for partition i of broker b
(a 0.7 topic), -1 for partition p of a replicated topic (docs/replication.md), whose offsets
are valid on every replica. `"offsets": "logical"` (after `load_hour`) says the offsets are
message numbers of a 0.8-format topic (the n-th message is n); a checkpoint without it holds
byte offsets (positions in a 0.7-format log), as every checkpoint did before 0.8-format
topics: a byte checkpoint is written as before, so it reads the same everywhere. An hour is committed when its checkpoint exists. Every load of an hour is a new version: its
files carry the load's own write id, so a backfill's files sit beside the ones they replace
until its checkpoint, written last and in one rename, switches the hour to them (as table
formats switch snapshots); the files of the old version are deleted after that. So a reader
that goes through the checkpoint (`Warehouse.data_files`) sees the old version or the new
one, never neither and never both. `files` names the hour's data files in
`<topic>/load_hour=H/`, `error_files` its bad records' in `_errors/<topic>/load_hour=H/`.
Checkpoints written before versions (no `version`) mean every data file of those directories.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from logbroker.coordination.paths import partition_name
from pipeline_warehouse import layout
from pipeline_warehouse.filesystem import (
    FsspecFS,
    WarehouseFS,
    as_uri,
    join,
    parquet_files,
)
from pipeline_warehouse.time_format import hour_name, parse_hour


class WarehouseError(ValueError):
    """A warehouse file is missing or malformed: the message names the file and the field."""


@dataclass(frozen=True)
class PartitionCheckpoint:
    broker_id: int
    partition: int
    start_offset: int
    end_offset: int
    messages: int

    @property
    def name(self) -> str:
        """`<broker_id>-<partition>`, or `<p>` for a replicated topic's (broker_id -1)."""
        return partition_name(self.broker_id, self.partition)


BYTE_OFFSETS = "byte"
LOGICAL_OFFSETS = "logical"
OFFSET_KINDS = (BYTE_OFFSETS, LOGICAL_OFFSETS)


@dataclass(frozen=True)
class Checkpoint:
    topic: str
    load_hour: str
    partitions: tuple[PartitionCheckpoint, ...]
    rows: int
    duplicates_dropped: int
    bad_records: int
    rows_sha256: str
    committed_at: str
    version: str | None = None  # None: a checkpoint from before versions
    files: tuple[str, ...] | None = None  # the hour's data files (None: all in its directory)
    error_files: tuple[str, ...] | None = None
    offsets: str = BYTE_OFFSETS  # "logical": a 0.8-format topic's message numbers

    @property
    def logical(self) -> bool:
        """Whether the offsets are logical (message numbers), not byte positions."""
        return self.offsets == LOGICAL_OFFSETS

    @property
    def hour(self) -> datetime:
        """`load_hour` as the hour's start (UTC)."""
        return parse_hour(self.load_hour)

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    def data_dir(self, wh: str) -> str:
        return layout.load_dir(wh, self.topic, self.load_hour)

    def data_uris(self, wh: str) -> list[str]:
        """What to read for the load's rows, without listing anything: its version's files
        (or, before versions, its whole directory). Warehouse.data_files checks they exist."""
        if self.files is None:
            return [self.data_dir(wh)]
        return [join(self.data_dir(wh), name) for name in self.files]

    def errors_uris(self, wh: str) -> list[str]:
        """What to read for its bad records ([] when it has none on record)."""
        where = layout.errors_dir(wh, self.topic, self.load_hour)
        if self.error_files is None:
            return [where] if self.bad_records else []
        return [join(where, name) for name in self.error_files]

    def ends(self) -> dict[tuple[int, int], int]:
        return {(p.broker_id, p.partition): p.end_offset for p in self.partitions}

    def to_json(self) -> str:
        value: dict[str, Any] = {
            "topic": self.topic,
            "load_hour": self.load_hour,
            **({"offsets": self.offsets} if self.logical else {}),
            "partitions": [
                {
                    "broker_id": p.broker_id,
                    "partition": p.partition,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "messages": p.messages,
                }
                for p in self.partitions
            ],
            "rows": self.rows,
            "duplicates_dropped": self.duplicates_dropped,
            "bad_records": self.bad_records,
            "rows_sha256": self.rows_sha256,
            "committed_at": self.committed_at,
        }
        if self.version is not None:
            value["version"] = self.version
            value["files"] = list(self.files or ())
            value["error_files"] = list(self.error_files or ())
        return json.dumps(value, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "checkpoint") -> Checkpoint:
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WarehouseError(f"{where} is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise WarehouseError(f"{where} is not a JSON object")

        def get(obj: dict[str, Any], key: str, kind: type, context: str) -> Any:
            if key not in obj:
                raise WarehouseError(f"{where}: {context}{key!r} is missing")
            v = obj[key]
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise WarehouseError(f"{where}: {context}{key!r} is not a {kind.__name__}: {v!r}")
            return v

        def names(key: str) -> tuple[str, ...] | None:
            if "version" not in value:
                return None
            listed = get(value, key, list, "")
            for i, name in enumerate(listed):
                if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
                    raise WarehouseError(f"{where}: {key}[{i}] is not a file name: {name!r}")
            return tuple(listed)

        parts = []
        for i, p in enumerate(get(value, "partitions", list, "")):
            if not isinstance(p, dict):
                raise WarehouseError(f"{where}: partitions[{i}] is not an object")
            ctx = f"partitions[{i}]."
            parts.append(
                PartitionCheckpoint(
                    *(
                        get(p, k, int, ctx)
                        for k in (
                            "broker_id",
                            "partition",
                            "start_offset",
                            "end_offset",
                            "messages",
                        )
                    )
                )
            )
        hour = get(value, "load_hour", str, "")
        try:
            parse_hour(hour)
        except ValueError as exc:
            raise WarehouseError(f"{where}: 'load_hour': {exc}") from None
        offsets = get(value, "offsets", str, "") if "offsets" in value else BYTE_OFFSETS
        if offsets not in OFFSET_KINDS:
            raise WarehouseError(
                f"{where}: 'offsets' is {offsets!r}, not one of {', '.join(OFFSET_KINDS)}"
            )
        return cls(
            topic=get(value, "topic", str, ""),
            load_hour=hour,
            partitions=tuple(parts),
            rows=get(value, "rows", int, ""),
            duplicates_dropped=get(value, "duplicates_dropped", int, ""),
            bad_records=get(value, "bad_records", int, ""),
            rows_sha256=get(value, "rows_sha256", str, ""),
            committed_at=get(value, "committed_at", str, ""),
            version=get(value, "version", str, "") if "version" in value else None,
            files=names("files"),
            error_files=names("error_files"),
            offsets=offsets,
        )


class Warehouse:
    """The committed hours of a warehouse, through one filesystem (filesystem.WarehouseFS).

    wh = Warehouse.open("file:///data/wh")          # Python's side (fsspec), no JVM
    wh = Warehouse("hdfs://nn/wh", HadoopFS(spark))  # any WarehouseFS: the Spark jobs plug
                                                     # in Hadoop's (spark_apps.hadoop_fs)
    wh.committed_hours("page_views"); wh.checkpoint("page_views", "2026-11-22T10")
    wh.data_files(checkpoint)    # the URIs of the hour's current version
    """

    def __init__(self, uri: str, fs: WarehouseFS) -> None:
        self.uri = as_uri(uri)
        self.fs = fs

    @classmethod
    def open(cls, uri: str) -> Warehouse:
        """Through fsspec: no JVM (the Spark jobs open theirs with spark_apps.hadoop_fs)."""
        return cls(uri, FsspecFS())

    # paths
    def topic_dir(self, topic: str) -> str:
        return join(self.uri, topic)

    def hour_dir(self, topic: str, hour: str) -> str:
        return layout.load_dir(self.uri, topic, hour)

    def checkpoint_path(self, topic: str, hour: str) -> str:
        return layout.checkpoint_file(self.uri, topic, hour)

    def errors_dir(self, topic: str, hour: str) -> str:
        return layout.errors_dir(self.uri, topic, hour)

    def staging_root(self, topic: str) -> str:
        return layout.staging_root(self.uri, topic)

    # reading
    def topics(self) -> list[str]:
        """Topics that have at least one checkpoint (`_audit` included), by name."""
        return [
            e.name
            for e in self.fs.list(join(self.uri, layout.CHECKPOINTS))
            if e.is_dir and not e.name.startswith(".")
        ]

    def committed_hours(self, topic: str) -> list[str]:
        """Hours of `topic` with a checkpoint, oldest first (no checkpoint is read)."""
        hours = []
        for e in self.fs.list(layout.checkpoints_dir(self.uri, topic)):
            if e.is_dir or not e.name.endswith(".json"):
                continue
            try:
                parse_hour(e.name[:-5])
            except ValueError:
                continue  # not a checkpoint (an editor's backup, a temporary file)
            hours.append(e.name[:-5])
        return sorted(hours)

    def checkpoint(self, topic: str, hour: str | datetime) -> Checkpoint | None:
        """The hour's checkpoint, or None when it is not committed; WarehouseError when the
        file is malformed or speaks of another topic or hour."""
        hour = hour_name(hour)
        path = self.checkpoint_path(topic, hour)
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError:
            return None
        cp = Checkpoint.from_json(data, where=path)
        if cp.topic != topic or cp.load_hour != hour:
            raise WarehouseError(
                f"{path} holds topic {cp.topic!r} hour {cp.load_hour}, not {topic!r} {hour}"
            )
        return cp

    def checkpoints(self, topic: str) -> list[Checkpoint]:
        return [cp for h in self.committed_hours(topic) if (cp := self.checkpoint(topic, h))]

    def last_committed(self, topic: str) -> Checkpoint | None:
        hours = self.committed_hours(topic)
        return self.checkpoint(topic, hours[-1]) if hours else None

    def data_files(self, cp: Checkpoint) -> list[str]:
        """The URIs of the hour's data files, as its checkpoint names them; WarehouseError in
        one line when one is missing (the hour cannot be read whole)."""
        return self._files(self.hour_dir(cp.topic, cp.load_hour), cp.files, cp)

    def error_files(self, cp: Checkpoint) -> list[str]:
        return self._files(self.errors_dir(cp.topic, cp.load_hour), cp.error_files, cp)

    def _files(self, directory: str, names: tuple[str, ...] | None, cp: Checkpoint) -> list[str]:
        present = {e.name: e.uri for e in parquet_files(self.fs, directory)}
        if names is None:  # a checkpoint from before versions: the whole directory
            return [present[n] for n in sorted(present)]
        missing = [n for n in names if n not in present]
        if missing:
            raise WarehouseError(
                f"{cp.topic} {cp.load_hour}: {len(missing)} of the {len(names)} files its "
                f"checkpoint (version {cp.version}) names are not in {directory}, e.g. {missing[0]}"
            )
        return [present[n] for n in names]

    def count_rows(self, cp: Checkpoint) -> int:
        """Rows of the hour's current version (Parquet footers only)."""
        return sum(self.fs.parquet_file_rows(uri) for uri in self.data_files(cp))
