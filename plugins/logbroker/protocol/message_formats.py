"""The two message formats a partition's log can hold, as the walks that tell them apart.

    format  entry                                      offsets   module
    "0.7"   size int32 | message (magic, attrs, crc)   bytes     message_set.py
    "0.8"   offset int64 | size int32 | message        logical   kafka08/message_set.py

A topic's format is chosen when it is created (docs/protocol.md, "Message formats"); every
replica of its partitions holds it. What does not depend on the log's layout but on its
entries goes through a `MessageFormat`: a follower finds the whole entries of what its leader
sent, checks each one before it appends them (sizes, magic, codec, CRCs; a compressed wrapper
as far as its own CRC and codec, as Kafka's followers check), and learns how large a fetch
must be for an entry that did not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from . import message_set as v07
from .errors import InvalidMessageError
from .kafka08 import message_set as v08
from .wire import Buffer


class MessageFormat(NamedTuple):
    name: str
    whole_entries: Callable[[Buffer], tuple[int, int]]
    "Where the whole entries at the start of a buffer end, and how many there are."
    first_entry_size: Callable[[Buffer], int | None]
    "Bytes the first entry needs (its framing included); None when its size is not there."
    check: Callable[[Buffer, int], InvalidMessageError | None]
    "The first damaged entry of whole entries that start at `offset`, or None."
    next_offset: Callable[[Buffer, int], int]
    "The offset after whole entries that start at `offset` (bytes, or messages: the format's)."


def _check_07(data: Buffer, offset: int) -> InvalidMessageError | None:
    found = v07.validate(data, offset, inflate=False)
    if found.error is None and found.valid_bytes != len(data):
        return InvalidMessageError(f"the entries from offset {offset} are cut short")
    return found.error


def _check_08(data: Buffer, offset: int) -> InvalidMessageError | None:
    found = v08.validate(data, inflate=False, stored=True)
    error = found.error
    if error is None and found.valid_bytes != len(data):
        error = InvalidMessageError("the entries are cut short")
    if error is not None:
        return type(error)(f"in the entries from offset {offset}: {error}")
    return None


def _next_07(data: Buffer, offset: int) -> int:
    return offset + len(data)  # byte offsets


def _next_08(data: Buffer, offset: int) -> int:
    last = offset - 1  # logical offsets: the last entry's own (a wrapper's is its last message's)
    for stored, _position, _size in v08.entry_headers(data):
        last = stored
    return last + 1


FORMAT_07 = MessageFormat("0.7", v07.whole_entries, v07.first_entry_size, _check_07, _next_07)
FORMAT_08 = MessageFormat("0.8", v08.whole_entries, v08.first_entry_size, _check_08, _next_08)
FORMATS = {f.name: f for f in (FORMAT_07, FORMAT_08)}
