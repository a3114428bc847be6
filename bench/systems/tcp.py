"""tcp: the machine's limit, raw loopback TCP between two Python processes.

No broker, no storage, no parsing: the server (this module, run as `python -m systems.tcp`
in bench/ so that `common` imports as it does for the workers) is a Python process that
sinks, sources or echoes the same bytes logbroker's clients and broker exchange for the
workload, and the client sends or receives them with sendall/recv_into.

  produce  the client sends PRODUCE-sized frames (one per message at batch 1, one per 50
           messages at batch 50); the server reads them all and answers one byte at the end
  consume  the client asks for 1000 messages' worth of bytes (~205 KiB, a fetch) and the
           server sends that many bytes of a real message set, until n messages came
  latency  one way, no server: the producer process's socket straight to the consumer
           process (a 4-byte size and the 200-byte message)
  growth   (the machine's limit for workload 6: TCP stores nothing) the same 50-message
           sets appended to one file in the work directory with os.write, fsynced by a
           second thread every 10,000 messages (the broker's log.flush.interval): what the
           page cache and the disk of this machine do as the file grows
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    BENCH_DIR,
    LOOPBACK,
    BenchError,
    free_port,
    one_way_consumer,
    one_way_producer,
    payload,
    port_open,
    spawn,
    stop_pid,
    wait_for,
)

ENTRY_OVERHEAD = 10
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
BATCHING = {
    1: "one sendall of a 1-message PRODUCE-sized frame per message",
    50: "one sendall of a 50-message PRODUCE-sized frame",
}
CONSUMING = "request 1000 messages' worth of bytes (~205 KiB), recv_into until they came"
SETTINGS = {
    "server": "a Python thread per connection, 1 MiB socket buffers, TCP_NODELAY",
    "growth rows": "os.write appends to a file + fsync every 10,000 messages (no network)",
}


def available() -> tuple[bool, str]:
    return True, ""


def versions() -> dict[str, str]:
    import platform

    return {
        "server": f"CPython {platform.python_version()} sockets",
        "client": f"CPython {platform.python_version()} sockets",
    }


def frame_size(messages: int, size: int, topic: str = "b50") -> int:
    # int32 size | int16 type | int16 topic length | topic | int32 partition | int32 set size
    return 4 + 2 + 2 + len(topic) + 4 + 4 + messages * (size + ENTRY_OVERHEAD)


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)


def _read_exactly(sock: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n], n - got)
        if not k:
            raise ConnectionError("peer closed")
        got += k


# -- the server -----------------------------------------------------------------------------


def _serve_connection(conn: socket.socket) -> None:
    _tune(conn)
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    source = b""
    try:
        role = conn.recv(1)
        if role == b"P":  # sink: int64 total bytes, then the bytes; answer b"K"
            _read_exactly(conn, view, 8)
            (left,) = _Q.unpack_from(buf)
            while left > 0:
                k = conn.recv_into(view, min(left, len(buf)))
                if not k:
                    return
                left -= k
            conn.sendall(b"K")
        elif role == b"C":  # source: int32 wanted bytes -> int32 n | n bytes of message set
            while True:
                _read_exactly(conn, view, 4)
                (want,) = _I.unpack_from(buf)
                if want <= 0:
                    return
                if len(source) != want:
                    entry = struct.pack(">ibbI", 1 + 1 + 4 + 200, 1, 0, 0) + payload(200)
                    source = (entry * (want // len(entry) + 1))[:want]
                conn.sendall(_I.pack(want) + source)
        elif role == b"E":  # echo: int32 n | n bytes, back as they came
            while True:
                _read_exactly(conn, view, 4)
                (n,) = _I.unpack_from(buf)
                _read_exactly(conn, view[4:], n)
                conn.sendall(view[: 4 + n])
    except (ConnectionError, OSError):
        pass
    finally:
        conn.close()


def serve(port: int) -> None:
    listener = socket.create_server((LOOPBACK, port), backlog=64, reuse_port=False)
    print(f"tcp baseline listening on {LOOPBACK}:{port}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn,), daemon=True).start()


class Server:
    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.proc: Any = None
        self.port = 0

    data_dir = None  # nothing is stored

    def start(self) -> None:
        self.port = free_port()
        log = self.workdir / "tcp.log"
        self.proc = spawn(
            [sys.executable, "-m", "systems.tcp", "--port", str(self.port)], log, cwd=BENCH_DIR
        )
        wait_for(lambda: port_open(self.port), 20, "tcp baseline server", self.proc, log)

    @property
    def endpoint(self) -> dict[str, Any]:
        return {"host": LOOPBACK, "port": self.port}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        stop_pid(self.proc, timeout=5)


# -- the client -----------------------------------------------------------------------------


class Client:
    def __init__(self, endpoint: dict[str, Any]) -> None:
        self.address = (endpoint["host"], endpoint["port"])
        self._socks: list[socket.socket] = []

    def _connect(self, role: bytes) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=60)
        _tune(sock)
        sock.sendall(role)
        self._socks.append(sock)
        return sock

    def close(self) -> None:
        for sock in self._socks:
            sock.close()

    def produce(
        self,
        topic: str,
        n: int,
        size: int,
        batch: int,
        ready: Callable[[], None],
        wait_stored: bool = True,
    ) -> dict[str, Any]:
        sock = self._connect(b"P")
        frame = payload(frame_size(batch, size, topic))
        frames = n // batch
        sock.sendall(_Q.pack(frames * len(frame)))
        send = sock.sendall
        ready()
        t0 = time.perf_counter()
        for _ in range(frames):
            send(frame)
        if sock.recv(1) != b"K":
            raise BenchError("tcp sink did not acknowledge")
        return {"messages": frames * batch, "seconds": time.perf_counter() - t0}

    def consume(
        self, topic: str, n: int, batch_bytes: int, ready: Callable[[], None]
    ) -> dict[str, Any]:
        sock = self._connect(b"C")
        per_fetch = batch_bytes // (200 + ENTRY_OVERHEAD)
        want = per_fetch * (200 + ENTRY_OVERHEAD)
        buf = bytearray(want + 4)
        view = memoryview(buf)
        request = _I.pack(want)
        ready()
        count = 0
        t0 = time.perf_counter()
        while count < n:
            sock.sendall(request)
            _read_exactly(sock, view, 4 + want)
            count += per_fetch
        t1 = time.perf_counter()
        sock.sendall(_I.pack(0))
        return {"messages": count, "seconds": t1 - t0}

    def latency_consume(
        self, topic: str, total: int, warmup: int, ack_path: str, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """One way with nothing between: the producer process's socket straight to this one
        (no server hop, no storage): the floor under every system's one-way latency."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((LOOPBACK, 0))
        listener.listen(1)
        Path(ack_path + ".port").write_text(str(listener.getsockname()[1]))
        conns: list[socket.socket] = []
        head = memoryview(bytearray(4))

        def receive() -> bytes:
            if not conns:
                conn, _ = listener.accept()
                _tune(conn)
                conns.append(conn)
                self._socks.append(conn)
            _read_exactly(conns[0], head, 4)
            (n,) = _I.unpack(head)
            buf = bytearray(n)
            _read_exactly(conns[0], memoryview(buf), n)
            return buf

        try:
            return one_way_consumer(total, warmup, receive, ack_path, ready)
        finally:
            listener.close()

    def latency_produce(self, topic: str, total: int, size: int, ack_path: str) -> dict[str, Any]:
        port = int(Path(ack_path + ".port").read_text())
        sock = socket.create_connection((LOOPBACK, port), timeout=60)
        _tune(sock)
        self._socks.append(sock)
        head = _I.pack(size)
        return one_way_producer(total, size, lambda data: sock.sendall(head + data), ack_path)

    def drop(self, topic: str) -> None:
        pass

    def growth(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        import os
        import tempfile

        entry = size + ENTRY_OVERHEAD
        chunk = payload(batch * entry)
        per_window = max(1, window_bytes // (batch * entry))
        directory = os.environ.get("BENCH_WORKDIR") or tempfile.gettempdir()
        path = Path(directory) / f"growth-{os.getpid()}.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = [0]
        done = threading.Event()

        def flusher() -> None:  # fsync every 10,000 messages, off the writing thread
            flushed = 0
            while not done.is_set():
                if written[0] - flushed >= 10_000 * entry:
                    flushed = written[0]
                    os.fsync(fd)
                else:
                    time.sleep(0.0005)

        thread = threading.Thread(target=flusher, daemon=True)
        thread.start()
        windows = []
        stored = 0
        write = os.write
        clock = time.perf_counter
        t_prev = clock()
        try:
            while stored < total_bytes:
                for _ in range(per_window):
                    write(fd, chunk)
                written[0] += per_window * len(chunk)
                stored += per_window * batch * size
                now = clock()
                windows.append([stored, per_window * batch / (now - t_prev)])
                t_prev = now
        finally:
            done.set()
            thread.join()
            os.close(fd)
            path.unlink()
        return {"windows": windows, "message_bytes": entry}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the tcp baseline's server")
    parser.add_argument("--port", type=int, required=True)
    serve(parser.parse_args().port)
