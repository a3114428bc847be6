"""The audit's side in the library: counting events per topic and event-time window and
publishing the counts (docs/design.md §3.5). The reconciliation itself is spark_apps/jobs/audit.py.

    windows.py    10-minute windows aligned to the epoch: window_start, window_end
    counter.py    WindowCounter: counts per (topic, window), batch by batch, taken as deltas
    publisher.py  AuditPublisher: AuditCount deltas to `_audit` when a window closes (after a
                  grace), on flush and on close; `tier` says who counted (producer, mirror)
    producer.py   AuditedProducer: records -> headers filled -> Avro events -> sent -> counted

Whoever forwards events counts them the same way: the mirror makes an AuditPublisher with
tier="mirror" and calls `count(topic, timestamps)` (timestamps from serde.read_timestamp)
after each acknowledged batch.
"""

from .counter import WindowCounter
from .producer import AuditedProducer, PreparedBatch
from .publisher import AUDIT_SUBJECT, AUDIT_TOPIC, DEFAULT_GRACE_MS, AuditPublisher
from .windows import WINDOW_MS, window_end, window_start

__all__ = [
    "AUDIT_SUBJECT",
    "AUDIT_TOPIC",
    "DEFAULT_GRACE_MS",
    "WINDOW_MS",
    "AuditPublisher",
    "AuditedProducer",
    "PreparedBatch",
    "WindowCounter",
    "window_end",
    "window_start",
]
