"""What the parts of a group consumer share, and all they know of the consumer that owns them.

The `GroupConsumer` facade builds one `ConsumerContext` and hands it to its parts (membership,
coordinator, rebalancer, fetchers, streams): its settings, its counters, the deliver lock, and
the clock and sleep that every wait of the consumer goes through (tests pass fake ones). The
parts never see the facade itself.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...security.sasl import SaslClientConfig


@dataclass
class GroupConsumerStats:
    """What a group consumer did; read it any time (counters only grow)."""

    messages_delivered: int = 0
    rebalances: int = 0
    rebalance_attempts: int = 0
    rebalance_failures: int = 0
    commits: int = 0
    offsets_written: int = 0
    offset_resets: int = 0
    fetch_errors: int = 0
    sessions_reestablished: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


@dataclass(frozen=True)
class ConsumerContext:
    """The consumer's settings (see `GroupConsumer` for each), counters, lock and clock."""

    group_id: str
    consumer_id: str
    autocommit_enable: bool
    autocommit_interval_ms: int
    autooffset_reset: str
    consumer_timeout_ms: int
    fetch_size: int
    max_fetch_size: int
    queued_max_chunks: int
    rebalance_retries_max: int
    rebalance_backoff_ms: int
    fetcher_backoff_ms: int
    zk_session_timeout_ms: int
    socket_timeout_ms: int
    fetch_wait_max_ms: int
    shallow_iterator: bool = False  # hand out top-level (wrapper) messages as stored
    sasl: SaslClientConfig | None = None  # the fetchers log in so (security/sasl.py)
    tls: ssl.SSLContext | None = None  # security.protocol=SSL: brokers at their SSL listeners
    stats: GroupConsumerStats = field(default_factory=GroupConsumerStats)
    # Streams handing messages out vs. commits, offset resets and releases: a message is
    # either delivered and its offset counted as consumed, or neither.
    deliver_lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], float] = time.monotonic  # seconds, for deadlines and back-offs
    sleep: Callable[[float], object] = time.sleep
