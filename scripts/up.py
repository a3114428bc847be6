"""`make up` / `make down`: the pipeline left running on this machine, with live traffic.

    .venv/bin/python scripts/up.py up   [--workdir var/up] [--rate 20]
    .venv/bin/python scripts/up.py down [--workdir var/up]

`up` starts what `make demo` starts (ZooKeeper, the live and analysis clusters, the schema
registry, Airflow's api-server, scheduler, dag-processor and triggerer on 127.0.0.1), with the
DAGs unpaused on the real clock: the mirror every 5 minutes, the hourly load at every hour,
the audit after each load. A traffic process sends audited events (page views, searches, ad
clicks) at --rate events a second. It returns once Airflow is healthy and prints the UI's URL
and login. Everything runs in the background until `down` stops it, by the PIDs recorded in
<workdir>/stack.json. Data stays in --workdir across `down`/`up` only if --keep-data is given.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from logbroker.testing.pipeline_stack import PipelineStack, stop_recorded
from logbroker.testing.traffic import TOPICS

ROOT = Path(__file__).resolve().parents[1]


def up(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    if (workdir / "stack.json").exists():
        print(f"already up (see {workdir / 'stack.json'}); `make down` first", file=sys.stderr)
        return 1
    if workdir.exists() and not args.keep_data:
        shutil.rmtree(workdir)
    stack = PipelineStack(workdir, log=lambda s: print(f"  {s}", flush=True))
    stack.start()
    stack.zookeeper.keep_running()  # it outlives this command, until `make down`
    log = open(workdir / "traffic.log", "ab")  # noqa: SIM115 - the child keeps it
    traffic = subprocess.Popen(
        [sys.executable, __file__, "traffic", "--live", stack.live, "--registry", stack.registry,
         "--rate", str(args.rate)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    state_file = workdir / "stack.json"
    state = json.loads(state_file.read_text())
    state["traffic"] = {"pid": traffic.pid}
    state_file.write_text(json.dumps(state, indent=1) + "\n")
    print(f"up: Airflow UI at {stack.airflow.url}  (login: admin / {stack.airflow.password})")
    print(f"    the Pipeline page: {stack.airflow.url}/logbroker/pipeline")
    print(f"    live traffic: {args.rate} events/s on {', '.join(TOPICS)} ({workdir}/traffic.log)")
    print(f"    warehouse: {stack.warehouse}   stop everything with `make down`")
    print(f"    the airflow command in this stack: . {stack.airflow.home}/env.sh")
    return 0


def down(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir).resolve()
    state_file = workdir / "stack.json"
    if not state_file.exists():
        print(f"nothing is up in {workdir}")
        return 0
    # The traffic process first: on SIGTERM it publishes its audit counts, then exits.
    stopped = stop_recorded(workdir)
    print(f"down: stopped {len(stopped)} process groups")
    return 0


def traffic(args: argparse.Namespace) -> int:
    """Send audited events at a steady rate with the current time, until SIGTERM."""
    from logbroker.audit import AuditedProducer
    from logbroker.client.producer import Producer
    from logbroker.serde import SchemaRegistry
    from logbroker.testing.traffic import activity

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    producer = Producer(zk_connect=args.live, acks="ack", compression_codec="snappy")
    shares = {"page_views": 0.65, "searches": 0.28, "ad_clicks": 0.07}
    with SchemaRegistry(args.registry) as registry, AuditedProducer(producer, registry) as audited:
        second = 0
        try:
            while True:
                started = time.time()
                for topic in TOPICS:
                    count = max(1, round(args.rate * shares[topic]))
                    records = activity(topic, int(started * 1000), count, second, span_ms=1000)
                    audited.send(topic, records)
                second += 1
                time.sleep(max(0.0, 1 - (time.time() - started)))
        except KeyboardInterrupt:
            pass  # closing the producer publishes the counts of the open windows
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="up.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down"):
        p = sub.add_parser(name)
        p.add_argument("--workdir", default=str(ROOT / "var" / "up"))
        if name == "up":
            p.add_argument("--rate", type=int, default=20, help="events a second (default 20)")
            p.add_argument("--keep-data", action="store_true")
    t = sub.add_parser("traffic", help="(internal) the live traffic process")
    t.add_argument("--live", required=True)
    t.add_argument("--registry", required=True)
    t.add_argument("--rate", type=int, default=20)
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "traffic": traffic}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
