"""One measured workload against one system, in a process of its own (run.py starts it).

    python bench/worker.py SYSTEM ACTION --endpoint JSON --params JSON [--barrier]
                           [--profile FILE]

Prints `READY` once connected and set up; with --barrier it then waits for a line on stdin
(the engine's "go", sent to every process of a workload at once). The last line printed is
`RESULT <json>`. With --profile the client side runs under cProfile (stats to FILE).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

import systems
from common import activity_events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("system")
    parser.add_argument("action")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--barrier", action="store_true")
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args(argv)

    module = systems.load(args.system)
    client = module.Client(json.loads(args.endpoint))
    params = json.loads(args.params)
    if "event_count" in params:  # JSON activity events are made here, not sent on argv
        params["events"] = activity_events(params.pop("event_count"))

    def ready() -> None:
        print("READY", flush=True)
        if args.barrier:
            line = sys.stdin.readline()
            if line.strip() != "go":
                raise SystemExit("worker: no go from the engine")

    needs_ready = args.action in (
        "produce",
        "produce_for",
        "consume",
        "group_consume",
        "produce_json",
        "consume_json",
        "latency_consume",
    )
    if needs_ready:
        params["ready"] = ready
    method = getattr(client, args.action)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        result = method(**params) or {}
    except Exception:
        traceback.print_exc()
        print("RESULT " + json.dumps({"error": traceback.format_exc(limit=3)}), flush=True)
        return 1
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(args.profile))
        with contextlib.suppress(Exception):  # a failed close must not hide a failure
            client.close()
    if not needs_ready:
        print("READY", flush=True)
    result["finished_at"] = time.perf_counter()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
