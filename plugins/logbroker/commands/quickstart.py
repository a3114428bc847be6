"""`logbroker quickstart start|stop`: the README's ZooKeeper and clusters in the background."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import add_logging_args, formatter

DESCRIPTION = """\
Start, in the background, what the README's walk-through runs against: ZooKeeper on
127.0.0.1:2181; the live cluster, brokers 0, 1 and 2 on ports 9092-9094 (chroot /live, the
sample include/config/server.properties and server-1.properties); the analysis cluster,
broker 0 on port 9095 (chroot /analysis). Data and logs go under var/quickstart/ of the
directory it runs in, the repository's root; each broker's command line is printed. 'start'
returns once every broker is registered (a few seconds); 'stop' stops them all by the PIDs
it recorded (var/quickstart/quickstart.json) and keeps the data: 'start' again resumes on
it, `rm -rf var/quickstart` starts from nothing.
"""

EPILOG = """\
examples:
  logbroker quickstart start
  logbroker quickstart stop

Logs: var/quickstart/zookeeper/zookeeper.log, var/quickstart/<cluster>-<id>/broker.log.
A port that is taken stops 'start' before anything runs, naming the port.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "quickstart",
        help="start or stop the README's local ZooKeeper and clusters",
        formatter_class=formatter,
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument("action", choices=("start", "stop"), help="start or stop them")
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..stack import quickstart

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        if args.action == "start":
            quickstart.start(Path.cwd(), say)
        else:
            quickstart.stop(Path.cwd(), say)
    except quickstart.QuickstartError as exc:
        print(f"logbroker quickstart: {exc}", file=sys.stderr)
        return 1
    return 0
