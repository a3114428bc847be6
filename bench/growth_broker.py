"""Benchmark: the broker's own append rate as the log grows, beside plain file appends.

    .venv/bin/python bench/growth_broker.py                 # 4 GB each (issue 9's goal)
    .venv/bin/python bench/growth_broker.py --gb 0.5        # a quick run

`bench/run.py`'s growth workload produces with logbroker's Python `Producer`, whose own CPU
(building 50-message sets) limits it at about the broker's rate; this one takes the client
out. In one run, on the same disk (the work directory):

  logbroker   a broker (no ZooKeeper) fed prebuilt PRODUCE frames of 50 200-byte messages
              over one raw socket: what it costs the broker to read, validate (every size
              and CRC) and append them, as the log grows to --gb
  plain       tcp's growth baseline: the same bytes appended to one file with os.write,
              fsynced every 10,000 messages (bench/systems/tcp.py)

Reported per system: the median rate of the first 100 MB and of the last 10 %, and the ratio
of logbroker's last 10 % to the plain appends' (issue 9's goal: >= 0.9). Results:
bench/results/growth_broker.json. Nothing here is asserted; tests never time anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import batches, payloads
from systems import tcp

from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.protocol.message import ENTRY_OVERHEAD
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import ProduceRequest, encode_request
from logbroker.testing.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[1]
SIZE, BATCH, WINDOW = 200, 50, 100 * 10**6
RESULTS = ROOT / "bench" / "results"


def broker_growth(work: Path, total_bytes: float) -> list[list[float]]:
    """(payload bytes stored, msgs/s) per 100 MB window of prebuilt frames."""
    broker = BrokerProcess(work / "broker", broker_id=0).start()
    try:
        frames = [
            encode_request(ProduceRequest("growth", 0, build_message_set(m)))
            for m in batches(payloads(SIZE), BATCH)
        ]
        set_bytes = BATCH * (SIZE + ENTRY_OVERHEAD)
        sock = socket.create_connection((broker.host, broker.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        windows: list[list[float]] = []
        stored = sent = 0
        mark = WINDOW
        clock = time.perf_counter
        t_prev = window_start = clock()
        while stored < total_bytes:
            sock.sendall(frames[sent % len(frames)])
            sent += 1
            stored += BATCH * SIZE
            if stored >= mark:
                now = clock()
                windows.append([stored, WINDOW / SIZE / (now - t_prev)])
                window_start, t_prev, mark = t_prev, now, mark + WINDOW
        with SimpleConsumer(broker.host, broker.port) as watcher:  # the last appends
            while watcher.latest_offset("growth", 0) < sent * set_bytes:
                time.sleep(0.01)
        if windows:  # what the broker still had to append belongs to the last window
            windows[-1][1] = WINDOW / SIZE / (clock() - window_start)
        sock.close()
        return windows
    finally:
        broker.stop()


def summary(windows: list[list[float]]) -> dict[str, float]:
    end = windows[-1][0]
    first = [r for x, r in windows if x <= WINDOW] or [windows[0][1]]
    final = [r for x, r in windows if x > 0.9 * end] or [windows[-1][1]]
    return {
        "first_100mb": statistics.median(first),
        "final": statistics.median(final),
        "ratio_to_first": statistics.median(final) / statistics.median(first),
        "stored_gb": end / 1e9,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gb", type=float, default=4.0, help="payload to store (default 4)")
    parser.add_argument("--output", type=Path, default=RESULTS / "growth_broker.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="growth-broker-"))
    try:
        print(f"logbroker, prebuilt frames, to {args.gb:g} GB", flush=True)
        logbroker = broker_growth(work, args.gb * 1e9)
        print(f"plain appends, to {args.gb:g} GB", flush=True)
        os.environ["BENCH_WORKDIR"] = str(work)  # the same disk
        plain = tcp.Client({"host": "127.0.0.1", "port": 0}).growth(
            "growth", int(args.gb * 1e9), SIZE, BATCH, WINDOW
        )["windows"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "logbroker": summary(logbroker),
        "plain": summary(plain),
        "windows": {"logbroker": logbroker, "plain": plain},
    }
    results["logbroker_over_plain_final"] = (
        results["logbroker"]["final"] / results["plain"]["final"]
    )
    for name in ("logbroker", "plain"):
        s = results[name]
        print(
            f"  {name:10} first 100 MB {s['first_100mb']:>12,.0f}  last 10 % "
            f"{s['final']:>12,.0f} msgs/s  (x{s['ratio_to_first']:.2f})"
        )
    print(
        f"  logbroker / plain appends at {args.gb:g} GB: {results['logbroker_over_plain_final']:.2f}"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
