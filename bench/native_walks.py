"""Micro-benchmark: the message-set walks in pure Python beside their compiled twins.

    .venv/bin/python bench/native_walks.py [--batch 50] [--size 200] [--reps 7] [--seconds 0.3]

Times, in one process and interleaved (machines here are shared and noisy), each walk on
the same bytes: `validate` of one produced set of `--batch` messages of `--size` bytes
(what the broker does per PRODUCE), `build_message_set` of such a set (what the producer
does per request), and over a 1 MiB fetched region of such sets: `message_columns` (what
SimpleConsumer.iter_batches and the Spark source do per fetch), `iter_messages` run to its
end (the mirror, the group consumer, SimpleConsumer.iter_messages) and `stored_set_end`
(the mirror's check before it copies). Prints the median over `--reps` of µs per call and
ns per message. Nothing here is asserted; tests never time anything. The compiled rows
need the extension (`make setup` builds it).

Then (`--gil-seconds`, 0 to skip) what the compiled validate's GIL release does for a
concurrent thread: one thread checks 4 MiB inflated sets (depth 1, as the broker's inflating
workers do: checked without the GIL) or the same bytes at depth 0 (checked holding it), while
the main thread, standing in for the broker's event loop, runs short Python steps. Prints,
per repetition, the main thread's steps, the share of the time it was stalled (gaps over
0.5 ms) and the sets the other thread checked.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from types import ModuleType

from logbroker.protocol import native
from logbroker.protocol.message import Message
from logbroker.protocol.message_set import (
    build_message_set_python,
    iter_messages_python,
    message_columns_python,
    stored_set_end_python,
    validate_python,
)


def per_call(function: Callable[[], object], seconds: float) -> float:
    """Seconds per call, timing batches of calls for about `seconds`."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(50):
            function()
        calls += 50
    return elapsed / calls


def drain(iterate: Callable[[bytes], Iterator[Message]], region: bytes) -> None:
    """Run an iteration to its end, keeping nothing (as a consumer that handles each)."""
    deque(iterate(region), maxlen=0)


def concurrent(
    compiled: ModuleType, region: bytes, depth: int, seconds: float
) -> tuple[int, float, int]:
    """(main-thread steps, share of the time it was stalled, sets the other thread checked)
    while another thread validates `region` at `depth` over and over."""
    stop = threading.Event()
    checked = [0]

    def check() -> None:
        while not stop.is_set():
            compiled.validate(region, depth=depth)
            checked[0] += 1

    thread = threading.Thread(target=check)
    thread.start()
    steps, stalled = 0, 0.0
    start = last = time.perf_counter()
    while (now := time.perf_counter()) < start + seconds:
        sum(range(50))  # a short step of Python work
        steps += 1
        if now - last > 0.0005:
            stalled += now - last
        last = now
    stop.set()
    thread.join()
    return steps, stalled / seconds, checked[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=50, help="messages per set")
    parser.add_argument("--size", type=int, default=200, help="bytes per payload")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    parser.add_argument("--seconds", type=float, default=0.3, help="per case and repetition")
    parser.add_argument(
        "--gil-seconds", type=float, default=1.0, help="per GIL case and repetition (0: skip)"
    )
    args = parser.parse_args()
    if native.COMPILED is None:
        raise SystemExit("the _native extension is not built: run `make setup`")

    payload = (b"0123456789abcdef" * (args.size // 16 + 1))[: args.size]
    payloads = [payload] * args.batch
    one_set = build_message_set_python(payloads)
    region = one_set * max(1, (1 << 20) // len(one_set))
    region_messages = args.batch * (len(region) // len(one_set))
    compiled = native.COMPILED
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "validate, python": (partial(validate_python, one_set), args.batch),
        "validate, compiled": (partial(compiled.validate, one_set), args.batch),
        "build_message_set, python": (partial(build_message_set_python, payloads), args.batch),
        "build_message_set, compiled": (partial(compiled.build_message_set, payloads), args.batch),
        "message_columns, python": (
            partial(message_columns_python, region),
            region_messages,
        ),
        "message_columns, compiled": (
            partial(compiled.message_columns, region),
            region_messages,
        ),
        "iter_messages, python": (partial(drain, iter_messages_python, region), region_messages),
        "iter_messages, compiled": (
            partial(drain, compiled.iter_messages, region),
            region_messages,
        ),
        "stored_set_end, python": (partial(stored_set_end_python, region), region_messages),
        "stored_set_end, compiled": (
            partial(compiled.stored_set_end, region),
            region_messages,
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.reps):
        for name, (function, _) in cases.items():
            times[name].append(per_call(function, args.seconds))

    print(f"{args.batch} x {args.size} B sets; regions of {len(region)} B")
    print(f"{'walk':<28}{'µs per call':>14}{'ns per message':>16}")
    for name, (_, messages) in cases.items():
        median = statistics.median(times[name])
        print(f"{name:<28}{median * 1e6:>14.2f}{median * 1e9 / messages:>16.1f}")

    if args.gil_seconds <= 0:
        return
    inflated = one_set * max(1, (4 << 20) // len(one_set))
    print(f"\nanother thread validates {len(inflated)} B sets; main thread: short Python steps")
    for _ in range(4):
        for depth, name in ((0, "holding the GIL (depth 0)"), (1, "without the GIL (depth 1)")):
            steps, stalled, checked = concurrent(compiled, inflated, depth, args.gil_seconds)
            print(f"{name:<28}{steps:>10} steps{stalled:>8.0%} stalled{checked:>6} sets checked")


if __name__ == "__main__":
    main()
