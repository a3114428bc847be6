"""Where logbroker's one-way latency goes: a timestamp at every hop of one message.

    .venv/bin/python bench/latency_hops.py                  # 3,000 messages, a table
    .venv/bin/python bench/latency_hops.py --messages 10000 --json hops.json
    .venv/bin/python bench/latency_hops.py --apart      # bench/run.py's placed latency

The one-way latency workload of bench/run.py (a producer process sends one stamped message
at a time, a consumer process waiting with FETCH_WAIT hands it over; common.one_way_*), with
CLOCK_MONOTONIC read at each step on the way:

  send      the producer's `Producer.send` call (its stamp to the call's return)
  in        the broker's event loop hands the PRODUCE's bytes to the connection
  decoded   the request is decoded (RequestHandlers.handle called)
  queued    the set is validated and queued for the socket read's one write
  written   the log's write (Log.append_many) returned
  woken     the waiting fetch is called (AppendWaiters.appended)
  answer    the answer is made and handed to the connection (_send_now called)
  sent      the answer is in the kernel (_send_now returned; the consumer, woken by the
            send, may have read it before the broker's call returns: "sent -> received"
            can be negative)
  received  the consumer's read of the answer returned
  handed    the consumer's iterator handed the message to the application

The broker runs as a child process of its own (no ZooKeeper) with these points wrapped
around its methods by this script's launcher: the broker's code is not changed, and the
wrappers add ~1 µs per point. Medians and p90 over the messages after a warm-up.
Nothing is asserted: this is a diagnostic, as bench/run.py's --profile is.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from common import (
    CLIENT_CPUS,
    SERVER_CPUS,
    STAMP,
    one_way_consumer,
    one_way_producer,
    payload,
    place,
)

TOPIC = "hops"
WARMUP = 200

# The broker's launcher: wraps the hop points, dumps them to $HOPS_OUT on SIGUSR1, then runs
# the `logbroker broker` command with the arguments it was given.
_LAUNCHER = r"""
import json, os, signal, sys, time
from logbroker.server import connection, handlers, waiters
from logbroker.storage import log as storage_log
now = time.monotonic_ns
points = []

def at(cls, name, point, after=False, when=None):
    inner = getattr(cls, name)
    def wrapped(self, *args):
        if not after and (when is None or when(self, *args)):
            points.append((point, id(self), now()))
        result = inner(self, *args)
        if after:
            points.append((point, id(self), now()))
        return result
    setattr(cls, name, wrapped)

at(connection.ClientConnection, "buffer_updated", "in")
at(handlers.RequestHandlers, "handle", "decoded", when=lambda s, req, c: type(req).__name__ == "ProduceRequest")
at(handlers.RequestHandlers, "flush_appends", "queued", when=lambda s: bool(s._deferred))
at(storage_log.Log, "append_many", "written", after=True)
at(waiters.AppendWaiters, "appended", "woken")
at(connection.ClientConnection, "_send_now", "answer")
at(connection.ClientConnection, "_send_now", "sent", after=True)

def dump(*_):
    with open(os.environ["HOPS_OUT"], "w") as out:
        json.dump(points, out)
signal.signal(signal.SIGUSR1, dump)

from logbroker.cli import main
sys.argv = ["logbroker", *sys.argv[1:]]
sys.exit(main())
"""

BROKER_HOPS = ["in", "decoded", "queued", "written", "woken", "answer", "sent"]
HOPS = ["stamp", "send", *BROKER_HOPS, "received", "handed"]


def _consumer(port: int, total: int, ack_path: str, ready: object, out: str) -> None:
    from logbroker.client import connection
    from logbroker.client.producer import Producer
    from logbroker.client.simple_consumer import SimpleConsumer

    reads: list[int] = []
    read_ahead = connection.BrokerConnection._read_ahead

    def timed_read(self: connection.BrokerConnection, sock: object) -> None:
        read_ahead(self, sock)  # type: ignore[arg-type]
        reads.append(time.monotonic_ns())

    connection.BrokerConnection._read_ahead = timed_read  # type: ignore[method-assign]
    Producer(broker_list=f"0:127.0.0.1:{port}").send(TOPIC, payload(64))  # creates the topic
    consumer = SimpleConsumer("127.0.0.1", port, fetch_size=64 * 1024)
    deadline = time.monotonic() + 30
    while consumer.latest_offset(TOPIC, 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    messages = consumer.iter_messages(
        TOPIC, 0, consumer.latest_offset(TOPIC, 0), stop_at_end=False, max_wait_ms=10_000
    )
    times: list[tuple[int, int]] = []

    def receive() -> bytes:
        data = next(messages).payload
        times.append((STAMP.unpack_from(data, 0)[1], time.monotonic_ns()))
        return data

    one_way_consumer(total, WARMUP, receive, ack_path, ready.set)  # type: ignore[attr-defined]
    Path(out).write_text(json.dumps({"handed": times, "reads": reads}))


def _producer(port: int, total: int, ack_path: str, out: str) -> None:
    from logbroker.client.producer import Producer

    send = Producer(broker_list=f"0:127.0.0.1:{port}").send
    returned: list[int] = []

    def timed_send(data: bytes) -> None:
        send(TOPIC, data)
        returned.append(time.monotonic_ns())

    one_way_producer(total, 200, timed_send, ack_path)
    Path(out).write_text(json.dumps(returned))


def measure(total: int, workdir: Path, apart: bool = False) -> dict[str, list[int]]:
    """Per message: the time of every hop (ns), in HOPS order. `apart`: the broker on
    SERVER_CPUS, producer and consumer on CLIENT_CPUS (bench/run.py's `latency` rows)."""
    from logbroker.stack.broker import BrokerProcess

    launcher = workdir / "launcher.py"
    launcher.write_text(_LAUNCHER)
    points_file = workdir / "broker_points.json"

    class HopBroker(BrokerProcess):
        def command(self) -> list[str]:
            cmd = super().command()  # python -m logbroker.cli broker ...
            return [sys.executable, str(launcher), *cmd[cmd.index("broker") :]]

    os.environ["HOPS_OUT"] = str(points_file)
    broker = HopBroker(workdir / "broker", broker_id=0, zk_connect=None).start()
    assert broker.pid is not None
    if apart:
        place(broker.pid, SERVER_CPUS)
    ack_path = str(workdir / "ack.sock")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    try:
        consumer = ctx.Process(
            target=_consumer,
            args=(broker.port, total, ack_path, ready, str(workdir / "consumer.json")),
        )
        consumer.start()
        if apart and consumer.pid is not None:
            place(consumer.pid, CLIENT_CPUS)
        if not ready.wait(60):
            raise RuntimeError("the consumer did not get ready")
        producer = ctx.Process(
            target=_producer, args=(broker.port, total, ack_path, str(workdir / "producer.json"))
        )
        producer.start()
        if apart and producer.pid is not None:
            place(producer.pid, CLIENT_CPUS)
        producer.join()
        consumer.join()
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not points_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the dump is written whole by then
    finally:
        broker.stop()
    consumed = json.loads((workdir / "consumer.json").read_text())
    returned = json.loads((workdir / "producer.json").read_text())
    return _per_message(json.loads(points_file.read_text()), consumed, returned)


def _per_message(
    points: list[tuple[str, int, int]], consumed: dict[str, list], returned: list[int]
) -> dict[str, list[int]]:
    """Each handed-over message matched to the PRODUCE the broker received between its
    stamp and its hand-over; a message whose answer went out with a later request (the
    consumer's FETCH_WAIT came after the PRODUCE) has no broker hops and is left out."""
    produces: list[dict[str, int]] = []  # the broker's points, one dict per PRODUCE read
    current: dict[str, int] = {}
    for point, conn, t in points:
        if point == "in":
            current = {"in": t, "conn": conn}
        elif point == "decoded":
            current["decoded"] = t
            produces.append(current)
        elif "decoded" in current and point not in current:
            current[point] = t
    produces = [p for p in produces if all(h in p for h in BROKER_HOPS)]
    starts = [p["in"] for p in produces]
    reads = consumed["reads"]
    out: dict[str, list[int]] = {hop: [] for hop in HOPS}
    matched = 0
    for i, ((stamp, hand), back) in enumerate(zip(consumed["handed"], returned, strict=True)):
        j = bisect.bisect_right(starts, stamp)
        if i < WARMUP or j == len(starts) or starts[j] > hand:
            continue
        seen = produces[j]
        read = reads[bisect.bisect_right(reads, hand) - 1]
        row = [stamp, back, *(seen[h] for h in BROKER_HOPS), read, hand]
        if seen["answer"] > read:
            continue  # the answer went out before this PRODUCE's append: not this one's
        for hop, t in zip(HOPS, row, strict=True):
            out[hop].append(t)
        matched += 1
    if matched < (len(returned) - WARMUP) // 2:
        raise RuntimeError(f"only {matched} of {len(returned) - WARMUP} messages matched")
    return out


def report(times: dict[str, list[int]]) -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    # every hop, then the producer's part, the broker's (to its answer), the send to the
    # consumer's read, the consumer's part with it, and the whole
    pairs = [
        *itertools.pairwise(HOPS),
        ("stamp", "in"),
        ("in", "answer"),
        ("answer", "received"),
        ("answer", "handed"),
        ("stamp", "handed"),
    ]
    for start, end in pairs:
        spans = sorted((b - a) / 1000 for a, b in zip(times[start], times[end], strict=True))
        rows.append(
            {
                "from": start,
                "to": end,
                "p50_us": spans[len(spans) // 2],
                "p90_us": spans[int(len(spans) * 0.9)],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=3000, help="messages timed (default 3000)")
    parser.add_argument("--json", type=Path, help="also write the table here")
    parser.add_argument(
        "--apart",
        action="store_true",
        help="the broker on CPU 0, producer and consumer on CPU 1 (default: the scheduler's)",
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="latency_hops."))
    try:
        rows = report(measure(args.messages + WARMUP, workdir, args.apart))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'hop':<22} {'p50 µs':>8} {'p90 µs':>8}")
    for row in rows:
        print(f"{row['from'] + ' -> ' + row['to']:<22} {row['p50_us']:>8.1f} {row['p90_us']:>8.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
