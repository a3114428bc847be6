"""Fuzzing the broker side: mutated frames through the decoder into the handlers, and a live run.

In process (hypothesis): frames of valid requests are damaged by the fuzzer's mutators
(harness.fuzz: field-aware ones among them, which set length and count fields to
edge values, change type ids, or fix a CRC over a changed payload) and decoded the way the
broker decodes them; what decodes goes to RequestHandlers over a LogManager in tmp_path. The
decoder may only raise InvalidRequestError/InvalidTopicError, the handlers only
LogbrokerError subclasses; every answer decodes with the client's decoder; a request that
raised appended nothing; and after every example each segment file still starts with the
bytes it had after loading and validates to its last byte. A second property builds
semantically wrong requests directly (illegal topics, partitions, offsets, sizes, times,
damaged and oversized message sets). The byte-level decoder property of
tests/protocol/test_requests.py (flip/truncate/insert/delete) is not repeated here.

Live: `run_fuzz` against a broker subprocess, about 2000 requests.
"""

from __future__ import annotations

import asyncio
import gzip
import inspect
import random
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures_brokers import BrokerFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.fuzz import (
    PARTITIONS,
    TOPICS,
    FuzzReport,
    RequestGenerator,
    SegmentSnapshot,
    mutate,
    run_fuzz,
    snapshot_segments,
    verify_segments,
)
from logbroker.config import BrokerConfig
from logbroker.protocol import compression
from logbroker.protocol.errors import InvalidRequestError, InvalidTopicError, LogbrokerError
from logbroker.protocol.message_set import build_message_set, validate
from logbroker.protocol.requests import (
    AckedProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    Request,
    WaitingFetchRequest,
    decode_produce_fast,
    decode_request,
    encode_request,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
)
from logbroker.server.handlers import RequestHandlers
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters
from logbroker.storage.log_manager import LogManager
from logbroker.storage.segment import FileRegion

MAX_MESSAGE_SIZE = 2000  # small, so that "too large" is cheap to reach

# ---------------------------------------------------------------------------------------
# An in-process broker core: LogManager + RequestHandlers, no sockets, no threads.


@dataclass
class Core:
    logs: LogManager
    handlers: RequestHandlers
    log_dir: Path
    loaded: dict[str, SegmentSnapshot]

    def total_bytes(self) -> int:
        return sum(part_log.size_in_bytes for part_log in self.logs.logs())

    def check_storage(self) -> None:
        """Loaded bytes unchanged, every byte of every segment valid."""
        report = FuzzReport(seed=0, requests_planned=0)
        verify_segments(self.log_dir, self.loaded, report)
        assert report.bytes_changed_by_invalid == 0, report.failures


@pytest.fixture
def core(tmp_path: Path) -> Iterator[Core]:
    log_dir = tmp_path / "logs"
    config = BrokerConfig(
        log_dir=str(log_dir),
        num_partitions=PARTITIONS,
        max_message_size=MAX_MESSAGE_SIZE,
        enable_zookeeper=False,
    )
    logs = LogManager(config)
    handlers = RequestHandlers(logs, config, BrokerMetrics(0), AppendWaiters())
    gen = RequestGenerator(random.Random(0))
    for topic in TOPICS:
        for partition in range(PARTITIONS):
            for _ in range(4):
                logs.get_or_create_log(topic, partition).append(gen.message_set())
    try:
        yield Core(logs, handlers, log_dir, snapshot_segments(log_dir))
    finally:
        logs.shutdown()


def run_handler(core: Core, request: Request) -> bytes | None:
    """The handlers' answer as bytes (None for PRODUCE/MULTIPRODUCE), awaited if need be."""

    async def answer() -> bytes | None:
        outcome = core.handlers.handle(request, "fuzz-client")
        if outcome is None:
            return None
        parts = await asyncio.wait_for(outcome, 10) if inspect.isawaitable(outcome) else outcome
        return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)

    return asyncio.run(answer())


def check_answer(request: Request, answer: bytes | None) -> None:
    """The answer is framed and decodes the way a client decodes it."""
    if isinstance(request, ProduceRequest | MultiProduceRequest):
        assert not answer  # nothing; b"" when compressed sets were inflated first
        return
    assert answer is not None
    assert struct.unpack_from(">i", answer)[0] == len(answer) - 4
    body = answer[4:]
    if isinstance(request, FetchRequest):
        fetched = decode_fetch_response(body)
        assert fetched.error in (-1, 0, 1, 3, 4)
    elif isinstance(request, MultiFetchRequest | WaitingFetchRequest):
        sets = decode_multifetch_response(body, len(request.fetches))
        assert all(s.error in (-1, 0, 1, 3, 4, 6) for s in sets)
    elif isinstance(request, OffsetsRequest):
        offsets = decode_offsets_response(body)
        assert offsets == sorted(offsets, reverse=True)
    elif isinstance(request, AckedProduceRequest):
        results = decode_acked_produce_response(body)
        assert len(results) == len(request.produces)
    else:
        assert isinstance(request, MetadataRequest)
        decode_metadata_response(body)


# A FETCH_WAIT is held for its max_wait_ms when min_bytes never arrive, as asked (a mutated
# one asks for hours): the harness shortens the wait, not the handlers' answer.
MAX_WAIT_MS = 1000


def handle_and_check(core: Core, request: Request) -> None:
    if isinstance(request, WaitingFetchRequest) and request.max_wait_ms > MAX_WAIT_MS:
        request = request._replace(max_wait_ms=MAX_WAIT_MS)
    before = core.total_bytes()
    try:
        answer = run_handler(core, request)
    except LogbrokerError:
        # 0.7 closes the connection here; whatever it was, nothing of it was stored.
        assert core.total_bytes() == before
    else:
        check_answer(request, answer)
    core.check_storage()


# ---------------------------------------------------------------------------------------
# (a) Mutated valid frames: decoder, fast produce decoder, handlers.

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_mutated_frames_through_decoder_and_handlers(core: Core, rng: random.Random) -> None:
    gen = RequestGenerator(rng)
    for topic in TOPICS:
        for partition in range(PARTITIONS):
            gen.add_boundary(topic, partition, 0)
    frame, _names = mutate(rng, encode_request(gen.request()))
    body = frame[4:]
    try:
        strict = decode_request(body)
    except (InvalidRequestError, InvalidTopicError) as exc:
        assert "byte" in str(exc)
        strict = None
    try:
        request = decode_request(body, validate_topics=False)  # as the broker decodes
    except InvalidRequestError:
        assert strict is None
        assert decode_produce_fast(body) is None
        return
    if strict is not None:
        assert strict == request
    fast = decode_produce_fast(body)
    if fast is not None:
        assert fast == request
    handle_and_check(core, request)


# ---------------------------------------------------------------------------------------
# (a) Semantically wrong requests, built directly.

GOOD_TOPICS = st.sampled_from(TOPICS)
BAD_TOPICS = st.sampled_from(
    [
        *("", ".", "..", "a/b", "a\\b", "x" * 250, "é" * 125, "a\x00b", "tab\there"),
        *("\x7f", "\x85", "\ud7ff\ue000", "a\ufff0", "emoji😀", "new-topic", "UPPER.case_1"),
    ]
)
topics = st.one_of(GOOD_TOPICS, GOOD_TOPICS, BAD_TOPICS)
partitions = st.one_of(
    st.sampled_from([0, 1, 2, -1, -2, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1)
)
offsets = st.one_of(
    st.sampled_from([0, 1, 7, -1, 2**63 - 1, -(2**63), 10**12]), st.integers(0, 5000)
)
sizes = st.one_of(st.sampled_from([-1, 0, 1, 2**31 - 1, -(2**31)]), st.integers(0, 5000))
times = st.sampled_from([-1, -2, -3, 0, 2**63 - 1, -(2**63), 1_700_000_000_000])
counts = st.sampled_from([-1, 0, 1, 2, 2**31 - 1, -(2**31)])
payloads = st.binary(max_size=40)


def _entry(payload: bytes, magic: int = 1, codec: int = 0, crc: int | None = None) -> bytes:
    crc = zlib.crc32(payload) if crc is None else crc
    if magic == 0:
        return struct.pack(">iBI", 5 + len(payload), 0, crc) + payload
    return struct.pack(">iBBI", 6 + len(payload), magic, codec, crc) + payload


def _wrapper(inner: bytes, codec: int) -> bytes:
    return _entry(compression.compress(codec, inner), codec=codec)


@st.composite
def message_sets(draw: st.DrawFn) -> bytes:
    ps = draw(st.lists(payloads, min_size=1, max_size=3))
    good = build_message_set(ps, draw(st.sampled_from([0, 1, 2])))
    kind = draw(st.integers(0, 14))
    if kind == 0:
        return good
    if kind == 1:
        return build_message_set(ps, magic=0)
    if kind == 2:
        return good[: draw(st.integers(0, len(good)))]  # cut: first entry or a trailing one
    if kind == 3:
        return _entry(ps[0], crc=zlib.crc32(ps[0]) ^ 1)  # CRC mismatch
    if kind == 4:
        return _entry(ps[0], magic=draw(st.sampled_from([2, 7, 255])))  # unknown magic
    if kind == 5:
        return _entry(ps[0], codec=3)  # unknown codec
    if kind == 6:
        return _entry(b"not compressed at all", codec=draw(st.sampled_from([1, 2])))
    if kind == 7:  # a wrapper around a damaged inner set, outer CRC correct
        inner = bytearray(build_message_set(ps))
        inner[-1] ^= 1
        return _wrapper(bytes(inner), draw(st.sampled_from([1, 2])))
    if kind == 8:  # a wrapper around nothing
        return _wrapper(b"", draw(st.sampled_from([1, 2])))
    if kind == 9:  # compression nested deeper than the broker allows
        data = build_message_set(ps)
        for _ in range(draw(st.integers(4, 6))):
            data = _wrapper(data, compression.GZIP)
        return data
    if kind == 10:  # entry size under the minimum, negative, or huge
        size = draw(st.sampled_from([0, 4, -1, -(2**31), 2**31 - 1]))
        return good + struct.pack(">i", size) + b"\x01\x00" + bytes(8)
    if kind == 11:  # a payload over max.message.size
        return build_message_set([b"x" * (MAX_MESSAGE_SIZE + 1)], draw(st.sampled_from([0, 1])))
    if kind == 12:  # a gzip payload cut short, CRC correct
        cut = gzip.compress(build_message_set(ps))[:-5]
        return _entry(cut, codec=compression.GZIP)
    if kind == 13:  # valid set, then garbage
        return good + draw(st.binary(min_size=1, max_size=20))
    return b""  # empty set


produces = st.builds(ProduceRequest, topics, partitions, message_sets())
fetches = st.builds(FetchRequest, topics, partitions, offsets, sizes)
semantic_requests: st.SearchStrategy[Request] = st.one_of(
    produces,
    st.builds(MultiProduceRequest, st.lists(produces, max_size=3).map(tuple)),
    fetches,
    st.builds(MultiFetchRequest, st.lists(fetches, max_size=3).map(tuple)),
    st.builds(OffsetsRequest, topics, partitions, times, counts),
    st.builds(
        AckedProduceRequest,
        st.booleans(),
        st.lists(produces, max_size=3).map(tuple),
        st.booleans(),  # acks=-1 of a 0.7 topic: its one broker is its whole ISR
        st.integers(0, 5),
    ).map(lambda r: r if r.all_in_sync else r._replace(timeout_ms=0)),  # only acks=-1 sends it
    st.builds(
        WaitingFetchRequest,
        st.integers(0, 5),
        st.sampled_from([0, 1, 100, 2**31 - 1]),
        st.lists(fetches, max_size=3).map(tuple),
    ),
    st.builds(MetadataRequest, st.lists(topics, max_size=4).map(tuple)),
)


@SETTINGS
@given(semantic_requests)
def test_semantically_wrong_requests_through_handlers(core: Core, request: Request) -> None:
    # Through the wire first: what the broker receives is what decode_request gives back.
    decoded = decode_request(
        encode_request(request, validate_topics=False)[4:], validate_topics=False
    )
    assert decoded == request
    handle_and_check(core, decoded)


def test_acked_produce_results_say_what_was_refused(core: Core) -> None:
    good = build_message_set([b"fine"])
    request = AckedProduceRequest(
        False,
        (
            ProduceRequest(TOPICS[0], 0, good),
            ProduceRequest("a/b", 0, good),
            ProduceRequest(TOPICS[0], 7, good),
            ProduceRequest(TOPICS[0], 1, _entry(b"bad", crc=0)),
            ProduceRequest(TOPICS[0], 1, build_message_set([b"x" * (MAX_MESSAGE_SIZE + 1)])),
        ),
    )
    answer = run_handler(core, request)
    assert answer is not None
    results = decode_acked_produce_response(answer[4:])
    assert [r.error for r in results] == [0, 6, 3, 2, 5]
    assert results[0].next_offset - results[0].offset == len(good)
    core.check_storage()


# ---------------------------------------------------------------------------------------
# (b) A short live run against a broker subprocess.


def test_live_fuzz_run(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(num_partitions=PARTITIONS)
    report = run_fuzz(
        broker.address,
        broker.log_dir,
        requests=2000,
        seed=20240,
        timeout=1.0,
        check_every=250,
        broker_alive=lambda: broker.proc is not None and broker.proc.poll() is None,
        broker_log=broker.log_path,
    )
    print(report)
    assert report.requests_sent == 2000
    assert report.mutated_requests > report.valid_requests > 200
    assert report.crashes == 0, report.failures
    assert report.bytes_changed_by_invalid == 0, report.failures
    assert report.valid_failures == 0, report.failures
    assert report.known_sets == 24 and report.known_sets_mismatched == 0, report.failures
    assert report.broker_errors_logged == 0, broker.log_since()[-3000:]
    assert report.connections_closed_by_broker > 100  # the broker did refuse things
    assert report.ok

    # Still serving: an acked produce, then the same bytes fetched back.
    data = build_message_set([b"after the fuzz"])
    with socket.create_connection(broker.address, timeout=5) as sock:
        sock.sendall(
            encode_request(AckedProduceRequest(True, (ProduceRequest(TOPICS[0], 0, data),)))
        )
        (result,) = decode_acked_produce_response(_read_frame(sock))
        assert result.error == 0
        sock.sendall(encode_request(FetchRequest(TOPICS[0], 0, result.offset, len(data))))
        fetched = decode_fetch_response(_read_frame(sock))
        assert (fetched.error, bytes(fetched.messages)) == (0, data)
        assert validate(fetched.messages).valid_bytes == len(data)
    assert broker.stop(timeout=15) == 0


def _read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return out

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


# ---------------------------------------------------------------------------------------
# Regressions for what the live fuzzer found (server/connection.py).


def _rst_close(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_client_gone_before_its_fetch_response_is_not_a_broker_failure(
    broker_factory: BrokerFactory,
) -> None:
    """A client that resets right after a FETCH: sendfile met a closing transport and the
    broker logged a traceback ("the broker failed on this request") for every such client."""
    broker = broker_factory()
    data = build_message_set([b"x" * 1000] * 50)
    with socket.create_connection(broker.address, timeout=5) as sock:
        sock.sendall(encode_request(AckedProduceRequest(False, (ProduceRequest("t", 0, data),))))
        assert decode_acked_produce_response(_read_frame(sock))[0].error == 0
    for _ in range(20):
        sock = socket.create_connection(broker.address, timeout=5)
        sock.sendall(encode_request(FetchRequest("t", 0, 0, 100_000)))
        _rst_close(sock)
    with socket.create_connection(broker.address, timeout=5) as sock:
        sock.sendall(encode_request(FetchRequest("t", 0, 0, len(data))))
        assert bytes(decode_fetch_response(_read_frame(sock)).messages) == data
    assert "Traceback" not in broker.log_since()


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts descriptors in /proc")
def test_abandoned_long_polls_release_their_connections(broker_factory: BrokerFactory) -> None:
    """FETCH_WAITs whose clients went away (reset or plain close) while waiting: the broker
    kept each socket until max_wait_ms ended (up to 24 days), and a stop waited its grace."""
    broker = broker_factory()
    fds = Path(f"/proc/{broker.pid}/fd")
    baseline = len(list(fds.iterdir()))
    poll = encode_request(WaitingFetchRequest(600_000, 1, (FetchRequest("empty", 0, 0, 100),)))
    for i in range(20):
        sock = socket.create_connection(broker.address, timeout=5)
        sock.sendall(poll)
        if i % 2:
            _rst_close(sock)
        else:
            sock.close()  # FIN
    deadline = time.monotonic() + 5
    while len(list(fds.iterdir())) > baseline + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(fds.iterdir())) <= baseline + 2
    assert broker.stop(timeout=15) == 0
    assert "still in flight after the" not in broker.log_since()  # nothing waited the grace
