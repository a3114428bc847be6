"""Several topics in one load application (`spark-submit hourly_load.py --topics a,b,c`), as
the hourly DAG's load tasks run batches of topics: each topic is loaded on its own, under its
own lock, with its own versioned commit and checkpoint.

- a topic that fails (all its messages bad records) is named in one line, the topics before
  and after it commit their hours, and the application exits 1 with a last line naming it;
- the retry (`--skip-committed-since` the first try's start, what the DAG passes) loads only
  the topic that failed: the committed topics' checkpoints stay byte for byte.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from .helpers import PAGE_VIEW, load_command, load_env, start_cluster

HOUR = "2026-11-22T10"
GOOD, BAD = ("batch_first", "batch_last"), "batch_broken"
TOPICS = [GOOD[0], BAD, GOOD[1]]  # the failing topic in the middle


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("batch-cluster"), "batch")
    yield c
    c.stop()


def submit(cluster, wh: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The load of TOPICS, one spark-submit on local[2], as a load task runs it."""
    command = [*load_command(cluster, wh, HOUR, "--topics", ",".join(TOPICS)), *extra]
    return subprocess.run(
        command, env=load_env(), capture_output=True, text=True, timeout=600, start_new_session=True
    )


def checkpoint_file(wh: Path, topic: str) -> Path:
    return wh / "_checkpoints" / topic / f"{HOUR}.json"


@pytest.mark.timeout(900)  # two spark-submits; generous for a loaded machine
def test_each_topic_commits_alone_and_a_failing_one_is_named(cluster, tmp_path) -> None:
    for topic in TOPICS:
        cluster.register(topic, PAGE_VIEW)
    for topic in GOOD:
        cluster.produce(topic, [cluster.event(topic) for _ in range(300)])
    cluster.produce(BAD, [b"not an event %d" % i for i in range(40)])
    wh = tmp_path / "wh"
    started = datetime.now(UTC)

    first = submit(cluster, wh)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    for topic in GOOD:  # both committed: the one before the failure and the one after it
        checkpoint = json.loads(checkpoint_file(wh, topic).read_text())
        assert (checkpoint["topic"], checkpoint["rows"], checkpoint["bad_records"]) == (
            topic,
            300,
            0,
        )
        assert f"loaded {topic} {HOUR}: 300 rows" in first.stdout
        names = checkpoint["files"]
        assert names and all((wh / topic / f"load_hour={HOUR}" / n).exists() for n in names)
    versions = {json.loads(checkpoint_file(wh, t).read_text())["version"] for t in GOOD}
    assert len(versions) == 2, "each topic's commit is a version of its own"
    assert not checkpoint_file(wh, BAD).exists()
    # spark-submit's driver merges the Python driver's stderr into its stdout
    said = [line for line in first.stdout.splitlines() if line.startswith("hourly_load: ")]
    named = [line for line in said if line.startswith(f"hourly_load: topic '{BAD}' {HOUR}")]
    assert len(named) == 1 and "bad records" in named[0], out
    assert said[-1] == (
        f"hourly_load: 1 of 3 topics failed for {HOUR}: {BAD}; the others committed"
    )

    # The retry: the bad records now allowed (as after a fix of the settings); the topics the
    # first try committed are skipped, their checkpoints untouched, the failed one commits.
    before = {t: checkpoint_file(wh, t).read_bytes() for t in GOOD}
    retry = submit(
        cluster,
        wh,
        "--max-bad-fraction", "1",
        "--skip-committed-since", started.isoformat(),
    )  # fmt: skip
    assert retry.returncode == 0, retry.stdout + retry.stderr
    for topic in GOOD:
        assert f"skipped {topic} {HOUR}: committed at" in retry.stdout
        assert checkpoint_file(wh, topic).read_bytes() == before[topic]
    fixed = json.loads(checkpoint_file(wh, BAD).read_text())
    assert (fixed["rows"], fixed["bad_records"]) == (0, 40)
