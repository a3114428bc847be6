"""The one-way latency's floor on this machine: what each layer between a producer process
and a consumer process adds.

    .venv/bin/python bench/latency_floor.py                 # 3 rounds of 3,000 messages
    .venv/bin/python bench/latency_floor.py --rounds 5 --json bench/results/latency_floor.json

Six paths, each timed as bench/run.py times its one-way latency (common.one_way_*: one
stamped 200-byte message in flight, the consumer waiting first, a 0.3 ms pause after each
acknowledgement), where the kernel places the processes (run.py's `latency_unpinned`). The
paths alternate within each round, so they share the machine's noise:

  direct       producer socket -> consumer socket: one hop, nothing between (tcp's latency)
  relay        producer -> a Python process that reads the bytes and writes them on
               (blocking sockets, no parsing) -> consumer: two hops, nothing done between
  relay+file   the relay also appends the bytes to a file and reads them back (writev,
               pread), as the broker's write and its answer do
  broker raw   the broker (no ZooKeeper) with frames made here: a prebuilt PRODUCE, and a
               FETCH_WAIT sent before each message is awaited; no client library
  +consumer    the same with logbroker's consumer (SimpleConsumer.iter_messages waiting at
               the end of the log) instead of the hand-made FETCH_WAITs
  +producer    and logbroker's producer (Producer.send) too: run.py's latency workload

Each row's difference to the one above is what that layer costs. Nothing is asserted: this
is a diagnostic, as latency_hops.py is.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import LOOPBACK, free_port, median, one_way_consumer, one_way_producer, payload

PATHS = ["direct", "relay", "relay+file", "broker raw", "+consumer", "+producer"]
TOPIC = "floor"
WARMUP = 300
_SIZE = struct.Struct(">i")
ENTRY_HEAD = 10  # int32 size, magic, attributes, CRC32: a 0.7 message's bytes before its payload
ANSWER_HEAD = 12  # a one-set FETCH_WAIT answer: int32 size, int16 error, int32 set size, int16


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    return sock


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("the peer closed the connection")
        got += k
    return bytes(buf)


def _relay(port: int, with_file: str) -> None:
    """Accept the consumer, then the producer; write on whatever the producer sends."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, port))
    listener.listen(2)
    consumer, _ = listener.accept()
    producer, _ = listener.accept()
    for sock in (consumer, producer):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = os.open(with_file, os.O_RDWR | os.O_CREAT | os.O_APPEND) if with_file else -1
    buf = bytearray(1 << 16)
    position = 0
    while n := producer.recv_into(buf):
        out: bytes | memoryview = memoryview(buf)[:n]
        if fd >= 0:
            os.writev(fd, [out])
            out = os.pread(fd, n, position)
            position += n
        consumer.sendall(out)


def _consumer(path: str, port: int, total: int, ack_path: str, ready: object, out: str) -> None:
    receive: Callable[[], bytes]
    if path == "direct":
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen(1)
        conns: list[socket.socket] = []

        def receive() -> bytes:
            if not conns:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns.append(conn)
            (n,) = _SIZE.unpack(_read_exactly(conns[0], 4))
            return _read_exactly(conns[0], n)

    elif path.startswith("relay"):
        sock = _connect(port)

        def receive() -> bytes:
            (n,) = _SIZE.unpack(_read_exactly(sock, 4))
            return _read_exactly(sock, n)

    elif path == "broker raw":
        from logbroker.client.simple_consumer import SimpleConsumer
        from logbroker.protocol.requests import FetchRequest, WaitingFetchRequest, encode_request

        at = [SimpleConsumer(LOOPBACK, port).latest_offset(TOPIC, 0)]
        sock = _connect(port)

        def receive() -> bytes:
            wait = WaitingFetchRequest(10_000, 1, (FetchRequest(TOPIC, 0, at[0], 1 << 16),))
            sock.sendall(encode_request(wait))
            (n,) = _SIZE.unpack(_read_exactly(sock, 4))
            answer = _read_exactly(sock, n)
            (size,) = _SIZE.unpack_from(answer, ANSWER_HEAD - 4)
            at[0] += 4 + size
            return answer[ANSWER_HEAD - 4 + ENTRY_HEAD : ANSWER_HEAD + size]

    else:
        from logbroker.client.simple_consumer import SimpleConsumer

        consumer = SimpleConsumer(LOOPBACK, port, fetch_size=1 << 16)
        start = consumer.latest_offset(TOPIC, 0)
        messages = consumer.iter_messages(TOPIC, 0, start, stop_at_end=False, max_wait_ms=10_000)

        def receive() -> bytes:
            return next(messages).payload

    result = one_way_consumer(total, WARMUP, receive, ack_path, ready.set)  # type: ignore[attr-defined]
    Path(out).write_text(json.dumps(result["latencies_ms"]))


def _producer(path: str, port: int, total: int, ack_path: str) -> None:
    send: Callable[[bytes], object]
    if path in ("direct", "relay", "relay+file"):
        sock = _connect(port)
        send = lambda data: sock.sendall(_SIZE.pack(len(data)) + data)  # noqa: E731
    elif path in ("broker raw", "+consumer"):
        from logbroker.protocol.requests import encode_produce_set, produce_frame_prefix

        sock, prefix = _connect(port), produce_frame_prefix(TOPIC)
        send = lambda data: sock.sendall(encode_produce_set(prefix, 0, [data], 0))  # noqa: E731
    else:
        from logbroker.client.producer import Producer

        producer_send = Producer(broker_list=f"0:{LOOPBACK}:{port}").send
        send = lambda data: producer_send(TOPIC, data)  # noqa: E731
    one_way_producer(total, 200, send, ack_path)


def measure(path: str, total: int, workdir: Path) -> list[float]:
    """One path's one-way latencies (ms) after the warm-up."""
    from logbroker.client.producer import Producer
    from logbroker.stack.broker import BrokerProcess

    ctx = multiprocessing.get_context("spawn")
    port, server, broker = free_port(), None, None
    if path.startswith("relay"):
        data_file = str(workdir / "relay.data") if path == "relay+file" else ""
        server = ctx.Process(target=_relay, args=(port, data_file))
        server.start()
        time.sleep(0.3)  # listening
    elif path != "direct":
        broker = BrokerProcess(workdir / "broker", broker_id=0, zk_connect=None).start()
        port = broker.port
        Producer(broker_list=f"0:{LOOPBACK}:{port}").send(TOPIC, payload(64))  # the topic
    ack_path, out = str(workdir / "ack.sock"), workdir / "consumer.json"
    ready = ctx.Event()
    try:
        consumer = ctx.Process(
            target=_consumer, args=(path, port, total, ack_path, ready, str(out))
        )
        consumer.start()
        if not ready.wait(60):
            raise RuntimeError(f"{path}: the consumer did not get ready")
        producer = ctx.Process(target=_producer, args=(path, port, total, ack_path))
        producer.start()
        producer.join()
        consumer.join()
        if consumer.exitcode != 0 or producer.exitcode != 0:
            raise RuntimeError(f"{path}: a client failed")
    finally:
        if server is not None:
            server.terminate()
            server.join()
        if broker is not None:
            broker.stop()
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="per path and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every path in turn")
    parser.add_argument("--json", type=Path, help="write the medians per round here")
    args = parser.parse_args()
    rounds: dict[str, list[float]] = {path: [] for path in PATHS}
    for r in range(args.rounds):
        for path in PATHS:
            workdir = Path(tempfile.mkdtemp(prefix="latency-floor-"))
            try:
                p50 = median(measure(path, args.messages + WARMUP, workdir)) * 1000
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            rounds[path].append(p50)
            print(f"round {r + 1}: {path:<11} p50 {p50:7.1f} µs", file=sys.stderr)
    print(f"{'path':<12}{'p50 µs (median of rounds)':>28}{'added µs':>10}")
    before = 0.0
    for path in PATHS:
        p50 = median(rounds[path])
        print(f"{path:<12}{p50:>28.1f}{p50 - before:>10.1f}")
        before = p50
    if args.json:
        args.json.write_text(json.dumps({"messages": args.messages, "p50_us": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
