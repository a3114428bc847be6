"""The pipeline's Airflow assets: what the DAGs emit and what downstream DAGs schedule on.

    logbroker-warehouse/<topic>   a load of <topic> committed an hour (extra: load_hour)
    logbroker-complete/<topic>    an hour of <topic> closed: audited complete and past its
                                  lateness grace; emitted again when late data reopened and
                                  re-closed it (extra: load_hour and the hour's counts)

A downstream DAG that needs complete data schedules on `complete_asset(topic)`, not on the
clock (docs/design.md §3.7).
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from .pipeline import Pipeline

# The mapped load task emits through the alias the one asset of the topic it loaded.
WAREHOUSE_ALIAS = AssetAlias("logbroker-warehouse")
COMPLETE_ALIAS = AssetAlias("logbroker-complete")


def warehouse_asset(pipeline: Pipeline, topic: str) -> Asset:
    return warehouse_topic_asset(pipeline.warehouse, topic)


def warehouse_topic_asset(warehouse: str, topic: str) -> Asset:
    """The same asset from the warehouse's URI (what the load operator is given)."""
    return Asset(name=f"logbroker-warehouse/{topic}", uri=f"{warehouse}/{topic}")


def complete_asset(pipeline: Pipeline, topic: str) -> Asset:
    return Asset(name=f"logbroker-complete/{topic}", uri=f"{pipeline.warehouse}/_complete/{topic}")
