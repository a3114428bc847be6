"""The subcommands of `logbroker`, one module each: `add_parser(subparsers)` and `run(args)`.

Names and flags follow Kafka's console tools (kafka-topics, kafka-console-producer,
kafka-console-consumer, GetOffsetShell, ConsumerOffsetChecker), so a Kafka user needs no
manual; every --help ends in examples.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..client.cluster import Cluster
    from ..security.client import ClientCredentials
    from ..security.tls import ClientSecurity


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


# -- argument types: a bad value is refused by argparse (exit code 2) before anything connects


def topic_name(text: str) -> str:
    """A legal topic name (protocol/topics.py), or an argparse error saying what is wrong."""
    from ..protocol.errors import InvalidTopicError
    from ..protocol.topics import validate_topic

    try:
        return validate_topic(text)
    except InvalidTopicError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # argparse names the type in some messages
    return parse


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 event', '2 events', '0 events' (`nouns` for a plural that is not noun + s)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def add_logging_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default WARNING)")
    p.add_argument("--log-format", default="text", choices=("text", "json"), help="log line format")


def print_table(rows: list[list[object]], headers: list[str], out: TextIO | None = None) -> None:
    """A plain aligned text table (what Kafka's tools print)."""
    import sys

    stream = out or sys.stdout
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        line = "  ".join(
            c.rjust(w) if n and c.lstrip("-").isdigit() else c.ljust(w)
            for c, w in zip(row, widths, strict=True)
        )
        print(line.rstrip(), file=stream)


def add_command_config(p: argparse.ArgumentParser) -> None:
    """--command-config, as Kafka's tools take it: a properties file of client settings."""
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), "
        "ssl.cafile, ssl.certfile, ssl.keyfile, ssl.endpoint.identification.algorithm, "
        "sasl.mechanism, sasl.username, sasl.password or sasl.jaas.config; and "
        "zookeeper.auth=digest:<user>:<password>, the brokers' ZooKeeper digest for the "
        "commands that change their znodes when zookeeper.set.acl is on (or env "
        "LOGBROKER_ZOOKEEPER_AUTH) (docs/security.md)",
    )


def command_properties(args: argparse.Namespace) -> dict[str, str]:
    """The properties of --command-config ({} without it); OSError for a file that cannot
    be read."""
    from ..config import read_properties

    if not getattr(args, "command_config", None):
        return {}
    with open(args.command_config, encoding="utf-8") as handle:
        return read_properties(handle)


def command_credentials(args: argparse.Namespace) -> ClientCredentials:
    """The TLS and SASL settings of --command-config (PLAINTEXT without it); ValueError
    naming the file and the key, or OSError for a file that cannot be read."""
    from ..security.client import ClientCredentials

    properties = command_properties(args)
    try:
        return ClientCredentials.from_properties(properties)
    except ValueError as exc:
        raise ValueError(f"--command-config {args.command_config}: {exc}") from None


def command_zk_auth(args: argparse.Namespace) -> str | None:
    """zookeeper.auth from --command-config, else from env LOGBROKER_ZOOKEEPER_AUTH: the
    brokers' ZooKeeper digest, for the commands that write their znodes; None without either.
    ValueError naming the file or the variable when it is malformed, OSError for a file that
    cannot be read."""
    import os

    from ..coordination.zk_acl import AUTH_ENV, AUTH_KEY, parse_zk_auth

    where, value = AUTH_ENV, os.environ.get(AUTH_ENV, "")
    found = command_properties(args).get(AUTH_KEY, "")
    if found.strip():
        where, value = f"--command-config {args.command_config}", found
    if not value.strip():
        return None
    try:
        parse_zk_auth(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return value.strip()


def command_security(args: argparse.Namespace) -> ClientSecurity | None:
    """The TLS settings of --command-config (None without them); see command_credentials."""
    return command_credentials(args).security


def command_logins(args: argparse.Namespace) -> dict[str, Any]:
    """`security=` and `sasl=` for a Producer or GroupConsumer, from --command-config."""
    credentials = command_credentials(args)
    return {"security": credentials.security, "sasl": credentials.sasl}


def command_cluster(args: argparse.Namespace, timeout: float = 10.0) -> Cluster:
    """The cluster at --zookeeper, its brokers reached with --command-config's credentials,
    its ZooKeeper session holding the digest of command_zk_auth."""
    from ..client.cluster import Cluster

    return Cluster(
        args.zookeeper,
        timeout,
        credentials=command_credentials(args),
        zk_auth=command_zk_auth(args),
    )
