"""Network fixtures: hosts in network namespaces of their own (harness.hosts).

network_factory(hosts=3 or ["zk", "b1", ...]) -> a started Network, its files under tmp_path;
                closed after the test, failed or not: every process it started is stopped by PID,
                every namespace, veth and the bridge deleted. The test is skipped (with the
                reason) when namespaces cannot be made here (not root, no `ip`).

At the end of the session, a network of this session still present is an error (and removed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from harness.hosts import HostsUnavailableError, Network, our_names

NetworkFactory = Callable[..., Network]


@pytest.fixture(scope="session")
def _networks_of_session() -> Iterator[list[Network]]:
    made: list[Network] = []
    yield made
    present = our_names()
    left = [
        name
        for net in made
        for name in (net.bridge, *net.namespaces, *net.veths)
        if name in present["namespaces"] or name in present["links"]
    ]
    for net in made:
        net.close()
    assert not left, f"networks of this session were not removed by their tests: {left}"


@pytest.fixture
def network_factory(
    tmp_path: Path, _networks_of_session: list[Network]
) -> Iterator[NetworkFactory]:
    made: list[Network] = []

    def make(hosts: int | Sequence[str] = 3) -> Network:
        net = Network(tmp_path / f"network-{len(made)}", hosts)
        try:
            net.start()
        except HostsUnavailableError as exc:
            pytest.skip(str(exc))
        made.append(net)
        _networks_of_session.append(net)
        return net

    yield make
    errors = []
    for net in reversed(made):
        try:
            net.close()
        except Exception as exc:  # close the others all the same
            errors.append(exc)
    if errors:
        raise errors[0]
