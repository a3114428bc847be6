"""What the operations tests share: three real brokers on one ZooKeeper chroot, waiting, an
acked produce sent to one broker (no client that follows leaders: the tests say where), and a
hold on a kazoo client's watches (its view of the cluster made to lag on purpose)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient

from logbroker.client.connection import BrokerConnection
from logbroker.protocol.errors import LogbrokerError, error_for_code
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response
from logbroker.stack.broker import BrokerProcess

SESSION_MS = 2000  # a killed broker's registration goes within ~2 s


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def three(broker_factory, zk_chroot, **overrides: object) -> dict[int, BrokerProcess]:  # type: ignore[no-untyped-def]
    settings = {"zk_sessiontimeout_ms": SESSION_MS, **overrides}
    return {i: broker_factory(broker_id=i, zk=zk_chroot, **settings) for i in range(3)}


def produce(
    broker: BrokerProcess, topic: str, partition: int, payloads: list[bytes], acks_all: bool = False
) -> int:
    """An acked produce to `broker`: the log end after it, or the error it answered, raised."""
    with BrokerConnection(*broker.address) as conn:
        body = conn.request(
            AckedProduceRequest(
                False,
                (ProduceRequest(topic, partition, build_message_set(payloads)),),
                acks_all,
                10000,
            )
        )
    [result] = decode_acked_produce_response(body)
    if result.error:
        raise error_for_code(result.error)
    return result.next_offset


def leads(broker: BrokerProcess, topic: str, partition: int) -> bool:
    """Whether `broker` knows it leads the partition (it takes a produce)."""
    try:
        produce(broker, topic, partition, [b"probe"])
        return True
    except LogbrokerError:
        return False


def hold_watches(client: KazooClient) -> Callable[[], None]:
    """Hold a kazoo client's watch callbacks (kazoo runs them one at a time, in one thread)
    until the returned function is called: the client's view of the cluster lags behind, as
    it does whenever a request is faster than a watch."""
    path = f"/held-{uuid.uuid4().hex}"
    entered, release = threading.Event(), threading.Event()

    def held(event: object) -> None:
        entered.set()
        release.wait(60)

    client.exists(path, watch=held)
    client.create(path)
    assert entered.wait(10), "the watch thread did not take the hold"
    return release.set
