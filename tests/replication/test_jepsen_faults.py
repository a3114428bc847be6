"""Replicated topics under partitions, pauses and kills, on separate hosts (issue 30).

One short fault run of logbroker.testing.jepsen (seed 1, one round: every kind of fault once):
ZooKeeper and three brokers each on a network namespace of its own, two producers (acks=-1,
three threads each) and a reader on hosts of their own; the nemesis kills the leader of a
partition and the controller (each started again), pauses a leader past its ZooKeeper
session, cuts a follower off from its leader and a leader off from ZooKeeper only. The
assertion is the checker's verdict: no acknowledged write lost, nothing a reader saw lost or
changed, replicas byte-identical below the high watermark, one leader per leader epoch, no
value stored more often than it was sent. Then the checker is shown the same history with
one violation put in by hand, for each check, and must name it.

Skipped, with the reason, where network namespaces cannot be made (not root, no `ip`).
`make chaos-replication` runs the same for minutes at three seeds (docs/chaos.md).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logbroker.testing.hosts import HostsUnavailableError, Network
from logbroker.testing.jepsen import checker
from logbroker.testing.jepsen.checker import log_bytes
from logbroker.testing.jepsen.nemesis import KINDS, Schedule
from logbroker.testing.jepsen.run import Outcome, Settings, run

pytestmark = pytest.mark.slow  # ~40 s: one run of the cluster, shared by the module


@pytest.fixture(scope="module")
def outcome(
    tmp_path_factory: pytest.TempPathFactory, _networks_of_session: list[Network]
) -> Iterator[Outcome]:
    settings = Settings(seed=1, duration_s=0)
    directory = tmp_path_factory.mktemp("faults")
    net = Network(directory / "hosts", settings.hosts())
    try:
        net.start()
    except HostsUnavailableError as exc:
        pytest.skip(str(exc))
    _networks_of_session.append(net)  # the session's check that nothing of it is left
    try:
        yield run(net, settings, directory / "results", log=lambda line: None)
    finally:
        net.close()


def _violations(history: dict[str, Any]) -> dict[str, dict[str, Any]]:
    verdict = checker.check(history)
    return {name: r for name, r in verdict["checks"].items() if not r["ok"]}


def test_a_seed_fixes_the_schedule_and_a_round_has_every_fault() -> None:
    one = list(Schedule.seeded(7, 3).steps())
    assert one == list(Schedule.seeded(7, 3).steps())
    assert sorted(step.kind for step in one) == sorted(KINDS)
    assert one != list(Schedule.seeded(8, 3).steps())


def test_under_every_fault_no_acknowledged_write_is_lost(outcome: Outcome) -> None:
    text = (outcome.results / "summary.txt").read_text()
    faults = outcome.history["faults"]
    assert sorted(e["kind"] for e in faults) == sorted(KINDS), text
    # each fault did what it is for: a leader moved, a session ended, a follower left the ISR
    assert all(e["took_effect"] and not e["skipped"] for e in faults), text
    assert outcome.verdict["valid"], text
    stats = outcome.verdict["stats"]
    assert stats["acknowledged"] > 0 and stats["reads"] > 0, text
    assert stats["stored"] >= stats["acknowledged"], text
    replicas = outcome.history["replicas"]
    assert all(len(replicas[p]) == 3 for p in replicas), text


def test_the_checker_catches_an_acknowledged_write_removed(outcome: Outcome) -> None:
    history = copy.deepcopy(outcome.history)
    op = next(op for op in history["ops"] if op["type"] == "ok")
    final = history["final"][str(op["partition"])]
    final["messages"] = [m for m in final["messages"] if m[2] != op["value"]]
    found = _violations(history)
    assert found["acknowledged_kept"]["count"] == 1
    assert op["value"] in found["acknowledged_kept"]["examples"][0]
    assert "replicas_identical" in found  # the final read no longer matches the disks


def test_the_checker_catches_a_message_seen_then_changed(outcome: Outcome) -> None:
    history = copy.deepcopy(outcome.history)
    read = history["reads"][-1]
    final = history["final"][str(read["partition"])]
    for message in final["messages"]:
        if message[0] == read["offset"]:
            message[2] = "x" * len(message[2])  # the same size: only the value changed
    found = _violations(history)
    assert found["seen_kept"]["count"] == 1
    assert read["value"] in found["seen_kept"]["examples"][0]
    assert "no_unexplained_copies" in found  # and nobody sent "xxx..."


def test_the_checker_catches_a_replica_that_differs(outcome: Outcome) -> None:
    history = copy.deepcopy(outcome.history)
    replica = history["replicas"]["0"]["2"]
    replica["sha256"] = "0" * 64
    found = _violations(history)
    assert set(found) == {"replicas_identical"}
    assert "broker 2's replica differs" in found["replicas_identical"]["examples"][0]


def test_the_checker_catches_two_leaders_in_one_epoch(outcome: Outcome) -> None:
    history = copy.deepcopy(outcome.history)
    partition, epoch, broker = history["leader_claims"][0]
    history["leader_claims"].append([partition, epoch, broker % 3 + 1])
    found = _violations(history)
    assert set(found) == {"one_leader_per_epoch"}
    assert (
        f"p{partition} leader epoch {epoch} had leaders"
        in found["one_leader_per_epoch"]["examples"][0]
    )


def test_the_checker_catches_a_copy_of_a_write_sent_once(outcome: Outcome) -> None:
    history = copy.deepcopy(outcome.history)
    op = next(op for op in history["ops"] if op["type"] == "ok" and op["attempts"] == 1)
    final = history["final"][str(op["partition"])]
    end = final["high_watermark"]
    final["messages"].append([end, end + len(log_bytes([op["value"]])), op["value"]])
    final["high_watermark"] = end + len(log_bytes([op["value"]]))
    found = _violations(history)
    assert found["no_unexplained_copies"]["examples"] == [
        f"{op['value']} is stored 2 times, sent 1 time(s) (ok, p{op['partition']})"
    ]


def test_the_results_are_written_for_people(outcome: Outcome) -> None:
    files = outcome.files
    assert {"history", "verdict", "summary"} <= set(files)
    assert all(Path(path).stat().st_size > 0 for path in files.values())
    assert (outcome.results / "summary.txt").read_text().startswith("VALID")
