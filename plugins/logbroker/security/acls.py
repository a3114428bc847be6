"""ACLs in Kafka's model, stored in ZooKeeper as Kafka 0.9-2.x's SimpleAclAuthorizer stores
them, and the decision the broker makes with them.

    /kafka-acl/<ResourceType>/<name>        one znode per resource that has ACLs:
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}, ...]}
        ResourceType is Topic, Group or Cluster (the cluster's one name: kafka-cluster);
        a name of `*` is the wildcard resource: its ACLs apply to every resource of the type.
        A resource whose last ACL is removed loses its znode.
    /kafka-acl-changes/acl_changes_<seq>    a persistent sequential znode per change, holding
        "<ResourceType>:<name>" (Kafka's LiteralAclChangeStore): every broker watches the
        children and reads that resource's znode again.

The decision (`decide`, Kafka's SimpleAclAuthorizer.authorize):
- a super user (`super.users`, `User:admin;User:broker-0`) may do everything;
- the ACLs that count are the resource's and its type's wildcard resource's; an ACL matches
  when its principal is the one asking or `User:*`, its host is the client's or `*`, and its
  operation is the one asked or All;
- a matching Deny wins over any Allow;
- Describe is allowed by an Allow of Describe, Read, Write, Delete or Alter;
- with no ACL at all on the resource (nor on the wildcard), `allow.everyone.if.no.acl.found`
  decides (false by default once an authorizer is configured).

The ZooKeeper side, its layout above, is acl_store.py (AclStore, AclCache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import NamedTuple, TypeVar

ACL_ROOT = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"
CHANGE_PREFIX = "acl_changes_"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"
VERSION = 1
# `authorizer.class.name` values that mean this authorizer (Kafka's class names, and short)
AUTHORIZER_NAMES = (
    "kafka.security.auth.SimpleAclAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "acl",
)

E = TypeVar("E", bound=Enum)


class ResourceType(Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"


class Operation(Enum):
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    ALL = "All"


class Permission(Enum):
    ALLOW = "Allow"
    DENY = "Deny"


# An Allow of any of these allows Describe too (Kafka 0.10's implication).
_IMPLY_DESCRIBE = frozenset(
    (Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER)
)


class AclError(ValueError):
    """A bad principal, operation, resource or stored ACL: the message says which."""


class Resource(NamedTuple):
    type: ResourceType
    name: str

    def __str__(self) -> str:  # Kafka's notation, also a change notification's data
        return f"{self.type.value}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Resource:
        kind, sep, name = text.partition(":")
        if not sep or not name:
            raise AclError(f"expected ResourceType:name, got {text!r}")
        return cls(parse_enum(ResourceType, kind, "resource type"), name)


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


def topic(name: str) -> Resource:
    return Resource(ResourceType.TOPIC, name)


def group(name: str) -> Resource:
    return Resource(ResourceType.GROUP, name)


class Acl(NamedTuple):
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:  # as kafka-acls.sh lists them
        return (
            f"{self.principal} has {self.permission.value} permission for operations: "
            f"{self.operation.value} from hosts: {self.host}"
        )

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": self.permission.value,
            "operation": self.operation.value,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, item: Mapping[str, object]) -> Acl:
        try:
            return cls(
                parse_principal(str(item["principal"])),
                str(item["host"]),
                parse_enum(Operation, str(item["operation"]), "operation"),
                parse_enum(Permission, str(item["permissionType"]), "permission type"),
            )
        except KeyError as exc:
            raise AclError(f"an ACL without {exc.args[0]!r}: {dict(item)}") from None


def parse_enum(kind: type[E], text: str, what: str) -> E:
    """Kafka's names, any case (`read`, `Read`, `READ`, `ClusterAction`, `cluster_action`)."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if str(member.value).lower() == wanted:
            return member
    names = ", ".join(str(m.value) for m in kind)
    raise AclError(f"unknown {what} {text!r}: one of {names}")


def parse_principal(text: str) -> str:
    """`User:name` (any `Type:name`, as Kafka's KafkaPrincipal), else AclError."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name or text != text.strip():
        raise AclError(f"a principal is Type:name, for example User:alice; got {text!r}")
    return text


def parse_super_users(text: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker-0`)."""
    return frozenset(parse_principal(p.strip()) for p in text.split(";") if p.strip())


def decide(
    acls: Iterable[Acl],
    principal: str,
    host: str,
    operation: Operation,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether `principal` from `host` may do `operation`, given the ACLs of the resource and
    of its type's wildcard resource (see the module's doc for the rules)."""
    if principal in super_users:
        return True
    matching = []
    found = False
    for acl in acls:
        found = True
        if (acl.principal == principal or acl.principal == WILDCARD_PRINCIPAL) and (
            acl.host == host or acl.host == WILDCARD
        ):
            matching.append(acl)
    if not found:
        return allow_if_no_acl
    allowed = False
    for acl in matching:
        if acl.permission is Permission.DENY:
            if acl.operation is operation or acl.operation is Operation.ALL:
                return False  # deny wins
        elif (
            acl.operation is operation
            or acl.operation is Operation.ALL
            or (operation is Operation.DESCRIBE and acl.operation in _IMPLY_DESCRIBE)
        ):
            allowed = True
    return allowed


class Authorizer:
    """The broker's authorizer: `decide` over the ACLs `lookup(resource)` gives (AclCache).
    Until `ready()` (the ACLs loaded), only super users are allowed anything."""

    def __init__(
        self,
        lookup: Callable[[Resource], frozenset[Acl]],
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.lookup = lookup
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.ready = ready

    def authorize(
        self, principal: str, host: str, operation: Operation, resource: Resource
    ) -> bool:
        if principal in self.super_users:
            return True
        if not self.ready():
            return False
        acls = self.lookup(resource) | self.lookup(Resource(resource.type, WILDCARD))
        return decide(
            acls,
            principal,
            host,
            operation,
            super_users=self.super_users,
            allow_if_no_acl=self.allow_if_no_acl,
        )
