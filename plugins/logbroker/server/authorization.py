"""What each request needs of the authorizer (`authorizer.class.name`, security/acls.py), as
Kafka 0.9-2.x's KafkaApis asks it, on both ports:

    request                          operation      resource             refused with
    PRODUCE(S)                       Write          the topic            the connection closed
      (a 0.7 topic not there yet)    + Create       the cluster          (0.7 has no answer)
    PRODUCE_ACK, 0.8 Produce         Write          the topic            29 per partition
    FETCH, MULTIFETCH, FETCH_WAIT,   Read           the topic            29 per set (-1 in a
      0.8 Fetch                                                          plain 0.7 fetch's)
    OFFSETS, 0.8 Offsets             Describe       the topic            closed / 29
    METADATA, 0.8 Metadata           Describe       each topic           29 per topic; a list
                                                                         of all topics omits it
    CREATE_TOPIC                     Create         the cluster          31
    0.8 OffsetCommit, OffsetFetch    Read           the group, the topic 30 / 29 per partition
    REPLICA_FETCH, epoch queries     ClusterAction  the cluster          the connection closed

The principal is the connection's `principal` attribute (User:ANONYMOUS on PLAINTEXT, as in
Kafka; the TLS and SASL listeners set it), the host its client's address. Each refusal is
logged, at most a line per kind per connection.log.interval.ms (log_limiter.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ..protocol.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from ..security.acls import ANONYMOUS, CLUSTER, Authorizer, Operation, group, topic
from .log_limiter import RateLimitedLog

__all__ = ["ANONYMOUS", "RequestAuthorizer", "TopicCheck", "host_of"]

TopicCheck = Callable[[str], AuthorizationError | None]


def host_of(client: str) -> str:
    """The host of a client's "host:port" (what a host ACL names)."""
    return client.rpartition(":")[0] or client


class RequestAuthorizer:
    def __init__(self, authorizer: Authorizer, warnings: RateLimitedLog) -> None:
        self.authorizer = authorizer
        self.warnings = warnings

    def _refused(self, client: str, principal: str, what: str) -> None:
        self.warnings.warning(
            "authorization_failed", "refused %s from %s (%s): not authorized", what, principal,
            client,
        )  # fmt: skip

    def topic(
        self, client: str, principal: str, operation: Operation, name: str
    ) -> TopicAuthorizationFailedError | None:
        if self.authorizer.authorize(principal, host_of(client), operation, topic(name)):
            return None
        what = f"{operation.value} on Topic:{name}"
        self._refused(client, principal, what)
        return TopicAuthorizationFailedError(f"{principal} may not {what}")

    def topics(self, client: str, principal: str, operation: Operation) -> TopicCheck:
        """A check of `operation` on topics for one request (each topic decided once)."""
        seen: dict[str, AuthorizationError | None] = {}

        def check(name: str) -> AuthorizationError | None:
            if name not in seen:
                seen[name] = self.topic(client, principal, operation, name)
            return seen[name]

        return check

    def group(
        self, client: str, principal: str, operation: Operation, name: str
    ) -> GroupAuthorizationFailedError | None:
        if self.authorizer.authorize(principal, host_of(client), operation, group(name)):
            return None
        what = f"{operation.value} on Group:{name}"
        self._refused(client, principal, what)
        return GroupAuthorizationFailedError(f"{principal} may not {what}")

    def cluster(
        self, client: str, principal: str, operation: Operation
    ) -> ClusterAuthorizationFailedError | None:
        if self.authorizer.authorize(principal, host_of(client), operation, CLUSTER):
            return None
        what = f"{operation.value} on the cluster"
        self._refused(client, principal, what)
        return ClusterAuthorizationFailedError(f"{principal} may not {what}")


def no_check(name: str) -> None:
    """The topic check of a broker without an authorizer: everything is allowed."""
    return None
