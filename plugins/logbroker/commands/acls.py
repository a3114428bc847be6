"""`logbroker acls`: add, list and remove the authorizer's ACLs in ZooKeeper (kafka-acls.sh).

Each --add and --remove writes /kafka-acl/<ResourceType>/<name> and a change notification
under /kafka-acl-changes (security/acl_store.py): the brokers apply it without a restart.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from . import add_command_config, add_logging_args, command_zk_auth, formatter

if TYPE_CHECKING:
    from ..security.acl_store import AclStore
    from ..security.acls import Acl, Operation, Resource

# The operations each resource type takes (Kafka 1.x's AclCommand).
VALID_OPERATIONS = {
    "Topic": ("Read", "Write", "Create", "Delete", "Alter", "Describe", "All"),
    "Group": ("Read", "Describe", "Delete", "All"),
    "Cluster": ("Create", "ClusterAction", "Describe", "Alter", "All"),
}

EPILOG = """\
examples:
  # the loader reads page_views as the consumer group loaders, from any host
  logbroker acls --zookeeper 127.0.0.1:2181/live --add --allow-principal User:loader \\
      --operation Read --topic page_views --group loaders
  # a producer: Write and Describe on the topic (--consumer: Read and Describe, and the group)
  logbroker acls --zookeeper 127.0.0.1:2181/live --add --allow-principal User:traffic \\
      --producer --topic page_views
  # everyone may read clicks, except from one host
  logbroker acls --zookeeper 127.0.0.1:2181/live --add --allow-principal 'User:*' \\
      --operation Read --topic clicks --deny-principal 'User:*' --deny-host 10.0.0.9
  # a principal that may create topics (a 0.7 produce to a new topic, CREATE_TOPIC)
  logbroker acls --zookeeper 127.0.0.1:2181/live --add --allow-principal User:admin \\
      --operation Create --cluster
  logbroker acls --zookeeper 127.0.0.1:2181/live --list
  logbroker acls --authorizer-properties zookeeper.connect=127.0.0.1:2181/live --list
  logbroker acls --zookeeper 127.0.0.1:2181/live --list --topic page_views
  logbroker acls --zookeeper 127.0.0.1:2181/live --remove --allow-principal User:loader \\
      --operation Read --topic page_views --force
  logbroker acls --zookeeper 127.0.0.1:2181/live --remove --topic page_views   # all; asks
  # a cluster with zookeeper.set.acl: the brokers' digest, from a file or the environment
  logbroker acls --zookeeper 127.0.0.1:2181/live --command-config admin.properties --list

An ACL is (principal, host, operation, Allow or Deny) on a resource: --topic NAME, --group
NAME (a name of '*' is every topic or group) or --cluster. Principals are User:name
(User:ANONYMOUS is a PLAINTEXT client); hosts are the client's address, '*' (the default)
any. Operations: Read, Write, Create, Delete, Alter, Describe, ClusterAction, All (the
default); Read, Write, Delete and Alter allow Describe too, and a Deny wins over any Allow.
The brokers check them once authorizer.class.name is set (docs/security.md); super.users
may do everything, and a resource without any ACL is closed unless
allow.everyone.if.no.acl.found=true. --remove without a principal removes every ACL of the
resource; both forms ask first unless --force.
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "acls",
        help="add, list and remove ACLs (kafka-acls)",
        formatter_class=formatter,
        description="The authorizer's ACLs, kept in ZooKeeper as Kafka's SimpleAclAuthorizer "
        "keeps them.",
        epilog=EPILOG,
    )
    p.add_argument("--zookeeper", metavar="CONNECT", help="host:port[/chroot]")
    p.add_argument(
        "--authorizer-properties",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="kafka-acls.sh's way: zookeeper.connect=host:port[/chroot]",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described")
    action.add_argument("--remove", action="store_true", help="remove them")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources given)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic, or *")
    p.add_argument("--group", action="append", default=[], metavar="NAME", help="a group, or *")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default *")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default *")
    p.add_argument(
        "--operation", action="append", default=[], metavar="OP", help="default All; repeatable"
    )
    p.add_argument("--producer", action="store_true", help="Write and Describe on the topics")
    p.add_argument(
        "--consumer",
        action="store_true",
        help="Read and Describe on the topics, Read on the groups",
    )
    p.add_argument("--force", action="store_true", help="remove without asking")
    add_command_config(p)
    add_logging_args(p)
    p.set_defaults(run=run)


class UsageError(ValueError):
    """A combination of options that says nothing sensible; the message says what is missing."""


def run(args: argparse.Namespace, stdin: TextIO | None = None) -> int:
    from ..security.acls import AclError

    try:
        args.zookeeper = _zookeeper(args)
        plan = _plan(args)
        zk_auth = command_zk_auth(args)
    except (UsageError, AclError, ValueError, OSError) as exc:
        print(f"logbroker acls: {exc}", file=sys.stderr)
        return 2
    from kazoo.client import KazooClient

    from ..coordination.zk_acl import kazoo_options
    from ..security.acl_store import AclStore

    zk = KazooClient(hosts=args.zookeeper, timeout=10, **kazoo_options(zk_auth))
    zk.start(timeout=10)  # a failure: cli.py's one line naming --zookeeper
    try:
        store = AclStore(zk)
        if args.list:
            return _list(store, plan.resources)
        ask = None if args.force else _asker(stdin or sys.stdin)
        if args.add:
            return _add(store, plan)
        return _remove(store, plan, ask)
    except AclError as exc:
        print(f"logbroker acls: {exc}", file=sys.stderr)
        return 1
    finally:
        zk.stop()
        zk.close()


def _zookeeper(args: argparse.Namespace) -> str:
    """--zookeeper, or kafka-acls.sh's --authorizer-properties zookeeper.connect=..."""
    found = args.zookeeper
    for item in args.authorizer_properties:
        key, sep, value = item.partition("=")
        if not sep or key.strip() != "zookeeper.connect":
            raise UsageError(f"--authorizer-properties takes zookeeper.connect=..., got {item!r}")
        found = found or value.strip()
    if not found:
        raise UsageError("where are the ACLs? --zookeeper host:port[/chroot]")
    return str(found)


class _Plan:
    def __init__(self, resources: list[Resource], acls: dict[Resource, frozenset[Acl]]) -> None:
        self.resources = resources
        self.acls = acls  # per resource: the ACLs named (empty: none named)


def _plan(args: argparse.Namespace) -> _Plan:
    """The resources and, per resource, the ACLs the options name; UsageError or AclError."""
    from ..protocol.errors import InvalidTopicError
    from ..protocol.topics import validate_topic
    from ..security.acls import (
        CLUSTER,
        WILDCARD,
        Acl,
        Operation,
        Permission,
        group,
        parse_enum,
        parse_principal,
        topic,
    )

    resources = []
    for name in args.topic:
        if name != WILDCARD:
            try:
                validate_topic(name)
            except InvalidTopicError as exc:
                raise UsageError(f"--topic {name!r}: {exc}") from None
        resources.append(topic(name))
    for name in args.group:
        if not name.strip():
            raise UsageError("--group: a group's name cannot be empty")
        resources.append(group(name))
    if args.cluster:
        resources.append(CLUSTER)
    allow = [parse_principal(p) for p in args.allow_principal]
    deny = [parse_principal(p) for p in args.deny_principal]
    for host in args.allow_host + args.deny_host:
        if not host.strip() or host != host.strip() or " " in host:
            raise UsageError(f"a host is an address or *, got {host!r}")
    if args.allow_host and not allow:
        raise UsageError("--allow-host needs --allow-principal")
    if args.deny_host and not deny:
        raise UsageError("--deny-host needs --deny-principal")
    operations = [parse_enum(Operation, op, "operation") for op in args.operation]
    if args.list:
        if allow or deny or operations or args.producer or args.consumer:
            raise UsageError("--list takes only resources (--topic, --group, --cluster)")
        return _Plan(resources, {})
    if not resources:
        raise UsageError(
            f"--{'add' if args.add else 'remove'} needs a resource: --topic, --group or --cluster"
        )
    if args.add and not (allow or deny):
        raise UsageError("--add needs --allow-principal or --deny-principal")
    if (args.producer or args.consumer) and operations:
        raise UsageError("--producer and --consumer choose the operations: drop --operation")
    per_resource: dict[Resource, list[Operation]] = {}
    for resource in resources:
        kind = resource.type.value
        if args.producer or args.consumer:
            ops: list[Operation] = []
            if kind == "Topic":
                ops += [Operation.WRITE, Operation.DESCRIBE] if args.producer else []
                ops += [Operation.READ, Operation.DESCRIBE] if args.consumer else []
            elif kind == "Group" and args.consumer:
                ops.append(Operation.READ)
            elif kind == "Cluster" and args.producer:
                ops.append(Operation.CREATE)  # a 0.7 produce that creates its topic
            if not ops:
                raise UsageError(
                    f"--{'producer' if args.producer else 'consumer'} has nothing for {kind}"
                )
            per_resource[resource] = sorted(set(ops), key=lambda o: o.value)
            continue
        ops = operations or ([Operation.ALL] if args.add or allow or deny else [])
        for op in ops:
            if op.value not in VALID_OPERATIONS[kind]:
                raise UsageError(
                    f"--operation {op.value} does not apply to {kind} "
                    f"(one of {', '.join(VALID_OPERATIONS[kind])})"
                )
        per_resource[resource] = ops
    acls: dict[Resource, frozenset[Acl]] = {}
    for resource, ops in per_resource.items():
        named: set[Acl] = set()
        for principals, hosts, permission in (
            (allow, args.allow_host or [WILDCARD], Permission.ALLOW),
            (deny, args.deny_host or [WILDCARD], Permission.DENY),
        ):
            for principal in principals:
                for host in hosts:
                    named |= {Acl(principal, host, op, permission) for op in ops}
        acls[resource] = frozenset(named)
    return _Plan(resources, acls)


def _show(resource: Resource, acls: frozenset[Acl], heading: str) -> None:
    print(f"{heading} `{resource}`:")
    for acl in sorted(acls, key=str):
        print(f" \t{acl}")
    print()


def _list(store: AclStore, resources: list[Resource]) -> int:
    found = {r: store.read(r) for r in resources} if resources else store.read_all()
    for resource, acls in found.items():
        if acls:
            _show(resource, acls, "Current ACLs for resource")
    return 0


def _add(store: AclStore, plan: _Plan) -> int:
    for resource, acls in plan.acls.items():
        _show(resource, acls, "Adding ACLs for resource")
        now = store.add(resource, acls)
        _show(resource, now, "Current ACLs for resource")
    return 0


def _remove(store: AclStore, plan: _Plan, ask: Callable[[str], bool] | None) -> int:
    for resource, acls in plan.acls.items():
        if acls:
            question = (
                f"Are you sure you want to remove ACLs: {_listed(acls)} from resource `{resource}`?"
            )
        else:
            question = f"Are you sure you want to delete all ACLs for resource `{resource}`?"
        if ask is not None and not ask(question):
            print(f"left the ACLs of `{resource}` as they were")
            continue
        left = store.remove(resource, acls or None)
        _show(resource, left, "Current ACLs for resource")
    return 0


def _listed(acls: frozenset[Acl]) -> str:
    return "".join(f"\n \t{a}" for a in sorted(acls, key=str)) + "\n"


def _asker(stream: TextIO) -> Callable[[str], bool]:
    def ask(question: str) -> bool:
        print(f"{question} (y/n)", flush=True)
        answer = stream.readline()
        return answer.strip().lower() in ("y", "yes")

    return ask
