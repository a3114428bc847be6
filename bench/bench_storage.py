"""Storage benchmark: validate-and-append of message sets, beside a plain file write.

    .venv/bin/python bench/bench_storage.py [--messages N] [--size BYTES] [--batch N] [--reps R]

Runs, in one process and interleaved (machines here are shared and noisy):
  plain_write      os.write of the same bytes to a file: this machine's limit
  validate         message_set.validate alone (sizes and CRCs, no I/O)
  validate_append  Log.append: validate, then append to a segment (what a produce costs)
  gzip_append      the same messages as gzip-compressed sets of `--batch`
Reports messages/s and MB/s (median of the repetitions, min and max), and writes
bench/results/storage.json. Nothing here is asserted; tests never time anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from logbroker.protocol import compression
from logbroker.protocol.message_set import build_message_set, validate
from logbroker.storage.log import Log, LogConfig

RESULTS = Path(__file__).resolve().parent / "results"


def make_sets(messages: int, size: int, batch: int, codec: int) -> list[bytes]:
    payload = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    return [build_message_set([payload] * batch, codec) for _ in range(messages // batch)]


def run_plain_write(sets: list[bytes], directory: Path) -> None:
    fd = os.open(directory / "plain.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for data in sets:
            os.write(fd, data)
    finally:
        os.close(fd)


def run_validate(sets: list[bytes], directory: Path) -> None:
    for data in sets:
        if validate(data).error is not None:
            raise SystemExit("benchmark data failed validation")


def run_append(sets: list[bytes], directory: Path) -> None:
    config = LogConfig(flush_interval_messages=10**12)  # flushing is not what we measure
    log = Log(directory / "bench-0", "bench", 0, config, lambda: 0)
    for data in sets:
        log.append(data)
    log.close()


def measure(fn: Callable[[list[bytes], Path], None], sets: list[bytes]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        start = time.perf_counter()
        fn(sets, Path(tmp))
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a few seconds, for the test suite")
    parser.add_argument("--output", type=Path, default=RESULTS / "storage.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.reps = 20_000, 1

    plain = make_sets(args.messages, args.size, args.batch, compression.NONE)
    gzipped = make_sets(args.messages, args.size, args.batch, compression.GZIP)
    count = len(plain) * args.batch
    cases = [
        ("plain_write", run_plain_write, plain),
        ("validate", run_validate, plain),
        ("validate_append", run_append, plain),
        ("gzip_validate_append", run_append, gzipped),
    ]
    timings: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(args.reps):  # interleaved: every case once per round
        for name, fn, sets in cases:
            timings[name].append(measure(fn, sets))

    records = []
    print(f"{count:,} messages of {args.size} bytes in sets of {args.batch}, {args.reps} reps")
    print(f"{'case':24} {'msgs/s (median)':>16} {'min':>12} {'max':>12} {'MB/s':>8}")
    for name, _, sets in cases:
        nbytes = sum(len(s) for s in sets)
        rates = sorted(count / t for t in timings[name])
        median = statistics.median(rates)
        mbps = nbytes / statistics.median(timings[name]) / 1e6
        print(f"{name:24} {median:16,.0f} {rates[0]:12,.0f} {rates[-1]:12,.0f} {mbps:8.1f}")
        records.append(
            {
                "system": "logbroker",
                "workload": name,
                "unit": "msgs/s",
                "median": round(median),
                "min": round(rates[0]),
                "max": round(rates[-1]),
                "mb_per_s": round(mbps, 1),
                "reps": args.reps,
                "messages": count,
                "message_bytes": args.size,
                "batch": args.batch,
            }
        )
    ratio = records[2]["median"] / records[0]["median"]
    print(f"validate_append / plain_write = {ratio:.2f}")
    if not args.quick:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(records, indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
