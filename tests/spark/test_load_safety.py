"""One load per topic at a time, and a commit that never shows an hour without its files.

- two loads of one topic-hour started at the same moment: one commits the hour, the other
  waits for the topic's lock and then backfills it identically; files and checkpoint agree;
- a load finding the lock held, not waiting: one line naming the holder, nothing touched;
- a load whose ZooKeeper session expired has lost the lock and cannot commit;
- a load whose session expires between its last check and its decision, while the next load
  deletes its staging: its publish is fenced off by the lock's token, and the load after drops
  its `_COMMIT` loudly and loads (issue 49 item 7: the topic never loaded again);
- a backfill killed at every step of its publish: the checkpoint never names a file that is
  not there, a reader always finds the old version or the new one, and the next load's
  recovery finishes the switch.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path

import pytest

from pipeline_warehouse.checkpoint import Warehouse
from pipeline_warehouse.filesystem import FsspecFS
from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load import run as load_run
from spark_apps.load.commit import COMMIT_FILE, publish, recover
from spark_apps.load.errors import LoadLockError
from spark_apps.load.lock import TopicLock, lock_path
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings

from .helpers import PAGE_VIEW, AnalysisCluster, start_cluster

HOUR = "2026-11-22T10"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory) -> AnalysisCluster:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("safety-cluster"), "safety")
    yield c
    c.stop()


def settings(c: AnalysisCluster, **kw) -> LoadSettings:
    return LoadSettings(zookeeper=c.live.connect, schema_registry=c.registry.connect, **kw)


def parquet_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("part-*.parquet"))


@pytest.mark.timeout(600)
def test_two_loads_of_one_hour_at_once_commit_it_once(spark, cluster, tmp_path):
    topic = "simultaneous"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(400)])
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    start = threading.Barrier(2)
    reports, errors = [], []

    def run() -> None:
        start.wait()
        try:
            reports.append(load_hour(spark, wh, settings(cluster), topic, HOUR))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(500)
    assert not errors, errors
    assert sorted(r.backfill for r in reports) == [False, True]  # the second waited, then re-read
    assert reports[0].checkpoint.rows_sha256 == reports[1].checkpoint.rows_sha256
    checkpoint = wh.checkpoint(topic, HOUR)
    assert checkpoint is not None and checkpoint.rows == 400
    assert parquet_names(tmp_path / "wh" / topic / f"load_hour={HOUR}") == sorted(
        checkpoint.files or ()
    )
    assert wh.count_rows(checkpoint) == 400
    assert spark.read.parquet(*wh.data_files(checkpoint)).count() == 400
    assert not list((tmp_path / "wh" / "_staging" / topic).iterdir())


def test_a_held_lock_is_named_and_nothing_is_touched(spark, cluster, tmp_path):
    topic = "locked"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(10)])
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    holder = TopicLock(cluster.live.connect, wh.uri, topic, who="the nightly backfill")
    with holder, pytest.raises(LoadLockError) as caught:
        load_hour(spark, wh, settings(cluster, lock_timeout=0), topic, HOUR)
    message = str(caught.value)
    assert "\n" not in message
    assert "holds its lock" in message and "the nightly backfill" in message
    assert lock_path(wh.uri, topic) in message
    assert not (tmp_path / "wh").exists()  # not a directory made, not a file written


def test_a_load_whose_session_expired_has_lost_its_lock(cluster, tmp_path, expire_session):
    lock = TopicLock(cluster.live.connect, (tmp_path / "wh").as_uri(), "expiring", who="me")
    lock.acquire()
    try:
        lock.check()  # held
        expire_session(lock._client)
        with pytest.raises(LoadLockError, match="lost its lock"):
            lock.check()
        # ... and the next load can take it at once
        with TopicLock(lock.zk_connect, lock.warehouse, "expiring", who="next", timeout=5):
            pass
    finally:
        lock.release()


@pytest.mark.timeout(600)
def test_a_load_that_loses_its_lock_after_its_check_is_fenced_off(
    spark, cluster, tmp_path, expire_session, monkeypatch, caplog
):
    """The window forced: right after the first load's last check its session expires, and
    the next load takes the lock, deletes the first one's (undecided) staging in its recovery,
    loads the hour and publishes it. Only then does the first load decide."""
    topic = "fenced"
    cluster.register(topic, PAGE_VIEW)
    cluster.produce(topic, [cluster.event(topic) for _ in range(100)])
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    next_load = []

    class ExpiresAfterItsCheck(TopicLock):
        def check(self) -> None:
            super().check()
            if not next_load:  # the first load's check, before its decision
                next_load.append(None)
                expire_session(self._client)
                next_load[0] = load_hour(spark, wh, settings(cluster), topic, HOUR)

    monkeypatch.setattr(load_run, "TopicLock", ExpiresAfterItsCheck)
    with pytest.raises(LoadLockError, match=r"lost its lock.*not published"):
        load_hour(spark, wh, settings(cluster), topic, HOUR)
    monkeypatch.undo()
    loaded = next_load[0].checkpoint
    assert read_hour(tmp_path / "wh", topic) == (loaded.version, 100)  # not touched
    [left] = (tmp_path / "wh" / "_staging" / topic).iterdir()
    assert [p.name for p in left.iterdir()] == [COMMIT_FILE]  # decided, its files gone
    token = json.loads((left / COMMIT_FILE).read_text())["fencing_token"]
    assert isinstance(token, int) and token > 0

    # The next load of the topic drops that _COMMIT, saying so, and loads.
    cluster.produce(topic, [cluster.event(topic) for _ in range(20)])
    with caplog.at_level(logging.WARNING, logger="spark_apps.load.commit"):
        report = load_hour(spark, wh, settings(cluster), topic, "2026-11-22T11")
    [dropped] = report.recovered
    assert dropped.startswith(f"dropped the decided load {left.name} of {topic} {HOUR}")
    assert any(dropped in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert report.checkpoint.rows == 20
    assert read_hour(tmp_path / "wh", topic) == (loaded.version, 100)
    assert not list((tmp_path / "wh" / "_staging" / topic).iterdir())


class Crash(Exception):
    """The process died here (raised by CrashingFS)."""


class CrashingFS(FsspecFS):
    """FsspecFS that dies at its `crash_at`-th change (mkdirs, write, rename, delete)."""

    def __init__(self, crash_at: int) -> None:
        super().__init__()
        self.crash_at = crash_at
        self.changes = 0

    def _change(self) -> None:
        self.changes += 1
        if self.changes == self.crash_at:
            raise Crash(f"killed at change {self.changes}")

    def mkdirs(self, uri: str) -> None:
        self._change()
        super().mkdirs(uri)

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._change()
        super().write_bytes(uri, data)

    def rename(self, src: str, dst: str) -> None:
        self._change()
        super().rename(src, dst)

    def delete(self, uri: str, recursive: bool = True) -> bool:
        self._change()
        return super().delete(uri, recursive)


def read_hour(root: Path, topic: str) -> tuple[str, int]:
    """What a reader of the hour finds, through its checkpoint: (version, rows)."""
    wh = Warehouse.open(str(root))
    checkpoint = wh.checkpoint(topic, HOUR)
    assert checkpoint is not None, "the hour went missing"
    return str(checkpoint.version), wh.count_rows(checkpoint)  # every file it names is there


@pytest.mark.timeout(600)
def test_a_backfill_killed_at_each_step_of_its_commit(spark, cluster, tmp_path):
    topic = "killed_commit"
    cluster.register(topic, PAGE_VIEW)
    events = [cluster.event(topic) for _ in range(300)]
    cluster.produce(topic, events[:150])
    cluster.produce(topic, events[150:] + events[:4])  # 4 repeats: dropped
    wh = open_warehouse(str(tmp_path / "wh"), spark)
    first = load_hour(spark, wh, settings(cluster), topic, HOUR).checkpoint
    assert first.rows == 300

    # a backfill that dies right after deciding: its staging holds the new version, decided
    class DiesAfterDeciding(Exception):
        pass

    decided = wh.fs.write_bytes

    def write_then_die(uri: str, data: bytes) -> None:
        decided(uri, data)
        if uri.endswith("/" + COMMIT_FILE):
            raise DiesAfterDeciding

    wh.fs.write_bytes = write_then_die  # type: ignore[method-assign]
    with pytest.raises(DiesAfterDeciding):
        load_hour(spark, wh, settings(cluster), topic, HOUR)
    del wh.fs.write_bytes
    [staging] = (tmp_path / "wh" / "_staging" / topic).iterdir()
    new_version = json.loads((staging / COMMIT_FILE).read_text())["checkpoint"]["version"]
    assert read_hour(tmp_path / "wh", topic) == (first.version, 300)
    template = tmp_path / "decided"
    shutil.copytree(tmp_path / "wh", template)

    # publish killed at its 1st, 2nd, ... change, until one runs to the end
    crash_at = 0
    seen_versions = set()
    while True:
        crash_at += 1
        root = tmp_path / f"crash-{crash_at}"
        shutil.copytree(template, root)
        crashing = Warehouse(root.as_uri(), CrashingFS(crash_at))
        try:
            publish(crashing, (root / "_staging" / topic / staging.name).as_uri())
        except Crash:
            finished = False
        else:
            finished = True
        version, rows = read_hour(root, topic)  # never missing, never a file short
        assert rows == 300 and version in (first.version, new_version)
        seen_versions.add(version)
        # the next load of the topic finishes the switch, whatever step died
        recover(Warehouse(root.as_uri(), FsspecFS()), topic)
        checkpoint = Warehouse.open(str(root)).checkpoint(topic, HOUR)
        assert checkpoint is not None and checkpoint.version == new_version
        assert parquet_names(root / topic / f"load_hour={HOUR}") == sorted(checkpoint.files or ())
        assert not list((root / "_staging" / topic).iterdir())
        assert read_hour(root, topic) == (new_version, 300)
        if finished:
            break
    assert crash_at > 5 and seen_versions == {first.version, new_version}
