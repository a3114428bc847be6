"""Errors, and the wire error codes of Kafka 0.7 (`common/ErrorMapping.scala`).

One registry maps codes to exception classes both ways. Code that knows what went wrong
raises a precise exception; the network edge turns it into a code with `error_code(exc)`,
and a client turns a code it received back into an exception with `error_for_code(code)`.

| code | name              | when the broker answers it                                   |
|------|-------------------|--------------------------------------------------------------|
|  -1  | Unknown           | any other failure while serving a fetch                      |
|   0  | NoError           |                                                              |
|   1  | OffsetOutOfRange  | fetch offset before the first segment or past the end        |
|   2  | InvalidMessage    | a message failed validation (size, CRC, magic, codec)        |
|   3  | WrongPartition    | partition < 0 or >= the topic's partition count              |
|   4  | InvalidFetchSize  | a fetch size that cannot be served                           |
|   5  | MessageSizeTooLarge | (extension) a payload over max.message.size in an acked produce |
|   6  | InvalidTopic      | (extension) a topic name that breaks the naming rules        |
|   7  | Storage           | (extension) the set could not be written (disk full, I/O     |
|      |                   | error): nothing of it was stored; retry later                |
|   8  | NotLeaderForPartition | (replication) this broker does not lead the partition now: |
|      |                   | refresh the leaders and send to the leader                   |
|   9  | LeaderNotAvailable | (replication) no replica may lead the partition now (every  |
|      |                   | in-sync replica is down): nothing was written; retry later   |
|  10  | NotEnoughReplicas | (replication) acks=-1 with fewer in-sync replicas than       |
|      |                   | min.insync.replicas: refused before the append               |
|  11  | NotEnoughReplicasAfterAppend | (replication) appended by the leader, but the ISR |
|      |                   | shrank below min.insync.replicas before it was replicated:   |
|      |                   | not acknowledged (it may be there; a retry may duplicate it) |
|  12  | RequestTimedOut   | (replication) acks=-1 and the ISR did not have the set       |
|      |                   | within the request's timeout: not acknowledged (as 11)       |
|  13  | FencedLeaderEpoch | (replication) a replica request from an older leader epoch   |
|  29  | TopicAuthorizationFailed | (authorizer, Kafka 0.9's number) the principal may not  |
|      |                   | do this to the topic (security/acls.py); nothing was done    |
|  30  | GroupAuthorizationFailed | (authorizer) nor to the consumer group                  |
|  31  | ClusterAuthorizationFailed | (authorizer) nor to the cluster (create a topic,      |
|      |                   | replicate); also a replica request from a connection not     |
|      |                   | authenticated as that broker (docs/security.md)              |

The three authorization codes have Kafka's numbers on both ports; where a 0.7 request has no
error field (PRODUCE, MULTIPRODUCE, OFFSETS) the broker closes the connection instead, and a
plain 0.7 FETCH answers -1, the codes a 0.7 client knows.
"""

from __future__ import annotations

NO_ERROR = 0


class LogbrokerError(Exception):
    """Base of every error logbroker raises on purpose."""

    code: int = -1


_BY_CODE: dict[int, type[LogbrokerError]] = {}


def _register(cls: type[LogbrokerError]) -> type[LogbrokerError]:
    if cls.code in _BY_CODE:
        raise RuntimeError(f"error code {cls.code} registered twice")
    _BY_CODE[cls.code] = cls
    return cls


@_register
class UnknownError(LogbrokerError):
    """Code -1: the broker failed in a way that has no code of its own."""

    code = -1


@_register
class OffsetOutOfRangeError(LogbrokerError):
    """Code 1: the offset is before the first retained segment or past the end."""

    code = 1


@_register
class InvalidMessageError(LogbrokerError):
    """Code 2: a message failed validation: size, CRC, magic or compression."""

    code = 2


@_register
class WrongPartitionError(LogbrokerError):
    """Code 3: the partition does not exist for that topic on this broker."""

    code = 3


@_register
class InvalidFetchSizeError(LogbrokerError):
    """Code 4: a single message is larger than the fetch size."""

    code = 4


@_register
class MessageSizeTooLargeError(LogbrokerError):
    """Code 5 (extension): a payload exceeds `max.message.size`."""

    code = 5


@_register
class InvalidTopicError(LogbrokerError, ValueError):
    """Code 6 (extension): the topic name breaks the naming rules (protocol/topics.py).

    Also a ValueError: a bad name is a bad argument wherever a caller passes one."""

    code = 6


@_register
class StorageError(LogbrokerError):
    """Code 7 (extension): the log could not write the set (disk full, I/O error).

    Nothing of the set is stored or will ever be served: the segment was cut back to its
    last whole entry. The same set may be sent again once the disk has room.
    """

    code = 7


@_register
class NotLeaderForPartitionError(LogbrokerError):
    """Code 8 (replication): this broker does not lead the partition; ask the leader."""

    code = 8


@_register
class LeaderNotAvailableError(LogbrokerError):
    """Code 9 (replication): the partition has no leader now (no live in-sync replica)."""

    code = 9


@_register
class NotEnoughReplicasError(LogbrokerError):
    """Code 10 (replication): acks=-1 with fewer in-sync replicas than min.insync.replicas;
    nothing was appended."""

    code = 10


@_register
class NotEnoughReplicasAfterAppendError(LogbrokerError):
    """Code 11 (replication): the leader appended the set but the ISR shrank below
    min.insync.replicas before it was replicated: not acknowledged."""

    code = 11


@_register
class RequestTimedOutError(LogbrokerError):
    """Code 12 (replication): acks=-1 and the in-sync replicas did not all have the set
    within the request's timeout: not acknowledged."""

    code = 12


@_register
class FencedLeaderEpochError(LogbrokerError):
    """Code 13 (replication): a replica's request named a leader epoch older than the
    partition's current one."""

    code = 13


class AuthorizationError(LogbrokerError):
    """A request the authorizer refused (security/acls.py): one of the three below."""


@_register
class TopicAuthorizationFailedError(AuthorizationError):
    """Code 29 (Kafka's): the principal may not do this to the topic; nothing was done."""

    code = 29


@_register
class GroupAuthorizationFailedError(AuthorizationError):
    """Code 30 (Kafka's): the principal may not use this consumer group."""

    code = 30


@_register
class ClusterAuthorizationFailedError(AuthorizationError):
    """Code 31 (Kafka's): the principal may not do this to the cluster; also a request only
    brokers may make (REPLICA_FETCH, OFFSETS_FOR_LEADER_EPOCH) from a connection not
    authenticated as that broker."""

    code = 31


class WrongMessageFormatError(WrongPartitionError):
    """A topic of the message format the listener does not serve (docs/protocol.md, "Message
    formats"): UnknownTopicOrPartition on both ports (3), the message saying which it is."""


# Codes after which a client should look up the partition's leader again and retry.
RETRIABLE_LEADER_CODES = (8, 9)


class InflatedSizeTooLargeError(MessageSizeTooLargeError, InvalidMessageError):
    """A compressed set that inflates past its limit (one set, or all sets of one request).

    Code 5, MessageSizeTooLarge, on the wire; an InvalidMessageError for the code that
    validates, since a set that cannot be inflated within the limit cannot be checked.
    """


class UnknownMagicError(InvalidMessageError):
    """A message whose magic byte is neither 0 nor 1."""


class UnknownCodecError(InvalidMessageError):
    """A message whose attributes name a compression codec we do not know (3)."""


class CorruptMessageError(InvalidMessageError):
    """A message whose size or CRC is wrong, or whose compressed payload does not decode."""


class InvalidRequestError(LogbrokerError):
    """A request that cannot be decoded; the broker closes the connection (0.7's answer)."""


def error_for_code(code: int, message: str = "") -> LogbrokerError:
    """The exception a client raises for an error code it received."""
    cls = _BY_CODE.get(code, UnknownError)
    return cls(message or f"{cls.__name__} (error code {code})")


def error_code(exc: BaseException) -> int:
    """The wire code for an exception; anything unregistered is Unknown (-1)."""
    if isinstance(exc, LogbrokerError):
        for cls in type(exc).__mro__:
            if cls in _BY_CODE.values() and cls is not LogbrokerError:
                return cls.code  # type: ignore[attr-defined, no-any-return]
    return UnknownError.code


def describe_exception(exc: BaseException) -> str:
    """One line that always says what went wrong: the exception's type, then its message,
    or, when it has none (kazoo's ZooKeeper errors), its class's docstring.

    `str(kazoo.exceptions.NoAuthError())` is "", which once made a broker print only
    "logbroker broker: " when it could not start.
    """
    name = type(exc).__name__
    text = str(exc).strip()
    if not text:
        doc = (type(exc).__dict__.get("__doc__") or "").strip()
        text = doc.splitlines()[0] if doc else "no message"
    return f"{name}: {text}"
