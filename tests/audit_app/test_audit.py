"""The audit end to end on warehouses in the exact §3.6 layout, with real Spark and GX.

One audit run per warehouse per module (Spark and GX are slow to start; the runs are shared):
a clean three-hour warehouse, one with a fault of each kind (scenarios.FAULTS), whose
exact numbers the tests check window by window, and one with forged counts (scenarios.FORGED),
each of which must be a bad audit event and none a `lost` window. The late-event test reopens and re-closes
an hour; the Data Docs and report pages are opened in headless Chromium.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pipeline_warehouse.filesystem import FsspecFS, as_uri
from pipeline_warehouse.hour_states import hour_states
from pipeline_warehouse.layout import results_dir, summary_file
from pipeline_warehouse.time_format import parse_hour
from spark_apps.audit import cli as audit_cli
from spark_apps.audit.audit_counts import MAX_COUNT
from spark_apps.audit.report_assets import external_assets
from spark_apps.audit.run import AuditOptions, AuditOutcome, run_audit

from .scenarios import FAULTS, FORGED, HOURS, LATE, PER_WINDOW, TOPICS, at, clean, faulty, forged

pytestmark = pytest.mark.slow


def audit(
    spark: Any, root: Path, hours: list[Any] = HOURS, now: Any = LATE, **kw: Any
) -> AuditOutcome:
    return run_audit(spark, AuditOptions(warehouse=as_uri(str(root)), hours=hours, now=now, **kw))


def row(outcome: AuditOutcome, topic: str, hhmm: str) -> pd.Series:
    rows = outcome.results[
        (outcome.results["topic"] == topic) & (outcome.results["window"] == at(hhmm))
    ]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.fixture(scope="module")
def clean_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AuditOutcome]:
    root = clean(tmp_path_factory.mktemp("clean") / "wh")
    return root, audit(spark, root)


@pytest.fixture(scope="module")
def forged_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AuditOutcome]:
    root = forged(tmp_path_factory.mktemp("forged") / "wh")
    return root, audit(spark, root)


@pytest.fixture(scope="module")
def faulty_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AuditOutcome]:
    root = faulty(tmp_path_factory.mktemp("faulty") / "wh")
    return root, audit(spark, root)


# -- a clean run: no false alarm ---------------------------------------------------------------


def test_clean_run_every_window_complete(clean_run: tuple[Path, AuditOutcome]) -> None:
    root, out = clean_run
    assert len(out.results) == len(TOPICS) * len(HOURS) * 6
    assert set(out.results["status"]) == {"complete"}
    assert (out.results["produced"] == PER_WINDOW).all()
    assert (out.results["loaded_unique"] == PER_WINDOW).all()
    assert out.totals("missing") == out.totals("duplicates") == out.totals("unaccounted") == 0
    assert out.bad_audit_events() == 0
    assert out.quality is not None and out.quality.success
    # the files: one directory per hour, exactly the columns, and its summary
    written = pd.read_parquet(results_dir(str(root), HOURS[0]).replace("file://", ""))
    assert list(written.columns) == list(audit_cli_columns())
    assert len(written) == len(TOPICS) * 6
    summary = json.loads(Path(summary_file(str(root), HOURS[0])).read_text())
    assert summary["topic_statuses"] == {t: {"complete": 6} for t in TOPICS}


def test_result_files_are_what_spark_reads_as_the_table(
    spark: Any, clean_run: tuple[Path, AuditOutcome]
) -> None:
    """The rows are written by pyarrow (no Spark job): Spark reads them with the table's
    types, timestamps included, and the same values."""
    from spark_apps.audit.results import result_schema

    root, out = clean_run
    read = spark.read.parquet(results_dir(as_uri(str(root)), HOURS[0]))
    expected = [(f.name, f.dataType) for f in result_schema() if f.name != "audit_hour"]
    assert [(f.name, f.dataType) for f in read.schema] == expected
    rows = read.orderBy("topic", "window_start").toPandas()
    mine = out.results[out.results["audit_hour"] == "2026-11-22T10"].reset_index(drop=True)
    assert rows["produced"].tolist() == mine["produced"].tolist()
    assert (
        rows["window_start"].dt.tz_localize("UTC").tolist() == mine["window_start"].tolist()
    )  # the session's time zone is UTC


def audit_cli_columns() -> tuple[str, ...]:
    from pipeline_warehouse.layout import RESULT_COLUMNS

    return RESULT_COLUMNS


def test_clean_run_report_says_so(clean_run: tuple[Path, AuditOutcome]) -> None:
    root, out = clean_run
    page = Path(out.report_pages["2026-11-22T11"].replace("file://", ""))
    text = page.read_text()
    assert "All 18 windows are complete" in text
    assert "alert-success" in text and "alert-danger" not in text
    assert not external_assets(text)
    states = hour_states(FsspecFS(), as_uri(str(root)), TOPICS, HOURS, LATE)
    assert {s.state for s in states} == {"closed"}


# -- faults, exactly ----------------------------------------------------------------------------


def test_lost_events_exact_and_lost_after_grace(faulty_run: tuple[Path, AuditOutcome]) -> None:
    _, out = faulty_run
    lost = row(out, FAULTS.lost_topic, FAULTS.lost_window)
    assert (lost.produced, lost.loaded_unique, lost.missing, lost.status) == (
        PER_WINDOW,
        PER_WINDOW - FAULTS.lost,
        FAULTS.lost,
        "lost",
    )
    assert out.totals("missing") == FAULTS.lost


def test_the_audit_the_pipeline_page_and_the_asset_see_one_state(
    faulty_run: tuple[Path, AuditOutcome],
) -> None:
    """One model of an hour's state (pipeline_warehouse.hour_states): the audit's report
    page, the Airflow Pipeline page and the completeness assets say the same of every hour."""
    import re
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from hooks.closed_hours import newly_closed
    from hooks.pipeline import LiveCluster, Pipeline
    from pipeline_ui.app import create_app
    from pipeline_warehouse.overview import WarehouseView
    from pipeline_warehouse.time_format import format_hour

    root, out = faulty_run
    names = [format_hour(h) for h in HOURS]
    model = {
        (s.topic, s.hour_name): s.state
        for s in hour_states(FsspecFS(), as_uri(str(root)), TOPICS, HOURS, LATE)
    }
    assert set(model.values()) >= {"closed", "audited"}  # the faults keep some hours open
    # the audit's report: its "Hour state" table, per audited hour
    for hour in names:
        page = Path(out.report_pages[hour].replace("file://", "")).read_text()
        table = page[page.index("Hour state") :]
        for topic in TOPICS:
            shown = re.search(rf"<td>{topic}</td>\s*<td>.*?>(\w+)<", table, re.S)
            assert shown and shown.group(1) == model[(topic, hour)], (topic, hour)
    # the Pipeline page
    settings = Pipeline(
        live_clusters=(LiveCluster("live", "lb_live"),),
        analysis_conn_id="lb_analysis",
        spark_conn_id="logbroker_spark_default",
        topics=tuple(TOPICS),
        warehouse=as_uri(str(root)),
        reports=as_uri(str(root / "_reports")),
        grace_hours=2,
        max_bad_fraction=0.01,
    )
    client = TestClient(create_app(settings, require_login=False, now=lambda: LATE))
    html = client.get("/pipeline", params={"hours": 3, "until": names[-1]}).text
    page_states = {
        (t, h): s
        for t, h, s in re.findall(
            r'data-topic="([^"]+)" data-hour="([^"]+)" data-state="(\w+)"', html
        )
        if t in TOPICS
    }
    assert page_states == model
    # the completeness assets: exactly the closed hours are announced
    view = WarehouseView(as_uri(str(root)), timedelta(hours=2))
    announced = {(c.topic, c.hour) for c in newly_closed(view, TOPICS, names, LATE)}
    assert announced == {key for key, state in model.items() if state == "closed"}


def test_lost_is_incomplete_within_the_grace(
    spark: Any, faulty_run: tuple[Path, AuditOutcome], tmp_path: Path
) -> None:
    root, _ = faulty_run
    copy = tmp_path / "wh"
    shutil.copytree(root, copy)
    early = audit(spark, copy, hours=[HOURS[0]], now=parse_hour("2026-11-22T11"), quality=False)
    window = row(early, FAULTS.lost_topic, FAULTS.lost_window)
    assert (window.missing, window.status) == (FAULTS.lost, "incomplete")


def test_duplicates_in_the_warehouse_exact(faulty_run: tuple[Path, AuditOutcome]) -> None:
    _, out = faulty_run
    dup = row(out, FAULTS.dup_topic, FAULTS.dup_window)
    assert (dup.loaded_rows, dup.loaded_unique, dup.duplicates) == (
        PER_WINDOW + FAULTS.duplicates,
        PER_WINDOW,
        FAULTS.duplicates,
    )
    assert dup.status == "complete"  # every event is there; the duplicates are their own finding
    assert out.totals("duplicates") == FAULTS.duplicates


def test_mirror_tail_resent_counted_and_warehouse_exactly_once(
    faulty_run: tuple[Path, AuditOutcome],
) -> None:
    _, out = faulty_run
    hour = out.results[
        (out.results["topic"] == FAULTS.mirror_topic)
        & (out.results["audit_hour"] == "2026-11-22T11")
    ]
    assert int(hour["mirrored"].sum() - hour["produced"].sum()) == FAULTS.resent
    assert (hour["duplicates"] == 0).all() and (hour["loaded_unique"] == hour["produced"]).all()
    assert set(hour["status"]) == {"complete"}
    profile = out.profiles[
        (out.profiles["topic"] == FAULTS.mirror_topic)
        & (out.profiles["load_hour"] == "2026-11-22T11")
    ]
    assert int(profile["duplicates_dropped"].iloc[0]) == FAULTS.resent


def test_killed_producer_unaccounted_exact(faulty_run: tuple[Path, AuditOutcome]) -> None:
    _, out = faulty_run
    killed = row(out, FAULTS.killed_topic, FAULTS.killed_window)
    assert (killed.unaccounted, killed.status) == (FAULTS.unaccounted, "unaccounted")
    assert out.totals("unaccounted") == FAULTS.unaccounted
    assert out.status_counts() == {"complete": 52, "lost": 1, "unaccounted": 1}
    # the summary names the producer that published no count (p-killed), and only it
    named = out.summaries["2026-11-22T12"]["uncounted_producers"]
    assert [(u["topic"], u["window_start"], u["producer_ids"]) for u in named] == [
        (FAULTS.killed_topic, f"2026-11-22T{FAULTS.killed_window}:00Z", ["p-killed"])
    ]


def test_bad_audit_events_reported_with_reasons(faulty_run: tuple[Path, AuditOutcome]) -> None:
    _, out = faulty_run
    ten = out.summaries["2026-11-22T10"]
    assert ten["bad_audit_events"] == FAULTS.bad_hour10
    reasons = ten["bad_audit_reasons"]
    assert reasons["negative or missing count"] == 1
    assert reasons["window start is not aligned to 10 minutes"] == 1
    assert reasons["window is not 600000 ms long"] == 1
    assert reasons["count for a topic with no data in the warehouse: no_such_topic"] == 1
    assert reasons["unknown tier warehouse"] == 1
    # one header, counts 1 and 2: the load kept the 1 and its summary the 2; neither summed
    assert reasons["events with one header (producer_id, seq) and different counts: 1 and 2"] == 2
    assert row(out, "page_views", "10:40").status == "complete"
    assert all("offset" in ex and "load_hour" in ex for ex in ten["bad_audit_examples"])
    eleven = out.summaries["2026-11-22T11"]
    assert eleven["bad_audit_reasons"] == {
        "undecodable: unknown schema id 999": FAULTS.undecodable_hour11
    }
    # the audit event delivered twice was summed once: page_views 10:50 is complete
    assert row(out, "page_views", "10:50").status == "complete"


def test_expectations_fail_on_the_faulty_windows(faulty_run: tuple[Path, AuditOutcome]) -> None:
    _, out = faulty_run
    assert out.quality is not None and not out.quality.success
    failures = {(f.suite, f.column): f for f in out.quality.failures["2026-11-22T10"]}
    status = failures[("audit_results", "status")]
    assert status.rows == [
        {"status": "lost", "topic": FAULTS.lost_topic, "window_start": "2026-11-22T10:10Z"}
    ]
    assert failures[("audit_results", "missing")].rows[0]["missing"] == FAULTS.lost
    assert ("audit_events", "events") in failures
    dup = {(f.suite, f.column): f for f in out.quality.failures["2026-11-22T11"]}[
        ("audit_results", "duplicates")
    ]
    assert dup.rows == [
        {
            "duplicates": FAULTS.duplicates,
            "topic": FAULTS.dup_topic,
            "window_start": "2026-11-22T11:20Z",
        }
    ]
    unacc = {(f.suite, f.column): f for f in out.quality.failures["2026-11-22T12"]}[
        ("audit_results", "unaccounted")
    ]
    assert unacc.unexpected_count == 1


# -- forged counts: bad audit events, never a sum that wraps, never a false `lost` ---------------


def test_forged_counts_leave_no_window_lost(forged_run: tuple[Path, AuditOutcome]) -> None:
    _, out = forged_run
    assert "lost" not in set(out.results["status"]) and "incomplete" not in set(
        out.results["status"]
    )
    for column in ("produced", "mirrored", "missing", "unaccounted"):
        assert out.results[column].between(0, MAX_COUNT).all(), column
    # the windows off are those whose counts were not used: unaccounted, never lost
    off = out.results[out.results["status"] != "complete"]
    assert sorted(zip(off["topic"], off["status"], off["unaccounted"], strict=True)) == [
        (FORGED.oversum_topic, "unaccounted", PER_WINDOW),
        (FORGED.conflict_topic, "unaccounted", FORGED.conflict_events),
    ]


def test_counts_that_would_overflow_are_bad_audit_events(
    forged_run: tuple[Path, AuditOutcome],
) -> None:
    _, out = forged_run
    huge = row(out, FORGED.huge_topic, FORGED.huge_window)
    assert (huge.produced, huge.missing, huge.status) == (PER_WINDOW, 0, "complete")
    reasons = out.summaries["2026-11-22T10"]["bad_audit_reasons"]
    assert reasons[f"count above {MAX_COUNT:,}: more than any window holds"] == 2
    # each under the bound, together over it: the window's counts are all bad (which one is
    # forged is not known), so its events are unaccounted for, not lost
    over = row(out, FORGED.oversum_topic, FORGED.oversum_window)
    # the two forged counts and the window's four honest deltas (p-a's and p-b's, two each)
    assert reasons[f"counts of one topic, tier and window sum above {MAX_COUNT:,}"] == 6
    assert (over.produced, over.loaded_unique, over.status) == (0, PER_WINDOW, "unaccounted")


def test_one_header_with_two_counts_is_a_conflict_not_a_loss(
    forged_run: tuple[Path, AuditOutcome],
) -> None:
    _, out = forged_run
    # the hourly load kept the first (9) and dropped the other (3, an hour later) as a
    # duplicate; its summary kept both, and neither is summed
    window = row(out, FORGED.conflict_topic, FORGED.conflict_window)
    assert (window.produced, window.loaded_unique) == (PER_WINDOW, PER_WINDOW + 3)
    ten = out.summaries["2026-11-22T10"]
    reason = "events with one header (producer_id, seq) and different counts: 3 and 9"
    assert ten["bad_audit_reasons"][reason] == 2
    shown = [ex for ex in ten["bad_audit_examples"] if ex["reason"] == reason]
    assert sorted((ex["count"], ex["load_hour"], ex.get("dropped", False)) for ex in shown) == [
        (3, "2026-11-22T11", True),
        (9, "2026-11-22T10", False),
    ]
    page = Path(out.report_pages["2026-11-22T10"].replace("file://", "")).read_text()
    assert "different counts: 3 and 9" in page and "dropped by the load" in page


def test_implausible_windows_are_bad_audit_events_of_their_load_hour(
    forged_run: tuple[Path, AuditOutcome],
) -> None:
    _, out = forged_run
    reasons = out.summaries["2026-11-22T10"]["bad_audit_reasons"]
    future = (
        "window starts in the future: after its load's hour (or the audit's clock) and the "
        "skew allowed"
    )
    assert reasons[future] == 2  # 2100, and 11:20 counted in the 10:00 load
    assert reasons["window starts before 1970 (the epoch)"] == 1
    assert row(out, "page_views", FORGED.ahead_window).status == "complete"
    assert {ex["window_start"] for ex in out.summaries["2026-11-22T10"]["bad_audit_examples"]} >= {
        FORGED.far_future_ms,
        -600_000,
    }


def test_hostile_topic_names_never_become_rows_or_paths(
    forged_run: tuple[Path, AuditOutcome],
) -> None:
    root, out = forged_run
    eleven = out.summaries["2026-11-22T11"]
    refused = {
        reason: n
        for reason, n in eleven["bad_audit_reasons"].items()
        if reason.startswith("count for a topic the pipeline refuses: ")
    }
    assert sum(refused.values()) == len(FORGED.hostile)
    for name in FORGED.hostile:
        assert any(repr(name) in reason for reason in refused), name
    assert set(out.results["topic"]) == set(TOPICS)
    # nothing was written outside the warehouse's own directories, nor named after them
    assert sorted(p.name for p in root.parent.iterdir()) == ["wh"]
    index = json.loads(
        (root / "_audit_results" / "_index" / "_audit" / "2026-11-22T11.json").read_text()
    )
    assert set(index["by_topic"]) == set(TOPICS)
    page = Path(out.report_pages["2026-11-22T11"].replace("file://", "")).read_text()
    assert "&#39;../../x&#39;" in page and "'../../x'" not in page


# -- late data reopens an hour ----------------------------------------------------------------


def test_late_event_reopens_and_changes_the_hour(spark: Any, tmp_path: Path) -> None:
    from support.synthetic_warehouse import Traffic

    root = clean(tmp_path / "wh")
    wh = as_uri(str(root))
    audit(spark, root, quality=False)
    state = {s.topic: s for s in hour_states(FsspecFS(), wh, TOPICS, [HOURS[0]], LATE)}
    assert state["page_views"].state == "closed"
    # an event of 10:05 arrives in the 14:00 load (after the grace), counted by its producer;
    # the 14:00 load is first written without its checkpoint: not committed, never read
    late = Traffic()
    late.seqs["p-late"] = 0
    late.produce("p-late", "page_views", [at("10:05")], arrival=parse_hour("2026-11-22T14"))
    for c in late.counts:
        c.arrival = parse_hour("2026-11-22T14")
    fourteen = parse_hour("2026-11-22T14")
    late.load_facts = {(t, fourteen): {"checkpoint": False} for t in [*TOPICS, "_audit"]}
    late.write(root, [fourteen], TOPICS)
    uncommitted = audit(spark, root, hours=[fourteen], now=LATE, quality=False)
    assert uncommitted.results["loaded_rows"].sum() == 0  # the hour without checkpoint: not read
    assert {s.topic: s.state for s in hour_states(FsspecFS(), wh, TOPICS, [fourteen], LATE)}[
        "page_views"
    ] == "open"
    # now it commits; the audit of 14:00 reads it and indexes it: 10:00 is reopened
    late.load_facts = {}
    late.write(root, [fourteen], TOPICS)
    audit(spark, root, hours=[fourteen], now=LATE, quality=False)
    state = {s.topic: s for s in hour_states(FsspecFS(), wh, TOPICS, [HOURS[0]], LATE)}
    assert state["page_views"].state == "audited" and state["page_views"].reopened
    assert "late events" in " ".join(state["page_views"].reasons)
    assert state["searches"].state == "closed"  # the late event is page_views'
    # the re-audit reads the 14:00 load: the window holds one more event, and the hour closes
    again = audit(spark, root, hours=[HOURS[0]], quality=False)
    window = row(again, "page_views", "10:00")
    assert (window.produced, window.loaded_unique, window.status) == (
        PER_WINDOW + 1,
        PER_WINDOW + 1,
        "complete",
    )
    state = {s.topic: s for s in hour_states(FsspecFS(), wh, TOPICS, [HOURS[0]], LATE)}
    assert state["page_views"].state == "closed" and not state["page_views"].reopened


# -- the real clock: an hour's last counts come with the next hour ------------------------------


def test_on_a_moving_clock_hours_go_loaded_audited_closed_and_never_fail(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49 item 10, the stack on the real clock from 10:00: each hour's loads commit at
    HH+1:05, and the audit DAG's run at HH+1:06 audits the loaded hour and the grace (2 h)
    before it with `--fail-on lost,unaccounted`. A producer's counts of a window arrive in the
    load of the hour the window closes in, so each hour's last window is counted only by the
    next hour's `_audit` load. Nothing is lost: every hour shows loaded, then audited, then
    closed, never failed, and no run is red. Except one window: ad_clicks 11:30, whose producer
    was killed before it published its counts: reported once its grace has passed, not before."""
    from support.synthetic_warehouse import Traffic

    from pipeline_warehouse.overview import WarehouseView
    from pipeline_warehouse.time_format import format_hour

    from .scenarios import LOADS, traffic

    root = tmp_path / "wh"
    tr: Traffic = traffic()
    tr.produce("p-killed", "ad_clicks", [at("11:30") + i * 1000 for i in range(3)], counted=False)
    view = WarehouseView(as_uri(str(root)), timedelta(hours=2))
    names = [format_hour(h) for h in LOADS]
    seen: dict[tuple[str, str], list[str]] = {(t, h): [] for t in TOPICS for h in names}
    exits = []

    def look(now: datetime) -> None:
        for row_ in view.grid(TOPICS, names, now):
            for cell in row_:
                states = seen[(cell.topic, cell.hour)]
                if not states or states[-1] != cell.badge:
                    states.append(cell.badge)

    look(LOADS[0] + timedelta(hours=1))  # before the first load: every hour open
    for load in LOADS:
        tr.write(root, [load], TOPICS)
        look(load + timedelta(hours=1, minutes=5))
        now = load + timedelta(hours=1, minutes=6)
        first = max(load - timedelta(hours=2), LOADS[0])  # the stack started at 10:00
        args = ["--warehouse", str(root), "--hours", f"{format_hour(first)}..{format_hour(load)}",
                "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"), "--grace", "2h",
                "--fail-on", "lost,unaccounted", "--no-quality", "--quiet"]  # fmt: skip
        exits.append(audit_cli.main(args))  # as the audit DAG runs it
        look(now)
    # red only at 14:06, the first run past 11:30's grace (11:40 + 2 h)
    assert exits == [0, 0, 0, audit_cli.EXIT_FAILED_CHECKS]
    assert "failing (--fail-on lost,unaccounted): 1 unaccounted windows" in capsys.readouterr().err
    expected = {
        (topic, hour): ["open", "loaded", "audited", "closed"]
        if hour < "2026-11-22T12"  # 12:00's grace passes at 15:00, after the last run
        else ["open", "loaded", "audited"]
        for topic in TOPICS
        for hour in names
    }
    expected[("ad_clicks", "2026-11-22T11")] = ["open", "loaded", "audited", "failed"]
    assert seen == expected


# -- the command ---------------------------------------------------------------------------------


def test_cli_summary_line_and_fail_on(
    spark: Any,
    faulty_run: tuple[Path, AuditOutcome],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, _ = faulty_run
    copy = tmp_path / "wh"
    shutil.copytree(root, copy)
    args = [
        "--warehouse",
        str(copy),
        "--hours",
        "2026-11-22T10..2026-11-22T12",
        "--now",
        "2026-11-22T16:00:00Z",
        "--no-quality",
        "--quiet",
    ]
    # findings are results (exit 0) unless --fail-on names them
    assert audit_cli.main([*args, "--fail-on", "lost,unaccounted"]) == audit_cli.EXIT_FAILED_CHECKS
    captured = capsys.readouterr()
    line = captured.out.strip()
    assert line.startswith(
        "audit 2026-11-22T10..2026-11-22T12: 54 windows (52 complete, 1 lost, 1 unaccounted)"
    )
    assert (
        f"missing {FAULTS.lost}; duplicates {FAULTS.duplicates}; unaccounted {FAULTS.unaccounted}"
        in line
    )
    assert "1 lost windows, 1 unaccounted windows" in captured.err


def test_a_topic_with_nothing_in_the_hours_asked_is_refused_and_nothing_is_replaced(
    spark: Any,
    faulty_run: tuple[Path, AuditOutcome],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 49 item 12: `audit --topics nosuch_topic` exited 0 and replaced the hour's results
    (page views and all) with 6 no_data rows of nosuch_topic. Through the job's entry, as
    spark-submit runs it."""
    from spark_apps.jobs.audit import main

    root, _ = faulty_run
    copy = tmp_path / "wh"
    shutil.copytree(root, copy)
    results = copy / "_audit_results"

    def files() -> dict[str, bytes]:  # every result, summary and load index the audit keeps
        return {
            str(p.relative_to(results)): p.read_bytes() for p in results.rglob("*") if p.is_file()
        }

    before = files()
    base = ["--warehouse", str(copy), "--hours", "2026-11-22T10", "--now", "2026-11-22T16:00:00Z",
            "--no-quality", "--quiet"]  # fmt: skip
    for named in ("nosuch_topic", "page_views,nosuch_topic"):
        assert main([*base, "--topics", named]) == audit_cli.EXIT_BAD_ARGUMENTS
        captured = capsys.readouterr()
        [line] = captured.err.splitlines()
        assert line.startswith("audit: --topics nosuch_topic: no load in ") and "(a typo?)" in line
        assert captured.out == ""
        assert files() == before  # not a byte replaced
    # A name the producers counted but that never loaded is a finding, not a typo: audited.
    assert main([*base, "--topics", "no_such_topic"]) == 0
    summary = json.loads((results / "audit_hour=2026-11-22T10" / "_summary.json").read_text())
    assert summary["topics"] == ["no_such_topic"]
    reason = "count for a topic with no data in the warehouse: no_such_topic"
    assert summary["bad_audit_reasons"][reason] == 1


# -- what a person opens --------------------------------------------------------------------------


def test_report_page_renders_styled_with_the_failed_window(
    faulty_run: tuple[Path, AuditOutcome], chromium: Any, tmp_path: Path
) -> None:
    from .screenshots import screenshot_path

    _, out = faulty_run
    page = out.report_pages["2026-11-22T10"]
    dom = chromium(page, "--dump-dom")
    assert 'data-styled="yes"' in dom  # bootstrap's stylesheet applied (computed style)
    assert (
        'data-scripts="yes"' in dom and 'data-chart="yes"' in dom
    )  # jQuery, bootstrap-table, vega ran
    assert 'class="marks"' in dom  # the chart's SVG, drawn by vega
    failed = dom[dom.index('id="failed-windows"') :]
    failed = failed[: failed.index("</table>")]
    assert (
        "page_views" in failed
        and "10:10" in failed
        and "status-lost" in failed
        and f"<strong>{FAULTS.lost}</strong>" in failed
    )
    chromium(page, f"--screenshot={screenshot_path('audit-hour.png', tmp_path)}")


def test_data_docs_page_renders_styled_offline_with_the_failed_window(
    faulty_run: tuple[Path, AuditOutcome], chromium: Any, tmp_path: Path
) -> None:
    from .screenshots import screenshot_path

    root, out = faulty_run
    assert out.quality is not None
    rel = out.quality.pages["2026-11-22T10"]["audit_results"]
    page = root / "_reports" / rel
    text = page.read_text()
    assert not [u for u in external_assets(text)], "every stylesheet and script is vendored"
    dom = chromium(page.as_uri(), "--dump-dom")
    assert "fixed-table-container" in dom  # bootstrap-table (jQuery + bootstrap) built its tables
    assert "page_views" in dom and "2026-11-22T10:10Z" in dom  # the failed window, in the table
    assert "Unsuccessful Expectations" in dom
    chromium(page.as_uri(), f"--screenshot={screenshot_path('audit-data-docs.png', tmp_path)}")
