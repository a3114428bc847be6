"""The audit counts from each load's `_load_summary.json`, and from the rows only where it must.

A first audit of a warehouse without summaries (scenarios write none for the event topics, as
a warehouse from before them) counts every load from its rows and keeps their summaries in its own area (never
in a load's directory); the next audit reads only those, and its results are the same. Rows deleted by hand after that make the load's
summary stale: it is counted from its rows again, and the loss is exact. A name shared by two
loads (the faulty warehouse's duplicates) is found by reading just that window's rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline_warehouse.filesystem import as_uri
from pipeline_warehouse.load_summary import SUMMARY_FILE
from spark_apps.audit.run import AuditOptions, AuditOutcome, run_audit

from .scenarios import FAULTS, HOURS, LATE, PER_WINDOW, TOPICS, at, clean, faulty

pytestmark = pytest.mark.slow

KEPT = "_audit_results/_load_summaries"  # where the audit keeps the summaries it counted
COUNTS = ["topic", "window", "loaded_rows", "loaded_unique", "duplicates", "missing", "status"]


def audit(spark: Any, root: Path) -> AuditOutcome:
    opts = AuditOptions(warehouse=as_uri(str(root)), hours=HOURS, now=LATE, quality=False)
    return run_audit(spark, opts)


def counts(out: AuditOutcome) -> list[tuple[Any, ...]]:
    return sorted(out.results[COUNTS].itertuples(index=False, name=None))


def test_second_audit_reads_summaries_only_and_agrees(spark: Any, tmp_path: Path) -> None:
    root = faulty(tmp_path / "wh")
    first = audit(spark, root)
    kept = list(root.glob(f"{KEPT}/*/*.json"))
    assert first.loads_counted_from_rows > 0 and len(kept) == first.loads_counted_from_rows
    for topic in TOPICS:  # the loads' own: untouched (the scenarios write only `_audit`'s)
        assert not list(root.glob(f"{topic}/load_hour=*/{SUMMARY_FILE}"))
    second = audit(spark, root)
    assert second.loads_counted_from_rows == 0
    assert counts(second) == counts(first)
    # the duplicated window: its two loads share names, so only its rows were read again
    assert second.contested_pairs >= 1
    dup = second.results[
        (second.results["topic"] == FAULTS.dup_topic)
        & (second.results["window"] == at(FAULTS.dup_window))
    ].iloc[0]
    assert (dup.loaded_rows, dup.loaded_unique) == (PER_WINDOW + FAULTS.duplicates, PER_WINDOW)


def test_rows_deleted_after_the_summary_are_counted_again(spark: Any, tmp_path: Path) -> None:
    root = clean(tmp_path / "wh")
    assert set(audit(spark, root).results["status"]) == {"complete"}

    topic, window = TOPICS[0], at("10:20")
    part = next((root / topic / "load_hour=2026-11-22T10").glob("part-*.parquet"))
    table = pq.read_table(part)
    ms = pc.cast(table["event_time"], "int64")
    in_window = pc.and_(pc.greater_equal(ms, window), pc.less(ms, window + 600_000))
    pq.write_table(table.filter(pc.invert(in_window)), part)  # same name, fewer rows
    removed = table.num_rows - pq.read_metadata(part).num_rows
    assert removed > 0

    out = audit(spark, root)
    assert out.loads_counted_from_rows == 1  # only the changed load
    hit = out.results[(out.results["topic"] == topic) & (out.results["window"] == window)].iloc[0]
    assert (hit.missing, hit.status) == (removed, "lost")
    assert out.totals("missing") == removed
    # its summary was written again for the rows as they are now
    summary = json.loads((root / KEPT / topic / "2026-11-22T10.json").read_text())
    assert sum(g[4] for g in summary["groups"]["data"]) == pq.read_metadata(part).num_rows


def test_a_damaged_summary_is_counted_from_the_rows(spark: Any, tmp_path: Path) -> None:
    root = clean(tmp_path / "wh")
    before = counts(audit(spark, root))
    next(root.glob(f"{KEPT}/{TOPICS[1]}/*.json")).write_text("{not json")
    next(root.glob(f"{KEPT}/{TOPICS[2]}/*.json")).unlink()
    out = audit(spark, root)
    assert out.loads_counted_from_rows == 2
    assert counts(out) == before
