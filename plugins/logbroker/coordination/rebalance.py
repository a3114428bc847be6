"""The consumer group's range assignment and subscription values, exactly as Kafka 0.7.2 did them.

Pure functions only: nothing here talks to ZooKeeper (the group consumer,
`logbroker.client.group_consumer`, reads the znodes and calls these).
(docs/design.md §3.3; 0.7.2's `ZookeeperConsumerConnector.rebalance`,
`TopicCount.scala`, `TopicFilter.scala`.)

Range assignment (`assign`), done by every member of a group for every topic it subscribes to:

1. P = the topic's partitions: every `<brokerId>-<partId>` for which a broker registered
   `/brokers/topics/<topic>/<brokerId>` (value = its partition count), **sorted as strings**,
   so `0-10` comes before `0-2` (and partitions of one broker stay together). A replicated
   topic's partitions are `0` .. `N-1` of its assignment (`/replication/topics/<topic>`),
   named `<p>` (coordination/paths.py) and sorted as strings too, so `10` comes before `2`:
   Kafka 0.8 sorted them as numbers, but what matters is that every member of the group
   sorts them the same way, and they all run this function;
2. C = the consumer *threads* (streams) of the group that subscribe to the topic, each
   `<consumerId>-<i>`, sorted as strings;
3. nPer = |P| // |C|, extra = |P| % |C|; the thread at index i of C owns the |P| slice
   that starts at nPer*i + min(i, extra) and holds nPer + (1 if i < extra else 0) partitions.
   So the first `extra` threads get one partition more than the others (the 0.7 design doc
   and the paper say ranges i*N .. (i+1)*N-1, leaving the leftovers unowned: the 0.7.2 code
   gives them out as here, and that is what every 0.7 consumer computes), and with more
   threads than partitions the last threads own nothing.

Because every member sorts the same inputs the same way, all members agree on the whole
assignment without talking to each other; each then claims its own part by creating the
ephemeral owner znodes, retrying the whole rebalance when another member still owns one.

Subscription values (the value of the ephemeral `/consumers/<group>/ids/<consumerId>`):

* static, `{ "topicA": 2,"topicB": 1 }`: topic -> number of streams, spelled the way
  0.7's `TopicCount.toJsonString` wrote it: `{ `, the `"topic": n` pairs joined by `,`,
  then ` }`. Parsed as JSON, so a value written by anything else that is a JSON object of
  topic -> count reads the same;
* wildcard, `*<n>*<regex>` (whitelist: the topics the regex matches in full) or
  `!<n>!<regex>` (blacklist: the topics it does not match), n streams shared by every
  matching topic; the topics are those under `/brokers/topics` and `/replication/topics` at
  the time of the rebalance.

Consumer ids are `<group>_<hostname>-<currentTimeMillis>-<first 8 hex digits of a UUID>`
(or `<group>_<consumerid>` when configured); the thread ids of a consumer are
`<consumerId>-0`, `<consumerId>-1`, ...: the same n ids for every topic it subscribes to.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..protocol.topics import is_legal_topic

WHITELIST_MARKER = "*"
BLACKLIST_MARKER = "!"
_WHITELIST_VALUE = re.compile(r"\*([0-9]+)\*(.*)", re.DOTALL)
_BLACKLIST_VALUE = re.compile(r"!([0-9]+)!(.*)", re.DOTALL)


# -- the assignment --------------------------------------------------------------------------


def assign(partitions: Iterable[str], consumer_threads: Iterable[str]) -> dict[str, list[str]]:
    """0.7.2's range assignment of one topic: thread id -> the partitions it owns.

    Both inputs are sorted as strings (duplicates count once), so the answer does not depend
    on their order. Every thread is a key, owning a possibly empty list of partitions listed
    in sorted order; every partition is owned by exactly one thread (none when there are no
    threads).
    """
    parts = sorted(set(partitions))
    threads = sorted(set(consumer_threads))
    if not threads:
        return {}
    n_per, extra = divmod(len(parts), len(threads))
    owned: dict[str, list[str]] = {}
    for i, thread in enumerate(threads):
        start = n_per * i + min(i, extra)
        count = n_per + (1 if i < extra else 0)
        owned[thread] = parts[start : start + count]
    return owned


def owners(partitions: Iterable[str], consumer_threads: Iterable[str]) -> dict[str, str]:
    """The same assignment the other way round: partition -> owning thread id."""
    return {
        partition: thread
        for thread, parts in assign(partitions, consumer_threads).items()
        for partition in parts
    }


def topic_partitions(broker_partition_counts: Mapping[int, int]) -> list[str]:
    """`{brokerId: partition count}` (from `/brokers/topics/<topic>/*`) -> sorted partition names."""
    return sorted(
        f"{broker}-{part}"
        for broker, count in broker_partition_counts.items()
        for part in range(count)
    )


def replicated_partitions(count: int) -> list[str]:
    """A replicated topic's N partitions (its assignment) -> sorted names `"0"` .. `"N-1"`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"a partition count is an integer >= 0, got {count!r}")
    return sorted(str(p) for p in range(count))


# -- consumer and thread ids -----------------------------------------------------------------


def make_consumer_id(
    group: str,
    consumer_id: str | None = None,
    *,
    hostname: str | None = None,
    time_ms: int | None = None,
    uuid_hex: str | None = None,
) -> str:
    """0.7's consumer id: `<group>_<consumerid>` when one is configured, else
    `<group>_<hostname>-<currentTimeMillis>-<first 8 hex digits of a random UUID>`."""
    if consumer_id:
        return f"{group}_{consumer_id}"
    host = hostname if hostname is not None else socket.gethostname()
    now = time_ms if time_ms is not None else int(time.time() * 1000)
    unique = (uuid_hex if uuid_hex is not None else uuid.uuid4().hex)[:8]
    return f"{group}_{host}-{now}-{unique}"


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    """`<consumerId>-0` .. `<consumerId>-<streams-1>`: one per stream."""
    return [f"{consumer_id}-{i}" for i in range(streams)]


# -- topic filters ---------------------------------------------------------------------------


def _normalize_regex(raw: str) -> str:
    """0.7's TopicFilter clean-up: trim, `,` -> `|`, drop spaces and surrounding quotes."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    return re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex))


@dataclass(frozen=True)
class TopicFilter:
    """A regex over topic names (normalized as 0.7 did; matched against the whole name)."""

    regex: str
    marker = ""

    def __init__(self, regex: str) -> None:
        normalized = _normalize_regex(regex)
        try:
            re.compile(normalized)
        except re.error as exc:
            raise ValueError(f"invalid topic filter regex {normalized!r}: {exc}") from None
        object.__setattr__(self, "regex", normalized)

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.regex, topic) is not None

    def allows(self, topic: str) -> bool:
        raise NotImplementedError

    def value(self, streams: int) -> str:
        """The subscription value: `*<n>*<regex>` or `!<n>!<regex>`."""
        _check_streams(streams)
        return f"{self.marker}{streams}{self.marker}{self.regex}"


class Whitelist(TopicFilter):
    """The topics whose whole name the regex matches (`a|b`, `logs-.*`; `,` works as `|`)."""

    marker = WHITELIST_MARKER

    def allows(self, topic: str) -> bool:
        return self.matches(topic)


class Blacklist(TopicFilter):
    """Every topic whose whole name the regex does not match."""

    marker = BLACKLIST_MARKER

    def allows(self, topic: str) -> bool:
        return not self.matches(topic)


# -- subscriptions ---------------------------------------------------------------------------


def _check_streams(streams: int) -> None:
    if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
        raise ValueError(f"a number of streams is an integer >= 1, got {streams!r}")


@dataclass(frozen=True)
class StaticSubscription:
    """Named topics, each with its number of streams."""

    topic_streams: Mapping[str, int]

    def value(self) -> str:
        return static_subscription_value(self.topic_streams)

    def topics(self, all_topics: Iterable[str] = ()) -> list[str]:
        return list(self.topic_streams)

    def thread_ids_per_topic(
        self, consumer_id: str, all_topics: Iterable[str] = ()
    ) -> dict[str, list[str]]:
        return {t: thread_ids(consumer_id, n) for t, n in self.topic_streams.items()}


@dataclass(frozen=True)
class WildcardSubscription:
    """Every topic a filter allows, all sharing the same `streams` streams."""

    filter: TopicFilter
    streams: int

    def value(self) -> str:
        return self.filter.value(self.streams)

    def topics(self, all_topics: Iterable[str]) -> list[str]:
        """The allowed topics among `all_topics`; an illegal name (an old broker's, in
        ZooKeeper) is never one: no path or request could name it."""
        return sorted(t for t in set(all_topics) if is_legal_topic(t) and self.filter.allows(t))

    def thread_ids_per_topic(
        self, consumer_id: str, all_topics: Iterable[str]
    ) -> dict[str, list[str]]:
        ids = thread_ids(consumer_id, self.streams)
        return {t: list(ids) for t in self.topics(all_topics)}


Subscription = StaticSubscription | WildcardSubscription


def static_subscription_value(topic_streams: Mapping[str, int]) -> str:
    """`{"a": 2, "b": 1}` -> `'{ "a": 2,"b": 1 }'`, the spelling of 0.7's `toJsonString`.

    Topic names are JSON-escaped (0.7 did not escape them: for ordinary names the two agree).
    """
    for streams in topic_streams.values():
        _check_streams(streams)
    pairs = ",".join(
        f"{json.dumps(topic, ensure_ascii=False)}: {n}" for topic, n in topic_streams.items()
    )
    return "{ " + pairs + " }"


def wildcard_subscription_value(topic_filter: TopicFilter, streams: int) -> str:
    """`*<n>*<regex>` for a Whitelist, `!<n>!<regex>` for a Blacklist."""
    return topic_filter.value(streams)


def parse_subscription(value: str | bytes) -> Subscription:
    """Read the value of `/consumers/<group>/ids/<consumerId>` (any of the forms above).

    Raises ValueError for anything else (for example samsa's bare topic name).
    """
    text = value.decode("utf-8") if isinstance(value, bytes) else value
    for pattern, kind in ((_WHITELIST_VALUE, Whitelist), (_BLACKLIST_VALUE, Blacklist)):
        if text.startswith(kind.marker):
            match = pattern.fullmatch(text)
            if match is None or int(match.group(1)) < 1:
                raise ValueError(
                    f"a wildcard subscription is '{kind.marker}<n>{kind.marker}<regex>', got {text!r}"
                )
            return WildcardSubscription(kind(match.group(2)), int(match.group(1)))
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(t, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 1
        for t, n in parsed.items()
    ):
        raise ValueError(
            f"a subscription is a JSON object of topic -> streams, '*<n>*<regex>' or '!<n>!<regex>'; got {text!r}"
        )
    return StaticSubscription(dict(parsed))


def consumers_per_topic(
    subscriptions: Mapping[str, Subscription], all_topics: Sequence[str] = ()
) -> dict[str, list[str]]:
    """consumer id -> subscription (the group's ids nodes) -> topic -> sorted thread ids.

    `all_topics` (the children of `/brokers/topics` and `/replication/topics`) is what
    wildcard subscriptions match.
    """
    per_topic: dict[str, list[str]] = {}
    for consumer_id, subscription in subscriptions.items():
        for topic, threads in subscription.thread_ids_per_topic(consumer_id, all_topics).items():
            per_topic.setdefault(topic, []).extend(threads)
    return {topic: sorted(threads) for topic, threads in per_topic.items()}
