"""`make chaos`, short and seeded: the pipeline loses nothing while its parts die.

Two simulated hours, every kind of fault once (kill -9 of live and analysis brokers, of the
mirror, of a spark-submit mid-write and of the scheduler; ZooKeeper sessions of a broker and
of the mirror expired), and 3 events that a producer counted but never sent: the run passes
only if nothing acknowledged is missing or doubled in the warehouse, every hour's rows_sha256
recomputes, and the audit finds exactly the 3 lost events and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import chaos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]


def test_short_chaos_run_loses_nothing_and_the_audit_finds_what_was_lost(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "chaos"
    code = chaos.main(
        ["--hours", "2", "--per-kind", "1", "--seed", "3", "--lose", "3", "--workdir", str(workdir)]
    )
    report = json.loads((workdir / "chaos.json").read_text())
    assert sum(report["faults"].values()) >= 6, report["faults"]
    assert report["missing"] == 0
    assert report["duplicates_in_warehouse"] == 0
    assert report["audit_missing"] == 3
    assert set(report["windows"]) == {"complete", "lost"}
    assert all(report["checksums_equal"].values())
    assert code == 0 and report["passed"]
