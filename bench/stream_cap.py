"""Benchmark: what the stream's cap (maxOffsetsPerTrigger) costs its planner.

    .venv/bin/python bench/stream_cap.py                   # 500,000 messages of 140 bytes
    .venv/bin/python bench/stream_cap.py --messages 100000

One broker (127.0.0.1, no ZooKeeper, stopped by PID at the end) gets N plain messages in one
partition. Then, each `--reps` times (median printed):

  walk_all     ranges.entries_end over the whole backlog: the planner's walk of entry sizes
               when the cap is at least the backlog's entries (admission.py skips it when the
               backlog is too short to hold more than the cap: not here)
  walk_half    entries_end to the middle: what a cap of N/2 costs one micro-batch's planning
  read_all     ranges.read_range over the same range: what the micro-batch's reader does with
               those bytes (fetch, walk, CRC and columns, compiled)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from logbroker.client.producer import Producer
from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.stack.broker import BrokerProcess
from spark_apps.source.ranges import PartitionRange, entries_end, read_range

FETCH = 1024 * 1024


def timed(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=140)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", broker_id=0, zk_connect=None).start()
        try:
            host, port = broker.address
            payload = b"x" * args.size
            with Producer(broker_list=f"0:{host}:{port}", acks="ack") as producer:
                for i in range(0, args.messages, 1000):
                    producer.send("cap", [payload] * min(1000, args.messages - i))
            with SimpleConsumer(host, port, fetch_size=FETCH) as consumer:
                latest = consumer.latest_offset("cap", 0)
                r = PartitionRange("cap", 0, 0, 0, latest)
                n = args.messages
                assert entries_end(consumer, r, n, fetch_size=FETCH) == latest
                results = {
                    "walk_all": timed(
                        lambda: entries_end(consumer, r, n, fetch_size=FETCH), args.reps
                    ),
                    "walk_half": timed(
                        lambda: entries_end(consumer, r, n // 2, fetch_size=FETCH), args.reps
                    ),
                    "read_all": timed(
                        lambda: sum(len(c) for c in read_range(consumer, r, fetch_size=FETCH)),
                        args.reps,
                    ),
                }
        finally:
            broker.stop()
    mib = latest / 2**20
    out = {"messages": n, "bytes": latest}
    for name, seconds in results.items():
        share = 0.5 if name == "walk_half" else 1.0
        out[name] = {
            "seconds": round(seconds, 3),
            "us_per_message": round(seconds / (n * share) * 1e6, 3),
            "MiB_per_s": round(mib * share / seconds, 1),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
