"""The `logbroker` data source: batch and streaming readers on Spark's Python Data Source API.

    spark.read.format("logbroker").option("zookeeper", "127.0.0.1:2181/analysis")
         .option("subscribe", "page_views").load()
    spark.readStream.format("logbroker").option(...).load()

Planning (`partitions()`, `latestOffset()`) runs in a Python worker beside the driver: it asks
the cluster for partitions and offsets. Reading (`read()`) runs in the executors' Python
workers: each opens its own connection to one broker (a replicated partition's leader, which
it follows if leadership moves: consumers.py) and yields Arrow record batches, a fetch at a time,
so no per-row Python object crosses into the JVM. A stream's offsets are
{"topic": {"<broker_id>-<partition>": offset}} ("<p>" for a replicated partition): the end of
one micro-batch is the start of the next, and Spark checkpoints them. A 0.8-format topic's
offsets are logical (message numbers: discovery.py), and its rows carry a `key` column
(raw_columns.py: a query that reads only 0.7-format topics has none).

A stream takes Spark's admission control: with `maxOffsetsPerTrigger` its default read limit
is ReadMaxRows(N), and `latestOffset(start, limit)` ends each partition after its share of
N entries (admission.py: what is counted, how it is split). Trigger.AvailableNow reads to the
offsets that were latest when the query started, in micro-batches within the cap; Trigger.Once
(ReadAllAvailable) reads everything in one. A partition missing from discovery (its broker
down) keeps its offset in the next end, so that it resumes there rather than from 0; a range
of a micro-batch whose broker is gone by the time it is planned stops the query (it is never
skipped: Spark would record it as read).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_apps.source.admission import capped_ends
from spark_apps.source.consumers import open_reads
from spark_apps.source.discovery import (
    DiscoveryError,
    PartitionState,
    discover,
    format08_topics,
    segment_starts,
)
from spark_apps.source.options import SourceOptions, parse_options
from spark_apps.source.ranges import read_range
from spark_apps.source.raw_columns import RAW_DDL, RAW_KEYED_DDL, raw_batch
from spark_apps.source.splits import SplitPlan, offset_for, plan_ranges, plan_splits

log = logging.getLogger("logbroker.spark")

StreamOffsets = dict[str, dict[str, int]]


class LogbrokerPartition(InputPartition):
    def __init__(self, plan: SplitPlan) -> None:
        super().__init__(plan)
        self.plan = plan


def _plan(partition: InputPartition) -> SplitPlan:
    """The plan of a partition Spark hands back to read: one of ours, from partitions()."""
    if not isinstance(partition, LogbrokerPartition):
        raise TypeError(f"the logbroker source cannot read {partition!r}: not its partition")
    return partition.plan


def _warn(message: str) -> None:
    log.warning(message)


def _splits(options: SourceOptions, ranges: list[Any]) -> list[LogbrokerPartition]:
    plans = plan_splits(
        ranges,
        max_bytes=options.max_bytes_per_partition,
        min_partitions=options.min_partitions,
        segment_starts=lambda s: segment_starts(
            s, options.zookeeper, credentials=options.credentials
        ),
    )
    return [LogbrokerPartition(p) for p in plans]


def read_split(
    options: SourceOptions, plan: SplitPlan, decoder: Any, keyed: bool = False
) -> Iterator[pa.RecordBatch]:
    """The rows of one split: raw (no `decoder`; with a `key` column if `keyed`) or Avro."""
    r = plan.range
    reads = open_reads(
        options.zookeeper,
        r.topic,
        r.broker_id,
        r.partition,
        plan.host,
        plan.port,
        fetch_size=options.fetch_size,
        logical=r.logical,
        credentials=options.credentials,
    )
    with reads as consumer:
        for chunk in read_range(
            consumer,
            plan.range,
            read_from=plan.read_from,
            owned_from=plan.owned_from,
            owned_to=plan.owned_to,
            fetch_size=options.fetch_size,
            fail_on_data_loss=options.fail_on_data_loss,
            warn=_warn,
        ):
            if decoder is None:
                yield raw_batch(plan.range, chunk, keyed)
            else:
                batch = decoder.batch(plan.range, chunk)
                if batch.num_rows:
                    yield batch


def _decoder(options: SourceOptions, schema: StructType) -> Any:
    if options.value_format == "raw":
        return None
    from spark_apps.source.avro_columns import AvroDecoder

    return AvroDecoder.for_schema(options, schema)


class LogbrokerBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType, keyed: bool = False) -> None:
        self.options = options
        self.decoder = _decoder(options, schema)  # resolved here, pickled to the readers
        self.keyed = keyed

    def partitions(self) -> list[LogbrokerPartition]:
        o = self.options
        states = discover(o)
        ranges = plan_ranges(
            states,
            lambda s: offset_for(o.starting_offsets, s, "earliest"),
            lambda s: offset_for(o.ending_offsets, s, "latest"),
            fail_on_data_loss=o.fail_on_data_loss,
            warn=_warn,
        )
        return _splits(o, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_split(self.options, _plan(partition), self.decoder, self.keyed)


class LogbrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType, keyed: bool = False) -> None:
        self.options = options
        self.decoder = _decoder(options, schema)
        self.keyed = keyed
        # Planning calls (latestOffset, prepareForTriggerAvailableNow, ...) come to one
        # reader object, in one Python worker, for the query's life: these persist.
        self._target: StreamOffsets | None = None  # Trigger.AvailableNow: read up to here
        self._latest: StreamOffsets | None = None  # what the last latestOffset() found

    def _offsets(self, states: list[PartitionState], spec: Any, default: str) -> StreamOffsets:
        out: StreamOffsets = {}
        for s in states:
            out.setdefault(s.topic, {})[s.name] = offset_for(spec, s, default)
        return out

    def initialOffset(self) -> StreamOffsets:
        return self._offsets(discover(self.options), self.options.starting_offsets, "latest")

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets(discover(self.options), "latest", "latest")

    def reportLatestOffset(self) -> StreamOffsets | None:
        return self._latest

    def latestOffset(
        self, start: StreamOffsets | None = None, limit: ReadLimit | None = None
    ) -> StreamOffsets:
        states = discover(self.options)
        self._latest = self._offsets(states, "latest", "latest")
        if self._target is not None:  # partitions found after the target was set wait
            target = self._target
            states = [
                s._replace(latest=min(s.latest, target[s.topic][s.name]))
                for s in states
                if s.name in target.get(s.topic, {})
            ]
        start = start or {}
        ends: StreamOffsets = {t: dict(parts) for t, parts in start.items()}
        if isinstance(limit, ReadMaxRows):
            o = self.options
            capped = capped_ends(
                states,
                lambda s: start.get(s.topic, {}).get(s.name, 0),  # as partitions() starts it
                limit.max_rows,
                fetch_size=o.fetch_size,
                fail_on_data_loss=o.fail_on_data_loss,
                warn=_warn,
                zookeeper=o.zookeeper,
                credentials=o.credentials,
            )
            for s, end in capped.items():
                ends.setdefault(s.topic, {})[s.name] = end
        elif limit is None or isinstance(limit, ReadAllAvailable):
            for s in states:
                ends.setdefault(s.topic, {})[s.name] = s.latest
        else:
            raise ValueError(
                f"the logbroker source limits micro-batches by ReadMaxRows "
                f"(maxOffsetsPerTrigger) or not at all; Spark asked for {limit!r}"
            )
        return ends

    def partitions(self, start: StreamOffsets, end: StreamOffsets) -> list[LogbrokerPartition]:
        found = discover(self.options)
        _check_served(found, start, end)
        states = [
            s for s in found if s.name in end.get(s.topic, {})
        ]  # partitions that appeared after `end` was chosen wait for the next batch
        ranges = plan_ranges(
            states,
            lambda s: start.get(s.topic, {}).get(s.name, 0),  # new partition: from its start
            lambda s: end[s.topic][s.name],
            fail_on_data_loss=self.options.fail_on_data_loss,
            warn=_warn,
        )
        return _splits(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_split(self.options, _plan(partition), self.decoder, self.keyed)

    def commit(self, end: StreamOffsets) -> None:
        pass  # offsets live in Spark's checkpoint; the brokers keep nothing per reader


def _check_served(found: list[PartitionState], start: StreamOffsets, end: StreamOffsets) -> None:
    """A range of this micro-batch whose broker is gone cannot be skipped: Spark would record
    its end as read. The query stops, and resumes from its checkpoint once the broker is back."""
    served = {(s.topic, s.name) for s in found}
    unread = [
        f"topic {topic!r} partition {name} [{start.get(topic, {}).get(name, 0)}, {offset})"
        for topic, parts in sorted(end.items())
        for name, offset in sorted(parts.items())
        if (topic, name) not in served and offset > start.get(topic, {}).get(name, 0)
    ]
    if unread:
        raise DiscoveryError(
            f"no live broker serves {', '.join(unread)} of this micro-batch; restart the query "
            "when its broker is back (it resumes from its checkpoint)"
        )


class LogbrokerDataSource(DataSource):
    """format("logbroker"): see options.py for the options."""

    @classmethod
    def name(cls) -> str:
        return "logbroker"

    def schema(self) -> StructType | str:
        options = parse_options(self.options)
        if options.value_format == "raw":
            from spark_apps.source.event_decoding import topics_of

            topics = topics_of(options) if options.zookeeper else []  # `brokers`: 0.7 only
            return RAW_KEYED_DDL if format08_topics(options, topics) else RAW_DDL
        from spark_apps.source.avro_columns import spark_schema

        return spark_schema(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogbrokerBatchReader(parse_options(self.options), schema, self._keyed(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_options(self.options, streaming=True)
        return LogbrokerStreamReader(options, schema, self._keyed(schema))

    def _keyed(self, schema: StructType | None) -> bool:
        """Whether the rows have a `key` column (a 0.8-format topic is read: raw_columns.py),
        from the schema Spark hands over or, when it hands none, the source's own."""
        own = self.schema() if schema is None else schema
        return own == RAW_KEYED_DDL if isinstance(own, str) else "key" in own.fieldNames()


def register(spark: Any) -> None:
    """Make spark.read.format("logbroker") (and readStream) known to `spark`."""
    spark.dataSource.register(LogbrokerDataSource)
