"""rows_sha256 and the message counts of a load's ranges, read from the brokers on a driver
thread while Spark writes the rows (the contract: spark_apps.source.ranges); a replicated
partition's from its leader, followed if it moves (spark_apps.source.consumers). The ranges,
the cluster and the fetch size are the plan's (plan.py).

On its way it reads every event's name (producer_id, seq) into an event_names.NameKeys, so
that the usual hour is proved free of repeats without a Spark job (dedup.py).
"""

from __future__ import annotations

import threading

from spark_apps.load.event_names import NameKeys
from spark_apps.load.plan import HourPlan
from spark_apps.source.consumers import ClusterReads
from spark_apps.source.ranges import RangeDigest, digest_ranges


class DigestThread(threading.Thread):
    """Reads the ranges once; `digest()` waits for it and returns (or raises) what it found."""

    def __init__(self, plan: HourPlan) -> None:
        super().__init__(name="rows-sha256", daemon=True)
        assert plan.options.zookeeper is not None  # a load's options name its cluster
        self.zookeeper = plan.options.zookeeper
        self.credentials = plan.options.credentials
        self.ranges = plan.ranges
        self.fetch_size = plan.options.fetch_size
        self.result: RangeDigest | None = None
        self.error: BaseException | None = None
        self.names: NameKeys | None = None  # the range's event names, once read

    def run(self) -> None:
        from logbroker.client.cluster import Cluster

        try:
            names = NameKeys()
            with (
                Cluster(self.zookeeper, credentials=self.credentials) as cluster,
                ClusterReads(cluster) as reads_for,
            ):
                self.result = digest_ranges(
                    reads_for, self.ranges, fetch_size=self.fetch_size, names=names
                )
            names.repeats_possible()  # sorted here, while Spark still writes
            self.names = names
        except BaseException as exc:
            self.error = exc

    def digest(self) -> RangeDigest:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result
