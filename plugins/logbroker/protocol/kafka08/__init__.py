"""Kafka 0.8.2's wire protocol: what the 0.8 listener speaks (docs/protocol.md).

    errors.py         0.8's error codes, tied to protocol/errors.py's exceptions
    types.py          the wire types every schema is declared with
    header.py         request header, response framing, api keys
    metadata.py       Metadata v0
    produce.py        Produce v0
    fetch.py          Fetch v0
    offsets.py        Offsets v0
    group_offsets.py  ConsumerMetadata v0, OffsetCommit v0-v1, OffsetFetch v0-v1
    apis.py           the table of the APIs served, and whole frames of them
    message.py        the 0.8 message (magic 0: crc, magic, attributes, key, value)
    message_set.py    message sets with logical offsets, compressed wrappers, and the
                      leader's assignment of offsets

Bytes only: no sockets, no storage.
"""
