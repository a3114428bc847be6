"""Two clusters in one ZooKeeper (chroots .../live and .../analysis), one broker each, and
`logbroker mirror` run as a real subprocess between them.

    two_clusters.produce(topic, payloads, codec)      acknowledged sets on the source
    two_clusters.start_mirror(*flags, **props)        a MirrorProcess (its log in tmp_path)
    two_clusters.target_payloads(topic)               every payload in the target, deep
    two_clusters.committed(group, topic) / source_ends(topic)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from logbroker.client.cluster import Cluster
from logbroker.client.producer import Producer
from logbroker.coordination import paths
from logbroker.protocol.message_set import iter_messages
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget, ZooKeeperServer

GROUP = "mirror-analysis"


def wait_until(
    predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class MirrorProcess:
    def __init__(self, command: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is not None:
                self._log.close()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def running(self) -> bool:
        return self.proc.poll() is None


@dataclass
class TwoClusters:
    live: ZkTarget
    analysis: ZkTarget
    source: BrokerProcess
    target: BrokerProcess
    tmp: Path
    mirrors: list[MirrorProcess]

    def create_topic(self, topic: str, partitions: int) -> None:
        with Cluster(self.live.connect) as cluster:
            cluster.create_topic(topic, partitions)
            # registration in ZooKeeper follows the creation: wait for it
            wait_until(lambda: topic in cluster.topics(), what="registration")

    def produce(
        self, topic: str, payloads: list[bytes], codec: str = "none", per_set: int = 50
    ) -> None:
        partitions = self.partition_count(topic)
        with Producer(
            broker_list=f"0:{self.source.host}:{self.source.address[1]}",
            num_partitions=partitions,
            partitioner=lambda key, n: int(str(key)) % n,
            acks="ack",
            compression_codec=codec,
        ) as producer:
            for i in range(0, len(payloads), per_set):
                part = str((i // per_set) % partitions)
                producer.send_batch([(topic, part, p) for p in payloads[i : i + per_set]])

    def partition_count(self, topic: str) -> int:
        with Cluster(self.live.connect) as cluster:
            return max(1, len(cluster.describe(topic)))

    def write_configs(self, group: str = GROUP, **producer_props: object) -> tuple[Path, Path]:
        consumer = self.tmp / f"consumer-{len(self.mirrors)}.properties"
        producer = self.tmp / f"producer-{len(self.mirrors)}.properties"
        consumer.write_text(
            f"zk.connect={self.live.connect}\ngroupid={group}\nautocommit.interval.ms=200\n"
            "zk.sessiontimeout.ms=3000\nrebalance.retries.max=30\nrebalance.backoff.ms=500\n"
        )
        props = {
            "zk.connect": self.analysis.connect,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
            "socket.timeout.ms": 5000,
        }
        props.update({k.replace("_", "."): v for k, v in producer_props.items()})
        producer.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return consumer, producer

    def start_mirror(
        self, *flags: str, group: str = GROUP, **producer_props: object
    ) -> MirrorProcess:
        consumer, producer = self.write_configs(group, **producer_props)
        command = [
            sys.executable, "-m", "logbroker.cli", "mirror",
            "--consumer.config", str(consumer), "--producer.config", str(producer),
            "--log-level", "INFO", *flags,
        ]  # fmt: skip
        mirror = MirrorProcess(command, self.tmp / f"mirror-{len(self.mirrors)}.log")
        self.mirrors.append(mirror)
        return mirror

    def target_payloads(self, topic: str) -> list[bytes]:
        """Every payload of `topic` in the target, partition by partition, in order."""
        return [p for payloads in self.target_partitions(topic).values() for p in payloads]

    def source_payloads(self, topic: str) -> list[bytes]:
        parts = self.target_partitions(topic, self.live.connect)
        return [p for payloads in parts.values() for p in payloads]

    def target_partitions(self, topic: str, connect: str | None = None) -> dict[str, list[bytes]]:
        """partition name -> the payloads of `topic` there, in order (through compression)."""
        found: dict[str, list[bytes]] = {}
        with Cluster(connect or self.analysis.connect) as cluster:
            for row in cluster.describe(topic):
                out = found.setdefault(row.name, [])
                consumer = cluster.partition_consumer(topic, row.broker_id, row.partition)
                offset = row.earliest
                while offset < row.latest:
                    fetched = consumer.fetch(topic, row.partition, offset, 1 << 20)
                    last = offset
                    for m in iter_messages(fetched.data, offset):
                        out.append(m.payload)
                        last = m.next_offset
                    assert last > offset, f"no progress reading {topic}/{row.name} at {offset}"
                    offset = last
        return found

    def target_count(self, topic: str) -> int:
        try:
            return len(self.target_payloads(topic))
        except Exception:
            return -1

    def source_ends(self, topic: str) -> dict[str, int]:
        with Cluster(self.live.connect) as cluster:
            return {row.name: row.latest for row in cluster.describe(topic)}

    def committed(self, topic: str, group: str = GROUP) -> dict[str, int]:
        with Cluster(self.live.connect) as cluster:
            out = {}
            for name in cluster._children(f"{paths.consumer_group_path(group)}/offsets/{topic}"):
                broker_id, partition = paths.parse_partition_name(name)
                value = cluster._read_int(
                    paths.consumer_offset_path(group, topic, broker_id, partition)
                )
                if value is not None:
                    out[name] = value
            return out


@pytest.fixture
def two_clusters(zookeeper: ZooKeeperServer, broker_factory, tmp_path: Path, request):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    root = f"/t/{name}-{uuid.uuid4().hex[:8]}"
    live = zookeeper.create_chroot(f"{root}/live")
    analysis = zookeeper.create_chroot(f"{root}/analysis")
    source = broker_factory(0, zk=live, num_partitions=2)
    target = broker_factory(0, zk=analysis, num_partitions=1)
    clusters = TwoClusters(live, analysis, source, target, tmp_path, [])
    yield clusters
    for mirror in clusters.mirrors:
        if mirror.running:
            mirror.kill()
