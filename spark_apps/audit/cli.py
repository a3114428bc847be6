"""spark-submit spark_apps/jobs/audit.py: reconcile producer counts with the warehouse, per window.

The paper's audit (section 4; docs/design.md §3.5, §3.6): producers publish how many events they sent
per topic and 10-minute window (the `_audit` topic); this application compares those counts
with what the warehouse holds, writes one row per topic and window to
`<warehouse>/_audit_results/`, checks the hour with Great Expectations and builds the reports.
Run `--help` for the options; docs/audit.md explains the results.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline_warehouse.layout import AUDIT_TOPIC, STATUSES
from pipeline_warehouse.time_format import (
    argparse_type,
    format_hour,
    parse_duration_ms,
    parse_hour_range,
    parse_instant,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_apps.audit.outcome import AuditOutcome

FAIL_ON = (
    "lost",
    "incomplete",
    "pending",
    "unaccounted",
    "duplicates",
    "bad_audit_events",
    "expectations",
)
EXIT_FAILED_CHECKS = 3
EXIT_BAD_ARGUMENTS = 2  # argparse's

EPILOG = """\
what it reads:
  the warehouse of the hourly load (docs/design.md §3.6): committed hours only (those with a checkpoint
  under _checkpoints/<topic>/), for every topic and for `_audit` (the AuditCount events). An
  hour's events may arrive late, so the audit of hour H reads the loads of H and of the hours
  after it up to the grace, and any later load whose index says it holds events of H.

what it writes:
  <warehouse>/_audit_results/audit_hour=<H>/   one row per topic and 10-minute window, replaced
      whole on re-audit: topic, window_start, window_end, produced, mirrored, loaded_rows,
      loaded_unique, duplicates, missing, unaccounted, status, audited_at; and _summary.json
  <reports>/index.html, <reports>/hours/<H>.html   one page per audited hour
  <reports>/data_docs/                         Great Expectations Data Docs (styled offline)

statuses:
  complete      produced = loaded unique
  incomplete    missing > 0, within the grace (late events may still come)
  lost          missing > 0 after the grace
  pending       more loaded than produced, within the grace (the counts may still come: a
                window's counts are published after it ends, the last window's in the next hour)
  unaccounted   more loaded than produced after the grace (an unaudited producer, or one
                killed before it published its counts)
  no_data       nothing produced, nothing loaded

exit status:
  0 when the audit ran, whatever it found (failed windows and expectations are results);
  3 when --fail-on names something it found; 2 for bad arguments, and for a --topics name
  with no load and no producer count in the hours asked (nothing is written); 1 for an error.

examples:
  spark-submit --master 'local[2]' spark_apps/jobs/audit.py --warehouse file:///data/wh \\
      --hours 2026-11-22T10
  spark-submit spark_apps/jobs/audit.py --warehouse hdfs://nn:8020/wh \\
      --hours 2026-11-22T00..2026-11-22T23 --grace 2h --fail-on lost,unaccounted
  spark-submit spark_apps/jobs/audit.py --warehouse file:///data/wh --hours 2026-11-22T10 \\
      --topics page_views,searches --reports /var/www/audit --now 2026-11-22T13:30:00Z
  spark-submit spark_apps/jobs/audit.py --warehouse file:///data/wh --hours 2026-11-22T14 \\
      --also-reopened --schema-registry 127.0.0.1:2181/registry
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spark-submit spark_apps/jobs/audit.py",
        description="Reconcile the producers' counts (the _audit topic) with every tier and with the\n"
        "warehouse, per topic and 10-minute event-time window; write the results, check them with\n"
        "Great Expectations and build a report page per audited hour.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--warehouse",
        required=True,
        metavar="URI",
        help="the warehouse root: file://, hdfs://, s3a://, or a local path",
    )
    p.add_argument(
        "--hours",
        required=True,
        type=argparse_type(parse_hour_range),
        metavar="FROM..TO",
        help="hours to audit, UTC, both ends included: 2026-11-22T10..2026-11-22T12, or one hour",
    )
    p.add_argument(
        "--topics",
        action="append",
        metavar="T1,T2",
        type=_topic_list,
        help="topics to audit (comma-separated, repeatable; legal topic names, not the "
        "warehouse's own names starting with '_'; one with no load and no producer count in "
        "the hours asked is refused, exit 2); default every topic in the warehouse",
    )
    p.add_argument(
        "--grace",
        type=argparse_type(parse_duration_ms),
        default=parse_duration_ms("2h"),
        metavar="DURATION",
        help="lateness grace after a window's end: missing events are `incomplete` within it, `lost` after; "
        "events without counts `pending` within it, `unaccounted` after (default 2h)",
    )
    p.add_argument(
        "--reports", metavar="DIR", help="where the reports go (default <warehouse>/_reports)"
    )
    p.add_argument(
        "--fail-on",
        default="",
        metavar="WHAT",
        help=f"exit {EXIT_FAILED_CHECKS} when any audited window has one of these (comma-separated): {', '.join(FAIL_ON)}",
    )
    p.add_argument(
        "--now",
        type=argparse_type(parse_instant),
        metavar="INSTANT",
        help="the audit's clock, e.g. 2026-11-22T13:30:00Z (default: now); the grace is measured against it",
    )
    p.add_argument(
        "--also-reopened",
        action="store_true",
        help="also re-audit the hours of the 7 days before FROM that need it: reopened by late data or a backfill, "
        "or incomplete or pending with the grace now passed",
    )
    p.add_argument(
        "--schema-registry",
        metavar="CONNECT",
        help="the registry's ZooKeeper connect string, to check schema ids",
    )
    p.add_argument(
        "--max-bad-fraction",
        type=float,
        default=0.01,
        metavar="F",
        help="bad records allowed per loaded topic hour (default 0.01)",
    )
    p.add_argument(
        "--max-lateness",
        type=argparse_type(parse_duration_ms),
        default=parse_duration_ms("1d"),
        metavar="DURATION",
        help="plausible event times of a load start this long before its hour (default 1d)",
    )
    p.add_argument(
        "--max-skew",
        type=argparse_type(parse_duration_ms),
        default=parse_duration_ms("10m"),
        metavar="DURATION",
        help="... and end this long after it (producers' clocks ahead; default 10m)",
    )
    p.add_argument(
        "--no-quality",
        action="store_true",
        help="write the results only: no Great Expectations, no reports",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def _topic_list(text: str) -> list[str]:
    """Checked before anything is read: a name that is not a topic's (`..`, `a/b`, `_x`) never
    becomes a path in the warehouse; `_audit` is the producers' counts, not audited itself."""
    from pipeline_warehouse.topics import PipelineTopicError, parse_topic_list

    try:
        topics = parse_topic_list(text)
    except PipelineTopicError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if AUDIT_TOPIC in topics:
        raise argparse.ArgumentTypeError(
            f"{AUDIT_TOPIC!r} holds the producers' counts: it is read for every audit, not "
            "audited itself"
        )
    return topics


def _fail_on(text: str) -> set[str]:
    wanted = {w.strip() for w in text.split(",") if w.strip()}
    unknown = wanted - set(FAIL_ON)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"--fail-on takes {', '.join(FAIL_ON)}; got {', '.join(sorted(unknown))}"
        )
    return wanted


def _spark() -> tuple[SparkSession, bool]:
    """The active SparkSession (tests, Airflow tasks), or the project's session (spark-submit:
    its master; plain python: local[2]); True when this run made it and must stop it."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    from spark_apps.session import build_session

    return build_session("logbroker-audit", master="local[2]"), True


def summary_line(hours: list[datetime], outcome: AuditOutcome, reports: str | None) -> str:
    span = (
        format_hour(hours[0])
        if len(hours) == 1
        else f"{format_hour(hours[0])}..{format_hour(hours[-1])}"
    )
    counts = outcome.status_counts()
    statuses = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s))
    parts = [
        f"audit {span}: {len(outcome.results)} windows ({statuses or 'none'})",
        f"missing {outcome.totals('missing')}",
        f"duplicates {outcome.totals('duplicates')}",
        f"unaccounted {outcome.totals('unaccounted')}",
        f"bad audit events {outcome.bad_audit_events()}",
    ]
    if outcome.quality is not None:
        evaluated = sum(outcome.quality.evaluated.values())
        failed = sum(len(f) for f in outcome.quality.failures.values())
        parts.append(f"expectations {evaluated - failed}/{evaluated} passed")
    if reports:
        parts.append(f"report {reports}/index.html")
    return "; ".join(parts)


def loads_line(read: int, from_rows: int, contested: int) -> str:
    """How the audit counted the loads it read: from their _load_summary.json (the usual
    way), from their rows (no summary that matches their files: one is kept now), and the
    (window, producer) pairs two loads may share, whose rows it read to deduplicate."""

    def n(count: int, one: str, many: str) -> str:
        return f"{count} {one if count == 1 else many}"

    line = f"audit: counted {n(read, 'load', 'loads')}"
    if read and not from_rows:
        line += " from " + ("its summary" if read == 1 else "their summaries")
    elif from_rows:
        line += (
            f": {read - from_rows} from summaries, {from_rows} from rows (without a summary "
            "that matches the files; the audit keeps one now under _audit_results/_load_summaries/)"
        )
    if contested:
        line += (
            f"; rows read again for {n(contested, '(window, producer) pair', '(window, producer) pairs')} "
            "that two loads may share"
        )
    return line


def found(outcome: AuditOutcome, wanted: set[str]) -> list[str]:
    """What of `wanted` (--fail-on) the outcome has, as phrases."""
    out = []
    counts = outcome.status_counts()
    for status in ("lost", "incomplete", "pending", "unaccounted"):
        if status in wanted and counts.get(status):
            out.append(f"{counts[status]} {status} windows")
    if "duplicates" in wanted and outcome.totals("duplicates"):
        out.append(f"{outcome.totals('duplicates')} duplicates")
    if "bad_audit_events" in wanted and outcome.bad_audit_events():
        out.append(f"{outcome.bad_audit_events()} bad audit events")
    if "expectations" in wanted and outcome.quality is not None and not outcome.quality.success:
        out.append("failed expectations")
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        wanted = _fail_on(args.fail_on)
    except argparse.ArgumentTypeError as err:
        p.error(str(err))
    from pipeline_warehouse.filesystem import as_uri
    from pipeline_warehouse.layout import default_reports
    from spark_apps.audit.outcome import AuditOptions, NothingToAuditError
    from spark_apps.audit.run import run_audit

    warehouse = as_uri(args.warehouse)
    now = args.now or datetime.now(UTC)
    topics = sorted({t for group in args.topics or [] for t in group}) or None
    reports = as_uri(args.reports) if args.reports else default_reports(warehouse)
    spark, owned = _spark()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")

    def progress(step: str) -> None:
        if not args.quiet:
            print(f"audit: {step}", file=sys.stderr, flush=True)

    try:
        hours = list(args.hours)
        if args.also_reopened:
            hours = sorted(
                set(hours)
                | set(reopened_hours(spark, warehouse, hours[0], now, args.grace, topics))
            )
            if len(hours) > len(args.hours):
                progress(
                    f"re-auditing also {', '.join(format_hour(h) for h in hours if h not in args.hours)}"
                )
        opts = AuditOptions(
            warehouse=warehouse,
            hours=hours,
            now=now,
            grace_ms=args.grace,
            topics=topics,
            reports=reports,
            quality=not args.no_quality,
            schema_registry=args.schema_registry,
            max_bad_fraction=args.max_bad_fraction,
            lateness_ms=args.max_lateness,
            skew_ms=args.max_skew,
        )
        outcome = run_audit(spark, opts, progress)
    except NothingToAuditError as exc:
        print(f"audit: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_ARGUMENTS
    finally:
        if owned:
            spark.stop()
    read = sum(len(outcome.plan.loads_read(t)) for t in outcome.plan.topics)
    print(
        loads_line(read, outcome.loads_counted_from_rows, outcome.contested_pairs),
        file=sys.stderr,
        flush=True,
    )
    print(summary_line(hours, outcome, None if args.no_quality else reports), flush=True)
    failing = found(outcome, wanted)
    if failing:
        print(f"audit: failing (--fail-on {args.fail_on}): {', '.join(failing)}", file=sys.stderr)
        return EXIT_FAILED_CHECKS
    return 0


def reopened_hours(
    spark: SparkSession,
    warehouse: str,
    first: datetime,
    now: datetime,
    grace_ms: int,
    topics: list[str] | None,
) -> list[datetime]:
    """Hours of the 7 days before `first` whose files say an audit would change them."""
    from datetime import timedelta

    from pipeline_warehouse.checkpoint import Warehouse
    from pipeline_warehouse.hour_states import hour_states
    from pipeline_warehouse.layout import is_event_topic
    from pipeline_warehouse.time_format import hours_between
    from spark_apps.hadoop_fs import HadoopFS

    fs = HadoopFS(spark)
    names = topics or [t for t in Warehouse(warehouse, fs).topics() if is_event_topic(t)]
    window = hours_between(first - timedelta(days=7), first - timedelta(hours=1))
    states = hour_states(fs, warehouse, names, window, now, grace_ms)
    return sorted({s.hour for s in states if s.state != "open" and s.needs_audit(now, grace_ms)})


if __name__ == "__main__":
    sys.exit(main())
