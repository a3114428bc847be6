"""The connection's receive buffer (`connection._Received`) and what it means for a client.

The socket is read straight into the buffer and requests are handled from views of it, so
the buffer must: keep a frame's bytes in order however the reads cut it; give a large frame
one place to arrive in, without reserving what a size field alone announces; and never
write over bytes a request still holds a view of. A real broker then stores, byte for byte,
produces sent one byte per write and a request of several MB.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator

import pytest

from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import FetchRequest, ProduceRequest, encode_request
from logbroker.server.connection import _GROWTH, _MIN_READ, _RECV_FIRST, _Received
from logbroker.stack.broker import BrokerProcess

MAX = 100 * 1024 * 1024


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def receive(received: _Received, data: bytes, max_size: int = MAX) -> None:
    """What asyncio does with one read that brings `data` (in as many reads as it takes)."""
    while data:
        space = received.reserve(max_size)
        n = min(len(space), len(data))
        space[:n] = data[:n]
        received.filled(n)
        data = data[n:]


def test_a_frame_cut_into_one_byte_reads_is_whole_and_in_order() -> None:
    frames = [frame(b"\x00\x00" + bytes(range(256)) * k) for k in (1, 300, 2)]
    received = _Received()
    for byte in b"".join(frames):
        receive(received, bytes([byte]))
    assert bytes(received.buf[received.start : received.end]) == b"".join(frames)


def test_frames_waiting_behind_a_held_request_are_not_moved_at_every_read() -> None:
    """While a request is waited for (a compressed set inflating, an acks=-1 produce), a
    streaming client's frames pile up unhandled, and the request's view keeps the buffer
    from being written over: a buffer sized to them plus one read moved every one of them
    again at each read (a snappy producer fell to ~12k msgs/s)."""
    one = frame(b"\x00\x00" + os.urandom(6_600))  # a compressed set's produce
    received = _Received()
    receive(received, one)
    held = memoryview(received.buf)[received.start : received.end]  # the request's view
    received.start = received.end  # that frame is being handled
    buffers, copied = [received.buf], 0
    for _ in range(150):  # ~1 MB arrives while it is waited for, in reads of one frame
        receive(received, one)
        if received.buf is not buffers[-1]:
            buffers.append(received.buf)
            copied += len(received) - len(one)
    held.release()
    assert bytes(received.buf[received.start : received.end]) == one * 150
    # Each move makes room for as much again as was waiting: a few moves, not one a read.
    assert len(buffers) <= 8, len(buffers)
    assert copied <= 2 * len(one) * 150, copied


def test_a_large_frame_arrives_into_one_buffer_grown_a_few_times() -> None:
    body = b"\x00\x00" + os.urandom(5_000_000)
    received = _Received()
    buffers = []
    for at in range(0, len(body) + 4, 200_000):  # reads of a socket's size
        receive(received, frame(body)[at : at + 200_000])
        if not buffers or buffers[-1] is not received.buf:
            buffers.append(received.buf)
    assert bytes(received.buf[received.start : received.end]) == frame(body)
    assert len(buffers) <= 4  # the first buffer, then each growth copies what arrived


def test_a_size_field_alone_reserves_no_more_than_the_first_buffer() -> None:
    received = _Received()
    receive(received, struct.pack(">i", MAX - 10) + b"\x00\x00")
    assert len(received.buf) == _RECV_FIRST
    receive(received, b"x" * _RECV_FIRST)  # more arrives: the buffer grows with it
    assert len(received.buf) <= (_RECV_FIRST + 6) * _GROWTH + _RECV_FIRST * 2


def test_handled_bytes_a_request_still_holds_are_not_written_over() -> None:
    received = _Received()
    first = frame(b"\x00\x00" + b"a" * (_RECV_FIRST - 4 - _MIN_READ))
    receive(received, first + b"\x00\x00")  # the next frame's size field is cut
    held = memoryview(received.buf)[4 : len(first)]  # a request being answered holds it
    received.start = len(first)  # it was handled
    receive(received, b"\x00\x10" + b"b" * 5000)
    assert bytes(held) == b"\x00\x00" + b"a" * (len(first) - 6)
    assert bytes(received.buf[received.start : received.end]) == b"\x00\x00\x00\x10" + b"b" * 5000
    held.release()


def test_the_buffer_is_reused_in_place_once_nothing_holds_it() -> None:
    received = _Received()
    buf = received.buf
    for _ in range(20):  # each read ends inside a frame: its start moves to the front
        receive(received, frame(b"\x00\x00" + b"c" * 4000) * 3 + frame(b"\x00\x00" + b"d")[:5])
        received.start = received.end - 5
    assert received.buf is buf
    receive(received, frame(b"\x00\x00" + b"d")[5:])
    assert bytes(received.buf[received.start : received.end]) == frame(b"\x00\x00" + b"d")


# ---------------------------------------------------------------------------------------
# A real broker.


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("receive-buffer"))
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def read_fetch(sock: socket.socket) -> tuple[int, bytes]:
    size = struct.unpack(">i", recv_exactly(sock, 4))[0]
    body = recv_exactly(sock, size)
    return struct.unpack_from(">h", body)[0], body[2:]


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return bytes(data)


def segment_bytes(broker: BrokerProcess, topic: str) -> bytes:
    directory = broker.log_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


def fetch_all(broker: BrokerProcess, topic: str, size: int) -> bytes:
    with socket.create_connection(broker.address) as sock:
        sock.sendall(encode_request(FetchRequest(topic, 0, 0, size + 1000)))
        error, data = read_fetch(sock)
    assert error == 0
    return data


def test_produces_sent_one_byte_per_write_are_stored_byte_for_byte(
    broker: BrokerProcess,
) -> None:
    topic = f"tiny-writes-{uuid.uuid4().hex[:8]}"
    sets = [build_message_set([os.urandom(n) for n in (1, 200, 3000)]) for _ in range(3)]
    wire = b"".join(encode_request(ProduceRequest(topic, 0, s)) for s in sets)
    with socket.create_connection(broker.address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i, byte in enumerate(wire):
            sock.sendall(bytes([byte]))
            if i % 64 == 0:
                time.sleep(0.001)  # let the broker read what came: many small reads
        sock.sendall(encode_request(FetchRequest(topic, 0, 0, 100_000)))
        assert read_fetch(sock) == (0, b"".join(sets))
    assert segment_bytes(broker, topic) == b"".join(sets)


def test_a_request_of_several_mb_among_small_ones_is_stored_byte_for_byte(
    broker: BrokerProcess,
) -> None:
    topic = f"large-request-{uuid.uuid4().hex[:8]}"
    small = build_message_set([b"before"])
    large = build_message_set([os.urandom(100_000) for _ in range(60)])  # a 6 MB request
    after = build_message_set([b"after"] * 3)
    sets = [small, large, after, large]
    wire = b"".join(encode_request(ProduceRequest(topic, 0, s)) for s in sets)
    with socket.create_connection(broker.address) as sock:
        sock.sendall(wire)
    expected = b"".join(sets)
    deadline = time.monotonic() + 30
    while len(segment_bytes(broker, topic) if _exists(broker, topic) else b"") < len(expected):
        assert time.monotonic() < deadline, "the produces were not all stored"
        time.sleep(0.05)
    assert segment_bytes(broker, topic) == expected
    assert fetch_all(broker, topic, len(expected)) == expected


def _exists(broker: BrokerProcess, topic: str) -> bool:
    return (broker.log_dir / f"{topic}-0").is_dir()
