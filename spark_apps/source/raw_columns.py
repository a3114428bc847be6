"""Raw rows: one per message, its place and its payload, as Arrow record batches.

topic      string   the topic
broker_id  int      the broker that holds the partition
partition  int      the partition on that broker
offset     bigint   the top-level entry's offset (a compressed wrapper's own)
index      int      the message's position inside its wrapper (0 when not compressed)
key        binary   the message's key, null when it has none: only when the query reads a
                    0.8-format topic (a 0.7 topic's rows then have null keys)
value      binary   the payload

Decision: a query of 0.7-format topics only keeps its schema as before, without `key` (the
warehouse's hours of such topics, and whatever reads them, stay as they are); a query that
reads a 0.8-format topic has the column after `index`, for every row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from spark_apps.source.ranges import Chunk, PartitionRange, Positions

POSITION_FIELDS = [
    pa.field("topic", pa.string()),
    pa.field("broker_id", pa.int32()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("index", pa.int32()),
]
RAW_SCHEMA = pa.schema([*POSITION_FIELDS, pa.field("value", pa.binary())])
RAW_DDL = "topic string, broker_id int, partition int, offset bigint, `index` int, value binary"
KEY_FIELD = pa.field("key", pa.binary())
RAW_KEYED_SCHEMA = pa.schema([*POSITION_FIELDS, KEY_FIELD, pa.field("value", pa.binary())])
RAW_KEYED_DDL = (
    "topic string, broker_id int, partition int, offset bigint, `index` int, key binary, "
    "value binary"
)


def constant_strings(value: str, n: int) -> pa.StringArray:
    """`value` n times, built from its buffers: 7 us for 7,000 rows, where a list of n
    strings costs ~350 us and pa.repeat ~50 us (after ~0.3 s the first time in a process)."""
    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def position_arrays(r: PartitionRange, offsets: Positions, indexes: Positions) -> list[pa.Array]:
    n = len(offsets)
    return [
        constant_strings(r.topic, n),
        pa.array(np.full(n, r.broker_id, dtype=np.int32)),
        pa.array(np.full(n, r.partition, dtype=np.int32)),
        pa.array(offsets, pa.int64()),
        pa.array(indexes, pa.int32()),
    ]


def key_array(keys: list[bytes | None] | pa.Array | None, n: int) -> pa.Array:
    """The `key` column: a 0.8-format topic's keys (a list, or the column already made:
    ranges.Chunk.key_values), or n nulls (a 0.7 topic's messages)."""
    if keys is None:
        return pa.nulls(n, pa.binary())
    return keys if isinstance(keys, pa.Array) else pa.array(keys, pa.binary())


def raw_batch(r: PartitionRange, chunk: Chunk, keyed: bool = False) -> pa.RecordBatch:
    arrays = position_arrays(r, chunk.offsets, chunk.indexes)
    if keyed:
        arrays.append(key_array(chunk.key_values, len(chunk)))
    arrays.append(chunk.values)
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_KEYED_SCHEMA if keyed else RAW_SCHEMA)
