"""The load's deduplication on its own: which positions go, exactly (spark_apps.load.run).

The keys are first counted hashed (xxhash64 of producer_id, seq); only repeats are then
compared by producer_id and position. These rows pin what stays: the first of a key in
(broker_id, partition, offset, index) order, and nothing of a key the previous hour has; and,
with the event's fields (the `_audit` topic), which names are conflicts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from spark_apps.load.dedup import duplicates

COLUMNS = ["producer_id", "seq", "broker_id", "partition", "offset", "index"]


def drops(spark: Any, rows: list[tuple[Any, ...]], previous: list[tuple[str, int]] | None) -> set:
    good = spark.createDataFrame(rows, "producer_id string, seq long, broker_id int, "
                                 "partition int, offset long, index int")  # fmt: skip
    seen = None
    if previous is not None:
        seen = spark.createDataFrame(previous, "producer_id string, seq long")
    return {tuple(r) for r in duplicates(good, seen)[0]}


def test_the_first_position_of_a_key_stays_and_every_later_one_goes(spark: Any) -> None:
    rows = [
        ("p-1", 1, 0, 0, 500, 0),  # a re-send: later than the one below, goes
        ("p-1", 1, 0, 0, 100, 0),  # the first in position order: stays
        ("p-1", 1, 1, 0, 50, 0),  # another broker (sorts after broker 0): goes
        ("p-1", 2, 0, 1, 0, 0),
        ("p-2", 1, 0, 0, 300, 1),  # same seq, another producer: not a repeat
        ("p-3", 7, 0, 0, 700, 2),  # inside one compressed wrapper: index 2 goes
        ("p-3", 7, 0, 0, 700, 1),
    ]
    assert drops(spark, rows, None) == {(0, 0, 500, 0), (1, 0, 50, 0), (0, 0, 700, 2)}


def test_keys_the_previous_hour_holds_go_even_when_they_appear_once_here(spark: Any) -> None:
    rows = [("p-1", 1, 0, 0, 0, 0), ("p-1", 2, 0, 0, 10, 0), ("p-1", 2, 0, 0, 20, 0)]
    previous = [("p-1", 1), ("p-9", 2), ("p-1", 3)]
    assert drops(spark, rows, previous) == {(0, 0, 0, 0), (0, 0, 20, 0)}
    assert drops(spark, [("p-1", 5, 0, 0, 0, 0)], previous) == set()


def test_a_name_seen_with_other_fields_is_a_conflict_with_every_row_of_it(spark: Any) -> None:
    """For `_audit` the load compares the rows of a repeated name: an AuditCount re-sent with
    another count is returned with the rows it conflicts with, this hour's and the previous
    hour's, so that the load keeps them in its summary (an exact re-send is only dropped)."""
    schema = ("producer_id string, seq long, broker_id int, partition int, offset long, "
              "index int, load_hour string, tier string, window_start timestamp, count long")  # fmt: skip
    at = datetime(2026, 11, 22, 10, 40, tzinfo=UTC)
    rows = [
        ("p-1", 1, 0, 0, 100, 0, "H", "producer", at, 9),  # stays
        ("p-1", 1, 0, 0, 500, 0, "H", "producer", at, 3),  # goes: another count
        ("p-1", 2, 0, 0, 600, 0, "H", "producer", at, 4),  # goes: the previous hour's, same
        ("p-1", 3, 0, 0, 700, 0, "H", "producer", at, 5),  # goes: the previous hour's, 6 there
        ("p-2", 1, 0, 0, 800, 0, "H", "producer", at, 2),
        ("p-2", 1, 0, 0, 900, 0, "H", "producer", at, 2),  # goes: an exact re-send
    ]
    previous = [("p-1", 2, 1, 0, 10, 0, "G", "producer", at, 4),
                ("p-1", 3, 1, 0, 20, 0, "G", "producer", at, 6)]  # fmt: skip
    good = spark.createDataFrame(rows, schema)
    seen = spark.createDataFrame(previous, schema)
    found = duplicates(good, seen, fields=["tier", "window_start", "count"])
    assert set(found.drops) == {(0, 0, 500, 0), (0, 0, 600, 0), (0, 0, 700, 0), (0, 0, 900, 0)}
    ms = int(at.timestamp() * 1000)
    conflicts = {
        (c["producer_id"], c["seq"], c["offset"], c["previous"], c["dropped"]): c["fields"]
        for c in found.conflicts
    }
    assert conflicts == {
        ("p-1", 1, 100, False, False): {"tier": "producer", "window_start": ms, "count": 9},
        ("p-1", 1, 500, False, True): {"tier": "producer", "window_start": ms, "count": 3},
        ("p-1", 3, 20, True, False): {"tier": "producer", "window_start": ms, "count": 6},
        ("p-1", 3, 700, False, True): {"tier": "producer", "window_start": ms, "count": 5},
    }
    # without fields (every other topic) nothing is compared
    assert duplicates(good, seen).conflicts == []
