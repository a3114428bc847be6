"""Each test that takes `walks`, or one of the walks by its name (`validate`,
`iter_messages`, `stored_set_end`, `build_message_set`), runs once per implementation, the
pure-Python reference and the compiled twin (walk_paths.py), all its walks from the same one.
A test that takes `walks08` does the same with Kafka 0.8's walks.
"""

from __future__ import annotations

import pytest

from .walk_paths import (
    PATHS,
    PATHS08,
    BuildMessageSet,
    IterMessages,
    StoredSetEnd,
    Validate,
    Walks,
    Walks08,
)


@pytest.fixture(params=PATHS)
def walks(request: pytest.FixtureRequest) -> Walks:
    path: Walks = request.param
    return path


@pytest.fixture
def validate(walks: Walks) -> Validate:
    return walks.validate


@pytest.fixture
def iter_messages(walks: Walks) -> IterMessages:
    return walks.iter_messages


@pytest.fixture
def stored_set_end(walks: Walks) -> StoredSetEnd:
    return walks.stored_set_end


@pytest.fixture
def build_message_set(walks: Walks) -> BuildMessageSet:
    return walks.build_message_set


@pytest.fixture(params=PATHS08)
def walks08(request: pytest.FixtureRequest) -> Walks08:
    path: Walks08 = request.param
    return path
