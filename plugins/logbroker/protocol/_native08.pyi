# The compiled twins of kafka08/message_set.py's walks (_native08.pyx); signatures for mypy.
from collections.abc import Iterator
from typing import Any

from .kafka08.message_set import Assigned, IndexPoint, Validation
from .message_set import InflateBudget
from .wire import Buffer

def validate(
    buffer: Buffer,
    *,
    budget: InflateBudget | None = None,
    inflate: bool = True,
    stored: bool = False,
) -> Validation: ...
def assign_offsets(
    buffer: Buffer,
    next_offset: int,
    *,
    budget: InflateBudget | None = None,
    validation: Validation | None = None,
) -> Assigned: ...
def entry_headers(buffer: Buffer, position: int = 0) -> Iterator[tuple[int, int, int]]: ...
def whole_entries(buffer: Buffer) -> tuple[int, int]: ...
def index_points(
    buffer: Buffer, position: int, last_indexed: int, interval: int, limit: int | None = None
) -> tuple[list[IndexPoint], int, int]: ...

CRC32: str

# spark_apps/source/keyed_kernels.py's loops (their pure-Python twins are there)
def keyed_entries(
    buf: Any,
    from_offset: int,
    check_crc: bool,
    offsets: Any,
    value_starts: Any,
    value_ends: Any,
    key_starts: Any,
    key_lengths: Any,
) -> tuple[int, int, int, int]: ...
def gather_spans(
    buf: Any, starts: Any, ends: Any, pad: int, out: Any, out_offsets: Any
) -> None: ...
def digest_keyed(
    buf: Any,
    offsets: Any,
    value_starts: Any,
    value_ends: Any,
    key_starts: Any,
    key_lengths: Any,
) -> bytes: ...
