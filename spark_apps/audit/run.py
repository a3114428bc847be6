"""One audit run: plan, count, reconcile, write the hours, check them, report them.

The steps, in order (each module's doc has the detail):

1. inputs          which committed loads to read for the audited hours (and why);
2. reconcile       the warehouse's counts from each load's summary (load_summary): per window
                   rows and unique events; a profile per load;
3. audit_counts    the `_audit` topic: AuditCount events deduplicated, checked, summed;
4. results         one row per topic and window, with its status;
5. writing         per audited hour, `_audit_results/audit_hour=H/` (Parquet + _summary.json),
                   staged and put in place whole; the index of every load read;
6. quality         the Great Expectations checkpoint, its results kept, Data Docs built;
7. report          the report pages, one per audited hour.

`now` is the audit's clock: the grace is measured against it, and it is the `audited_at` of the
rows; tests and backfills inject it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline_warehouse import layout
from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import join, recover_replaced, replace_dir
from pipeline_warehouse.load_index import LoadIndex
from pipeline_warehouse.time_format import format_hour, format_instant, parse_hour
from spark_apps.audit.audit_counts import AuditEvents, audit_hour_of_bad_records, read_audit_events
from spark_apps.audit.inputs import Plan, add_found_inputs, make_plan, topics_without_data
from spark_apps.audit.load_profile import event_hours, load_profiles
from spark_apps.audit.outcome import AuditOptions, AuditOutcome, NothingToAuditError
from spark_apps.audit.reconcile import WarehouseCounts, count_warehouse
from spark_apps.audit.results import (
    build_results,
    parquet_bytes,
    topic_statuses,
    uncounted_producers,
)
from spark_apps.hadoop_fs import HadoopFS

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession


class _Clock:
    """Seconds spent per step, for the summary and the benchmark."""

    def __init__(self, timings: dict[str, float], progress: Callable[[str], None] | None) -> None:
        self.timings = timings
        self.progress = progress
        self._step: str | None = None
        self._start = 0.0

    def step(self, name: str) -> None:
        self.stop()
        self._step, self._start = name, time.perf_counter()
        if self.progress:
            self.progress(name)

    def stop(self) -> None:
        if self._step is not None:
            self.timings[self._step] = (
                self.timings.get(self._step, 0.0) + time.perf_counter() - self._start
            )
            self._step = None


def run_audit(
    spark: SparkSession, opts: AuditOptions, progress: Callable[[str], None] | None = None
) -> AuditOutcome:
    """Audit `opts.hours` of `opts.warehouse` (see the module doc)."""
    timings: dict[str, float] = {}
    clock = _Clock(timings, progress)
    wh = opts.warehouse
    fs = HadoopFS(spark)
    hours = sorted(set(opts.hours))

    clock.step("plan")
    recover_replaced(fs, layout.results_root(wh))
    plan = make_plan(fs, wh, hours, opts.grace_ms, opts.topics)
    event_loads = [load for topic in plan.topics for load in plan.loads_read(topic)]

    clock.step("count warehouse rows")
    counts = count_warehouse(spark, fs, wh, event_loads, hours)
    indexes: list[LoadIndex] = []
    held_by_load = event_hours(counts.profile)
    for load in event_loads:
        held, untimed = held_by_load.get((load.topic, load.load_hour), ({}, 0))
        add_found_inputs(plan, load.topic, load.hour, held)
        indexes.append(
            LoadIndex(load.topic, load.hour, load.committed_at, load.rows_sha256, held, untimed)
        )

    clock.step("audit events")
    audit_loads = plan.loads_read(layout.AUDIT_TOPIC)
    inputs_read = {
        h: {lh for lh, read in plan.inputs.get(h, {}).get(layout.AUDIT_TOPIC, {}).items() if read}
        for h in hours
    }
    events = read_audit_events(
        spark,
        wh,
        audit_loads,
        hours,
        Warehouse(wh, fs).topics(),
        audit_hour_of_bad_records(audit_loads, inputs_read),
        opts.now,
        opts.skew_ms,
    )
    for load in audit_loads:
        held = events.index.get(load.load_hour, {})
        add_found_inputs(plan, layout.AUDIT_TOPIC, load.hour, held)
        by_topic = events.index_by_topic.get(load.load_hour, {})
        indexes.append(
            LoadIndex(load.topic, load.hour, load.committed_at, load.rows_sha256, held, 0, by_topic)
        )

    if opts.topics is not None:  # a name asked for that has nothing here: say so, write nothing
        nothing = topics_without_data(plan, opts.topics, events.index_by_topic)
        if nothing:
            clock.stop()
            span = format_hour(hours[0]) + (f"..{format_hour(hours[-1])}" if len(hours) > 1 else "")
            raise NothingToAuditError(
                f"--topics {','.join(nothing)}: no load in {wh} and no producer count for "
                f"{'it' if len(nothing) == 1 else 'them'} in {span} (a typo?); nothing audited, "
                "no result replaced"
            )

    clock.step("reconcile")
    results = build_results(
        plan.topics, hours, counts.windows, events.sums, opts.now, opts.grace_ms
    )
    registered = None
    if opts.schema_registry:
        from spark_apps.audit.schema_ids import registered_ids

        registered = registered_ids(opts.schema_registry, plan.topics)
    hour_loads = [load for load in event_loads if load.hour in set(hours)]
    profiles = load_profiles(
        hour_loads, counts.profile, counts.within_load, opts.lateness_ms, opts.skew_ms, registered
    )
    summaries = _summaries(plan, results, profiles, events, counts, opts)

    clock.step("write results")
    _write(fs, wh, results, summaries, indexes)

    outcome = AuditOutcome(
        results,
        summaries,
        profiles,
        plan,
        timings=timings,
        loads_counted_from_rows=counts.summarized,
        contested_pairs=counts.contested_pairs,
    )
    if opts.quality:
        from spark_apps.audit.quality import run_quality
        from spark_apps.audit.report import write_reports

        reports = opts.reports or layout.default_reports(wh)
        clock.step("expectations and data docs")
        outcome.quality = run_quality(spark, fs, reports, outcome, opts)
        clock.step("report pages")
        outcome.report_pages = write_reports(fs, reports, wh, outcome, opts)
    clock.stop()
    return outcome


def _summaries(
    plan: Plan,
    results: pd.DataFrame,
    profiles: pd.DataFrame,
    events: AuditEvents,
    counts: WarehouseCounts,
    opts: AuditOptions,
) -> dict[str, dict[str, Any]]:
    statuses = topic_statuses(results)
    uncounted = uncounted_producers(results, counts.profile, events.counters)
    out: dict[str, dict[str, Any]] = {}
    for hour in plan.hours:
        name = format_hour(hour)
        inputs: dict[str, list[dict[str, Any]]] = {}
        for topic, considered in sorted(plan.inputs.get(hour, {}).items()):
            loads = plan.scanned[topic].loads
            inputs[topic] = [
                {
                    "load_hour": format_hour(lh),
                    "committed_at": loads[lh].committed_at,
                    "rows_sha256": loads[lh].rows_sha256,
                    "read": read,
                }
                for lh, read in sorted(considered.items())
            ]
        bad = events.bad_counts.get(name, {})
        hour_profiles = profiles[profiles["load_hour"] == name]
        out[name] = {
            "audit_hour": name,
            "audited_at": format_instant(opts.now),
            "now": format_instant(opts.now),
            "grace_ms": opts.grace_ms,
            "window_ms": 600_000,
            "topics": list(plan.topics),
            "inputs": inputs,
            "topic_statuses": statuses.get(name, {}),
            "uncounted_producers": uncounted.get(name, []),
            "bad_audit_events": int(sum(bad.values())),
            "bad_audit_reasons": dict(sorted(bad.items())),
            "bad_audit_examples": _jsonable(events.bad_examples.get(name, [])),
            "topic_hours": _jsonable(
                hour_profiles.astype(object).where(hour_profiles.notna(), None).to_dict("records")
            ),
            "dedup_key": counts.exact_keys,
        }
    return out


def _jsonable(value: Any) -> Any:
    return json.loads(
        json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v))
    )


def _write(
    fs: HadoopFS,
    wh: str,
    results: pd.DataFrame,
    summaries: dict[str, dict[str, Any]],
    indexes: list[LoadIndex],
) -> None:
    """Stage every audited hour, then put each in place whole; then the load indexes."""
    root = layout.results_root(wh)
    staging = join(root, "_staging", uuid.uuid4().hex[:12])
    rows_of = dict(tuple(results.groupby("audit_hour"))) if len(results) else {}
    for name, summary in summaries.items():
        staged = join(staging, f"audit_hour={name}")
        if name in rows_of:  # one file per hour, as Spark's writer named it
            part = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
            fs.write_bytes(join(staged, part), parquet_bytes(rows_of[name]))
        fs.write_text(
            join(staged, layout.SUMMARY_FILE), json.dumps(summary, indent=1, sort_keys=True)
        )
        replace_dir(fs, staged, layout.results_dir(wh, parse_hour(name)))
    fs.delete(staging)
    for index in indexes:
        fs.write_text(
            layout.index_file(wh, index.topic, index.load_hour),
            json.dumps(index.to_json(), indent=1, sort_keys=True),
        )
