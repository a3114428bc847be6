"""The partition rule and shallow iteration, on bytes alone."""

from __future__ import annotations

import pytest

from logbroker.client.brokers import BrokerPartition
from logbroker.mirror.mirror_maker import mirror_filter
from logbroker.mirror.partition_map import target_partition
from logbroker.protocol import compression
from logbroker.protocol.errors import CorruptMessageError
from logbroker.protocol.message_set import build_message_set, iter_stored_messages


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
