"""A mutation fuzzer over valid request frames: for the decoder, the handlers and a live broker.

    gen = RequestGenerator(random.Random(1))
    frame = encode_request(gen.request())                 # a valid frame of one of the 8 types
    mutated, names = mutate(rng, frame)                   # the same frame, damaged 1-3 times
    report = run_fuzz(broker.address, broker.log_dir, requests=2000, seed=1)
    assert report.crashes == 0 and report.bytes_changed_by_invalid == 0

Mutators (`MUTATORS`; every one takes and returns a whole frame, size prefix included):

    flip_bits          flip 1-4 random bits anywhere in the frame
    interesting_bytes  overwrite 1-4 bytes with 0x00, 0xFF, 0x7F or 0x80
    truncate           cut the frame at a random point
    extend             append 1-64 bytes of garbage
    duplicate_slice    copy a slice of the frame and insert it somewhere
    size_prefix        set the int32 size prefix to an interesting value (0, -1, len+1, 100 MiB...)
    type_id            change the int16 request type (another type, 8, -1, 0x7FFF...)
    field              set a length, count or number field (topic length, counts, message set
                       size, entry size, partition, offset, max size...) to an edge value
    payload_recrc      change a payload byte and fix its CRC: for a plain message the set stays
                       valid (a legitimate append), for a compressed wrapper the payload no
                       longer decompresses although its CRC matches
    damaged_inner_set  replace a produce's set by a gzip/snappy wrapper with a correct outer CRC
                       around a damaged inner set (bad inner CRC, cut inner entry, bad magic)

After mutators that do not set the size prefix themselves, the prefix is recomputed most of
the time (so the damage is seen inside a well-framed request) and left stale otherwise (so
the broker's framing is exercised). A mutated produce can stay valid (payload and CRC changed
consistently, a partition or topic changed to another legal one): the broker may append it.
What must never happen is damaged bytes stored or bytes already stored changed.

`run_fuzz` loads known data with acked produces, snapshots every segment file, sends
`requests` requests (about 20% valid, 80% mutated), each followed where it can be by a sync
METADATA request with a unique topic so that the end of its effects is known (one stream in
ten is sent in pieces, so that the broker sees frames split across reads), checks liveness
every `check_every` requests and at the end, and finally verifies the stored bytes: the
first `old size` bytes of every segment file that existed after loading are unchanged, and
`message_set.validate` accepts every byte of every segment file (`bytes_changed_by_invalid`
counts the bytes that break either rule), and the loaded sets fetch back byte for byte. The
broker must be started with `BROKER_OVERRIDES` (two partitions per topic). Library code: no
pytest here.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import socket
import struct
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..protocol import compression
from ..protocol.errors import LogbrokerError
from ..protocol.message_set import build_message_set, validate
from ..protocol.requests import (
    DEFAULT_MAX_SOCKET_REQUEST_BYTES,
    EARLIEST_TIME,
    LATEST_TIME,
    RANDOM_PARTITION,
    AckedProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    Request,
    RequestType,
    WaitingFetchRequest,
    encode_request,
)
from ..protocol.responses import (
    decode_acked_produce_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
)

TOPICS = ("fuzz-a", "fuzz-b")
PARTITIONS = 2
BROKER_OVERRIDES = {"num.partitions": str(PARTITIONS)}
SEGMENT_SUFFIX = ".kafka"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_MAX_RESPONSE = 512 * 1024 * 1024  # a response larger than this is a broker bug here

Rng = random.Random

# ---------------------------------------------------------------------------------------
# Valid requests


class RequestGenerator:
    """Valid requests of all 8 types over `topics` x `partitions`.

    Fetch offsets come from `boundaries` (known entry offsets per partition, fed by the
    caller from acked produces) so that fetched data starts on a message boundary; a fetch
    past every known offset asks for an out-of-range offset on purpose.
    """

    def __init__(
        self, rng: Rng, topics: Iterable[str] = TOPICS, partitions: int = PARTITIONS
    ) -> None:
        self.rng = rng
        self.topics = tuple(topics)
        self.partitions = partitions
        self.boundaries: dict[tuple[str, int], list[int]] = {}
        self._kinds: list[Callable[[], Request]] = [
            self.produce,
            self.produce,
            self.multiproduce,
            self.fetch,
            self.multifetch,
            self.offsets,
            self.acked_produce,
            self.waiting_fetch,
            self.metadata,
        ]

    def add_boundary(self, topic: str, partition: int, offset: int) -> None:
        self.boundaries.setdefault((topic, partition), []).append(offset)

    def request(self) -> Request:
        return self.rng.choice(self._kinds)()

    # -- pieces -----------------------------------------------------------------------

    def message_set(self) -> bytes:
        rng = self.rng
        payloads = [self._payload() for _ in range(rng.randint(1, 4))]
        kind = rng.randrange(4)
        if kind == 0:
            return build_message_set(payloads, magic=0)
        if kind == 1:
            return build_message_set(payloads, magic=1)
        return build_message_set(payloads, compression.GZIP if kind == 2 else compression.SNAPPY)

    def _payload(self) -> bytes:
        rng = self.rng
        n = rng.choice((0, 1, 5, 17, 40, 90))
        if rng.random() < 0.5:
            return rng.randbytes(n)
        return (b"fuzz payload %d " % rng.randrange(1000) * 8)[:n]

    def _topic(self) -> str:
        return self.rng.choice(self.topics)

    def _partition(self, allow_random: bool = False) -> int:
        if allow_random and self.rng.random() < 0.15:
            return RANDOM_PARTITION
        return self.rng.randrange(self.partitions)

    def _produce(self) -> ProduceRequest:
        return ProduceRequest(self._topic(), self._partition(True), self.message_set())

    def _fetch(self) -> FetchRequest:
        topic, partition = self._topic(), self._partition()
        known = self.boundaries.get((topic, partition), [0])
        roll = self.rng.random()
        if roll < 0.8:
            offset = self.rng.choice(known)
        elif roll < 0.9:
            offset = max(known)
        else:
            offset = max(known) + 10**9  # out of range
        return FetchRequest(topic, partition, offset, self.rng.choice((0, 10, 64, 300, 4096)))

    # -- the 8 types ------------------------------------------------------------------

    def produce(self) -> ProduceRequest:
        return self._produce()

    def multiproduce(self) -> MultiProduceRequest:
        return MultiProduceRequest(tuple(self._produce() for _ in range(self.rng.randint(1, 3))))

    def fetch(self) -> FetchRequest:
        return self._fetch()

    def multifetch(self) -> MultiFetchRequest:
        return MultiFetchRequest(tuple(self._fetch() for _ in range(self.rng.randint(1, 3))))

    def offsets(self) -> OffsetsRequest:
        time_ms = self.rng.choice((LATEST_TIME, EARLIEST_TIME, 0, int(time.time() * 1000)))
        return OffsetsRequest(self._topic(), self._partition(), time_ms, self.rng.randint(1, 5))

    def acked_produce(self) -> AckedProduceRequest:
        produces = tuple(self._produce() for _ in range(self.rng.randint(1, 3)))
        return AckedProduceRequest(self.rng.random() < 0.1, produces)

    def waiting_fetch(self) -> WaitingFetchRequest:
        fetches = tuple(self._fetch() for _ in range(self.rng.randint(1, 2)))
        return WaitingFetchRequest(
            self.rng.choice((0, 1, 5, 20)), self.rng.choice((0, 1, 64)), fetches
        )

    def metadata(self) -> MetadataRequest:
        rng = self.rng
        if rng.random() < 0.2:
            return MetadataRequest(())
        return MetadataRequest(tuple(rng.sample(self.topics, rng.randint(1, len(self.topics)))))


# ---------------------------------------------------------------------------------------
# Where the fields of a valid frame are


@dataclass(frozen=True)
class Field:
    """One field of a frame: `size` bytes at `pos`, of a kind such as 'topic_length'."""

    pos: int
    size: int
    kind: str


NUMERIC_SIZES = (1, 2, 4, 8)
_LENGTH_KINDS = {"frame_size", "topic_length", "count", "set_size", "entry_size"}


def frame_fields(frame: bytes) -> list[Field]:
    """The fields of a frame made by `encode_request` (size prefix included), in order."""
    fields = [Field(0, 4, "frame_size"), Field(4, 2, "type")]
    pos = 6

    def number(size: int, kind: str) -> int:
        nonlocal pos
        fields.append(Field(pos, size, kind))
        value = int.from_bytes(frame[pos : pos + size], "big", signed=True)
        pos += size
        return value

    def topic() -> None:
        nonlocal pos
        n = number(2, "topic_length")
        fields.append(Field(pos, n, "topic"))
        pos += n

    def produce() -> None:
        nonlocal pos
        topic()
        number(4, "partition")
        n = number(4, "set_size")
        fields.append(Field(pos, n, "message_set"))
        fields.extend(_entry_fields(frame, pos, n))
        pos += n

    def fetch() -> None:
        topic()
        number(4, "partition")
        number(8, "offset")
        number(4, "max_size")

    kind = RequestType(_INT16.unpack_from(frame, 4)[0])
    if kind is RequestType.PRODUCE:
        produce()
    elif kind is RequestType.FETCH:
        fetch()
    elif kind is RequestType.MULTIFETCH:
        for _ in range(number(2, "count")):
            fetch()
    elif kind is RequestType.MULTIPRODUCE:
        for _ in range(number(2, "count")):
            produce()
    elif kind is RequestType.OFFSETS:
        topic()
        number(4, "partition")
        number(8, "time")
        number(4, "max_offsets")
    elif kind is RequestType.PRODUCE_ACK:
        number(1, "flags")
        for _ in range(number(2, "count")):
            produce()
    elif kind is RequestType.FETCH_WAIT:
        number(4, "max_wait")
        number(4, "min_bytes")
        for _ in range(number(2, "count")):
            fetch()
    elif kind is RequestType.METADATA:
        for _ in range(number(2, "count")):
            topic()
    return fields  # other types: only the size and the type are known


def _entry_fields(frame: bytes, start: int, length: int) -> list[Field]:
    """Fields of the top-level entries of a (valid) message set at frame[start:start+length]."""
    fields = []
    pos, end = start, start + length
    while pos + 4 <= end:
        (size,) = _INT32.unpack_from(frame, pos)
        fields.append(Field(pos, 4, "entry_size"))
        magic = frame[pos + 4]
        fields.append(Field(pos + 4, 1, "magic"))
        if magic == 1:
            fields.append(Field(pos + 5, 1, "attributes"))
            fields.append(Field(pos + 6, 4, "crc"))
            fields.append(Field(pos + 10, size - 6, "payload"))
        else:
            fields.append(Field(pos + 5, 4, "crc"))
            fields.append(Field(pos + 9, size - 5, "payload"))
        pos += 4 + size
    return fields


def interesting_values(size: int, current: int) -> list[int]:
    """Edge values for a signed big-endian field of `size` bytes holding `current`."""
    bits = 8 * size
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    values = [0, 1, 2, -1, -2, low, high, low + 1, high - 1, current + 1, current - 1]
    if size >= 2:
        values += [0x7F, 0x80, 0xFF, 0x100, current + 4, current - 4, current * 2]
    if size >= 4:
        values += [0x7FFF, 0x8000, 0xFFFF, 0x10000, DEFAULT_MAX_SOCKET_REQUEST_BYTES + 1]
    if size >= 8:
        values += [2**31, 2**32, -(2**31) - 1]
    return [v for v in values if low <= v <= high]


# ---------------------------------------------------------------------------------------
# Mutators: frame (bytes, size prefix included), fields of the original frame -> new frame


def _fix_size(frame: bytearray) -> None:
    if len(frame) >= 4:
        frame[0:4] = _INT32.pack(min(len(frame) - 4, 2**31 - 1))


def flip_bits(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if frame:
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    return frame


def interesting_bytes(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        if frame:
            frame[rng.randrange(len(frame))] = rng.choice((0x00, 0xFF, 0x7F, 0x80))
    return frame


def truncate(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if rng.random() < 0.3:
        del frame[max(0, len(frame) - rng.randint(1, 4)) :]  # a few bytes off the end
    else:
        del frame[rng.randrange(len(frame) + 1) :]
    return frame


def extend(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    n = rng.randint(1, 64)
    if rng.random() < 0.5:
        frame += rng.randbytes(n)
    else:
        frame += bytes([rng.choice((0x00, 0xFF, 0x7F, 0x80))]) * n
    return frame


def duplicate_slice(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if not frame:
        return frame
    start = rng.randrange(len(frame))
    piece = frame[start : start + rng.randint(1, 32)]
    at = start + len(piece) if rng.random() < 0.5 else rng.randrange(len(frame) + 1)
    frame[at:at] = piece
    return frame


def size_prefix(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    body = len(frame) - 4
    value = rng.choice(
        (
            0,
            1,
            2,
            -1,
            -(2**31),
            2**31 - 1,
            body - 1,
            body + 1,
            body - rng.randint(2, 16),
            body + rng.randint(2, 16),
            DEFAULT_MAX_SOCKET_REQUEST_BYTES,
            DEFAULT_MAX_SOCKET_REQUEST_BYTES + 1,
            rng.randrange(-(2**31), 2**31),
        )
    )
    if len(frame) < 4:
        frame += bytes(4 - len(frame))
    frame[0:4] = _INT32.pack(max(-(2**31), min(2**31 - 1, value)))
    return frame


def type_id(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    if len(frame) >= 6:
        value = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, -1, 0x7FFF, -(2**15), 0x100))
        frame[4:6] = _INT16.pack(value)
    return frame


def field_value(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    numeric = [f for f in fields if f.size in NUMERIC_SIZES and f.kind not in ("topic", "payload")]
    numeric = [f for f in numeric if f.pos + f.size <= len(frame)]
    if not numeric:
        return frame
    lengths = [f for f in numeric if f.kind in _LENGTH_KINDS]
    chosen = rng.choice(lengths if lengths and rng.random() < 0.6 else numeric)
    current = int.from_bytes(frame[chosen.pos : chosen.pos + chosen.size], "big", signed=True)
    value = rng.choice(interesting_values(chosen.size, current))
    frame[chosen.pos : chosen.pos + chosen.size] = value.to_bytes(chosen.size, "big", signed=True)
    return frame


def payload_recrc(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    crcs = [f for f in fields if f.kind == "crc"]
    payloads = [f for f in fields if f.kind == "payload"]
    pairs = [
        (c, p)
        for c, p in zip(crcs, payloads, strict=True)
        if p.size and p.pos + p.size <= len(frame)
    ]
    if not pairs:
        return frame
    crc, payload = rng.choice(pairs)
    frame[payload.pos + rng.randrange(payload.size)] ^= 1 << rng.randrange(8)
    new_crc = zlib.crc32(frame[payload.pos : payload.pos + payload.size])
    frame[crc.pos : crc.pos + 4] = _UINT32.pack(new_crc)
    return frame


def damaged_inner_set(rng: Rng, frame: bytearray, fields: list[Field]) -> bytearray:
    sets = [f for f in fields if f.kind == "message_set" and f.pos + f.size <= len(frame)]
    if not sets:
        return frame
    target = rng.choice(sets)
    inner = bytearray(build_message_set([rng.randbytes(rng.randint(0, 30)) for _ in range(3)]))
    damage = rng.randrange(4)
    if damage == 0:
        inner[-1] ^= 0x01  # last payload byte: inner CRC mismatch
    elif damage == 1:
        del inner[-rng.randint(1, 5) :]  # last inner entry cut off
    elif damage == 2:
        inner[4] = 7  # first inner entry: unknown magic
    else:
        inner[0:4] = _INT32.pack(3)  # first inner entry under the minimum size
    codec = rng.choice((compression.GZIP, compression.SNAPPY))
    wrapped = compression.compress(codec, bytes(inner))
    wrapper = struct.pack(">iBBI", 6 + len(wrapped), 1, codec, zlib.crc32(wrapped)) + wrapped
    if rng.random() < 0.5:  # after a valid entry, so that the damage is not the first entry
        wrapper = build_message_set([b"ok"]) + wrapper
    frame[target.pos : target.pos + target.size] = wrapper
    frame[target.pos - 4 : target.pos] = _INT32.pack(len(wrapper))  # the set size field
    return frame


Mutator = Callable[[Rng, bytearray, list[Field]], bytearray]

MUTATORS: dict[str, Mutator] = {
    "flip_bits": flip_bits,
    "interesting_bytes": interesting_bytes,
    "truncate": truncate,
    "extend": extend,
    "duplicate_slice": duplicate_slice,
    "size_prefix": size_prefix,
    "type_id": type_id,
    "field": field_value,
    "payload_recrc": payload_recrc,
    "damaged_inner_set": damaged_inner_set,
}
_WEIGHTS = {"field": 3, "flip_bits": 2, "interesting_bytes": 2}


def mutate(
    rng: Rng, frame: bytes, *, fix_size_probability: float = 0.75
) -> tuple[bytes, list[str]]:
    """`frame` (a valid frame) damaged by 1-3 mutators; returns it and the mutators' names."""
    fields = frame_fields(frame)
    names = list(MUTATORS)
    weights = [_WEIGHTS.get(n, 1) for n in names]
    out = bytearray(frame)
    applied = []
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        name = rng.choices(names, weights)[0]
        out = MUTATORS[name](rng, out, fields)
        applied.append(name)
    if "size_prefix" not in applied and rng.random() < fix_size_probability:
        _fix_size(out)
    return bytes(out), applied


# ---------------------------------------------------------------------------------------
# How the broker will cut a byte stream into frames


def split_frames(
    stream: bytes, max_request_bytes: int = DEFAULT_MAX_SOCKET_REQUEST_BYTES
) -> tuple[list[tuple[int, int]], str]:
    """The frames (start, end) the broker cuts out of `stream`, and how the stream ends:

    'complete' (ends exactly after a frame), 'bad_size' (a size prefix the broker refuses:
    it closes there) or 'incomplete' (the broker waits for more bytes).
    """
    frames: list[tuple[int, int]] = []
    pos = 0
    while pos < len(stream):
        if len(stream) - pos < 4:
            return frames, "incomplete"
        (size,) = _INT32.unpack_from(stream, pos)
        if size < 2 or size > max_request_bytes:
            return frames, "bad_size"
        if len(stream) - pos - 4 < size:
            return frames, "incomplete"
        frames.append((pos, pos + 4 + size))
        pos += 4 + size
    return frames, "complete"


# ---------------------------------------------------------------------------------------
# A blocking client connection that never hangs


class _Closed(Exception):
    """The broker closed the connection (EOF or reset)."""


class _BadResponse(Exception):
    """A response frame the broker should never send."""


class _Connection:
    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Close with a reset: no TIME_WAIT left behind by a hundred thousand connections.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.buffer = bytearray()

    def send(self, data: bytes, cuts: Iterable[int] = ()) -> None:
        """Send `data`; with `cuts`, in pieces split there, a short pause between them."""
        try:
            start = 0
            for cut in sorted(cuts):
                self.sock.sendall(data[start:cut])
                time.sleep(0.0005)  # separate reads on the broker's side, most of the time
                start = cut
            self.sock.sendall(data[start:])
        except OSError as exc:
            raise _Closed(str(exc)) from None

    def half_close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def read_frame(self, deadline: float) -> bytes | None:
        """The next response body (after its int32 size), or None at the deadline."""
        buf = self.buffer
        while True:
            if len(buf) >= 4:
                (size,) = _INT32.unpack_from(buf, 0)
                if size < 2 or size > _MAX_RESPONSE:
                    raise _BadResponse(f"response size {size}")
                if len(buf) >= 4 + size:
                    body = bytes(buf[4 : 4 + size])
                    del buf[: 4 + size]
                    return body
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 18)
            except TimeoutError:
                return None
            except OSError as exc:
                raise _Closed(str(exc)) from None
            if not chunk:
                raise _Closed("EOF")
            buf += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# ---------------------------------------------------------------------------------------
# The report


@dataclass
class FuzzReport:
    """What a fuzz run did and found. The run is clean when `ok` holds."""

    seed: int
    requests_planned: int
    requests_sent: int = 0
    valid_requests: int = 0
    mutated_requests: int = 0
    responses_received: int = 0
    connections_opened: int = 0
    connections_closed_by_broker: int = 0
    closed_after_client_eof: int = 0
    timeouts: int = 0
    split_sends: int = 0
    valid_failures: int = 0
    crashes: int = 0
    liveness_checks: int = 0
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    old_bytes_changed: int = 0
    invalid_bytes: int = 0
    bytes_changed_by_invalid: int = 0
    known_sets: int = 0
    known_sets_mismatched: int = 0
    broker_errors_logged: int | None = None
    elapsed_s: float = 0.0
    aborted: bool = False
    mutations: dict[str, int] = field(default_factory=dict)
    framing: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    timeout_samples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.crashes == 0
            and self.bytes_changed_by_invalid == 0
            and self.known_sets_mismatched == 0
            and self.valid_failures == 0
            and not self.aborted
            and not self.broker_errors_logged
        )

    @property
    def requests_per_s(self) -> float:
        return self.requests_sent / self.elapsed_s if self.elapsed_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["requests_per_s"] = round(self.requests_per_s, 1)
        return out

    def note(self, message: str, limit: int = 50) -> None:
        if len(self.failures) < limit:
            self.failures.append(message)

    def __str__(self) -> str:
        lines = [
            f"fuzz run, seed {self.seed}: {'OK' if self.ok else 'PROBLEMS FOUND'}",
            f"  requests sent            {self.requests_sent} of {self.requests_planned} "
            f"({self.valid_requests} valid, {self.mutated_requests} mutated) in "
            f"{self.elapsed_s:.1f} s ({self.requests_per_s:.0f}/s)",
            f"  responses received       {self.responses_received}",
            f"  connections              {self.connections_opened} opened, "
            f"{self.connections_closed_by_broker} closed by the broker, "
            f"{self.closed_after_client_eof} closed after the client's EOF, "
            f"{self.timeouts} abandoned after a timeout",
            f"  sent in pieces           {self.split_sends}",
            f"  valid request failures   {self.valid_failures}",
            f"  broker crashes           {self.crashes} ({self.liveness_checks} liveness checks)",
            f"  stored data              {self.files_before} files / {self.bytes_before} bytes "
            f"before, {self.files_after} files / {self.bytes_after} bytes after",
            f"  bytes changed by invalid {self.bytes_changed_by_invalid} "
            f"({self.old_bytes_changed} old bytes changed, {self.invalid_bytes} invalid bytes)",
            f"  known sets re-fetched    {self.known_sets}, {self.known_sets_mismatched} differ",
        ]
        if self.broker_errors_logged is not None:
            lines.append(f"  broker errors logged     {self.broker_errors_logged}")
        if self.aborted:
            lines.append("  the run was aborted: the broker stopped serving")
        lines.append(
            "  mutators                 "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.mutations.items()))
        )
        lines.append(
            "  stream endings           "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.framing.items()))
        )
        lines += [f"  ! {f}" for f in self.failures]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Stored data


@dataclass(frozen=True)
class SegmentSnapshot:
    size: int
    sha256: str
    data: bytes


def snapshot_segments(log_dir: Path) -> dict[str, SegmentSnapshot]:
    """Every segment file under `log_dir` (relative path -> size, hash and bytes)."""
    out = {}
    for path in sorted(Path(log_dir).rglob(f"*{SEGMENT_SUFFIX}")):
        if path.is_file():
            data = path.read_bytes()
            out[str(path.relative_to(log_dir))] = SegmentSnapshot(
                len(data), hashlib.sha256(data).hexdigest(), data
            )
    return out


def verify_segments(
    log_dir: Path, before: Mapping[str, SegmentSnapshot], report: FuzzReport
) -> None:
    """Old bytes unchanged (appends only add at the end) and every byte of every log valid."""
    after = snapshot_segments(log_dir)
    report.files_after = len(after)
    report.bytes_after = sum(s.size for s in after.values())
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            report.old_bytes_changed += old.size
            report.note(f"segment {name} ({old.size} bytes) disappeared")
            continue
        prefix = new.data[: old.size]
        if hashlib.sha256(prefix).hexdigest() != old.sha256:
            changed = sum(a != b for a, b in zip(old.data, prefix, strict=False))
            changed += old.size - len(prefix)
            report.old_bytes_changed += changed
            report.note(f"segment {name}: {changed} of its first {old.size} bytes changed")
    for name, seg in after.items():
        check = validate(seg.data)
        if check.error is not None or check.valid_bytes != seg.size:
            bad = seg.size - check.valid_bytes
            report.invalid_bytes += bad
            report.note(
                f"segment {name}: {bad} invalid bytes from position {check.valid_bytes} "
                f"({check.error or 'a partial entry at the end'})"
            )
    report.bytes_changed_by_invalid = report.old_bytes_changed + report.invalid_bytes


# ---------------------------------------------------------------------------------------
# The run


def _expects_response(req: Request) -> bool:
    return not isinstance(req, ProduceRequest | MultiProduceRequest)


class _Fuzzer:
    def __init__(
        self,
        address: tuple[str, int],
        rng: Rng,
        report: FuzzReport,
        topics: tuple[str, ...],
        partitions: int,
        timeout: float,
        max_request_bytes: int,
    ) -> None:
        self.address = address
        self.rng = rng
        self.report = report
        self.topics = topics
        self.partitions = partitions
        self.timeout = timeout
        self.max_request_bytes = max_request_bytes
        self.gen = RequestGenerator(rng, topics, partitions)
        self.conn: _Connection | None = None
        self.sync_counter = 0
        self.recent: deque[str] = deque(maxlen=8)  # hex of the last requests, for a crash
        self.mutations: Counter[str] = Counter()
        self.framing: Counter[str] = Counter()

    # -- connections ------------------------------------------------------------------

    def connection(self) -> _Connection:
        if self.conn is None:
            try:
                self.conn = _Connection(self.address, self.timeout)
            except OSError as exc:
                raise _Closed(f"cannot connect: {exc}") from None
            self.report.connections_opened += 1
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def sync_frame(self) -> tuple[bytes, str]:
        self.sync_counter += 1
        marker = f"fuzz.sync.{self.sync_counter}"
        return encode_request(MetadataRequest((marker,))), marker

    @staticmethod
    def is_sync(body: bytes, marker: str) -> bool:
        try:
            meta = decode_metadata_response(body)
        except LogbrokerError:
            return False
        return len(meta.topics) == 1 and meta.topics[0].topic == marker

    # -- load -------------------------------------------------------------------------

    def load(self) -> list[tuple[str, int, int, bytes]]:
        """Acked, fsynced produces of every kind of set to every partition."""
        known = []
        produces = []
        for topic in self.topics:
            for partition in range(self.partitions):
                for magic, codec in ((0, 0), (1, 0), (1, 1), (1, 2), (1, 0), (0, 0)):
                    payloads = [
                        b"known %s-%d %d" % (topic.encode(), partition, i) for i in range(3)
                    ]
                    produces.append(
                        ProduceRequest(topic, partition, build_message_set(payloads, codec, magic))
                    )
        conn = self.connection()
        conn.send(encode_request(AckedProduceRequest(True, tuple(produces))))
        body = conn.read_frame(time.monotonic() + 30)
        if body is None:
            raise RuntimeError("the broker did not answer the loading PRODUCE_ACK")
        results = decode_acked_produce_response(body)
        for req, result in zip(produces, results, strict=True):
            if result.error:
                raise RuntimeError(
                    f"loading {req.topic}-{req.partition} failed with error {result.error}: "
                    f"start the broker with {BROKER_OVERRIDES}"
                )
            data = bytes(req.messages)
            known.append((req.topic, req.partition, result.offset, data))
            self.gen.add_boundary(req.topic, req.partition, result.offset)
            self.gen.add_boundary(req.topic, req.partition, result.next_offset)
        return known

    # -- one request ------------------------------------------------------------------

    def send_valid(self) -> None:
        report = self.report
        req = self.gen.request()
        frame = encode_request(req)
        self.recent.append(f"valid {type(req).__name__} {frame.hex()}")
        report.valid_requests += 1
        try:
            conn = self.connection()
            if not _expects_response(req):
                sync, marker = self.sync_frame()
                conn.send(frame + sync)
                self.await_sync(conn, marker, valid=True)
                return
            conn.send(frame)
            body = conn.read_frame(time.monotonic() + self.timeout)
        except _Closed as exc:
            self.drop()
            report.connections_closed_by_broker += 1
            report.valid_failures += 1
            report.note(f"the broker closed the connection on a valid request ({exc}): {req!r}")
            return
        except _BadResponse as exc:
            self.drop()
            report.valid_failures += 1
            report.note(f"bad response to a valid request ({exc}): {req!r}")
            return
        if body is None:
            self.drop()
            report.timeouts += 1
            report.valid_failures += 1
            report.note(f"no answer to a valid request in {self.timeout:g} s: {req!r}")
            return
        report.responses_received += 1
        problem = self.check_response(req, body)
        if problem:
            report.valid_failures += 1
            report.note(f"{problem}: {req!r}")

    def check_response(self, req: Request, body: bytes) -> str | None:
        """Why the answer to a valid request is wrong, or None."""
        try:
            if isinstance(req, FetchRequest):
                return self.check_fetched(req, decode_fetch_response(body))
            if isinstance(req, MultiFetchRequest | WaitingFetchRequest):
                sets = decode_multifetch_response(body, len(req.fetches))
                for f, s in zip(req.fetches, sets, strict=True):
                    problem = self.check_fetched(f, s)
                    if problem:
                        return problem
            elif isinstance(req, OffsetsRequest):
                decode_offsets_response(body)
            elif isinstance(req, AckedProduceRequest):
                results = decode_acked_produce_response(body)
                if len(results) != len(req.produces):
                    return f"{len(results)} results for {len(req.produces)} produces"
                for result in results:
                    if result.error:
                        return f"a valid acked produce failed with error {result.error}"
                    self.gen.add_boundary(result.topic, result.partition, result.offset)
                    self.gen.add_boundary(result.topic, result.partition, result.next_offset)
            elif isinstance(req, MetadataRequest):
                decode_metadata_response(body)
        except LogbrokerError as exc:
            return f"the response does not decode ({exc})"
        return None

    def check_fetched(self, req: FetchRequest, fetched: Any) -> str | None:
        if fetched.error not in (0, 1):
            return f"fetch answered error {fetched.error}"
        if fetched.error == 0:
            check = validate(fetched.messages)
            if check.error is not None:
                return f"fetched data at {req.offset} does not validate: {check.error}"
        return None

    def send_mutated(self) -> None:
        report = self.report
        req = self.gen.request()
        frame, names = mutate(self.rng, encode_request(req))
        self.mutations.update(names)
        report.mutated_requests += 1
        sync, marker = self.sync_frame()
        stream = frame + sync
        frames, ending = split_frames(stream, self.max_request_bytes)
        aligned = ending == "complete" and frames[-1] == (len(frame), len(stream))
        self.framing["sync aligned" if aligned else ending] += 1
        self.recent.append(f"mutated {type(req).__name__} {'+'.join(names)} {frame.hex()}")
        if self.conn is not None and self.rng.random() < 0.1:
            self.drop()  # a fresh connection now and then, even when this one is fine
        try:
            conn = self.connection()
            cuts: list[int] = []
            if len(stream) > 1 and self.rng.random() < 0.1:  # frames split across reads
                cuts = self.rng.sample(range(1, len(stream)), min(3, len(stream) - 1))
                report.split_sends += 1
            conn.send(stream, cuts)
            if aligned:
                self.await_sync(conn, marker, valid=False)
            else:
                if ending != "bad_size":
                    conn.half_close()  # the broker would wait for the rest of a frame
                self.await_close(conn, ending)
        except _Closed:
            self.drop()
            report.connections_closed_by_broker += 1

    def await_sync(self, conn: _Connection, marker: str, valid: bool) -> None:
        """Read responses until the sync answer; on close or timeout drop the connection."""
        report = self.report
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                body = conn.read_frame(deadline)
                if body is None:
                    self.drop()
                    report.timeouts += 1
                    self.timed_out()
                    if valid:
                        report.valid_failures += 1
                        report.note("no answer to the sync after a valid produce")
                    return
                if self.is_sync(body, marker):
                    return
                report.responses_received += 1
        except _Closed:
            self.drop()
            report.connections_closed_by_broker += 1
            if valid:
                report.valid_failures += 1
                report.note(
                    f"the broker closed the connection on a valid produce: {self.recent[-1]}"
                )
        except _BadResponse as exc:
            self.drop()
            report.note(f"bad response frame ({exc}) after {self.recent[-1]}")

    def timed_out(self) -> None:
        if len(self.report.timeout_samples) < 20:
            self.report.timeout_samples.append(self.recent[-1])

    def await_close(self, conn: _Connection, ending: str) -> None:
        """Read responses until the broker closes the connection (or give up on it)."""
        report = self.report
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                body = conn.read_frame(deadline)
                if body is None:
                    report.timeouts += 1
                    self.timed_out()
                    break
                report.responses_received += 1
        except _Closed:
            if ending == "bad_size":
                report.connections_closed_by_broker += 1
            else:
                report.closed_after_client_eof += 1
        except _BadResponse as exc:
            report.note(f"bad response frame ({exc}) after {self.recent[-1]}")
        self.drop()

    # -- liveness ---------------------------------------------------------------------

    def alive(self) -> str | None:
        """None if a fresh connection gets a METADATA answer naming our topics; else why not."""
        try:
            conn = _Connection(self.address, self.timeout)
        except OSError as exc:
            return f"cannot connect: {exc}"
        try:
            conn.send(encode_request(MetadataRequest(self.topics)))
            body = conn.read_frame(time.monotonic() + max(self.timeout, 5.0))
            if body is None:
                return "no METADATA answer"
            meta = decode_metadata_response(body)
            names = [t.topic for t in meta.topics]
            if names != list(self.topics) or any(len(t.partitions) == 0 for t in meta.topics):
                return f"METADATA answered {meta!r}"
            return None
        except (_Closed, _BadResponse, LogbrokerError) as exc:
            return f"METADATA failed: {exc}"
        finally:
            conn.close()

    def check_liveness(self, broker_alive: Callable[[], bool] | None) -> bool:
        """Count a crash if the broker died or does not answer; False if it is gone for good."""
        report = self.report
        report.liveness_checks += 1
        dead = broker_alive is not None and not broker_alive()
        reason = "the broker process died" if dead else self.alive()
        if reason is None:
            return True
        report.crashes += 1
        report.note(
            f"broker crash after {report.requests_sent} requests: {reason}; last requests: "
            + " | ".join(self.recent)
        )
        self.drop()
        if dead:
            return False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if self.alive() is None:
                return True
        return False

    def verify_known(self, known: list[tuple[str, int, int, bytes]]) -> None:
        """Fetch every set loaded at the start back: the same bytes at the same offset."""
        report = self.report
        self.drop()
        for topic, partition, offset, data in known:
            report.known_sets += 1
            try:
                conn = self.connection()
                conn.send(encode_request(FetchRequest(topic, partition, offset, len(data))))
                body = conn.read_frame(time.monotonic() + max(self.timeout, 5.0))
            except (_Closed, _BadResponse) as exc:
                self.drop()
                body = None
                report.note(f"re-fetching {topic}-{partition}@{offset} failed: {exc}")
            if body is None:
                report.known_sets_mismatched += 1
                continue
            fetched = decode_fetch_response(body)
            if fetched.error or bytes(fetched.messages) != data:
                report.known_sets_mismatched += 1
                report.note(
                    f"{topic}-{partition}@{offset}: fetched set differs from the one loaded"
                )
        self.drop()


def run_fuzz(
    address: tuple[str, int],
    log_dir: Path | str,
    *,
    requests: int,
    seed: int,
    progress: Callable[[int], object] | None = None,
    valid_fraction: float = 0.2,
    check_every: int = 500,
    timeout: float = 2.0,
    topics: Iterable[str] = TOPICS,
    partitions: int = PARTITIONS,
    broker_alive: Callable[[], bool] | None = None,
    broker_log: Path | str | None = None,
    max_request_bytes: int = DEFAULT_MAX_SOCKET_REQUEST_BYTES,
) -> FuzzReport:
    """Fuzz the broker at `address` whose segment files live under `log_dir`.

    `progress(n)` is called after every request with n = 1 (e.g. a tqdm bar's update).
    `broker_alive()` says whether the broker process still runs; `broker_log` is its log
    file, in which lines of requests the broker failed on unexpectedly are counted. The
    broker must have `partitions` partitions per topic (`BROKER_OVERRIDES`).
    """
    log_dir = Path(log_dir)
    started = time.monotonic()
    log_start = Path(broker_log).stat().st_size if broker_log is not None else 0
    report = FuzzReport(seed=seed, requests_planned=requests)
    rng = random.Random(seed)
    fuzzer = _Fuzzer(address, rng, report, tuple(topics), partitions, timeout, max_request_bytes)
    known = fuzzer.load()
    fuzzer.drop()
    before = snapshot_segments(log_dir)
    report.files_before = len(before)
    report.bytes_before = sum(s.size for s in before.values())
    try:
        for i in range(requests):
            if rng.random() < valid_fraction:
                fuzzer.send_valid()
            else:
                fuzzer.send_mutated()
            report.requests_sent += 1
            if progress is not None:
                progress(1)
            if (i + 1) % check_every == 0 and not fuzzer.check_liveness(broker_alive):
                report.aborted = True
                break
    finally:
        fuzzer.drop()
        report.mutations = dict(fuzzer.mutations)
        report.framing = dict(fuzzer.framing)
    if not report.aborted and fuzzer.check_liveness(broker_alive):
        fuzzer.verify_known(known)
    verify_segments(log_dir, before, report)
    if broker_log is not None:
        report.broker_errors_logged = count_broker_errors(Path(broker_log), log_start)
    report.elapsed_s = time.monotonic() - started
    return report


BROKER_ERROR_MARKERS = ("Traceback (most recent call last)",)


def count_broker_errors(log_path: Path, start: int = 0) -> int:
    """Lines in the broker's log since byte `start` that show it failed unexpectedly."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if any(m in line for m in BROKER_ERROR_MARKERS))
