"""The partition rule and shallow iteration, on bytes alone."""

from __future__ import annotations

import pytest

from logbroker.client.brokers import BrokerPartition
from logbroker.mirror.events import AuditedEvents
from logbroker.mirror.metrics import MirrorMetrics
from logbroker.mirror.mirror_maker import mirror_filter
from logbroker.mirror.partition_map import target_partition
from logbroker.protocol import compression, native
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.message_set import (
    build_message_set,
    iter_stored_messages,
    stored_set_end_python,
)
from logbroker.serde.framing import prefix

# The mirror's check of a fetched set: the reference and its compiled twin (_native.pyx).
STORED_SET_ENDS = [
    pytest.param(stored_set_end_python, id="python"),
    pytest.param(
        getattr(native.COMPILED, "stored_set_end", None),
        id="compiled",
        marks=pytest.mark.skipif(native.COMPILED is None, reason="_native is not built"),
    ),
]


def test_same_partition_when_the_target_has_it_else_a_stable_choice():
    targets = [BrokerPartition(0, p) for p in range(4)]
    assert target_partition("0-3", targets) == BrokerPartition(0, 3)
    other = target_partition("7-2", targets)
    assert other in targets
    assert all(target_partition("7-2", targets) == other for _ in range(10))


def test_shallow_iteration_keeps_a_compressed_set_as_one_stored_message():
    plain = build_message_set([b"a", b"bb"])
    wrapped = build_message_set([b"c" * 100] * 50, compression.GZIP)
    data = plain + wrapped
    stored = list(iter_stored_messages(data, 1000))
    assert len(stored) == 3
    assert stored[2][0] == 1000 + len(plain) and stored[2][1] == 1000 + len(data)
    assert stored[2][2] == wrapped[4:]  # the wrapper's bytes as they are, not decompressed
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError, match=f"offset {1000 + len(plain)}"):
        list(iter_stored_messages(bytes(damaged), 1000))


def test_audit_is_always_mirrored_whatever_the_filter():
    assert mirror_filter("page-views", None).allows("_audit")
    assert not mirror_filter("page-views", None).allows("searches")
    assert mirror_filter(None, "_.*|tmp").allows("_audit")
    assert not mirror_filter(None, "_.*|tmp").allows("_other")
    assert mirror_filter(None, "tmp").allows("searches")
    with pytest.raises(ValueError):
        mirror_filter("a", "b")


@pytest.mark.parametrize("stored_set_end", STORED_SET_ENDS)
def test_a_stored_set_is_checked_whole_and_ends_before_a_partial_entry(stored_set_end):
    plain = build_message_set([b"a", b"bb"])
    wrapped = build_message_set([b"c" * 100] * 50, compression.SNAPPY)
    data = plain + wrapped
    assert stored_set_end(data, 7) == (len(data), 3)
    assert stored_set_end(data + wrapped[:30], 7) == (len(data), 3)  # a partial entry waits
    damaged = bytearray(data)
    damaged[len(plain) + 12] ^= 0x01  # inside the wrapper's payload
    with pytest.raises(
        CorruptMessageError, match=f"CRC mismatch in the entry at offset {7 + len(plain)}"
    ):
        stored_set_end(bytes(damaged), 7)


def event(timestamp_ms: int, body: bytes = b"body") -> bytes:
    zigzag, varint = timestamp_ms << 1, bytearray()
    while zigzag >= 0x80:
        varint.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    varint.append(zigzag)
    return prefix(3) + bytes(varint) + body


def test_the_mirror_counts_every_event_of_a_stored_set_plain_or_wrapped():
    plain = build_message_set([event(1_000), b"not an event", event(2_000)])
    wrapped = build_message_set([event(3_000 + i) for i in range(4)], compression.GZIP)
    truncated = build_message_set([event(1_795_000_000_000)[:7]])  # the varint is cut short
    counter = AuditedEvents(None, MirrorMetrics())
    (topic, timestamps), undecodable = counter.count("t", plain + wrapped + truncated)
    assert topic == "t"
    assert timestamps == [1_000, 2_000, 3_000, 3_001, 3_002, 3_003]
    assert undecodable == 2
    assert counter.count("_audit", plain) == (("_audit", []), 0)  # counts are not events
