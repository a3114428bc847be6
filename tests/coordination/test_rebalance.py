"""The 0.7.2 range assignment and the subscription values (pure functions, no ZooKeeper)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logbroker.coordination.rebalance import (
    Blacklist,
    StaticSubscription,
    Whitelist,
    WildcardSubscription,
    assign,
    consumers_per_topic,
    make_consumer_id,
    owners,
    parse_subscription,
    replicated_partitions,
    static_subscription_value,
    thread_ids,
    topic_partitions,
    wildcard_subscription_value,
)

# -- assign ----------------------------------------------------------------------------------


def test_eleven_partitions_three_consumers_string_order() -> None:
    partitions = [f"0-{i}" for i in range(11)]  # "0-0".."0-10"
    threads = ["c-a-0", "c-b-0", "c-c-0"]
    # sorted as strings: 0-0, 0-1, 0-10, 0-2, 0-3, ..., 0-9
    assert assign(partitions, threads) == {
        "c-a-0": ["0-0", "0-1", "0-10", "0-2"],
        "c-b-0": ["0-3", "0-4", "0-5", "0-6"],
        "c-c-0": ["0-7", "0-8", "0-9"],
    }


def test_ten_partitions_three_consumers_leftover_to_the_first() -> None:
    partitions = [f"0-{i}" for i in range(10)]
    assert assign(partitions, ["x", "y", "z"]) == {
        "x": ["0-0", "0-1", "0-2", "0-3"],
        "y": ["0-4", "0-5", "0-6"],
        "z": ["0-7", "0-8", "0-9"],
    }


def test_two_brokers_four_partitions_each_three_consumers() -> None:
    partitions = [f"{b}-{p}" for b in (1, 0) for p in range(4)]
    assert assign(partitions, ["g_h-2-0", "g_h-1-0", "g_h-3-0"]) == {
        "g_h-1-0": ["0-0", "0-1", "0-2"],
        "g_h-2-0": ["0-3", "1-0", "1-1"],
        "g_h-3-0": ["1-2", "1-3"],
    }


def test_leftovers_go_one_each_to_the_first_consumers() -> None:
    partitions = [f"0-{i}" for i in range(8)]  # 8 = 3*2 + 2
    sizes = [len(v) for _, v in sorted(assign(partitions, ["a", "b", "c"]).items())]
    assert sizes == [3, 3, 2]
    partitions = [f"0-{i}" for i in range(7)]  # 7 = 4*1 + 3
    sizes = [len(v) for _, v in sorted(assign(partitions, ["a", "b", "c", "d"]).items())]
    assert sizes == [2, 2, 2, 1]


def test_threads_sorted_as_strings() -> None:
    threads = ["c-10", "c-2", "c-1"]  # string order: c-1, c-10, c-2
    assert assign(["0-0", "0-1", "0-2"], threads) == {
        "c-1": ["0-0"],
        "c-10": ["0-1"],
        "c-2": ["0-2"],
    }


def test_more_consumers_than_partitions() -> None:
    result = assign(["0-0", "1-0"], ["a", "b", "c", "d"])
    assert result == {"a": ["0-0"], "b": ["1-0"], "c": [], "d": []}


def test_no_partitions_and_no_consumers() -> None:
    assert assign([], ["a", "b"]) == {"a": [], "b": []}
    assert assign(["0-0"], []) == {}


def test_every_partition_owned_exactly_once() -> None:
    partitions = [f"{b}-{p}" for b in range(3) for p in range(7)]
    threads = [f"g_host-{i}-0" for i in range(5)]
    result = assign(partitions, threads)
    owned = [p for ps in result.values() for p in ps]
    assert sorted(owned) == sorted(partitions)
    assert len(owned) == len(set(owned))
    assert owners(partitions, threads) == {p: t for t, ps in result.items() for p in ps}


def test_duplicates_count_once() -> None:
    assert assign(["0-1", "0-0", "0-1"], ["a", "a"]) == {"a": ["0-0", "0-1"]}


def test_topic_partitions() -> None:
    assert topic_partitions({0: 2, 1: 11}) == sorted(["0-0", "0-1"] + [f"1-{p}" for p in range(11)])
    assert topic_partitions({1: 11})[:3] == ["1-0", "1-1", "1-10"]


def test_replicated_partitions_are_numbers_sorted_as_strings() -> None:
    """A replicated topic's partitions, named `<p>`, go through the same range assignment."""
    names = replicated_partitions(12)
    assert names[:4] == ["0", "1", "10", "11"] and sorted(names, key=int) == [
        str(p) for p in range(12)
    ]
    assert assign(names, ["c-1", "c-0"]) == {
        "c-0": ["0", "1", "10", "11", "2", "3"],
        "c-1": ["4", "5", "6", "7", "8", "9"],
    }
    assert replicated_partitions(0) == []
    with pytest.raises(ValueError):
        replicated_partitions(-1)


partition_names = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 30)).map(lambda bp: f"{bp[0]}-{bp[1]}"),
    max_size=60,
)
thread_names = st.lists(st.text("abc-_0123456789", min_size=1, max_size=12), max_size=15)


@given(partition_names, thread_names, st.randoms(use_true_random=False))
def test_assignment_properties(
    partitions: list[str], threads: list[str], rnd: random.Random
) -> None:
    result = assign(partitions, threads)
    if not threads:
        assert result == {}
        return
    assert set(result) == set(threads)
    owned = [p for ps in result.values() for p in ps]
    assert sorted(owned) == sorted(set(partitions))  # union = all, disjoint
    sizes = [len(ps) for ps in result.values()]
    assert max(sizes) - min(sizes) <= 1
    # the bigger shares go to the first threads in string order
    ordered = [len(result[t]) for t in sorted(result)]
    assert ordered == sorted(ordered, reverse=True)
    # every member computes the same answer, whatever order it read the inputs in
    shuffled_p, shuffled_t = list(partitions), list(threads)
    rnd.shuffle(shuffled_p)
    rnd.shuffle(shuffled_t)
    assert assign(shuffled_p, shuffled_t) == result
    # each thread's partitions are a contiguous run of the sorted partitions
    ordered_parts = sorted(set(partitions))
    for ps in result.values():
        if ps:
            start = ordered_parts.index(ps[0])
            assert ordered_parts[start : start + len(ps)] == ps


# -- consumer and thread ids -----------------------------------------------------------------


def test_consumer_id_format() -> None:
    cid = make_consumer_id(
        "loaders",
        hostname="web-7",
        time_ms=1323456789012,
        uuid_hex="0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    )
    assert cid == "loaders_web-7-1323456789012-0f1e2d3c"
    assert make_consumer_id("loaders", "fixed") == "loaders_fixed"
    generated = make_consumer_id("g")
    prefix, ms, uuid8 = generated.rsplit("-", 2)
    assert prefix.startswith("g_") and ms.isdigit() and len(uuid8) == 8
    int(uuid8, 16)


def test_thread_ids() -> None:
    assert thread_ids("g_h-1-abcd", 3) == ["g_h-1-abcd-0", "g_h-1-abcd-1", "g_h-1-abcd-2"]


# -- subscription values ---------------------------------------------------------------------


def test_static_value_is_javas_spelling() -> None:
    assert static_subscription_value({"topicA": 2, "topicB": 1}) == '{ "topicA": 2,"topicB": 1 }'
    assert static_subscription_value({"page-views": 1}) == '{ "page-views": 1 }'
    value = StaticSubscription({"a": 1, "b": 3}).value()
    assert json.loads(value) == {"a": 1, "b": 3}


@pytest.mark.parametrize(
    "text",
    ['{ "topicA": 2,"topicB": 1 }', '{"topicA": 2, "topicB": 1}', '{"topicA":2,"topicB":1}'],
)
def test_parse_static(text: str) -> None:
    sub = parse_subscription(text)
    assert sub == StaticSubscription({"topicA": 2, "topicB": 1})
    assert sub.thread_ids_per_topic("c") == {"topicA": ["c-0", "c-1"], "topicB": ["c-0"]}
    assert parse_subscription(text.encode()) == sub


def test_wildcard_values() -> None:
    assert wildcard_subscription_value(Whitelist("logs-.*"), 2) == "*2*logs-.*"
    assert wildcard_subscription_value(Blacklist("tmp.*"), 1) == "!1!tmp.*"
    white = parse_subscription("*2*logs-.*")
    assert white == WildcardSubscription(Whitelist("logs-.*"), 2)
    black = parse_subscription(b"!1!tmp.*")
    assert black == WildcardSubscription(Blacklist("tmp.*"), 1)
    topics = ["logs-a", "logs-b", "tmp1", "other"]
    assert white.thread_ids_per_topic("c", topics) == {
        "logs-a": ["c-0", "c-1"],
        "logs-b": ["c-0", "c-1"],
    }
    assert black.thread_ids_per_topic("c", topics) == {
        "logs-a": ["c-0"],
        "logs-b": ["c-0"],
        "other": ["c-0"],
    }


def test_filters_match_whole_names_and_normalize_like_0_7() -> None:
    white = Whitelist(' "a, b" ')  # quotes and spaces dropped, "," means "|"
    assert white.regex == "a|b"
    assert white.allows("a") and white.allows("b")
    assert not white.allows("ab") and not white.allows("xa")
    assert not Blacklist("a.*").allows("abc") and Blacklist("a.*").allows("ba")
    assert Whitelist("x") != Blacklist("x")
    with pytest.raises(ValueError):
        Whitelist("(")


@pytest.mark.parametrize(
    "bad", ["topic", "", "{}x", '{"a": 0}', '{"a": "1"}', "*x*a", "[1]", "!0!a"]
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_subscription(bad)


def test_stream_counts_checked() -> None:
    with pytest.raises(ValueError):
        static_subscription_value({"a": 0})
    with pytest.raises(ValueError):
        Whitelist("a").value(0)


def test_consumers_per_topic_mixes_static_and_wildcard() -> None:
    subs = {
        "g_b": StaticSubscription({"t1": 2}),
        "g_a": WildcardSubscription(Whitelist("t.*"), 1),
        "g_c": parse_subscription('{ "t2": 1 }'),
    }
    assert consumers_per_topic(subs, ["t1", "t2", "x"]) == {
        "t1": ["g_a-0", "g_b-0", "g_b-1"],
        "t2": ["g_a-0", "g_c-0"],
    }
