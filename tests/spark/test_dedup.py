"""The load's deduplication on its own: which positions go, exactly (spark_apps.load.hour).

The keys are first counted hashed (xxhash64 of producer_id, seq); only repeats are then
compared by producer_id and position. These rows pin what stays: the first of a key in
(broker_id, partition, offset, index) order, and nothing of a key the previous hour has.
"""

from __future__ import annotations

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
