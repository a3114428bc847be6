"""Compression bombs against a real broker: refused with the right error, nothing stored, and
other clients served while the broker works on one.

    gzip bomb       one wrapper whose ~300 KB of gzip inflate to 300 MB of zeros
    nested bomb     a ~5 KB request: one wrapper holding 20 inner wrappers, each of which
                    inflates to 100 MiB (compression inside compression: 0.7 never wrote it)
    request limit   20 valid wrappers of ~5 MB inflated each: every one under the per-set
                    limit, all together over the per-request limit

Defaults: a set inflates to at most 8 x max.message.size, a request to 32 x (8 MB and 32 MB).
"""

from __future__ import annotations

import socket
import struct
import threading
import zlib
from collections.abc import Iterator

import pytest

from logbroker.client.connection import BrokerConnection
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.errors import InvalidMessageError, MessageSizeTooLargeError
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    AckedProduceRequest,
    MetadataRequest,
    ProduceRequest,
    encode_request,
)
from logbroker.protocol.responses import decode_acked_produce_response
from logbroker.stack.broker import BrokerProcess

MiB = 1 << 20


def gzip_of_zeros(size: int) -> bytes:
    """A gzip member of `size` zero bytes, made a MiB at a time (never holding them all)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    parts = [deflate.compress(block) for _ in range(size // MiB)]
    parts.append(deflate.compress(bytes(size % MiB)))
    parts.append(deflate.flush())
    return b"".join(parts)


def wrapper(payload: bytes, codec: int = 1) -> bytes:
    """One magic-1 entry whose payload is compressed bytes."""
    return (
        struct.pack(">i", 6 + len(payload))  # entry size
        + struct.pack(">B", 1)  # magic 1
        + struct.pack(">B", codec)  # attributes: the codec (1 = gzip)
        + struct.pack(">I", zlib.crc32(payload))  # CRC32 of the payload
        + payload
    )


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    return wrapper(gzip_of_zeros(300 * 1000 * 1000))


@pytest.fixture(scope="module")
def nested_bomb() -> bytes:
    inner = wrapper(gzip_of_zeros(100 * MiB))
    outer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return wrapper(outer.compress(inner * 20) + outer.flush())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("bombs"), overrides={"num.partitions": "2"})
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def acked(broker: BrokerProcess, topic: str, sets: list[bytes]) -> list[int]:
    """The error code of each set, produced in one acknowledged request (partition 0)."""
    request = AckedProduceRequest(False, tuple(ProduceRequest(topic, 0, s) for s in sets))
    with BrokerConnection(*broker.address, timeout=60) as conn:
        return [r.error for r in decode_acked_produce_response(conn.request(request))]


def latest(broker: BrokerProcess, topic: str) -> int:
    with SimpleConsumer(*broker.address, timeout=30) as consumer:
        return consumer.latest_offset(topic, 0)


def test_a_gzip_bomb_is_refused_and_nothing_is_stored(
    broker: BrokerProcess, gzip_bomb: bytes
) -> None:
    assert len(gzip_bomb) < 320_000
    assert acked(broker, "bomb", [gzip_bomb]) == [MessageSizeTooLargeError.code]
    assert latest(broker, "bomb") == 0


def test_nested_compression_is_refused_however_small(
    broker: BrokerProcess, nested_bomb: bytes
) -> None:
    assert len(nested_bomb) < 10_000
    assert acked(broker, "nested", [nested_bomb]) == [InvalidMessageError.code]
    assert latest(broker, "nested") == 0


def test_a_plain_produce_of_a_bomb_closes_the_connection(
    broker: BrokerProcess, gzip_bomb: bytes
) -> None:
    with socket.create_connection(broker.address, timeout=60) as sock:
        sock.sendall(encode_request(ProduceRequest("plain-bomb", 0, gzip_bomb)))
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
    assert closed
    assert latest(broker, "plain-bomb") == 0


def test_one_request_may_inflate_only_so_far_in_all(broker: BrokerProcess) -> None:
    one = build_message_set([b"%06d" % i * 168 for i in range(5000)], codec=1)  # ~5 MB inflated
    codes = acked(broker, "request-limit", [one] * 20)
    # 6 sets (30.2 MB) fit in 32 MB; the 7th would pass it, and so would every later one.
    assert codes == [0] * 6 + [MessageSizeTooLargeError.code] * 14
    assert latest(broker, "request-limit") == 6 * len(one)


def test_other_clients_are_served_while_a_bomb_is_inflated(
    tmp_path_factory: pytest.TempPathFactory, gzip_bomb: bytes
) -> None:
    # Limits high enough that the broker works on the bomb for a while (200 MB of zeros).
    big = str(200 * 1000 * 1000)
    overrides = {"max.inflated.set.size": big, "max.inflated.request.size": big}
    with BrokerProcess(tmp_path_factory.mktemp("bomb-wait"), overrides=overrides) as broker:
        bomb_answer: list[int] = []
        bomb_sent = threading.Event()

        def throw_bomb() -> None:
            request = AckedProduceRequest(False, (ProduceRequest("slow-bomb", 0, gzip_bomb),))
            with BrokerConnection(*broker.address, timeout=120) as conn:
                conn.send(encode_request(request))
                bomb_sent.set()
                bomb_answer.extend(r.error for r in decode_acked_produce_response(conn.receive()))

        thrower = threading.Thread(target=throw_bomb)
        thrower.start()
        answered = 0
        with BrokerConnection(*broker.address, timeout=60) as other:
            bomb_sent.wait(60)
            while not bomb_answer and answered < 100_000:
                other.request(MetadataRequest(()))  # answered while the bomb is inflated
                if not bomb_answer:
                    answered += 1
        thrower.join(120)
        # The loop blocked on the bomb would answer at most the one request read before it.
        assert answered >= 5, f"only {answered} answers while the bomb was inflated"
        assert bomb_answer == [MessageSizeTooLargeError.code]


def test_compressed_produces_of_a_client_that_leaves_at_once_are_all_stored(
    broker: BrokerProcess,
) -> None:
    # Each set is inflated in a worker while the next ones wait in the connection's buffer;
    # the client's EOF arrives meanwhile. 0.7 appended whatever it had read whole: so do we.
    sets = [build_message_set([b"left %d" % i] * 10, codec=1) for i in range(5)]
    with socket.create_connection(broker.address, timeout=30) as sock:
        sock.sendall(b"".join(encode_request(ProduceRequest("leaver", 0, s)) for s in sets))
    end = sum(map(len, sets))
    with SimpleConsumer(*broker.address, timeout=30) as consumer:
        messages = []
        while not messages or messages[-1].next_offset < end:
            messages += consumer.fetch_messages("leaver", 0, 0, max_wait_ms=1000)[0][
                len(messages) :
            ]
    assert [m.payload for m in messages] == [b"left %d" % i for i in range(5) for _ in range(10)]
