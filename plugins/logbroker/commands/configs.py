"""`logbroker configs`: users' SASL/SCRAM credentials in ZooKeeper (like kafka-configs.sh).

    --add-config    'SCRAM-SHA-256=[password=...],SCRAM-SHA-512=[iterations=8192,password=...]'
    --delete-config 'SCRAM-SHA-512'                 (comma-separated names)

What is stored (security/credentials.py) is Kafka's salted and hashed form; --describe shows
each user's mechanisms and iterations, never a key or a salt.
"""

from __future__ import annotations

import argparse
import re
import sys

from . import add_command_config, add_logging_args, command_zk_auth, formatter

_ENTRY = re.compile(r"\s*([A-Za-z0-9_.-]+)\s*=\s*(\[[^\[\]]*\]|[^,\[\]]*)\s*(?:,|$)")


def scram_settings(text: str) -> dict[str, dict[str, str]]:
    """`SCRAM-SHA-256=[password=x],SCRAM-SHA-512=[iterations=8192,password=y]` ->
    {mechanism: {password, iterations}}; an argparse error naming what is wrong."""
    from ..security.scram import SCRAM_MECHANISMS

    out: dict[str, dict[str, str]] = {}
    pos = 0
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("empty: want 'SCRAM-SHA-256=[password=...]'")
    while pos < len(text):
        match = _ENTRY.match(text, pos)
        if match is None or match.end() == pos:
            raise argparse.ArgumentTypeError(
                f"cannot read {text[pos : pos + 40]!r}: want NAME=[password=...,iterations=N], "
                "comma-separated (a password may not hold ',', '[' or ']')"
            )
        name, value = match.group(1), match.group(2).strip()
        pos = match.end()
        if name not in SCRAM_MECHANISMS:
            raise argparse.ArgumentTypeError(
                f"{name} cannot be set on users here: only {' and '.join(SCRAM_MECHANISMS)}"
            )
        if not (value.startswith("[") and value.endswith("]")):
            raise argparse.ArgumentTypeError(
                f"{name}={value[:20]}: want {name}=[password=...] (in brackets)"
            )
        fields: dict[str, str] = {}
        for item in value[1:-1].split(","):
            key, sep, field_value = item.partition("=")
            key = key.strip()
            if not sep or key not in ("password", "iterations"):
                raise argparse.ArgumentTypeError(
                    f"{name}: {item.strip()[:20]!r} is not password=... or iterations=N"
                )
            fields[key] = field_value
        if not fields.get("password"):
            raise argparse.ArgumentTypeError(f"{name}: no password=... (or an empty one)")
        if "iterations" in fields and not fields["iterations"].strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"{name}: iterations={fields['iterations']!r} is not a number"
            )
        if name in out:
            raise argparse.ArgumentTypeError(f"{name} is given twice")
        out[name] = fields
    return out


def config_names(text: str) -> tuple[str, ...]:
    """`SCRAM-SHA-256,SCRAM-SHA-512` -> the names; an argparse error for an unknown one."""
    from ..security.scram import SCRAM_MECHANISMS

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("empty: want a name such as SCRAM-SHA-512")
    for name in names:
        if name not in SCRAM_MECHANISMS:
            raise argparse.ArgumentTypeError(
                f"{name} is not a user config here: only {' and '.join(SCRAM_MECHANISMS)}"
            )
    return names


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "configs",
        help="add, delete and describe users' SASL/SCRAM credentials",
        formatter_class=formatter,
        description="Users' SCRAM credentials in ZooKeeper, as Kafka's kafka-configs.sh keeps "
        "them\n(/config/users/<user> under the cluster's chroot, salted and hashed: never "
        "the password).\nBrokers with sasl.enabled.mechanisms log users in with them "
        "(docs/security.md).",
        epilog="examples:\n"
        "  logbroker configs --zookeeper 127.0.0.1:2181/live --alter --entity-type users \\\n"
        "      --entity-name alice \\\n"
        "      --add-config 'SCRAM-SHA-256=[password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'\n"
        "  logbroker configs --zookeeper 127.0.0.1:2181/live --alter --entity-type users \\\n"
        "      --entity-name alice --add-config 'SCRAM-SHA-512=[iterations=8192,password=s3cret]'\n"
        "  logbroker configs --zookeeper 127.0.0.1:2181/live --alter --entity-type users \\\n"
        "      --entity-name alice --delete-config SCRAM-SHA-512\n"
        "  logbroker configs --zookeeper 127.0.0.1:2181/live --describe --entity-type users\n\n"
        "A mechanism's iterations are 4096 (the default) to 16384, as Kafka's. --add-config\n"
        "replaces a mechanism the user has; a user with no mechanism left is removed. A user\n"
        "with either SCRAM credential can also log in with PLAIN: the broker checks the\n"
        "password against it. Brokers see a change at the user's next login.",
    )
    p.add_argument("--zookeeper", required=True, metavar="CONNECT", help="host:port[/chroot]")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add or delete configs")
    action.add_argument("--describe", action="store_true", help="list the users' mechanisms")
    p.add_argument(
        "--entity-type",
        required=True,
        choices=("users",),
        help="users (the only entity type here)",
    )
    p.add_argument("--entity-name", metavar="USER", help="the user (--describe: default all)")
    p.add_argument(
        "--add-config",
        type=scram_settings,
        metavar="'MECH=[password=...]'",
        help="SCRAM-SHA-256=[password=...,iterations=N],SCRAM-SHA-512=[...]",
    )
    p.add_argument(
        "--delete-config",
        type=config_names,
        metavar="MECH[,MECH]",
        help="SCRAM-SHA-256 and/or SCRAM-SHA-512",
    )
    add_command_config(p)
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.alter and not args.entity_name:
        print("logbroker configs: --alter needs --entity-name USER", file=sys.stderr)
        return 2
    if args.alter and not (args.add_config or args.delete_config):
        print("logbroker configs: --alter needs --add-config or --delete-config", file=sys.stderr)
        return 2
    if args.describe and (args.add_config or args.delete_config):
        print(
            "logbroker configs: --add-config and --delete-config go with --alter", file=sys.stderr
        )
        return 2
    both = set(args.add_config or ()) & set(args.delete_config or ())
    if both:
        print(
            f"logbroker configs: {', '.join(sorted(both))} is both added and deleted",
            file=sys.stderr,
        )
        return 2
    from kazoo.client import KazooClient

    from ..coordination.zk_acl import kazoo_options
    from ..security import credentials
    from ..security.scram import make_credential

    try:
        zk_auth = command_zk_auth(args)
    except (ValueError, OSError) as exc:
        print(f"logbroker configs: {exc}", file=sys.stderr)
        return 2
    client = KazooClient(hosts=args.zookeeper, timeout=10, **kazoo_options(zk_auth))
    client.start(timeout=10)
    try:
        if args.describe:
            users = [args.entity_name] if args.entity_name else credentials.list_users(client)
            for user in users:
                print(_describe(user, credentials.read_user_config(client, user)))
            return 0
        try:
            credentials.user_path(args.entity_name)
            add = {
                mechanism: make_credential(
                    mechanism, fields["password"], iterations=int(fields.get("iterations", 4096))
                )
                for mechanism, fields in (args.add_config or {}).items()
            }
            credentials.alter_user(
                client, args.entity_name, add=add, delete=args.delete_config or ()
            )
        except ValueError as exc:
            print(f"logbroker configs: {exc}", file=sys.stderr)
            return 1
        print(f"Completed updating config for user {args.entity_name}.")
        return 0
    finally:
        client.stop()
        client.close()


def _describe(user: str, config: dict[str, str] | None) -> str:
    """Kafka's line: `SCRAM credential configs for user-principal 'alice' are
    SCRAM-SHA-256=iterations=4096` (never the salt or the keys)."""
    from ..security.credentials import scram_credentials

    found = scram_credentials(config or {}, user)
    listed = ", ".join(f"{m}=iterations={c.iterations}" for m, c in sorted(found.items()))
    if not listed:
        return f"SCRAM credential configs for user-principal '{user}' are (none)"
    return f"SCRAM credential configs for user-principal '{user}' are {listed}"
