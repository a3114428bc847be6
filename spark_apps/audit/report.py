"""The audit's report pages: one per audited hour, and an index (layout: quality's doc).

A page says, for one hour: the verdict, every window that failed and by how much (missing,
duplicates, unaccounted), the loads that hold the window's rows (links to their directories) and
the `_audit` loads that hold its counts, the failed expectations with links to their Data Docs
pages, the loaded topic hours' profiles, the bad audit events with their positions, and the
hour's state per topic. It uses the vendored bootstrap, bootstrap-table and vega (report_assets),
so it renders styled offline; a small script marks `<body data-styled data-scripts>` once the
stylesheet applied and the scripts ran (the headless-browser test reads those).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
# Marks the page once the vendored stylesheet applied (bootstrap makes .badge inline-block) and
# the scripts ran (jQuery, bootstrap-table and vega-embed defined); the chart is vega's work.
SELF_CHECK = """
<script>
document.addEventListener("DOMContentLoaded", function () {
  var probe = document.querySelector(".badge");
  document.body.dataset.styled = probe && getComputedStyle(probe).display === "inline-block" ? "yes" : "no";
  var scripts = typeof jQuery !== "undefined" && !!jQuery.fn.bootstrapTable && typeof vegaEmbed !== "undefined";
  document.body.dataset.scripts = scripts ? "yes" : "no";
  if (scripts) {
    jQuery("table[data-toggle=table]").bootstrapTable();
    var spec = document.getElementById("chart-spec");
    if (spec) {
      vegaEmbed("#chart", JSON.parse(spec.textContent), {actions: false, renderer: "svg"})
        .then(function () { document.body.dataset.chart = "yes"; });
    }
  }
});
</script>
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _page(title: str, body: str, page: Path, reports: Path) -> str:
    css = "\n".join(f'<link rel="stylesheet" href="{asset_href(page, reports, c)}">' for c in CSS)
    js = "\n".join(f'<script src="{asset_href(page, reports, s)}"></script>' for s in JS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
{css}
<style>body {{ padding: 1.5rem; }} td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
h2 {{ margin-top: 2rem; font-size: 1.4rem; }} .small-links a {{ margin-right: .6rem; }}</style>
{js}
</head>
<body>
<div class="container-fluid">
{body}
</div>
{SELF_CHECK}
</body></html>
"""


def _badge(text: str, count: int | None = None) -> str:
    label = text if count is None else f"{text} {count}"
    return (
        f'<span class="badge badge-{BADGE.get(text, "dark")} status-{_e(text)}">{_e(label)}</span>'
    )


def _href(target: str, page: Path) -> str:
    """A link to a warehouse URI: relative for local files, the URI itself otherwise."""
    if is_local(target):
        return os.path.relpath(local_path(target), page.parent).replace(os.sep, "/") + "/"
    return target


def _table(
    columns: list[tuple[str, str]],
    rows: Iterable[dict[str, Any]],
    table_id: str,
    sortable: bool = True,
) -> str:
    head = "".join(
        f'<th data-field="{_e(k)}" data-sortable="true"{" class=num" if k.startswith("#") else ""}>{_e(label)}</th>'
        for k, label in columns
    )
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key, "")
            cls = ' class="num"' if key.startswith("#") else ""
            cells.append(f"<td{cls}>{value}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    toggle = ' data-toggle="table" data-search="true"' if sortable else ""
    return (
        f'<table id="{table_id}" class="table table-sm table-striped table-hover"{toggle}>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def hour_page(
    hour: str,
    outcome: AuditOutcome,
    quality: QualityOutcome | None,
    states: list[HourState],
    opts: AuditOptions,
    page: Path,
    reports: Path,
) -> str:
    """The HTML of one audited hour's page."""
    summary = outcome.summaries[hour]
    results = outcome.results[outcome.results["audit_hour"] == hour]
    counts = results["status"].value_counts().to_dict()
    failed = results[results["status"].isin(layout.FAILED_STATUSES) | (results["duplicates"] > 0)]
    waiting = int(results["status"].isin(layout.WAITING_STATUSES).sum())
    failures: list[Failure] = quality.failures.get(hour, []) if quality else []
    pages = quality.pages.get(hour, {}) if quality else {}
    n_windows = len(results)
    if failed.empty and not failures and not summary["bad_audit_events"] and waiting:
        verdict = (
            f'<div class="alert alert-warning" id="verdict">Nothing failed; {waiting} of '
            f"{n_windows} windows wait within the grace for late events (incomplete) or "
            "their producers' counts (pending).</div>"
        )
    elif failed.empty and not failures and not summary["bad_audit_events"]:
        verdict = f'<div class="alert alert-success" id="verdict">All {n_windows} windows are complete or without data; every expectation passed.</div>'
    else:
        what = []
        if len(failed):
            what.append(f"{len(failed)} of {n_windows} windows failed")
        if failures:
            what.append(f"{len(failures)} expectations failed")
        if summary["bad_audit_events"]:
            what.append(f"{summary['bad_audit_events']} bad audit events")
        verdict = f'<div class="alert alert-danger" id="verdict">{_e("; ".join(what))}.</div>'
    grace = format_duration_ms(int(summary["grace_ms"]))
    head = (
        f"<h1>Audit of {_e(hour)}:00 UTC</h1>"
        f'<p class="text-muted">audited at {_e(summary["audited_at"])} &middot; grace {_e(grace)} &middot; '
        f"{len(summary['topics'])} topics &middot; deduplication by (producer_id, seq)</p>"
        f"<p>{' '.join(_badge(s, int(n)) for s, n in sorted(counts.items()))}</p>{verdict}"
        f'<p class="small-links"><a href="../index.html">all hours</a>'
        + "".join(f'<a href="../{_e(p)}">Data Docs: {_e(s)}</a>' for s, p in sorted(pages.items()))
        + "</p>"
    )

    def window_links(topic: str) -> str:
        links = []
        for source in (topic, layout.AUDIT_TOPIC):
            for item in summary["inputs"].get(source, []):
                if item["read"]:
                    target = layout.load_dir(opts.warehouse, source, parse_hour(item["load_hour"]))
                    links.append(
                        f'<a href="{_e(_href(target, page))}">{_e(source)} {_e(item["load_hour"])}</a>'
                    )
        return " ".join(links)

    failed_rows = [
        {
            "topic": _e(r.topic),
            "window": _e(r.window_start.strftime("%H:%M"))
            + "&ndash;"
            + _e(r.window_end.strftime("%H:%M")),
            "status": _badge(r.status),
            "#produced": r.produced,
            "#mirrored": r.mirrored,
            "#loaded_unique": r.loaded_unique,
            "#missing": f"<strong>{r.missing}</strong>" if r.missing else 0,
            "#duplicates": f"<strong>{r.duplicates}</strong>" if r.duplicates else 0,
            "#unaccounted": f"<strong>{r.unaccounted}</strong>" if r.unaccounted else 0,
            "rows": window_links(r.topic),
        }
        for r in failed.itertuples()
    ]
    window_cols = [
        ("topic", "topic"),
        ("window", "window (UTC)"),
        ("status", "status"),
        ("#produced", "produced"),
        ("#mirrored", "mirrored"),
        ("#loaded_unique", "loaded unique"),
        ("#missing", "missing"),
        ("#duplicates", "duplicates"),
        ("#unaccounted", "unaccounted"),
    ]
    failed_html = "<h2>Failed windows</h2>" + (
        _table([*window_cols, ("rows", "rows in")], failed_rows, "failed-windows", sortable=False)
        if failed_rows
        else "<p>None.</p>"
    )
    all_rows = [
        {
            "topic": _e(r.topic),
            "window": _e(r.window_start.strftime("%H:%M")),
            "status": _badge(r.status),
            "#produced": r.produced,
            "#mirrored": r.mirrored,
            "#loaded_rows": r.loaded_rows,
            "#loaded_unique": r.loaded_unique,
            "#missing": r.missing,
            "#duplicates": r.duplicates,
            "#unaccounted": r.unaccounted,
        }
        for r in results.itertuples()
    ]
    all_html = "<h2>Every window</h2>" + _table(
        [*window_cols[:5], ("#loaded_rows", "loaded rows"), *window_cols[5:]],
        all_rows,
        "all-windows",
    )
    chart = _chart(results)
    exp_html = "<h2>Expectations</h2>"
    if quality is None:
        exp_html += "<p>Not run (--no-quality).</p>"
    elif not failures:
        exp_html += f"<p>All {quality.evaluated.get(hour, 0)} expectations passed.</p>"
    else:
        items = []
        for f in failures:
            rows = "; ".join(", ".join(f"{k}={v}" for k, v in row.items()) for row in f.rows[:20])
            link = pages.get(f.suite)
            items.append(
                {
                    "suite": f'<a href="../{_e(link)}">{_e(f.suite)}</a>' if link else _e(f.suite),
                    "expectation": f"{_e(f.expectation)}({_e(f.column or '')})",
                    "what": _e(f.notes),
                    "#unexpected": _e(
                        f.unexpected_count if f.unexpected_count is not None else "-"
                    ),
                    "rows": _e(rows or json.dumps(f.observed, default=str)),
                }
            )
        exp_html += _table(
            [
                ("suite", "suite"),
                ("expectation", "expectation"),
                ("what", "checks"),
                ("#unexpected", "unexpected"),
                ("rows", "where"),
            ],
            items,
            "failed-expectations",
            sortable=False,
        )
    prof = outcome.profiles[outcome.profiles["load_hour"] == hour]
    prof_html = "<h2>Loaded topic hours</h2>" + _table(
        [
            (c if c in ("topic", "schema_ids") else f"#{c}", c.replace("_", " "))
            for c in (
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
        ],
        [
            {(c if c in ("topic", "schema_ids") else f"#{c}"): _e(v) for c, v in row.items()}
            for row in prof.astype(object).where(prof.notna(), "-").to_dict("records")
        ],
        "loaded-topic-hours",
    )
    bad_html = "<h2>Bad audit events</h2>"
    if summary["bad_audit_events"]:
        bad_html += _table(
            [("reason", "reason"), ("#events", "events")],
            [{"reason": _e(k), "#events": v} for k, v in summary["bad_audit_reasons"].items()],
            "bad-audit-reasons",
            sortable=False,
        )
        bad_html += "<p>Examples, with their place in the <code>_audit</code> loads:</p>" + _table(
            [("where", "where"), ("reason", "reason"), ("content", "event")],
            [
                {
                    "where": _e(
                        " ".join(
                            f"{k}={ex.get(k)}"
                            for k in ("load_hour", "broker_id", "partition", "offset", "index")
                            if k in ex
                        )
                        + (
                            " (dropped by the load, kept in its summary)"
                            if ex.get("dropped")
                            else ""
                        )
                    ),
                    "reason": _e(ex.get("reason")),
                    "content": _e(
                        " ".join(
                            f"{k}={ex.get(k)}"
                            for k in ("topic", "tier", "window_start", "count")
                            if ex.get(k) is not None
                        )
                    ),
                }
                for ex in summary["bad_audit_examples"]
            ],
            "bad-audit-examples",
            sortable=False,
        )
    else:
        bad_html += "<p>None.</p>"
    state_html = "<h2>Hour state</h2>" + _table(
        [("topic", "topic"), ("state", "state"), ("why", "why")],
        [
            {
                "topic": _e(s.topic),
                "state": _badge(s.state) + (" " + _badge("reopened") if s.reopened else ""),
                "why": "<br>".join(_e(r) for r in s.reasons),
            }
            for s in states
        ],
        "hour-states",
        sortable=False,
    )
    inputs_html = "<h2>Loads read</h2>" + _table(
        [
            ("topic", "topic"),
            ("load", "load hour"),
            ("committed", "committed at"),
            ("read", "read"),
        ],
        [
            {
                "topic": _e(t),
                "load": f'<a href="{_e(_href(layout.load_dir(opts.warehouse, t, parse_hour(i["load_hour"])), page))}">{_e(i["load_hour"])}</a>',
                "committed": _e(i["committed_at"]),
                "read": "yes" if i["read"] else "no (its index holds none of this hour)",
            }
            for t, items in sorted(summary["inputs"].items())
            for i in items
        ],
        "loads-read",
    )
    body = (
        head
        + failed_html
        + chart
        + exp_html
        + bad_html
        + state_html
        + all_html
        + prof_html
        + inputs_html
    )
    return _page(f"Audit {hour}", body, page, reports)


def _chart(results: pd.DataFrame) -> str:
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
    spec = {
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
    return (
        '<h2>Produced and loaded per window</h2><div id="chart"></div>'
        f'<script type="application/json" id="chart-spec">{html.escape(json.dumps(spec), quote=False)}</script>'
    )


def index_page(summaries: list[dict[str, Any]], page: Path, reports: Path) -> str:
    rows = []
    for s in sorted(summaries, key=lambda s: s["audit_hour"], reverse=True):
        statuses: dict[str, int] = {}
        for per_topic in s.get("topic_statuses", {}).values():
            for k, v in per_topic.items():
                statuses[k] = statuses.get(k, 0) + int(v)
        rows.append(
            {
                "hour": f'<a href="{HOURS_DIR}/{_e(s["audit_hour"])}.html">{_e(s["audit_hour"])}</a>',
                "windows": " ".join(_badge(k, v) for k, v in sorted(statuses.items())),
                "#bad": s.get("bad_audit_events", 0),
                "audited": _e(s.get("audited_at")),
            }
        )
    body = (
        "<h1>logbroker audit</h1>"
        '<p class="small-links"><a href="data_docs/index.html">Great Expectations Data Docs</a></p>'
        + _table(
            [
                ("hour", "hour (UTC)"),
                ("windows", "windows"),
                ("#bad", "bad audit events"),
                ("audited", "audited at"),
            ],
            rows,
            "hours",
        )
    )
    return _page("logbroker audit", body, page, reports)


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
