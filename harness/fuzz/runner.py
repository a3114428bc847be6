"""`run_fuzz`: a whole fuzz run against a live broker, and the broker log check.

`run_fuzz` loads known data with acked produces, snapshots every segment file, sends
`requests` requests (about 20% valid, 80% mutated), checks liveness every `check_every`
requests and at the end, fetches the loaded sets back byte for byte and verifies the
stored bytes (`verify_segments`). The broker must be started with `BROKER_OVERRIDES`
(two partitions per topic).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from logbroker.protocol.requests import DEFAULT_MAX_SOCKET_REQUEST_BYTES

from .fuzzer import Fuzzer
from .report import FuzzReport
from .requests import PARTITIONS, TOPICS
from .segments import snapshot_segments, verify_segments


def run_fuzz(
    address: tuple[str, int],
    log_dir: Path | str,
    *,
    requests: int,
    seed: int,
    progress: Callable[[int], object] | None = None,
    valid_fraction: float = 0.2,
    check_every: int = 500,
    timeout: float = 2.0,
    topics: Iterable[str] = TOPICS,
    partitions: int = PARTITIONS,
    broker_alive: Callable[[], bool] | None = None,
    broker_log: Path | str | None = None,
    max_request_bytes: int = DEFAULT_MAX_SOCKET_REQUEST_BYTES,
) -> FuzzReport:
    """Fuzz the broker at `address` whose segment files live under `log_dir`.

    `progress(n)` is called after every request with n = 1 (e.g. a tqdm bar's update).
    `broker_alive()` says whether the broker process still runs; `broker_log` is its log
    file, in which lines of requests the broker failed on unexpectedly are counted. The
    broker must have `partitions` partitions per topic (`BROKER_OVERRIDES`).
    """
    log_dir = Path(log_dir)
    started = time.monotonic()
    log_start = Path(broker_log).stat().st_size if broker_log is not None else 0
    report = FuzzReport(seed=seed, requests_planned=requests)
    rng = random.Random(seed)
    fuzzer = Fuzzer(address, rng, report, tuple(topics), partitions, timeout, max_request_bytes)
    known = fuzzer.load()
    fuzzer.drop()
    before = snapshot_segments(log_dir)
    report.files_before = len(before)
    report.bytes_before = sum(s.size for s in before.values())
    try:
        for i in range(requests):
            if rng.random() < valid_fraction:
                fuzzer.send_valid()
            else:
                fuzzer.send_mutated()
            report.requests_sent += 1
            if progress is not None:
                progress(1)
            if (i + 1) % check_every == 0 and not fuzzer.check_liveness(broker_alive):
                report.aborted = True
                break
    finally:
        fuzzer.drop()
        report.mutations = dict(fuzzer.mutations)
        report.framing = dict(fuzzer.framing)
    if not report.aborted and fuzzer.check_liveness(broker_alive):
        fuzzer.verify_known(known)
    verify_segments(log_dir, before, report)
    if broker_log is not None:
        report.broker_errors_logged = count_broker_errors(Path(broker_log), log_start)
    report.elapsed_s = time.monotonic() - started
    return report


BROKER_ERROR_MARKERS = ("Traceback (most recent call last)",)


def count_broker_errors(log_path: Path, start: int = 0) -> int:
    """Lines in the broker's log since byte `start` that show it failed unexpectedly."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(start)
            text = handle.read().decode(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if any(m in line for m in BROKER_ERROR_MARKERS))
