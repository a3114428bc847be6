"""Spark splits: from options and discovered partitions to offset ranges, and from ranges to
the splits Spark's tasks read.

One Spark input partition per broker partition; a range longer than `maxBytesPerPartition`
(or the largest ranges, until there are `minPartitions`) is cut into pieces of equal bytes.
The cuts are plain byte positions: each piece owns the messages that start inside it and is
read from the last known message boundary before its cut (a segment start, from OFFSETS, or
the range's start), walking entry sizes up to its first message (see ranges.py).

A 0.8-format topic's range (logical offsets, message numbers) says how many messages it holds
but not how many bytes: `maxBytesPerPartition` does not cut it. `minPartitions` does, by
message count (its share is its messages over the total of the ranges' sizes): each piece owns
a run of message numbers and is read from its first (any logical offset is a boundary).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from spark_apps.source.discovery import PartitionState
from spark_apps.source.options import EARLIEST, LATEST, OffsetSpec
from spark_apps.source.ranges import DataLossError, PartitionRange, RangeError, data_loss_message

log = logging.getLogger(__name__)


class SplitPlan(NamedTuple):
    """What one Spark task reads: messages of `range` starting in [owned_from, owned_to)."""

    range: PartitionRange
    host: str
    port: int
    read_from: int
    owned_from: int
    owned_to: int


def offset_for(spec: OffsetSpec, state: PartitionState, default: str) -> int:
    """The offset `spec` names for a partition (JSON entries missing: `default`)."""
    if isinstance(spec, str):
        return state.earliest if spec == "earliest" else state.latest
    value = spec.get(state.topic, {}).get(state.name)
    if value is None:
        return state.earliest if default == "earliest" else state.latest
    if value == EARLIEST:
        return state.earliest
    if value == LATEST:
        return state.latest
    return value


def plan_ranges(
    states: Sequence[PartitionState],
    start_of: Callable[[PartitionState], int],
    end_of: Callable[[PartitionState], int],
    *,
    fail_on_data_loss: bool,
    warn: Callable[[str], None] = log.warning,
) -> list[tuple[PartitionState, PartitionRange]]:
    """The range of each partition, checked against what the broker still has."""
    out = []
    for state in states:
        start, end = start_of(state), end_of(state)
        r = PartitionRange(state.topic, state.broker_id, state.partition, start, end, state.logical)
        if end > state.latest:
            raise RangeError(
                f"{r.describe()}: the ending offset {end} is past the end of the log "
                f"({state.latest})"
            )
        if start > end:
            raise RangeError(
                f"{r.describe()}: the starting offset {start} is after the ending offset {end}"
            )
        if start < state.earliest and end > start:
            message = data_loss_message(r, start, state.earliest)
            if fail_on_data_loss:
                raise DataLossError(message)
            warn(message + "; reading from the earliest offset (failOnDataLoss=false)")
            r = r._replace(start=min(state.earliest, end))
        out.append((state, r))
    return out


def plan_splits(
    ranges: Sequence[tuple[PartitionState, PartitionRange]],
    *,
    max_bytes: int,
    min_partitions: int | None,
    segment_starts: Callable[[PartitionState], list[int]],
) -> list[SplitPlan]:
    """Spark splits for `ranges` (empty ranges need none)."""
    live = [(s, r) for s, r in ranges if r.end > r.start]
    pieces = [1 if r.logical else max(1, math.ceil((r.end - r.start) / max_bytes)) for _, r in live]
    total_bytes = sum(r.end - r.start for _, r in live)
    if min_partitions and sum(pieces) < min_partitions and total_bytes:
        for i, (_, r) in enumerate(live):  # the Kafka source's rule: in proportion to size
            share = math.ceil((r.end - r.start) / total_bytes * min_partitions)
            pieces[i] = max(pieces[i], share)
    plans = []
    for (state, r), n in zip(live, pieces, strict=True):
        n = min(n, r.end - r.start)
        if n == 1:
            plans.append(SplitPlan(r, state.host, state.port, r.start, r.start, r.end))
            continue
        cuts = [r.start + (r.end - r.start) * k // n for k in range(n + 1)]
        if r.logical:  # message numbers: each piece reads from its first
            plans += [
                SplitPlan(r, state.host, state.port, lo, lo, hi)
                for lo, hi in itertools.pairwise(cuts)
            ]
            continue
        bounds = [b for b in segment_starts(state) if r.start <= b < r.end] + [r.start]
        for lo, hi in itertools.pairwise(cuts):
            read_from = max(b for b in bounds if b <= lo)
            plans.append(SplitPlan(r, state.host, state.port, read_from, lo, hi))
    return plans
