"""BrokerMetrics: counting, the Prometheus text format (written by prometheus_client from our
collector), and the HTTP endpoint (prometheus_client's server) on real sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import socket
import threading
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from logbroker.server.metrics import (
    CONTENT_TYPE,
    OVERFLOW,
    REQUEST_KINDS,
    BrokerMetrics,
    serve_metrics,
)

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
    "logbroker_isr_shrinks_total": "counter",
    "logbroker_isr_expands_total": "counter",
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
    m.isr_changed(True, False)
    m.isr_changed(True, True)
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
        "isr_shrinks": 2,
        "isr_expands": 1,
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
    assert 'logbroker_requests_total{broker="1",type="something_new"} 1.0\n' in m.render()


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
    assert f'logbroker_messages_in_total{{broker="1",topic="{OVERFLOW}"}} 3.0\n' in m.render()


def test_max_series_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BrokerMetrics(1, max_series=0)


# -- rendering ---------------------------------------------------------------------------


def test_rendered_lines_exactly() -> None:
    lines = busy_metrics().render().splitlines()
    for expected in [
        'logbroker_messages_in_total{broker="7",topic="clicks"} 5.0',
        f'logbroker_messages_in_total{{broker="7",topic="{WEIRD_ESCAPED}"}} 3.0',
        'logbroker_bytes_in_total{broker="7",topic="clicks"} 420.0',
        f'logbroker_bytes_in_total{{broker="7",topic="{WEIRD_ESCAPED}"}} 33.0',
        'logbroker_bytes_out_total{broker="7",topic="clicks"} 4096.0',
        'logbroker_requests_total{broker="7",type="produce"} 2.0',
        'logbroker_requests_total{broker="7",type="fetch"} 1.0',
        'logbroker_requests_total{broker="7",type="metadata"} 0.0',
        'logbroker_errors_total{broker="7",kind="offset_out_of_range",topic="clicks"} 2.0',
        'logbroker_errors_total{broker="7",kind="invalid_request",topic=""} 1.0',
        'logbroker_connections_open{broker="7"} 1.0',
        'logbroker_connections_total{broker="7"} 2.0',
        'logbroker_start_time_seconds{broker="7"} 1.7000000005e+09',
        'logbroker_isr_shrinks_total{broker="7"} 2.0',
        'logbroker_isr_expands_total{broker="7"} 1.0',
        "# TYPE logbroker_messages_in_total counter",
        "# TYPE logbroker_connections_open gauge",
    ]:
        assert expected in lines, expected


def test_escaping_of_label_values() -> None:
    m = BrokerMetrics(1)
    m.produced("plain ünïcode", 1, 1)
    assert 'topic="plain ünïcode"} 1.0' in m.render()
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


def test_values_round_trip_exactly() -> None:
    m = BrokerMetrics(1)
    m.fetched("big", 12345678901234)
    m.set_gauge_source(lambda: [("q", {}, 0.25, "quarter"), ("huge", {}, 1e300, "huge")])
    families = parse_exposition(m.render())
    assert families["logbroker_bytes_out_total"]["samples"] == [
        ({"broker": "1", "topic": "big"}, 12345678901234.0)
    ]
    assert families["logbroker_q"]["samples"] == [({"broker": "1"}, 0.25)]
    assert families["logbroker_huge"]["samples"] == [({"broker": "1"}, 1e300)]


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


# -- the HTTP endpoint (prometheus_client's server) ---------------------------------------


@asynccontextmanager
async def serving(metrics: BrokerMetrics) -> AsyncIterator[int]:
    server = await serve_metrics(metrics, "127.0.0.1", 0)
    try:
        yield server.address[1]
    finally:
        await server.stop()


async def exchange(
    port: int, raw: bytes, deadline: float = 30.0
) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; the status, headers and body. The event
    loop stays free meanwhile: the scrape collects on it."""
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
    assert version in ("HTTP/1.0", "HTTP/1.1")
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
            assert body.decode("utf-8") == m.render()
            families = parse_exposition(body.decode("utf-8"))
            assert set(BUILTIN_TYPES) <= set(families)
            # a query string and HTTP/1.0 are fine too
            status, _, body2 = await exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert status == 200 and body2 == body
            # counts move between scrapes
            m.fetched("clicks", 4)
            _, _, body3 = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert b'logbroker_bytes_out_total{broker="7",topic="clicks"} 4100.0\n' in body3

    run(main())


def test_the_scrape_collects_on_the_event_loop() -> None:
    """prometheus_client answers from its own thread; the counts and the gauge source are
    read on the broker's loop thread, where they change."""
    m = BrokerMetrics(1)
    collected_on: list[int] = []

    def source() -> list[tuple[str, dict[str, str], float, str]]:
        collected_on.append(threading.get_ident())
        return [("logbroker_g", {}, 1, "g")]

    m.set_gauge_source(source)

    async def main() -> None:
        async with serving(m) as port:
            status, _, body = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert status == 200 and b'logbroker_g{broker="1"} 1.0' in body

    run(main())
    assert collected_on == [threading.get_ident()]


def test_other_methods_are_refused_and_garbage_leaves_the_server_serving() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1)) as port:
            status, headers, _ = await exchange(
                port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
            )
            assert status == 405 and "GET" in headers["allow"]
            for raw in [
                b"garbage\r\n\r\n",
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            ]:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(raw)
                writer.write_eof()
                data = await asyncio.wait_for(reader.read(), 30)
                writer.close()
                assert b"logbroker_" not in data, raw
            status, _, _ = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert status == 200

    run(main())


def test_a_silent_client_does_not_hold_the_endpoint() -> None:
    async def main() -> None:
        async with serving(BrokerMetrics(1)) as port:
            silent = await asyncio.open_connection("127.0.0.1", port)
            _reader, dripping = await asyncio.open_connection("127.0.0.1", port)
            dripping.write(b"GET /metrics HTTP/1.1\r\nX-Slow: xx")
            # both stay connected, saying nothing more: a scrape is answered all the same
            status, _, body = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert status == 200 and body
            silent[1].close()
            dripping.close()

    run(main())


def test_the_server_stops_cleanly(caplog: pytest.LogCaptureFixture) -> None:
    before = set(threading.enumerate())

    async def main() -> int:
        server = await serve_metrics(BrokerMetrics(1), "127.0.0.1", 0)
        port: int = server.address[1]
        status, _, _ = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert status == 200
        await asyncio.wait_for(server.stop(), 30)
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        return port

    with caplog.at_level(logging.WARNING):
        port: int = run(main())
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    # the serving thread is gone (request threads are prometheus_client's daemon threads)
    assert not [t for t in set(threading.enumerate()) - before if t.name == "metrics-http"]
    with socket.socket() as s:  # nothing listens on the port any more
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
