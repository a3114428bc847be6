"""Long fuzz run against a live broker: mutated requests, then a check of the stored data.

    .venv/bin/python -m bench.fuzz_broker --requests 100000 --seed 1

(as a module, from the checkout's root: the fuzzer is the tests' harness/, not installed).

Starts its own standalone broker (a `logbroker broker` subprocess, enable.zookeeper=false,
two partitions per topic, small segments so that rolls happen) in a temporary directory,
runs `harness.fuzz.run_fuzz` with a progress bar, stops the broker with SIGTERM
(it must exit 0), prints the report and writes bench/results/fuzz.json. Exit status 1 if
the run found a crash, changed or invalid stored data, a failed valid request, or an
unexpected traceback in the broker's log (kept with --keep, or printed at the end).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from logbroker.stack.broker import BrokerProcess

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--valid-fraction", type=float, default=0.2)
    parser.add_argument("--check-every", type=int, default=500, help="liveness check interval")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for answers")
    parser.add_argument(
        "--segment-bytes", type=int, default=1 << 20, help="log.file.size of the broker"
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "fuzz.json")
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory")
    args = parser.parse_args(argv)
    try:  # the tests' harness/ is not installed: found from the checkout's root only
        from harness.fuzz import BROKER_OVERRIDES, run_fuzz
    except ModuleNotFoundError as e:
        parser.error(f"{e}: run it from the checkout's root, as python -m bench.fuzz_broker")

    tmp = Path(tempfile.mkdtemp(prefix="fuzz-broker-"))
    overrides = {**BROKER_OVERRIDES, "log.file.size": str(args.segment_bytes)}
    broker = BrokerProcess(tmp / "broker", overrides=overrides)
    broker.start()
    started = time.monotonic()
    try:
        with tqdm(total=args.requests, unit="req", smoothing=0.05) as bar:
            report = run_fuzz(
                broker.address,
                broker.log_dir,
                requests=args.requests,
                seed=args.seed,
                progress=bar.update,
                valid_fraction=args.valid_fraction,
                check_every=args.check_every,
                timeout=args.timeout,
                broker_alive=lambda: broker.proc is not None and broker.proc.poll() is None,
                broker_log=broker.log_path,
            )
    finally:
        exit_code = broker.stop(timeout=30)
    wall = time.monotonic() - started
    print(report)
    print(f"broker exit code after SIGTERM: {exit_code}; wall time {wall:.1f} s")

    record = {
        "system": "logbroker",
        "workload": "fuzz_broker",
        **report.to_dict(),
        "broker_exit_code": exit_code,
        "wall_s": round(wall, 1),
        "elapsed_s": round(report.elapsed_s, 1),
        "segment_bytes": args.segment_bytes,
        "timeout_s": args.timeout,
        "python": platform.python_version(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.output}")

    ok = report.ok and exit_code == 0
    if args.keep or not ok:
        print(f"broker directory kept: {tmp} (log: {broker.log_path})")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
