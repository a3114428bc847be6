"""What operators see of a broker: counters in Prometheus' text format (served by metrics_http).

No third-party dependency: the counters are plain dicts and `render()` writes the text
exposition format 0.0.4 itself.

    logbroker_messages_in_total{broker,topic}       messages appended (valid ones only)
    logbroker_bytes_in_total{broker,topic}          bytes of those messages
    logbroker_bytes_out_total{broker,topic}         bytes served by fetches
    logbroker_requests_total{broker,type}           requests received, by type
    logbroker_errors_total{broker,kind,topic}       errors, topic="" when there is none
    logbroker_connections_open{broker}              gauge: client connections open now
    logbroker_connections_total{broker}             client connections accepted
    logbroker_start_time_seconds{broker}            gauge: when the broker started (Unix time)
    ...                                             gauges of `set_gauge_source`, at scrape time

Threading: the broker counts from its one asyncio thread and `render()` runs on the same loop
(the HTTP server calls it), so the counting takes no lock; each call is a dict lookup and an
add. Counts from other threads would need the caller to hop onto the loop first.

Cardinality: topics and error kinds come from clients, and a client may name any legal topic
in a fetch that fails. Each family keeps at most `max_series` label sets; beyond that the
counts go to the topic (or type/kind) OVERFLOW, "/overflow", which no legal topic can be.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "logbroker_"

# The request types the server counts; they start at 0 so that rate() sees them from the start.
REQUEST_KINDS = (
    "produce",
    "multiproduce",
    "fetch",
    "multifetch",
    "offsets",
    "produce_ack",
    "fetch_wait",
    "metadata",
    "create_topic",
    "unknown",
)

# Where counts go once a family holds max_series label sets. '/' is illegal in topic names.
OVERFLOW = "/overflow"

GaugeSample = tuple[str, dict[str, str], float, str]  # name, labels, value, help

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")

_BUILTIN = {
    # name: (type, help)
    "logbroker_messages_in_total": ("counter", "Messages appended to the log, by topic."),
    "logbroker_bytes_in_total": ("counter", "Bytes of messages appended to the log, by topic."),
    "logbroker_bytes_out_total": ("counter", "Bytes of messages served to fetches, by topic."),
    "logbroker_requests_total": ("counter", "Requests received, by request type."),
    "logbroker_errors_total": (
        "counter",
        'Errors, by kind and topic (topic="" when the error has none).',
    ),
    "logbroker_connections_open": ("gauge", "Client connections open now."),
    "logbroker_connections_total": ("counter", "Client connections accepted."),
    "logbroker_start_time_seconds": ("gauge", "Start time of the broker, in Unix seconds."),
}


def escape_label_value(value: str) -> str:
    """A label value as the text format wants it inside double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers without a decimal point, NaN and +Inf/-Inf as Prometheus spells them."""
    if isinstance(value, int):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


class BrokerMetrics:
    """The counters of one broker. Cheap to call from the hot path; see the module docstring."""

    def __init__(
        self,
        broker_id: int,
        clock: Callable[[], float] = time.time,
        *,
        max_series: int = 10_000,
    ) -> None:
        if max_series < 1:
            raise ValueError(f"max_series must be at least 1, not {max_series}")
        self.broker_id = broker_id
        self.start_time = float(clock())
        self.max_series = max_series
        self._broker_label = f'broker="{escape_label_value(str(broker_id))}"'
        self._messages_in: dict[str, int] = {}
        self._bytes_in: dict[str, int] = {}
        self._bytes_out: dict[str, int] = {}
        self._requests: dict[str, int] = dict.fromkeys(REQUEST_KINDS, 0)
        self._errors: dict[tuple[str, str], int] = {}
        self._connections_open = 0
        self._connections_total = 0
        self._gauge_source: Callable[[], Iterable[GaugeSample]] | None = None

    # -- counting (hot path) -------------------------------------------------------------

    def request(self, kind: str) -> None:
        requests = self._requests
        if kind in requests:
            requests[kind] += 1
        else:
            self._add_new(requests, kind, 1, OVERFLOW)

    def produced(self, topic: str, messages: int, nbytes: int) -> None:
        counts = self._messages_in
        if topic in counts:
            counts[topic] += messages
            self._bytes_in[topic] += nbytes
        else:
            key = topic if len(counts) < self.max_series else OVERFLOW
            counts[key] = counts.get(key, 0) + messages
            self._bytes_in[key] = self._bytes_in.get(key, 0) + nbytes

    def fetched(self, topic: str, nbytes: int) -> None:
        out = self._bytes_out
        if topic in out:
            out[topic] += nbytes
        else:
            self._add_new(out, topic, nbytes, OVERFLOW)

    def error(self, kind: str, topic: str | None = None) -> None:
        key = (kind, "" if topic is None else topic)
        errors = self._errors
        if key in errors:
            errors[key] += 1
        else:
            self._add_new(errors, key, 1, (kind, OVERFLOW))

    def connection_opened(self) -> None:
        self._connections_open += 1
        self._connections_total += 1

    def connection_closed(self) -> None:
        self._connections_open -= 1

    def _add_new(self, counts: dict[Any, int], key: Any, n: int, overflow: Any) -> None:
        if len(counts) >= self.max_series:
            key = overflow
        counts[key] = counts.get(key, 0) + n

    # -- reading -------------------------------------------------------------------------

    def set_gauge_source(self, fn: Callable[[], Iterable[GaugeSample]] | None) -> None:
        """Gauges computed at scrape time: `fn()` yields (name, labels, value, help) tuples.

        Called on the event loop at every scrape, so it should read in-memory state only (log
        end offsets, sizes). A name without the "logbroker_" prefix gets it; the broker label
        is added to every sample. Samples with an invalid name or label name, a name of a
        built-in metric, or a value that is not a number are left out and logged; if `fn`
        raises, the scrape still answers with the counters. None removes the source.
        """
        self._gauge_source = fn

    def snapshot(self) -> dict[str, Any]:
        """All counters as plain, JSON-friendly data (copies): for tests and the CLI."""
        errors: dict[str, dict[str, int]] = {}
        for (kind, topic), n in self._errors.items():
            errors.setdefault(kind, {})[topic] = n
        return {
            "broker_id": self.broker_id,
            "start_time_seconds": self.start_time,
            "requests": dict(self._requests),
            "messages_in": dict(self._messages_in),
            "bytes_in": dict(self._bytes_in),
            "bytes_out": dict(self._bytes_out),
            "errors": errors,
            "connections_open": self._connections_open,
            "connections_total": self._connections_total,
        }

    def render(self) -> str:
        """The whole exposition text (format 0.0.4), ending in a newline."""
        b = self._broker_label
        out: list[str] = []

        def family(name: str, samples: Iterable[tuple[str, float]]) -> None:
            type_, help_ = _BUILTIN[name]
            out.append(f"# HELP {name} {_escape_help(help_)}")
            out.append(f"# TYPE {name} {type_}")
            for labels, value in samples:
                out.append(f"{name}{{{b}{labels}}} {format_value(value)}")

        def by(label: str, counts: dict[str, int]) -> list[tuple[str, float]]:
            return [
                (f',{label}="{escape_label_value(key)}"', n) for key, n in sorted(counts.items())
            ]

        family("logbroker_messages_in_total", by("topic", self._messages_in))
        family("logbroker_bytes_in_total", by("topic", self._bytes_in))
        family("logbroker_bytes_out_total", by("topic", self._bytes_out))
        family("logbroker_requests_total", by("type", self._requests))
        family(
            "logbroker_errors_total",
            [
                (f',kind="{escape_label_value(k)}",topic="{escape_label_value(t)}"', n)
                for (k, t), n in sorted(self._errors.items())
            ],
        )
        family("logbroker_connections_open", [("", self._connections_open)])
        family("logbroker_connections_total", [("", self._connections_total)])
        family("logbroker_start_time_seconds", [("", self.start_time)])
        out.extend(self._render_gauges())
        return "\n".join(out) + "\n"

    def _render_gauges(self) -> list[str]:
        source = self._gauge_source
        if source is None:
            return []
        try:
            samples = list(source())
        except Exception:
            log.exception("the gauge source of the metrics failed; rendering without its gauges")
            return []
        families: dict[str, tuple[str, list[str]]] = {}  # name -> (help, sample lines)
        for sample in samples:
            line = self._gauge_line(sample)
            if line is None:
                continue
            name, help_, text = line
            families.setdefault(name, (help_, []))[1].append(text)
        out: list[str] = []
        for name, (help_, lines) in families.items():
            out.append(f"# HELP {name} {_escape_help(help_)}")
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        return out

    def _gauge_line(self, sample: GaugeSample) -> tuple[str, str, str] | None:
        try:
            name, labels, value, help_ = sample
            if not name.startswith(PREFIX):
                name = PREFIX + name
            if not _METRIC_NAME.match(name) or name in _BUILTIN:
                raise ValueError(f"metric name {name!r} is invalid or taken")
            parts = [self._broker_label]
            for key, val in labels.items():
                if not _LABEL_NAME.match(key) or key.startswith("__") or key == "broker":
                    raise ValueError(f"label name {key!r} is invalid or reserved")
                parts.append(f'{key}="{escape_label_value(str(val))}"')
            number = float(value)
        except (TypeError, ValueError, AttributeError) as exc:
            log.warning("metrics: gauge sample %r left out: %s", sample, exc)
            return None
        return name, str(help_), f"{name}{{{','.join(parts)}}} {format_value(number)}"
