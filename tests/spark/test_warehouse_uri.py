"""The warehouse through a Hadoop filesystem URI that is not a local path: `viewfs://`.

Issue 14 ("HDFS-style storage") asks that the load and the audit work on any Hadoop filesystem,
not only on a local directory. No HDFS can run here, so these tests address the warehouse
through Hadoop's ViewFileSystem (`viewfs://<table>/warehouse`), a client-side mount table whose
one link, `/warehouse`, points to a temporary local directory (the "mount target"). viewfs
is the closest stand-in for HDFS that ships in Spark's hadoop-client jars:

- the URI has another scheme and an authority that names no host, so any code that takes the
  URI for a local path (`Path(uri)`, `os.listdir`, `open()`, pyarrow) fails or writes a
  `viewfs:` directory under the current one; only Hadoop's FileSystem API reaches the files;
- `hadoop.HadoopFS` takes a Python shortcut for `file:` URIs only, so with viewfs every
  listing, read, write and rename goes through the JVM, as it would on HDFS;
- viewfs has its own rename rules (only within one mount point), as HDFS has its own.

What the tests prove, reading the results back with plain Python from the mount target:

1. two consecutive hours load and commit through viewfs (checkpoints and hour directories
   under the mount target; the rows read back through viewfs are exactly the events
   produced, duplicates dropped within the hour and against the previous hour);
2. a backfill of the first hour through viewfs gives the same rows_sha256 and rows;
3. the calls the commit and the audit rely on (rename into place, replace a directory,
   recover one left aside, listing of directories and files, reads, atomic writes) behave
   through viewfs as documented, in `hadoop.HadoopFS` (the load's and the audit's);
4. the audit (without its Great Expectations step) reads and writes its results through viewfs.

Nothing may be written outside the mount target. Each test mounts its own table (a fresh
name: Hadoop caches a FileSystem per scheme and authority), and unmounts it afterwards.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.synthetic_warehouse import Traffic, uniform_times

from pipeline_warehouse.filesystem import (
    WarehouseFileSystemError,
    join,
    recover_replaced,
    replace_dir,
)
from pipeline_warehouse.time_format import parse_hour
from spark_apps.audit.run import AuditOptions, run_audit
from spark_apps.hadoop_fs import HadoopFS, open_warehouse
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings
from spark_apps.load.verify import verify

from .helpers import PAGE_VIEW, AnalysisCluster, start_cluster

H10, H11 = "2026-11-22T10", "2026-11-22T11"
MOUNT_LINK = "/warehouse"


@dataclass(frozen=True)
class ViewfsMount:
    uri: str  # viewfs://<table>/warehouse: what the code under test is given
    target: Path  # the local directory the mount link points to: where the files must be


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnalysisCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("viewfs-cluster"), "viewfs", brokers=1)
    yield c
    c.stop()


@pytest.fixture
def viewfs(spark: Any, tmp_path: Path) -> Iterator[ViewfsMount]:
    """A mount table of its own: viewfs://<table>/warehouse -> <tmp_path>/viewfs-root."""
    table = f"lbtest{uuid.uuid4().hex[:12]}"
    target = tmp_path / "viewfs-root"
    target.mkdir()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    key = f"fs.viewfs.mounttable.{table}.link.{MOUNT_LINK}"
    conf.set(key, target.as_uri())
    mount = ViewfsMount(f"viewfs://{table}{MOUNT_LINK}", target)
    try:
        yield mount
    finally:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.hadoop.fs.Path(mount.uri).getFileSystem(conf).close()  # off the cache
        conf.unset(key)
    assert_nothing_outside(mount, tmp_path)


def assert_nothing_outside(mount: ViewfsMount, tmp_path: Path) -> None:
    """No file went anywhere but the mount target (a URI taken for a path makes `viewfs:/...`)."""
    for directory in (Path.cwd(), Path(tempfile.gettempdir()), tmp_path):
        assert not (directory / "viewfs:").exists(), f"{directory / 'viewfs:'} was created"
    assert [p.name for p in tmp_path.iterdir()] == ["viewfs-root"]


def local_files(root: Path) -> set[str]:
    """Every file under `root`, relative, without Hadoop's checksum side files (.*.crc)."""
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".crc"))
    }


def parquet_keys(directory: Path) -> list[tuple[str, int]]:
    """(producer_id, seq) of the rows of a local Parquet directory, read by pyarrow."""
    table = pq.read_table(directory, columns=["producer_id", "seq"])
    return list(zip(table["producer_id"].to_pylist(), table["seq"].to_pylist(), strict=True))


def spark_keys(spark: Any, uri: str) -> list[tuple[str, int]]:
    return [
        (r.producer_id, r.seq)
        for r in spark.read.parquet(uri).select("producer_id", "seq").collect()
    ]


# -- 1 and 2: the hourly load -------------------------------------------------------------------


@pytest.mark.timeout(600)  # three loads; generous for a loaded machine
def test_hourly_load_commits_and_backfills_through_viewfs(
    spark: Any, cluster: AnalysisCluster, viewfs: ViewfsMount
) -> None:
    topic = "page_views"
    cluster.register(topic, PAGE_VIEW)
    wh = open_warehouse(viewfs.uri, spark)
    assert wh.uri == viewfs.uri  # taken as a URI, not resolved to a local path
    settings = LoadSettings(
        zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
    )

    first_seq = cluster.seq
    first = [cluster.event(topic) for _ in range(120)]
    cluster.produce(topic, first)
    cluster.produce(topic, first[:5])  # re-sent inside the hour: dropped
    load_hour(spark, wh, settings, topic, H10)
    second_seq = cluster.seq
    second = [cluster.event(topic) for _ in range(80)]
    cluster.produce(topic, second + first[60:63], codec="gzip")  # 3 already loaded in H10
    load_hour(spark, wh, settings, topic, H11)
    expected = {
        H10: {("p-1", s) for s in range(first_seq, first_seq + 120)},
        H11: {("p-1", s) for s in range(second_seq, second_seq + 80)},
    }

    # what a user finds on the disk behind the mount: the §3.6 layout, nothing else
    root = viewfs.target
    checkpoints = {
        h: json.loads((root / "_checkpoints" / topic / f"{h}.json").read_text()) for h in (H10, H11)
    }
    assert [checkpoints[h]["rows"] for h in (H10, H11)] == [120, 80]
    assert [checkpoints[h]["duplicates_dropped"] for h in (H10, H11)] == [5, 3]
    assert sorted(os.listdir(root)) == ["_checkpoints", "_staging", topic]
    assert sorted(os.listdir(root / topic)) == [f"load_hour={H10}", f"load_hour={H11}"]
    assert not list((root / "_staging" / topic).iterdir())
    for h in (H10, H11):
        local_rows = parquet_keys(root / topic / f"load_hour={h}")
        assert len(local_rows) == len(set(local_rows))
        assert set(local_rows) == expected[h]
        # the same rows through the viewfs URI
        through_viewfs = spark_keys(spark, wh.hour_dir(topic, h))
        assert sorted(through_viewfs) == sorted(local_rows)
    assert wh.committed_hours(topic) == [H10, H11]
    stored = wh.checkpoint(topic, H10)  # read through viewfs: the very file under the target
    assert stored is not None
    assert stored.to_json() == (root / "_checkpoints" / topic / f"{H10}.json").read_text()
    assert wh.checkpoint(topic, "2026-11-22T12") is None  # a missing file, read through viewfs
    assert verify(wh, topic, H10, zookeeper=cluster.live.connect).ok

    # 2: a backfill of H10 through viewfs: the stored range again, the same rows and digest
    rows_before = sorted(spark.read.parquet(wh.hour_dir(topic, H10)).collect())
    report = load_hour(spark, wh, settings, topic, H10)
    assert report.backfill
    assert report.checkpoint.rows_sha256 == checkpoints[H10]["rows_sha256"]
    again = json.loads((root / "_checkpoints" / topic / f"{H10}.json").read_text())
    versioned = ("committed_at", "version", "files")  # a backfill is a new version of the hour
    assert {k: v for k, v in again.items() if k not in versioned} == {
        k: v for k, v in checkpoints[H10].items() if k not in versioned
    }
    on_disk = [
        n for n in os.listdir(root / topic / f"load_hour={H10}") if n.startswith("part-")
    ]  # the new version's data files only: the old version's went after the switch
    assert (
        sorted(on_disk) == sorted(again["files"])
        and again["version"] != checkpoints[H10]["version"]
    )
    assert sorted(spark.read.parquet(*wh.data_files(wh.checkpoint(topic, H10))).collect()) == (
        rows_before
    )
    assert sorted(spark.read.parquet(wh.hour_dir(topic, H10)).collect()) == rows_before
    assert set(parquet_keys(root / topic / f"load_hour={H10}")) == expected[H10]
    assert not list((root / "_staging" / topic).iterdir())


# -- 3: the filesystem calls the commit and the audit rely on -----------------------------------


def test_load_filesystem_semantics_through_viewfs(spark: Any, viewfs: ViewfsMount) -> None:
    """hadoop.HadoopFS, as commit.py uses it: rename, replace, list, read, delete."""
    fs = HadoopFS(spark)
    base = f"{viewfs.uri}/commit-checks"
    local = viewfs.target / "commit-checks"

    # a staged hour directory renamed into place (rename creates the missing parents)
    fs.write_bytes(f"{base}/_staging/run-1/rows/part-0.parquet", b"rows of the hour")
    fs.rename(f"{base}/_staging/run-1/rows", f"{base}/page_views/load_hour={H10}")
    assert (local / "page_views" / f"load_hour={H10}" / "part-0.parquet").read_bytes() == (
        b"rows of the hour"
    )
    assert not (local / "_staging" / "run-1" / "rows").exists()
    # rename never replaces: an existing hour directory must be moved aside first
    fs.write_bytes(f"{base}/_staging/run-2/rows/part-0.parquet", b"other rows")
    with pytest.raises(WarehouseFileSystemError, match="the target exists"):
        fs.rename(f"{base}/_staging/run-2/rows", f"{base}/page_views/load_hour={H10}")
    assert (local / "page_views" / f"load_hour={H10}" / "part-0.parquet").read_bytes() == (
        b"rows of the hour"
    )

    # the checkpoint: written beside, then replaced in one step; twice (a backfill)
    checkpoint = f"{base}/_checkpoints/page_views/{H10}.json"
    fs.write_bytes(checkpoint, b'{"first": 1}')
    fs.write_bytes(checkpoint, b'{"second": 2}')
    assert (local / "_checkpoints" / "page_views" / f"{H10}.json").read_bytes() == b'{"second": 2}'
    assert fs.read_bytes(checkpoint) == b'{"second": 2}'
    assert local_files(local / "_checkpoints") == {f"page_views/{H10}.json"}  # no temporaries
    with pytest.raises(FileNotFoundError):
        fs.read_bytes(f"{base}/_checkpoints/page_views/{H11}.json")

    # listing: direct children with viewfs URIs, directories told from files
    listed = fs.list(base)
    assert [(s.name, s.is_dir) for s in listed] == [
        ("_checkpoints", True),
        ("_staging", True),
        ("page_views", True),
    ]
    assert all(s.uri.startswith(viewfs.uri + "/") for s in listed)
    [entry] = [s for s in fs.list(f"{base}/_checkpoints/page_views") if not s.name.startswith(".")]
    assert (entry.name, entry.is_dir, entry.size) == (f"{H10}.json", False, len(b'{"second": 2}'))
    assert entry.uri == checkpoint
    assert fs.list(f"{base}/no-such-directory") == []

    # delete: recursive, False when nothing was there
    assert fs.delete(f"{base}/_staging")
    assert not (local / "_staging").exists()
    assert not fs.delete(f"{base}/_staging")
    assert not fs.exists(f"{base}/_staging")

    # rows of a directory's Parquet files from their footers (how a load counts what it
    # wrote): metadata files and anything not Parquet do not count, nor does a missing one
    rows = f"{base}/counted/rows"
    spark.range(0, 1234, 1, 3).write.parquet(rows)
    fs.write_bytes(f"{rows}/_load_summary.json", b"{}")
    assert fs.exists(f"{rows}/_SUCCESS")
    assert fs.parquet_rows(rows) == 1234
    assert fs.parquet_rows(f"{base}/no-such-directory") == 0


def test_audit_filesystem_semantics_through_viewfs(spark: Any, viewfs: ViewfsMount) -> None:
    """hadoop.HadoopFS on viewfs as the audit uses it: every call through the JVM (no `file:`
    shortcut); the directory swaps of filesystem.py over it."""
    fs = HadoopFS(spark)
    base = join(viewfs.uri, "audit-checks")
    local = viewfs.target / "audit-checks"

    fs.write_text(join(base, "staged", "part-0"), "first")
    fs.write_bytes(join(base, "marker.json"), b'{"ok": true}')
    assert (local / "staged" / "part-0").read_text() == "first"
    assert not [p for p in local.rglob("*.tmp")]  # written beside, then renamed
    assert fs.read_text(join(base, "staged", "part-0")) == "first"
    assert fs.read_bytes(join(base, "marker.json")) == b'{"ok": true}'
    assert fs.exists(join(base, "marker.json")) and not fs.exists(join(base, "absent"))

    listed = [e for e in fs.list(base) if not e.name.startswith(".")]
    assert [(e.name, e.is_dir) for e in listed] == [("marker.json", False), ("staged", True)]
    assert listed[0].size == len(b'{"ok": true}')
    assert [e.uri for e in listed] == [join(base, "marker.json"), join(base, "staged")]
    assert fs.list(join(base, "absent")) == []

    # rename into a directory that does not exist yet
    live = join(base, "results", "audit_hour=10")
    fs.rename(join(base, "staged"), live)
    assert (local / "results" / "audit_hour=10" / "part-0").read_text() == "first"
    assert not (local / "staged").exists()

    # replace_dir: the new directory in place of the old one, nothing left aside
    fs.write_text(join(base, "staged-2", "part-0"), "second")
    replace_dir(fs, join(base, "staged-2"), live)
    assert (local / "results" / "audit_hour=10" / "part-0").read_text() == "second"
    assert not (local / "staged-2").exists()
    assert not list((local / "results" / "_replaced").iterdir())
    # ... and where there was nothing before
    fs.write_text(join(base, "staged-3", "part-0"), "third")
    replace_dir(fs, join(base, "staged-3"), join(base, "results", "audit_hour=11"))
    assert (local / "results" / "audit_hour=11" / "part-0").read_text() == "third"

    # a replace_dir that died between its two renames: the old directory is put back
    fs.rename(live, join(base, "results", "_replaced", "audit_hour=10.0badc0de"))
    assert not (local / "results" / "audit_hour=10").exists()
    assert recover_replaced(fs, join(base, "results")) == ["audit_hour=10"]
    assert (local / "results" / "audit_hour=10" / "part-0").read_text() == "second"

    assert fs.delete(join(base, "results"))
    assert not (local / "results").exists()


# -- 4: the audit -------------------------------------------------------------------------------


def test_audit_reads_and_writes_through_viewfs(spark: Any, viewfs: ViewfsMount) -> None:
    """A committed warehouse of one topic, written in the mount target; audited through viewfs."""
    hour, next_hour = parse_hour(H10), parse_hour(H11)
    traffic = Traffic()
    traffic.produce("p-a", "page_views", uniform_times(hour, 60))
    traffic.write(viewfs.target, [hour, next_hour], ["page_views"])  # H11 holds 10:50's counts
    before = local_files(viewfs.target)

    outcome = run_audit(
        spark,
        AuditOptions(
            warehouse=viewfs.uri,
            hours=[hour],
            now=next_hour + timedelta(hours=3),
            quality=False,
        ),
    )

    assert list(outcome.results["status"]) == ["complete"] * 6
    assert list(outcome.results["produced"]) == [10] * 6
    assert list(outcome.results["loaded_unique"]) == [10] * 6
    results = viewfs.target / "_audit_results" / f"audit_hour={H10}"
    summary = json.loads((results / "_summary.json").read_text())
    assert summary["topic_statuses"] == {"page_views": {"complete": 6}}
    assert pq.read_table(results).num_rows == 6
    written = local_files(viewfs.target) - before
    assert all(f.startswith("_audit_results/") for f in written), written
    assert f"_audit_results/_index/page_views/{H10}.json" in written
