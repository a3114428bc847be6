"""The DAG files: they parse, follow the pipeline's conventions, and import nothing heavy.

DagBag is Airflow's own loader (what the dag-processor runs), in this session's Airflow home
(tests/conftest.py). Parse-time imports are checked in a fresh interpreter, because this
session may already have imported pyspark for other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"
EXPECTED = {"logbroker_mirror", "logbroker_hourly_load", "logbroker_audit"}


@pytest.fixture(scope="module")
def dagbag():  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) >= EXPECTED


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_conventions(dagbag, dag_id: str) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags[dag_id]
    assert dag.catchup is False, "history comes through backfills, never catch-up"
    assert dag.max_active_runs == 1
    assert dag.tags and "logbroker" in dag.tags
    assert dag.doc_md and dag_id in dag.doc_md
    for t in dag.tasks:
        assert t.owner == "data-platform", t.task_id
    retried = [t.task_id for t in dag.tasks if t.retries > 0]
    assert retried, f"{dag_id}: no task retries"


def test_hourly_load_has_hour_long_data_intervals(dagbag) -> None:  # type: ignore[no-untyped-def]
    import pendulum
    from airflow.serialization.encoders import coerce_to_core_timetable

    dag = dagbag.dags["logbroker_hourly_load"]
    interval = coerce_to_core_timetable(dag.timetable).infer_manual_data_interval(
        run_after=pendulum.datetime(2026, 11, 22, 11, 0, tz="UTC")
    )
    # @hourly would give start == end in Airflow 3 (docs/design.md §7 P4): the load needs [10:00, 11:00)
    assert (interval.start, interval.end) == (
        pendulum.datetime(2026, 11, 22, 10, tz="UTC"),
        pendulum.datetime(2026, 11, 22, 11, tz="UTC"),
    )
    assert dag.get_task("load").depends_on_past, "an hour loads only after the previous one"


def test_the_load_reads_committed_hours_where_python_reads_the_warehouse(dagbag) -> None:  # type: ignore[no-untyped-def]
    from hooks.pipeline import load_pipeline

    passed = dagbag.dags["logbroker_hourly_load"].get_task("load").partial_kwargs
    assert passed["warehouse_reader"] == load_pipeline().warehouse_reader


def test_audit_is_scheduled_on_every_loaded_topic(dagbag) -> None:  # type: ignore[no-untyped-def]
    from hooks.pipeline import load_pipeline

    dag = dagbag.dags["logbroker_audit"]
    names = {asset.name for asset in dag.timetable.asset_condition.objects}
    assert names == {f"logbroker-warehouse/{t}" for t in load_pipeline().loaded_topics}


def test_parsing_imports_nothing_heavy() -> None:
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("dagbag_probe.py")), str(DAGS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["import_errors"] == {}
    assert set(result["dags"]) >= EXPECTED
    assert result["heavy"] == [], "DAG files must not import these at parse time"


def test_retry_delays_are_the_dags_own_unless_the_pipeline_sets_one(
    dagbag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from airflow.dag_processing.dagbag import DagBag

    from hooks.pipeline import DEFAULT_FILE

    def delays(bag) -> dict[str, set[timedelta]]:  # type: ignore[no-untyped-def]
        return {
            d: {t.retry_delay for t in bag.dags[d].tasks if t.retries > 0} for d in sorted(EXPECTED)
        }

    assert delays(dagbag) == {
        "logbroker_audit": {timedelta(minutes=1)},
        "logbroker_hourly_load": {timedelta(minutes=1)},
        "logbroker_mirror": {timedelta(seconds=30)},
    }
    settings = json.loads(DEFAULT_FILE.read_text())
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({**settings, "task_retry_delay": 5}))
    monkeypatch.setenv("LOGBROKER_PIPELINE", str(path))
    fast = DagBag(dag_folder=str(DAGS))
    assert fast.import_errors == {}
    assert delays(fast) == {dag_id: {timedelta(seconds=5)} for dag_id in EXPECTED}
