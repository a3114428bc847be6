"""The audit's report pages: one per audited hour, and an index (layout: quality's doc).

A page says, for one hour: the verdict, every window that failed and by how much (missing,
duplicates, unaccounted; for an unaccounted one, the producers that published no count of its
events), the loads that hold the window's rows (links to their directories) and
the `_audit` loads that hold its counts, the failed expectations with links to their Data Docs
pages, the loaded topic hours' profiles, the bad audit events with their positions, and the
hour's state per topic. It uses the vendored bootstrap, bootstrap-table and vega (report_assets),
so it renders styled offline; a small script marks `<body data-styled data-scripts>` once the
stylesheet applied and the scripts ran (the headless-browser test reads those).

The HTML is Jinja2's, from include/report_templates/ (page.html the frame, macros.html the
badges and tables, hour.html and index.html the pages), autoescaped: a topic, a producer id or
an expectation's message is text on the page, never markup. This module gathers the values.
The templates are found as the vendored assets are (logbroker.include_files), not next to
this file: a driver may import spark_apps from the `--py-files` archive, which holds only
Python files.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from logbroker.include_files import include_path
from pipeline_warehouse import layout
from pipeline_warehouse.filesystem import is_local, join, local_path
from pipeline_warehouse.time_format import format_duration_ms, format_hour, parse_hour
from spark_apps.audit.report_assets import asset_href, install
from spark_apps.hadoop_fs import HadoopFS

if TYPE_CHECKING:
    import pandas as pd

    from pipeline_warehouse.hour_states import HourState
    from spark_apps.audit.outcome import AuditOptions, AuditOutcome
    from spark_apps.audit.quality import Failure, QualityOutcome

HOURS_DIR = "hours"
TEMPLATES = include_path("report_templates")  # the checkout's, or the installed copy
BADGE = {
    "complete": "success",
    "no_data": "secondary",
    "incomplete": "warning",
    "pending": "warning",
    "lost": "danger",
    "unaccounted": "danger",
    "closed": "success",
    "audited": "info",
    "loaded": "secondary",
    "open": "light",
}
CSS = (
    "bootstrap@4.3.1/dist/css/bootstrap.min.css",
    "bootstrap-table@1.19.1/dist/bootstrap-table.min.css",
)
JS = (
    "jquery@3.7.1/dist/jquery.min.js",
    "bootstrap@4.3.1/dist/js/bootstrap.min.js",
    "bootstrap-table@1.19.1/dist/bootstrap-table.min.js",
    "vega@5.33.1/build/vega.min.js",
    "vega-lite@5.23.0/build/vega-lite.min.js",
    "vega-embed@6.29.0/build/vega-embed.min.js",
)
PROFILE_ON_PAGE = (  # of load_profile.PROFILE_COLUMNS
    "topic",
    "rows",
    "bad_records",
    "duplicates_dropped",
    "repeated_in_load",
    "null_event_time",
    "null_producer_id",
    "null_seq",
    "early_rows",
    "late_rows",
    "unregistered_rows",
    "schema_ids",
    "producers",
)


@cache
def templates() -> Environment:
    """The pages' templates: every value escaped; a value a template names and is not given
    is an error, not an empty cell."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=lambda value: "" if value is None else value,  # a missing value shows empty
    )
    env.policies["json.dumps_kwargs"] = {}  # the chart's spec in its own order (not sorted)
    env.globals["badges"] = BADGE
    return env


def _render(name: str, page: Path, reports: Path, **values: Any) -> str:
    """The template `name` for `page`, with relative links to the vendored CSS and JS."""
    css = [asset_href(page, reports, c) for c in CSS]
    js = [asset_href(page, reports, s) for s in JS]
    return templates().get_template(name).render(css=css, js=js, **values)


def _href(target: str, page: Path) -> str:
    """A link to a warehouse URI: relative for local files, the URI itself otherwise."""
    if is_local(target):
        return os.path.relpath(local_path(target), page.parent).replace(os.sep, "/") + "/"
    return target


def _window(r: Any) -> dict[str, Any]:
    return {
        **r._asdict(),
        "start": r.window_start.strftime("%H:%M"),
        "end": r.window_end.strftime("%H:%M"),
    }


def hour_page(
    hour: str,
    outcome: AuditOutcome,
    quality: QualityOutcome | None,
    states: list[HourState],
    opts: AuditOptions,
    page: Path,
    reports: Path,
) -> str:
    """The HTML of one audited hour's page (include/report_templates/hour.html)."""
    summary = outcome.summaries[hour]
    results = outcome.results[outcome.results["audit_hour"] == hour]
    counts = results["status"].value_counts().to_dict()
    failed = results[results["status"].isin(layout.FAILED_STATUSES) | (results["duplicates"] > 0)]
    failures: list[Failure] = quality.failures.get(hour, []) if quality else []
    pages = quality.pages.get(hour, {}) if quality else {}
    problems = []
    if len(failed):
        problems.append(f"{len(failed)} of {len(results)} windows failed")
    if failures:
        problems.append(f"{len(failures)} expectations failed")
    if summary["bad_audit_events"]:
        problems.append(f"{summary['bad_audit_events']} bad audit events")

    def load_href(topic: str, load_hour: str) -> str:
        return _href(layout.load_dir(opts.warehouse, topic, parse_hour(load_hour)), page)

    def rows_in(topic: str) -> list[tuple[str, str]]:
        """The loads that hold a window's rows and its counts: (link, label)."""
        return [
            (load_href(source, item["load_hour"]), f"{source} {item['load_hour']}")
            for source in (topic, layout.AUDIT_TOPIC)
            for item in summary["inputs"].get(source, [])
            if item["read"]
        ]

    uncounted = {(u["topic"], u["window_start"]): u for u in summary.get("uncounted_producers", [])}

    def producers_of(r: Any) -> str:
        """The producers of a window whose events no count covers: "a, b (+3 more)"."""
        u = uncounted.get((r.topic, r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ")))
        if u is None:
            return ""
        more = f" (+{u['more']} more)" if u["more"] else ""
        return ", ".join(u["producer_ids"]) + more

    prof = outcome.profiles[outcome.profiles["load_hour"] == hour]
    return _render(
        "hour.html",
        page,
        reports,
        hour=hour,
        audited_at=summary["audited_at"],
        grace=format_duration_ms(int(summary["grace_ms"])),
        n_topics=len(summary["topics"]),
        counts=[(s, int(n)) for s, n in sorted(counts.items())],
        problems=problems,
        waiting=int(results["status"].isin(layout.WAITING_STATUSES).sum()),
        pages=sorted(pages.items()),
        windows=[_window(r) for r in results.itertuples()],
        failed=[
            {**_window(r), "links": rows_in(r.topic), "uncounted": producers_of(r)}
            for r in failed.itertuples()
        ],
        chart=_chart(results),
        quality_ran=quality is not None,
        evaluated=quality.evaluated.get(hour, 0) if quality else 0,
        failures=[{**vars(f), "link": pages.get(f.suite), "where": _where(f)} for f in failures],
        bad_events=summary["bad_audit_events"],
        bad_reasons=list(summary["bad_audit_reasons"].items()),
        bad_examples=[_example(ex) for ex in summary["bad_audit_examples"]],
        states=states,
        profile_columns=[
            (c if c in ("topic", "schema_ids") else f"#{c}", c.replace("_", " "))
            for c in PROFILE_ON_PAGE
        ],
        profiles=prof.astype(object).where(prof.notna(), "-").to_dict("records"),
        loads=[
            {**i, "topic": t, "href": load_href(t, i["load_hour"])}
            for t, items in sorted(summary["inputs"].items())
            for i in items
        ],
    )


def _where(failure: Failure) -> str:
    """A failed expectation's rows (the first 20), or what it observed."""
    rows = "; ".join(", ".join(f"{k}={v}" for k, v in row.items()) for row in failure.rows[:20])
    return rows or json.dumps(failure.observed, default=str)


def _example(ex: dict[str, Any]) -> dict[str, Any]:
    """A bad audit event: where it is in the `_audit` loads, why it is bad, what it says."""
    where = " ".join(
        f"{k}={ex.get(k)}"
        for k in ("load_hour", "broker_id", "partition", "offset", "index")
        if k in ex
    )
    if ex.get("dropped"):
        where += " (dropped by the load, kept in its summary)"
    content = " ".join(
        f"{k}={ex.get(k)}"
        for k in ("topic", "tier", "window_start", "count")
        if ex.get(k) is not None
    )
    return {"where": where, "reason": ex.get("reason"), "content": content}


def _chart(results: pd.DataFrame) -> dict[str, Any]:
    """The vega-lite spec of the produced and loaded events per topic and window."""
    values = [
        {
            "topic": r.topic,
            "window": r.window_start.strftime("%H:%M"),
            "what": what,
            "events": int(v),
        }
        for r in results.itertuples()
        for what, v in (("produced", r.produced), ("loaded unique", r.loaded_unique))
    ]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": values},
        "mark": {"type": "bar"},
        "encoding": {
            "column": {"field": "topic", "type": "nominal"},
            "x": {"field": "window", "type": "ordinal", "title": None},
            "xOffset": {"field": "what"},
            "y": {"field": "events", "type": "quantitative"},
            "color": {"field": "what", "type": "nominal"},
        },
        "width": 260,
        "height": 140,
    }


def index_page(summaries: list[dict[str, Any]], page: Path, reports: Path) -> str:
    """The HTML of the reports' index (include/report_templates/index.html)."""
    hours = []
    for s in sorted(summaries, key=lambda s: s["audit_hour"], reverse=True):
        statuses: dict[str, int] = {}
        for per_topic in s.get("topic_statuses", {}).values():
            for k, v in per_topic.items():
                statuses[k] = statuses.get(k, 0) + int(v)
        hours.append(
            {
                "hour": s["audit_hour"],
                "statuses": sorted(statuses.items()),
                "bad": s.get("bad_audit_events", 0),
                "audited": s.get("audited_at"),
            }
        )
    return _render("index.html", page, reports, hours=hours, hours_dir=HOURS_DIR)


def write_reports(
    fs: HadoopFS, reports: str, wh: str, outcome: AuditOutcome, opts: AuditOptions
) -> dict[str, str]:
    """Write the page of every audited hour and the index; return hour -> page URI."""
    import tempfile

    from pipeline_warehouse.hour_states import hour_states, read_summary

    if is_local(reports):
        return _write_local(
            fs, local_path(reports), reports, wh, outcome, opts, hour_states, read_summary
        )
    with tempfile.TemporaryDirectory(prefix="audit-pages-") as tmp:
        out = _write_local(fs, Path(tmp), reports, wh, outcome, opts, hour_states, read_summary)
        for name in (HOURS_DIR, "index.html", "assets"):
            fs.copy_from_local(str(Path(tmp) / name), join(reports, name))
        return out


def _write_local(
    fs: HadoopFS,
    local: Path,
    reports: str,
    wh: str,
    outcome: AuditOutcome,
    opts: AuditOptions,
    hour_states: Any,
    read_summary: Any,
) -> dict[str, str]:
    install(local)
    (local / HOURS_DIR).mkdir(parents=True, exist_ok=True)
    states = hour_states(
        fs,
        wh,
        outcome.plan.topics,
        [parse_hour(h) for h in outcome.summaries],
        opts.now,
        opts.grace_ms,
    )
    out = {}
    for hour in outcome.summaries:
        page = local / HOURS_DIR / f"{hour}.html"
        mine = [s for s in states if format_hour(s.hour) == hour]
        page.write_text(
            hour_page(hour, outcome, outcome.quality, mine, opts, page, local), encoding="utf-8"
        )
        out[hour] = join(reports, HOURS_DIR, f"{hour}.html")
    summaries = []
    for entry in fs.list(layout.results_root(wh)):
        if entry.is_dir and entry.name.startswith("audit_hour="):
            summary = read_summary(fs, wh, parse_hour(entry.name.split("=", 1)[1]))
            if summary:
                summaries.append(summary)
    index = local / "index.html"
    index.write_text(index_page(summaries, index, local), encoding="utf-8")
    return out
