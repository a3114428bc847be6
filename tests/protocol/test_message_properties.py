"""Property tests for message sets: round trips, concatenation, and damage.

What "validation never accepts a damaged set" means here, precisely. Let S be a valid set
and D a damaged copy of it (one byte flipped, cut short, or garbage inserted), and let
`o` be the start of the first entry of S that the damage touches. Then `validate(D)`:

* never raises; it returns `error` None or an InvalidMessageError;
* keeps every untouched entry in front of the damage: `valid_bytes >= o`;
* is sound: `D[:valid_bytes]` consists of whole entries that each pass an independent
  check (size, magic, CRC, codec, and for a compressed entry a wholly valid, non-empty
  inner set), and the counts it reports are those of that check;
* stops only where it must: with `error` None, what is left after `valid_bytes` is a
  partial entry (under 4 bytes, or a size of at least 5 that runs past the end);
* agrees with `iter_messages`: iteration yields exactly the messages of the valid prefix
  and then raises (of the same class, naming the same offset) iff `error` is set.

And, exactly, for the damage whose outcome the format determines:

* a flipped byte of a CRC field or of a payload (the bytes the CRC covers: for a compressed
  set, the compressed bytes) is never accepted: `valid_bytes == o`, a CRC mismatch naming
  `o`. CRC-32 detects every error burst of up to 32 bits, so this holds for every flip;
* a flipped byte inside a compressed set's inner set, in an inner CRC or payload, is
  caught at the wrapper;
* a magic flipped to anything but 0/1, a size flipped under 5, or the codec bits flipped
  to 3 are errors at `o`; a size flipped past the end is a quiet partial tail at `o`;
* flipping an unused attribute bit is accepted (0.7's CRC does not cover the attributes);
* cutting a set anywhere gives its whole entries and a quiet partial tail.

What is left — a size flip that re-frames the entry, a magic flipped between 0 and 1,
garbage inserted — is rejected only because the CRC of the re-framed bytes (almost surely)
no longer matches, and a codec flipped between 0/1/2 only because the payload (almost
surely) does not decode as the new codec. For those, soundness and the kept prefix are what
holds for every input; the exhaustive flip test on a fixed set checks that each such flip
is in fact rejected at its entry — except one that the format cannot see: a compressed
wrapper whose codec bits are flipped to 0 is a valid plain message (the attributes are not
under the CRC, in 0.7 as here).

Every property holds for both walks, the pure-Python reference and its compiled twin
(walk_paths.py), and the last test requires the two to give the same answers, byte for byte.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbroker.protocol import compression
from logbroker.protocol.errors import (
    CorruptMessageError,
    InvalidMessageError,
    UnknownCodecError,
    UnknownMagicError,
)
from logbroker.protocol.message import Message, encode_message
from logbroker.protocol.message_set import (
    PRODUCE_MAX_NESTING,
    InflateBudget,
    Validation,
    build_message_set,
    iter_entries,
)

from .walk_paths import COMPILED, PATHS, PYTHON, Walks

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

payload_lists = st.lists(st.binary(max_size=40), max_size=6)


@st.composite
def set_specs(draw: st.DrawFn) -> tuple[list[bytes], int, int]:
    """(payloads, codec, magic) for build_message_set; magic 0 only without compression."""
    codec = draw(st.sampled_from([compression.NONE, compression.GZIP, compression.SNAPPY]))
    magic = draw(st.sampled_from([0, 1])) if codec == compression.NONE else 1
    return draw(payload_lists), codec, magic


@st.composite
def valid_sets(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A non-empty valid buffer made of a few sets of mixed codecs, and its payloads."""
    specs = draw(st.lists(set_specs(), min_size=1, max_size=4))
    if not any(payloads for payloads, _, _ in specs):
        specs.append(([draw(st.binary(max_size=8))], compression.NONE, 1))
    buffer = b"".join(build_message_set(p, c, m) for p, c, m in specs)
    return buffer, [payload for p, _, _ in specs for payload in p]


# ---------------------------------------------------------------------------------------
# An independent reference check of a buffer that should be whole, valid entries
# ---------------------------------------------------------------------------------------


def _reference_parse(buffer: bytes) -> tuple[int, list[bytes]]:
    """(top-level entries, payloads through compression) of a wholly valid buffer.

    Asserts each rule of §4 on its own; the codecs themselves are compression's (they are
    checked byte by byte in test_message_bytes.py).
    """
    pos = entries = 0
    payloads: list[bytes] = []
    while pos < len(buffer):
        assert pos + 4 <= len(buffer), f"cut-off size field at {pos}"
        (size,) = struct.unpack_from(">i", buffer, pos)
        assert size >= 5, f"size {size} at {pos}"
        assert pos + 4 + size <= len(buffer), f"entry at {pos} runs past the end"
        message = buffer[pos + 4 : pos + 4 + size]
        if message[0] == 0:
            attributes, crc, payload = 0, int.from_bytes(message[1:5], "big"), message[5:]
        else:
            assert message[0] == 1, f"magic {message[0]} at {pos}"
            assert size >= 6, f"magic 1 entry of {size} bytes at {pos}"
            attributes, crc, payload = message[1], int.from_bytes(message[2:6], "big"), message[6:]
        assert zlib.crc32(payload) == crc, f"CRC at {pos}"
        codec = attributes & 0x03
        assert codec != 3, f"codec 3 at {pos}"
        if codec:
            inner_entries, inner_payloads = _reference_parse(compression.decompress(codec, payload))
            assert inner_entries > 0, f"empty compressed set at {pos}"
            payloads.extend(inner_payloads)
        else:
            payloads.append(payload)
        entries += 1
        pos += 4 + size
    return entries, payloads


def _is_partial_entry(tail: bytes) -> bool:
    if len(tail) < 4:
        return True
    (size,) = struct.unpack_from(">i", tail, 0)
    return size >= 5 and 4 + size > len(tail)


def _check_sound_and_consistent(walks: Walks, buffer: bytes, base: int = 0) -> Validation:
    """validate never raises, is sound, stops only where it must, and agrees with iteration."""
    check = walks.validate(buffer, base)
    assert check.length == len(buffer)
    assert 0 <= check.valid_bytes <= len(buffer)
    assert check.error is None or isinstance(check.error, InvalidMessageError)
    entries, payloads = _reference_parse(buffer[: check.valid_bytes])
    assert (check.entries, check.messages) == (entries, len(payloads))
    if check.error is None:
        assert _is_partial_entry(buffer[check.valid_bytes :])
        assert check.partial_tail == (check.valid_bytes < len(buffer))
    else:
        assert not check.partial_tail
        assert f"offset {base + check.valid_bytes}" in str(check.error)

    yielded = []
    raised: InvalidMessageError | None = None
    try:
        for message in walks.iter_messages(buffer, base):
            yielded.append(message)
    except InvalidMessageError as exc:
        raised = exc
    assert [m.payload for m in yielded] == payloads
    if yielded:
        assert yielded[-1].next_offset == base + check.valid_bytes
    assert (raised is None) == (check.error is None)
    if raised is not None:
        assert type(raised) is type(check.error)
        assert f"offset {base + check.valid_bytes}" in str(raised)
    _check_columns_agree(walks, buffer, base, yielded, raised, check)
    _check_stored_set_end_agrees(walks, buffer, base)
    return check


def _check_stored_set_end_agrees(walks: Walks, buffer: bytes, base: int) -> None:
    """stored_set_end (the mirror's copy) keeps what validate keeps without inflating: it
    checks sizes, magic and CRCs, not codecs, so it may go further only past a codec 3."""
    shallow = walks.validate(buffer, base, inflate=False)
    try:
        end = walks.stored_set_end(buffer, base)
    except InvalidMessageError as exc:
        assert shallow.error is not None
        assert isinstance(shallow.error, UnknownCodecError) or str(exc) in str(shallow.error)
        return
    if shallow.error is None:
        assert end == (shallow.valid_bytes, shallow.entries)
    else:
        assert isinstance(shallow.error, UnknownCodecError)
        assert end[0] > shallow.valid_bytes


def _check_columns_agree(
    walks: Walks,
    buffer: bytes,
    base: int,
    yielded: list[Message],
    raised: InvalidMessageError | None,
    check: Validation,
) -> None:
    """message_columns (the Spark reader's walk) gives iter_messages' messages, or its error."""
    try:
        columns = walks.columns(buffer, base)
    except InvalidMessageError as exc:
        assert raised is not None and type(exc) is type(raised)
        assert f"offset {base + check.valid_bytes}" in str(exc)
        return
    assert raised is None
    indexes = [
        0 if i == 0 or yielded[i - 1].offset != m.offset else None for i, m in enumerate(yielded)
    ]
    for i in range(len(indexes)):  # a wrapper's messages count 0, 1, 2, ...
        if indexes[i] is None:
            indexes[i] = indexes[i - 1] + 1  # type: ignore[operator]
    assert columns.offsets == [m.offset for m in yielded]
    assert columns.indexes == indexes
    assert columns.payloads == [m.payload for m in yielded]
    assert columns.end == check.valid_bytes


def _entry_spans(buffer: bytes) -> list[tuple[int, int, int]]:
    """(offset, end, magic) of each top-level entry of a valid buffer."""
    return [(o, o + 4 + len(m), m[0]) for o, m in iter_entries(buffer)]


def _entry_at(spans: list[tuple[int, int, int]], position: int) -> tuple[int, int, int]:
    return next(span for span in spans if span[0] <= position < span[1])


# ---------------------------------------------------------------------------------------
# Round trips and concatenation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(valid_sets(), st.integers(0, 64), st.data())
def test_sizes_only_walks_find_the_entry_boundaries(
    walks: Walks, valid: tuple[bytes, list[bytes]], cut: int, data: st.DataObject
) -> None:
    """whole_entries stops before a cut-off entry; entry_at_or_after lands on the first
    entry boundary at or after any position: where a reader of part of a range starts."""
    buffer, _ = valid
    spans = _entry_spans(buffer)
    truncated = buffer[: max(0, len(buffer) - cut)]
    ends = [end for _, end, _ in spans if end <= len(truncated)]
    whole = max([0, *ends])
    assert walks.whole_entries(truncated) == (whole, len(ends))
    starts = [start for start, _, _ in spans]
    position = data.draw(st.integers(-4, whole + 4))
    expected = min([s for s in starts if s >= position and s < whole] + [whole])
    assert walks.entry_at_or_after(truncated, position, whole) == expected


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(set_specs(), st.integers(0, 2**40))
def test_round_trip(walks: Walks, spec: tuple[list[bytes], int, int], base: int) -> None:
    payloads, codec, magic = spec
    buffer = walks.build_message_set(payloads, codec, magic)
    messages = list(walks.iter_messages(buffer, base))
    assert [m.payload for m in messages] == payloads
    if codec == compression.NONE:
        assert all((m.magic, m.attributes) == (magic, 0) for m in messages)
        offset = base
        for m, payload in zip(messages, payloads, strict=True):
            assert m.offset == offset
            assert m.next_offset == offset + 4 + (5 if magic == 0 else 6) + len(payload)
            offset = m.next_offset
        assert offset == base + len(buffer)
    else:
        # Inner messages are magic 1, attributes 0, and all resume at the wrapper but the last.
        assert all((m.magic, m.attributes) == (1, 0) for m in messages)
        assert all(m.offset == base for m in messages)
        assert [m.next_offset for m in messages[:-1]] == [base] * (len(messages) - 1)
        if messages:
            assert messages[-1].next_offset == base + len(buffer)
    check = walks.validate(buffer, base)
    top_level = len(payloads) if codec == compression.NONE else int(bool(payloads))
    wrappers = int(codec != compression.NONE and bool(payloads))
    assert check == Validation(
        len(buffer), top_level, len(payloads), check.largest_payload, None, len(buffer), wrappers
    )
    assert not check.partial_tail


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(st.lists(set_specs(), max_size=5), st.integers(0, 2**40))
def test_concatenation_validates_as_the_sum(
    walks: Walks, specs: list[tuple[list[bytes], int, int]], base: int
) -> None:
    parts = [walks.build_message_set(p, c, m) for p, c, m in specs]
    buffer = b"".join(parts)
    checks = [walks.validate(part) for part in parts]
    whole = walks.validate(buffer, base)
    assert whole.error is None
    assert whole.valid_bytes == len(buffer) == sum(c.valid_bytes for c in checks)
    assert whole.entries == sum(c.entries for c in checks)
    assert whole.messages == sum(c.messages for c in checks) == sum(len(p) for p, _, _ in specs)
    assert whole.largest_payload == max((c.largest_payload for c in checks), default=0)
    # Each part's messages come back in order, shifted to where the part starts.
    expected, start = [], base
    for part in parts:
        expected += list(walks.iter_messages(part, start))
        start += len(part)
    assert list(walks.iter_messages(buffer, base)) == expected


# ---------------------------------------------------------------------------------------
# Damage: truncation, flipped bytes, inserted garbage
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(valid_sets(), st.data())
def test_truncation_gives_the_whole_entries_and_a_quiet_tail(
    walks: Walks, original: tuple[bytes, list[bytes]], data: st.DataObject
) -> None:
    buffer, _ = original
    cut = data.draw(st.integers(0, len(buffer)), label="cut")
    spans = _entry_spans(buffer)
    whole = [span for span in spans if span[1] <= cut]
    kept = whole[-1][1] if whole else 0
    check = _check_sound_and_consistent(walks, buffer[:cut])
    assert check.error is None
    assert check.valid_bytes == kept
    assert check.entries == len(whole)
    assert check.partial_tail == (kept < cut)
    assert check.messages == walks.validate(buffer[:kept]).messages


def _flip_outcome(
    walks: Walks, buffer: bytes, position: int, mask: int, base: int
) -> tuple[Validation, str]:
    """Flip one byte and check the properties; return the check and the field flipped."""
    spans = _entry_spans(buffer)
    start, _, magic = _entry_at(spans, position)
    damaged = bytearray(buffer)
    damaged[position] ^= mask
    damaged_bytes = bytes(damaged)
    check = _check_sound_and_consistent(walks, damaged_bytes, base)
    assert check.valid_bytes >= start  # the entries in front of the damage are kept
    assert check.entries >= sum(1 for span in spans if span[1] <= start)
    rel = position - start
    header = 5 if magic == 0 else 6
    if rel < 4:
        (size,) = struct.unpack_from(">i", damaged_bytes, start)
        if size < 5:
            assert isinstance(check.error, CorruptMessageError)
            assert check.valid_bytes == start
        elif start + 4 + size > len(damaged_bytes):
            assert (check.error, check.valid_bytes) == (None, start)
            assert check.partial_tail
        return check, "size"
    if rel == 4:
        if damaged[position] not in (0, 1):
            assert isinstance(check.error, UnknownMagicError)
            assert check.valid_bytes == start
        return check, "magic"
    if magic == 1 and rel == 5:
        new_codec = damaged[position] & 3
        if damaged[position] & ~3:
            # Bits no codec uses: not under 0.7's CRC (the payload's), but no writer sets
            # them, so a flip there is caught as damage, never stored or copied as valid.
            assert isinstance(check.error, CorruptMessageError)
            assert "bits other than the codec's" in str(check.error)
            assert check.valid_bytes == start
        elif new_codec == 3:
            assert isinstance(check.error, UnknownCodecError)
            assert check.valid_bytes == start
        return check, "attributes"
    # A CRC byte or a payload byte: never accepted, whatever the entry.
    assert isinstance(check.error, CorruptMessageError)
    assert "CRC mismatch" in str(check.error)
    assert check.valid_bytes == start
    return check, "crc" if rel < 4 + header else "payload"


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(valid_sets(), st.data(), st.integers(1, 255), st.integers(0, 2**40))
def test_a_flipped_byte_is_never_accepted_silently(
    walks: Walks, original: tuple[bytes, list[bytes]], data: st.DataObject, mask: int, base: int
) -> None:
    buffer, _ = original
    position = data.draw(st.integers(0, len(buffer) - 1), label="position")
    _flip_outcome(walks, buffer, position, mask, base)


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(valid_sets(), st.data(), st.integers(1, 255))
def test_a_flipped_payload_byte_is_a_crc_error(
    walks: Walks, original: tuple[bytes, list[bytes]], data: st.DataObject, mask: int
) -> None:
    # Aim at the CRC-covered bytes (and the CRC) only, so that every example exercises them.
    buffer, _ = original
    start, end, magic = data.draw(st.sampled_from(_entry_spans(buffer)), label="entry")
    first = start + 4 + (1 if magic == 0 else 2)  # the CRC field's first byte
    position = data.draw(st.integers(first, end - 1), label="position")
    check, field = _flip_outcome(walks, buffer, position, mask, 0)
    assert field in ("crc", "payload")
    assert check.valid_bytes == start
    assert isinstance(check.error, CorruptMessageError)


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(
    st.lists(st.binary(max_size=30), min_size=1, max_size=5),
    st.sampled_from([compression.GZIP, compression.SNAPPY]),
    st.data(),
    st.integers(1, 255),
)
def test_damage_inside_a_compressed_set_is_caught_at_the_wrapper(
    walks: Walks, payloads: list[bytes], codec: int, data: st.DataObject, mask: int
) -> None:
    inner = bytearray(build_message_set(payloads))
    start, end, _ = data.draw(st.sampled_from(_entry_spans(bytes(inner))), label="inner entry")
    position = data.draw(st.integers(start + 6, end - 1), label="inner position")  # CRC/payload
    inner[position] ^= mask
    compressed = compression.compress(codec, bytes(inner))
    wrapper = struct.pack(">iBBI", 6 + len(compressed), 1, codec, zlib.crc32(compressed))
    buffer = encode_message(b"in front") + wrapper + compressed
    check = _check_sound_and_consistent(walks, buffer, 1000)
    assert isinstance(check.error, CorruptMessageError)
    assert "CRC mismatch" in str(check.error)
    assert (check.valid_bytes, check.entries, check.messages) == (18, 1, 1)


@pytest.mark.parametrize("walks", PATHS)
@SETTINGS
@given(valid_sets(), st.data(), st.binary(min_size=1, max_size=16), st.integers(0, 2**40))
def test_inserted_garbage_keeps_the_prefix_and_stays_sound(
    walks: Walks,
    original: tuple[bytes, list[bytes]],
    data: st.DataObject,
    garbage: bytes,
    base: int,
) -> None:
    buffer, _ = original
    position = data.draw(st.integers(0, len(buffer)), label="position")
    spans = _entry_spans(buffer)
    start = _entry_at(spans, position)[0] if position < len(buffer) else len(buffer)
    damaged = buffer[:position] + garbage + buffer[position:]
    check = _check_sound_and_consistent(walks, damaged, base)
    assert check.valid_bytes >= start


# ---------------------------------------------------------------------------------------
# Arbitrary bytes: validate returns, iter_messages raises only logbroker errors
# ---------------------------------------------------------------------------------------


def _wrapped(codec: int, payload: bytes) -> bytes:
    return struct.pack(">iBBI", 6 + len(payload), 1, codec, zlib.crc32(payload)) + payload


@st.composite
def chunks(draw: st.DrawFn) -> bytes:
    """Pieces that look like entries to a parser: some valid, some nearly, some garbage."""
    kind = draw(st.integers(0, 7))
    blob = draw(st.binary(max_size=48))
    if kind == 0:
        return blob  # plain garbage
    if kind == 1:
        payloads, codec, magic = draw(set_specs())
        return build_message_set(payloads, codec, magic)
    if kind == 2:  # a right CRC over any payload, with any magic and attributes
        magic, attributes = draw(st.integers(0, 255)), draw(st.integers(0, 255))
        return struct.pack(">iBBI", 6 + len(blob), magic, attributes, zlib.crc32(blob)) + blob
    if kind == 3:  # any size field in front of anything
        return struct.pack(">i", draw(st.integers(-(2**31), 2**31 - 1))) + blob
    if kind == 7:  # a small size and a known magic: entries around the minimum size
        size, magic = draw(st.integers(0, 12)), draw(st.sampled_from([0, 1]))
        return struct.pack(">iB", size, magic) + blob[: draw(st.integers(0, 12))]
    if kind == 4:  # a wrapper (right CRC) around any bytes compressed
        codec = draw(st.sampled_from([1, 2]))
        return _wrapped(codec, compression.compress(codec, blob))
    if kind == 5:  # a wrapper around raw snappy or a gzip member of any bytes
        return _wrapped(
            draw(st.sampled_from([1, 2])),
            draw(st.sampled_from([gzip.compress(blob, mtime=0), _raw_snappy(blob)])),
        )
    return _wrapped(draw(st.integers(0, 3)), blob)  # a wrapper around uncompressed bytes


def _raw_snappy(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


@pytest.mark.parametrize("walks", PATHS)
@settings(SETTINGS, max_examples=500)
@given(st.binary(max_size=300), st.integers(0, 2**40))
def test_validate_and_iteration_on_arbitrary_bytes(walks: Walks, buffer: bytes, base: int) -> None:
    _check_sound_and_consistent(walks, buffer, base)


@pytest.mark.parametrize("walks", PATHS)
@settings(SETTINGS, max_examples=500)
@given(st.lists(chunks(), min_size=1, max_size=5), st.integers(0, 2**40))
def test_validate_and_iteration_on_entry_like_bytes(
    walks: Walks, pieces: list[bytes], base: int
) -> None:
    _check_sound_and_consistent(walks, b"".join(pieces), base)


# ---------------------------------------------------------------------------------------
# Every single-byte flip of one fixed mixed set
# ---------------------------------------------------------------------------------------


FIXED = b"".join(
    [
        build_message_set([b"a"], magic=0),
        build_message_set([b"bc", b""]),
        build_message_set([b"x", b"yz"], codec=compression.GZIP),
        build_message_set([b"hello", b"world"], codec=compression.SNAPPY),
        build_message_set([b"def"], magic=0),
    ]
)


@pytest.mark.parametrize("walks", PATHS)
def test_every_flip_of_a_fixed_set(walks: Walks) -> None:
    fields: dict[str, int] = {}
    for position in range(len(FIXED)):
        for mask in (0x01, 0x02, 0x04, 0x10, 0x80, 0xFF):
            check, field = _flip_outcome(walks, FIXED, position, mask, 0)
            fields[field] = fields.get(field, 0) + 1
            start, _, _ = _entry_at(_entry_spans(FIXED), position)
            damaged = bytearray(FIXED)
            damaged[position] ^= mask
            if field != "attributes":
                # Re-framing flips too: on this set every one of them is caught at the entry.
                assert check.valid_bytes == start, (position, mask, check)
                assert check.error is not None or check.partial_tail
                continue
            old_codec, new_codec = FIXED[position] & 3, damaged[position] & 3
            if damaged[position] & ~3:  # a bit no codec uses: damage, caught at the entry
                assert check.valid_bytes == start and check.error is not None, (position, mask)
                continue
            if old_codec != compression.NONE and new_codec == compression.NONE:
                # The one gap of the format: the codec bits are not under the CRC, so a
                # wrapper read as codec none is a valid message whose payload is the
                # compressed bytes.
                assert check.error is None
                assert [m.payload for m in walks.iter_messages(bytes(damaged))][-1] == b"def"
                continue
            if old_codec != new_codec:
                assert check.valid_bytes == start, (position, mask, check)
                assert check.error is not None
    assert set(fields) == {"size", "magic", "attributes", "crc", "payload"}


# ---------------------------------------------------------------------------------------
# The compiled walks give the reference's answers, byte for byte
# ---------------------------------------------------------------------------------------


@st.composite
def damaged_sets(draw: st.DrawFn) -> bytes:
    """A valid set cut short, with a byte flipped or garbage inserted; or entry-like bytes."""
    kind = draw(st.sampled_from(["cut", "flip", "insert", "chunks", "bytes"]))
    if kind == "chunks":
        return b"".join(draw(st.lists(chunks(), min_size=1, max_size=5)))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    buffer, _ = draw(valid_sets())
    position = draw(st.integers(0, len(buffer) - 1))
    if kind == "cut":
        return buffer[:position]
    if kind == "insert":
        return buffer[:position] + draw(st.binary(min_size=1, max_size=16)) + buffer[position:]
    damaged = bytearray(buffer)
    damaged[position] ^= draw(st.integers(1, 255))
    return bytes(damaged)


def _text(error: BaseException | None) -> tuple[str, str] | None:
    return None if error is None else (type(error).__name__, str(error))


def _answers(walks: Walks, buffer: bytes | bytearray | memoryview, base: int) -> list[object]:
    """Everything a walk says about `buffer`, errors as (class, message)."""
    said: list[object] = []
    for kwargs in (
        {},
        {"inflate": False},
        {"budget": InflateBudget(1 << 20, 1 << 20, PRODUCE_MAX_NESTING)},
        {"budget": InflateBudget(64, 1 << 20, 4)},  # a set inflating past 64 bytes: refused
    ):
        check = walks.validate(buffer, base, **kwargs)
        said.append((*check[:4], _text(check.error), *check[5:]))
    try:
        said.append(walks.columns(buffer, base))
    except InvalidMessageError as exc:
        said.append(_text(exc))
    messages: list[Message] = []
    try:
        messages.extend(walks.iter_messages(buffer, base))
    except InvalidMessageError as exc:
        said.append(_text(exc))  # after the messages before the damage, as the reference
    said.append(messages)
    try:
        said.append(walks.stored_set_end(buffer, base))
    except InvalidMessageError as exc:
        said.append(_text(exc))
    whole, _ = walks.whole_entries(buffer)
    said.append(walks.whole_entries(buffer))
    for position in (-1, 0, 1, 9, base % (len(buffer) + 1), whole // 2, whole, len(buffer) + 1):
        said.append(walks.entry_at_or_after(buffer, position, whole))
        try:  # an end past the whole entries: refused, not walked into
            said.append(walks.entry_at_or_after(buffer, position, len(buffer) + 1))
        except ValueError as exc:
            said.append(_text(exc))
    return said


@pytest.mark.skipif(COMPILED is None, reason="the _native extension is not built")
@settings(SETTINGS, max_examples=400)
@given(damaged_sets(), st.integers(0, 2**40), st.sampled_from([bytes, bytearray, memoryview]))
def test_both_walks_agree_on_generated_and_damaged_bytes(
    buffer: bytes, base: int, kind: type[bytes | bytearray | memoryview]
) -> None:
    assert COMPILED is not None
    assert _answers(COMPILED, kind(buffer), base) == _answers(PYTHON, kind(buffer), base)


def _built(walks: Walks, payloads: list[bytes], codec: int, magic: int) -> object:
    try:
        return walks.build_message_set(payloads, codec, magic)
    except (InvalidMessageError, TypeError) as exc:
        return _text(exc)


@pytest.mark.skipif(COMPILED is None, reason="the _native extension is not built")
@SETTINGS
@given(
    st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([bytes, bytearray, memoryview]))),
    st.integers(0, 3),
    st.integers(0, 2),
)
def test_both_builders_agree(
    payloads: list[tuple[bytes, type[bytes | bytearray | memoryview]]], codec: int, magic: int
) -> None:
    assert COMPILED is not None
    typed = [kind(payload) for payload, kind in payloads]
    built = _built(COMPILED, typed, codec, magic)
    assert built == _built(PYTHON, typed, codec, magic)
    assert _built(COMPILED, iter(typed), codec, magic) == built  # any iterable, consumed once
