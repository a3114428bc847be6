"""The error codes of Kafka 0.8.2's wire (`common/ErrorMapping.scala`), tied to the project's
error registry (protocol/errors.py).

The 0.8 listener answers with these codes; the 0.7 port keeps protocol/errors.py's. The two
numberings agree from -1 to 4 and part ways after: 0.7 stopped at 4, and the project's
extension and replication codes (5 to 13) took numbers that 0.8 had given to other errors.
So one exception has two codes, one per listener: `code08(exc)` is the one the 0.8 listener
sends, `error_code(exc)` (protocol/errors.py) the one the 0.7 port sends.

| 0.8 | 0.8.2's name                     | the exception (its 0.7-port code)             |
|-----|----------------------------------|-----------------------------------------------|
|  -1 | Unknown                          | UnknownError (-1); StorageError (7) and       |
|     |                                  | FencedLeaderEpochError (13) too: 0.8 has none |
|   0 | NoError                          |                                               |
|   1 | OffsetOutOfRange                 | OffsetOutOfRangeError (1)                     |
|   2 | InvalidMessage (CorruptMessage)  | InvalidMessageError (2) and its kinds         |
|   3 | UnknownTopicOrPartition          | WrongPartitionError (3)                       |
|   4 | InvalidFetchSize (the guide:     | InvalidFetchSizeError (4)                     |
|     | InvalidMessageSize)              |                                               |
|   5 | LeaderNotAvailable               | LeaderNotAvailableError (9)                   |
|   6 | NotLeaderForPartition            | NotLeaderForPartitionError (8)                |
|   7 | RequestTimedOut                  | RequestTimedOutError (12)                     |
|   8 | BrokerNotAvailable               | BrokerNotAvailableError (0.8 only)            |
|   9 | ReplicaNotAvailable              | ReplicaNotAvailableError (0.8 only)           |
|  10 | MessageSizeTooLarge              | MessageSizeTooLargeError (5), and             |
|     |                                  | InflatedSizeTooLargeError                     |
|  11 | StaleControllerEpoch             | StaleControllerEpochError (0.8 only)          |
|  12 | OffsetMetadataTooLarge           | OffsetMetadataTooLargeError (0.8 only)        |
|  14 | OffsetsLoadInProgress            | OffsetsLoadInProgressError (0.8 only)         |
|  15 | ConsumerCoordinatorNotAvailable  | ConsumerCoordinatorNotAvailableError (0.8)    |
|  16 | NotCoordinatorForConsumer        | NotCoordinatorForConsumerError (0.8 only)     |
|  17 | InvalidTopic                     | InvalidTopicError (6)                         |
|  18 | MessageSetSizeTooLarge           | RecordListTooLargeError (0.8 only)            |
|  19 | NotEnoughReplicas                | NotEnoughReplicasError (10)                   |
|  20 | NotEnoughReplicasAfterAppend     | NotEnoughReplicasAfterAppendError (11)        |
|  29 | TopicAuthorizationFailed (0.9)   | TopicAuthorizationFailedError (29)            |
|  30 | GroupAuthorizationFailed (0.9)   | GroupAuthorizationFailedError (30)            |
|  31 | ClusterAuthorizationFailed (0.9) | ClusterAuthorizationFailedError (31)          |

13 was 0.8.2's StaleLeaderEpoch, a code between brokers that no client is sent; the clients
of later Kafkas read 13 as NetworkException, so the 0.8 listener never sends it. The 0.8-only
exceptions are not in protocol/errors.py's registry (their numbers are taken there): on the
0.7 port they would be Unknown (-1), and none of them can arise there.
"""

from __future__ import annotations

from enum import IntEnum

from ..errors import (
    ClusterAuthorizationFailedError,
    FencedLeaderEpochError,
    GroupAuthorizationFailedError,
    InvalidFetchSizeError,
    InvalidMessageError,
    InvalidTopicError,
    LeaderNotAvailableError,
    LogbrokerError,
    MessageSizeTooLargeError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    StorageError,
    TopicAuthorizationFailedError,
    UnknownError,
    WrongPartitionError,
)


class Code(IntEnum):
    """Kafka 0.8.2's error codes, as the 0.8 listener sends them."""

    UNKNOWN = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_FOR_PARTITION = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_SIZE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    OFFSETS_LOAD_IN_PROGRESS = 14
    CONSUMER_COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR_FOR_CONSUMER = 16
    INVALID_TOPIC = 17
    MESSAGE_SET_SIZE_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    TOPIC_AUTHORIZATION_FAILED = 29  # 0.9's: a secured broker's answer
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31


class Kafka08Error(LogbrokerError):
    """An error that only the 0.8 protocol has a code for (never sent on the 0.7 port)."""

    code08: Code = Code.UNKNOWN


class BrokerNotAvailableError(Kafka08Error):
    """0.8 code 8: the broker named is not alive."""

    code08 = Code.BROKER_NOT_AVAILABLE


class ReplicaNotAvailableError(Kafka08Error):
    """0.8 code 9: a replica of the partition is down (metadata still lists the rest)."""

    code08 = Code.REPLICA_NOT_AVAILABLE


class StaleControllerEpochError(Kafka08Error):
    """0.8 code 11: a controller request from an older controller epoch."""

    code08 = Code.STALE_CONTROLLER_EPOCH


class OffsetMetadataTooLargeError(Kafka08Error):
    """0.8 code 12: an OffsetCommit's metadata string is over offset.metadata.max.bytes."""

    code08 = Code.OFFSET_METADATA_TOO_LARGE


class OffsetsLoadInProgressError(Kafka08Error):
    """0.8 code 14: the coordinator is still loading the group's offsets; retry."""

    code08 = Code.OFFSETS_LOAD_IN_PROGRESS


class ConsumerCoordinatorNotAvailableError(Kafka08Error):
    """0.8 code 15: no broker can coordinate the group now; retry."""

    code08 = Code.CONSUMER_COORDINATOR_NOT_AVAILABLE


class NotCoordinatorForConsumerError(Kafka08Error):
    """0.8 code 16: this broker does not coordinate the group; ask ConsumerMetadata again."""

    code08 = Code.NOT_COORDINATOR_FOR_CONSUMER


class RecordListTooLargeError(Kafka08Error):
    """0.8 code 18: a produced message set is larger than the segment size."""

    code08 = Code.MESSAGE_SET_SIZE_TOO_LARGE


# The project's exceptions (protocol/errors.py) and the 0.8 code of each. An exception's
# class and its bases are looked up in order: the first listed wins (InflatedSizeTooLarge is
# a MessageSizeTooLarge before it is an InvalidMessage, so 10).
_CODES: dict[type[BaseException], Code] = {
    UnknownError: Code.UNKNOWN,
    OffsetOutOfRangeError: Code.OFFSET_OUT_OF_RANGE,
    InvalidMessageError: Code.INVALID_MESSAGE,
    WrongPartitionError: Code.UNKNOWN_TOPIC_OR_PARTITION,
    InvalidFetchSizeError: Code.INVALID_FETCH_SIZE,
    MessageSizeTooLargeError: Code.MESSAGE_SIZE_TOO_LARGE,
    InvalidTopicError: Code.INVALID_TOPIC,
    StorageError: Code.UNKNOWN,
    NotLeaderForPartitionError: Code.NOT_LEADER_FOR_PARTITION,
    LeaderNotAvailableError: Code.LEADER_NOT_AVAILABLE,
    NotEnoughReplicasError: Code.NOT_ENOUGH_REPLICAS,
    NotEnoughReplicasAfterAppendError: Code.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    RequestTimedOutError: Code.REQUEST_TIMED_OUT,
    FencedLeaderEpochError: Code.UNKNOWN,
    TopicAuthorizationFailedError: Code.TOPIC_AUTHORIZATION_FAILED,
    GroupAuthorizationFailedError: Code.GROUP_AUTHORIZATION_FAILED,
    ClusterAuthorizationFailedError: Code.CLUSTER_AUTHORIZATION_FAILED,
}

_EXCEPTIONS: dict[int, type[LogbrokerError]] = {
    int(code): cls
    for cls, code in _CODES.items()
    if code != Code.UNKNOWN and issubclass(cls, LogbrokerError)
}
_EXCEPTIONS[Code.UNKNOWN] = UnknownError
for _cls in Kafka08Error.__subclasses__():
    _EXCEPTIONS[_cls.code08] = _cls


def code08(exc: BaseException) -> Code:
    """The 0.8 code the 0.8 listener answers for `exc`; Unknown (-1) for anything else."""
    if isinstance(exc, Kafka08Error):
        return exc.code08
    for cls in type(exc).__mro__:
        code = _CODES.get(cls)
        if code is not None:
            return code
    return Code.UNKNOWN


def error_for_code08(code: int, message: str = "") -> LogbrokerError:
    """The exception a 0.8 client raises for a code it received (the project's own class
    where the two protocols share the error, so callers catch one class for both)."""
    cls = _EXCEPTIONS.get(code, UnknownError)
    try:
        name = Code(code).name
    except ValueError:
        name = "not a 0.8 code"
    return cls(message or f"{cls.__name__} (0.8 error code {code}, {name})")
