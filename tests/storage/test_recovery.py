"""Crash shapes on real segment files, each followed by reopening the log (no clean marker).

After recovery the log holds exactly the entries before the damage, no read returns a
damaged entry, and the next append lands right after the last good entry.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from logbroker.config import BrokerConfig
from logbroker.protocol.message_set import build_message_set, iter_messages, validate
from logbroker.storage.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from logbroker.storage.recovery import scan_valid_prefix

PAYLOADS = [f"event-{i:04d}".encode() * 3 for i in range(40)]


def written_log(tmp_path, segment_bytes=10_000):
    """A log of 40 messages in sets of 4, then a crash (no shutdown, so no marker)."""
    config = BrokerConfig(log_dir=str(tmp_path), log_file_size=segment_bytes)
    manager = LogManager(config)
    log = manager.get_or_create_log("clicks", 0)
    ends = []
    for i in range(0, len(PAYLOADS), 4):
        ends.append(log.append(build_message_set(PAYLOADS[i : i + 4]))[1])
    log.flush()
    last = log.segments[-1]
    return config, ends, last.path


def reopen(config):
    manager = LogManager(config)
    return manager, manager.get_log("clicks", 0)


def all_payloads(log):
    out = []
    for segment in log.segments:
        region = segment.region(0, segment.size)
        out += [m.payload for m in iter_messages(region.read(), region.offset)]
    return out


def check_recovered(config, good_end, expect_cut=True):
    manager, log = reopen(config)
    assert log.end_offset == good_end
    stored = all_payloads(log)
    assert stored == PAYLOADS[: len(stored)]
    assert (log in manager.recovered) == expect_cut
    offset, _next_offset = log.append(build_message_set([b"after-crash"]))
    assert offset == good_end
    assert all_payloads(log)[-1] == b"after-crash"
    return log


def test_tail_cut_in_the_middle_of_an_entry(tmp_path):
    config, ends, path = written_log(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(ends[-1] - 7)
    last_entry = 4 + 6 + len(PAYLOADS[-1])  # recovery is per entry: the set's first 3 stay
    log = check_recovered(config, ends[-1] - last_entry)
    assert log.recovery.truncated_bytes == last_entry - 7


def test_garbage_appended_after_the_last_entry(tmp_path):
    config, ends, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(b"nonsense block ADDED" * 10)
    check_recovered(config, ends[-1])


def test_flipped_byte_inside_the_last_payload(tmp_path):
    config, ends, path = written_log(tmp_path)
    with open(path, "r+b") as f:
        f.seek(ends[-1] - 3)
        byte = f.read(1)
        f.seek(ends[-1] - 3)
        f.write(bytes([byte[0] ^ 0x01]))
    # the last set's last entry is damaged; its three siblings before it stay
    last_entry = 4 + 6 + len(PAYLOADS[-1])
    check_recovered(config, ends[-1] - last_entry)


def test_zero_filled_tail(tmp_path):
    config, ends, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(b"\x00" * 4096)  # what a filesystem shows after a crash mid-extension
    check_recovered(config, ends[-1])


def test_compressed_payload_that_does_not_decode(tmp_path):
    config, ends, path = written_log(tmp_path)
    junk = b"\x1f\x8b not really gzip"
    wrapper = struct.pack(">iBBI", 6 + len(junk), 1, 1, zlib.crc32(junk)) + junk  # CRC is right
    with open(path, "ab") as f:
        f.write(wrapper)
    check_recovered(config, ends[-1])


def test_damage_in_a_compressed_set_cuts_the_whole_wrapper(tmp_path):
    config, _ends, path = written_log(tmp_path)
    with open(path, "ab") as f:
        f.write(build_message_set([b"inner-1", b"inner-2"], codec=2))
        f.write(build_message_set([b"inner-3"], codec=1)[:-2])  # torn
    _manager, log = reopen(config)
    assert all_payloads(log)[-2:] == [b"inner-1", b"inner-2"]
    assert validate(log.read(0, 10**6).read()).error is None


def test_clean_shutdown_skips_recovery_and_is_consumed(tmp_path):
    config, _ends, _path = written_log(tmp_path)
    manager, log = reopen(config)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    manager, log = reopen(config)
    assert manager.recovered == [] and log.recovery is None
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()  # a crash from now on recovers


def flip_byte(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))


def test_every_segment_is_checked_after_a_crash_and_a_cut_sets_the_later_ones_aside(tmp_path):
    """Damage in an older segment (a crash leaves it anywhere): the log ends before the bad
    entry, and the later segments, which would follow a gap, are set aside whole."""
    config, _ends, _path = written_log(tmp_path, segment_bytes=200)
    _manager, log = reopen(config)
    segments = log.segments
    assert len(segments) > 3
    second = segments[1]
    later = [s.path for s in segments[2:]]
    later_bytes = [path.read_bytes() for path in later]
    flip_byte(second.path, 4 + 6 + 2)  # a payload byte of its first message
    _manager, log = reopen(config)
    assert log.end_offset == second.base_offset  # its first message was the damaged one
    assert [s.path for s in log.segments] == [segments[0].path, second.path]
    assert all_payloads(log) == PAYLOADS[: len(all_payloads(log))]
    cut = log.recovery
    assert f"at offset {second.base_offset}:" in cut.reason  # a partition offset, not a file's
    assert cut.set_aside == tuple(p.with_name(f"{p.name}.truncated-{int(p.stem)}") for p in later)
    assert [p.read_bytes() for p in cut.set_aside] == later_bytes  # kept, never served
    assert cut.truncated_bytes == sum(map(len, later_bytes)) + second.size


def test_after_a_clean_shutdown_the_files_changed_while_down_are_checked(tmp_path):
    """A byte flipped, and a file cut inside an entry, while the broker was down after a
    clean shutdown: the broker did not check those bytes, so it checks them at start."""
    config, _ends, _path = written_log(tmp_path, segment_bytes=200)
    manager, log = reopen(config)
    segments = log.segments
    manager.shutdown()
    entry = 4 + 6 + len(PAYLOADS[0])
    flip_byte(segments[2].path, entry + 4 + 6 + 2)  # its second message's payload
    manager, log = reopen(config)
    assert log.end_offset == segments[2].base_offset + entry and log in manager.recovered
    assert all_payloads(log) == PAYLOADS[: len(all_payloads(log))]
    end = log.end_offset
    manager.shutdown()
    with open(log.segments[-1].path, "r+b") as f:  # a torn end: the last entry cut short
        f.truncate(log.segments[-1].size - 3)
    manager, log = reopen(config)
    assert end - log.end_offset == entry and log in manager.recovered
    assert all_payloads(log) == PAYLOADS[: len(all_payloads(log))]
    manager.shutdown()
    manager, log = reopen(config)  # untouched since: nothing to check, nothing cut
    assert manager.recovered == [] and log.recovery is None


@pytest.mark.parametrize("window", [64, 100, 4096])
def test_scan_reads_entries_larger_than_its_window(tmp_path, window):
    data = build_message_set([b"w" * 300, b"v" * 10, b"u" * 500])
    path = tmp_path / "seg"
    path.write_bytes(data + data[:5])
    with open(path, "rb") as f:
        valid, reason = scan_valid_prefix(f.fileno(), len(data) + 5, window=window)
    assert valid == len(data)
    assert "partial entry" in reason


def test_what_recovery_cuts_is_moved_aside_and_never_read_as_a_segment(tmp_path, caplog):
    config, ends, path = written_log(tmp_path)
    original = path.read_bytes()
    flip_byte(path, ends[2] + 10 + 4)  # a payload byte of the first message of the 4th set
    damaged = path.read_bytes()
    with caplog.at_level("WARNING"):
        log = check_recovered(config, ends[2])
    aside = path.with_name(f"{path.name}.truncated-{ends[2]}")
    assert log.recovery.kept_in == aside
    assert aside.read_bytes() == damaged[ends[2] :]  # every byte cut, the damaged one too
    assert log.recovery.truncated_bytes == len(original) - ends[2]
    assert log.recovery.truncated_entries == len(PAYLOADS) - 12  # all framed, one damaged
    (line,) = [r.getMessage() for r in caplog.records if "recovery after" in r.getMessage()]
    assert f"cut {len(original) - ends[2]} bytes (28 messages by their size fields)" in line
    assert f"at offset {ends[2]}: " in line and f"kept in {aside}" in line
    # Another crash: the aside file is not a segment, nothing more is cut, nothing is served
    # from it, and it stays.
    manager, again = reopen(config)
    assert [s.path.name for s in again.segments] == [path.name]
    assert again.end_offset == ends[2] + len(build_message_set([b"after-crash"]))
    assert manager.recovered == [] and aside.read_bytes() == damaged[ends[2] :]


def test_a_second_cut_at_the_same_offset_gets_its_own_file(tmp_path):
    config, ends, path = written_log(tmp_path)
    good_end = ends[-2] + 3 * (4 + 6 + len(PAYLOADS[0]))  # the last set's first 3 entries stay
    first_aside = path.with_name(f"{path.name}.truncated-{good_end}")
    first_aside.write_bytes(b"an earlier cut")  # e.g. a crash between copy and truncate
    with open(path, "r+b") as f:
        f.truncate(ends[-1] - 1)
    log = check_recovered(config, good_end)
    assert log.recovery.kept_in == first_aside.with_name(first_aside.name + ".1")
    assert log.recovery.kept_in.stat().st_size == 4 + 6 + len(PAYLOADS[0]) - 1
    assert first_aside.read_bytes() == b"an earlier cut"


def test_a_new_empty_log_dir_is_not_an_unclean_shutdown(tmp_path, caplog):
    with caplog.at_level("INFO", logger="logbroker.storage.log_manager"):
        LogManager(BrokerConfig(log_dir=str(tmp_path / "new")))
    messages = [r.getMessage() for r in caplog.records]
    assert any("(no logs yet)" in m for m in messages), messages
    assert not any("unclean" in m for m in messages)
    assert all(r.levelname == "INFO" for r in caplog.records)
