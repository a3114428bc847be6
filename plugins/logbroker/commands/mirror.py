"""`logbroker mirror`: copy topics from one cluster into another (0.7's MirrorMaker)."""

from __future__ import annotations

import argparse
import signal
import sys

from . import add_logging_args, formatter, int_at_least

DESCRIPTION = """\
Copy topics from a SOURCE cluster (e.g. live) into a TARGET cluster (e.g. analysis), as
Kafka 0.7's MirrorMaker did, without losing a message:

  - a consumer group on the source (--consumer.config: zk.connect, groupid, ...) reads every
    topic that --whitelist allows (or that --blacklist does not forbid), new ones included;
  - the messages are written to the target (--producer.config: zk.connect or broker.list)
    as they were stored: a compressed set stays one compressed message, never recompressed;
    each source partition goes to the same partition on the target (the topic is created
    there with the source's partition count), so its order is kept;
  - every write is acknowledged by the target (PRODUCE_ACK), and the source offsets are
    committed (every autocommit.interval.ms, default 1000) only up to what the target
    acknowledged. kill -9 loses nothing: a restart resumes at the last commit and sends the
    uncommitted tail again (its size is in the first log line);
  - a target broker that goes away is retried (retry.backoff.ms doubling up to
    retry.backoff.max.ms); after delivery.timeout.ms without success the mirror exits 1
    naming the broker and topic;
  - SIGTERM or SIGINT: the batches in hand are finished, offsets committed, partitions
    released; exit 0. --until-caught-up stops the same way by itself once everything that
    was in the source at start is copied (for a scheduled task).

Avro events (topics other than _audit) are counted per topic and 10-minute window from their
headers and published as AuditCount deltas (tier "mirror") to _audit on the target; payloads
that are not events are forwarded untouched and counted in the metrics. _audit is always
mirrored (the audit reads the producers' counts from the target), whatever the filter.
Metrics (Prometheus): --metrics.port.
"""

EPILOG = """\
examples:
  # consumer.properties:  zk.connect=127.0.0.1:2181/live   groupid=mirror-analysis
  # producer.properties:  zk.connect=127.0.0.1:2181/analysis
  logbroker mirror --consumer.config consumer.properties --producer.config producer.properties \\
      --whitelist 'page-views|searches|ad-clicks'
  logbroker mirror --consumer.config consumer.properties --producer.config producer.properties \\
      --blacklist 'tmp-.*' --num.streams 2 --metrics.port 9310
  logbroker mirror --consumer.config consumer.properties --producer.config producer.properties \\
      --whitelist '.*' --until-caught-up        # what the logbroker_mirror DAG runs

producer.config keys besides the target: acks=ack|fsync, socket.timeout.ms,
retry.backoff.ms (100), retry.backoff.max.ms (5000), delivery.timeout.ms (300000),
max.request.size (1048576). Exit codes: 0 stopped cleanly, 1 error (message on stderr),
2 bad arguments.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mirror",
        help="copy topics from a source cluster into a target cluster (MirrorMaker)",
        formatter_class=formatter,
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        required=True,
        metavar="FILE",
        help="the source: consumer .properties (zk.connect, groupid, ...)",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        required=True,
        metavar="FILE",
        help="the target: producer .properties (zk.connect or broker.list, ...)",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--whitelist", metavar="REGEX", help="mirror the topics this matches")
    which.add_argument("--blacklist", metavar="REGEX", help="mirror the topics this does not match")
    p.add_argument(
        "--num.streams",
        dest="num_streams",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="consumer streams, each with its own target connections (default 1)",
    )
    p.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once everything that was in the source at start is copied",
    )
    p.add_argument(
        "--metrics.port",
        dest="metrics_port",
        type=int_at_least(1),
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics",
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..mirror import build_mirror
    from ..mirror.settings import MirrorConfigError
    from ..protocol.errors import LogbrokerError

    try:
        mirror = build_mirror(
            args.consumer_config,
            args.producer_config,
            whitelist=args.whitelist,
            blacklist=args.blacklist,
            num_streams=args.num_streams,
            until_caught_up=args.until_caught_up,
        )
    except (MirrorConfigError, ValueError) as exc:
        print(f"logbroker mirror: {exc}", file=sys.stderr)
        return 2
    if args.metrics_port:
        mirror.metrics.serve(args.metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: mirror.stop())
    try:
        result = mirror.run()
    except LogbrokerError as exc:
        print(f"logbroker mirror: {exc}", file=sys.stderr)
        return 1
    if result.exit_code:
        print(f"logbroker mirror: {result.error}", file=sys.stderr)
    return result.exit_code
