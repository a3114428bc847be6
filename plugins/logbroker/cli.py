"""The `logbroker` command: one subcommand per module in logbroker.commands."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from . import __version__
from .commands import (
    acls,
    bench,
    broker,
    configs,
    consume,
    formatter,
    lag,
    mirror,
    offsets,
    preferred_replica_election,
    produce,
    quickstart,
    schema_registry,
    schemas,
    topics,
)
from .protocol import native

EPILOG = """\
examples:
  logbroker quickstart start        # ZooKeeper, a live and an analysis cluster, in the background
  logbroker broker --config include/config/server.properties
  logbroker topics --zookeeper 127.0.0.1:2181/live create page-views --partitions 4
  seq 1000 | logbroker produce --zookeeper 127.0.0.1:2181/live --topic page-views
  logbroker consume --zookeeper 127.0.0.1:2181/live --topic page-views --from-beginning
  logbroker offsets --broker 127.0.0.1:9092 --topic page-views --partition 0 --time -1
  logbroker lag --zookeeper 127.0.0.1:2181/live --group my-group
  logbroker preferred-replica-election --zookeeper 127.0.0.1:2181/live
  logbroker configs --zookeeper 127.0.0.1:2181/live --alter --entity-type users \\
      --entity-name alice --add-config 'SCRAM-SHA-256=[password=alice-secret]'
  logbroker schemas register --zookeeper 127.0.0.1:2181/registry \\
      --subject page_views --file include/schemas/page_views.avsc
  logbroker schema-registry --zookeeper 127.0.0.1:2181/registry   # Confluent's API on :8081
  logbroker mirror --consumer.config live.properties --producer.config analysis.properties --whitelist ".*"
  logbroker acls --zookeeper 127.0.0.1:2181/live --add --allow-principal User:loader \\
      --operation Read --topic page_views --group loaders

Every subcommand has its own --help with examples.
"""

SUBCOMMANDS = (
    broker,
    topics,
    produce,
    consume,
    offsets,
    lag,
    preferred_replica_election,
    configs,
    schemas,
    schema_registry,
    mirror,
    acls,
    quickstart,
    bench,
)


def version() -> str:
    """The version, and which message-set walks run (protocol/native.py)."""
    return f"logbroker {__version__}\nmessage walks: {native.ACTIVE}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="logbroker",
        formatter_class=formatter,
        description="logbroker: a Kafka 0.7-compatible distributed commit log.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    from .logging_setup import configure_logging

    # A broker logs kazoo's warnings; a command says once, itself, what went wrong.
    configure_logging(args.log_level, args.log_format, quiet_kazoo=args.command != "broker")
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        logging.getLogger("logbroker.cli").debug("logbroker %s failed", args.command, exc_info=True)
        print(f"logbroker {args.command}: {explain_failure(exc, args)}", file=sys.stderr)
        return 1
    return code


def explain_failure(exc: BaseException, args: argparse.Namespace) -> str:
    """One line for an error no subcommand caught: its type, its message, and, for a
    ZooKeeper failure, which connect string (kazoo's own messages never say)."""
    from .protocol.errors import describe_exception

    what = describe_exception(exc)
    zookeeper = getattr(args, "zookeeper", None)
    if zookeeper and type(exc).__module__.startswith("kazoo"):
        if type(exc).__name__ == "KazooTimeoutError":
            return f"cannot connect to ZooKeeper at {zookeeper} (--zookeeper): {what}"
        if type(exc).__name__ == "NoAuthError":
            return (
                f"ZooKeeper at {zookeeper} (--zookeeper) refused (NoAuth): the znode is the "
                "brokers' (zookeeper.set.acl), to change it (or read a user's) give their "
                "digest, zookeeper.auth=digest:<user>:<password>, in --command-config FILE or "
                "LOGBROKER_ZOOKEEPER_AUTH"
            )
        return f"ZooKeeper at {zookeeper} (--zookeeper) failed: {what}"
    return what


if __name__ == "__main__":
    sys.exit(main())
