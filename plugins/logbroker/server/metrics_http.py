"""The broker's metrics endpoint: a small HTTP/1.1 server on asyncio streams.

    GET /metrics   200, Prometheus' text format 0.0.4 (BrokerMetrics.render())
    GET /          a pointer to /metrics
    other paths    404; other methods 405; malformed requests 400; huge headers 431

One request per connection (`Connection: close`). The whole request head must arrive within
`read_timeout` and the answer leave within `write_timeout`, so a slow or hostile client
cannot hold the endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import re
from urllib.parse import urlsplit

from .metrics import CONTENT_TYPE, BrokerMetrics

log = logging.getLogger(__name__)

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    505: "HTTP Version Not Supported",
}
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)\Z")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(rb"\r?\n")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def start_metrics_server(
    metrics: BrokerMetrics,
    host: str,
    port: int,
    *,
    read_timeout: float = 5.0,
    write_timeout: float = 10.0,
    max_header_bytes: int = 8192,
) -> asyncio.base_events.Server:
    """Serve `metrics` over HTTP/1.1 on host:port (0 = any free port); one request a connection.

    GET (or HEAD) /metrics answers 200 with render() as CONTENT_TYPE; / a short HTML page that
    points there; other paths 404, other methods 405, malformed requests 400, request heads
    over `max_header_bytes` 431. The whole request head must arrive within `read_timeout`
    seconds (a client that sent part of one gets 408, one that sent nothing is just closed), and
    the answer must be taken within `write_timeout`, else the connection is dropped. Stop it
    with `server.close(); await server.wait_closed()`; open connections end by their timeouts.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_connection(
            metrics, reader, writer, read_timeout, write_timeout, max_header_bytes
        )

    return await asyncio.start_server(handle, host, port, limit=max_header_bytes)


async def _serve_connection(
    metrics: BrokerMetrics,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    read_timeout: float,
    write_timeout: float,
    max_header_bytes: int,
) -> None:
    received = bytearray()  # the request head so far, visible after a timeout
    try:
        try:
            async with asyncio.timeout(read_timeout):
                head = await _read_head(reader, max_header_bytes, received)
        except TimeoutError:
            if received:
                await _respond(writer, 408, "request head not received in time\n", write_timeout)
            return
        except _HttpError as exc:
            await _respond(writer, exc.status, f"{exc}\n", write_timeout)
            return
        if head is None:  # closed before sending anything
            return
        try:
            method, target = _parse_head(head)
            status, ctype, body, extra = _route(metrics, method, target)
        except _HttpError as exc:
            await _respond(writer, exc.status, f"{exc}\n", write_timeout)
            return
        await _respond(
            writer, status, body, write_timeout, ctype, extra, head_only=method == "HEAD"
        )
    except TimeoutError:  # the client does not take the answer
        writer.transport.abort()
    except ConnectionError:
        pass
    except Exception:
        log.exception("metrics: request failed")
    finally:
        await _close(writer, write_timeout)


async def _read_head(
    reader: asyncio.StreamReader, max_bytes: int, received: bytearray
) -> list[bytes] | None:
    """The request line and header lines, without line ends; None if EOF before any byte.

    Bytes go into `received` as they arrive, so that a timeout can tell silence from a slow
    client. Lines may end in CRLF or a bare LF; empty lines before the request line are
    ignored (RFC 9112 2.2). Whatever follows the head (a body) is not read.
    """
    while True:
        chunk = await reader.read(4096)
        if not chunk:
            if not received:
                return None
            raise _HttpError(400, "connection closed in the middle of the request head")
        received += chunk
        leading = len(received) - len(received.lstrip(b"\r\n"))
        end = _HEAD_END.search(received, leading)
        if end is not None:
            if end.start() > max_bytes:
                break
            return _LINE_END.split(bytes(received[leading : end.start()]))
        if len(received) > max_bytes:
            break
    raise _HttpError(431, f"request head over {max_bytes} bytes")


def _parse_head(head: list[bytes]) -> tuple[str, str]:
    parts = head[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1]:
        raise _HttpError(400, "malformed request line")
    version = _VERSION.match(parts[2])
    if version is None:
        raise _HttpError(400, "malformed request line")
    if version.group(1) != b"1":
        raise _HttpError(505, "only HTTP/1.x is served here")
    for line in head[1:]:
        name, colon, _ = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise _HttpError(400, "malformed header line")
    try:
        target = parts[1].decode("ascii")
    except UnicodeDecodeError as exc:
        raise _HttpError(400, "request target is not ASCII") from exc
    return parts[0].decode("ascii"), target


def _route(
    metrics: BrokerMetrics, method: str, target: str
) -> tuple[int, str, str, dict[str, str]]:
    try:
        path = urlsplit(target).path
    except ValueError as exc:
        raise _HttpError(400, "malformed request target") from exc
    if path not in ("/metrics", "/"):
        raise _HttpError(404, f"nothing at {path}; the metrics are at /metrics")
    if method not in ("GET", "HEAD"):
        return 405, "text/plain; charset=utf-8", "use GET\n", {"Allow": "GET, HEAD"}
    if path == "/metrics":
        return 200, CONTENT_TYPE, metrics.render(), {}
    title = f"logbroker broker {metrics.broker_id}"
    page = (
        f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
        '<p><a href="/metrics">Metrics</a> (Prometheus text format)</p></body></html>\n'
    )
    return 200, "text/html; charset=utf-8", page, {}


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: str,
    timeout: float,
    content_type: str = "text/plain; charset=utf-8",
    extra: dict[str, str] | None = None,
    head_only: bool = False,
) -> None:
    data = body.encode("utf-8")
    headers = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(data)}",
        "Connection: close",
        *(f"{k}: {v}" for k, v in (extra or {}).items()),
    ]
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(data)
    async with asyncio.timeout(timeout):
        await writer.drain()


async def _close(writer: asyncio.StreamWriter, timeout: float) -> None:
    writer.close()
    try:
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    except TimeoutError:
        writer.transport.abort()  # the client does not take what is left
    except (ConnectionError, OSError):
        pass
