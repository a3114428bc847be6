"""The audit's pure parts, without Spark: statuses, hours, the plan, the vendored assets, and
the checks of AuditCount events (audit_counts._check_and_sum) on forged values."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from pipeline_warehouse.hour_states import HourState
from pipeline_warehouse.load_index import can_hold
from pipeline_warehouse.time_format import (
    HOUR_MS,
    WINDOW_MS,
    hour_ms,
    parse_duration_ms,
    parse_hour,
    parse_hour_range,
)
from spark_apps.audit.audit_counts import MAX_COUNT, _check_and_sum
from spark_apps.audit.cli import loads_line
from spark_apps.audit.load_profile import PROFILE_COLUMNS
from spark_apps.audit.outcome import AuditOptions, AuditOutcome
from spark_apps.audit.quality import Failure, QualityOutcome
from spark_apps.audit.report import JS, hour_page
from spark_apps.audit.report_assets import (
    UnvendoredAssetError,
    external_assets,
    rewrite_html,
    url_map,
)
from spark_apps.audit.results import statuses, window_status

ROOT = Path(__file__).resolve().parents[2]
END = 10 * HOUR_MS  # a window's end, ms
GRACE = 2 * HOUR_MS


@pytest.mark.parametrize(
    ("produced", "rows", "unique", "now", "status"),
    [
        (15, 15, 15, END, "complete"),
        (15, 18, 15, END, "complete"),  # duplicates are their own finding
        (15, 11, 11, END + GRACE - 1, "incomplete"),
        (15, 11, 11, END + GRACE, "lost"),
        (15, 20, 20, END, "pending"),  # the counts can still come (issue 49 item 10)
        (15, 20, 20, END + GRACE - 1, "pending"),
        (15, 20, 20, END + GRACE, "unaccounted"),
        (0, 3, 3, END, "pending"),  # the hour's last window: its counts come in the next hour
        (0, 3, 3, END + GRACE, "unaccounted"),
        (0, 0, 0, END + GRACE, "no_data"),
    ],
)
def test_window_status(produced: int, rows: int, unique: int, now: int, status: str) -> None:
    assert window_status(produced, rows, unique, END, now, GRACE) == status
    frame = pd.DataFrame(
        {"produced": [produced], "loaded_rows": [rows], "loaded_unique": [unique]}
    ).assign(window=END - WINDOW_MS)
    assert statuses(frame, now, GRACE).tolist() == [status]  # the vectorized form agrees


@pytest.mark.parametrize(
    ("statuses_", "now", "needs"),
    [
        ({"complete": 5, "pending": 1}, END + GRACE - 1, False),  # its counts may still come
        ({"complete": 5, "pending": 1}, END + GRACE, True),  # settled by the next audit
        ({"complete": 5, "incomplete": 1}, END + GRACE, True),
        ({"complete": 6}, END + GRACE, False),
    ],
)
def test_a_waiting_hour_is_audited_again_once_its_grace_has_passed(
    statuses_: dict[str, int], now: int, needs: bool
) -> None:
    hour = datetime.fromtimestamp((END - HOUR_MS) / 1000, UTC)
    state = HourState("page_views", hour, "audited", statuses=statuses_)
    assert state.needs_audit(datetime.fromtimestamp(now / 1000, UTC), GRACE) is needs


@pytest.mark.parametrize(
    ("read", "from_rows", "contested", "line"),
    [
        (1, 0, 0, "audit: counted 1 load from its summary"),
        (3, 0, 0, "audit: counted 3 loads from their summaries"),
        (0, 0, 0, "audit: counted 0 loads"),
        (
            3,
            1,
            1,
            "audit: counted 3 loads: 2 from summaries, 1 from rows (without a summary that "
            "matches the files; the audit keeps one now under _audit_results/_load_summaries/); "
            "rows read again for 1 (window, producer) pair that two loads may share",
        ),
    ],
)
def test_the_loads_line_reads_as_a_sentence(
    read: int, from_rows: int, contested: int, line: str
) -> None:
    """README's walk-through shows the first case ("1 loads counted: 1 from their summaries,
    0 from their rows (...)" before)."""
    assert loads_line(read, from_rows, contested) == line


def test_hours_and_durations() -> None:
    assert [h.hour for h in parse_hour_range("2026-11-22T22..2026-11-23T01")] == [22, 23, 0, 1]
    assert parse_duration_ms("2h") == 2 * HOUR_MS and parse_duration_ms("90m") == 90 * 60_000
    for bad in ("2026-11-22 10", "2026-11-22T10..2026-11-22T09"):
        with pytest.raises(ValueError):
            parse_hour_range(bad)
    with pytest.raises(ValueError, match="duration"):
        parse_duration_ms("two hours")


def test_loads_that_can_hold_an_hour() -> None:
    ten = parse_hour("2026-11-22T10")
    held = [h for h in range(8, 15) if can_hold(parse_hour(f"2026-11-22T{h:02d}"), ten, GRACE)]
    assert held == [10, 11, 12]  # 13:00 starts at 10:00's end + 2 h: too late


def test_every_cdn_asset_of_gx_is_vendored_and_intact() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vendor_report_assets.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_rewrite_points_at_the_vendored_copies(tmp_path: Path) -> None:
    page = tmp_path / "data_docs" / "validations" / "x.html"
    url = "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"
    js = "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js"
    text = f'<link rel="stylesheet" href="{url}"/><script src="{js}" integrity="sha384-x" crossorigin="anonymous"></script>'
    fixed = rewrite_html(text, page, tmp_path)
    assert external_assets(fixed) == []
    assert f'href="../../assets/{url_map()[url]}"' in fixed and "integrity" not in fixed
    with pytest.raises(UnvendoredAssetError, match=r"cdn\.example"):
        rewrite_html('<script src="https://cdn.example/x.js"></script>', page, tmp_path)


def test_the_report_shows_hostile_strings_as_text(tmp_path: Path) -> None:
    """A topic, a producer id and an expectation's message holding markup are escaped on the
    hour's page, in its cells, its links and the chart's JSON: the page runs only its own
    scripts. (Topics are checked before an audit runs; the page does not rely on it.)"""
    topic, producer, message = (f"{w}<script>alert(1)</script>&{w}" for w in "tpm")
    hour = "2026-11-22T10"
    start = pd.Timestamp(f"{hour}:10Z")
    counts = dict(produced=9, mirrored=9, loaded_rows=7, loaded_unique=7, duplicates=0)
    results = pd.DataFrame(
        [
            dict(audit_hour=hour, topic=topic, window_start=start, status="lost", missing=2,
                 window_end=start + pd.Timedelta(minutes=10), unaccounted=0, **counts)
        ]
    )  # fmt: skip
    profiles = pd.DataFrame(
        [{**dict.fromkeys(PROFILE_COLUMNS, 1), "load_hour": hour, "topic": topic}]
    )
    summary = dict(
        bad_audit_events=0, bad_audit_reasons={}, bad_audit_examples=[], grace_ms=GRACE,
        audited_at="2026-11-22T14:00:00Z", topics=[topic],
        inputs={topic: [dict(load_hour=hour, read=True, committed_at="2026-11-22T11:05Z")]},
    )  # fmt: skip
    failure = Failure(
        "audit_results", "expect_column_values_to_be_in_set", "status", message, 1,
        [{"topic": topic, "producer_id": producer, "status": "lost"}],
    )  # fmt: skip
    quality = QualityOutcome(False, {hour: [failure]}, {hour: {"audit_results": "dd/x.html"}})
    outcome = AuditOutcome(results, {hour: summary}, profiles, plan=None, quality=quality)  # type: ignore[arg-type]
    states = [HourState(topic, parse_hour(hour), "audited", reasons=(f"lost: {topic}",))]
    now = datetime(2026, 11, 22, 14, tzinfo=UTC)
    opts = AuditOptions(warehouse=(tmp_path / "wh").as_uri(), hours=[], now=now)
    page = tmp_path / "reports" / "hours" / f"{hour}.html"
    text = hour_page(hour, outcome, quality, states, opts, page, tmp_path / "reports")

    assert "<script>alert" not in text and "alert(1)</script>" not in text
    assert text.count("<script") == len(JS) + 2  # the vendored ones, the self-check, the chart
    for hostile in (topic, producer, message):
        assert html.escape(hostile, quote=False) in text, hostile
    assert f"<td>{html.escape(topic, quote=False)}</td>" in text  # a cell's text
    assert f"producer_id={html.escape(producer, quote=False)}" in text  # where it failed
    chart = text.split('id="chart-spec">', 1)[1].split("</script>", 1)[0]
    assert json.loads(chart)["data"]["values"][0]["topic"] == topic  # vega reads the name


def test_the_gx_project_opens_again_every_hour(tmp_path: Path) -> None:
    # Every audit after the first reopens the reports' GX project from its
    # great_expectations.yml, where the progress-bar setting comes back as a dict.
    from spark_apps.audit.quality import open_context

    open_context(tmp_path / "gx")
    again = open_context(tmp_path / "gx")
    bars = again.variables.progress_bars
    assert (bars["globally"] if isinstance(bars, dict) else bars.globally) is False


def test_the_gx_variables_template_goes_and_a_users_file_stays(tmp_path: Path) -> None:
    # GX parses config_variables.yml on every variable access: its scaffolded template
    # (comments and an analytics instance_id) is removed; variables someone wrote stay.
    from spark_apps.audit.quality import open_context

    template = tmp_path / "a" / "gx" / "uncommitted" / "config_variables.yml"
    open_context(tmp_path / "a")
    assert (tmp_path / "a" / "gx" / "great_expectations.yml").is_file()
    assert not template.exists()
    again = open_context(tmp_path / "a")  # not scaffolded again
    assert not template.exists()
    assert again.variables.progress_bars is not None

    users = tmp_path / "b" / "gx" / "uncommitted" / "config_variables.yml"
    open_context(tmp_path / "b")
    users.write_text("# ours\ninstance_id: 1\nwarehouse_bucket: s3a://bucket\n")
    ctx = open_context(tmp_path / "b")
    assert users.read_text().endswith("warehouse_bucket: s3a://bucket\n")
    assert ctx.config_variables["warehouse_bucket"] == "s3a://bucket"


def _events(*rows: dict[str, object]) -> pd.DataFrame:
    base = {"producer_id": "p", "a_topic": "page_views", "tier": "producer", "wms": 600_000,
            "broker_id": 0, "partition": 0, "index": 0, "load_hour": "2026-11-22T10"}  # fmt: skip
    return pd.DataFrame([{**base, "offset": i, **r} for i, r in enumerate(rows)])


def _check(ev: pd.DataFrame, now: str = "2026-11-22T16") -> tuple[pd.DataFrame, dict]:
    bad: dict[str, dict[str, int]] = {}
    out = _check_and_sum(
        ev,
        [parse_hour("2026-11-22T10")],
        ["page_views"],
        ["load_hour", "broker_id", "partition", "offset", "index"],
        bad,
        {},
        hour_ms(parse_hour(now)),
        600_000,
    )
    return out.sums, bad.get("2026-11-22T10", {})


TEN = hour_ms(parse_hour("2026-11-22T10"))


def test_counts_at_the_ends_of_64_bits_are_bad_never_summed() -> None:
    sums, bad = _check(
        _events(
            {"seq": 1, "ws": TEN, "cnt": 2**63 - 1},
            {"seq": 2, "ws": TEN, "cnt": -(2**63)},
            {"seq": 3, "ws": TEN, "cnt": MAX_COUNT},  # the bound itself is a count
            {"seq": 4, "ws": TEN + 600_000, "cnt": MAX_COUNT},  # ... but not with another
            {"seq": 5, "ws": TEN + 600_000, "cnt": 1},
            {"seq": 6, "ws": TEN + 1_200_000, "cnt": 7},
        )
    )
    assert bad == {
        f"count above {MAX_COUNT:,}: more than any window holds": 1,
        "negative or missing count": 1,
        f"counts of one topic, tier and window sum above {MAX_COUNT:,}": 2,
    }
    assert sums["count"].tolist() == [MAX_COUNT, 7]


def test_windows_far_off_are_bad_and_belong_to_their_load_hour() -> None:
    # 2**62 ms is past what pandas' timestamps hold: it must not be turned into an hour
    sums, bad = _check(
        _events(
            {"seq": 1, "ws": 2**62, "cnt": 1},
            {"seq": 2, "ws": -(2**62), "cnt": 1},
            {"seq": 3, "ws": TEN + HOUR_MS + 600_000, "cnt": 1},  # 11:10, in the 10:00 load
            {"seq": 4, "ws": TEN + HOUR_MS, "cnt": 1},  # 11:00: published at the hour's end
        )
    )
    future = (
        "window starts in the future: after its load's hour (or the audit's clock) and the "
        "skew allowed"
    )
    assert bad == {future: 1, "window starts before 1970 (the epoch)": 1}
    assert sums.empty  # 11:00 is the next hour's, not audited here
    # the audit's clock bounds too: a window after it has not been counted yet
    _, early = _check(_events({"seq": 1, "ws": TEN + 1_800_000, "cnt": 1}), now="2026-11-22T10")
    assert early == {future: 1}


def test_one_header_two_counts_neither_summed() -> None:
    sums, bad = _check(
        _events(
            {"seq": 1, "ws": TEN, "cnt": 9},
            {"seq": 1, "ws": TEN, "cnt": 9, "offset": 50},  # an exact re-send: one event
            {"seq": 1, "ws": TEN, "cnt": 3, "load_hour": "2026-11-22T11", "dropped": True},
            {"seq": 2, "ws": TEN, "cnt": 4},
        )
    )
    assert bad == {"events with one header (producer_id, seq) and different counts: 3 and 9": 2}
    assert sums["count"].tolist() == [4]


def test_dropped_duplicates_a_load_did_not_compare_are_reported(tmp_path: Path) -> None:
    from pipeline_warehouse.checkpoint import Checkpoint
    from pipeline_warehouse.filesystem import FsspecFS, as_uri
    from spark_apps.audit.audit_counts import _recorded_conflicts

    ten = parse_hour("2026-11-22T10")
    load = Checkpoint(
        topic="_audit",
        load_hour="2026-11-22T10",
        partitions=(),
        rows=10,
        duplicates_dropped=2,
        bad_records=0,
        rows_sha256="ab" * 32,
        committed_at="2026-11-22T11:05:00Z",
    )
    bad: dict[str, dict[str, int]] = {}
    assert _recorded_conflicts(FsspecFS(), as_uri(str(tmp_path)), [load], {ten: ten}, bad) == []
    assert list(bad["2026-11-22T10"].values()) == [2]
    assert "not compared" in next(iter(bad["2026-11-22T10"]))


def _validate_hours(ctx: object, cps: dict, hours: int) -> list:
    """Run the audit's three checkpoints on small batches for `hours` hours (one failing)."""
    from datetime import UTC, datetime

    from pipeline_warehouse.layout import RESULT_COLUMNS
    from spark_apps.audit.load_profile import PROFILE_COLUMNS
    from spark_apps.audit.quality import _gx

    gx = _gx()
    keys = []
    for h in range(hours):
        status = "lost" if h == 1 else "complete"
        frames = {
            "audit_results": pd.DataFrame(
                [
                    {c: 0 for c in RESULT_COLUMNS}
                    | {
                        "topic": "page_views",
                        "status": status,
                        "window_start": f"2026-11-22T{h:02d}:00Z",
                        "window_end": "-",
                        "audited_at": "-",
                        "past_grace": True,
                    }
                ]
            ),
            "loaded_topic_hours": pd.DataFrame(
                [
                    {c: 0 for c in PROFILE_COLUMNS}
                    | {
                        "topic": "page_views",
                        "bad_fraction": 0.0,
                        "load_hour": f"2026-11-22T{h:02d}",
                        "schema_ids": "1",
                    }
                ]
            ),
            "audit_events": pd.DataFrame({"reason": ["x"] * (h == 1), "events": [1] * (h == 1)}),
        }
        for name, frame in frames.items():
            result = cps[name].run(
                batch_parameters={"dataframe": frame},
                expectation_parameters={"topics_with_traffic": [], "max_bad_fraction": 0.01},
                run_id=gx.RunIdentifier(
                    run_name=f"2026-11-22T{h:02d}", run_time=datetime(2026, 11, 23, tzinfo=UTC)
                ),
            )
            keys += list(result.run_results)
    return keys


def test_the_gx_setup_is_saved_once_and_again_when_its_files_change(tmp_path: Path) -> None:
    from spark_apps.audit.quality import GX_DIR, open_context, set_up

    ctx = open_context(tmp_path)
    set_up(ctx, tmp_path)
    suite = tmp_path / GX_DIR / "expectations" / "audit_results.json"
    written = {p: p.stat().st_mtime_ns for p in (tmp_path / GX_DIR).rglob("*.json")}
    suites, cps = set_up(open_context(tmp_path), tmp_path)  # read back, nothing written
    assert {p: p.stat().st_mtime_ns for p in written} == written
    assert len(suites["audit_results"].expectations) == 5 and set(cps) == set(suites)
    # a suite edited by hand in the project: the versioned one is saved again
    doc = json.loads(suite.read_text())
    doc["expectations"] = doc["expectations"][:1]
    suite.write_text(json.dumps(doc))
    suites, _ = set_up(open_context(tmp_path), tmp_path)
    assert len(suites["audit_results"].expectations) == 5
    assert len(json.loads(suite.read_text())["expectations"]) == 5


def test_the_data_docs_index_from_its_cache_is_gxs_own(tmp_path: Path) -> None:
    import re

    from spark_apps.audit.quality import (
        GX_DIR,
        INDEX_CACHE_FILE,
        cached_index_entries,
        open_context,
        set_up,
    )

    ctx = open_context(tmp_path)
    _, cps = set_up(ctx, tmp_path)
    keys = _validate_hours(ctx, cps, 3)
    index = tmp_path / "data_docs" / "index.html"
    cache = tmp_path / GX_DIR / "uncommitted" / INDEX_CACHE_FILE

    def page() -> str:  # the logo's URL carries the build time
        return re.sub(r"\?d=[0-9TZ.]+", "", index.read_text())

    ctx.build_data_docs(resource_identifiers=keys)
    plain = page()
    assert plain.count("validations/") >= 9 and "Failed" in plain
    for _ in range(2):  # filling the cache, then from it
        ctx = open_context(tmp_path)
        with cached_index_entries(ctx, cache):
            ctx.build_data_docs(resource_identifiers=keys[-3:])
        assert page() == plain
    assert len(json.loads(cache.read_text())["entries"]) == 9
    # from the cache, GX opens no stored result to list it
    ctx = open_context(tmp_path)
    opened: list[object] = []
    read = ctx.get_validation_result
    ctx.get_validation_result = lambda *a, **kw: opened.append(a) or read(*a, **kw)
    with cached_index_entries(ctx, cache):
        ctx.build_data_docs(resource_identifiers=keys[-3:])
    assert opened == [] and page() == plain


def test_audit_rows_read_with_their_window_in_ms_whatever_type_the_load_kept() -> None:
    """audit_counts._frame: what any writer of the `_audit` rows may have kept (Spark: timestamp
    micros, or INT96 read as nanoseconds; Arrow: millis; a long), and a damaged file (a
    column missing, a count that is not a number) gives nulls, reported, not a crash."""
    import pyarrow as pa

    from spark_apps.audit.audit_counts import _frame

    ms = [TEN, -600_001, None]
    for kind, scale in (("s", None), ("ms", 1), ("us", 1000), ("ns", 1_000_000)):
        if scale is None:  # whole seconds only
            values, expected = [TEN // 1000, -601, None], [TEN, -601_000, None]
        else:
            values, expected = [None if v is None else v * scale for v in ms], ms
        table = pa.table(
            {
                "producer_id": ["p", "p", "p"],
                "seq": [1, 2, 3],
                "event_topic": ["page_views"] * 3,
                "window_start": pa.array(values, pa.timestamp(kind, tz="UTC")),
                "count": ["7", "x", None],
            }
        )
        frame = _frame(table, "2026-11-22T10")
        assert frame["ws"].tolist() == [v if v is not None else pd.NA for v in expected], kind
        # a count kept as text is not a count: the whole column is null, hence bad events
        assert frame["cnt"].isna().all() and frame["tier"].isna().all()
        assert frame["a_topic"].tolist() == ["page_views"] * 3
        assert (frame["load_hour"] == "2026-11-22T10").all()
    longs = _frame(pa.table({"window_start": pa.array([TEN], pa.int64())}), "2026-11-22T10")
    assert longs["ws"].tolist() == [TEN] and longs["producer_id"].isna().all()


def test_a_validation_stored_as_its_checkpoints_run_stores_it(tmp_path: Path) -> None:
    """quality.validate runs a checkpoint's validation definition without the checkpoint's
    freshness check: the result it stores is the one Checkpoint.run stores."""
    from datetime import UTC, datetime

    from spark_apps.audit.quality import GX_DIR, _gx, open_context, set_up, validate

    gx = _gx()
    ctx = open_context(tmp_path)
    _, cps = set_up(ctx, tmp_path)
    frame = pd.DataFrame({"reason": ["negative or missing count"], "events": [2]})
    params = {"topics_with_traffic": [], "max_bad_fraction": 0.01}
    at = datetime(2026, 11, 23, tzinfo=UTC)
    ran = cps["audit_events"].run(
        batch_parameters={"dataframe": frame},
        expectation_parameters=params,
        run_id=gx.RunIdentifier(run_name="2026-11-22T01", run_time=at),
    )
    [(key1, _)] = ran.run_results.items()
    key2, result = validate(
        cps["audit_events"], frame, params, gx.RunIdentifier(run_name="2026-11-22T02", run_time=at)
    )
    assert not result.success and key2.batch_identifier == key1.batch_identifier

    def stored(key: object) -> dict:
        path = tmp_path / GX_DIR / "uncommitted" / "validations"
        doc = json.loads(path.joinpath(*key.to_tuple()).with_suffix(".json").read_text())
        for volatile in ("run_id", "validation_time", "batch_markers"):
            doc["meta"].pop(volatile)
        return doc

    assert stored(key2) == stored(key1)


def test_data_docs_templates_compiled_once_into_gxs_own_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The site's views (gx_views) keep GX's compiled templates: a second build compiles
    none, and the pages are the ones GX's default views render."""
    import re

    import jinja2

    from spark_apps.audit.quality import open_context, set_up

    compiled: list[str] = []
    compile_template = jinja2.Environment.compile

    def counting(self: jinja2.Environment, *args: object, **kwargs: object) -> object:
        compiled.append("x")
        return compile_template(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    ctx = open_context(tmp_path)
    _, cps = set_up(ctx, tmp_path)
    keys = _validate_hours(ctx, cps, 2)

    def built() -> list[str]:  # but the logo URL's build time and each element's random id
        uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        return [re.sub(rf"\?d=[0-9TZ.]+|{uuid}", "", page.read_text()) for page in pages]

    open_context(tmp_path).build_data_docs(resource_identifiers=keys)
    pages = [
        tmp_path / "data_docs" / "index.html",
        *(tmp_path / "data_docs").rglob("*T01/*/*.html"),
    ]
    compiled.clear()
    open_context(tmp_path).build_data_docs(resource_identifiers=keys)
    assert compiled == []
    ours = built()
    assert len(ours) == 4 and "Failed" in ours[1] + ours[2] + ours[3]
    assert "/*index page*/" in ours[0]  # the project's custom styles, as GX's views include
    # GX's default views render the same pages (compiling their templates again)
    site = dict(ctx.variables.data_docs_sites["local_site"])
    del site["site_section_builders"]
    site["site_index_builder"] = {"class_name": "DefaultSiteIndexBuilder"}
    ctx.update_data_docs_site("local_site", site)
    ctx.build_data_docs(resource_identifiers=keys)
    assert compiled and built() == ours
