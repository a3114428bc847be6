"""What operators see of a broker: counters, served in Prometheus' text format by prometheus_client.

    logbroker_messages_in_total{broker,topic}       messages appended (valid ones only)
    logbroker_bytes_in_total{broker,topic}          bytes of those messages
    logbroker_bytes_out_total{broker,topic}         bytes served by fetches
    logbroker_requests_total{broker,type}           requests received, by type
    logbroker_errors_total{broker,kind,topic}       errors, topic="" when there is none
    logbroker_connections_open{broker}              gauge: client connections open now
    logbroker_connections_total{broker}             client connections accepted
    logbroker_start_time_seconds{broker}            gauge: when the broker started (Unix time)
    logbroker_isr_shrinks_total{broker}             ISR shrinks of partitions led here
    logbroker_isr_expands_total{broker}             ISR expansions of partitions led here
    ...                                             gauges of `set_gauge_source`, at scrape time

`BrokerMetrics` counts in plain dicts and is itself a prometheus_client collector: `collect()`
turns the counts into metric families at scrape time; prometheus_client writes the text
format (`render()`) and serves it over HTTP (`serve_metrics`).

Threading: the broker counts from its one asyncio thread without a lock (each call is a dict
lookup and an add). prometheus_client's HTTP server scrapes from its own threads, so the
collector it is given (`serve_metrics`) hops onto the event loop to collect.

Cardinality: topics and error kinds come from clients, and a client may name any legal topic
in a fetch that fails. Each family keeps at most `max_series` label sets; beyond that the
counts go to the topic (or type/kind) OVERFLOW, "/overflow", which no legal topic can be.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what a scrape answers: text format 0.0.4
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
    "logbroker_isr_shrinks_total": (
        "counter",
        "Times the ISR of a partition this broker leads lost members.",
    ),
    "logbroker_isr_expands_total": (
        "counter",
        "Times the ISR of a partition this broker leads gained members.",
    ),
}


def error_kind(exc: BaseException) -> str:
    """snake_case name of an error, for metrics: WrongPartitionError -> wrong_partition."""
    name = type(exc).__name__.removesuffix("Error")
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


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
        self._broker = str(broker_id)
        self._messages_in: dict[str, int] = {}
        self._bytes_in: dict[str, int] = {}
        self._bytes_out: dict[str, int] = {}
        self._requests: dict[str, int] = dict.fromkeys(REQUEST_KINDS, 0)
        self._errors: dict[tuple[str, str], int] = {}
        self._connections_open = 0
        self._connections_total = 0
        self._isr_shrinks = 0
        self._isr_expands = 0
        self._gauge_source: Callable[[], Iterable[GaugeSample]] | None = None
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    # -- counting (hot path) -------------------------------------------------------------

    def request(self, kind: str, count: int = 1) -> None:
        requests = self._requests
        if kind in requests:
            requests[kind] += count
        else:
            self._add_new(requests, kind, count, OVERFLOW)

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

    def isr_changed(self, shrank: bool, expanded: bool) -> None:
        self._isr_shrinks += shrank
        self._isr_expands += expanded

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
            "isr_shrinks": self._isr_shrinks,
            "isr_expands": self._isr_expands,
        }

    def render(self) -> str:
        """The whole exposition text (format 0.0.4, as prometheus_client writes it)."""
        return generate_latest(self._registry).decode("utf-8")

    def collect(self) -> Iterator[Metric]:
        """The metric families, as a prometheus_client collector; call it on the event loop."""
        broker = self._broker

        def family(name: str, label: str | None, counts: Iterable[tuple[Any, float]]) -> Metric:
            type_, help_ = _BUILTIN[name]
            labels = ["broker"] if label is None else ["broker", label]
            metric: Metric
            if type_ == "counter":
                metric = CounterMetricFamily(name, help_, labels=labels)
            else:
                metric = GaugeMetricFamily(name, help_, labels=labels)
            for key, value in counts:
                metric.add_metric([broker] if label is None else [broker, key], value)
            return metric

        yield family("logbroker_messages_in_total", "topic", sorted(self._messages_in.items()))
        yield family("logbroker_bytes_in_total", "topic", sorted(self._bytes_in.items()))
        yield family("logbroker_bytes_out_total", "topic", sorted(self._bytes_out.items()))
        yield family("logbroker_requests_total", "type", sorted(self._requests.items()))
        errors = CounterMetricFamily(
            "logbroker_errors_total",
            _BUILTIN["logbroker_errors_total"][1],
            labels=["broker", "kind", "topic"],
        )
        for (kind, topic), n in sorted(self._errors.items()):
            errors.add_metric([broker, kind, topic], n)
        yield errors
        yield family("logbroker_connections_open", None, [(None, self._connections_open)])
        yield family("logbroker_connections_total", None, [(None, self._connections_total)])
        yield family("logbroker_start_time_seconds", None, [(None, self.start_time)])
        yield family("logbroker_isr_shrinks_total", None, [(None, self._isr_shrinks)])
        yield family("logbroker_isr_expands_total", None, [(None, self._isr_expands)])
        yield from self._collect_gauges()

    def _collect_gauges(self) -> list[Metric]:
        source = self._gauge_source
        if source is None:
            return []
        try:
            samples = list(source())
        except Exception:
            log.exception("the gauge source of the metrics failed; rendering without its gauges")
            return []
        families: dict[tuple[str, tuple[str, ...]], GaugeMetricFamily] = {}
        for sample in samples:
            checked = self._check_gauge(sample)
            if checked is None:
                continue
            name, help_, labels, value = checked
            key = (name, tuple(labels))
            if key not in families:
                if any(n == name for n, _ in families):
                    log.warning("metrics: gauge sample %r left out: other label names", sample)
                    continue
                families[key] = GaugeMetricFamily(name, help_, labels=["broker", *labels])
            families[key].add_metric([self._broker, *labels.values()], value)
        return list(families.values())

    def _check_gauge(self, sample: GaugeSample) -> tuple[str, str, dict[str, str], float] | None:
        try:
            name, labels, value, help_ = sample
            if not name.startswith(PREFIX):
                name = PREFIX + name
            if not _METRIC_NAME.match(name) or name in _BUILTIN or name in _TAKEN:
                raise ValueError(f"metric name {name!r} is invalid or taken")
            for key in labels:
                if not _LABEL_NAME.match(key) or key.startswith("__") or key == "broker":
                    raise ValueError(f"label name {key!r} is invalid or reserved")
            number = float(value)
        except (TypeError, ValueError, AttributeError) as exc:
            log.warning("metrics: gauge sample %r left out: %s", sample, exc)
            return None
        return name, str(help_), {k: str(v) for k, v in labels.items()}, number


# A counter family `x_total` is written by prometheus_client with the samples `x_total` (and
# would take `x_created`): gauges may not take those names either.
_TAKEN = {n.removesuffix("_total") for n in _BUILTIN} | {
    n.removesuffix("_total") + "_created" for n in _BUILTIN if n.endswith("_total")
}


class _CollectOnLoop:
    """A collector for prometheus_client's HTTP threads: collects on the broker's event loop,
    where the counts change, so that a scrape never reads a dict in the middle of a change."""

    def __init__(self, metrics: BrokerMetrics, loop: asyncio.AbstractEventLoop) -> None:
        self.metrics = metrics
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        async def on_loop() -> list[Metric]:
            return list(self.metrics.collect())

        future = asyncio.run_coroutine_threadsafe(on_loop(), self.loop)
        return iter(future.result(timeout=_SCRAPE_TIMEOUT_S))


_SCRAPE_TIMEOUT_S = 10.0  # a loop this busy answers the scrape with an error


class _RequestHandler(WSGIRequestHandler):
    """wsgiref's handler, with a socket timeout (a silent client frees its thread) and its
    access log left out (scrapes every few seconds would fill the broker's log)."""

    timeout = 10.0

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """prometheus_client's WSGI app, in a threaded wsgiref server (a thread per scrape).

    Any path answers the exposition (prometheus_client's behaviour); `/metrics` is the one
    documented. `address` is (host, port) as bound; `stop()` closes it.
    """

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_CollectOnLoop(metrics, asyncio.get_running_loop()))
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("MetricsHttpServer", (ThreadingWSGIServer,), {"address_family": family})
        self._server: WSGIServer = make_server(
            host, port, make_wsgi_app(registry), server_class, handler_class=_RequestHandler
        )
        bound: tuple[Any, ...] = tuple(self._server.server_address)
        self.address = (str(bound[0]), int(bound[1]))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        # shutdown() waits for the serving loop's next poll: off the event loop
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def _close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


async def serve_metrics(metrics: BrokerMetrics, host: str, port: int) -> MetricsServer:
    """Serve `metrics` over HTTP on host:port (0 = a free port), from the running event loop."""
    return MetricsServer(metrics, host, port)
