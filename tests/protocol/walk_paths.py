"""The two implementations of the message-set walks, for tests that run both.

`python` is message_set.py's reference; `compiled` is _native.pyx's twin (built by `make
setup`). Both are taken directly, whichever one LOGBROKER_PURE_PYTHON makes the library
use. Without the extension the compiled cases skip, and test_native.py's
test_the_extension_is_built fails once, saying so. The same for Kafka 0.8's walks
(`Walks08`, `PATHS08`): kafka08/message_set.py's references and _native08.pyx's twins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from logbroker.protocol import native
from logbroker.protocol.kafka08 import message_set as set08
from logbroker.protocol.message import Message
from logbroker.protocol.message_set import (
    Buffer,
    MessageColumns,
    Validation,
    build_message_set_python,
    entry_at_or_after_python,
    iter_messages_python,
    message_columns_python,
    stored_set_end_python,
    validate_python,
    whole_entries_python,
)

Validate = Callable[..., Validation]
IterMessages = Callable[..., Iterator[Message]]
StoredSetEnd = Callable[..., tuple[int, int]]
BuildMessageSet = Callable[..., bytes]


class Walks(NamedTuple):
    name: str
    validate: Validate
    columns: Callable[[Buffer, int], MessageColumns]
    iter_messages: IterMessages
    stored_set_end: StoredSetEnd
    build_message_set: BuildMessageSet
    whole_entries: Callable[[Buffer], tuple[int, int]]
    entry_at_or_after: Callable[[Buffer, int, int], int]


PYTHON = Walks(
    "python",
    validate_python,
    message_columns_python,
    iter_messages_python,
    stored_set_end_python,
    build_message_set_python,
    whole_entries_python,
    entry_at_or_after_python,
)
COMPILED = (
    Walks(
        "compiled",
        native.COMPILED.validate,
        native.COMPILED.message_columns,
        native.COMPILED.iter_messages,
        native.COMPILED.stored_set_end,
        native.COMPILED.build_message_set,
        native.COMPILED.whole_entries,
        native.COMPILED.entry_at_or_after,
    )
    if native.COMPILED is not None
    else None
)
NOT_BUILT = pytest.mark.skipif(COMPILED is None, reason="the _native extension is not built")

# For @pytest.mark.parametrize("walks", PATHS): hypothesis tests cannot take a fixture.
PATHS = [pytest.param(PYTHON, id="python"), pytest.param(COMPILED, id="compiled", marks=NOT_BUILT)]


class Walks08(NamedTuple):
    name: str
    validate: Callable[..., set08.Validation]
    assign_offsets: Callable[..., set08.Assigned]
    entry_headers: Callable[..., Iterator[tuple[int, int, int]]]
    whole_entries: Callable[[Buffer], tuple[int, int]]
    index_points: Callable[..., tuple[list[set08.IndexPoint], int, int]]


PYTHON08 = Walks08(
    "python",
    set08.validate_python,
    set08.assign_offsets_python,
    set08.entry_headers_python,
    set08.whole_entries_python,
    set08.index_points_python,
)
COMPILED08 = (
    Walks08(
        "compiled",
        native.COMPILED08.validate,
        native.COMPILED08.assign_offsets,
        native.COMPILED08.entry_headers,
        native.COMPILED08.whole_entries,
        native.COMPILED08.index_points,
    )
    if native.COMPILED08 is not None
    else None
)
NOT_BUILT08 = pytest.mark.skipif(COMPILED08 is None, reason="the _native08 extension is not built")
PATHS08 = [
    pytest.param(PYTHON08, id="python"),
    pytest.param(COMPILED08, id="compiled", marks=NOT_BUILT08),
]
