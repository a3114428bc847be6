"""`validate`: each test that takes it runs against both message-set walks (walk_paths.py)."""

from __future__ import annotations

import pytest

from .walk_paths import PATHS, Validate, Walks


@pytest.fixture(params=PATHS)
def validate(request: pytest.FixtureRequest) -> Validate:
    walks: Walks = request.param
    return walks.validate
