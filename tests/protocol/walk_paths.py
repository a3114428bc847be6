"""The two implementations of the message-set walks, for tests that run both.

`python` is message_set.py's reference; `compiled` is _native.pyx's twin (built by `make
setup`). Both are taken directly, whichever one LOGBROKER_PURE_PYTHON makes the library
use. Without the extension the compiled cases skip, and test_native.py's
test_the_extension_is_built fails once, saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import pytest

from logbroker.protocol import native
from logbroker.protocol.message_set import (
    Buffer,
    MessageColumns,
    Validation,
    message_columns_using,
    plain_run_python,
    validate_python,
)

Validate = Callable[..., Validation]


class Walks(NamedTuple):
    name: str
    validate: Validate
    columns: Callable[[Buffer, int], MessageColumns]


PYTHON = Walks("python", validate_python, partial(message_columns_using, plain_run_python))
COMPILED = (
    Walks(
        "compiled",
        native.COMPILED.validate,
        partial(message_columns_using, native.COMPILED.plain_run),
    )
    if native.COMPILED is not None
    else None
)
NOT_BUILT = pytest.mark.skipif(COMPILED is None, reason="the _native extension is not built")

# For @pytest.mark.parametrize("walks", PATHS): hypothesis tests cannot take a fixture.
PATHS = [pytest.param(PYTHON, id="python"), pytest.param(COMPILED, id="compiled", marks=NOT_BUILT)]
