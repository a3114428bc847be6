"""Topic names, the one definition every door checks, and partition directory names.

A legal topic name is Kafka's (`common/Topic.scala` in later Kafkas):

    1 to 249 characters, each an ASCII letter, a digit, '.', '_' or '-'; not "." or "..".

0.7's `TopicNameValidator` allowed almost any Unicode, and that broke the broker: ZooKeeper
refuses path elements with code points above U+FFFF (UTF-16 surrogates), control and
private-use characters, so `emoji😀` was acknowledged and stored but never reached
`/brokers/topics`, and its directory then stopped the broker at every start. Names of plain
ASCII are also the same bytes on every filesystem, in every shell and in every metrics label.
249 leaves room in the 255-byte file name limit of Linux filesystems for '-' and five digits
of partition in the directory `<topic>-<partition>` (0.7 allowed 255, and the first produce
then failed deep inside the broker).

Every door checks a name with `validate_topic` before anything is written: the broker's
handlers (PRODUCE, MULTIPRODUCE, PRODUCE_ACK, CREATE_TOPIC, and the reads), the request
encoder the clients use, the producers and consumers at the call that names the topic, the
ZooKeeper paths (coordination/paths.py), and the log manager, which at start skips (and
names) a directory in `log.dir` whose topic is not legal.
"""

from __future__ import annotations

import re

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249  # characters, which are bytes: the name is ASCII
AUDIT_TOPIC = "_audit"  # the producers' counts (docs/design.md §3.5): published, mirrored, loaded
LEGAL_CHARACTERS = "ASCII letters, digits, '.', '_' and '-'"

_ILLEGAL = re.compile(r"[^A-Za-z0-9._-]")
_SHOWN = 60  # characters of a bad name quoted in an error message


def _quoted(topic: str) -> str:
    if len(topic) <= _SHOWN:
        return repr(topic)
    return f"{topic[:_SHOWN]!r}... ({len(topic)} characters)"


def validate_topic(topic: str) -> str:
    """Return `topic` unchanged, or raise InvalidTopicError naming it and what is wrong."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"a topic name is a string, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("topic name is empty")
    bad = _ILLEGAL.search(topic)
    if bad:
        raise InvalidTopicError(
            f"topic name {_quoted(topic)} contains the illegal character {bad.group()!r} "
            f"at position {bad.start()} (a topic name is {LEGAL_CHARACTERS})"
        )
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name {_quoted(topic)} is {len(topic)} characters, over the limit of "
            f"{MAX_TOPIC_LENGTH}"
        )
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    return topic


def is_legal_topic(topic: str) -> bool:
    try:
        validate_topic(topic)
    except InvalidTopicError:
        return False
    return True


def partition_dir_name(topic: str, partition: int) -> str:
    """'<topic>-<partition>', the directory of one partition's segments."""
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """Inverse of partition_dir_name; raises ValueError (InvalidTopicError for an illegal
    topic) saying why `name` is not the directory of a partition."""
    topic, sep, number = name.rpartition("-")
    if not sep or not (number.isascii() and number.isdigit()):
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory")
    validate_topic(topic)
    return topic, int(number)
