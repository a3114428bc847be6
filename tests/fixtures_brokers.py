"""Broker fixtures: real `logbroker broker` subprocesses on free 127.0.0.1 ports.

broker_factory(broker_id=0, zk=zk_chroot or None, **overrides) -> a started BrokerProcess
                    every broker it made is stopped (SIGTERM, then SIGKILL) after the test
standalone_broker   one broker without ZooKeeper
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logbroker.stack.broker import BrokerProcess
from logbroker.stack.zookeeper import ZkTarget

BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    made: list[BrokerProcess] = []

    def make(
        broker_id: int = 0, zk: ZkTarget | None = None, start: bool = True, **overrides: object
    ) -> BrokerProcess:
        broker = BrokerProcess(
            tmp_path / f"broker-{broker_id}-{len(made)}",
            broker_id=broker_id,
            zk_connect=zk.connect if zk is not None else None,
            overrides={k.replace("_", "."): str(v) for k, v in overrides.items()},
        )
        made.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in made:
        broker.stop(timeout=15)


@pytest.fixture
def standalone_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()
