"""`logbroker broker`: run a broker."""

from __future__ import annotations

import argparse
import sys

from . import add_logging_args, formatter


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def _keys_help() -> str:
    from ..config import BrokerConfig

    defaults = BrokerConfig().to_properties()
    return "\n".join(
        f"  {key:40} {f.metadata['doc']} (default {defaults[key] or 'none'})"
        for key, f in BrokerConfig.keys().items()
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "broker",
        help="run a broker",
        formatter_class=formatter,
        description="Run a broker: serve the Kafka 0.7 wire protocol over the logs in log.dir,\n"
        "registered in ZooKeeper under zk.connect (unless enable.zookeeper=false).\n"
        "SIGTERM or Ctrl-C stops it cleanly: requests in flight finish, logs are flushed.",
        epilog="examples:\n"
        "  logbroker broker --config include/config/server.properties\n"
        "  logbroker broker --config include/config/server.properties \\\n"
        "      --override brokerid=1 --override port=9093 --override log.dir=/tmp/b1\n"
        "  logbroker broker --override enable.zookeeper=false --override port=9092\n\n"
        "keys (Kafka 0.7's server.properties names):\n" + _keys_help(),
    )
    p.add_argument("--config", metavar="FILE", help="a server.properties file")
    p.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        type=parse_override,
        help="set one key, overriding the file (repeatable)",
    )
    add_logging_args(p)
    p.set_defaults(run=run, log_level="INFO")


def run(args: argparse.Namespace) -> int:
    import logging

    from ..config import load_config
    from ..protocol.errors import LogbrokerError, describe_exception
    from ..server.broker import run as run_broker

    try:
        config = load_config(args.config, dict(args.override))
    except (OSError, ValueError) as exc:
        print(f"logbroker broker: {exc}", file=sys.stderr)
        return 2
    try:
        return run_broker(config)
    except Exception as exc:
        # Always the type and what was being done: str() of a kazoo error is empty.
        if not isinstance(exc, LogbrokerError | OSError):
            logging.getLogger("logbroker.broker").exception("the broker failed")
        print(f"logbroker broker: {describe_exception(exc)}", file=sys.stderr)
        return 1
