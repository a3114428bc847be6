"""kill -9 of spark-submit in the middle of an hour's write, then the run again.

A watcher polls the warehouse the whole time: the hour's directory is never seen partial
(whenever it is there it holds exactly the final files) and a checkpoint is never seen
without its directory. The re-run cleans the staging leftovers and commits the same hour an
uninterrupted load commits.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest

from spark_apps.hadoop_fs import open_warehouse
from spark_apps.load.run import load_hour
from spark_apps.load.settings import LoadSettings

from .helpers import PAGE_VIEW, load_command, load_env, start_cluster

HOUR = "2026-11-22T10"
TOPIC = "orders"


class Watcher(threading.Thread):
    def __init__(self, wh: Path) -> None:
        super().__init__(daemon=True)
        self.hour_dir = wh / TOPIC / f"load_hour={HOUR}"
        self.checkpoint = wh / "_checkpoints" / TOPIC / f"{HOUR}.json"
        self.staging = wh / "_staging" / TOPIC
        self.seen_hour: list[frozenset[str]] = []
        self.problems: list[str] = []
        self.staging_writes = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with suppress(FileNotFoundError):
                if any((d / "rows").exists() for d in self.staging.iterdir()):
                    self.staging_writes += 1
            has_checkpoint = self.checkpoint.exists()
            try:
                files = frozenset(p.name for p in self.hour_dir.iterdir() if p.suffix == ".parquet")
                self.seen_hour.append(files)
            except FileNotFoundError:
                if has_checkpoint and self.checkpoint.exists():
                    self.problems.append("a checkpoint without its hour directory")
            time.sleep(0.01)


def submit(cluster, wh: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        load_command(cluster, wh, HOUR, "--topics", TOPIC),
        env=load_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


@pytest.mark.slow
@pytest.mark.timeout(900)  # two spark-submits; generous for a loaded machine
def test_killed_load_leaves_nothing_partial_and_rerun_is_identical(spark, zookeeper, tmp_path):
    cluster = start_cluster(zookeeper, tmp_path / "cluster", "kill")
    try:
        cluster.register(TOPIC, PAGE_VIEW)
        events = [cluster.event(TOPIC) for _ in range(4000)]
        cluster.produce(TOPIC, events, batch=200)
        wh = tmp_path / "wh"
        watcher = Watcher(wh)
        watcher.start()

        proc = submit(cluster, wh)
        try:
            deadline = time.monotonic() + 240
            while not watcher.staging_writes and proc.poll() is None:
                assert time.monotonic() < deadline, "the load never started writing"
                time.sleep(0.01)
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:] if proc.stdout else ""
            os.kill(proc.pid, signal.SIGKILL)  # kill -9 of spark-submit, mid-write
            proc.wait(30)
        finally:
            kill_group(proc)  # and whatever it left behind (its Python driver)
        assert not (wh / "_checkpoints" / TOPIC / f"{HOUR}.json").exists()
        assert not (wh / TOPIC / f"load_hour={HOUR}").exists()
        assert list((wh / "_staging" / TOPIC).iterdir())  # leftovers for the next run

        rerun = submit(cluster, wh)
        try:
            output = rerun.communicate(timeout=300)[0].decode()
        finally:
            kill_group(rerun)
        assert rerun.returncode == 0, output[-3000:]
        watcher.stop.set()
        watcher.join()
        final = frozenset(
            p.name for p in (wh / TOPIC / f"load_hour={HOUR}").iterdir() if p.suffix == ".parquet"
        )
        assert watcher.seen_hour and set(watcher.seen_hour) == {final}  # never partial
        assert not watcher.problems
        assert not list((wh / "_staging" / TOPIC).iterdir())  # the leftovers are gone

        # the same hour loaded without interruption, in another warehouse
        other = open_warehouse(str(tmp_path / "other"), spark)
        settings = LoadSettings(
            zookeeper=cluster.live.connect, schema_registry=cluster.registry.connect
        )
        expected = load_hour(spark, other, settings, TOPIC, HOUR).checkpoint
        got = json.loads((wh / "_checkpoints" / TOPIC / f"{HOUR}.json").read_text())
        assert got["rows_sha256"] == expected.rows_sha256
        assert got["rows"] == expected.rows == 4000
        got_rows = sorted(spark.read.parquet(str(wh / TOPIC / f"load_hour={HOUR}")).collect())
        assert got_rows == sorted(spark.read.parquet(other.hour_dir(TOPIC, HOUR)).collect())
    finally:
        cluster.stop()
