"""The bounded pool of open segment files: few descriptors, and never one taken from a reader."""

from __future__ import annotations

import os
from pathlib import Path

from logbroker.protocol.message_set import build_message_set, iter_messages
from logbroker.storage.log import Log, LogConfig
from logbroker.storage.open_files import OpenFiles


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def clock() -> int:
    return 1_000


def test_many_logs_hold_no_more_files_than_the_pool(tmp_path: Path) -> None:
    files = OpenFiles(4)
    before = open_descriptors()
    logs = [Log(tmp_path / f"t-{p}", "t", p, LogConfig(), clock, files=files) for p in range(50)]
    for p, part_log in enumerate(logs):
        part_log.append(_one_message(b"message %d" % p))
    assert len(files) <= 4
    assert open_descriptors() - before <= 4
    for p, part_log in enumerate(logs):  # every log reads back, reopening as it goes
        assert _payload(part_log.read(0, 1000).read()) == b"message %d" % p
    assert open_descriptors() - before <= 4


def test_a_region_keeps_its_file_while_the_pool_lets_it_go_or_retention_deletes_it(
    tmp_path: Path,
) -> None:
    files = OpenFiles(1)
    first = Log(tmp_path / "a-0", "a", 0, LogConfig(), clock, files=files)
    first.append(_one_message(b"kept for the reader"))
    region = first.read(0, 1000)
    held = region.file()  # what the server holds while sendfile runs
    second = Log(tmp_path / "b-0", "b", 0, LogConfig(), clock, files=files)
    second.append(_one_message(b"pushes the first out of the pool"))
    assert first.segments[0].open_file is None  # let go by the pool...
    assert not held.closed  # ...but not closed under its holder
    first.delete_segments_while(lambda segment: True)
    assert not first.segments[0].path.exists() or first.segments[0].size == 0
    assert _payload(region.read()) == b"kept for the reader"  # deleted, still readable


def _one_message(payload: bytes) -> bytes:
    return build_message_set([payload])


def _payload(data: bytes) -> bytes:
    (message,) = iter_messages(data)
    return message.payload
