# The compiled twins of message_set.py's walks (_native.pyx); signatures for mypy.
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from .message import Message
from .message_set import Buffer, InflateBudget, MessageColumns, Validation
from .requests import ProduceRequest, ProduceRun

def validate(
    buffer: Buffer,
    base_offset: int = 0,
    *,
    depth: int = 0,
    budget: InflateBudget | None = None,
    inflate: bool = True,
) -> Validation: ...
def message_columns(buffer: Buffer, base_offset: int = 0) -> MessageColumns: ...
def iter_messages(buffer: Buffer, base_offset: int = 0) -> Iterator[Message]: ...
def stored_set_end(buffer: Buffer, base_offset: int = 0) -> tuple[int, int]: ...
def whole_entries(buffer: Buffer) -> tuple[int, int]: ...
def entry_at_or_after(buffer: Buffer, position: int, end: int) -> int: ...
def build_message_set(payloads: Iterable[bytes], codec: int = 0, magic: int = 1) -> bytes: ...
def decode_produce_fast(frame_body: Buffer) -> ProduceRequest | None: ...
def produce_run(
    frames: memoryview, pos: int, end: int, max_request_bytes: int, max_message_size: int
) -> ProduceRun | None: ...
def encode_produce_set(
    prefix: bytes, partition: int, payloads: Iterable[bytes], codec: int = 0
) -> bytes: ...

CRC32: str

def crc32(data: Buffer, crc: int = 0) -> int: ...
def walk_entries(
    buf: npt.NDArray[np.uint8] | Buffer, entries: npt.NDArray[np.int64], check_crc: bool
) -> tuple[int, int, int]: ...
def gather_payloads(
    buf: npt.NDArray[np.uint8] | Buffer,
    entries: npt.NDArray[np.int64],
    stop: int,
    out: npt.NDArray[np.uint8],
    offsets: npt.NDArray[np.int32],
) -> None: ...
def digest_entries(
    buf: npt.NDArray[np.uint8] | Buffer, entries: npt.NDArray[np.int64], stop: int, base: int
) -> bytes: ...
