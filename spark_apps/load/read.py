"""The load's ranges as the `logbroker` data source reads them (Avro, PERMISSIVE), as Spark
frames with `load_hour` after the header columns (docs/design.md §3.6's column order)."""

from __future__ import annotations

import json
from typing import Any

from spark_apps.load.settings import LoadSettings
from spark_apps.source.options import offsets_json, parse_options
from spark_apps.source.ranges import PartitionRange

POSITION = ["broker_id", "partition", "offset", "index"]  # a row's place in the log
KEY = ["producer_id", "seq"]  # an event's name (docs/design.md §3.4)


def source_options(
    spark: Any, settings: LoadSettings, topic: str, readable: list[PartitionRange]
) -> dict[str, str]:
    """The `logbroker` source's options for exactly these ranges (Avro, PERMISSIVE)."""
    return {
        "zookeeper": settings.zookeeper,
        "assign": json.dumps({topic: [r.name for r in readable]}),
        "startingOffsets": offsets_json(
            {(r.topic, r.broker_id, r.partition): r.start for r in readable}
        ),
        "endingOffsets": offsets_json(
            {(r.topic, r.broker_id, r.partition): r.end for r in readable}
        ),
        "valueFormat": "avro",
        "schemaRegistry": settings.schema_registry,
        "mode": "PERMISSIVE",
        "failOnDataLoss": "true",
        "fetchSize": str(settings.fetch_size),
        "minPartitions": str(settings.min_partitions or spark.sparkContext.defaultParallelism),
        "maxBytesPerPartition": str(settings.max_bytes_per_partition),
    }


def read_ranges(
    spark: Any, settings: LoadSettings, topic: str, hour: str, readable: list[PartitionRange]
) -> Any:
    """The ranges as the source reads them (PERMISSIVE: bad records are rows), load_hour added;
    no ranges: no rows, with the topic's columns."""
    if not readable:
        return with_load_hour(_empty_frame(spark, settings, topic), hour)
    source = spark.read.format("logbroker").options(
        **source_options(spark, settings, topic, readable)
    )
    return with_load_hour(source.load(), hour)


def with_load_hour(df: Any, hour: str) -> Any:
    """load_hour after the header columns (docs/design.md §3.6's column order)."""
    from pyspark.sql import functions as F

    columns = df.columns
    at = columns.index("schema_id") + 1
    ordered = [F.col(f"`{c}`") for c in columns[:at]]
    ordered.append(F.lit(hour).alias("load_hour"))
    ordered += [F.col(f"`{c}`") for c in columns[at:]]
    return df.select(*ordered)


def _empty_frame(spark: Any, settings: LoadSettings, topic: str) -> Any:
    from spark_apps.source.avro_columns import spark_schema

    options = parse_options(
        {
            "zookeeper": settings.zookeeper,
            "subscribe": topic,
            "valueFormat": "avro",
            "schemaRegistry": settings.schema_registry,
            "mode": "PERMISSIVE",
        }
    )
    return spark.createDataFrame([], spark_schema(options))
