"""Topic names (`utils/TopicNameValidator.scala`) and partition directory names.

A legal topic name is 1..249 bytes of UTF-8, not "." or "..", and contains none of:
'/', '\\', control characters U+0000-U+001F and U+007F-U+009F, the surrogate and private
use range U+D800-U+F8FF, and U+FFF0-U+FFFF. Backslash is refused as well (0.7 did not) so
that no name can reach outside `log.dir` on any filesystem. A partition lives in the
directory `<topic>-<partition>`; the topic is everything before the last '-'. 0.7 allowed
255 characters, but then `<topic>-<partition>` no longer fits the 255-byte file name limit
of Linux filesystems and the first produce failed deep inside the broker; 249 bytes leave
room for '-' and five digits of partition (later Kafkas chose the same limit).
"""

from __future__ import annotations

import re

from .errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249  # bytes of UTF-8

_ILLEGAL = re.compile("[/\\\\\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_topic(topic: str) -> str:
    """Return `topic` unchanged, or raise InvalidTopicError saying what is wrong with it."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a string, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("topic name is empty")
    size = len(topic.encode("utf-8", "surrogatepass"))
    if size > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name is {size} bytes of UTF-8, over the limit of {MAX_TOPIC_LENGTH}"
        )
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    bad = _ILLEGAL.search(topic)
    if bad:
        raise InvalidTopicError(
            f"topic name {topic!r} contains the illegal character {bad.group()!r} "
            f"at position {bad.start()}"
        )
    return topic


def partition_dir_name(topic: str, partition: int) -> str:
    """'<topic>-<partition>', the directory of one partition's segments."""
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """Inverse of partition_dir_name; raises ValueError for names that are not one."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory")
    validate_topic(topic)
    return topic, int(number)
