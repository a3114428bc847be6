"""The schema ids registered for each topic's subject (docs/design.md §3.4), for the load checks.

The registry lives in ZooKeeper under its own connect string: `/subjects/<subject>/<version,
10 digits>` holds a schema id, and by convention a topic's subject is the topic's name. An
event of topic T must carry the id of one of T's versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable


def registered_ids(
    connect: str, subjects: Iterable[str], timeout: float = 10.0
) -> dict[str, set[int]]:
    """subject -> the ids of its versions (an empty set for a subject the registry lacks)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=connect, read_only=True)
    client.start(timeout=timeout)
    try:
        out: dict[str, set[int]] = {}
        for subject in subjects:
            ids: set[int] = set()
            try:
                versions = client.get_children(f"/subjects/{subject}")
            except NoNodeError:
                versions = []
            for version in versions:
                data, _ = client.get(f"/subjects/{subject}/{version}")
                ids.add(_schema_id(data, f"/subjects/{subject}/{version}"))
            out[subject] = ids
        return out
    finally:
        client.stop()
        client.close()


def _schema_id(data: bytes, where: str) -> int:
    text = data.decode("utf-8").strip()
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ValueError(f"registry node {where} does not hold a schema id: {text[:60]!r}") from err
    if isinstance(value, dict):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"registry node {where} does not hold a schema id: {text[:60]!r}")
    return value
