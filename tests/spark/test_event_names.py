"""Event names read from fetched bytes (spark_apps.event_names), without Spark or a broker.

What the hourly load relies on: whenever two events share a name, or share one with the
previous load, NameKeys says a repeat is possible (then the load runs its Spark check);
it says "distinct" only for names that are.
"""

from __future__ import annotations

import io
import random

from fastavro import parse_schema, schemaless_writer

from logbroker.protocol.message_set import build_message_set
from logbroker.serde.schemas import EVENT_HEADER_SCHEMA
from spark_apps.entry_scan import plain_run
from spark_apps.event_names import NameKeys, producer_hash

EVENT = parse_schema(  # the shared header, as serde defines it, then a field of the event's
    {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "header", "type": EVENT_HEADER_SCHEMA},
            {"name": "page", "type": "string"},
        ],
    }
)


def _event(producer_id: str, seq: int, rng: random.Random) -> bytes:
    out = io.BytesIO(b"\x00\x00\x00\x00\x07")  # magic 0, schema id 7
    out.seek(5)
    header = {
        "timestamp": 1_795_000_000_000 + seq,
        "server": f"web-{rng.randint(0, 9)}.example.com",
        "producer_id": producer_id,
        "seq": seq,
    }
    schemaless_writer(out, EVENT, {"header": header, "page": "/" * rng.randint(0, 40)})
    return out.getvalue()


def _fetch(names: list[tuple[str, int]], rng: random.Random) -> bytes:
    return build_message_set([_event(p, seq, rng) for p, seq in names])


def _keys(*fetches: bytes) -> NameKeys:
    keys = NameKeys()
    for fetch in fetches:
        keys.add(plain_run(fetch))
    return keys


def test_distinct_names_are_proved_distinct_and_any_repeat_is_seen() -> None:
    rng = random.Random(1)
    names = [(f"producer-{p}", seq) for p in range(7) for seq in range(300)]
    rng.shuffle(names)
    assert not _keys(_fetch(names[:1000], rng), _fetch(names[1000:], rng)).repeats_possible()
    for _ in range(20):  # a repeat anywhere, in the same fetch or another
        again = rng.choice(names)
        cut = rng.randrange(len(names))
        fetches = _fetch([*names[:cut], again], rng), _fetch(names[cut:], rng)
        assert _keys(*fetches).repeats_possible()


def test_seq_ranges_per_producer_decide_what_the_previous_load_may_share() -> None:
    rng = random.Random(2)
    keys = _keys(_fetch([("a", s) for s in range(100, 200)] + [("b", 5), ("b", 9)], rng))
    assert keys.seq_ranges == {producer_hash("a"): (100, 199), producer_hash("b"): (5, 9)}
    assert not keys.shares_names_with([("a", 0, 99), ("b", 10, 50), ("c", 100, 200)])
    assert keys.shares_names_with([("a", 199, 250)])  # one seq in common is enough
    assert keys.shares_names_with([("b", 0, 5)])


def test_a_payload_that_is_not_an_event_or_a_limit_reached_proves_nothing() -> None:
    rng = random.Random(3)
    good = [(f"p{i}", i) for i in range(50)]
    garbage = build_message_set([b"\x00\x00\x00\x00\x07\xff\xff"])  # framing, then no header
    keys = _keys(_fetch(good, rng), garbage)
    assert keys.repeats_possible() and keys.shares_names_with([("zzz", 0, 0)])
    capped = NameKeys(max_events=40)
    capped.add(plain_run(_fetch(good, rng)))
    assert capped.repeats_possible()
