"""Offset ranges of broker partitions: reading them message by message, and `rows_sha256`.

A range is `[start, end)` of byte offsets in one broker partition, both at message
boundaries (offsets come from the brokers, checkpoints or the OFFSETS request). A reader may
own only part of a range, `[owned_from, owned_to)`: it owns the top-level messages (entries)
whose offset lies there, so that a range split at arbitrary byte positions is read exactly
once. It starts at a known boundary before `owned_from` and walks entry sizes (no CRC, no
decoding) up to the first entry it owns; the entry that straddles `owned_to` is its own last.
`entries_end` walks the same way to where a range's first N entries end (a stream's cap on a
micro-batch, admission.py).

`rows_sha256` (docs/design.md §3.6) is SHA-256 over every message of the ranges, in
(broker_id, partition, offset, index) order, of:

    offset   8 bytes, big-endian    the top-level entry's offset (a compressed wrapper's own)
    index    4 bytes, big-endian    the message's position inside its wrapper (0 if none)
    length   4 bytes, big-endian    the payload's length
    payload  length bytes

A 0.8-format topic's range (`logical`) is `[start, end)` of logical offsets: message numbers,
the n-th message of the partition at offset n, inside a compressed wrapper too. Any offset is a
boundary there, so a reader owns exactly the messages numbered `[owned_from, owned_to)` and
reads from `owned_from` through its leader's 0.8 listener (PartitionReader08, which hands out
only the messages at or after the offset asked for), each fetch made into columns over its
bytes by compiled code (keyed_scan.py). Each message also has a key (null or bytes). rows_sha256 hashes such a range's messages, in offset order, as

    offset   8 bytes, big-endian    the message's logical offset
    index    4 bytes, big-endian    0 (every message has its own offset)
    key      4 bytes, big-endian    the key's length, -1 for a null key, then its bytes
    length   4 bytes, big-endian    the payload's length
    payload  length bytes

Data loss: a range whose start retention deleted is a DataLossError naming topic, partition
and the missing offsets; with `fail_on_data_loss=False` a warning, and reading goes on from
the earliest offset still there.

Where a range is read (consumers.py): a 0.7 partition from its broker (a SimpleConsumer), a
replicated one from its leader (a PartitionReader, which follows the leader when it moves).
A range is planned below a high watermark, so when a new leader shows less than the range
for a moment (it learns the high watermark from its followers) the read waits for it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from logbroker.client.messages08 import KeyedBatch
from logbroker.client.partition_reader08 import PartitionReader08
from logbroker.client.simple_consumer import PipelinedFetches, SimpleConsumer
from logbroker.coordination.paths import partition_name
from logbroker.protocol.errors import LogbrokerError, OffsetOutOfRangeError
from logbroker.protocol.message import MIN_MESSAGE_SIZE
from logbroker.protocol.message_set import (
    Buffer,
    MessageColumns,
    entry_at_or_after,
    first_entry_size,
    message_columns,
    whole_entries_end,
)
from spark_apps.source.entry_scan import PlainRun, ends_with_partial_entry, payload_run, plain_run
from spark_apps.source.keyed_scan import KeyedRun, keyed_run

if TYPE_CHECKING:
    from logbroker.client.partition_reader import LeaderFetches, PartitionReader

log = logging.getLogger(__name__)

DEFAULT_FETCH_SIZE = 1024 * 1024
MAX_FETCH_SIZE = 64 * 1024 * 1024
_DIGEST_HEADER = struct.Struct(">qii")
_ENTRY_HEAD = struct.Struct(">iBB")  # size, magic, attributes
_INT32 = struct.Struct(">i")
_DIGEST_HEAD08 = struct.Struct(">qii")  # offset, index 0, the key's length (-1: null)
# A Chunk's offsets or indexes: lists from message_set's general path, numpy arrays from a walk
Positions = Sequence[int] | np.ndarray


class RangeError(LogbrokerError):
    """A range cannot be read as asked: its end is past the log, or not a message boundary."""


class DataLossError(RangeError):
    """Retention deleted (part of) a range before it was read."""


class PartitionRange(NamedTuple):
    """`[start, end)` of one broker partition of a topic: byte offsets, or (`logical`) a
    0.8-format topic's message numbers."""

    topic: str
    broker_id: int
    partition: int
    start: int
    end: int
    logical: bool = False

    @property
    def name(self) -> str:
        """`<broker_id>-<partition>`, or `<p>` for a replicated topic's (broker_id -1)."""
        return partition_name(self.broker_id, self.partition)

    def describe(self) -> str:
        return f"topic {self.topic!r} partition {self.name}"


class _OnBroker:
    """A 0.7 partition's reads from its broker, in PartitionReader's form (one partition)."""

    __slots__ = ("consumer", "partition", "topic")

    def __init__(self, consumer: SimpleConsumer, topic: str, partition: int) -> None:
        self.consumer, self.topic, self.partition = consumer, topic, partition

    def pipelined(self) -> PipelinedFetches:
        return self.consumer.pipelined(self.topic, self.partition)

    def earliest_offset(self) -> int:
        return self.consumer.earliest_offset(self.topic, self.partition)

    def latest_offset(self) -> int:
        return self.consumer.latest_offset(self.topic, self.partition)

    def wait_visible(self, offset: int) -> bool:
        return False  # a broker's own log shows all it has: nothing to wait for


def _partition_reads(
    consumer: SimpleConsumer | PartitionReader, r: PartitionRange
) -> _OnBroker | PartitionReader:
    if isinstance(consumer, SimpleConsumer):
        return _OnBroker(consumer, r.topic, r.partition)
    if (consumer.topic, consumer.partition) != (r.topic, r.partition):
        raise ValueError(f"a reader of {consumer.topic}-{consumer.partition} for {r.describe()}")
    return consumer


class Chunk:
    """Messages of one fetch, as columns: top-level offsets, indexes in wrappers, payloads.

    A fetch of plain entries (nearly every fetch) comes as numpy offsets and indexes and
    its walk (`run`, entry_scan.py): the Avro reader reads the payloads in place, and
    `values`, one Arrow binary column, is copied out of the fetch by compiled code only when
    asked for; any other fetch comes as lists, from message_set's general path. Each form
    gives the others on demand (`payloads`, `values`), for the slower paths. A 0.8-format
    topic's fetch always comes as a KeyedRun (keyed_scan.py: its wrappers' messages too),
    which gives its keys the same ways (`key_values` an Arrow column, `keys` a list).
    """

    __slots__ = ("_keys", "_payloads", "_values", "indexes", "offsets", "run")

    def __init__(
        self,
        offsets: Positions,
        indexes: Positions,
        *,
        payloads: list[bytes] | None = None,
        run: PlainRun | KeyedRun | None = None,
        keys: list[bytes | None] | None = None,
    ) -> None:
        self.offsets = offsets
        self.indexes = indexes
        self._keys = keys
        self._payloads = payloads
        self._values: pa.BinaryArray | None = None  # made from `run` or `payloads` when asked
        self.run = run

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def keys(self) -> list[bytes | None] | None:
        """A 0.8-format topic's message keys (None: a 0.7 topic's, keyless)."""
        if self._keys is None and isinstance(self.run, KeyedRun):
            self._keys = self.run.keys()
        return self._keys

    @property
    def key_values(self) -> pa.BinaryArray | list[bytes | None] | None:
        """The keys as the `key` column takes them: a 0.8 run's copied out by compiled
        code (an Arrow column), else `keys`."""
        if isinstance(self.run, KeyedRun):
            return self.run.key_array()
        return self._keys

    @property
    def payloads(self) -> list[bytes]:
        if self._payloads is None:
            self._payloads = self.values.to_pylist()
        return self._payloads

    @property
    def values(self) -> pa.BinaryArray:
        if self._values is None:
            if self.run is not None:
                payloads, starts = self.run.payload_arrays()
                self._values = pa.Array.from_buffers(
                    pa.binary(), len(self), [None, pa.py_buffer(starts), pa.py_buffer(payloads)]
                )
            else:
                self._values = pa.array(self._payloads, pa.binary())
        return self._values


def data_loss_message(r: PartitionRange, missing_from: int, earliest: int) -> str:
    return (
        f"{r.describe()}: offsets [{missing_from}, {min(earliest, r.end)}) of the range "
        f"[{r.start}, {r.end}) were deleted by retention before they were read "
        f"(the earliest offset still there is {earliest})"
    )


def resume_after_out_of_range(
    r: PartitionRange,
    offset: int,
    log: _OnBroker | PartitionReader | PartitionReader08,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> int:
    """Where a read of `r` goes on after OffsetOutOfRange at `offset` (either format; `log`
    answers earliest_offset and latest_offset): from the earliest offset still there, when
    retention deleted the start and failOnDataLoss is false; otherwise the error that says
    which."""
    earliest: int = log.earliest_offset()
    if offset >= earliest:
        raise RangeError(
            f"{r.describe()}: the log ends at offset {log.latest_offset()}, before the range "
            f"[{r.start}, {r.end}) ends; was the broker's log or the topic replaced?"
        ) from None
    if fail_on_data_loss:
        raise DataLossError(data_loss_message(r, offset, earliest)) from None
    warn(data_loss_message(r, offset, earliest) + "; reading from there (failOnDataLoss=false)")
    return earliest


def read_range(
    consumer: SimpleConsumer | PartitionReader | PartitionReader08,
    r: PartitionRange,
    *,
    read_from: int | None = None,
    owned_from: int | None = None,
    owned_to: int | None = None,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    max_fetch_size: int = MAX_FETCH_SIZE,
    fail_on_data_loss: bool = True,
    warn: Callable[[str], None] = log.warning,
) -> Iterator[Chunk]:
    """The messages of `r` (or of the part of it this reader owns), a fetch at a time, from
    `consumer`: the partition's broker, or for a replicated partition its PartitionReader.

    `read_from` is a message boundary at or before `owned_from` (default: `r.start`); a
    logical range (its PartitionReader08) is read from `owned_from`.
    """
    if r.logical:
        return (
            _chunk08(run)
            for run in _read08(
                _reader08(consumer, r), r, owned_from, owned_to, fail_on_data_loss, warn
            )
        )
    assert not isinstance(consumer, PartitionReader08), f"{r.describe()}: byte offsets"
    return _read(
        consumer,
        r,
        read_chunk,
        read_from,
        owned_from,
        owned_to,
        fetch_size,
        max_fetch_size,
        fail_on_data_loss,
        warn,
    )


_Decoded = TypeVar("_Decoded")
# What a read makes of a fetch's whole entries from `base`: (it, where those entries end)
Decode = Callable[[Buffer, int, PartitionRange], tuple[_Decoded, int]]


def _read(
    consumer: SimpleConsumer | PartitionReader,
    r: PartitionRange,
    decode: Decode[_Decoded],
    read_from: int | None,
    owned_from: int | None,
    owned_to: int | None,
    fetch_size: int,
    max_fetch_size: int,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> Iterator[_Decoded]:
    owned_from = r.start if owned_from is None else owned_from
    owned_to = r.end if owned_to is None else owned_to
    offset = r.start if read_from is None else read_from
    size = fetch_size
    # The next fetch is asked for once a fetch is decoded, before its chunk is handed over:
    # the broker sends it while the caller works (Avro, Parquet), not while it waits.
    reads = _partition_reads(consumer, r)
    fetches: PipelinedFetches | LeaderFetches = reads.pipelined()
    try:
        while offset < owned_to:
            want = min(size, r.end - offset)
            try:
                data = fetches.get(offset, want)
            except OffsetOutOfRangeError:
                offset = resume_after_out_of_range(r, offset, reads, fail_on_data_loss, warn)
                continue
            if owned_from <= offset and offset + len(data) <= owned_to:
                # The whole fetch is this reader's (nearly every fetch): one walk decodes it.
                decoded, end = decode(data, offset, r)
                if end:
                    offset += end
                    size = fetch_size
                    if offset < owned_to:
                        fetches.ask(offset, min(size, r.end - offset))
                    yield decoded
                    continue
            view = memoryview(data)
            whole = whole_entries_end(view)
            if whole == 0:
                needed = first_entry_size(view)
                if needed is None or len(view) == 0:
                    if reads.wait_visible(r.end):  # a new leader catching up: read again
                        continue
                    raise RangeError(
                        f"{r.describe()}: the log ends at offset {offset}, before the range "
                        f"[{r.start}, {r.end}) ends"
                    )
                if needed > r.end - offset:
                    raise RangeError(
                        f"{r.describe()}: offset {r.end} (the range's end) is not a message "
                        f"boundary: the message at {offset} is {needed} bytes"
                    )
                if needed > max_fetch_size:
                    raise RangeError(
                        f"{r.describe()}: the message at offset {offset} is {needed} bytes, over "
                        f"the largest fetch size {max_fetch_size}"
                    )
                if needed <= size:  # all of it was asked for: the leader shows less for now
                    if reads.wait_visible(r.end):
                        continue
                    raise RangeError(
                        f"{r.describe()}: the log shows only {len(view)} bytes of the "
                        f"{needed}-byte message at offset {offset}, inside the range "
                        f"[{r.start}, {r.end})"
                    )
                size = needed
                continue
            size = fetch_size
            first = 0
            if offset < owned_from:  # walking to the first entry this reader owns
                first = entry_at_or_after(view, owned_from - offset, whole)
            last = whole
            if offset + whole > owned_to:
                last = entry_at_or_after(view, owned_to - offset, whole)
            at = offset
            offset += last if last < whole else whole
            if offset < owned_to:  # on its way while this one is decoded
                fetches.ask(offset, min(size, r.end - offset))
            if last > first:
                yield decode(view[first:last], at + first, r)[0]
    finally:
        fetches.close()  # an answer asked for and not read: the connection goes with it


def entries_end(
    consumer: SimpleConsumer | PartitionReader,
    r: PartitionRange,
    count: int,
    *,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    fail_on_data_loss: bool = True,
    warn: Callable[[str], None] = log.warning,
) -> int:
    """The offset where the first `count` entries of `r` end (`r.end` if it holds fewer): a
    message boundary. A compressed wrapper is one entry. Sizes only: no CRC, no decoding."""
    if count <= 0:
        return r.start
    seen = 0
    for ends in _read(
        consumer,
        r,
        _entry_ends,
        None,
        None,
        None,
        fetch_size,
        MAX_FETCH_SIZE,
        fail_on_data_loss,
        warn,
    ):
        if seen + len(ends) >= count:
            return ends[count - seen - 1]
        seen += len(ends)
    return r.end


def _entry_ends(data: Buffer, base: int, r: PartitionRange) -> tuple[list[int], int]:
    """Where each whole entry of `data` (a fetch from `base`) ends, and where they all end."""
    ends: list[int] = []
    unpack = _INT32.unpack_from
    pos, length = 0, len(data)
    while pos + 4 <= length:
        (size,) = unpack(data, pos)
        if size < MIN_MESSAGE_SIZE:  # a damaged size: walking on would go nowhere
            raise RangeError(
                f"{r.describe()}: the entry at offset {base + pos} has size {size}, less than "
                f"the smallest message ({MIN_MESSAGE_SIZE} bytes)"
            )
        if pos + 4 + size > length:
            break  # cut off by the fetch's end: the next fetch starts with it
        pos += 4 + size
        ends.append(base + pos)
    return ends, pos


def _columns(data: Buffer, base: int, r: PartitionRange) -> MessageColumns:
    try:
        return message_columns(data, base)
    except LogbrokerError as exc:
        raise type(exc)(f"{r.describe()}: {exc}") from exc


def read_chunk(data: Buffer, base: int, r: PartitionRange) -> tuple[Chunk, int]:
    """The messages of the whole entries of `data` (a fetch from `base`), and where they end."""
    run = plain_run(data)
    if ends_with_partial_entry(run):  # plain entries only, every CRC right
        n = len(run.entries)
        return Chunk(run.entries + base, np.zeros(n, np.int32), run=run), run.stop
    columns = _columns(data, base, r)  # anything else, a bad CRC included: named there
    return Chunk(columns.offsets, columns.indexes, payloads=columns.payloads), columns.end


class NameKeys(Protocol):
    """Where a digest hands the events' names on its way (the load's event_names.NameKeys)."""

    def add(self, run: PlainRun) -> None:
        """A fetch of plain entries, read; any other fetch (a 0.7 one with compressed sets or
        magic-0 entries, a 0.8-format one): its messages' payloads, compressed ones
        decompressed, as entry_scan.payload_run frames them."""


class DigestInput(NamedTuple):
    """The bytes rows_sha256 hashes for some messages, and how many messages they are."""

    data: bytes
    messages: int


def digest_input(
    data: Buffer, base: int, r: PartitionRange, names: NameKeys | None = None
) -> tuple[DigestInput, int]:
    """rows_sha256's bytes for the whole entries of `data` (and where they end); `names`, if
    given, is handed the fetch's payloads: a plain fetch as its run, any other as the
    payloads hashed (compressed sets' inner messages as message_columns, the Spark reader's
    unwrapping, gives them), framed by entry_scan.payload_run.

    Plain entries are walked without a Message or a payload list (about twice as fast as
    decoding them into columns first); any other entry (compressed, magic 0, damaged) goes
    through message_columns. CRCs are not checked here: what the digest hashes is what the
    brokers hold, and the reader that loads the same bytes checks every CRC. A fetch of
    plain entries only (nearly every fetch) is walked and written by compiled code
    (entry_scan.py), without a Python object per message.
    """
    run = plain_run(data, check_crc=False)
    if ends_with_partial_entry(run):
        if names is not None:
            names.add(run)
        return DigestInput(run.digest_bytes(base), len(run.entries)), run.stop
    if not isinstance(data, bytes):
        data = bytes(data)  # a fetch's memoryview: slices of bytes are ~2x cheaper
    length = len(data)
    unpack_entry = _ENTRY_HEAD.unpack_from
    pack = _DIGEST_HEADER.pack
    parts: list[bytes] = []  # header, payload, header, payload, ...
    add = parts.append
    pos = 0
    while pos + 4 <= length:
        while pos + 10 <= length:
            size, magic, attributes = unpack_entry(data, pos)
            end = pos + 4 + size
            if magic != 1 or attributes or size < 6 or end > length:
                break
            add(pack(base + pos, 0, size - 6))
            add(data[pos + 10 : end])
            pos = end
        if pos + 4 > length:
            break
        (size,) = _INT32.unpack_from(data, pos)
        end = pos + 4 + size
        if size >= MIN_MESSAGE_SIZE and end > length:
            break  # a partial trailing entry
        columns = _columns(data[pos : max(end, pos + 4)], base + pos, r)
        for offset, index, payload in zip(
            columns.offsets, columns.indexes, columns.payloads, strict=True
        ):
            add(pack(offset, index, len(payload)))
            add(payload)
        pos = end
    if names is not None:  # every payload, compressed sets' as message_columns unwrapped them
        names.add(payload_run(parts[1::2]))
    return DigestInput(b"".join(parts), len(parts) // 2), pos  # two parts per message


class RangeDigest(NamedTuple):
    rows_sha256: str
    messages: dict[tuple[int, int], int]  # (broker_id, partition) -> messages in its range


def digest_ranges(
    consumer_for: Callable[[PartitionRange], SimpleConsumer | PartitionReader | PartitionReader08],
    ranges: Iterable[PartitionRange],
    *,
    fetch_size: int = DEFAULT_FETCH_SIZE,
    names: NameKeys | None = None,
) -> RangeDigest:
    """rows_sha256 of `ranges` (any order given; hashed in contract order) and counts; the
    events' names into `names` on the way, if given (event_names.py; compressed sets
    included, as the ranges' readers decompress them). `consumer_for(range)`
    reads a range: its broker's consumer, or a replicated partition's reader
    (consumers.ClusterReads)."""
    decode = digest_input if names is None else functools.partial(digest_input, names=names)
    sha = hashlib.sha256()
    counts: dict[tuple[int, int], int] = {}
    for r in sorted(ranges, key=lambda x: (x.broker_id, x.partition)):
        messages = 0
        if r.end > r.start and r.logical:
            for run in _read08(_reader08(consumer_for(r), r), r, None, None, True, log.warning):
                if names is not None:  # the payloads as the reader decompressed them
                    names.add(run.payload_run())
                sha.update(run.digest_bytes())
                messages += len(run)
        elif r.end > r.start:
            consumer = consumer_for(r)
            assert not isinstance(consumer, PartitionReader08), f"{r.describe()}: byte offsets"
            for part in _read(
                consumer,
                r,
                decode,
                None,
                None,
                None,
                fetch_size,
                MAX_FETCH_SIZE,
                True,
                log.warning,
            ):
                sha.update(part.data)
                messages += part.messages
        counts[(r.broker_id, r.partition)] = messages
    return RangeDigest(sha.hexdigest(), counts)


# -- logical ranges (0.8-format topics) --------------------------------------------------------


def _reader08(consumer: object, r: PartitionRange) -> PartitionReader08:
    if not isinstance(consumer, PartitionReader08):
        raise ValueError(
            f"{r.describe()} holds logical offsets (a 0.8-format topic): it is read with "
            f"PartitionReader08, not {type(consumer).__name__}"
        )
    reader = consumer
    if (reader.topic, reader.partition) != (r.topic, r.partition):
        raise ValueError(f"a reader of {reader.topic}-{reader.partition} for {r.describe()}")
    return reader


def _read08(
    reader: PartitionReader08,
    r: PartitionRange,
    owned_from: int | None,
    owned_to: int | None,
    fail_on_data_loss: bool,
    warn: Callable[[str], None],
) -> Iterator[KeyedRun]:
    """The messages numbered `[owned_from, owned_to)` of a logical range, a fetch at a time,
    as columns over the fetch's bytes (keyed_scan.py), from the partition's leader (followed
    if it moves). A new leader that shows less than the
    range for a moment (it learns the high watermark from its followers) is waited for, up to
    the reader's leader timeout."""
    offset = r.start if owned_from is None else owned_from
    stop = r.end if owned_to is None else owned_to
    deadline: float | None = None
    while offset < stop:
        try:
            for run in reader.iter_decoded(offset, keyed_run):
                deadline = None
                keep = int(np.searchsorted(run.offsets, stop))  # ascending: logical offsets
                if keep:
                    yield run.head(keep, min(run.next_offset, stop))
                offset = run.next_offset
                if offset >= stop:
                    return
        except OffsetOutOfRangeError:
            offset = resume_after_out_of_range(r, offset, reader, fail_on_data_loss, warn)
            continue
        # the batches ended at the high watermark, below the range's end
        now = reader.clock()
        if deadline is None:
            deadline = now + reader.leader_timeout_s
        elif now >= deadline:
            raise RangeError(
                f"{r.describe()}: the log ends at offset {offset}, before the range "
                f"[{r.start}, {r.end}) ends"
            )
        reader.sleep(reader.retry_backoff_s)


def _chunk08(run: KeyedRun) -> Chunk:
    return Chunk(run.offsets, np.zeros(len(run), np.int32), run=run)


def digest_input08(batch: KeyedBatch) -> bytes:
    """rows_sha256's bytes for a logical range's messages (the layout at the top), from
    lists: the reference that KeyedRun.digest_bytes, which the digest runs, is tested
    against (tests/spark/test_keyed_kernels.py)."""
    head, length = _DIGEST_HEAD08.pack, _INT32.pack
    parts: list[bytes] = []
    add = parts.append
    for offset, key, payload in zip(batch.offsets, batch.keys, batch.payloads, strict=True):
        add(head(offset, 0, -1 if key is None else len(key)))
        if key is not None:
            add(key)
        add(length(len(payload)))
        add(payload)
    return b"".join(parts)
