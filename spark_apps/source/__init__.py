"""The `logbroker` Spark data source (Python Data Source API): see source.py and options.py.

from spark_apps.source import register
register(spark)
spark.read.format("logbroker").option("zookeeper", "127.0.0.1:2181/analysis")
     .option("subscribe", "page_views").option("valueFormat", "avro")
     .option("schemaRegistry", "127.0.0.1:2181/registry").load()
"""

from spark_apps.source.source import LogbrokerDataSource, register

__all__ = ["LogbrokerDataSource", "register"]
