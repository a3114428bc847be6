"""What the operations tests share: three real brokers on one ZooKeeper chroot, waiting, and
an acked produce sent to one broker (no client that follows leaders: the tests say where)."""

from __future__ import annotations

import time
from collections.abc import Callable

from logbroker.client.connection import BrokerConnection
from logbroker.protocol.errors import LogbrokerError, error_for_code
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import AckedProduceRequest, ProduceRequest
from logbroker.protocol.responses import decode_acked_produce_response
from logbroker.testing.broker import BrokerProcess

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
