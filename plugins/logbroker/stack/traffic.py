"""Simulated member activity for the demo, `make up`, the chaos run and the pipeline tests.

    records = activity("page_views", hour_start_ms, n, seed)   # dicts of that topic's schema

Records for the three demo topics (`include/schemas/{page_views,searches,ad_clicks}.avsc`),
each with `header.timestamp` spread over the hour given, so that an audited producer counts
them in that hour's 10-minute windows; the rest of the header (server, producer_id, seq) is
the producer's. Deterministic for a seed, so a run can be repeated.

MESSAGE_FORMATS says which of them the demo's stack makes in Kafka 0.8's format (logical
offsets, keys; docs/protocol.md): ad_clicks, beside the other two in 0.7's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

HOUR_MS = 3_600_000
TOPICS = ("page_views", "searches", "ad_clicks")
MESSAGE_FORMATS = {"ad_clicks": "0.8"}  # topic -> its message.format; the others "0.7"

_PAGES = ("/feed", "/jobs", "/jobs/view/{}", "/in/{}", "/company/{}", "/messaging", "/search")
_AGENTS = ("Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)", "LinkedInApp/9.1 iOS")
_WORDS = ("data", "engineer", "python", "kafka", "remote", "senior", "manager", "sales", "spark")
_VERTICALS = ("PEOPLE", "JOBS", "COMPANIES", "POSTS")
_PLACEMENTS = ("feed", "sidebar", "jobs", "messaging")


def _page_view(rng: random.Random) -> dict[str, Any]:
    return {
        "member_id": rng.choice((0, rng.randrange(1, 300_000_000))),
        "session_id": f"{rng.getrandbits(64):016x}",
        "page": rng.choice(_PAGES).format(rng.randrange(10**6)),
        "referrer": rng.choice((None, "https://www.google.com/", "/feed")),
        "user_agent": rng.choice(_AGENTS),
        "duration_ms": rng.randrange(5, 900),
    }


def _search(rng: random.Random) -> dict[str, Any]:
    return {
        "member_id": rng.randrange(1, 300_000_000),
        "session_id": f"{rng.getrandbits(64):016x}",
        "query": " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 4))),
        "vertical": rng.choice(_VERTICALS),
        "results": rng.randrange(0, 5000),
        "page": rng.randrange(1, 4),
    }


def _ad_click(rng: random.Random) -> dict[str, Any]:
    return {
        "member_id": rng.randrange(1, 300_000_000),
        "session_id": f"{rng.getrandbits(64):016x}",
        "ad_id": f"ad-{rng.randrange(10**5)}",
        "campaign_id": f"c-{rng.randrange(500)}",
        "placement": rng.choice(_PLACEMENTS),
        "cost_micros": rng.randrange(100_000, 9_000_000),
    }


_MAKERS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "page_views": _page_view,
    "searches": _search,
    "ad_clicks": _ad_click,
}


def activity(
    topic: str, start_ms: int, count: int, seed: int, span_ms: int = HOUR_MS
) -> list[dict[str, Any]]:
    """`count` records of `topic`, event times spread evenly over [start_ms, start_ms+span_ms)."""
    try:
        make = _MAKERS[topic]
    except KeyError:
        raise ValueError(f"no simulated traffic for topic {topic!r}; topics: {TOPICS}") from None
    rng = random.Random(f"{topic}:{start_ms}:{seed}")
    step = span_ms / max(count, 1)
    return [{**make(rng), "header": {"timestamp": start_ms + int(i * step)}} for i in range(count)]
