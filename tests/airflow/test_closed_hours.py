"""The audit DAG's announcements of closed hours, on a warehouse of docs/design.md §3.6's files."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from warehouse_files import NOW, TOPICS, make_warehouse, write_audit

from hooks.closed_hours import mark_announced, newly_closed
from pipeline_warehouse.overview import WarehouseView

HOURS = ["2026-11-22T11", "2026-11-22T12", "2026-11-22T13", "2026-11-22T14"]


def test_each_closed_hour_is_announced_once_and_again_when_it_changed(tmp_path: Path) -> None:
    warehouse = make_warehouse(tmp_path / "wh")
    view = WarehouseView(warehouse.as_uri(), timedelta(hours=2))
    # 11: both topics closed; 12: searches closed, page_views lost; 13, 14: not audited.
    closed = newly_closed(view, TOPICS, HOURS, NOW)
    assert [(c.topic, c.hour) for c in closed] == [
        ("page_views", "2026-11-22T11"),
        ("searches", "2026-11-22T11"),
        ("searches", "2026-11-22T12"),
    ]
    assert closed[0].extra == {
        "load_hour": "2026-11-22T11", "rows": 120, "produced": 60, "loaded_unique": 60,
        "duplicates": 0, "windows": 1,
    }  # fmt: skip
    mark_announced(view, closed, NOW)
    assert newly_closed(view, TOPICS, HOURS, NOW) == []  # a re-audit that changed nothing
    # Late data re-audited: the hour's counts changed, so it is announced again.
    shutil.rmtree(warehouse / "_audit_results" / "audit_hour=2026-11-22T11")
    write_audit(
        warehouse,
        "2026-11-22T11",
        [("page_views", 63, 63, "complete"), ("searches", 60, 60, "complete")],
    )
    again = newly_closed(view, TOPICS, HOURS, NOW)
    assert [(c.topic, c.hour, c.extra["produced"]) for c in again] == [
        ("page_views", "2026-11-22T11", 63)
    ]


def test_nothing_closes_before_the_grace_has_passed(tmp_path: Path) -> None:
    view = WarehouseView(make_warehouse(tmp_path / "wh").as_uri(), timedelta(hours=2))
    early = NOW.replace(hour=13, minute=30)  # 11's grace ends at 14:00
    assert newly_closed(view, TOPICS, HOURS, early) == []
