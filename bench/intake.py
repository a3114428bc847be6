"""Prebuilt 0.7 PRODUCE frames streamed over one socket, timed per window: the broker's intake
with the client's CPU taken out, and the same bytes to the relay (bench/systems/tcp.py).

Used by bench/run.py's intake workload (logbroker's and tcp's `Client.intake`, each in its
worker process) and by bench/growth_broker.py. A frame is exactly what logbroker's
`Producer.send` of a list puts on the wire (logbroker.protocol: a PRODUCE request to
partition 0 holding one uncompressed message set); the frames are built once, before the
clock starts, and sent round-robin with `sendall`.
"""

from __future__ import annotations

import math
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from common import batches, payloads

from logbroker.protocol.message import ENTRY_OVERHEAD
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import ProduceRequest, encode_request

TAIL = 0.9  # the last 10 %: windows that end beyond 90 % of what was stored


def produce_frames(topic: str, size: int, batch: int, count: int = 1000) -> list[bytes]:
    """PRODUCE frames of `batch` random `size`-byte payloads each (cut from `count`
    distinct payloads, common.payloads), as logbroker's producer encodes them."""
    return [
        encode_request(ProduceRequest(topic, 0, build_message_set(m)))
        for m in batches(payloads(size, max(count, batch)), batch)
    ]


def set_bytes(size: int, batch: int) -> int:
    """What one frame's message set adds to the broker's log."""
    return batch * (size + ENTRY_OVERHEAD)


def connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    return sock


def stream(
    sock: socket.socket,
    frames: list[bytes],
    per_frame: int,
    total: float,
    window: int,
    drained: Callable[[int], None],
) -> list[list[float]]:
    """Send `frames` round-robin, `per_frame` bytes accounted a frame (the log's bytes, or the
    payload's: the caller's unit), until `total` (rounded up to whole windows) is. Returns
    [[accounted at the window's end, the window's seconds], ...], one per `window` bytes. `drained(frames_sent)`
    blocks until the receiver has taken everything; that wait belongs to the last window (the
    socket buffers hold what the sender's clock had not seen go)."""
    windows: list[list[float]] = []
    stored = sent = 0
    mark = window
    clock = time.perf_counter
    send = sock.sendall
    t_prev = window_start = clock()
    count = len(frames)
    wanted = max(1, math.ceil(total / window))
    while len(windows) < wanted:
        send(frames[sent % count])
        sent += 1
        stored += per_frame
        if stored >= mark:
            now = clock()
            windows.append([stored, now - t_prev])
            window_start, t_prev, mark = t_prev, now, mark + window
    drained(sent)
    if windows:
        windows[-1][1] = clock() - window_start
    return windows


def rates(windows: list[list[float]], scale: float) -> list[list[float]]:
    """[[x, seconds], ...] from `stream` as [[x, (x - the previous x) * scale / seconds]]:
    scale 1e-6 * frame bytes / per_frame gives the wire's MB/s, 1 / size (x in payload
    bytes) messages/s."""
    out, prev = [], 0.0
    for x, seconds in windows:
        out.append([x, (x - prev) * scale / seconds])
        prev = x
    return out


def tail(windows: list[list[float]]) -> dict[str, Any]:
    """The median rate of the [x, rate] windows within the first 100 MB and over the last
    10 % of x."""
    end = windows[-1][0]
    first = [r for x, r in windows if x <= 100e6] or [windows[0][1]]
    final = [r for x, r in windows if x > TAIL * end] or [windows[-1][1]]
    return {
        "first_100mb": statistics.median(first),
        "final": statistics.median(final),
        "first_windows": len(first),
        "final_windows": len(final),
        "stored_gb": end / 1e9,
    }
