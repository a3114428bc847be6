"""Storage of a 0.8-format partition (storage/logical_log.py) beside a 0.7 one (storage/log.py),
on the same payloads, in one process.

    .venv/bin/python bench/bench_logical_log.py [--messages N] [--size BYTES] [--batch N]
        [--reps R] [--profile CASE] [--index-interval BYTES] [--cases CASE,...]

Each case runs once per round, interleaved (machines here are shared and noisy), on a fresh
directory; the read cases read a log written before the round:
  append_plain     Log.append / LogicalLog.append of plain sets of `--batch` (a producer's
                   set: validated, and for 0.8 its offsets assigned, then written)
  append_gzip      the same messages as gzip-compressed sets (0.8 re-encodes each wrapper
                   with its absolute inner offsets)
  fetch_sequential a consumer reading the log from its start, 1 MiB per fetch, each fetch at
                   the offset after the last whole message of the previous one (0.8: through
                   the offset index); the read call and the bytes read with pread
  fetch_random     fetches of 64 KiB at random message offsets (0.8: an index lookup and a
                   walk of at most log.index.interval.bytes of entry headers each)
  follow           a follower copying the whole log: read_whole 1 MiB at a time, then
                   append_verbatim (0.8: the copy's offsets checked and indexed)
Reports messages/s per format (median, min, max) and the 0.8/0.7 ratio. `--profile CASE`
runs that 0.8 case once under cProfile and prints where its time goes. `--index-interval`
is the 0.8 logs' log.index.interval.bytes (4096, 0.8's default): 2147483647 writes no index
entry, which tells the offset index's share of the appends and the copy (with
`--cases append_plain,append_gzip,follow`: the reads would walk from their segment's start).
`--cases` runs those cases only. Nothing here is asserted; tests never time anything.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from logbroker.protocol import compression
from logbroker.protocol import message_set as set07
from logbroker.protocol.kafka08 import message_set as set08
from logbroker.storage.log import Log, LogConfig
from logbroker.storage.logical_log import LogicalLog
from logbroker.storage.offset_index import DEFAULT_INTERVAL_BYTES

FETCH = 1024 * 1024
RANDOM_FETCH = 64 * 1024
CONFIG = LogConfig(flush_interval_messages=10**12)  # flushing is not what is measured

AnyLog = Log | LogicalLog
NAMES = ["append_plain", "append_gzip", "fetch_sequential", "fetch_random", "follow"]
INDEX_INTERVAL = [DEFAULT_INTERVAL_BYTES]  # --index-interval


def make_sets(fmt: str, messages: int, size: int, batch: int, codec: int) -> list[bytes]:
    payload = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    if fmt == "0.7":
        return [set07.build_message_set([payload] * batch, codec) for _ in range(messages // batch)]
    pairs = [(None, payload)] * batch
    return [set08.build_message_set(pairs, codec) for _ in range(messages // batch)]


def open_log(fmt: str, directory: Path) -> AnyLog:
    if fmt == "0.7":
        return Log(directory / "bench-0", "bench", 0, CONFIG, lambda: 0)
    return LogicalLog(
        directory / "bench-0",
        "bench",
        0,
        CONFIG,
        lambda: 0,
        index_interval_bytes=INDEX_INTERVAL[0],
    )


def append_all(log: AnyLog, sets: list[bytes]) -> None:
    for data in sets:
        log.append(data)


def sequential_offsets(fmt: str, log: AnyLog) -> list[int]:
    """The offsets a consumer reading from the start asks for (found before timing)."""
    offsets, offset = [], log.start_offset
    while offset < log.end_offset:
        offsets.append(offset)
        region = log.read(offset, FETCH)
        data = region.read()
        if fmt == "0.7":
            offset += set07.whole_entries_end(data)
        else:
            offset = max(stored for stored, _, _ in set08.entry_headers(data)) + 1
    return offsets


def message_offsets(fmt: str, log: AnyLog, count: int) -> list[int]:
    """`count` random offsets of messages (0.7: entry starts; 0.8: any message)."""
    rng = random.Random(7)
    if fmt == "0.8":
        return [rng.randrange(log.start_offset, log.end_offset) for _ in range(count)]
    starts = [
        offset
        for segment in log.segments
        for offset, _ in set07.iter_entries(
            segment.region(0, segment.size).read(), segment.base_offset
        )
    ]
    return [rng.choice(starts) for _ in range(count)]


def fetch(log: AnyLog, offsets: list[int], size: int) -> None:
    for offset in offsets:
        log.read(offset, size).read()


def follow(fmt: str, leader: AnyLog, directory: Path) -> None:
    follower = open_log(fmt, directory)
    end = leader.end_offset
    while follower.end_offset < end:
        region, messages = leader.read_whole(follower.end_offset, FETCH)
        if messages < 0:
            raise SystemExit("the leader's marks did not cover a fetch: not what is measured")
        follower.append_verbatim(region.read(), messages)
    follower.close()


def timed(fn: Callable[[Path], None]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-logical-") as tmp:
        start = time.perf_counter()
        fn(Path(tmp))
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--random-fetches", type=int, default=5_000)
    parser.add_argument("--profile", choices=NAMES)
    parser.add_argument("--cases", help="comma-separated, of " + ", ".join(NAMES))
    parser.add_argument("--index-interval", type=int, default=DEFAULT_INTERVAL_BYTES)
    args = parser.parse_args(argv)
    INDEX_INTERVAL[0] = args.index_interval

    sets = {
        (fmt, codec): make_sets(fmt, args.messages, args.size, args.batch, codec)
        for fmt in ("0.7", "0.8")
        for codec in (compression.NONE, compression.GZIP)
    }
    count = len(sets[("0.7", compression.NONE)]) * args.batch
    keep = tempfile.TemporaryDirectory(prefix="bench-logical-written-")
    written: dict[str, AnyLog] = {}
    for fmt in ("0.7", "0.8"):
        written[fmt] = open_log(fmt, Path(keep.name) / fmt)
        append_all(written[fmt], sets[(fmt, compression.NONE)])
    names = [n for n in NAMES if args.cases is None or n in args.cases.split(",")]
    reads = "fetch_sequential" in names or args.profile == "fetch_sequential"
    sequential = {fmt: sequential_offsets(fmt, written[fmt]) if reads else [] for fmt in written}
    randoms = {fmt: message_offsets(fmt, written[fmt], args.random_fetches) for fmt in written}

    def case(name: str, fmt: str) -> tuple[Callable[[Path], None], int]:
        """(what one run does, how many messages it counts as)"""
        if name == "append_plain":
            return (lambda d: append_all(open_log(fmt, d), sets[(fmt, 0)])), count
        if name == "append_gzip":
            return (lambda d: append_all(open_log(fmt, d), sets[(fmt, 1)])), count
        if name == "fetch_sequential":
            return (lambda d: fetch(written[fmt], sequential[fmt], FETCH)), count
        if name == "fetch_random":
            return (lambda d: fetch(written[fmt], randoms[fmt], RANDOM_FETCH)), len(randoms[fmt])
        return (lambda d: follow(fmt, written[fmt], d)), count

    if args.profile:
        run, _ = case(args.profile, "0.8")
        profile = cProfile.Profile()
        with tempfile.TemporaryDirectory(prefix="bench-logical-") as tmp:
            profile.enable()
            run(Path(tmp))
            profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        return 0
    timings: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for name in names:
            for fmt in ("0.7", "0.8"):
                run, _ = case(name, fmt)
                timings.setdefault((name, fmt), []).append(timed(run))

    print(
        f"{count:,} messages of {args.size} bytes in sets of {args.batch}, {args.reps} reps "
        f"(fetch_random: {args.random_fetches:,} fetches of {RANDOM_FETCH // 1024} KiB)"
    )
    print(f"{'case':18} {'0.7 msgs/s':>12} {'0.8 msgs/s':>12} {'0.8 min..max':>22} {'0.8/0.7':>8}")
    for name in names:
        _, n = case(name, "0.7")
        rate = {fmt: sorted(n / t for t in timings[(name, fmt)]) for fmt in ("0.7", "0.8")}
        old, new = statistics.median(rate["0.7"]), statistics.median(rate["0.8"])
        span = f"{rate['0.8'][0]:,.0f}..{rate['0.8'][-1]:,.0f}"
        print(f"{name:18} {old:12,.0f} {new:12,.0f} {span:>22} {new / old:8.2f}")
    for log in written.values():
        log.close()
    keep.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
