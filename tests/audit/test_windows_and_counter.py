"""Windows aligned to the epoch and the per-batch counter; pure, no servers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logbroker.audit.counter import WindowCounter
from logbroker.audit.windows import WINDOW_MS, window_end, window_start


def test_windows_are_ten_minutes_aligned_to_the_epoch():
    assert WINDOW_MS == 600_000
    t = 1_763_805_723_456  # 2025-11-22T10:02:03.456Z
    assert window_start(t) == 1_763_805_600_000  # 10:00:00.000
    assert window_end(t) == 1_763_806_200_000  # 10:10:00.000
    assert window_start(1_763_805_600_000) == 1_763_805_600_000  # a start is its own window
    assert window_start(-1) == -600_000


def test_a_batch_in_one_window_is_one_addition_and_a_straddling_batch_is_split():
    counter = WindowCounter()
    counter.add("page_views", [600_000, 600_001, 1_199_999])
    counter.add("page_views", [1_199_999, 1_200_000, 1_800_000])
    counter.add("searches", [5])
    counter.add("searches", [])
    assert counter.pending() == {
        ("page_views", 600_000): 4,
        ("page_views", 1_200_000): 1,
        ("page_views", 1_800_000): 1,
        ("searches", 0): 1,
    }
    assert counter.earliest_start == 0
    # windows ending by 1_200_000: those starting at 0 and 600_000
    assert counter.take(ending_by=1_200_000) == {("page_views", 600_000): 4, ("searches", 0): 1}
    assert counter.earliest_start == 1_200_000
    assert counter.take() == {("page_views", 1_200_000): 1, ("page_views", 1_800_000): 1}
    assert counter.pending() == {} and counter.earliest_start is None


@given(st.lists(st.lists(st.integers(-(10**13), 10**13), max_size=60), max_size=20))
def test_counts_equal_events_per_window(batches):
    counter = WindowCounter(window_ms=1000)
    expected: dict[tuple[str, int], int] = {}
    for batch in batches:
        counter.add("t", batch)
        for ts in batch:
            key = ("t", ts - ts % 1000)
            expected[key] = expected.get(key, 0) + 1
    assert counter.take() == expected
