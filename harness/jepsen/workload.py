"""The clients of a fault run: processes on hosts of their own (hosts.py), each writing a history.

    python -m harness.jepsen.workload produce --zookeeper ZK --topic T --name p1 \\
        --out p1.jsonl [--threads 3] [--rate 20] [--acks -1]
    python -m harness.jepsen.workload read --zookeeper ZK --topic T --name c1 \\
        --out c1.jsonl

Both run until SIGTERM (then finish the operation in flight, write it down and exit 0).

**Producers.** Thread i of a producer writes partition `i % partitions` of the replicated topic,
one message per send, with `--acks` (-1, the default: acknowledged by the whole ISR; or 1:
by the leader alone), the library's Producer with its retries, which follow the leaders, at
most `--rate` sends a second. Each value is unique in a run:
`<name>.<thread>.<seq>` (seq from 0), and is the message's payload (ASCII).

**Readers.** One thread per partition reads it from its leader (client/partition_reader.py)
from offset 0 on, resuming at the next offset after every message, and writes down every
message it was handed. A reader that gets no leader for `--leader-timeout-ms` writes the
error down and goes on trying at the same offset.

History files: JSON lines, each written and flushed whole (a killed client loses at most the
line it was writing). `t` is wall-clock seconds (time.time()): the hosts share the machine's
clock, so these compare with the faults' times (hosts.NetworkEvent.time).

    {"f": "invoke", "value": "p1.0.17", "partition": 0, "acks": -1, "t": 1700000000.123}
    {"f": "ok", "value": "p1.0.17", "partition": 0, "offset": 1234, "next": 1257,
     "attempts": 1, "t": ...}                      acknowledged (acks -1: by the whole ISR;
                                                   1: by the leader), at `offset`
    {"f": "info", "value": "p1.0.17", "partition": 0, "attempts": 4, "error": "...",
     "t": ...}                                     not acknowledged: written or not, unknown
    {"f": "read", "value": "p1.0.17", "partition": 0, "offset": 1234, "next": 1257,
     "t": ...}                                     a reader was handed it from its leader
    {"f": "error", "partition": 0, "offset": 1234, "error": "...", "t": ...}
                                                   a reader found no leader that answered

`attempts` is 1 plus the retries the producer made for the send (its `stats.retried_sets`):
a value sent more than once may be stored more than once (docs/replication.md, "Clients").
An "invoke" without a later "ok" or "info" (a client killed meanwhile) is unknown as well.
Every failure of a send is "info", never "fail": an earlier attempt may have been appended
(RequestTimedOut, a connection lost after the request went out) even when the last one was
refused before its append.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from kazoo.exceptions import KazooException

from logbroker.client.partition_reader import PartitionReader
from logbroker.client.producer import Producer
from logbroker.protocol.errors import LogbrokerError, describe_exception

log = logging.getLogger(__name__)


class HistoryWriter:
    """JSON lines appended to one file by several threads, each line flushed at once."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._out: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (closed by close())

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({**record, "t": round(time.time(), 4)}, separators=(",", ":"))
        with self._lock:
            self._out.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._out.close()


def value_of(name: str, thread: int, seq: int) -> str:
    return f"{name}.{thread}.{seq}"


def _produce(
    args: argparse.Namespace, thread: int, out: HistoryWriter, stop: threading.Event
) -> None:
    partition = thread % args.partitions
    producer = Producer(
        zk_connect=args.zookeeper,
        request_required_acks=args.acks,
        request_timeout_ms=args.request_timeout_ms,
        retries=args.retries,
        retry_backoff_ms=args.retry_backoff_ms,
        socket_timeout_ms=args.socket_timeout_ms,
        partitioner=lambda key, partitions: partition,  # a key pins it: kept across retries
    )
    interval = 1.0 / args.rate
    next_send = time.monotonic()
    seq = 0
    try:
        while not stop.is_set():
            value = value_of(args.name, thread, seq)
            seq += 1
            out.write({"f": "invoke", "value": value, "partition": partition, "acks": args.acks})
            retried = producer.stats.retried_sets
            try:
                [result] = producer.send(args.topic, value.encode(), key=value)
            except Exception as exc:  # every failure is "maybe written": see the module doc
                out.write(
                    {
                        "f": "info",
                        "value": value,
                        "partition": partition,
                        "attempts": 1 + producer.stats.retried_sets - retried,
                        "error": describe_exception(exc),
                    }
                )
            else:
                out.write(
                    {
                        "f": "ok",
                        "value": value,
                        "partition": result.partition,
                        "offset": result.offset,
                        "next": result.next_offset,
                        "attempts": 1 + producer.stats.retried_sets - retried,
                    }
                )
            # at most `rate` sends a second; after a long send, no burst to catch up
            next_send = max(next_send + interval, time.monotonic())
            stop.wait(max(0.0, next_send - time.monotonic()))
    finally:
        producer.close()


def _read(
    args: argparse.Namespace, partition: int, out: HistoryWriter, stop: threading.Event
) -> None:
    offset = 0
    reader = PartitionReader.connect(
        args.zookeeper,
        args.topic,
        partition,
        timeout=args.socket_timeout_ms / 1000,
        leader_timeout_ms=args.leader_timeout_ms,
    )
    try:
        while not stop.is_set():
            try:
                for message in reader.iter_messages(offset, max_wait_ms=200):
                    out.write(
                        {
                            "f": "read",
                            "value": message.payload.decode(errors="replace"),
                            "partition": partition,
                            "offset": message.offset,
                            "next": message.next_offset,
                        }
                    )
                    offset = message.next_offset
                    if stop.is_set():
                        break
            except (LogbrokerError, OSError, KazooException) as exc:
                out.write(
                    {
                        "f": "error",
                        "partition": partition,
                        "offset": offset,
                        "error": describe_exception(exc),
                    }
                )
                stop.wait(0.5)
            stop.wait(0.05)  # at the high watermark: look again soon
    finally:
        reader.close()


def main(argv: list[str] | None = None) -> int:
    """Run a producer or a reader of a fault run until SIGTERM (see the module doc)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("role", choices=("produce", "read"))
    parser.add_argument("--zookeeper", required=True, help="connect string with the chroot")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--name", required=True, help="the client's name, unique in the run")
    parser.add_argument("--out", type=Path, required=True, help="the history file (appended)")
    parser.add_argument("--threads", type=int, default=3, help="producer threads")
    parser.add_argument("--rate", type=float, default=20.0, help="sends a second per thread")
    parser.add_argument(
        "--acks", type=int, choices=(-1, 1), default=-1, help="request.required.acks of the sends"
    )
    parser.add_argument("--request-timeout-ms", type=int, default=3000)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--retry-backoff-ms", type=int, default=200)
    parser.add_argument("--socket-timeout-ms", type=int, default=5000)
    parser.add_argument("--leader-timeout-ms", type=int, default=10000)
    args = parser.parse_args(argv)
    if args.partitions < 1 or args.threads < 1 or args.rate <= 0:
        parser.error("--partitions and --threads must be >= 1 and --rate > 0")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    out = HistoryWriter(args.out)
    work: Callable[[argparse.Namespace, int, HistoryWriter, threading.Event], None]
    if args.role == "produce":
        work, count = _produce, args.threads
    else:
        work, count = _read, args.partitions
    threads = [
        threading.Thread(target=_guarded, args=(work, args, i, out, stop), name=f"{args.role}-{i}")
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(timeout=0.2)
    out.close()
    return 0


def _guarded(
    work: Any, args: argparse.Namespace, i: int, out: HistoryWriter, stop: threading.Event
) -> None:
    """A client thread that fails is said in the process's log; the others go on."""
    try:
        work(args, i, out, stop)
    except Exception:
        log.exception("%s thread %d of %s failed", args.role, i, args.name)


if __name__ == "__main__":
    raise SystemExit(main())
