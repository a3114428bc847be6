"""BrokerMetrics: counting, the Prometheus text format, and the HTTP endpoint on real sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import socket
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from logbroker.server.metrics import (
    CONTENT_TYPE,
    OVERFLOW,
    REQUEST_KINDS,
    BrokerMetrics,
    escape_label_value,
    format_value,
)
from logbroker.server.metrics_http import start_metrics_server

WEIRD = 'we"ird\\to\npic'  # a double quote, a backslash and a newline
WEIRD_ESCAPED = 'we\\"ird\\\\to\\npic'

BUILTIN_TYPES = {
    "logbroker_messages_in_total": "counter",
    "logbroker_bytes_in_total": "counter",
    "logbroker_bytes_out_total": "counter",
    "logbroker_requests_total": "counter",
    "logbroker_errors_total": "counter",
    "logbroker_connections_open": "gauge",
    "logbroker_connections_total": "counter",
    "logbroker_start_time_seconds": "gauge",
}


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def busy_metrics() -> BrokerMetrics:
    m = BrokerMetrics(7, clock=lambda: 1700000000.5)
    m.request("produce")
    m.request("produce")
    m.request("fetch")
    m.produced("clicks", 3, 300)
    m.produced("clicks", 2, 120)
    m.produced(WEIRD, 3, 33)
    m.fetched("clicks", 4096)
    m.error("offset_out_of_range", "clicks")
    m.error("offset_out_of_range", "clicks")
    m.error("invalid_request")
    m.connection_opened()
    m.connection_opened()
    m.connection_closed()
    return m


# -- counting ----------------------------------------------------------------------------


def test_snapshot_counts_every_call() -> None:
    snap = busy_metrics().snapshot()
    assert snap == {
        "broker_id": 7,
        "start_time_seconds": 1700000000.5,
        "requests": {**dict.fromkeys(REQUEST_KINDS, 0), "produce": 2, "fetch": 1},
        "messages_in": {"clicks": 5, WEIRD: 3},
        "bytes_in": {"clicks": 420, WEIRD: 33},
        "bytes_out": {"clicks": 4096},
        "errors": {"offset_out_of_range": {"clicks": 2}, "invalid_request": {"": 1}},
        "connections_open": 1,
        "connections_total": 2,
    }
    json.dumps(snap)  # plain data, for the CLI


def test_snapshot_is_a_copy() -> None:
    m = busy_metrics()
    snap = m.snapshot()
    snap["messages_in"]["clicks"] = 999
    snap["errors"]["invalid_request"][""] = 999
    m.produced("clicks", 1, 1)
    assert m.snapshot()["messages_in"]["clicks"] == 6
    assert m.snapshot()["errors"]["invalid_request"] == {"": 1}


def test_unknown_request_kinds_are_counted_too() -> None:
    m = BrokerMetrics(1)
    m.request("something_new")
    assert m.snapshot()["requests"]["something_new"] == 1
    assert 'logbroker_requests_total{broker="1",type="something_new"} 1\n' in m.render()


def test_series_per_family_are_capped_into_overflow() -> None:
    m = BrokerMetrics(1, max_series=2)
    m.produced("a", 1, 10)
    m.produced("b", 1, 10)
    m.produced("c", 1, 10)  # a third topic: over the cap
    m.produced("d", 2, 20)
    m.produced("a", 1, 10)  # known topics keep counting under their own name
    m.fetched("x", 1)
    m.fetched("y", 1)
    m.fetched("z", 5)
    m.error("wrong_partition", "t1")
    m.error("wrong_partition", "t2")
    m.error("wrong_partition", "t3")
    snap = m.snapshot()
    assert snap["messages_in"] == {"a": 2, "b": 1, OVERFLOW: 3}
    assert snap["bytes_in"] == {"a": 20, "b": 10, OVERFLOW: 30}
    assert snap["bytes_out"] == {"x": 1, "y": 1, OVERFLOW: 5}
    assert snap["errors"] == {"wrong_partition": {"t1": 1, "t2": 1, OVERFLOW: 1}}
    assert f'logbroker_messages_in_total{{broker="1",topic="{OVERFLOW}"}} 3\n' in m.render()


def test_max_series_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BrokerMetrics(1, max_series=0)


# -- rendering ---------------------------------------------------------------------------


def test_rendered_lines_exactly() -> None:
    lines = busy_metrics().render().splitlines()
    for expected in [
        'logbroker_messages_in_total{broker="7",topic="clicks"} 5',
        f'logbroker_messages_in_total{{broker="7",topic="{WEIRD_ESCAPED}"}} 3',
        'logbroker_bytes_in_total{broker="7",topic="clicks"} 420',
        f'logbroker_bytes_in_total{{broker="7",topic="{WEIRD_ESCAPED}"}} 33',
        'logbroker_bytes_out_total{broker="7",topic="clicks"} 4096',
        'logbroker_requests_total{broker="7",type="produce"} 2',
        'logbroker_requests_total{broker="7",type="fetch"} 1',
        'logbroker_requests_total{broker="7",type="metadata"} 0',
        'logbroker_errors_total{broker="7",kind="offset_out_of_range",topic="clicks"} 2',
        'logbroker_errors_total{broker="7",kind="invalid_request",topic=""} 1',
        'logbroker_connections_open{broker="7"} 1',
        'logbroker_connections_total{broker="7"} 2',
        'logbroker_start_time_seconds{broker="7"} 1700000000.5',
        "# TYPE logbroker_messages_in_total counter",
        "# TYPE logbroker_connections_open gauge",
    ]:
        assert expected in lines, expected


def test_escaping_of_label_values() -> None:
    assert escape_label_value(WEIRD) == WEIRD_ESCAPED
    assert escape_label_value("plain ünïcode") == "plain ünïcode"
    # the raw newline of the topic never reaches the output: one sample, one line
    text = busy_metrics().render()
    assert 'we"ird' not in text.replace('\\"', "")
    assert sum(1 for line in text.splitlines() if "ird" in line) == 2


def test_every_family_has_help_and_type_before_its_samples_even_when_empty() -> None:
    for m in (BrokerMetrics(3), busy_metrics()):
        families = parse_exposition(m.render())
        assert {name: f["type"] for name, f in families.items()} == BUILTIN_TYPES
        for f in families.values():
            assert f["help"]
    empty = parse_exposition(BrokerMetrics(3).render())
    assert empty["logbroker_messages_in_total"]["samples"] == []
    assert len(empty["logbroker_requests_total"]["samples"]) == len(REQUEST_KINDS)


def test_render_ends_with_a_newline_and_has_no_blank_lines() -> None:
    text = busy_metrics().render()
    assert text.endswith("\n")
    assert "" not in text[:-1].split("\n")


def test_format_value() -> None:
    assert format_value(0) == "0"
    assert format_value(12345678901234) == "12345678901234"
    assert format_value(3.0) == "3"
    assert format_value(0.25) == "0.25"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(1e300) == "1e+300"


def test_gauges_from_the_source_are_grouped_labelled_and_checked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = BrokerMetrics(7)

    def source() -> list[tuple[str, dict[str, str], float, str]]:
        return [
            ("logbroker_log_end_offset", {"topic": "clicks", "partition": "0"}, 1024, "end"),
            ("log_size_bytes", {"topic": WEIRD, "partition": "0"}, 2048.0, "size\non disk"),
            ("logbroker_log_end_offset", {"topic": "clicks", "partition": "1"}, 0, "end"),
            ("bad name", {}, 1, "x"),  # invalid metric name
            ("logbroker_x", {"bad-label": "v"}, 1, "x"),  # invalid label name
            ("logbroker_y", {"broker": "9"}, 1, "x"),  # would shadow the broker label
            ("logbroker_connections_open", {}, 5, "x"),  # a built-in name
            ("logbroker_z", {}, "not a number", "x"),  # type: ignore[list-item]
        ]

    m.set_gauge_source(source)
    with caplog.at_level(logging.WARNING, logger="logbroker.server.metrics"):
        text = m.render()
    families = parse_exposition(text)
    assert families["logbroker_log_end_offset"] == {
        "help": "end",
        "type": "gauge",
        "samples": [
            ({"broker": "7", "topic": "clicks", "partition": "0"}, 1024.0),
            ({"broker": "7", "topic": "clicks", "partition": "1"}, 0.0),
        ],
    }
    assert families["logbroker_log_size_bytes"]["samples"] == [
        ({"broker": "7", "topic": WEIRD, "partition": "0"}, 2048.0)
    ]
    assert "# HELP logbroker_log_size_bytes size\\non disk" in text.splitlines()
    assert set(families) == set(BUILTIN_TYPES) | {
        "logbroker_log_end_offset",
        "logbroker_log_size_bytes",
    }
    assert families["logbroker_connections_open"]["samples"] == [({"broker": "7"}, 0.0)]
    assert len([r for r in caplog.records if "left out" in r.getMessage()]) == 5

    m.set_gauge_source(None)
    assert "logbroker_log_end_offset" not in m.render()


def test_a_failing_gauge_source_leaves_the_counters(caplog: pytest.LogCaptureFixture) -> None:
    m = busy_metrics()

    def source() -> Any:
        yield ("logbroker_ok", {}, 1, "fine")
        raise RuntimeError("disk went away")

    m.set_gauge_source(source)
    with caplog.at_level(logging.ERROR, logger="logbroker.server.metrics"):
        text = m.render()
    assert text == busy_metrics().render()
    assert any("gauge source" in r.getMessage() for r in caplog.records)


# A parser of the text format 0.0.4, strict enough to catch what Prometheus would refuse.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_VALUE = r"(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)|NaN|[+-]Inf)"
_SAMPLE = re.compile(
    rf"(?P<name>{_NAME})(?:\{{(?P<labels>(?:{_LABEL})(?:,{_LABEL})*,?)?\}})? (?P<value>{_VALUE})(?: -?\d+)?"
)
_HELP = re.compile(rf"# HELP (?P<name>{_NAME}) (?P<text>(?:[^\\\n]|\\[\\n])*)")
_TYPE = re.compile(rf"# TYPE (?P<name>{_NAME}) (?P<type>counter|gauge|histogram|summary|untyped)")
_ONE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse_exposition(text: str) -> dict[str, dict[str, Any]]:
    """name -> {help, type, samples: [(labels, value)]}; asserts on anything out of grammar."""
    assert text.endswith("\n")
    families: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for line in text[:-1].split("\n"):
        if m := _HELP.fullmatch(line):
            name = m["name"]
            assert name not in families, f"second HELP for {name}"
            families[name] = {"help": _unescape(m["text"]), "type": None, "samples": []}
            current = name
        elif m := _TYPE.fullmatch(line):
            assert current is not None and m["name"] == current, f"TYPE without HELP: {line!r}"
            assert families[current]["type"] is None and not families[current]["samples"]
            families[current]["type"] = m["type"]
        elif line.startswith("#"):
            pytest.fail(f"unexpected comment line {line!r}")
        else:
            m = _SAMPLE.fullmatch(line)
            assert m, f"line out of the exposition grammar: {line!r}"
            assert current is not None and m["name"] == current, f"{line!r} outside {current}"
            labels = {k: _unescape(v) for k, v in _ONE_LABEL.findall(m["labels"] or "")}
            assert len(labels) == len(_ONE_LABEL.findall(m["labels"] or "")), "repeated label"
            value = m["value"]
            number = float("nan") if value == "NaN" else float(value.replace("Inf", "inf"))
            families[current]["samples"].append((labels, number))
    return families


def test_every_line_matches_the_exposition_grammar() -> None:
    m = busy_metrics()
    m.set_gauge_source(
        lambda: [
            ("logbroker_g", {"topic": WEIRD, "partition": "0"}, float("nan"), 'with "quotes"'),
            ("logbroker_g", {"topic": "t", "partition": "1"}, float("inf"), "ignored"),
            ("logbroker_h", {}, 0.125, "back\\slash"),
        ]
    )
    text = m.render()
    families = parse_exposition(text)  # asserts on every line
    non_comment = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(non_comment) == sum(len(f["samples"]) for f in families.values()) > 15
    # the weird topic survives the round trip through escaping
    topics = {labels.get("topic") for f in families.values() for labels, _ in f["samples"]} - {None}
    assert topics == {"clicks", WEIRD, "", "t"}
    for f in families.values():
        for labels, _ in f["samples"]:
            assert labels["broker"] == "7"
    g = families["logbroker_g"]["samples"]
    assert math.isnan(g[0][1]) and g[1][1] == math.inf
    assert families["logbroker_h"]["help"] == "back\\slash"


def test_the_grammar_check_itself_refuses_bad_lines() -> None:
    good = "# HELP a_total x\n# TYPE a_total counter\n"
    parse_exposition(good + 'a_total{topic="x"} 1\n')
    for bad in [
        'a_total{topic="a"b"} 1\n',  # unescaped quote
        "a_total{topic=x} 1\n",  # unquoted value
        'a_total{topic="x"} one\n',  # not a number
        'a_total{topic="x"}  1\n',  # two spaces
        'b_total{topic="x"} 1\n',  # outside its family
    ]:
        with pytest.raises(AssertionError):
            parse_exposition(good + bad)


# -- the HTTP endpoint -------------------------------------------------------------------


@asynccontextmanager
async def serving(metrics: BrokerMetrics, **kwargs: Any) -> AsyncIterator[int]:
    server = await start_metrics_server(metrics, "127.0.0.1", 0, **kwargs)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def exchange(
    port: int, raw: bytes, deadline: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; the status, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), deadline)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, status, _reason = status_line.split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    assert int(headers["content-length"]) == len(body)
    return int(status), headers, body


def test_get_metrics_answers_the_exposition() -> None:
    m = busy_metrics()

    async def main() -> None:
        async with serving(m) as port:
            status, headers, body = await exchange(
                port,
                b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n"
                b"User-Agent: Prometheus/2.0\r\n\r\n",
            )
            assert status == 200
            assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert headers["content-type"] == CONTENT_TYPE
            assert headers["connection"] == "close"
            assert body.decode("utf-8") == m.render()
            parse_exposition(body.decode("utf-8"))
            # a query string and HTTP/1.0 are fine too
            status, _, body2 = await exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert status == 200 and body2 == body
            # counts move between scrapes
            m.fetched("clicks", 4)
            _, _, body3 = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert b'logbroker_bytes_out_total{broker="7",topic="clicks"} 4100\n' in body3

    run(main())


def test_head_metrics_has_no_body() -> None:
    async def main() -> None:
        async with serving(busy_metrics()) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"HEAD /metrics HTTP/1.1\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert body == b""

    run(main())


def test_root_points_to_metrics() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(3)) as port:
            status, headers, body = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 200
            assert headers["content-type"].startswith("text/html")
            assert b'href="/metrics"' in body and b"broker 3" in body

    run(main())


@pytest.mark.parametrize("path", [b"/nothing", b"/metricsx", b"/metrics/", b"/favicon.ico"])
def test_other_paths_are_404(path: bytes) -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1)) as port:
            status, _, body = await exchange(port, b"GET " + path + b" HTTP/1.1\r\n\r\n")
            assert status == 404
            assert b"logbroker_" not in body

    run(main())


def test_other_methods_are_405() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1)) as port:
            status, headers, _ = await exchange(
                port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
            )
            assert status == 405
            assert headers["allow"] == "GET, HEAD"

    run(main())


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello, more or less
        b"GET /metrics\r\n\r\n",  # HTTP/0.9
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # closed before the end of the head
        b"GET /m\xc3\xa9trics HTTP/1.1\r\n\r\n",
    ],
)
def test_garbage_is_400(raw: bytes) -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1)) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            writer.write_eof()
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n"), data

    run(main())


def test_oversized_request_head_is_refused() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1), max_header_bytes=1024, read_timeout=5) as port:
            # a whole head, in one piece, 2 KB
            many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 50) for i in range(35))
            status, _, _ = await exchange(port, b"GET /metrics HTTP/1.1\r\n" + many + b"\r\n")
            assert status == 431
            status, _, _ = await exchange(port, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")
            assert status == 431
            # a head that never ends: refused as soon as it is too long, not at the timeout
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            start = time.monotonic()
            writer.write(b"GET /metrics HTTP/1.1\r\n" + b"X-Endless: " + b"x" * 3000)
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert data.startswith(b"HTTP/1.1 431 ")
            assert time.monotonic() - start < 2

    run(main())


def test_a_silent_client_is_closed_after_the_read_timeout() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1), read_timeout=0.3) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            start = time.monotonic()
            data = await asyncio.wait_for(reader.read(), 5)
            elapsed = time.monotonic() - start
            writer.close()
            assert data == b""  # closed, nothing said
            assert 0.2 <= elapsed < 3, elapsed

    run(main())


def test_a_dripping_client_gets_408_when_the_whole_head_is_late() -> None:
    """The timeout covers the whole request head, not each read: a byte every 50 ms
    would otherwise hold the connection for ever."""

    async def main() -> None:
        async with serving(BrokerMetrics(1), read_timeout=0.4) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            start = time.monotonic()

            async def drip() -> None:
                for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"x" * 1000:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.05)

            dripping = asyncio.create_task(drip())
            try:
                data = await asyncio.wait_for(reader.read(), 5)
            finally:
                dripping.cancel()
                writer.close()
            assert 0.3 <= time.monotonic() - start < 3
            assert data.startswith(b"HTTP/1.1 408 ")

    run(main())


def test_the_server_stops_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> int:
        server = await start_metrics_server(BrokerMetrics(1), "127.0.0.1", 0, read_timeout=0.3)
        port: int = server.sockets[0].getsockname()[1]
        status, _, _ = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 200
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.05)  # let the server accept it
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)
        assert not server.is_serving()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        # the connection open at the stop still ends, by its timeout
        assert await asyncio.wait_for(idle_reader.read(), 5) == b""
        idle_writer.close()
        await asyncio.sleep(0.05)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others == []
        return port

    with caplog.at_level(logging.WARNING):
        port: int = run(main())
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    with socket.socket() as s:  # nothing listens on the port any more
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
