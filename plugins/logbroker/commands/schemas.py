"""`logbroker schemas`: register, list and show event schemas in the registry (docs/design.md §3.4)."""

from __future__ import annotations

import argparse
import json
import sys

from . import add_logging_args, formatter, print_table

EPILOG = """\
examples:
  logbroker schemas register --zookeeper 127.0.0.1:2181/registry \\
      --subject page_views --file include/schemas/page_views.avsc
  logbroker schemas list --zookeeper 127.0.0.1:2181/registry
  logbroker schemas get --zookeeper 127.0.0.1:2181/registry --id 3
  logbroker schemas get --zookeeper 127.0.0.1:2181/registry --subject page_views --version 1

CONNECT is the registry's own connect string (config key schema.registry.zk), shared by
every cluster so that a schema id means the same everywhere. The subject of a topic's
events is the topic's name; the audit's counts are the subject _audit.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "schemas",
        help="register, list and show event schemas",
        formatter_class=formatter,
        description="The schema registry in ZooKeeper: /ids/<id> holds a schema's canonical JSON,\n"
        "/subjects/<subject>/<version> its id. Registering a schema the subject already has\n"
        "returns its id; a new version must be able to read the previous version's data\n"
        "(backward compatible, Avro's resolution rules), else the field that breaks it is named.",
        epilog=EPILOG,
    )
    p.add_argument(
        "action", choices=("register", "list", "get"), help="what to do (see the examples)"
    )
    p.add_argument(
        "--zookeeper", required=True, metavar="CONNECT", help="the registry: host:port[/chroot]"
    )
    p.add_argument("--subject", metavar="S", help="register: required; get: instead of --id")
    p.add_argument("--file", metavar="X.avsc", help="register: the schema file")
    p.add_argument("--id", type=int, metavar="N", help="get: the schema with this id")
    p.add_argument(
        "--version", type=int, metavar="V", help="get --subject: this version (default latest)"
    )
    add_logging_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..protocol.errors import LogbrokerError
    from ..serde import SchemaRegistry, load_schema_file

    problem = _check_arguments(args)
    if problem:
        print(f"logbroker schemas {args.action}: {problem}", file=sys.stderr)
        return 2
    try:
        schema = load_schema_file(args.file) if args.action == "register" else None
        with SchemaRegistry(args.zookeeper) as registry:
            if args.action == "register":
                assert schema is not None
                registered = registry.register(args.subject, schema)
                print(
                    f"subject {registered.subject} version {registered.version}: "
                    f"schema id {registered.id} ({registered.schema.fullname})"
                )
            elif args.action == "list":
                rows: list[list[object]] = []
                for subject in registry.subjects():
                    for v in registry.all_versions(subject):
                        rows.append([subject, v.version, v.id, v.schema.fullname])
                print_table(rows, ["SUBJECT", "VERSION", "ID", "SCHEMA"])
            elif args.id is not None:
                print(json.dumps(registry.schema(args.id).definition, indent=2))
            else:
                found = registry.version(args.subject, args.version)
                print(f"# subject {found.subject} version {found.version}: schema id {found.id}")
                print(json.dumps(found.schema.definition, indent=2))
    except (LogbrokerError, ValueError) as exc:
        print(f"logbroker schemas {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_arguments(args: argparse.Namespace) -> str | None:
    if args.action == "register" and not (args.subject and args.file):
        return "register needs --subject and --file"
    if args.action == "get" and (args.id is None) == (args.subject is None):
        return "get needs --id N, or --subject S [--version V]"
    return None
