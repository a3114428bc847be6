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
of logbroker's last 10 % to the plain appends' (issue 9's goal: >= 0.9; issue 33 replaced it
with bench/run.py's intake workload, the same frames against a relay that stores them).
The frames and their windowed streaming are bench/intake.py's, shared with that workload.
Results: bench/results/growth_broker.json. Nothing here is asserted; tests never time
anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from intake import connect, produce_frames, rates, set_bytes, stream, tail
from systems import tcp

from logbroker.client.simple_consumer import SimpleConsumer
from logbroker.stack.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[1]
SIZE, BATCH, WINDOW = 200, 50, 100 * 10**6
RESULTS = ROOT / "bench" / "results"


def broker_growth(work: Path, total_bytes: float) -> list[list[float]]:
    """(payload bytes stored, msgs/s) per 100 MB window of prebuilt frames."""
    broker = BrokerProcess(work / "broker", broker_id=0).start()
    try:
        frames = produce_frames("growth", SIZE, BATCH)
        per_set = set_bytes(SIZE, BATCH)
        sock = connect(broker.host, broker.port)

        def drained(sent: int) -> None:  # the last appends
            with SimpleConsumer(broker.host, broker.port) as watcher:
                while watcher.latest_offset("growth", 0) < sent * per_set:
                    time.sleep(0.01)

        try:
            windows = stream(sock, frames, BATCH * SIZE, total_bytes, WINDOW, drained)
        finally:
            sock.close()
        return rates(windows, 1 / SIZE)
    finally:
        broker.stop()


def summary(windows: list[list[float]]) -> dict[str, float]:
    s = tail(windows)
    return {
        "first_100mb": s["first_100mb"],
        "final": s["final"],
        "ratio_to_first": s["final"] / s["first_100mb"],
        "stored_gb": s["stored_gb"],
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
