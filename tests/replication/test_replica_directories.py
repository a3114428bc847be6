"""A replica's directory appears with its epoch file inside, whole (replicas.open_replica_log).

A broker killed -9 between making a new replica's directory and writing its epoch file left a
directory without the file that marks it as a replica's: its next start loaded it as a 0.7
topic's partition and then refused to take the replica's role, so the broker did not start
(seen once in the suite: test_controller's unclean election, broker 1 killed right after the
topic was created). The kill is the epoch file's write failing here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logbroker.config import BrokerConfig
from logbroker.replication.epochs import FILE_NAME as EPOCH_FILE
from logbroker.replication.epochs import LeaderEpochs
from logbroker.replication.replicas import open_replica_log
from logbroker.storage.log_manager import LogManager


class Killed(Exception):
    """The broker's process dies here."""


def test_a_broker_killed_while_making_a_replica_starts_and_takes_the_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = BrokerConfig(log_dir=str(tmp_path))
    logs = LogManager(config, replica_marker=EPOCH_FILE)

    def killed(self: LeaderEpochs, entries: list[tuple[int, int]]) -> None:
        raise Killed

    with monkeypatch.context() as patched:
        patched.setattr(LeaderEpochs, "_write", killed)
        with pytest.raises(Killed):
            open_replica_log(logs, "lossy", 0)
    # nothing a next start would take for a 0.7 topic's partition
    assert not logs.partition_dir("lossy", 0).exists()

    restarted = LogManager(config, replica_marker=EPOCH_FILE)
    assert restarted.topics() == []
    replica = open_replica_log(restarted, "lossy", 0)
    assert restarted.replicated_topics() == ["lossy"]
    assert (logs.partition_dir("lossy", 0) / EPOCH_FILE).exists()
    assert replica.end_offset == 0
    # the half-made directory is gone once the replica is made again
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".lossy")] == []
