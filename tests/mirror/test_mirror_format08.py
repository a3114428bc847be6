"""The mirror copies a keyed 0.8-format topic beside a 0.7-format one: every message arrives
in a 0.8-format target topic with its key, byte for byte, also across a kill -9.

Both clusters' brokers have a Kafka 0.8 listener (port.08); the 0.8-format topics are
written with logbroker's Producer (Produce v0, keys) and read back with PartitionReader08.
"""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TwoClusters, wait_until
from fixtures_brokers import BrokerFactory

from logbroker.client.cluster import Cluster
from logbroker.client.leaders import Leaders
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.producer import Producer
from logbroker.stack.zookeeper import ZooKeeperServer

TAIL = re.compile(r"resuming from the committed offsets; (\d+) messages")
Keyed = tuple[bytes | None, bytes]


@pytest.fixture
def clusters08(
    zookeeper: ZooKeeperServer, broker_factory: BrokerFactory, tmp_path: Path
) -> Iterator[TwoClusters]:
    root = f"/t/mirror08-{uuid.uuid4().hex[:8]}"
    live = zookeeper.create_chroot(f"{root}/live")
    analysis = zookeeper.create_chroot(f"{root}/analysis")
    source = broker_factory(0, zk=live, num_partitions=2, port_08=0)
    target = broker_factory(0, zk=analysis, num_partitions=1, port_08=0)
    clusters = TwoClusters(live, analysis, source, target, tmp_path, [])
    yield clusters
    for mirror in clusters.mirrors:
        if mirror.running:
            mirror.kill()


def create08(connect: str, topic: str, partitions: int) -> None:
    with Cluster(connect) as cluster:
        cluster.create_replicated_topic(topic, partitions, 1, message_format="0.8")


def produce08(c: TwoClusters, topic: str, messages: list[Keyed], codec: str) -> None:
    with Producer(
        zk_connect=c.live.connect, compression_codec=codec, request_required_acks=1
    ) as producer:
        for i in range(0, len(messages), 50):
            producer.send_batch([(topic, k, v) for k, v in messages[i : i + 50]])


def keyed(connect: str, topic: str) -> dict[int, list[Keyed]]:
    """partition -> its (key, value) messages in order, through the 0.8 listener."""
    with Cluster(connect) as cluster:
        leaders = Leaders(cluster.zk)
        parts = leaders.partitions(topic) or []
        assert leaders.is_format08(topic), f"{topic} is not a 0.8-format topic in {connect}"
    out = {}
    for bp in parts:
        with PartitionReader08.connect(connect, topic, bp.partition) as reader:
            out[bp.partition] = [(m.key, m.payload) for m in reader.iter_messages(0)]
    return out


def messages08(prefix: str, n: int) -> list[Keyed]:
    # keys that are not UTF-8, an empty key and no key at all: each must arrive as it was
    keys: list[bytes | None] = [b"\xff\x00user-%d" % (i % 5) for i in range(n)]
    keys[3] = b""
    keys[7] = None
    return [(k, b"%s-%d" % (prefix.encode(), i)) for i, k in enumerate(keys)]


def test_a_keyed_0_8_topic_is_mirrored_beside_a_0_7_one_with_every_key(
    clusters08: TwoClusters,
) -> None:
    c = clusters08
    c.create_topic("m7", 2)
    c.produce("m7", [b"seven-%d" % i for i in range(300)], "gzip")
    create08(c.live.connect, "m8", 3)
    produce08(c, "m8", messages08("plain", 200), "none")
    produce08(c, "m8", messages08("gzip", 200), "gzip")
    source = keyed(c.live.connect, "m8")
    mirror = c.start_mirror("--whitelist", "m7|m8", "--until-caught-up")
    try:
        code = mirror.wait(timeout=40)
    except Exception:
        mirror.kill()
        pytest.fail(f"the mirror did not catch up with m7 and m8:\n{mirror.output()[-3000:]}")
    assert code == 0, mirror.output()
    # the same partitions, the same messages in the same order, each key as it was sent
    assert keyed(c.analysis.connect, "m8") == source
    assert sum(map(len, source.values())) == 400
    assert sorted(c.target_payloads("m7")) == sorted(c.source_payloads("m7"))
    assert c.committed("m8") == {str(p): len(m) for p, m in source.items()}


def test_a_mirror_killed_9_mid_copy_of_a_0_8_topic_loses_nothing_and_keeps_keys(
    clusters08: TwoClusters,
) -> None:
    c = clusters08
    c.create_topic("k7", 2)
    create08(c.live.connect, "k8", 2)
    batches = 30
    mirror = c.start_mirror("--whitelist", "k7|k8", max_request_size=4096)
    for b in range(batches):
        produce08(c, "k8", messages08(f"b{b}", 100), "gzip" if b % 2 else "none")
        c.produce("k7", [b"seven-%d-%d" % (b, i) for i in range(50)])
        if b == batches // 3:  # mid-copy: some copied, more to come
            wait_until(lambda: _copied08(c.analysis.connect, "k8"), what="the mirror copying k8")
            mirror.kill()
            mirror = c.start_mirror("--whitelist", "k7|k8", max_request_size=4096)
    # its signal handlers are in place once it says where it resumes
    wait_until(lambda: TAIL.search(mirror.output()), what="the restarted mirror running")
    mirror.signal(signal.SIGTERM)
    assert mirror.wait() == 0, mirror.output()
    last = c.start_mirror("--whitelist", "k7|k8", "--until-caught-up")
    assert last.wait(timeout=40) == 0, last.output()
    source, target = keyed(c.live.connect, "k8"), keyed(c.analysis.connect, "k8")
    announced = sum(int(n) for m in c.mirrors for n in TAIL.findall(m.output()))
    duplicates = 0
    for p, sent in source.items():
        got = target[p]
        duplicates += len(got) - len(set(got))
        # every message, with its key; each partition's order kept (first copies in order)
        assert list(dict.fromkeys(got)) == sent, (
            f"partition {p}: {len(set(got))} distinct of {len(sent)} sent, "
            f"{duplicates} duplicates so far, {announced} announced by the restarts"
        )
    assert duplicates <= announced, (duplicates, announced)
    print(f"k8: {duplicates} duplicates, restarts announced {announced}")
    assert set(c.target_payloads("k7")) == set(c.source_payloads("k7"))


def _copied08(connect: str, topic: str) -> int:
    """Messages of `topic` in the target so far (0 before the mirror created it)."""
    with Cluster(connect) as cluster:
        if Leaders(cluster.zk).partitions(topic) is None:
            return 0
    return sum(map(len, keyed(connect, topic).values()))


def test_a_0_8_topic_that_is_0_7_in_the_target_ends_the_mirror_naming_it(
    clusters08: TwoClusters,
) -> None:
    c = clusters08
    create08(c.live.connect, "f8", 1)
    produce08(c, "f8", messages08("f", 10), "none")
    with Cluster(c.analysis.connect) as target:  # the same name, 0.7's format
        target.create_topic("f8", 1)
    mirror = c.start_mirror("--whitelist", "f8", "--until-caught-up")
    assert mirror.wait(timeout=40) == 1, mirror.output()
    assert (
        "logbroker mirror: 'f8' is a 0.8-format topic in the source and a 0.7-format topic "
        "in the target cluster" in mirror.output()
    ), mirror.output()
    assert c.committed("f8") == {}  # nothing was acknowledged, nothing committed
