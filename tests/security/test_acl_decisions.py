"""The authorizer's decisions (security/acls.py), rule by rule, and the 0.7 request handlers
asking it with a connection's principal (in process: no sockets, no ZooKeeper)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from logbroker.config import BrokerConfig, ConfigError
from logbroker.protocol.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    UnknownError,
)
from logbroker.protocol.kafka08.errors import Code, code08
from logbroker.protocol.message_set import build_message_set
from logbroker.protocol.requests import (
    AckedProduceRequest,
    CreateTopicRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
    WaitingFetchRequest,
    encode_request,
    produce_run,
)
from logbroker.protocol.responses import (
    decode_acked_produce_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
)
from logbroker.security.acls import (
    ANONYMOUS,
    CLUSTER,
    Acl,
    AclError,
    Authorizer,
    Operation,
    Permission,
    Resource,
    ResourceType,
    decide,
    group,
    parse_super_users,
    topic,
)
from logbroker.server.authorization import RequestAuthorizer
from logbroker.server.handlers import RequestHandlers
from logbroker.server.log_limiter import RateLimitedLog
from logbroker.server.metrics import BrokerMetrics
from logbroker.server.waiters import AppendWaiters
from logbroker.storage.log_manager import LogManager
from logbroker.storage.segment import FileRegion

ALICE = "User:alice"
ALLOW, DENY = Permission.ALLOW, Permission.DENY
READ, WRITE, DESCRIBE = Operation.READ, Operation.WRITE, Operation.DESCRIBE


def acl(principal: str, op: Operation, permission: Permission = ALLOW, host: str = "*") -> Acl:
    return Acl(principal, host, op, permission)


def authorizer(
    acls: dict[Resource, set[Acl]], supers: str = "", allow_if_no_acl: bool = False
) -> Authorizer:
    frozen = {r: frozenset(a) for r, a in acls.items()}
    return Authorizer(
        lambda r: frozen.get(r, frozenset()), parse_super_users(supers), allow_if_no_acl
    )


# -- the decision table -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acls", "principal", "host", "op", "allowed"),
    [
        # allowed, and only what is allowed
        ([acl(ALICE, READ)], ALICE, "10.0.0.1", READ, True),
        ([acl(ALICE, READ)], ALICE, "10.0.0.1", WRITE, False),
        ([acl(ALICE, READ)], "User:bob", "10.0.0.1", READ, False),
        # All allows every operation
        ([acl(ALICE, Operation.ALL)], ALICE, "h", Operation.ALTER, True),
        # denied, and deny wins over allow (also a Deny of All, and of User:*)
        ([acl(ALICE, READ, DENY)], ALICE, "h", READ, False),
        ([acl(ALICE, READ), acl(ALICE, READ, DENY)], ALICE, "h", READ, False),
        ([acl(ALICE, READ), acl(ALICE, Operation.ALL, DENY)], ALICE, "h", READ, False),
        ([acl(ALICE, READ), acl("User:*", READ, DENY)], ALICE, "h", READ, False),
        # a deny of another operation does not touch this one
        ([acl(ALICE, READ), acl(ALICE, WRITE, DENY)], ALICE, "h", READ, True),
        # wildcard principal and wildcard host; a host ACL only for its host
        ([acl("User:*", READ)], ALICE, "h", READ, True),
        ([acl(ALICE, READ, host="10.0.0.1")], ALICE, "10.0.0.1", READ, True),
        ([acl(ALICE, READ, host="10.0.0.1")], ALICE, "10.0.0.2", READ, False),
        ([acl(ALICE, READ), acl(ALICE, READ, DENY, "10.0.0.9")], ALICE, "10.0.0.9", READ, False),
        ([acl(ALICE, READ), acl(ALICE, READ, DENY, "10.0.0.9")], ALICE, "10.0.0.1", READ, True),
        # Read, Write, Delete and Alter imply Describe; Create and ClusterAction do not
        ([acl(ALICE, READ)], ALICE, "h", DESCRIBE, True),
        ([acl(ALICE, WRITE)], ALICE, "h", DESCRIBE, True),
        ([acl(ALICE, Operation.DELETE)], ALICE, "h", DESCRIBE, True),
        ([acl(ALICE, Operation.ALTER)], ALICE, "h", DESCRIBE, True),
        ([acl(ALICE, Operation.CREATE)], ALICE, "h", DESCRIBE, False),
        # ... and implies nothing back: Describe does not allow Read
        ([acl(ALICE, DESCRIBE)], ALICE, "h", READ, False),
        # a Deny of Describe wins over an implying Allow
        ([acl(ALICE, READ), acl(ALICE, DESCRIBE, DENY)], ALICE, "h", DESCRIBE, False),
    ],
)
def test_decision(acls: list[Acl], principal: str, host: str, op: Operation, allowed: bool) -> None:
    assert decide(acls, principal, host, op) is allowed


def test_no_acl_found_is_decided_by_allow_everyone_if_no_acl_found() -> None:
    assert decide([], ALICE, "h", READ) is False  # the default, once an authorizer is set
    assert decide([], ALICE, "h", READ, allow_if_no_acl=True) is True
    # an ACL for someone else is an ACL found: the flag no longer opens it
    other = [acl("User:bob", READ)]
    assert decide(other, ALICE, "h", READ, allow_if_no_acl=True) is False


def test_super_users_may_do_anything_even_when_denied() -> None:
    denied = [acl("User:admin", READ, DENY)]
    assert decide(denied, "User:admin", "h", READ, super_users=frozenset({"User:admin"}))
    assert not decide(denied, "User:admin", "h", READ, super_users=frozenset({"User:root"}))
    acls = {topic("t"): {acl("User:admin", READ, DENY)}}
    auth = authorizer(acls, supers=" User:admin ; User:broker-0;")
    assert auth.authorize("User:admin", "h", READ, topic("t"))
    assert auth.authorize("User:broker-0", "h", Operation.CLUSTER_ACTION, CLUSTER)
    assert not auth.authorize(ALICE, "h", READ, topic("t"))


def test_the_wildcard_resource_applies_to_every_resource_of_its_type() -> None:
    auth = authorizer(
        {
            Resource(ResourceType.TOPIC, "*"): {acl(ALICE, READ)},
            topic("secret"): {acl(ALICE, READ, DENY)},
        }
    )
    assert auth.authorize(ALICE, "h", READ, topic("page_views"))
    assert not auth.authorize(ALICE, "h", READ, topic("secret"))  # deny wins, across both
    assert not auth.authorize(ALICE, "h", READ, group("page_views"))  # not another type
    # with ACLs on the wildcard, no topic is "without ACL" any more
    open_auth = authorizer({Resource(ResourceType.TOPIC, "*"): {acl("User:bob", READ)}}, "", True)
    assert not open_auth.authorize(ALICE, "h", READ, topic("x"))
    assert open_auth.authorize(ALICE, "h", READ, group("x"))


def test_until_the_acls_are_loaded_only_super_users_pass() -> None:
    auth = Authorizer(lambda r: frozenset(), parse_super_users("User:admin"), True, lambda: False)
    assert not auth.authorize(ALICE, "h", READ, topic("t"))
    assert auth.authorize("User:admin", "h", READ, topic("t"))


def test_names_are_kafkas_and_bad_ones_are_one_line_errors() -> None:
    assert Resource.parse("Topic:page_views") == topic("page_views")
    assert str(group("loaders")) == "Group:loaders"
    with pytest.raises(AclError, match="principal is Type:name"):
        parse_super_users("admin")
    with pytest.raises(AclError, match="unknown operation 'Eat'"):
        Acl.from_json(
            {"principal": ALICE, "host": "*", "operation": "Eat", "permissionType": "Allow"}
        )


def test_the_three_codes_are_kafkas_on_both_ports() -> None:
    assert TopicAuthorizationFailedError.code == 29
    assert code08(TopicAuthorizationFailedError()) == Code.TOPIC_AUTHORIZATION_FAILED == 29
    assert code08(ClusterAuthorizationFailedError()) == 31


def test_config_refuses_an_unknown_authorizer_and_one_without_zookeeper() -> None:
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name=Foo: unknown authorizer"):
        BrokerConfig(authorizer_class_name="Foo")
    with pytest.raises(ConfigError, match=r"enable\.zookeeper=false"):
        BrokerConfig(authorizer_class_name="acl", enable_zookeeper=False)
    with pytest.raises(ConfigError, match=r"super\.users=admin"):
        BrokerConfig(authorizer_class_name="acl", super_users="admin")
    assert not BrokerConfig().authorizer_enabled  # off by default


# -- the 0.7 handlers, with a principal ----------------------------------------------------


@pytest.fixture
def handlers(tmp_path: Path) -> Iterator[RequestHandlers]:
    config = BrokerConfig(log_dir=str(tmp_path / "logs"), enable_zookeeper=False)
    logs = LogManager(config)
    logs.get_or_create_log("open", 0).append(build_message_set([b"kept"]))
    handlers = RequestHandlers(logs, config, BrokerMetrics(0), AppendWaiters())
    acls = {topic("open"): {acl(ALICE, WRITE), acl(ALICE, READ)}}
    warnings = RateLimitedLog(__import__("logging").getLogger("test"), 0)
    handlers.authorizer = RequestAuthorizer(authorizer(acls, "User:admin"), warnings)
    try:
        yield handlers
    finally:
        handlers.close()
        logs.shutdown()


def answer(handlers: RequestHandlers, request: object, principal: str) -> bytes | None:
    async def run() -> bytes | None:
        outcome = handlers.handle(request, "10.0.0.1:5000", principal)  # type: ignore[arg-type]
        if outcome is None:
            return None
        parts = await outcome if inspect.isawaitable(outcome) else outcome
        return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)

    return asyncio.run(run())


def ends(handlers: RequestHandlers) -> int:
    found = handlers.logs.get_log("open", 0)
    assert found is not None
    return found.end_offset


def test_a_refused_produce_closes_and_stores_nothing_an_allowed_one_appends(
    handlers: RequestHandlers,
) -> None:
    before = ends(handlers)
    with pytest.raises(TopicAuthorizationFailedError, match="nothing appended"):
        answer(handlers, ProduceRequest("open", 0, build_message_set([b"x"])), ANONYMOUS)
    assert ends(handlers) == before
    # a new 0.7 topic needs Create on the cluster too: alice has Write only where it exists
    with pytest.raises(TopicAuthorizationFailedError):
        answer(handlers, ProduceRequest("new", 0, build_message_set([b"x"])), ALICE)
    assert "new" not in handlers.logs.topics()
    answer(handlers, ProduceRequest("open", 0, build_message_set([b"x"])), ALICE)
    assert ends(handlers) > before


def test_acked_produce_and_fetches_answer_29_for_the_refused_topic_only(
    handlers: RequestHandlers,
) -> None:
    before = ends(handlers)
    sets = (ProduceRequest("open", 0, build_message_set([b"y"])),)
    raw = answer(handlers, AckedProduceRequest(False, sets), "User:bob")
    assert raw is not None
    [result] = decode_acked_produce_response(raw[4:])
    assert result.error == 29 and ends(handlers) == before
    wait = WaitingFetchRequest(0, 1, (FetchRequest("open", 0, 0, 1024),))
    refused = answer(handlers, wait, "User:bob")
    allowed = answer(handlers, wait, ALICE)
    assert refused is not None and allowed is not None
    [denied] = decode_multifetch_response(refused[4:], 1)
    [served] = decode_multifetch_response(allowed[4:], 1)
    assert denied.error == 29 and not len(denied.messages)
    assert served.error == 0 and b"kept" in bytes(served.messages)
    # a plain 0.7 FETCH: -1, the code a 0.7 client knows
    plain = answer(handlers, FetchRequest("open", 0, 0, 1024), "User:bob")
    assert plain is not None and decode_fetch_response(plain[4:]).error == UnknownError.code


def test_metadata_hides_topics_and_create_topic_needs_the_cluster(
    handlers: RequestHandlers,
) -> None:
    raw = answer(handlers, MetadataRequest(()), "User:bob")
    assert raw is not None and not decode_metadata_response(raw[4:]).topics
    raw = answer(handlers, MetadataRequest(()), ALICE)  # alice's Write implies Describe
    assert raw is not None and [t.topic for t in decode_metadata_response(raw[4:]).topics] == [
        "open"
    ]
    raw = answer(handlers, MetadataRequest(("open",)), "User:bob")
    assert raw is not None and decode_metadata_response(raw[4:]).topics[0].error == 29
    raw = answer(handlers, CreateTopicRequest("made", 2), ALICE)
    assert raw is not None and raw[4:6] == (31).to_bytes(2, "big")
    assert "made" not in handlers.logs.topics()
    answer(handlers, CreateTopicRequest("made", 2), "User:admin")  # a super user
    assert "made" in handlers.logs.topics()


def test_a_run_of_produces_in_one_read_is_refused_too(handlers: RequestHandlers) -> None:
    """PRODUCE frames in a row (one socket read, requests.produce_run) are appended without
    `handle`: the run is given back (handled one by one, refused there) unless allowed."""
    frame = encode_request(ProduceRequest("open", 0, build_message_set([b"z"])))
    frames = memoryview(frame * 3)
    run = produce_run(frames, 0, len(frames), 1 << 20, 1 << 20)
    assert run is not None
    before = ends(handlers)
    with handlers.batched_appends():
        assert not handlers.produce_run(run, "10.0.0.1:5000", "User:bob")
    assert ends(handlers) == before
    with handlers.batched_appends():
        assert handlers.produce_run(run, "10.0.0.1:5000", ALICE)
    assert ends(handlers) > before
