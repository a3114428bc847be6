"""Raw Kafka 0.7 requests over a socket, for the compat tests: our side of each scenario.

Only the protocol codec (logbroker.protocol) is used, never logbroker's client, so that a
scenario's "our producer" or "our reader" is the plain wire format and nothing more.

    produce(address, topic, partition, message_set)    one PRODUCE frame, handled on return
    fetch(address, topic, partition, offset, max_size) -> (error code, raw bytes)
    offsets(address, topic, partition, time, max)      -> [offset, ...] newest first
    wait_for_end(address, topic, partition, end)       poll OFFSETS until latest == end
    read_log(address, topic, partition)                every byte of the partition's log
    wait_for_entries(address, topic, partition, n)     read_log once it holds n entries
    parse_entries(data)                                independent parser: [(offset, magic,
                                                       attributes, crc, payload)], CRC checked
"""

from __future__ import annotations

import socket
import struct
import time
import zlib

from logbroker.protocol.requests import (
    LATEST_TIME,
    FetchRequest,
    OffsetsRequest,
    ProduceRequest,
    encode_request,
)
from logbroker.protocol.responses import decode_fetch_response, decode_offsets_response

Address = tuple[str, int]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 16))
        if not chunk:
            raise ConnectionError(f"broker closed the connection with {n} bytes still expected")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _call(address: Address, frame: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        return _recv_exact(sock, size)


def produce(address: Address, topic: str, partition: int, message_set: bytes) -> None:
    """Send one PRODUCE frame (0.7 never answers one), then half-close and wait for EOF.

    The broker handles a connection's requests in order and closes its side after our
    EOF, so once EOF arrives the produce has been handled (appended or refused).
    """
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(encode_request(ProduceRequest(topic, partition, message_set)))
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):
            pass


def fetch(
    address: Address, topic: str, partition: int, offset: int, max_size: int
) -> tuple[int, bytes]:
    body = _call(address, encode_request(FetchRequest(topic, partition, offset, max_size)))
    response = decode_fetch_response(body)
    return response.error, bytes(response.messages)


def offsets(
    address: Address, topic: str, partition: int, time_ms: int, max_offsets: int
) -> list[int]:
    body = _call(address, encode_request(OffsetsRequest(topic, partition, time_ms, max_offsets)))
    return decode_offsets_response(body)


def latest(address: Address, topic: str, partition: int = 0) -> int:
    return offsets(address, topic, partition, LATEST_TIME, 1)[0]


def wait_for_end(
    address: Address, topic: str, partition: int, end: int, timeout: float = 20.0
) -> int:
    """Poll the latest offset until it is `end` (the flushed end moves on a timer)."""
    deadline = time.monotonic() + timeout
    seen = latest(address, topic, partition)
    while seen != end and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = latest(address, topic, partition)
    return seen


def wait_for_entries(
    address: Address, topic: str, partition: int, count: int, timeout: float = 20.0
) -> bytes:
    """The partition's log once it holds `count` top-level entries (or at the deadline)."""
    deadline = time.monotonic() + timeout
    data = read_log(address, topic, partition)
    while len(parse_entries(data)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
        data = read_log(address, topic, partition)
    return data


def read_log(address: Address, topic: str, partition: int = 0) -> bytes:
    """Every byte from offset 0 to the latest offset, in fetches of 64 KiB."""
    end = latest(address, topic, partition)
    data = bytearray()
    while len(data) < end:
        error, chunk = fetch(address, topic, partition, len(data), min(65536, end - len(data)))
        assert error == 0, f"fetch at {len(data)} answered error {error}"
        assert chunk, f"fetch at {len(data)} returned nothing before the end {end}"
        data += chunk
    return bytes(data)


def parse_entries(data: bytes) -> list[tuple[int, int, int, int, bytes]]:
    """(offset, magic, attributes, crc, payload) of every whole entry, by hand.

    Written from 0.7.2's `message/Message.scala` format, independently of
    logbroker.protocol, and strict: a bad magic, a CRC mismatch or trailing bytes fail.
    """
    entries = []
    pos = 0
    while pos < len(data):
        assert pos + 4 <= len(data), f"{len(data) - pos} stray bytes at offset {pos}"
        (size,) = struct.unpack_from(">i", data, pos)
        assert size >= 5, f"entry at {pos} declares {size} bytes"
        end = pos + 4 + size
        assert end <= len(data), f"entry at {pos} runs past the data ({end} > {len(data)})"
        magic = data[pos + 4]
        if magic == 0:
            attributes = 0
            (crc,) = struct.unpack_from(">I", data, pos + 5)
            payload = data[pos + 9 : end]
        elif magic == 1:
            attributes = data[pos + 5]
            (crc,) = struct.unpack_from(">I", data, pos + 6)
            payload = data[pos + 10 : end]
        else:
            raise AssertionError(f"entry at {pos} has magic {magic}")
        assert zlib.crc32(payload) == crc, f"CRC mismatch in the entry at {pos}"
        entries.append((pos, magic, attributes, crc, payload))
        pos = end
    return entries
