"""BrokerConnection against real sockets: timeouts, pipelined answers read ahead."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from logbroker.client.connection import BrokerConnection, BrokerUnavailableError


def answer(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.fixture
def listener():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock
    sock.close()


def test_a_broker_that_never_answers_times_out_and_the_next_call_reconnects(listener):
    conn = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout=0.3)
    with pytest.raises(BrokerUnavailableError, match=r"failed: timed out after 0\.3 s"):
        conn.request(b"\x00\x00\x00\x02\x00\x07")
    first, _ = listener.accept()
    # the timed-out socket was closed (a late answer would be read as the next one's)
    assert first.recv(16) == b"\x00\x00\x00\x02\x00\x07"
    assert first.recv(16) == b""

    def serve():
        second, _ = listener.accept()
        second.recv(16)
        second.sendall(answer(b"\x00\x00ok"))
        second.close()

    server = threading.Thread(target=serve)
    server.start()
    assert conn.request(b"\x00\x00\x00\x02\x00\x07") == b"\x00\x00ok"
    server.join()
    conn.close()


def test_pipelined_answers_of_every_size_come_back_whole_and_in_order(listener):
    # small answers arrive several per read, large ones straddle the read-ahead buffer
    bodies = [bytes([i % 251]) * n for i, n in enumerate([2, 30, 9000, 2, 70_000, 8190, 5, 3])]
    conn = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout=10)
    conn.connect()
    peer, _ = listener.accept()
    peer.sendall(b"".join(answer(b) for b in bodies))
    assert [conn.receive() for _ in bodies] == bodies
    peer.sendall(answer(b"\x00\x00tail")[:5])  # an answer cut short by a closing broker
    peer.close()
    with pytest.raises(BrokerUnavailableError, match="closed the connection"):
        conn.receive()
    conn.close()


def test_answers_read_into_a_given_buffer_are_whole_and_larger_ones_get_their_own(listener):
    bodies = [bytes([i + 1]) * n for i, n in enumerate([9000, 20_000, 5, 70_000, 12_000])]
    conn = BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout=10)
    conn.connect()
    peer, _ = listener.accept()
    peer.sendall(b"".join(answer(b) for b in bodies))
    into = bytearray(32 * 1024)
    for body in bodies:
        got = conn.receive(into)
        assert bytes(got) == body
        fits = 4096 <= len(body) <= len(into)
        # read in place when it fits (the previous answer's view now shows this one's bytes)
        assert (isinstance(got, memoryview) and got.obj is into) == fits
    peer.close()
    conn.close()
