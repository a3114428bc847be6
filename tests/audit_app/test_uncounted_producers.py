"""The producers an `unaccounted` window names (issue 45), without Spark: who published a good
`producer` count (audit_counts._check_and_sum's `counters`), the windows' lists
(results.uncounted_producers) and the hour's page that shows them (report.hour_page).

A producer that publishes no counts (one written with confluent-kafka's AvroSerializer) or one
killed before it published them leaves its windows `unaccounted`; the audit names it by the
`producer_id` of its events, so that whoever reads the report knows whose events they are.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from pipeline_warehouse.hour_states import HourState
from pipeline_warehouse.time_format import HOUR_MS, WINDOW_MS, hour_ms, parse_hour
from spark_apps.audit.audit_counts import _check_and_sum
from spark_apps.audit.load_profile import PROFILE_COLUMNS
from spark_apps.audit.outcome import AuditOptions, AuditOutcome
from spark_apps.audit.report import hour_page
from spark_apps.audit.results import UNCOUNTED_SHOWN, build_results, uncounted_producers

HOUR = "2026-11-22T10"
TEN = hour_ms(parse_hour(HOUR))
GRACE = 2 * HOUR_MS
TOPIC = "clicks"


def window(minute: int) -> int:
    return TEN + minute * 60_000


def audit_events(*rows: dict[str, object]) -> pd.DataFrame:
    """AuditCount rows as audit_counts reads them: one good `producer` count each unless
    a row says otherwise."""
    base = {"a_topic": TOPIC, "tier": "producer", "wms": WINDOW_MS, "broker_id": 0,
            "partition": 0, "index": 0, "load_hour": HOUR}  # fmt: skip
    return pd.DataFrame([{**base, "offset": i, "seq": i, **r} for i, r in enumerate(rows)])


def check(ev: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    out = _check_and_sum(
        ev, [parse_hour(HOUR)], [TOPIC], ["load_hour", "broker_id", "partition", "offset",
        "index"], {}, {}, hour_ms(parse_hour("2026-11-22T16")), 600_000,
    )  # fmt: skip
    return out.sums, out.counters


def profile(*held: tuple[int, str | None, int]) -> pd.DataFrame:
    """reconcile's profile: (window, producer_id, rows) of the loads read."""
    return pd.DataFrame(
        [
            {"topic": TOPIC, "load_hour": HOUR, "window": w, "producer_id": p, "rows": n}
            for w, p, n in held
        ]
    )


def results(prof: pd.DataFrame, sums: pd.DataFrame, now: datetime) -> pd.DataFrame:
    loaded = prof.groupby(["topic", "window"], as_index=False)["rows"].sum()
    loaded = loaded.assign(loaded_rows=loaded["rows"], loaded_unique=loaded["rows"])
    return build_results([TOPIC], [parse_hour(HOUR)], loaded, sums, now, GRACE)


LATE = datetime(2026, 11, 22, 16, tzinfo=UTC)  # every window's grace has passed


def scenario() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame | None]:
    """`audited` counts its events of every window; `cf-1` and `cf-2` publish no counts; the
    mirror counts 10:40 (its tier names no producer); `short` counts 10:20 too low; twelve
    producers without counts share 10:50, one without a producer_id too."""
    sums, counters = check(
        audit_events(
            *({"producer_id": "audited", "ws": window(m), "cnt": 5} for m in range(0, 60, 10)),
            {"producer_id": "mirror-1", "tier": "mirror", "ws": window(40), "cnt": 9},
            {"producer_id": "short", "ws": window(20), "cnt": 1},
            # bad: a count for a 5-minute window is never summed, and names nobody as counted
            {"producer_id": "cf-2", "ws": window(10), "wms": 300_000, "cnt": 4},
        )
    )
    prof = profile(
        *((window(m), "audited", 5) for m in range(0, 60, 10)),
        (window(10), "cf-1", 3),
        (window(10), "cf-2", 4),
        (window(40), "cf-2", 4),
        (window(20), "short", 3),
        *((window(50), f"many-{i:02}", 1 + i % 3) for i in range(12)),
        (window(50), None, 2),
    )
    return prof, sums, counters


def test_a_window_names_the_producers_that_published_no_count_of_its_events() -> None:
    prof, sums, counters = scenario()
    assert counters is not None
    assert set(counters["producer_id"]) == {"audited", "short"}  # good producer counts only
    res = results(prof, sums, LATE)
    named = uncounted_producers(res, prof, counters)
    assert list(named) == [HOUR]
    by_window = {u["window_start"]: u for u in named[HOUR]}
    assert sorted(by_window) == [
        "2026-11-22T10:10:00Z",
        "2026-11-22T10:20:00Z",
        "2026-11-22T10:40:00Z",
        "2026-11-22T10:50:00Z",
    ]  # the complete windows name nobody
    assert by_window["2026-11-22T10:10:00Z"] == {
        "topic": TOPIC,
        "window_start": "2026-11-22T10:10:00Z",
        "status": "unaccounted",
        "unaccounted": 7,
        "producer_ids": ["cf-2", "cf-1"],  # the most events first
        "more": 0,
    }
    assert by_window["2026-11-22T10:40:00Z"]["producer_ids"] == ["cf-2"]  # the mirror's no help
    # `short` published a count of 10:20, too low: the window is unaccounted, and no producer
    # is without counts there (the numbers say by how much)
    assert by_window["2026-11-22T10:20:00Z"]["producer_ids"] == []
    assert by_window["2026-11-22T10:20:00Z"]["unaccounted"] == 2
    many = by_window["2026-11-22T10:50:00Z"]
    assert len(many["producer_ids"]) == UNCOUNTED_SHOWN and many["more"] == 12 - UNCOUNTED_SHOWN
    assert many["producer_ids"][:4] == ["many-02", "many-05", "many-08", "many-11"]  # 3 rows each


def test_a_pending_window_names_them_too_and_no_counts_at_all_names_everyone() -> None:
    prof, _, _ = scenario()
    within_grace = datetime(2026, 11, 22, 11, 5, tzinfo=UTC)
    empty = pd.DataFrame({"topic": [], "tier": [], "window_start": [], "count": []})
    named = uncounted_producers(results(prof, empty, within_grace), prof, None)
    first = named[HOUR][0]
    assert (first["window_start"], first["status"], first["producer_ids"]) == (
        "2026-11-22T10:00:00Z",
        "pending",
        ["audited"],
    )
    assert len(named[HOUR]) == 6
    clean = prof[prof["producer_id"] == "audited"]
    sums, counters = check(
        audit_events(
            *({"producer_id": "audited", "ws": window(m), "cnt": 5} for m in range(0, 60, 10))
        )
    )
    assert uncounted_producers(results(clean, sums, LATE), clean, counters) == {}


def test_the_hours_page_shows_them_with_the_failed_window(tmp_path: Path) -> None:
    prof, sums, counters = scenario()
    res = results(prof, sums, LATE)
    summary = dict(
        bad_audit_events=0, bad_audit_reasons={}, bad_audit_examples=[], grace_ms=GRACE,
        audited_at="2026-11-22T16:00:00Z", topics=[TOPIC],
        inputs={TOPIC: [dict(load_hour=HOUR, read=True, committed_at="2026-11-22T11:05Z")]},
        uncounted_producers=uncounted_producers(res, prof, counters)[HOUR],
    )  # fmt: skip
    profiles = pd.DataFrame([{**dict.fromkeys(PROFILE_COLUMNS, 1), "load_hour": HOUR,
                              "topic": TOPIC}])  # fmt: skip
    outcome = AuditOutcome(res, {HOUR: summary}, profiles, plan=None)  # type: ignore[arg-type]
    opts = AuditOptions(warehouse=(tmp_path / "wh").as_uri(), hours=[], now=LATE)
    page = tmp_path / "reports" / "hours" / f"{HOUR}.html"
    states = [HourState(TOPIC, parse_hour(HOUR), "audited")]
    text = hour_page(HOUR, outcome, None, states, opts, page, tmp_path / "reports")

    failed = text[text.index('id="failed-windows"') :]
    failed = failed[: failed.index("</table>")]
    rows = failed.split("<tr>")[2:]  # after the header's
    assert len(rows) == 4
    cells = [r.split('class="uncounted-producers">')[1].split("</td>")[0] for r in rows]
    assert cells[0] == "cf-2, cf-1"  # 10:10
    assert cells[1] == ""  # 10:20: counted, too low
    assert cells[2] == "cf-2"  # 10:40
    shown = [f"many-{i:02}" for i in (2, 5, 8, 11, 1, 4, 7, 10, 0, 3)]  # most rows first
    assert cells[3] == ", ".join(shown) + " (+2 more)"  # 10:50
    assert "producers without counts" in failed
