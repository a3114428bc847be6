"""Warnings a client can cause: at most one line per cause per interval, every suppressed line
counted. The limiter with a hand-driven clock, then a real broker flooded with bad frames."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
import time

import pytest

from logbroker.protocol.requests import FetchRequest, encode_request
from logbroker.server.log_limiter import RateLimitedLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


LOGGER = "test.log_limiter"


@pytest.fixture
def limited(caplog: pytest.LogCaptureFixture) -> tuple[RateLimitedLog, FakeClock, list[str]]:
    """A limiter with a 10 s interval on a hand-driven clock, and the lines it logged (the
    list is the captured records, read when used)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = FakeClock()
    return RateLimitedLog(logging.getLogger(LOGGER), interval_s=10.0, clock=clock), clock, caplog


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_one_line_per_cause_per_interval_then_the_count(limited) -> None:
    warnings, clock, caplog = limited
    assert warnings.warning("bad_size", "closing connection from %s: size %d", "a:1", -1)
    for port in range(2, 7):
        clock.now += 1
        assert not warnings.warning(
            "bad_size", "closing connection from %s: size %d", f"a:{port}", -1
        )
    assert warnings.warning("timeout", "closing connection from %s: slow", "b:1")  # its own cause
    assert warnings.flush() == 0  # the interval is not over
    assert logged(caplog) == [
        "closing connection from a:1: size -1",
        "closing connection from b:1: slow",
    ]

    clock.now = 1010.0  # 10 s after the first line
    assert warnings.flush() == 1  # bad_size had 5 suppressed; timeout none: forgotten
    assert logged(caplog)[-1] == (
        "suppressed 5 more warnings of kind bad_size in the last 10.0 s; the last: "
        "closing connection from a:6: size -1"
    )
    # A new interval began with the summary: the flood goes on, one summary per interval.
    clock.now += 3
    assert not warnings.warning("bad_size", "closing connection from %s: size %d", "a:7", -1)
    assert warnings.flush() == 0
    clock.now += 7
    assert warnings.flush() == 1
    assert logged(caplog)[-1].startswith(
        "suppressed 1 more warnings of kind bad_size in the last 10.0 s"
    )
    assert len(logged(caplog)) == 4
    # Quiet for a whole interval: the next line is logged at once, with nothing to report.
    clock.now += 10
    assert warnings.flush() == 0
    assert warnings.warning("bad_size", "closing connection from %s: size %d", "a:8", -1)
    assert logged(caplog)[-1] == "closing connection from a:8: size -1"
    assert warnings.warning("timeout", "closing connection from %s: slow", "b:2")


def test_a_line_after_the_interval_reports_what_was_suppressed_first(limited) -> None:
    warnings, clock, caplog = limited
    for i in range(4):
        warnings.warning("x", "line %d", i)
    clock.now += 11  # no flush ran meanwhile
    assert warnings.warning("x", "line %d", 4)
    assert logged(caplog) == [
        "line 0",
        "suppressed 3 more warnings of kind x in the last 11.0 s; the last: line 3",
        "line 4",
    ]


def test_interval_zero_logs_every_line_and_negative_is_refused(caplog) -> None:
    caplog.set_level(logging.INFO, logger="test.zero")
    warnings = RateLimitedLog(logging.getLogger("test.zero"), 0, clock=FakeClock())
    for i in range(5):
        assert warnings.warning("x", "line %d", i)
    assert [r.getMessage() for r in caplog.records] == [f"line {i}" for i in range(5)]
    with pytest.raises(ValueError, match="0 or more"):
        RateLimitedLog(logging.getLogger("test.zero"), -1)


# ---------------------------------------------------------------------------------------
# A real broker, flooded.

FLOOD = 3000
SUMMARY = re.compile(r"suppressed (\d+) more warnings of kind request_size in the last")


def test_a_flood_of_bad_frames_writes_a_few_lines_and_counts_every_one(broker_factory) -> None:
    broker = broker_factory(connection_log_interval_ms=1000)
    bad = struct.pack(">i", -1) + struct.pack(">h", 1)  # size -1: closes at once
    for _ in range(FLOOD):
        with socket.create_connection(broker.address, timeout=10) as s:
            s.sendall(bad)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(10) == b""

    def accounted() -> tuple[int, int, int]:
        text = broker.log_since()
        single = [
            line
            for line in text.splitlines()
            if "closing connection from" in line and "suppressed" not in line
        ]
        counts = [int(n) for n in SUMMARY.findall(text)]
        return len(single), len(counts), sum(counts)

    deadline = time.monotonic() + 30
    while True:
        single, summaries, suppressed = accounted()
        if single + suppressed == FLOOD:
            break
        assert time.monotonic() < deadline, (single, summaries, suppressed)
        time.sleep(0.1)
    # Once: 9,100 lines for 10,000 bad frames. Now a line when a flood begins (or resumes
    # after a quiet second), and a count per second while it lasts.
    assert single <= summaries + 1
    assert single + summaries < FLOOD / 20
    # and the broker is still serving
    with socket.create_connection(broker.address, timeout=10) as s:
        s.sendall(encode_request(FetchRequest("t", 0, 0, 100)))
        assert s.recv(6) == struct.pack(">ih", 2, 0)  # an empty set, no error
