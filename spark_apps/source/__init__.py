"""The `logbroker` Spark data source (Python Data Source API): see source.py and options.py.

    source.py          the data source: batch and streaming readers on Spark's API
    options.py         its options, parsed and checked (SourceOptions)
    discovery.py       which partitions a query reads, where they are served, their offsets
    splits.py          offset ranges from the options, and the Spark splits they are cut into
    consumers.py       which consumer reads a partition: its broker's, or one that follows
                       a replicated partition's leader
    ranges.py          reading a range message by message, and rows_sha256
    admission.py       a stream's micro-batch cap (maxOffsetsPerTrigger)
    raw_columns.py     raw rows (valueFormat raw): a message's place and payload
    event_decoding.py  events through logbroker.serde: reader schemas, bulk decoding
    avro_columns.py    Avro rows (valueFormat avro): the header and the schema's fields
    avro_vector.py, avro_compiled.py   columnar Avro decoding, in Python and compiled
    entry_scan.py, entry_kernels.py    a fetch's plain entries walked in compiled code

from spark_apps.source import register
register(spark)
spark.read.format("logbroker").option("zookeeper", "127.0.0.1:2181/analysis")
     .option("subscribe", "page_views").option("valueFormat", "avro")
     .option("schemaRegistry", "127.0.0.1:2181/registry").load()
"""

from spark_apps.source.source import LogbrokerDataSource, register

__all__ = ["LogbrokerDataSource", "register"]
