"""The hour's rows as a Spark frame, read by Spark's tasks from the plan's splits: what Spark's
writer writes (a warehouse off file://) and where the bad records are found.

Each task reads one split of the plan (plan.py) with the `logbroker` source's own reader
(source.read_split, Avro, PERMISSIVE: a payload that is not an event is a row with `_error`
and `_value`), and hands Spark its Arrow batches (mapInArrow): the options, the splits and
the reader schema are the plan's, so nothing is parsed or discovered again. `load_hour`
follows the header columns (docs/design.md §3.6's column order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_apps.load.plan import HourPlan

POSITION = ["broker_id", "partition", "offset", "index"]  # a row's place in the log
KEY = ["producer_id", "seq"]  # an event's name (docs/design.md §3.4)


def read_rows(spark: Any, plan: HourPlan) -> Any:
    """The plan's readable ranges as rows (PERMISSIVE: bad records are rows), load_hour added,
    one Spark partition per split; no ranges: no rows, with the topic's columns."""
    schema = plan.decoder.schema
    if not plan.splits:
        return with_load_hour(spark.createDataFrame([], schema), plan.hour)
    options, splits, decoder = plan.options, plan.splits, plan.decoder

    def read(numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_apps.source.source import read_split

        for batch in numbers:
            for index in batch.column(0).to_pylist():
                yield from read_split(options, splits[index], decoder)

    numbered = spark.sparkContext.parallelize([(i,) for i in range(len(splits))], len(splits))
    rows = spark.createDataFrame(numbered, "split int").mapInArrow(read, schema)
    return with_load_hour(rows, plan.hour)


def with_load_hour(df: Any, hour: str) -> Any:
    """load_hour after the header columns (docs/design.md §3.6's column order)."""
    from pyspark.sql import functions as F

    columns = df.columns
    at = columns.index("schema_id") + 1
    ordered = [F.col(f"`{c}`") for c in columns[:at]]
    ordered.append(F.lit(hour).alias("load_hour"))
    ordered += [F.col(f"`{c}`") for c in columns[at:]]
    return df.select(*ordered)
