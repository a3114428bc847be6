"""What a connection received and has not handled yet (`connection._Unhandled`).

A producer that sends faster than compressed sets are inflated leaves up to 1 MiB waiting on
its connection. Each handling pass must resume inside what is there, not copy it again: the
copy per awaited set made snappy produce 20 times slower (bench/mirror.py, 5k msgs/s).
"""

from __future__ import annotations

import struct

from logbroker.server.connection import _Unhandled


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_whole_frames_are_handled_in_place_however_much_arrives_meanwhile() -> None:
    received = frame(b"\x00\x00" + b"a" * 100) * 50
    unhandled = _Unhandled()
    unhandled.keep(received, 0)
    unhandled.add(frame(b"\x00\x00late"))
    for n in range(50):
        data, pos = unhandled.take()
        assert data is received  # no copy while whole frames remain
        assert pos == n * 106
        unhandled.keep(data, pos + 106)
        unhandled.add(b"x" * 1000)  # more keeps arriving while each answer is awaited
    data, pos = unhandled.take()  # nothing of `received` left: what arrived is next
    assert (data[pos : pos + 10], len(unhandled)) == (frame(b"\x00\x00late"), 0)


def test_a_frame_split_across_reads_is_joined_in_order() -> None:
    whole = frame(b"\x00\x00" + bytes(range(200)))
    unhandled = _Unhandled()
    unhandled.keep(b"\xff" * 7 + whole[:3], 7)  # the size field itself is split
    assert unhandled.first_size() is None
    unhandled.add(whole[3:50])
    assert unhandled.first_size() == 202
    unhandled.add(whole[50:])
    data, pos = unhandled.take()
    assert data[pos:] == whole
    assert len(unhandled) == 0


def test_everything_left_comes_out_once_for_a_departed_client() -> None:
    unhandled = _Unhandled()
    unhandled.keep(b"..abc", 2)
    unhandled.add(b"def")
    assert unhandled.take_all() == b"abcdef"
    assert len(unhandled) == 0
