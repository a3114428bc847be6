"""Test support for the Spark tests: a small two-broker analysis cluster with a registry
(three brokers, and replicated topics, with `brokers=3`), framed Avro events (docs/design.md
§3.4), and an independent rows_sha256.

Schemas are registered and events encoded by logbroker.serde (SchemaRegistry, EventCodec).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.serde import EventCodec, SchemaRegistry
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.pipeline_stack import SMALL_JOB_CONF
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer
from spark_apps.class_archive import with_archive

HEADER = {
    "type": "record",
    "name": "EventHeader",
    "namespace": "logbroker",
    "fields": [
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "server", "type": "string"},
        {"name": "producer_id", "type": "string"},
        {"name": "seq", "type": "long"},
    ],
}
PAGE_VIEW = {
    "type": "record",
    "name": "PageView",
    "namespace": "demo",
    "fields": [
        {"name": "header", "type": HEADER},
        {"name": "user_id", "type": "long"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}
EPOCH_MS = 1_795_000_000_000
ROOT = Path(__file__).resolve().parents[2]
SMALL_JOB_JAVA = SMALL_JOB_CONF["spark.driver.extraJavaOptions"]


def load_command(cluster: AnalysisCluster, warehouse: Path, hour: str, *select: str) -> list[str]:
    """The hourly load as a load task submits it (local[2], no UI) of the topics `select`
    names (`--topics a,b` or `--topic-pattern p`), and its environment: load_env()."""
    return [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", "local[2]",
        "--conf", "spark.ui.enabled=false",
        # as the demo's connection gives it: the driver maps Spark's class archive
        # (spark_apps.class_archive), and a small job's JVM compiles with C1 only
        "--conf", f"spark.driver.extraJavaOptions={with_archive(SMALL_JOB_JAVA)}",
        str(ROOT / "spark_apps" / "jobs" / "hourly_load.py"),
        "--zookeeper", cluster.live.connect,
        "--schema-registry", cluster.registry.connect,
        *select,
        "--hour", hour,
        "--warehouse", warehouse.as_uri(),
    ]  # fmt: skip


def load_env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")


@dataclass
class AnalysisCluster:
    zk: ZooKeeperServer
    live: ZkTarget
    registry: ZkTarget
    brokers: list[BrokerProcess]
    schema_ids: dict[str, int] = field(default_factory=dict)
    seq: int = 0
    _codec: EventCodec | None = None

    def codec(self) -> EventCodec:
        if self._codec is None:
            self._codec = EventCodec(SchemaRegistry(self.registry.connect))
        return self._codec

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        version = self.codec().registry.register(subject, schema)
        self.schema_ids[subject] = version.id
        return version.id

    def event(self, topic: str, producer_id: str = "p-1", seq: int | None = None) -> bytes:
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        record = {
            "header": {
                "timestamp": EPOCH_MS + seq,
                "server": "web-1",
                "producer_id": producer_id,
                "seq": seq,
            },
            "user_id": seq * 7,
            "page": f"/articles/{seq}",
            "referrer": None if seq % 3 else "https://example.com/",
            "tags": ["a", "b"][: seq % 3],
        }
        return self.codec().encode(topic, record)

    def produce(
        self,
        topic: str,
        payloads: list[bytes],
        codec: str = "none",
        batch: int = 50,
        acks: int = 1,
        keyed: bool = False,
    ) -> None:
        # acknowledged: a load started right after must find every message at its end offset
        # (-1: on every in-sync replica of a replicated topic, and so below its high watermark)
        with Producer(
            zk_connect=self.live.connect,
            compression_codec=codec,
            acks="ack",
            request_required_acks=acks,
            retries=40,
            retry_backoff_ms=100,
        ) as producer:
            for n, i in enumerate(range(0, len(payloads), batch)):
                # keyed: batch n goes to partition n % N (String.hashCode of "n"), so that
                # every partition gets some
                producer.send(topic, payloads[i : i + batch], key=str(n) if keyed else None)

    def create_replicated(self, topic: str, partitions: int, factor: int) -> None:
        with Cluster(self.live.connect) as cluster:
            cluster.create_replicated_topic(topic, partitions, factor)

    def broker(self, broker_id: int) -> BrokerProcess:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    def stop(self) -> None:
        if self._codec is not None:
            self._codec.registry.close()
        for b in self.brokers:
            b.stop(timeout=15)


def start_cluster(
    zookeeper: ZooKeeperServer,
    directory: Path,
    name: str,
    brokers: int = 2,
    overrides: dict[str, str] | None = None,
    port_08: int | None = None,
) -> AnalysisCluster:
    """`port_08`: each broker's Kafka 0.8 listener (0: a free port; None: none), for
    0.8-format topics."""
    shutil.rmtree(directory, ignore_errors=True)
    live = zookeeper.create_chroot(f"/spark-{name}/analysis")
    registry = zookeeper.create_chroot(f"/spark-{name}/registry")
    procs = []
    try:
        for i in range(brokers):
            procs.append(
                BrokerProcess(
                    directory / f"broker-{i}",
                    broker_id=i,
                    zk_connect=live.connect,
                    port_08=port_08,
                    overrides={"num.partitions": "2", **(overrides or {})},
                ).start()
            )
    except BaseException:
        for b in procs:
            b.stop()
        raise
    return AnalysisCluster(zookeeper, live, registry, procs)


def independent_sha256(cluster: AnalysisCluster, checkpoint: dict[str, Any]) -> tuple[str, int]:
    """rows_sha256 of a checkpoint's ranges, by docs/design.md §3.6, with the plain consumer."""
    sha = hashlib.sha256()
    count = 0
    by_id = {b.broker_id: b for b in cluster.brokers}
    for p in sorted(checkpoint["partitions"], key=lambda p: (p["broker_id"], p["partition"])):
        broker = by_id[p["broker_id"]]
        previous, index = None, 0
        with SimpleConsumer(*broker.address) as consumer:
            for m in consumer.iter_messages(checkpoint["topic"], p["partition"], p["start_offset"]):
                if m.offset >= p["end_offset"]:
                    break
                index = index + 1 if m.offset == previous else 0
                previous = m.offset
                sha.update(struct.pack(">qii", m.offset, index, len(m.payload)) + m.payload)
                count += 1
    return sha.hexdigest(), count
