"""Topic names that would climb out of, alias or collide with the warehouse's layout are
refused at every door of the pipeline, before anything is read or written: the load's and the
audit's command lines and Python entry points, and pipeline.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.time_format import parse_hour
from pipeline_warehouse.topics import PipelineTopicError, check_topic
from spark_apps.audit import cli as audit_cli
from spark_apps.audit.outcome import AuditOptions
from spark_apps.load import cli as load_cli
from spark_apps.load.errors import LoadError
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings

HOSTILE = ["..", ".", "../page_views", "../_checkpoints", "a/b", "_checkpoints", "_staging", ""]


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    """A warehouse with a committed-looking hour, another topic's staging and a directory the
    pipeline never wrote: what `--topics ..` once deleted."""
    root = tmp_path / "wh"
    for path, text in {
        "page_views/load_hour=2026-11-22T10/part-0.parquet": "rows",
        "_checkpoints/page_views/2026-11-22T10.json": "{}",
        "_staging/searches/2026-11-22T11.run/_COMMIT": "{}",
        "other_data/keep.txt": "not the pipeline's",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.mark.parametrize("topic", HOSTILE)
def test_the_load_refuses_before_it_starts(topic, warehouse, capsys) -> None:
    before = tree(warehouse)
    with pytest.raises(SystemExit) as exited:
        load_cli.main(
            ["--zookeeper", "127.0.0.1:1/none", "--schema-registry", "127.0.0.1:1/none",
             "--topics", topic, "--hour", "2026-11-22T10", "--warehouse", warehouse.as_uri()]
        )  # fmt: skip
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--topics" in error and (repr(topic) in error or "no topic" in error)
    assert tree(warehouse) == before


@pytest.mark.parametrize("topic", [*HOSTILE, "_audit"])
def test_the_audit_refuses_before_it_starts(topic, warehouse, capsys) -> None:
    before = tree(warehouse)
    with pytest.raises(SystemExit) as exited:
        audit_cli.main(
            ["--warehouse", warehouse.as_uri(), "--hours", "2026-11-22T10", "--topics", topic]
        )
    assert exited.value.code == 2
    assert "--topics" in capsys.readouterr().err.strip().splitlines()[-1]
    assert tree(warehouse) == before


@pytest.mark.parametrize("topic", ["..", "a/b", "_checkpoints", ".hidden"])
def test_the_python_entry_points_refuse_too(topic, warehouse) -> None:
    before = tree(warehouse)
    settings = LoadSettings(zookeeper="127.0.0.1:1/none", schema_registry="127.0.0.1:1/none")
    wh = Warehouse.open(warehouse.as_uri())
    with pytest.raises(LoadError, match="topic name"):
        load_hour(None, wh, settings, topic, "2026-11-22T10")  # no Spark: refused first
    with pytest.raises(PipelineTopicError):
        AuditOptions(
            warehouse=warehouse.as_uri(),
            hours=[parse_hour("2026-11-22T10")],
            now=parse_hour("2026-11-22T12"),
            topics=[topic],
        )
    assert tree(warehouse) == before


def test_legal_names_pass_and_reserved_ones_say_why() -> None:
    for name in ("page_views", "_audit", "a.b-c_1", "x" * 249):
        assert check_topic(name) == name
    with pytest.raises(PipelineTopicError, match="reserved"):
        check_topic("_errors")
    with pytest.raises(PipelineTopicError, match="illegal character '/'"):
        check_topic("a/b")
    with pytest.raises(PipelineTopicError, match="not allowed"):
        check_topic("..")


def test_pipeline_json_refuses_a_bad_topic_naming_the_file(tmp_path: Path) -> None:
    from hooks.pipeline import load_pipeline

    settings = tmp_path / "pipeline.json"
    settings.write_text(
        json.dumps(
            {
                "live_clusters": [{"name": "live", "conn_id": "lb_live"}],
                "analysis_conn_id": "lb_analysis",
                "topics": ["page_views", "../_checkpoints"],
                "warehouse": str(tmp_path / "wh"),
            }
        )
    )
    with pytest.raises(ValueError) as caught:
        load_pipeline(settings)
    assert str(settings) in str(caught.value) and "'../_checkpoints'" in str(caught.value)
