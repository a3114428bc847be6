"""The group consumer (0.7's ZookeeperConsumerConnector) against a real ZooKeeper and two real
broker processes with 4 partitions of every topic each (8 partitions "0-0".."1-3").

Group members run as subprocesses (tests/client/group_member.py) where a test kills one with
SIGKILL; everything else runs in this process. Waits poll with deadlines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from logbroker.client.group_consumer import GroupConsumer, GroupMessage, MessageStream, Whitelist
from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.coordination import paths, rebalance
from logbroker.protocol.message_set import iter_entries, iter_messages
from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
TOPIC = "events"
PARTITIONS = [f"{b}-{p}" for b in (0, 1) for p in range(4)]
SESSION_MS = 4000


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


class FakeClock:
    """A monotonic clock that moves only when a test moves it; counts reads per thread, so a
    test can wait until a given thread has looked at the time (and so has gone round its loop)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.reads: Counter[int] = Counter()

    def __call__(self) -> float:
        self.reads[threading.get_ident()] += 1
        return self.now


def children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def node_values(zk: KazooClient, path: str) -> dict[str, str]:
    values = {}
    for child in children(zk, path):
        with contextlib.suppress(NoNodeError):
            values[child] = zk.get(f"{path}/{child}")[0].decode()
    return values


def owners(zk: KazooClient, group: str, topic: str = TOPIC) -> dict[str, str]:
    """partition -> owning thread id."""
    return node_values(zk, paths.consumer_owners_path(group, topic))


def offsets(zk: KazooClient, group: str, topic: str = TOPIC) -> dict[str, int]:
    return {
        k: int(v) for k, v in node_values(zk, paths.consumer_offsets_path(group, topic)).items()
    }


def take(stream: MessageStream, n: int, timeout: float = 15.0) -> list[GroupMessage]:
    """The next n messages of a stream (of a consumer with consumer_timeout_ms >= 0)."""
    got: list[GroupMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        for message in stream:
            got.append(message)
            if len(got) == n:
                break
        if len(got) < n and time.monotonic() > deadline:
            raise AssertionError(f"got {len(got)} of {n} messages in {timeout:g} s")
    return got


class Cluster:
    def __init__(self, brokers: list[BrokerProcess], zk: KazooClient) -> None:
        self.brokers = brokers
        self.zk = zk
        self.broker_list = ",".join(f"{b.broker_id}:{b.host}:{b.port}" for b in brokers)

    def produce(self, topic: str, payloads: list[str], codec: str = "none") -> None:
        """Payload i goes to partition PARTITIONS[i % 8], acknowledged; then wait until
        both brokers have registered the topic."""
        with Producer(
            broker_list=self.broker_list,
            num_partitions=4,
            acks="ack",
            compression_codec=codec,
            partitioner=lambda key, n: int(key) % n,  # type: ignore[arg-type]
        ) as producer:
            producer.send_batch(
                (topic, str(i % len(PARTITIONS)), p.encode()) for i, p in enumerate(payloads)
            )
        wait_for(
            lambda: children(self.zk, paths.broker_topic_path(topic)) == ["0", "1"],
            f"topic {topic} registered by both brokers",
        )

    def latest(self, topic: str) -> dict[str, int]:
        ends = {}
        for b in self.brokers:
            with SimpleConsumer(b.host, b.port) as consumer:
                for p in range(4):
                    ends[f"{b.broker_id}-{p}"] = consumer.latest_offset(topic, p)
        return ends


@pytest.fixture
def cluster(
    broker_factory: Callable[..., BrokerProcess], zk_chroot: ZkTarget, zk_client: KazooClient
) -> Cluster:
    brokers = [broker_factory(i, zk=zk_chroot, num_partitions=4) for i in (0, 1)]
    wait_for(lambda: children(zk_client, paths.BROKER_IDS) == ["0", "1"], "brokers registered")
    return Cluster(brokers, zk_client)


@pytest.fixture
def consumers(zk_chroot: ZkTarget) -> Iterator[Callable[..., GroupConsumer]]:
    made: list[GroupConsumer] = []

    def make(group: str, **kwargs: Any) -> GroupConsumer:
        kwargs.setdefault("rebalance_backoff_ms", 300)
        kwargs.setdefault("zk_session_timeout_ms", SESSION_MS)
        kwargs.setdefault("consumer_timeout_ms", 500)
        consumer = GroupConsumer(group, zk_chroot.connect, **kwargs)
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


# -- a group of processes ----------------------------------------------------------------------


class Member:
    def __init__(self, name: str, directory: Path, connect: str, group: str) -> None:
        self.name = name
        self.out = directory / f"{name}.out"
        self.log = directory / f"{name}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(MEMBER_SCRIPT),
                    connect,
                    group,
                    TOPIC,
                    str(self.out),
                    "--session-ms",
                    str(SESSION_MS),
                    "--autocommit-ms",
                    "1000",
                    "--backoff-ms",
                    "300",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._id: str | None = None

    @property
    def consumer_id(self) -> str:
        if self._id is None:
            id_file = Path(f"{self.out}.id")
            wait_for(
                lambda: id_file.exists() or self.proc.poll() is not None, f"{self.name} joining"
            )
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log.read_text()}"
            self._id = id_file.read_text()
        return self._id

    def records(self) -> list[tuple[str, int, str]]:
        """(partition, offset, payload) of every whole line written."""
        if not self.out.exists():
            return []
        lines = self.out.read_text().split("\n")[:-1]  # a line cut by kill -9 has no "\n"
        return [(p, int(o), payload) for p, o, payload in (line.split(" ") for line in lines)]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def members(tmp_path: Path, zk_chroot: ZkTarget) -> Iterator[Callable[[str], Member]]:
    started: list[Member] = []

    def start(name: str) -> Member:
        member = Member(name, tmp_path, zk_chroot.connect, "procs")
        started.append(member)
        return member

    yield start
    for member in started:
        member.stop()


def wait_assignment(
    zk: KazooClient, group_members: list[Member], timeout: float = 15.0
) -> dict[str, str]:
    """Wait until the owner nodes are exactly §7.1's assignment over these members."""
    threads = [f"{m.consumer_id}-0" for m in group_members]
    expected = rebalance.owners(PARTITIONS, threads)
    wait_for(lambda: owners(zk, "procs") == expected, f"owners = {expected}", timeout)
    return expected


def test_group_of_processes_shares_survives_kill_and_grows(
    cluster: Cluster, members: Callable[[str], Member], zk_client: KazooClient
) -> None:
    produced: list[str] = []

    def produce(prefix: str, n: int) -> None:
        batch = [f"{prefix}{i}" for i in range(n)]
        cluster.produce(TOPIC, batch)
        produced.extend(batch)

    def consumed() -> list[tuple[str, str, int, str]]:
        return [(m.name, p, o, pl) for m in group for p, o, pl in m.records()]

    def all_consumed() -> bool:
        return set(produced) <= {payload for *_, payload in consumed()}

    produce("a", 160)
    group = [members(f"m{i}") for i in range(3)]
    assignment = wait_assignment(zk_client, group)
    # every partition has exactly one owner, and every member owns some
    assert sorted(assignment) == PARTITIONS
    assert {t.rsplit("-", 1)[0] for t in assignment.values()} == {m.consumer_id for m in group}
    ids_path = paths.consumer_ids_path("procs")
    assert node_values(zk_client, ids_path) == {m.consumer_id: '{ "events": 1 }' for m in group}
    wait_for(all_consumed, "the three members consuming every message")

    # kill -9 the member that owns the most partitions while it is consuming
    victim = min(group, key=lambda m: m.consumer_id)  # first in string order: 3 partitions
    victim_partitions = {p for p, t in assignment.items() if t.startswith(victim.consumer_id)}
    produce("b", 800)
    wait_for(lambda: any(pl.startswith("b") for *_, pl in victim.records()), "the victim consuming")
    victim.kill()
    killed_at = time.monotonic()
    produce("c", 160)
    # ZooKeeper applies every request of a session before it expires it: once the victim's
    # ids node is gone, a commit it sent just before dying is in. The survivors cannot have
    # committed its partitions yet: they own them only after its owner nodes went too.
    wait_for(
        lambda: victim.consumer_id not in children(zk_client, ids_path),
        "the victim's session to expire",
        timeout=SESSION_MS / 1000 + 8,
    )
    committed_at_kill = offsets(zk_client, "procs")
    survivors = [m for m in group if m is not victim]
    wait_assignment(zk_client, survivors, timeout=SESSION_MS / 1000 + 8)
    reowned_after = time.monotonic() - killed_at  # reported below, not asserted
    wait_for(all_consumed, "the survivors consuming every message")

    # duplicates only from the victim's uncommitted tail
    records = consumed()
    counts = Counter(payload for *_, payload in records)
    duplicates = {payload for payload, n in counts.items() if n > 1}
    for payload in duplicates:
        deliveries = [r for r in records if r[3] == payload]
        assert len(deliveries) == 2, deliveries
        assert {name for name, *_ in deliveries} & {victim.name}, deliveries
        partition, offset = deliveries[0][1], deliveries[0][2]
        assert partition in victim_partitions, deliveries
        assert offset >= committed_at_kill.get(partition, 0), (deliveries, committed_at_kill)
    # and the survivors resumed exactly at the victim's commits: its tail came again
    victim_last: dict[str, int] = {}
    for partition, offset, _ in victim.records():
        victim_last[partition] = max(offset, victim_last.get(partition, -1))
    redelivered = {
        (p, o) for name, p, o, _ in records if name != victim.name and p in victim_partitions
    }
    for partition in victim_partitions:
        start = committed_at_kill.get(partition, 0)
        if victim_last.get(partition, -1) >= start:
            assert (partition, start) in redelivered

    # a fourth member joins: the group rebalances to include it and goes on
    newcomer = members("m3")
    group.append(newcomer)
    wait_assignment(zk_client, [*survivors, newcomer])
    produce("d", 160)
    wait_for(all_consumed, "the new group consuming every message")
    assert any(pl.startswith("d") for *_, pl in newcomer.records())
    print(
        f"\nre-owned {reowned_after:.1f} s after kill -9; {len(duplicates)} duplicates "
        f"(victim's uncommitted tail) of {len(produced)} messages"
    )


# -- one consumer in this process --------------------------------------------------------------


def test_session_expiry_registers_again_and_resumes(
    cluster: Cluster,
    consumers: Callable[..., GroupConsumer],
    zk_client: KazooClient,
    expire_session: Callable[[KazooClient], int],
) -> None:
    cluster.produce(TOPIC, [f"a{i}" for i in range(80)])
    consumer = consumers("g", autocommit_interval_ms=60_000)
    stream = consumer.create_message_streams({TOPIC: 1})[TOPIC][0]
    first = take(stream, 80)
    consumer.commit_offsets()
    assert offsets(zk_client, "g") == cluster.latest(TOPIC)
    cluster.produce(TOPIC, [f"b{i}" for i in range(80)])
    tail = take(stream, 25)  # delivered, not committed by us

    id_path = paths.consumer_id_path("g", consumer.consumer_id)
    old_session = zk_client.exists(id_path).ephemeralOwner
    new_session = expire_session(consumer.zk_client)
    assert new_session != old_session

    def registered_again() -> bool:
        stat = zk_client.exists(id_path)
        if stat is None or stat.ephemeralOwner != new_session:
            return False
        nodes = owners(zk_client, "g")
        return sorted(nodes) == PARTITIONS and all(
            zk_client.exists(f"{paths.consumer_owners_path('g', TOPIC)}/{p}").ephemeralOwner
            == new_session
            for p in nodes
        )

    wait_for(registered_again, "ids and owner nodes in the new session")
    assert consumer.stats.sessions_reestablished == 1
    cluster.produce(TOPIC, [f"c{i}" for i in range(40)])
    rest = take(stream, 80 - 25 + 40)
    assert list(stream) == []  # nothing more: no duplicates beyond the uncommitted tail
    payloads = Counter(m.payload.decode() for m in [*first, *tail, *rest])
    expected = {f"{p}{i}" for p, n in (("a", 80), ("b", 80), ("c", 40)) for i in range(n)}
    assert set(payloads) == expected
    duplicates = {p for p, n in payloads.items() if n > 1}
    assert duplicates <= {m.payload.decode() for m in tail}
    consumer.commit_offsets()
    assert offsets(zk_client, "g") == cluster.latest(TOPIC)


@pytest.mark.parametrize("codec", ["gzip", "snappy"])
def test_compressed_sets_round_trip(
    cluster: Cluster, consumers: Callable[..., GroupConsumer], zk_client: KazooClient, codec: str
) -> None:
    topic = f"z-{codec}"
    expected = []
    for batch in range(3):  # 3 wrappers of 5 messages in each partition
        payloads = [f"{codec}-{batch}-{i}" for i in range(40)]
        cluster.produce(topic, payloads, codec=codec)
        expected += payloads
    consumer = consumers("z", autocommit_enable=False)
    stream = consumer.create_message_streams({topic: 2})[topic]
    assert owners(zk_client, "z", topic) == rebalance.owners(
        PARTITIONS, [f"{consumer.consumer_id}-{i}" for i in range(2)]
    )
    # two streams: read them alternately until everything came
    got: list[GroupMessage] = []
    deadline = time.monotonic() + 15
    while len(got) < len(expected) and time.monotonic() < deadline:
        for s in stream:
            got += list(s)
    assert sorted(m.payload.decode() for m in got) == sorted(expected)
    by_partition: dict[str, list[GroupMessage]] = defaultdict(list)
    for m in got:
        by_partition[m.partition].append(m)
    ends = cluster.latest(topic)
    for partition, messages in by_partition.items():
        wrappers: dict[int, list[GroupMessage]] = defaultdict(list)
        for m in messages:
            wrappers[m.offset].append(m)
        assert len(wrappers) == 3
        for offset, inner in wrappers.items():
            # 0.7's rule: inside a wrapper resume at the wrapper, the last one after it
            assert [m.next_offset for m in inner[:-1]] == [offset] * 4
            assert inner[-1].next_offset > offset
        assert messages[-1].next_offset == ends[partition]

    # a commit taken mid-wrapper makes the next member of the group start at that wrapper
    consumer.close()
    first = consumers("z-mid", autocommit_enable=False)
    first_stream = first.create_message_streams({topic: 1})[topic][0]
    head = take(first_stream, 7)  # one partition's first wrapper, then 2 of its second
    assert len({m.partition for m in head}) == 1
    assert head[5].offset == head[6].offset == head[4].next_offset > 0
    first.commit_offsets()
    assert offsets(zk_client, "z-mid", topic)[head[0].partition] == head[5].offset
    first.close()
    second = consumers("z-mid")
    second_stream = second.create_message_streams({topic: 1})[topic][0]
    again = take(second_stream, len(expected) - 5)  # the second wrapper comes again
    assert list(second_stream) == []
    assert head[5] in again and head[6] in again and head[0] not in again


def test_a_shallow_stream_hands_out_stored_sets_as_the_broker_keeps_them(
    cluster: Cluster, consumers: Callable[..., GroupConsumer], zk_client: KazooClient
) -> None:
    """What the mirror forwards: the fetched bytes themselves, from where the application
    stopped iterating; the consumed offset moves past them."""
    topic = "shallow-sets"
    cluster.produce(topic, [f"plain-{i}" for i in range(16)])  # 2 per partition
    cluster.produce(topic, [f"zipped-{i}" for i in range(16)], codec="gzip")  # a wrapper each
    shallow = consumers("copier", autocommit_enable=False, shallow_iterator_enable=True)
    stream = shallow.create_message_streams({topic: 1})[topic][0]
    first = next(stream)  # one message by iteration, then the rest of its chunk as a set
    stored = stream.next_set(10)
    assert stored is not None and (stored.topic, stored.partition) == (topic, first.partition)
    assert stored.offset == first.next_offset and stored.entries == 2  # a plain one, a wrapper
    entries = list(iter_entries(stored.data, stored.offset))
    assert [offset for offset, _ in entries] == [first.next_offset, entries[1][0]]
    assert stored.next_offset == cluster.latest(topic)[first.partition]
    assert next(iter_messages(stored.data)).payload.startswith(b"plain-")
    wrapped = iter_messages(stored.data[entries[1][0] - stored.offset :])
    assert {m.payload[:7] for m in wrapped} == {b"zipped-"}  # the wrapper, unopened
    shallow.commit_offsets()
    assert offsets(zk_client, "copier", topic)[first.partition] == stored.next_offset

    deep = consumers("reader", autocommit_enable=False)
    deep_stream = deep.create_message_streams({topic: 1})[topic][0]
    next(deep_stream)
    with pytest.raises(TypeError, match="shallow_iterator_enable"):
        deep_stream.next_set(10)


def test_autooffset_reset_smallest_largest_and_out_of_range(
    cluster: Cluster, consumers: Callable[..., GroupConsumer], zk_client: KazooClient
) -> None:
    old = [f"old{i}" for i in range(40)]
    new = [f"new{i}" for i in range(40)]
    cluster.produce(TOPIC, old)
    smallest = consumers("small", autooffset_reset="smallest")
    largest = consumers("large", autooffset_reset="largest")
    # a group whose committed offsets are past the end of every partition
    for partition in PARTITIONS:
        b, p = paths.parse_partition_name(partition)
        zk_client.create(paths.consumer_offset_path("oor", TOPIC, b, p), b"999999", makepath=True)
    out_of_range = consumers("oor", autooffset_reset="smallest")
    streams = [
        c.create_message_streams({TOPIC: 1})[TOPIC][0] for c in (smallest, largest, out_of_range)
    ]
    cluster.produce(TOPIC, new)

    assert sorted(m.payload.decode() for m in take(streams[0], 80)) == sorted(old + new)
    assert sorted(m.payload.decode() for m in take(streams[1], 40)) == sorted(new)
    assert list(streams[1]) == []
    assert sorted(m.payload.decode() for m in take(streams[2], 80)) == sorted(old + new)
    assert out_of_range.stats.offset_resets == len(PARTITIONS)


def test_consumer_timeout_ends_an_idle_iteration(
    cluster: Cluster, consumers: Callable[..., GroupConsumer]
) -> None:
    cluster.produce(TOPIC, [f"a{i}" for i in range(8)])
    clock = FakeClock()
    consumer = consumers("t", consumer_timeout_ms=300, clock=clock)
    stream = consumer.create_message_streams({TOPIC: 1})[TOPIC][0]
    assert len(take(stream, 8)) == 8

    # StopIteration once the consumer's clock says 300 ms passed without a message, not before
    got: list[GroupMessage] = []
    reader = threading.Thread(target=lambda: got.extend(stream), daemon=True)
    reader.start()
    wait_for(lambda: reader.ident and clock.reads[reader.ident] >= 1, "the stream's deadline")
    clock.now += 0.299
    seen = clock.reads[reader.ident]
    wait_for(lambda: clock.reads[reader.ident] >= seen + 2, "the stream to look at the clock again")
    assert reader.is_alive(), "the stream ended before its consumer_timeout_ms"
    clock.now += 0.001
    reader.join(30)
    assert not reader.is_alive() and got == []

    cluster.produce(TOPIC, [f"b{i}" for i in range(8)])  # the stream goes on afterwards
    assert sorted(m.payload for m in take(stream, 8)) == sorted(f"b{i}".encode() for i in range(8))

    # consumer_timeout_ms=-1 blocks until close()
    blocking = consumers("t-block", consumer_timeout_ms=-1)
    blocking_stream = blocking.create_message_streams({TOPIC: 1})[TOPIC][0]
    seen: list[GroupMessage] = []
    reader = threading.Thread(target=lambda: seen.extend(blocking_stream), daemon=True)
    reader.start()
    wait_for(lambda: len(seen) == 16, "the blocking stream reading everything")
    # idle meanwhile, it did not end: it goes on delivering what comes later
    cluster.produce(TOPIC, [f"c{i}" for i in range(8)])
    wait_for(lambda: len(seen) == 24, "the blocking stream reading what came later")
    assert reader.is_alive()
    blocking.close()
    reader.join(5)
    assert not reader.is_alive()


def test_streams_are_created_once_and_a_refused_second_call_changes_nothing(
    cluster: Cluster, consumers: Callable[..., GroupConsumer]
) -> None:
    cluster.produce(TOPIC, [f"a{i}" for i in range(8)])
    consumer = consumers("once")
    stream = consumer.create_message_streams({TOPIC: 1})[TOPIC][0]
    assert len(take(stream, 8)) == 8
    with pytest.raises(RuntimeError, match="once"):
        consumer.create_message_streams({TOPIC: 1})
    other = consumers("once")  # a second member: a rebalance hands out the partitions again
    other.create_message_streams({TOPIC: 1})
    wait_for(lambda: len(consumer.owned_partitions().get(TOPIC, [])) < 8, "the rebalance")
    cluster.produce(TOPIC, [f"b{i}" for i in range(8)])
    mine = len(consumer.owned_partitions()[TOPIC])
    got = take(stream, 1)  # the first stream still gets its share after the rebalance
    assert got and mine > 0


def test_whitelist_picks_up_a_new_topic(
    cluster: Cluster, consumers: Callable[..., GroupConsumer], zk_client: KazooClient
) -> None:
    cluster.produce("wl-old", [f"old{i}" for i in range(8)])
    cluster.produce("other", [f"other{i}" for i in range(8)])
    consumer = consumers("w", consumer_timeout_ms=100)
    streams = consumer.create_message_streams_by_filter(Whitelist("wl-.*"), 2)
    id_path = paths.consumer_id_path("w", consumer.consumer_id)
    assert zk_client.get(id_path)[0] == b"*2*wl-.*"
    got: list[GroupMessage] = []

    def read_until(predicate: Callable[[], bool], what: str) -> None:
        def step() -> bool:
            for s in streams:
                got.extend(s)
            return predicate()

        wait_for(step, what)

    read_until(lambda: len(got) >= 8, "the existing topic")
    cluster.produce("wl-new", [f"new{i}" for i in range(8)])  # created after the consumer started
    read_until(lambda: len(got) >= 16, "the new topic")
    assert {(m.topic, m.payload.decode()) for m in got} == {
        (t, f"{p}{i}") for t, p in (("wl-old", "old"), ("wl-new", "new")) for i in range(8)
    }
    assert sorted(owners(zk_client, "w", "wl-new")) == PARTITIONS
    assert owners(zk_client, "w", "other") == {}


def test_close_commits_and_releases(
    cluster: Cluster, consumers: Callable[..., GroupConsumer], zk_client: KazooClient
) -> None:
    cluster.produce(TOPIC, [f"a{i}" for i in range(40)])
    # the clock stands still: the stream's own timeout never ends it, only close() can
    consumer = consumers("c", autocommit_interval_ms=60_000, clock=FakeClock())
    stream = consumer.create_message_streams({TOPIC: 1})[TOPIC][0]
    take(stream, 40)
    owner_values = owners(zk_client, "c")
    assert sorted(owner_values) == PARTITIONS
    assert set(owner_values.values()) == {f"{consumer.consumer_id}-0"}
    assert children(zk_client, paths.consumer_ids_path("c")) == [consumer.consumer_id]
    assert offsets(zk_client, "c") != cluster.latest(TOPIC)  # nothing committed yet

    consumer.close()
    assert owners(zk_client, "c") == {}
    assert children(zk_client, paths.consumer_ids_path("c")) == []
    assert offsets(zk_client, "c") == cluster.latest(TOPIC)
    assert consumer.stats.commits >= 1 and consumer.stats.messages_delivered == 40
    rest: list[GroupMessage] = []
    reader = threading.Thread(target=lambda: rest.extend(stream), daemon=True)
    reader.start()
    reader.join(30)  # a deadline for a stream that never ends, not a measurement
    assert not reader.is_alive() and rest == []  # closed: the end marker ends it
    consumer.close()  # idempotent


def test_no_leftover_processes() -> None:
    """Nothing this file started is still running (members are stopped by their fixture)."""
    mine = os.getpid()
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    leftovers = [
        line
        for line in out.splitlines()[1:]
        if "group_member.py" in line and line.split()[1] == str(mine)
    ]
    assert leftovers == []
