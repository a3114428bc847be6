"""The hourly load's rows written to Parquet by the Spark tasks that read them (Arrow's writer).

Spark's own writer (parquet-mr, in the JVM) takes the Arrow batches a Python source yields,
turns them into rows and writes those value by value: ~2.6 us a row here, 5.2 of the 5.7 CPU s
the Python Data Source API's ceiling spends on 2,000,000 rows (docs/warehouse.md). The tasks
that read the ranges already hold the rows as Arrow batches, and Arrow's C++ writer writes
them in a fraction of that. So, for a warehouse pyarrow writes to (file://), the load runs
one Spark task per split of its plan (plan.py: the splits, the source's options and the
pinned reader schema, all made once) that reads it (source.read_split, the data source's own
reader) and writes its own Parquet file; other filesystems (viewfs://, hdfs://, s3a://, ...)
keep Spark's writer, through Hadoop's FileSystem (frames.py). A small hour (`in_driver`: at
most LoadSettings.driver_write_bytes of byte offsets) is written by the driver instead, split
after split through the same write_split (`write_rows_here`): the same files, and no Spark
job, whose own cost (~0.3 s) was most of a 20,000-event topic's load.

The files hold what Spark's writer makes of the same rows:
    <dir>/part-<split:05d>-<write id>-c000.<codec>.parquet
- the columns and their nullability are the Spark schema's (`written_schema`), which is also
  stored in the footer under Spark's key (org.apache.spark.sql.parquet.row.metadata), with
  the Spark version that proleptic-Gregorian files carry, so Spark reads back exactly the
  types its writer would have written, with no calendar rebase;
- timestamps TIMESTAMP(MICROS, UTC), lists in Parquet's three levels, the codec of
  spark.sql.parquet.compression.codec, row groups of up to ROW_GROUP_BYTES of Arrow data,
  min/max statistics on every column;
- the encodings are chosen per column (`column_encodings`): the header's ascending int64s
  (offset, event_time, seq) DELTA_BINARY_PACKED, every other column dictionary-encoded as
  Spark's writer does, up to DICTIONARY_BYTES of dictionary. A row group's unique values
  made a dictionary as big as the column, built through a hash table for nothing: now the
  benchmark's files are 3.9 x smaller and Arrow's writer spends ~35 % less
  (docs/warehouse.md). Spark's vectorized reader reads DELTA_BINARY_PACKED (since 3.3), as
  do Arrow and every Parquet reader of the last years;
- a task attempt writes `.<name>.<attempt id>.inprogress` (hidden from readers: Hadoop's
  rule; Spark's task attempt id, unique in the application) and, when complete, links it to
  `<name>` only if no attempt got there first (link(2) fails on an existing name: the first
  complete attempt wins and no attempt replaces another's file), then deletes its own
  temporary name. So speculative attempts and a retry beside a zombie are safe: every
  attempt of one split writes the same rows, one of them becomes the file, the others leave
  nothing; a killed attempt leaves only its hidden temporary, deleted once the job is done;
- bad records (PERMISSIVE's `_error` rows) are counted, not written: the load writes them
  to _errors on its own read (run.py).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa

from spark_apps.source.options import SourceOptions
from spark_apps.source.splits import SplitPlan

if TYPE_CHECKING:
    from spark_apps.load.plan import HourPlan

ERROR_COLUMN, VALUE_COLUMN = "_error", "_value"
ROW_GROUP_BYTES = 16 * 2**20  # ~110,000 rows of the benchmark; 16-64 MiB ran alike
# The header's columns whose values ascend within a split: stored as deltas of a few bits.
DELTA_COLUMNS = ("offset", "event_time", "seq")
# A column's dictionary stops growing here and the rest of its row group is written plain, as
# parquet-mr's does at 1 MiB: its row groups are 128 MiB, ours 16, so Arrow's 1 MiB default
# never stopped a near-unique column within one (~110,000 values, a dictionary as big as the
# column). A few thousand distinct strings (pages, hosts) still fit.
DICTIONARY_BYTES = 256 * 1024
SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_KEY = b"org.apache.spark.version"
CODECS = {  # spark.sql.parquet.compression.codec -> (pyarrow's name, the file name's part)
    "none": ("none", ""),
    "uncompressed": ("none", ""),
    "snappy": ("snappy", ".snappy"),
    "gzip": ("gzip", ".gz"),
    "zstd": ("zstd", ".zstd"),
    "lz4_raw": ("lz4", ".lz4raw"),
    "brotli": ("brotli", ".br"),
}
WRITERS = ("auto", "arrow", "spark")


class ParquetWriterChoiceError(ValueError):
    """--parquet-writer arrow for a warehouse or codec Arrow's writer cannot serve."""


@dataclass(frozen=True)
class SplitWritten:
    """What one task counted: the rows it wrote (no file when none, but for the first split)
    and the bad records it left out."""

    rows: int
    bad: int


@dataclass(frozen=True)
class TaskWrite:
    """What every task of one write needs (pickled to the Python workers): the plan's."""

    options: SourceOptions
    decoder: Any
    arrow_schema: pa.Schema
    directory: str
    write_id: str
    load_hour: str
    codec: str
    suffix: str
    row_group_bytes: int
    encodings: dict[str, Any]  # ParquetWriter's per-column options (column_encodings)


def use_arrow_writer(choice: str, uri: str, spark_codec: str) -> bool:
    """Whether the load writes its rows from its tasks: `auto` for file:// with a codec Arrow
    has; `arrow` insists (an error if it cannot); `spark` never."""
    if choice not in WRITERS:
        raise ParquetWriterChoiceError(f"--parquet-writer {choice!r}: one of {', '.join(WRITERS)}")
    if choice == "spark":
        return False
    local = urlparse(uri).scheme == "file"
    known = spark_codec.lower() in CODECS
    if choice == "arrow" and not (local and known):
        raise ParquetWriterChoiceError(
            f"--parquet-writer arrow: {'the codec ' + repr(spark_codec) if local else uri} "
            "is not one Arrow's writer serves here (file:// warehouses; codecs "
            f"{', '.join(sorted(CODECS))}); use --parquet-writer spark"
        )
    return local and known


def written_schema(source_schema: Any) -> Any:
    """The rows' Spark schema: the source's columns without PERMISSIVE's two, and load_hour
    (a non-null string, as Spark's lit() makes it) after the header (docs/design.md §3.6)."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [f for f in source_schema.fields if f.name not in (ERROR_COLUMN, VALUE_COLUMN)]
    at = [f.name for f in fields].index("schema_id") + 1
    fields.insert(at, StructField("load_hour", StringType(), False))
    return StructType(fields)


def write_rows(spark: Any, plan: HourPlan, directory: str) -> list[SplitWritten]:
    """Read the plan's splits and write their good rows into `directory` (a file:// URI),
    one Spark task and one file per split."""
    task, splits = plan_write(spark, plan, directory)
    numbered = list(enumerate(splits))
    written: list[SplitWritten] = (
        spark.sparkContext.parallelize(numbered, max(1, len(numbered)))
        .mapPartitions(lambda items: _write_splits(task, items))
        .collect()
    )
    _remove_leftovers(directory)
    return written


def write_rows_here(spark: Any, plan: HourPlan, directory: str) -> list[SplitWritten]:
    """The files write_rows writes (one per split, the same names and rows), written by this
    process one split after the other, with no Spark job: for a small hour (`in_driver`)."""
    task, splits = plan_write(spark, plan, directory)
    # A decoder of its own, as each task unpickles one: a decoder that has read caches its
    # compiled reader, which the plan's later reads (the bad records') could not pickle.
    task = dataclasses.replace(task, decoder=dataclasses.replace(task.decoder))
    written = [write_split(task, index, split) for index, split in enumerate(splits)]
    _remove_leftovers(directory)
    return written


def in_driver(plan: HourPlan, limit: int) -> bool:
    """Whether an hour is small enough for write_rows_here: its byte-offset ranges hold at
    most `limit` bytes (a 0.8-format topic's logical offsets do not say: Spark's tasks)."""
    readable = plan.readable
    return not plan.logical and sum(r.end - r.start for r in readable) <= limit


def plan_write(spark: Any, plan: HourPlan, directory: str) -> tuple[TaskWrite, list[SplitPlan]]:
    """What every task of one write needs, and the plan's splits, one task (and file) each."""
    from pyspark.sql.pandas.types import to_arrow_schema

    rows = written_schema(plan.decoder.schema)
    metadata = {SPARK_SCHEMA_KEY: rows.json().encode(), SPARK_VERSION_KEY: spark.version.encode()}
    codec, suffix = CODECS[spark.conf.get("spark.sql.parquet.compression.codec").lower()]
    arrow_schema = to_arrow_schema(rows, timezone="UTC").with_metadata(metadata)
    task = TaskWrite(
        options=plan.options,
        decoder=plan.decoder,
        arrow_schema=arrow_schema,
        directory=directory,
        write_id=uuid.uuid4().hex,
        load_hour=plan.hour,
        codec=codec,
        suffix=suffix,
        row_group_bytes=ROW_GROUP_BYTES,
        encodings=column_encodings(arrow_schema),
    )
    return task, plan.splits


def column_encodings(schema: pa.Schema) -> dict[str, Any]:
    """ParquetWriter's options for the rows' columns: DELTA_COLUMNS (those of them that are
    64-bit integers or timestamps) as deltas, every other leaf column with a dictionary of up
    to DICTIONARY_BYTES."""
    import pyarrow.parquet as pq

    delta = [
        name
        for name in DELTA_COLUMNS
        if name in schema.names
        and (
            pa.types.is_int64(schema.field(name).type)
            or pa.types.is_timestamp(schema.field(name).type)
        )
    ]
    # The leaf columns' paths as Parquet names them (a list's `tags.list.element`), from the
    # footer of an empty file: what ParquetWriter's per-column options are keyed by.
    empty = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), empty)
    footer = pq.read_metadata(pa.BufferReader(empty.getvalue())).schema
    leaves = [footer.column(i).path for i in range(len(footer))]
    return {
        "use_dictionary": [path for path in leaves if path not in delta],
        "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
        "dictionary_pagesize_limit": DICTIONARY_BYTES,
    }


def _remove_leftovers(directory: str) -> None:
    """Delete what attempts that died left in progress (a retried task wrote its file again)."""
    from pyarrow import fs

    afs, path = fs.FileSystem.from_uri(directory)
    for info in afs.get_file_info(fs.FileSelector(path)):
        if info.base_name.endswith(".inprogress"):
            afs.delete_file(info.path)


def _write_splits(
    task: TaskWrite, items: Iterator[tuple[int, SplitPlan]]
) -> Iterator[SplitWritten]:
    for index, plan in items:
        yield write_split(task, index, plan)


def _attempt_id() -> str:
    """This Spark task attempt's id (unique in the application), or a random one outside
    Spark (a test calling write_split directly)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return str(context.taskAttemptId()) if context is not None else uuid.uuid4().hex[:12]


def _link_first(temporary: str, final: str) -> None:
    """Give the complete file at `temporary` the name `final` unless an attempt did first;
    either way `temporary` is gone afterwards (local paths: the Arrow writer's file://)."""
    try:
        os.link(temporary, final)
    except FileExistsError:
        pass  # another attempt of this split won: its file has the same rows
    finally:
        os.unlink(temporary)


def write_split(task: TaskWrite, index: int, split: SplitPlan) -> SplitWritten:
    """One split's good rows into one file (in a Python worker)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyarrow import fs

    from spark_apps.source.raw_columns import constant_strings
    from spark_apps.source.source import read_split

    options = task.options
    names = task.arrow_schema.names
    hour_at = names.index("load_hour")
    permissive = options.mode == "PERMISSIVE"
    name = f"part-{index:05d}-{task.write_id}-c000{task.suffix}.parquet"
    afs, directory = fs.FileSystem.from_uri(task.directory)
    temporary = f"{directory}/.{name}.{_attempt_id()}.inprogress"
    final = f"{directory}/{name}"
    writer = None
    pending: list[pa.RecordBatch] = []
    pending_bytes = rows = bad = 0

    def flush() -> None:
        nonlocal writer, pending, pending_bytes
        if writer is None:
            writer = pq.ParquetWriter(
                temporary,
                task.arrow_schema,
                filesystem=afs,
                compression=task.codec,
                **task.encodings,
            )
        writer.write_table(pa.Table.from_batches(pending, task.arrow_schema))
        pending, pending_bytes = [], 0

    try:
        for batch in read_split(options, split, task.decoder):
            errors = batch.column(ERROR_COLUMN) if permissive else None
            # bad records (rare): counted, not written
            if errors is not None and errors.null_count != len(errors):
                good = pc.is_null(errors)
                bad += len(errors) - pc.sum(good.cast(pa.int64())).as_py()
                batch = batch.filter(good)
                if not batch.num_rows:
                    continue
            columns = [batch.column(n) for n in names if n != "load_hour"]
            columns.insert(hour_at, constant_strings(task.load_hour, batch.num_rows))
            pending.append(pa.RecordBatch.from_arrays(columns, schema=task.arrow_schema))
            pending_bytes += pending[-1].nbytes
            rows += batch.num_rows
            if pending_bytes >= task.row_group_bytes:
                flush()
        if not rows and index:
            return SplitWritten(0, bad)
        if pending or writer is None:  # split 0 writes the schema even with no rows
            flush()
        assert writer is not None
        writer.close()
        writer = None
        _link_first(temporary, final)
    finally:
        if writer is not None:  # failed: no file, nothing hidden left behind either
            writer.close()
            afs.delete_file(temporary)
    return SplitWritten(rows, bad)
