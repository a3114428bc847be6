"""The audit's pure parts, without Spark: statuses, hours, the plan, the vendored assets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spark_apps.audit.report_assets import (
    UnvendoredAssetError,
    external_assets,
    rewrite_html,
    url_map,
)
from spark_apps.audit.results import window_status
from spark_apps.warehouse.hours import HOUR_MS, parse_duration_ms, parse_hour, parse_hour_range
from spark_apps.warehouse.loads import can_hold

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
        (15, 20, 20, END, "unaccounted"),
        (0, 3, 3, END, "unaccounted"),
        (0, 0, 0, END + GRACE, "no_data"),
    ],
)
def test_window_status(produced: int, rows: int, unique: int, now: int, status: str) -> None:
    assert window_status(produced, rows, unique, END, now, GRACE) == status


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
