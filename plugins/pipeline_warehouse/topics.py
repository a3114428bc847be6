"""Which topic names the pipeline takes: the broker's rules, and the warehouse's own names.

A topic name becomes a path in the warehouse (`<wh>/<topic>/`, `_checkpoints/<topic>/`,
`_staging/<topic>/`, ...), so it is checked at every door before anything is read or written:
the load's and the audit's command lines and Python entry points, `pipeline.json`, and the
DAGs' params. A legal name is

- a legal broker topic (logbroker.protocol.topics: 1 to 249 of ASCII letters, digits, '.',
  '_' and '-'; not '.' or '..'), so no name can climb out of or alias a directory, and
- not one of the warehouse's own names: a name that starts with '_' is reserved
  (`_checkpoints`, `_errors`, `_staging`, `_audit_results`, `_reports`, ... and whatever
  the layout adds later), except `_audit`, the producers' counts (docs/design.md §3.5), which the
  pipeline loads like any topic.

Names starting with '.' are hidden from Hadoop's and Spark's listings, so a topic named so
would load into a directory no reader sees: refused too.
"""

from __future__ import annotations

from collections.abc import Iterable

from logbroker.protocol.errors import InvalidTopicError
from logbroker.protocol.topics import AUDIT_TOPIC, validate_topic


class PipelineTopicError(ValueError):
    """A topic name the pipeline refuses; the message names it and says why, in one line."""


def check_topic(topic: str) -> str:
    """Return `topic`, or raise PipelineTopicError saying what is wrong with it."""
    try:
        validate_topic(topic)
    except InvalidTopicError as exc:
        raise PipelineTopicError(str(exc)) from None
    if topic.startswith("_") and topic != AUDIT_TOPIC:
        raise PipelineTopicError(
            f"topic name {topic!r} is reserved: names starting with '_' are the warehouse's own "
            f"(_checkpoints, _errors, _staging, ...), except {AUDIT_TOPIC!r}"
        )
    if topic.startswith("."):
        raise PipelineTopicError(
            f"topic name {topic!r} starts with '.': its warehouse directory would be hidden "
            "from every reader"
        )
    return topic


def check_topics(topics: Iterable[str]) -> list[str]:
    """Every name checked (the first bad one raises), in the order given."""
    return [check_topic(t) for t in topics]


def is_pipeline_topic(topic: str) -> bool:
    try:
        check_topic(topic)
    except PipelineTopicError:
        return False
    return True


def parse_topic_list(text: str) -> list[str]:
    """'a,b, c' -> ['a', 'b', 'c'], each checked; an empty list is an error too."""
    topics = [t.strip() for t in text.split(",") if t.strip()]
    if not topics:
        raise PipelineTopicError(f"no topic in {text!r}")
    return check_topics(topics)
