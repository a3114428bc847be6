"""Event names read from fetched bytes (spark_apps.load.event_names), without Spark or a broker.

What the hourly load relies on: whenever two events share a name, or share one with the
previous load, NameKeys says a repeat is possible (then the load runs its Spark check);
it says "distinct" only for names that are.
"""

from __future__ import annotations

import io
import random

import pytest
from fastavro import parse_schema, schemaless_writer

from logbroker.protocol import compression
from logbroker.protocol.message_set import build_message_set
from logbroker.serde.schemas import EVENT_HEADER_SCHEMA
from spark_apps.load.event_names import NameKeys, producer_hash
from spark_apps.source.entry_scan import payload_run, plain_run
from spark_apps.source.ranges import PartitionRange, digest_input

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


def test_a_0_8_fetchs_payloads_give_the_names_and_profile_a_plain_fetch_gives() -> None:
    """A 0.8-format topic's fetches (payloads decompressed by its reader) are read to names
    as 0.7's plain fetches are: the same keys, seq ranges and profile, and a repeat seen."""
    rng = random.Random(4)
    names = [(f"producer-{p}", seq) for p in range(3) for seq in range(200)]
    events = [_event(p, seq, random.Random(seq)) for p, seq in names]
    plain, framed = NameKeys(), NameKeys()
    plain.add(plain_run(build_message_set(events)))
    for start, end in ((0, 0), (0, 1), (1, 250), (250, 600)):  # empty and one payload too
        framed.add(payload_run(events[start:end]))
    assert framed.complete and framed.events == plain.events == 600
    assert not framed.repeats_possible()
    assert framed.seq_ranges == plain.seq_ranges
    profile = framed.profile("t", "2026-11-22T10")
    assert profile is not None and profile.equals(plain.profile("t", "2026-11-22T10"))
    framed.add(payload_run([_event("producer-1", 7, rng)]))  # a re-sent event
    assert framed.repeats_possible()
    bad = NameKeys()
    bad.add(payload_run([events[0], b"not an event"]))
    assert not bad.complete and bad.repeats_possible()


@pytest.mark.parametrize("codec", [compression.GZIP, compression.SNAPPY], ids=["gzip", "snappy"])
def test_a_0_7_fetchs_compressed_sets_give_the_names_and_profile_a_plain_fetch_gives(
    codec: int,
) -> None:
    """The rows_sha256 thread's read of a 0.7 fetch (ranges.digest_input) with compressed
    sets, plain entries around them, gives the names of the messages inside the wrappers as
    the Spark reader unwraps them: the same keys, seq ranges and profile as the same events
    uncompressed; a repeat inside a wrapper, or one plain and one wrapped, is seen, and a
    payload in a wrapper that is not an event makes the hour the Spark check's."""
    r = PartitionRange("t", 0, 0, 0, 1 << 40)
    names = [(f"producer-{p}", seq) for p in range(3) for seq in range(200)]
    events = [_event(p, seq, random.Random(seq)) for p, seq in names]
    plain = _keys(build_message_set(events))

    def read(*sets: list[bytes]) -> NameKeys:
        """One fetch: the sets one after another, every other one compressed."""
        keys = NameKeys()
        fetch = b"".join(
            build_message_set(payloads, compression.NONE if i % 2 else codec)
            for i, payloads in enumerate(sets)
        )
        digest, end = digest_input(fetch, 0, r, names=keys)
        assert end == len(fetch) and digest.messages == sum(map(len, sets))
        return keys

    wrapped = read(events[:250], events[250:251], events[251:])
    assert wrapped.complete and wrapped.events == plain.events == 600
    assert not wrapped.repeats_possible()
    assert wrapped.seq_ranges == plain.seq_ranges
    profile = wrapped.profile("t", "2026-11-22T10")
    assert profile is not None and profile.equals(plain.profile("t", "2026-11-22T10"))
    assert read([*events[:300], events[17]], events[300:]).repeats_possible()  # in one wrapper
    assert read(events[:300], events[300:], events[299:300]).repeats_possible()  # across
    bad = read([events[0], b"not an event"])
    assert not bad.complete and bad.repeats_possible()


def test_a_payload_that_is_not_an_event_or_a_limit_reached_proves_nothing() -> None:
    rng = random.Random(3)
    good = [(f"p{i}", i) for i in range(50)]
    garbage = build_message_set([b"\x00\x00\x00\x00\x07\xff\xff"])  # framing, then no header
    keys = _keys(_fetch(good, rng), garbage)
    assert keys.repeats_possible() and keys.shares_names_with([("zzz", 0, 0)])
    capped = NameKeys(max_events=40)
    capped.add(plain_run(_fetch(good, rng)))
    assert capped.repeats_possible()


def _framed(schema_id: int, ms: int, producer_id: str, seq: int) -> bytes:
    out = io.BytesIO(b"\x00" + schema_id.to_bytes(4, "big"))
    out.seek(5)
    header = {"timestamp": ms, "server": "web-1", "producer_id": producer_id, "seq": seq}
    schemaless_writer(out, EVENT, {"header": header, "page": "/"})
    return out.getvalue()


@pytest.mark.parametrize("in_runs", [False, True], ids=["interleaved", "in-runs"])
def test_the_profile_from_the_names_is_what_spark_counts_from_the_rows(spark, in_runs) -> None:
    """The summary's profile the load takes from the names when it needs no Spark check:
    equal to summary_counts.profile_query over the same events' rows, value for value. Many
    producers (a fetch's group table grows), producer_ids of every length xxhash64 treats
    differently and outside ASCII, windows before 1970 and across an hour, two schemas;
    each event's producer drawn anew, or in runs of one producer (as producers send: the
    kernel reuses the previous event's hash and group), with equal-length neighbours."""
    from pyspark.sql import functions as F

    from spark_apps.summary_counts import PROFILE_QUERY_COLUMNS, header_rows, profile_query

    rng = random.Random(4)
    producers = ["", "é", "生產者"] + [f"host-{i}." + "x" * rng.randint(0, 70) for i in range(300)]
    producers += [f"host-{i:03d}" for i in range(40)]  # one length, differing in a byte
    run: list[str] = []
    events = []
    for seq in range(6000):
        if not run:
            run = [rng.choice(producers)] * (rng.randint(1, 40) if in_runs else 1)
        events.append(
            (
                rng.choice((3, 2**31 + 5)) if rng.random() < 0.1 or not in_runs else 3,
                rng.choice((-86_400_000 * 365 * 50, 0, 1_795_000_000_000))
                + rng.randint(0, 4_000_000),
                run.pop(),
                seq,
            )
        )
    names = _keys(
        *[
            build_message_set([_framed(*e) for e in events[i : i + 1500]])
            for i in range(0, len(events), 1500)
        ]
    )
    mine = names.profile("views", "2026-11-25T10")
    assert mine is not None and list(mine.columns) == list(PROFILE_QUERY_COLUMNS)

    rows = spark.createDataFrame(events, "schema_id long, ms long, producer_id string, seq long")
    rows = rows.select(
        F.timestamp_millis("ms").alias("event_time"),
        F.lit("web-1").alias("server"),
        "producer_id",
        "seq",
        "schema_id",
    )
    theirs = profile_query(header_rows(rows, "views", F.lit("2026-11-25T10"))).toPandas()
    assert len(mine) > 300
    key = ["window", "producer_id", "schema_id"]
    assert (
        mine.sort_values(key).values.tolist()
        == theirs[list(PROFILE_QUERY_COLUMNS)].sort_values(key).values.tolist()
    )


def test_the_drivers_xxhash64_is_sparks_on_the_same_column(spark) -> None:
    """spark_hash.spark_xxhash64 gives each producer_id the summary's `ph` that Spark's
    F.xxhash64 gives it: every length up to 100 bytes (XXH64 reads 32-, 8-, 4- and 1-byte
    steps, so each remainder), empty, outside ASCII, and values whose hash is negative."""
    from pyspark.sql import functions as F

    from spark_apps.load.spark_hash import spark_xxhash64

    rng = random.Random(5)
    alphabet = "az09-.é生\x00"
    values = ["", "é", "生產者"] + [
        "".join(rng.choice(alphabet) for _ in range(n)) for n in range(101) for _ in range(3)
    ]
    rows = spark.createDataFrame([(v,) for v in values], "producer_id string")
    theirs = {
        r.producer_id: r.ph
        for r in rows.select("producer_id", F.xxhash64("producer_id").alias("ph")).collect()
    }
    mine = {v: spark_xxhash64(v) for v in values}
    assert mine == theirs
    assert min(mine.values()) < 0 < max(mine.values())  # signed, as Spark's long


def test_no_profile_from_names_spark_would_count_otherwise() -> None:
    """Event times Spark may store other than as read (before 1900: calendar rebasing;
    beyond year 9999) leave the profile to Spark, but prove names all the same."""
    for ms in (-2_208_988_800_001, 253_402_300_800_000):
        keys = _keys(build_message_set([_framed(1, 0, "a", 1), _framed(1, ms, "a", 2)]))
        assert keys.profile("t", "2026-11-25T10") is None
        assert not keys.repeats_possible()
    keys = _keys(build_message_set([_framed(1, 0, "a", 1)]), b"")
    assert keys.profile("t", "2026-11-25T10") is not None
