"""kill -9 and SIGTERM of a real broker subprocess in the middle of a produce stream.

Reference: docs/design.md §3.2 and 0.7.2's `log/Log.scala` (recovery of the last segment on an unclean start: walk
the entries and cut at the first that is short, runs past the end of the file or fails its
CRC; a clean shutdown leaves `.kafka_cleanshutdown` in log.dir and the next start recovers
nothing). Frames are packed here field by field; every byte fetched back is validated with
iter_messages (sizes and CRCs, through compression).
"""

from __future__ import annotations

import gzip
import re
import socket
import struct
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path

from logbroker.protocol.message_set import iter_messages
from logbroker.stack.broker import BrokerProcess

PRODUCE, FETCH, OFFSETS, PRODUCE_ACK, FETCH_WAIT = 0, 1, 4, 5, 6
LATEST = -1
MARKER = ".kafka_cleanshutdown"
ACKED, PLAIN = "crash-acked", "crash-plain"

# ---------------------------------------------------------------------------------------
# Byte-by-byte builders and readers.


def message0(payload: bytes) -> bytes:
    return (
        struct.pack(">i", 5 + len(payload))  # entry size N
        + struct.pack(">B", 0)  # magic 0
        + struct.pack(">I", zlib.crc32(payload))  # CRC32 of the payload
        + payload
    )


def message1(payload: bytes, codec: int = 0, crc: int | None = None) -> bytes:
    return (
        struct.pack(">i", 6 + len(payload))  # entry size N
        + struct.pack(">B", 1)  # magic 1
        + struct.pack(">B", codec)  # attributes: compression codec
        + struct.pack(">I", zlib.crc32(payload) if crc is None else crc)  # CRC32 of payload
        + payload
    )


def frame(request_type: int, body: bytes) -> bytes:
    return (
        struct.pack(">i", 2 + len(body))  # size: the bytes after this field
        + struct.pack(">h", request_type)  # request type
        + body
    )


def produce_body(topic: str, partition: int, messages: bytes) -> bytes:
    return (
        struct.pack(">h", len(topic))  # topic length
        + topic.encode()  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">i", len(messages))  # message set size
        + messages
    )


def produce(topic: str, partition: int, messages: bytes) -> bytes:
    return frame(PRODUCE, produce_body(topic, partition, messages))


def produce_ack(topic: str, partition: int, messages: bytes) -> bytes:
    return frame(
        PRODUCE_ACK,
        struct.pack(">b", 0)  # flags: no fsync
        + struct.pack(">h", 1)  # one produce
        + produce_body(topic, partition, messages),
    )


def fetch(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return frame(
        FETCH,
        struct.pack(">h", len(topic))  # topic length
        + topic.encode()  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", offset)  # offset
        + struct.pack(">i", max_size),  # max size
    )


def latest_offset(topic: str, partition: int) -> bytes:
    return frame(
        OFFSETS,
        struct.pack(">h", len(topic))  # topic length
        + topic.encode()  # topic
        + struct.pack(">i", partition)  # partition
        + struct.pack(">q", LATEST)  # time: latest
        + struct.pack(">i", 1),  # max number of offsets
    )


def connect(broker: BrokerProcess) -> socket.socket:
    return socket.create_connection(broker.address, timeout=10)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def read_ack(sock: socket.socket) -> tuple[int, int, int]:
    """The one result of a one-produce PRODUCE_ACK: (error, offset, next offset)."""
    body = read_frame(sock)
    error, count, n = struct.unpack_from(">hhh", body)
    assert (error, count) == (0, 1)
    _partition, err, offset, next_offset = struct.unpack_from(">ihqq", body, 6 + n)
    return err, offset, next_offset


def read_latest(sock: socket.socket) -> int:
    body = read_frame(sock)
    error, count = struct.unpack_from(">hi", body)
    assert (error, count) == (0, 1)
    return int(struct.unpack_from(">q", body, 6)[0])


def fetch_all(broker: BrokerProcess, topic: str) -> bytes:
    """Every byte of partition 0, fetched in chunks up to the latest offset."""
    with connect(broker) as s:
        s.sendall(latest_offset(topic, 0))
        end = read_latest(s)
        data = b""
        while len(data) < end:
            s.sendall(fetch(topic, 0, len(data), 256 * 1024))
            body = read_frame(s)
            assert body[:2] == b"\x00\x00"
            assert body[2:], f"no data at offset {len(data)} of {end}"
            data += body[2:]
        s.sendall(fetch(topic, 0, end, 1000))  # at the end: empty, error 0
        assert read_frame(s) == b"\x00\x00"
    assert len(data) == end
    return data


def messages_of(data: bytes) -> list:
    """Every message, CRC-checked through compression; the data must end on an entry."""
    messages = list(iter_messages(data))
    assert not data or messages[-1].next_offset == len(data), "a damaged or partial tail"
    return messages


def valid_prefix(data: bytes) -> int:
    """Bytes of whole entries with a right CRC at the start of a segment (§6 recovery)."""
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 5 or pos + 4 + n > len(data):
            break
        magic = data[pos + 4]
        if magic not in (0, 1) or (magic == 1 and n < 6):
            break
        header = 5 if magic == 0 else 6  # magic, (attributes,) CRC
        (crc,) = struct.unpack_from(">I", data, pos + 4 + header - 4)  # CRC ends the header
        if zlib.crc32(data[pos + 4 + header : pos + 4 + n]) != crc:
            break
        pos += 4 + n
    return pos


def segment_of(broker: BrokerProcess, topic: str) -> Path:
    (segment,) = (broker.log_dir / f"{topic}-0").glob("*.kafka")
    return segment


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------
# The produce streams.


class Streams:
    """Two producers: acked sets on ACKED, plain (unanswered) sets on PLAIN.

    Acked sets are recorded with the offsets the broker answered. Plain sets alternate
    magic 0 and gzip; every 20 sets the producer asks OFFSETS, and the sets sent before
    that answer are `confirmed` (the broker handled them: requests run in order).
    """

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.acked: list[tuple[int, int, list[bytes]]] = []
        self.attempted: list[bytes] = []  # plain payloads, in the order sent
        self.confirmed = 0  # how many of `attempted` the broker surely appended
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(self._acked,)),
            threading.Thread(target=self._run, args=(self._plain,)),
        ]

    def start(self) -> Streams:
        for thread in self.threads:
            thread.start()
        return self

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        assert not self.errors, self.errors

    def _run(self, body: Callable[[socket.socket], None]) -> None:
        try:
            with connect(self.broker) as sock:
                body(sock)
        except (ConnectionError, OSError):
            pass  # the broker went away: the end of the stream
        except BaseException as exc:  # pragma: no cover - reported by join()
            self.errors.append(exc)

    def _acked(self, sock: socket.socket) -> None:
        i = 0
        while not self.stop.is_set():
            payloads = [b"acked-%07d-%d|" % (i, j) * (1 + (i + j) % 5) for j in range(4)]
            sock.sendall(produce_ack(ACKED, 0, b"".join(message1(p) for p in payloads)))
            error, offset, next_offset = read_ack(sock)
            assert error == 0
            self.acked.append((offset, next_offset, payloads))
            i += 1

    def _plain(self, sock: socket.socket) -> None:
        k = 0
        while not self.stop.is_set():
            payloads = [b"plain-%07d-%d" % (k, j) for j in range(3)]
            if k % 2:
                inner = b"".join(message1(p) for p in payloads)
                messages = message1(gzip.compress(inner, mtime=0), codec=1)
            else:
                messages = b"".join(message0(p) for p in payloads)
            self.attempted.extend(payloads)
            sock.sendall(produce(PLAIN, 0, messages))
            k += 1
            if k % 20 == 0:
                sent = len(self.attempted)
                sock.sendall(latest_offset(PLAIN, 0))
                read_latest(sock)
                self.confirmed = sent


def check_acked(data: bytes, acked: list[tuple[int, int, list[bytes]]]) -> None:
    """Every acked set is in `data` at the offsets its ack gave, and the sets tile the log."""
    by_offset = {m.offset: m.payload for m in messages_of(data)}
    position = 0
    for offset, next_offset, payloads in acked:
        assert offset == position and next_offset <= len(data)
        found = []
        while position < next_offset:
            found.append(by_offset[position])
            position += 4 + 6 + len(found[-1])
        assert found == payloads and position == next_offset


def plain_payloads(data: bytes) -> list[bytes]:
    return [m.payload for m in messages_of(data)]


# ---------------------------------------------------------------------------------------
# Tests.


def test_kill_9_during_produce_stream_then_recover(broker_factory) -> None:
    broker = broker_factory()
    streams = Streams(broker).start()
    wait_until(
        lambda: (len(streams.acked) >= 200 and streams.confirmed >= 300) or bool(streams.errors),
        "both produce streams to get going",
    )
    broker.kill()  # SIGKILL while both streams are producing
    streams.join()
    assert not (broker.log_dir / MARKER).exists()

    # What the killed broker left on disk, plus a torn write on each log: a partial entry
    # after the acked data, and an entry with a bad CRC (followed by a good one, which
    # recovery must cut too) after the plain data.
    before = {t: segment_of(broker, t).read_bytes() for t in (ACKED, PLAIN)}
    torn = {
        ACKED: message1(b"torn write" * 3)[:17],
        PLAIN: message1(b"bad", crc=0xBAD) + message1(b"good but after a bad one"),
    }
    expected_end = {}
    for t in (ACKED, PLAIN):
        with open(segment_of(broker, t), "ab") as f:
            f.write(torn[t])
        expected_end[t] = valid_prefix(before[t] + torn[t])
        assert expected_end[t] <= len(before[t])

    log_start = broker.log_path.stat().st_size
    broker.start()  # the same log.dir
    log = broker.log_since(log_start)
    assert "loaded 2 logs" in log and "after an unclean shutdown" in log
    for t in (ACKED, PLAIN):
        cut = len(before[t]) + len(torn[t]) - expected_end[t]
        line = next(x for x in log.splitlines() if f"{t}-0: recovery" in x)
        assert f"cut {cut} bytes (" in line and f"at offset {expected_end[t]}: " in line, line
        # Recovery kept every whole entry exactly as it was, and cut the rest...
        assert segment_of(broker, t).read_bytes() == before[t][: expected_end[t]]
        # ...which it moved aside, next to the segment, named by the offset of the cut.
        aside = segment_of(broker, t).with_name(
            f"{segment_of(broker, t).name}.truncated-{expected_end[t]}"
        )
        assert line.endswith(f"the cut bytes are kept in {aside}")
        assert aside.read_bytes() == (before[t] + torn[t])[expected_end[t] :]

    # Every acked message is there, at its acked offset; nothing damaged is served.
    acked_data = fetch_all(broker, ACKED)
    assert len(acked_data) == expected_end[ACKED]
    check_acked(acked_data, streams.acked)
    # The plain stream reads back as an unbroken prefix of what was sent, holding at least
    # every set the broker had confirmed handling before the kill.
    read = plain_payloads(fetch_all(broker, PLAIN))
    assert read == streams.attempted[: len(read)]
    assert len(read) >= streams.confirmed

    # A new produce lands at the recovered end.
    with connect(broker) as s:
        data = message1(b"after the crash")
        s.sendall(produce_ack(ACKED, 0, data))
        assert read_ack(s) == (0, expected_end[ACKED], expected_end[ACKED] + len(data))
        s.sendall(produce(PLAIN, 0, message0(b"plain after")) + latest_offset(PLAIN, 0))
        assert read_latest(s) == expected_end[PLAIN] + len(message0(b"plain after"))
    assert fetch_all(broker, ACKED)[expected_end[ACKED] :] == data
    assert plain_payloads(fetch_all(broker, PLAIN))[-1] == b"plain after"


def test_clean_sigterm_during_produce_stream_then_no_recovery(broker_factory) -> None:
    broker = broker_factory()
    streams = Streams(broker).start()
    wait_until(
        lambda: (len(streams.acked) >= 100 and streams.confirmed >= 100) or bool(streams.errors),
        "both produce streams to get going",
    )
    assert broker.stop() == 0  # SIGTERM: exit code 0
    streams.join()
    assert (broker.log_dir / MARKER).is_file()
    assert "clean shutdown marked" in broker.log_since()
    files = {t: segment_of(broker, t).read_bytes() for t in (ACKED, PLAIN)}
    for data in files.values():  # only whole, valid entries were written
        assert valid_prefix(data) == len(data)

    log_start = broker.log_path.stat().st_size
    broker.start()
    log = broker.log_since(log_start)
    assert "loaded 2 logs" in log and "(clean shutdown)" in log
    assert "recover" not in log
    assert not (broker.log_dir / MARKER).exists()  # removed once the logs are loaded
    for t in (ACKED, PLAIN):
        assert segment_of(broker, t).read_bytes() == files[t]
        assert fetch_all(broker, t) == files[t]
    check_acked(files[ACKED], streams.acked)
    read = plain_payloads(files[PLAIN])
    assert read == streams.attempted[: len(read)] and len(read) >= streams.confirmed


def test_kill_9_of_an_idle_broker_loses_nothing(broker_factory) -> None:
    broker = broker_factory()
    first = broker.log_since()
    assert "(no logs yet)" in first and "unclean" not in first  # a new log.dir is not a crash
    data = message1(b"kept") + message1(gzip.compress(message1(b"inner"), mtime=0), codec=1)
    with connect(broker) as s:
        s.sendall(produce(ACKED, 0, data) + latest_offset(ACKED, 0))
        assert read_latest(s) == len(data)
    broker.kill()
    log_start = broker.log_path.stat().st_size
    broker.start()
    log = broker.log_since(log_start)
    assert "after an unclean shutdown" in log and "recovery" not in log  # nothing to cut
    assert not list(broker.log_dir.rglob("*.truncated-*"))
    assert fetch_all(broker, ACKED) == data
    assert [m.payload for m in messages_of(data)] == [b"kept", b"inner"]


def test_sigterm_answers_a_held_fetch_wait(broker_factory) -> None:
    """A stopping broker answers waiting fetches with what it has, then exits 0."""
    broker = broker_factory(metrics_port=0)
    url = re.search(r"metrics (http://\S+/metrics)", broker.log_since()).group(1)  # type: ignore[union-attr]
    with connect(broker) as s:
        s.sendall(
            frame(
                FETCH_WAIT,
                struct.pack(">i", 60000)  # max wait ms: longer than the stop grace
                + struct.pack(">i", 1)  # min bytes
                + struct.pack(">h", 1)  # one fetch
                + struct.pack(">h", len(ACKED))  # topic length
                + ACKED.encode()  # topic
                + struct.pack(">i", 0)  # partition
                + struct.pack(">q", 0)  # offset
                + struct.pack(">i", 1000),  # max size
            )
        )
        wait_until(  # the broker holds it: counted, and nothing to answer with
            lambda: (
                re.search(
                    r'type="fetch_wait"\} 1\b',
                    urllib.request.urlopen(url, timeout=5).read().decode(),
                )
                is not None
            ),
            "the broker to receive the FETCH_WAIT",
        )
        codes: list[int] = []
        stopper = threading.Thread(target=lambda: codes.append(broker.stop()))
        stopper.start()
        # The held fetch is answered (one empty set, error 0), not dropped with the connection.
        assert read_frame(s) == struct.pack(">hih", 0, 2, 0)
        stopper.join(30)
    assert codes == [0]
    assert (broker.log_dir / MARKER).is_file()
