"""A leader answers each of a follower's fetches once, and a follower appends a leader's bytes
only where they were read (found by a fault run of harness.jepsen, seed 1 for 120 s:
docs/chaos.md, "Replication under faults").

The fault run's history: while a killed broker was out, its leader shrank the ISR of two
partitions that one follower fetched together; the next append to one of them woke that
follower's waiting REPLICA_FETCH, whose look recorded the follower's offset in the other
partition, which (the ISR now shorter) moved that partition's high watermark, which woke the
partition's waiters: the same fetch, from inside its own look. It answered there and again
when the outer look finished: two answers to one request. The follower took the second for the
answer to its next fetch and appended bytes read at offset 11786 at offset 11804: its replica
held one message twice and lacked the next, an acknowledged message was lost once it led,
and a reader's message changed under it.

The leader here is a real ReplicaManager (its states from a real ZooKeeper) behind the
broker's request handlers, in process, so that the moment between a state change and the
event loop's follow-up is held open on purpose: the loop is not given back while the
manager's worker applies the shrink.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from contextlib import suppress
from pathlib import Path

from kazoo.client import KazooClient

from logbroker.client.connection import BrokerConnection
from logbroker.config import BrokerConfig
from logbroker.coordination import replication_state as zk
from logbroker.coordination.replication_state import Assignment, PartitionState
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.replication import (
    ReplicaFetch,
    ReplicaFetchRequest,
    ReplicaSet,
    encode_replica_fetch_response,
)
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest, decode_request
from logbroker.replication.epochs import FILE_NAME as EPOCH_FILE
from logbroker.replication.fetcher import ReplicaFetcher
from logbroker.replication.replicas import Replica, ReplicaManager, open_replica_log
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters, WaitingFetch
from logbroker.storage.log_manager import LogManager

TOPIC = "t"
ENTRY = build_message_set([b"one message"])


def _fetch(
    h: RequestHandlers, follower: int, partitions: list[int], offset: int, wait_ms: int = 0
) -> object:
    return h.replica_fetch(
        ReplicaFetchRequest(
            follower,
            wait_ms,
            1,
            tuple(ReplicaFetch(TOPIC, p, offset, 65536, 0) for p in partitions),
        ),
        f"broker {follower}",
    )


def _produce(h: RequestHandlers, partition: int) -> None:
    h.acked_produce(
        AckedProduceRequest(False, (ProduceRequest(TOPIC, partition, ENTRY),), False, 0),
        "producer",
    )


def test_a_followers_fetch_gets_one_answer_when_its_look_moves_a_high_watermark(
    tmp_path: Path, zk_client: KazooClient
) -> None:
    # broker 0 leads partitions 0 and 1, replicas 0, 1, 2, every replica in sync
    zk_client.create(
        zk.topic_path(TOPIC),
        Assignment(TOPIC, 3, ((0, 1, 2), (0, 1, 2))).encode(),
        makepath=True,
    )
    for p in (0, 1):
        zk_client.create(
            zk.partition_path(TOPIC, p), PartitionState(0, 0, (0, 1, 2), 1).encode(), makepath=True
        )
    config = BrokerConfig(log_dir=str(tmp_path))
    logs = LogManager(config, replica_marker=EPOCH_FILE)
    manager = ReplicaManager(0, logs, lag_time_max_ms=600_000, checkpoint_interval_ms=600_000)
    answers: list[object] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        manager.start(zk_client, loop)
        h = RequestHandlers(logs, config, BrokerMetrics(0), AppendWaiters(), replicas=manager)
        deadline = time.monotonic() + 30
        while not all((r := manager.replica(TOPIC, p)) is not None and r.leading for p in (0, 1)):
            assert time.monotonic() < deadline, "broker 0 did not take the leadership"
            await asyncio.sleep(0.01)
        for p in (0, 1):
            _produce(h, p)
        end = len(ENTRY)
        # both followers have partition 0; only follower 1 has partition 1, whose high
        # watermark stays at 0 while follower 2 is in its ISR
        _fetch(h, 1, [0, 1], end)
        _fetch(h, 2, [0], end)
        p1 = manager.replica(TOPIC, 1)
        assert p1 is not None and p1.high_watermark == 0
        waiting = _fetch(h, 1, [0, 1], end, wait_ms=600_000)  # nothing new: it waits
        assert isinstance(waiting, WaitingFetch)
        waiting.deliver_to(lambda answer, error: answers.append(error or answer))

        # follower 2 leaves partition 1's ISR. The manager takes a new state on the event
        # loop, its high watermark moved in the same step; the fault run's broker took it on
        # its worker thread and moved the high watermark later. That moment is made here by
        # hand (the loop is held): the state is in, the high watermark not yet moved.
        shrunk = PartitionState(0, 0, (0, 1), 1)
        zk_client.set(zk.partition_path(TOPIC, 1), shrunk.encode())
        p1.become(shrunk, manager.clock_ms())
        # An append to partition 1 wakes the fetch; its look at partition 1 records follower 1
        # there, which (the ISR now shorter) moves that high watermark from inside the look.
        # (An append to partition 0 no longer would: a woken fetch reads again only the
        # partitions whose log moved, and a high watermark's move wakes consumers only.)
        _produce(h, 1)
        assert p1.high_watermark == end
        assert len(answers) == 1, f"{len(answers)} answers to one fetch"
        assert len(h.waiters) == 0  # answered: waiting nowhere any more
        await asyncio.sleep(0.05)  # the loop's follow-ups run: still one answer
        assert len(answers) == 1

    try:
        asyncio.run(scenario())
    finally:
        manager.stop()
    assert not isinstance(answers[0], BaseException), answers[0]


def _serve_twice_then_truly(server: socket.socket, leader_log: bytes, first: bytes) -> None:
    """A leader (on `server`) whose log is `leader_log`, and which answers the first fetch
    twice: with `first`, then with the whole log from the same offset (what broker 2 did)."""
    answered = 0
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # the test is over
            return
        with conn, conn.makefile("rb") as stream, suppress(ConnectionError):
            # the follower drops a connection that answered wrongly, unread bytes and all
            # (a reset here): the next connection is served as a real leader would serve it
            while header := stream.read(4):
                (size,) = struct.unpack(">i", header)
                request = decode_request(stream.read(size))
                assert isinstance(request, ReplicaFetchRequest)
                [fetch] = request.fetches
                data = [first, leader_log] if answered == 0 else [leader_log[fetch.offset :]]
                for chunk in data:  # the log's end as the broker sends it: after the read
                    sets = [
                        ReplicaSet(TOPIC, 0, 0, 0, len(leader_log), ((0, 0),), len(chunk), chunk)
                    ]
                    conn.sendall(b"".join(encode_replica_fetch_response(sets)))
                answered += 1


def test_a_follower_appends_a_leaders_bytes_only_at_the_offset_they_were_read_from(
    tmp_path: Path,
) -> None:
    """The follower's side of the same run: whatever a leader sends, bytes read at one offset
    are never appended at another (the second answer is dropped with the connection)."""
    one, two = build_message_set([b"first"]), build_message_set([b"second"])
    logs = LogManager(BrokerConfig(log_dir=str(tmp_path)), replica_marker=EPOCH_FILE)
    replica = Replica(TOPIC, 0, (9, 1), open_replica_log(logs, TOPIC, 0), broker_id=1)
    replica.become(PartitionState(9, 0, (9, 1), 1), now_ms=0)
    with socket.create_server(("127.0.0.1", 0)) as server:
        leader = threading.Thread(
            target=_serve_twice_then_truly, args=(server, one + two, one), daemon=True
        )
        leader.start()
        fetcher = ReplicaFetcher(
            1,
            9,
            lambda broker: server.getsockname(),
            max_bytes=65536,
            max_wait_ms=100,
            connect=lambda host, port, timeout: BrokerConnection(host, port, timeout=timeout),
        )
        fetcher.add(replica)
        fetcher.start()
        try:
            deadline = time.monotonic() + 30
            while replica.log.end_offset < len(one + two):
                assert time.monotonic() < deadline, f"the follower ends at {replica.log.end_offset}"
                time.sleep(0.01)
            time.sleep(0.3)  # a few more fetches: nothing is added twice
        finally:
            fetcher.stop()
            fetcher.join(10)
    stored = b"".join(p.read_bytes() for p in sorted(replica.log.directory.glob("*.kafka")))
    assert stored == one + two
