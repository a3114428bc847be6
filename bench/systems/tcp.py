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
  intake,  the relay, the floor under a broker's job (workloads 9 and 10): the client sends
  sizes    PRODUCE frames (intake: the broker's prebuilt frames, bench/intake.py; sizes: one
           frame per batch) and the server appends whatever it reads, 1 MiB reads, to a
           file in its work directory (the same disk as the broker's log) with os.write; a
           second thread fsyncs it as the broker's flusher does with its sample settings:
           once 10,000 messages' worth of bytes are unflushed (log.flush.interval), and
           every 1,000 ms if anything is (log.default.flush.interval.ms). No parsing, no
           index: what storing a stream of produce requests costs at least.

The relay's connection: b"A", int32 bytes per message (header + payload: the fsync cadence),
then the frames until the client shuts its side down; the server answers b"K" and the int64
count of bytes it wrote, and deletes the file.
"""

from __future__ import annotations

import argparse
import os
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
    pool_count,
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
    "relay (intake, size rows)": "1 MiB recv_into, os.write to a file on the broker's disk, "
    "fsync by a second thread at 10,000 messages' worth of bytes or every 1,000 ms",
}
RELAY_READ = 1 << 20  # the relay's reads
FLUSH_MESSAGES = 10_000  # the broker's log.flush.interval (sample server.properties)
FLUSH_S = 1.0  # its log.default.flush.interval.ms


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


def _relay(conn: socket.socket, directory: Path) -> None:
    """Append whatever the connection sends to a file, fsynced as the broker's flusher does."""
    head = bytearray(4)
    _read_exactly(conn, memoryview(head), 4)
    (entry,) = _I.unpack(head)
    path = directory / f"relay-{threading.get_ident()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = [0]
    due = threading.Event()
    done = threading.Event()

    def flusher() -> None:
        flushed = 0
        while not done.is_set():
            due.wait(FLUSH_S)
            due.clear()
            if written[0] > flushed:
                flushed = written[0]
                os.fsync(fd)

    thread = threading.Thread(target=flusher, daemon=True)
    thread.start()
    buf = bytearray(RELAY_READ)
    view = memoryview(buf)
    per_flush = FLUSH_MESSAGES * entry
    unflushed = 0
    write = os.write
    try:
        while k := conn.recv_into(view, RELAY_READ):
            at = 0
            while at < k:
                at += write(fd, view[at:k])
            written[0] += k
            unflushed += k
            if unflushed >= per_flush:
                unflushed = 0
                due.set()
        conn.sendall(b"K" + _Q.pack(written[0]))
    finally:
        done.set()
        due.set()
        thread.join()
        os.close(fd)
        path.unlink()


def _serve_connection(conn: socket.socket, directory: Path) -> None:
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
        elif role == b"A":
            _relay(conn, directory)
    except (ConnectionError, OSError):
        pass
    finally:
        conn.close()


def serve(port: int, directory: Path) -> None:
    listener = socket.create_server((LOOPBACK, port), backlog=64, reuse_port=False)
    print(f"tcp baseline listening on {LOOPBACK}:{port}, relay files in {directory}", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn, directory), daemon=True).start()


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
            [
                sys.executable,
                "-m",
                "systems.tcp",
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir.resolve()),
            ],
            log,
            cwd=BENCH_DIR,
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

    def _relay(self, size: int) -> socket.socket:
        """A connection to the relay, opened as bench/intake.py opens the broker's."""
        from intake import connect

        sock = connect(*self.address)
        self._socks.append(sock)
        sock.sendall(b"A" + _I.pack(size + ENTRY_OVERHEAD))
        return sock

    @staticmethod
    def _relayed(sock: socket.socket, sent: int) -> None:
        """Wait until the relay wrote all `sent` bytes (it answers once it read them all)."""
        sock.shutdown(socket.SHUT_WR)
        answer = memoryview(bytearray(9))
        _read_exactly(sock, answer, 9)
        (written,) = _Q.unpack_from(answer, 1)
        if answer[0:1] != b"K" or written != sent:
            raise BenchError(f"the relay wrote {written} bytes of {sent}")

    def intake(
        self, topic: str, total_bytes: int, size: int, batch: int, window_bytes: int
    ) -> dict[str, Any]:
        """The broker's intake workload's frames, to the relay (see systems/logbroker.py, Client.intake)."""
        from intake import produce_frames, set_bytes, stream

        frames = produce_frames(topic, size, batch)
        sock = self._relay(size)
        per = set_bytes(size, batch)
        windows = stream(
            sock,
            frames,
            per,
            total_bytes,
            window_bytes,
            lambda sent: self._relayed(sock, sent * len(frames[0])),
        )
        return {"windows": windows, "frame_bytes": len(frames[0]), "set_bytes": per}

    def produce_for(
        self, topic: str, size: int, batch: int, seconds: float, ready: Callable[[], None]
    ) -> dict[str, Any]:
        """The size sweep: `batch`-message PRODUCE frames to the relay for about `seconds`;
        the clock stops when the relay wrote the last byte."""
        from intake import produce_frames

        frames = produce_frames(topic, size, batch, pool_count(size))
        sock = self._relay(size)
        send = sock.sendall
        count = len(frames)
        clock = time.perf_counter
        ready()
        t0 = clock()
        deadline = t0 + seconds
        sent = 0
        while True:
            send(frames[sent % count])
            sent += 1
            if clock() >= deadline:
                break
        self._relayed(sock, sent * len(frames[0]))
        t1 = clock()
        return {"messages": sent * batch, "seconds": t1 - t0, "payload_bytes": sent * batch * size}

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
    parser.add_argument("--dir", type=Path, required=True, help="where the relay's files go")
    args = parser.parse_args()
    serve(args.port, args.dir)
