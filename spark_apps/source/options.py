"""The `logbroker` source's options, in the Spark Kafka source's style (all values strings).

zookeeper            the cluster's ZooKeeper connect string, chroot included
brokers              or: 'host:port,host:port' (or 'id:host:port'); METADATA names the ids
subscribe            'topic1,topic2'                       exactly one of these three
subscribePattern     a regular expression, matched against whole topic names
assign               JSON {"topic": ["<broker_id>-<partition>", ...]}; a replicated topic's
                     partitions are named "<p>" alone (logbroker.coordination.paths)
startingOffsets      'earliest' (batch default), 'latest' (stream default), or JSON
                     {"topic": {"<broker_id>-<partition>": offset}}, -2 earliest, -1 latest
endingOffsets        'latest' (default) or JSON as above (-1 latest); batch only
failOnDataLoss       'true' (default): a range retention deleted is an error naming topic,
                     partition and the missing offsets; 'false': a warning, then the
                     earliest offset still there
valueFormat          'raw' (default) or 'avro' (framed events, docs/design.md §3.4)
schemaRegistry       the registry's connect string (valueFormat avro)
mode                 avro payloads that are not events: FAILFAST (default, an error naming
                     the place), PERMISSIVE (kept, with `_error` and `_value` columns),
                     DROPMALFORMED (skipped)
fetchSize            bytes per fetch request (default 1 MiB; grows for a larger message)
maxBytesPerPartition a range longer than this is split into several Spark partitions
                     (default 128 MiB)
minPartitions        at least this many Spark partitions, splitting the largest ranges
maxOffsetsPerTrigger streaming: at most this many offsets (messages; a compressed wrapper is
                     one) per micro-batch, split across partitions by backlog (admission.py);
                     Trigger.Once reads everything, as Spark's Kafka source does; batch
                     queries ignore it

A client's credentials, by Kafka's names (logbroker.security.client; docs/security.md):
security.protocol    PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
ssl.cafile, ssl.certfile, ssl.keyfile, ssl.endpoint.identification.algorithm
sasl.mechanism       PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with sasl.username and
                     sasl.password (sasl.jaas.config is refused here: Spark redacts the
                     values of options named like a password in a plan's string, not that)
Every connection the source opens, on the driver and the executors, logs in with them. The
password stays in SourceOptions (pickled to the readers), whose repr names only the user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from logbroker.coordination.paths import parse_partition_name, partition_name
from logbroker.security.client import KEYS as CREDENTIAL_KEYS
from logbroker.security.client import ClientCredentials

EARLIEST = -2
LATEST = -1
MODES = ("FAILFAST", "PERMISSIVE", "DROPMALFORMED")
FORMATS = ("raw", "avro")

OffsetSpec = str | dict[str, dict[str, int]]  # 'earliest' | 'latest' | topic -> name -> offset


class SourceOptionError(ValueError):
    """An option is missing, unknown or malformed: the message names it and shows the form."""


@dataclass(frozen=True)
class SourceOptions:
    zookeeper: str | None
    brokers: str | None
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[str, ...]] | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    fail_on_data_loss: bool
    value_format: str
    schema_registry: str | None
    mode: str
    fetch_size: int
    max_bytes_per_partition: int
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    credentials: ClientCredentials = field(default_factory=ClientCredentials)

    def topic_matches(self, topic: str) -> bool:
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.assign is not None:
            return topic in self.assign
        assert self.subscribe_pattern is not None
        return re.fullmatch(self.subscribe_pattern, topic) is not None

    def partition_selected(self, topic: str, name: str) -> bool:
        return self.assign is None or name in self.assign.get(topic, ())


KNOWN = {
    "zookeeper",
    "brokers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "failondataloss",
    "valueformat",
    "schemaregistry",
    "mode",
    "fetchsize",
    "maxbytesperpartition",
    "minpartitions",
    "maxoffsetspertrigger",
    "path",  # Spark passes load(path) as 'path'; unused
    *(key for key in CREDENTIAL_KEYS if key != "sasl.jaas.config"),
}


def parse_options(raw: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    opts = {k.lower(): v for k, v in raw.items()}
    unknown = sorted(set(opts) - KNOWN)
    if unknown:
        raise SourceOptionError(
            f"unknown option(s) {', '.join(unknown)} for the logbroker source; known: "
            "zookeeper, brokers, subscribe, subscribePattern, assign, startingOffsets, "
            "endingOffsets, failOnDataLoss, valueFormat, schemaRegistry, mode, fetchSize, "
            "maxBytesPerPartition, minPartitions, maxOffsetsPerTrigger, and a client's "
            "security.protocol, ssl.* and sasl.* (sasl.username and sasl.password)"
        )
    zookeeper, brokers = opts.get("zookeeper"), opts.get("brokers")
    if bool(zookeeper) == bool(brokers):
        raise SourceOptionError(
            "give exactly one of the options 'zookeeper' (connect string with chroot, "
            "e.g. 127.0.0.1:2181/analysis) and 'brokers' (e.g. 127.0.0.1:9092,127.0.0.1:9093)"
        )
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(chosen) != 1:
        raise SourceOptionError(
            "give exactly one of 'subscribe' (topic1,topic2), 'subscribePattern' (a regular "
            'expression) and \'assign\' ({"topic": ["0-0", "1-0"]})'
        )
    subscribe = None
    if "subscribe" in chosen:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
    pattern = opts.get("subscribepattern") or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"subscribePattern {pattern!r} is not a regex: {exc}") from None
    assign = _parse_assign(opts["assign"]) if "assign" in chosen else None
    starting = _parse_offsets(
        "startingOffsets", opts.get("startingoffsets", "latest" if streaming else "earliest")
    )
    if streaming and "endingoffsets" in opts:
        raise SourceOptionError("endingOffsets is for batch queries; a stream reads on")
    ending = _parse_offsets("endingOffsets", opts.get("endingoffsets", "latest"))
    if ending == "earliest" or (
        isinstance(ending, dict) and any(v == EARLIEST for p in ending.values() for v in p.values())
    ):
        raise SourceOptionError("endingOffsets cannot be 'earliest' (-2): use 'latest' or offsets")
    value_format = opts.get("valueformat", "raw").lower()
    if value_format not in FORMATS:
        raise SourceOptionError(f"valueFormat {value_format!r}: use 'raw' or 'avro'")
    registry = opts.get("schemaregistry") or None
    if value_format == "avro" and not registry:
        raise SourceOptionError(
            "valueFormat 'avro' needs the option 'schemaRegistry' (the registry's connect "
            "string, e.g. 127.0.0.1:2181/registry)"
        )
    mode = opts.get("mode", "FAILFAST").upper()
    if mode not in MODES:
        raise SourceOptionError(f"mode {mode!r}: use one of {', '.join(MODES)}")
    return SourceOptions(
        zookeeper=zookeeper or None,
        brokers=brokers or None,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        value_format=value_format,
        schema_registry=registry,
        mode=mode,
        fetch_size=_parse_int("fetchSize", opts.get("fetchsize"), 1024 * 1024, minimum=64),
        max_bytes_per_partition=_parse_int(
            "maxBytesPerPartition", opts.get("maxbytesperpartition"), 128 * 1024 * 1024, minimum=1
        ),
        min_partitions=_parse_optional_int("minPartitions", opts.get("minpartitions")),
        max_offsets_per_trigger=_parse_optional_int(
            "maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger")
        ),
        credentials=_parse_credentials(opts),
    )


def _parse_credentials(opts: Mapping[str, str]) -> ClientCredentials:
    try:
        return ClientCredentials.from_properties(opts)
    except ValueError as exc:  # names the key, never the password
        raise SourceOptionError(f"logbroker source: {exc}") from None


def _parse_bool(name: str, text: str) -> bool:
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise SourceOptionError(f"{name} must be 'true' or 'false', got {text!r}")


def _parse_int(name: str, text: str | None, default: int, minimum: int) -> int:
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SourceOptionError(f"{name} must be an integer, got {text!r}") from None
    if value < minimum:
        raise SourceOptionError(f"{name} must be >= {minimum}, got {value}")
    return value


def _parse_optional_int(name: str, text: str | None) -> int | None:
    return None if text is None else _parse_int(name, text, 0, minimum=1)


def _json(name: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"{name} is not JSON ({exc}); the form is {example}") from None


def _parse_assign(text: str) -> dict[str, tuple[str, ...]]:
    example = '{"page_views": ["0-0", "1-0"]}'
    value = _json("assign", text, example)
    if not isinstance(value, dict) or not all(
        isinstance(v, list) and all(isinstance(n, str) for n in v) for v in value.values()
    ):
        raise SourceOptionError(f"assign must map topics to partition names, like {example}")
    for names in value.values():
        for name in names:
            _check_name("assign", name)
    return {t: tuple(v) for t, v in value.items()}


def _parse_offsets(name: str, text: str) -> OffsetSpec:
    if text.strip().lower() in ("earliest", "latest"):
        return text.strip().lower()
    example = '{"page_views": {"0-0": 1234, "1-0": -2}}'
    value = _json(name, text, example)
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise SourceOptionError(
            f"{name} is 'earliest', 'latest' or JSON like {example} (-2 earliest, -1 latest)"
        )
    out: dict[str, dict[str, int]] = {}
    for topic, parts in value.items():
        out[topic] = {}
        for pname, offset in parts.items():
            _check_name(name, pname)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise SourceOptionError(
                    f"{name}: offset of {topic} {pname} must be an integer >= -2, got {offset!r}"
                )
            out[topic][pname] = offset
    return out


def _check_name(option: str, name: str) -> None:
    try:
        parse_partition_name(name)
    except ValueError as exc:
        raise SourceOptionError(f"{option}: {exc}") from None


def offsets_json(offsets: Mapping[tuple[str, int, int], int]) -> str:
    """{(topic, broker_id, partition): offset} -> the JSON startingOffsets/endingOffsets take
    (a replicated partition, broker_id -1, is named by its number alone)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, broker_id, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[partition_name(broker_id, partition)] = offset
    return json.dumps(out, sort_keys=True)
