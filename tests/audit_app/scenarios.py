"""The warehouses the audit's tests read: synthetic events in the exact layout of docs/design.md §3.6.

clean()   3 topics x hours 10, 11, 12 of 2026-11-22 (and the 13:00 load, which holds the
          counts of 12:50's window): producers p-a (10 events per window and topic) and p-b
          (5), both audited; every window has produced = loaded = 15.
faulty()  the same traffic with one fault of each kind placed by hand (FAULTS says where).
forged()  the same traffic with AuditCount events a hostile or broken producer could publish
          (FORGED says where): counts that would wrap a 64-bit sum, one header with two
          counts, windows in 2100, before the epoch or ahead of their load, hostile topic
          names. Each must be a bad audit event, and no window `lost`.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from support.synthetic_warehouse import Traffic, uniform_times

from pipeline_warehouse.layout import AUDIT_TOPIC
from pipeline_warehouse.time_format import WINDOW_MS, hour_ms, parse_hour

TOPICS = ["ad_clicks", "page_views", "searches"]
HOURS = [parse_hour(f"2026-11-22T{h}") for h in (10, 11, 12)]
LOADS = [*HOURS, parse_hour("2026-11-22T13")]
PER_WINDOW = 15
LATE = parse_hour("2026-11-22T16")  # every window's grace (2 h) has passed


def at(hhmm: str) -> int:
    """2026-11-22 at HH:MM, in ms."""
    hh, mm = hhmm.split(":")
    return hour_ms(parse_hour(f"2026-11-22T{hh}")) + int(mm) * 60_000


def traffic() -> Traffic:
    tr = Traffic()
    for hour in HOURS:
        for topic in TOPICS:
            tr.produce("p-a", topic, uniform_times(hour, 60))
            tr.produce("p-b", topic, uniform_times(hour, 30, offset_ms=7_000))
    return tr


def clean(root: Path) -> Path:
    traffic().write(root, LOADS, TOPICS)
    return root


@dataclasses.dataclass(frozen=True)
class Faults:
    lost_topic: str = "page_views"
    lost_window: str = "10:10"
    lost: int = 4  # events counted, never loaded
    dup_topic: str = "ad_clicks"
    dup_window: str = "11:20"
    duplicates: int = 3  # loaded twice: in their hour's load and again in the next
    mirror_topic: str = "searches"
    resent: int = 7  # a mirror tail re-sent (and counted again); the load dropped it
    killed_topic: str = "ad_clicks"
    killed_window: str = "12:30"
    unaccounted: int = 5  # loaded, never counted (the producer was killed)
    # negative, misaligned, short window, unknown topic and tier, and the two counts of a conflict
    bad_hour10: int = 7
    undecodable_hour11: int = 2  # _audit records the load could not decode


FAULTS = Faults()


def faulty(root: Path) -> Path:
    f = FAULTS
    tr = traffic()
    # lost: 4 events of p-a in page_views 10:10-10:20 never reach the warehouse
    start = at(f.lost_window)
    gone = [
        e
        for e in tr.events
        if e.topic == f.lost_topic
        and e.producer_id == "p-a"
        and start <= e.event_ms < start + WINDOW_MS
    ]
    for e in gone[: f.lost]:
        tr.events.remove(e)
    # duplicates: 3 events of ad_clicks 11:20 are loaded again by the next hour's load
    start = at(f.dup_window)
    again = [
        e for e in tr.events if e.topic == f.dup_topic and start <= e.event_ms < start + WINDOW_MS
    ][: f.duplicates]
    tr.events += [dataclasses.replace(e, arrival=parse_hour("2026-11-22T12")) for e in again]
    # a mirror tail re-sent: the mirror counts searches 11 and the tail twice; the load drops it
    mirrored = [
        e
        for e in tr.events
        if e.topic == f.mirror_topic and HOURS[1] <= parse_hour_of(e.event_ms) < HOURS[2]
    ]
    tr.count("mirror-1", "mirror", mirrored + mirrored[-f.resent :], deltas=1)
    tr.load_facts[(f.mirror_topic, HOURS[1])] = {"duplicates_dropped": f.resent}
    # a producer killed before it published its counts
    tr.produce(
        "p-killed",
        f.killed_topic,
        [at(f.killed_window) + i * 1000 for i in range(f.unaccounted)],
        counted=False,
    )
    # bad audit events of hour 10
    tr.add_count(topic="page_views", window_start=at("10:20"), count=-3)
    tr.add_count(topic="page_views", window_start=at("10:05"), count=2)
    tr.add_count(topic="page_views", window_start=at("10:00"), count=2, window_ms=300_000)
    tr.add_count(topic="no_such_topic", window_start=at("10:30"), count=2)
    tr.add_count(topic="page_views", window_start=at("10:30"), count=2, tier="warehouse")
    first = tr.add_count(topic="page_views", window_start=at("10:40"), count=1, producer_id="hand2")
    tr.add_count(
        topic="page_views", window_start=at("10:40"), count=2, producer_id="hand2", seq=first.seq
    )
    # an audit event delivered twice (same header, same count): summed once
    real = next(
        c
        for c in tr.counts
        if c.topic == "page_views" and c.tier == "producer" and c.window_start == at("10:50")
    )
    tr.counts.append(dataclasses.replace(real, arrival=parse_hour("2026-11-22T12")))
    # two _audit records of the 11:00 load that the load could not decode
    tr.load_facts[(AUDIT_TOPIC, HOURS[1])] = {
        "bad_records": f.undecodable_hour11,
        "errors": [
            {"topic": AUDIT_TOPIC, "broker_id": 0, "partition": 0, "offset": 8_000 + i, "index": 0,
             "reason": "unknown schema id 999", "payload": b"\x00\x00\x00\x03\xe7junk"}
            for i in range(f.undecodable_hour11)
        ],
    }  # fmt: skip
    tr.write(root, LOADS, TOPICS)
    return root


def parse_hour_of(ms: int):  # type: ignore[no-untyped-def]
    from pipeline_warehouse.time_format import hour_of_ms

    return hour_of_ms(ms)


def window(hhmm: str) -> timedelta:
    return timedelta(milliseconds=at(hhmm) - hour_ms(HOURS[0]))


@dataclasses.dataclass(frozen=True)
class Forged:
    huge_topic: str = "page_views"
    huge_window: str = "10:20"
    huge: int = 2**62  # two of them sum to 2**63: -2**63 in 64 bits
    oversum_topic: str = "ad_clicks"
    oversum_window: str = "10:30"
    oversum: int = 6 * 10**11  # each under the bound, two over it
    conflict_topic: str = "searches"
    conflict_window: str = "10:40"
    conflict_events: int = 3  # sent and loaded; counted 3, and re-sent with one header as 9
    conflict_counts: tuple[int, int] = (
        9,
        3,
    )  # the 9 first (the load keeps it), the 3 an hour later
    far_future_ms: int = 4_102_444_800_000  # 2100-01-01T00:00Z
    ahead_window: str = "11:20"  # counted in the 10:00 load: 20 minutes past its end
    hostile: tuple[str, ...] = ("../../x", "..", "a/b", "_checkpoints", "_audit")


FORGED = Forged()


def forged(root: Path) -> Path:
    f = FORGED
    tr = traffic()
    for _ in range(2):
        tr.add_count(topic=f.huge_topic, window_start=at(f.huge_window), count=f.huge)
        tr.add_count(topic=f.oversum_topic, window_start=at(f.oversum_window), count=f.oversum)
    # p-c's three events are loaded; its count of them has one header and two counts
    start = at(f.conflict_window)
    tr.produce("p-c", f.conflict_topic, [start + i * 1000 for i in range(f.conflict_events)],
               counted=False)  # fmt: skip
    first = tr.add_count(
        producer_id="p-c", topic=f.conflict_topic, window_start=start, count=f.conflict_counts[0]
    )
    tr.add_count(producer_id="p-c", seq=first.seq, topic=f.conflict_topic, window_start=start,
                 count=f.conflict_counts[1], arrival=HOURS[1])  # fmt: skip
    # windows that cannot have been counted, all in the 10:00 load
    published = at("10:30")
    for window in (f.far_future_ms, -WINDOW_MS, at(f.ahead_window)):
        tr.add_count(topic="page_views", window_start=window, count=5, published_ms=published)
    # topic names the pipeline refuses, in the 11:00 load
    for name in f.hostile:
        tr.add_count(topic=name, window_start=at("11:00"), count=5)
    tr.write(root, LOADS, TOPICS)
    return root
